//! Benchmark driver for bench/meta-copies-ab.sh: what the second metadata copy costs.
//!
//! ```text
//! meta_copies_cost --work DIR --copies 1|2 [--files N]
//! ```
//! * `fsync`: N small files (source-like text, 200 B to 8 KiB), each created, written and
//!   fsynced on its own (a txg commit each, as an editor or a mail spool does): the mean and
//!   the 99th percentile of the fsync latency;
//! * `commit`: N more files created and written, then one sync, repeated in 10 batches (an
//!   extract: many files per commit): files per second.
//!
//! Prints one JSON object.

use squeezefs_pipeline::*;
use std::path::PathBuf;
use std::time::Instant;

fn attr(ino: Ino) -> InodeAttr {
    let t = Timestamp { secs: 1_700_000_000, nanos: 0 };
    InodeAttr { nlink: 1, generation: 1, ..InodeAttr::new(ino, FileKind::File, 0o644, 0, 0, t) }
}

fn text(i: usize) -> Vec<u8> {
    let n = 200 + (i * 7919) % 8000;
    let mut v = Vec::with_capacity(n + 40);
    let mut k = i;
    while v.len() < n {
        k = k.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.extend(format!("\tstatic int x{} = {};\n", (k >> 40) % 1000, (k >> 20) % 100000).as_bytes());
    }
    v.truncate(n);
    v
}

fn create(e: &Engine, name: &str) -> Ino {
    e.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        tx.put_inode(&attr(ino))?;
        tx.dir_insert(ROOT_INO, name.as_bytes(), ino, FileKind::File)?;
        Ok(ino)
    })
    .expect("create")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |k: &str| args.iter().position(|a| a == k).map(|i| args[i + 1].clone());
    let work = PathBuf::from(get("--work").expect("--work DIR"));
    let copies: u8 = get("--copies").expect("--copies 1|2").parse().expect("1 or 2");
    let files: usize = get("--files").map_or(400, |v| v.parse().expect("a number"));
    let pool = work.join("pool");
    let _ = std::fs::remove_dir_all(&pool);
    Engine::mkfs(&pool, &MkfsOptions { meta_copies: Some(copies), ..Default::default() }).expect("mkfs");
    let e = Engine::open(&pool, &OpenOptions { compression: "zstd:1".parse().unwrap(), ..Default::default() })
        .expect("open");
    let mut lat = Vec::with_capacity(files);
    for i in 0..files {
        let ino = create(&e, &format!("f{i}"));
        e.write(ino, 0, &text(i)).expect("write");
        let t = Instant::now();
        e.fsync(ino).expect("fsync");
        lat.push(t.elapsed().as_secs_f64());
    }
    lat.sort_by(f64::total_cmp);
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    let p99 = lat[(lat.len() * 99 / 100).min(lat.len() - 1)];
    let t = Instant::now();
    for b in 0..10 {
        for i in 0..files {
            let ino = create(&e, &format!("b{b}-{i}"));
            e.write(ino, 0, &text(i + b)).expect("write");
        }
        e.sync().expect("sync");
    }
    let per_s = (10 * files) as f64 / t.elapsed().as_secs_f64();
    e.close().expect("close");
    println!(
        "{{\"copies\": {copies}, \"fsync_mean_ms\": {:.3}, \"fsync_p99_ms\": {:.3}, \"commit_files_per_s\": {per_s:.0}}}",
        mean * 1e3,
        p99 * 1e3
    );
}
