//! Benchmark driver: writes into a pool whose free space lies in many small pieces.
//!
//! ```text
//! fragmented_writes --work DIR [--fragments N] [--mib M] [--write-size BYTES]
//! ```
//! A fixed device file is filled with 2N one-KiB files (raw, packed back to back), every
//! other one is deleted (N free pieces of 1 KiB between live records), then one file of M MiB
//! is written in writes of BYTES and synced. Prints the wall time of that write and, as the
//! reference in the same run, of the same write into a fresh pool with no fragments.
//! Admission (once per write) and placement (once per record) must not walk every free
//! piece, or their cost grows with N.

use squeezefs_pipeline::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn create(e: &Engine, name: &str) -> Ino {
    e.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        let t = Timestamp { secs: 1_700_000_000, nanos: 0 };
        tx.put_inode(&InodeAttr::new(ino, FileKind::File, 0o644, 0, 0, t))?;
        tx.dir_insert(ROOT_INO, name.as_bytes(), ino, FileKind::File)?;
        Ok(ino)
    })
    .unwrap()
}

fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Seconds to write `data` in pieces of `piece` into a new file, then sync.
fn timed_write(e: &Engine, data: &[u8], piece: usize) -> f64 {
    let ino = create(e, "big");
    let t = Instant::now();
    for (k, chunk) in data.chunks(piece).enumerate() {
        e.write(ino, (k * piece) as u64, chunk).unwrap();
    }
    e.sync().unwrap();
    t.elapsed().as_secs_f64()
}

fn pool(dir: &Path, name: &str, capacity: u64) -> std::sync::Arc<Engine> {
    let p = dir.join(name);
    let _ = std::fs::remove_dir_all(&p);
    let mkfs = MkfsOptions { device_capacity: Some(capacity), max_inline: Some(0), ..MkfsOptions::default() };
    Engine::mkfs(&p, &mkfs).unwrap();
    let opts = OpenOptions { compression: "none".parse().unwrap(), ..OpenOptions::default() };
    Engine::open(&p, &opts).unwrap()
}

fn main() {
    let mut work = PathBuf::new();
    let (mut fragments, mut mib, mut piece) = (50_000usize, 64usize, 4096usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || args.next().and_then(|v| v.parse::<usize>().ok()).expect("a number");
        match a.as_str() {
            "--work" => work = PathBuf::from(args.next().expect("--work DIR")),
            "--fragments" => fragments = num(),
            "--mib" => mib = num(),
            "--write-size" => piece = num(),
            other => panic!("unknown option {other}"),
        }
    }
    assert!(
        !work.as_os_str().is_empty(),
        "usage: fragmented_writes --work DIR [--fragments N] [--mib M] [--write-size BYTES]"
    );
    std::fs::create_dir_all(&work).unwrap();
    let capacity = (2 * fragments as u64 * 1024) + (mib as u64 + 16) * (1 << 20);
    let data = noise(1, mib << 20);

    let e = pool(&work, "fragmented", capacity);
    let small = noise(2, 1024);
    let mut names = Vec::with_capacity(2 * fragments);
    for k in 0..2 * fragments {
        let name = format!("s{k}");
        let ino = create(&e, &name);
        e.write(ino, 0, &small).unwrap();
        names.push(name);
    }
    e.sync().unwrap();
    for name in names.iter().step_by(2) {
        e.meta_write(|tx| {
            let (ino, _) = tx.dir_remove(ROOT_INO, name.as_bytes())?;
            tx.delete_inode(ino)
        })
        .unwrap();
    }
    e.sync().unwrap();
    let fragmented = timed_write(&e, &data, piece);
    e.close().unwrap();

    let e = pool(&work, "fresh", capacity);
    let fresh = timed_write(&e, &data, piece);
    e.close().unwrap();
    let mb = (mib << 20) as f64 / 1e6;
    println!(
        "{{\"fragments\":{fragments},\"mib\":{mib},\"write_size\":{piece},\"fragmented_s\":{fragmented:.4},\"fresh_s\":{fresh:.4},\"fragmented_mb_s\":{:.1},\"fresh_mb_s\":{:.1},\"slowdown\":{:.2}}}",
        mb / fragmented,
        mb / fresh,
        fragmented / fresh
    );
    let _ = std::fs::remove_dir_all(work.join("fragmented"));
    let _ = std::fs::remove_dir_all(work.join("fresh"));
}
