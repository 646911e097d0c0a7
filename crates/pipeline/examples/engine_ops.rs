//! Benchmark driver for bench/engine-ops.sh: the engine's metadata operations, sector
//! packing and read path, each next to a reference measured in the same run.
//!
//! ```text
//! engine_ops --work DIR [--entries N] [FILE...]
//! ```
//! * namespace: N creates, one `meta_write` each (what an untar through FUSE costs), then N
//!   lookups, N getattrs and a full listing; reference: the host filesystem creating N empty
//!   files in one directory (`File::create`, no sync; the engine's creates are likewise
//!   in memory until the txg commit, timed separately as `commit_s`);
//! * packing: FILE... (or generated text) written with zstd:3 on a 512-byte-sector pool; the
//!   same extents rounded to 4 KiB (what btrfs' block granularity would store) as reference;
//! * read: sequential 1 MiB reads of that data after reopening (cold record cache);
//!   reference: decompressing the same stored records in memory on one thread.
//!
//! Prints one JSON object per measurement.

use squeezefs_codec::{Algorithm, WorkspaceConfig, Workspaces};
use squeezefs_pipeline::*;
use std::path::PathBuf;
use std::time::Instant;

fn attr(ino: Ino, kind: FileKind) -> InodeAttr {
    let t = Timestamp { secs: 1_700_000_000, nanos: 0 };
    InodeAttr { nlink: 1, generation: 1, ..InodeAttr::new(ino, kind, 0o644, 0, 0, t) }
}

fn generated_text(n: usize) -> Vec<u8> {
    let words = ["the ", "pool ", "record ", "sector ", "compress ", "device ", "queue ", "txg\n", "of ", "and "];
    let mut v = Vec::with_capacity(n);
    let mut x = 12345u64;
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
    }
    v.truncate(n);
    v
}

fn main() {
    let mut work = PathBuf::new();
    let mut entries = 20_000u64;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--work" => work = PathBuf::from(args.next().expect("--work DIR")),
            "--entries" => entries = args.next().and_then(|v| v.parse().ok()).expect("--entries N"),
            _ => files.push(PathBuf::from(a)),
        }
    }
    assert!(!work.as_os_str().is_empty(), "usage: engine_ops --work DIR [--entries N] [FILE...]");
    std::fs::create_dir_all(&work).unwrap();
    let pool = work.join("pool");
    let _ = std::fs::remove_dir_all(&pool);
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let opts = OpenOptions { compression: "zstd:3".parse().unwrap(), ..Default::default() };
    let e = Engine::open(&pool, &opts).unwrap();

    // namespace
    let t = Instant::now();
    for i in 0..entries {
        e.meta_write(|tx| {
            let ino = tx.alloc_ino()?;
            tx.put_inode(&attr(ino, FileKind::File))?;
            tx.dir_insert(ROOT_INO, format!("entry-{i:08}").as_bytes(), ino, FileKind::File)
        })
        .unwrap();
    }
    let create_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    e.sync().unwrap();
    let sync_s = t.elapsed().as_secs_f64();
    let host = work.join("host-dir");
    let _ = std::fs::remove_dir_all(&host);
    std::fs::create_dir_all(&host).unwrap();
    let t = Instant::now();
    for i in 0..entries {
        std::fs::File::create(host.join(format!("entry-{i:08}"))).unwrap();
    }
    let host_s = t.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&host).unwrap();
    let t = Instant::now();
    let mut x = 7u64;
    for _ in 0..entries {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let (ino, _) = e.lookup(ROOT_INO, format!("entry-{:08}", (x >> 33) % entries).as_bytes()).unwrap().unwrap();
        e.getattr(ino).unwrap();
    }
    let lookup_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let (mut after, mut n) = (0, 0);
    loop {
        let page = e.dir_list(ROOT_INO, after, 1024).unwrap();
        let Some(last) = page.last() else { break };
        after = last.cookie;
        n += page.len();
    }
    assert_eq!(n as u64, entries);
    let list_s = t.elapsed().as_secs_f64();
    println!(
        "{{\"bench\":\"namespace\",\"entries\":{entries},\"create_per_s\":{:.0},\"host_create_per_s\":{:.0},\"create_vs_host\":{:.2},\"commit_s\":{:.3},\"lookup_getattr_per_s\":{:.0},\"list_entries_per_s\":{:.0}}}",
        entries as f64 / create_s,
        entries as f64 / host_s,
        host_s / create_s,
        sync_s,
        entries as f64 / lookup_s,
        entries as f64 / list_s
    );

    // packing
    let data: Vec<u8> = if files.is_empty() {
        generated_text(64 << 20)
    } else {
        files.iter().flat_map(|f| std::fs::read(f).unwrap()).collect()
    };
    let f = e
        .meta_write(|tx| {
            let ino = tx.alloc_ino()?;
            tx.put_inode(&attr(ino, FileKind::File))?;
            tx.dir_insert(ROOT_INO, b"data", ino, FileKind::File)?;
            Ok(ino)
        })
        .unwrap();
    let t = Instant::now();
    for (i, c) in data.chunks(1 << 20).enumerate() {
        e.write(f, (i as u64) << 20, c).unwrap();
    }
    e.sync().unwrap();
    let write_s = t.elapsed().as_secs_f64();
    let ext = e.extents(f).unwrap();
    let stored: u64 = ext.iter().map(|(_, x)| x.psize()).sum();
    let packed: u64 = ext.iter().map(|(_, x)| x.psize().div_ceil(512) * 512).sum();
    let rounded4k: u64 = ext.iter().map(|(_, x)| x.psize().div_ceil(4096) * 4096).sum();
    println!(
        "{{\"bench\":\"packing\",\"logical\":{},\"stored\":{stored},\"disk_512\":{packed},\"disk_4k\":{rounded4k},\"ratio_512\":{:.3},\"ratio_4k\":{:.3},\"gain\":{:.3},\"write_mb_s\":{:.1}}}",
        data.len(),
        data.len() as f64 / packed as f64,
        data.len() as f64 / rounded4k as f64,
        rounded4k as f64 / packed as f64,
        data.len() as f64 / write_s / 1e6
    );
    e.close().unwrap();
    drop(e);

    // read (cold record cache)
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    let mut off = 0u64;
    loop {
        let n = e.read(f, off, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        assert!(buf[..n] == data[off as usize..off as usize + n]);
        off += n as u64;
    }
    let read_s = t.elapsed().as_secs_f64();
    // reference: one thread decompressing the same stored records from memory
    let ws = Workspaces::new(WorkspaceConfig::default());
    let dev = std::fs::read(pool.join(DEFAULT_DEVICE_FILE)).unwrap();
    let mut out = vec![0u8; 128 << 10];
    let t = Instant::now();
    for (_, x) in &ext {
        if let StoredRecord::Device(d) = &x.stored {
            let src = &dev[d.offset as usize..d.offset as usize + d.psize as usize];
            match Algorithm::from_id(x.alg).unwrap() {
                Algorithm::None => out[..src.len()].copy_from_slice(src),
                alg => {
                    ws.decompress(alg, src, &mut out[..x.logical as usize]).unwrap();
                }
            }
        }
    }
    let dec_s = t.elapsed().as_secs_f64();
    println!(
        "{{\"bench\":\"read\",\"bytes\":{},\"engine_read_mb_s\":{:.1},\"one_thread_decompress_mb_s\":{:.1},\"read_vs_one_thread\":{:.2}}}",
        data.len(),
        data.len() as f64 / read_s / 1e6,
        data.len() as f64 / dec_s / 1e6,
        dec_s / read_s
    );
    e.close().unwrap();
}
