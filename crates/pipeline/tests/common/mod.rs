#![allow(dead_code)]
use squeezefs_pipeline::*;
use std::path::Path;
use std::sync::Arc;

pub fn now() -> Timestamp {
    Timestamp { secs: 1_700_000_000, nanos: 0 }
}

pub fn attr(ino: Ino, kind: FileKind, nlink: u32) -> InodeAttr {
    InodeAttr { nlink, generation: 1, ..InodeAttr::new(ino, kind, 0o644, 0, 0, now()) }
}

/// Create a regular file `name` in the root; returns its inode.
pub fn create(e: &Engine, name: &str) -> Ino {
    e.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        tx.put_inode(&attr(ino, FileKind::File, 1))?;
        tx.dir_insert(ROOT_INO, name.as_bytes(), ino, FileKind::File)?;
        Ok(ino)
    })
    .unwrap()
}

pub fn fast_opts() -> OpenOptions {
    OpenOptions { txg_timeout: std::time::Duration::from_millis(200), ..Default::default() }
}

/// Options of a pool compressing with zstd:1 on 2 workers, with a record cache of
/// `record_cache_bytes` (the read-path tests).
pub fn zstd_read_opts(record_cache_bytes: usize) -> OpenOptions {
    OpenOptions {
        compression: "zstd:1".parse::<squeezefs_codec::Spec>().unwrap(),
        workers: 2,
        record_cache_bytes,
        ..fast_opts()
    }
}

/// A fresh pool in `dir` holding one file `name` with `data` (written in 1 MiB pieces),
/// closed so that its records are on the device; returns the pool path and the inode.
pub fn pool_with_file(dir: &Path, opts: &OpenOptions, name: &str, data: &[u8]) -> (std::path::PathBuf, Ino) {
    let pool = dir.join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, opts).unwrap();
    let ino = create(&e, name);
    for (k, chunk) in data.chunks(1 << 20).enumerate() {
        e.write(ino, (k << 20) as u64, chunk).unwrap();
    }
    e.close().unwrap();
    (pool, ino)
}

pub fn new_pool(dir: &Path) -> Arc<Engine> {
    Engine::mkfs(dir, &MkfsOptions::default()).unwrap();
    Engine::open(dir, &fast_opts()).unwrap()
}

pub fn read_all(e: &Engine, ino: Ino) -> Vec<u8> {
    let size = e.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    let mut done = 0;
    while done < size {
        let n = e.read(ino, done as u64, &mut buf[done..]).unwrap();
        assert!(n > 0, "short read at {done} of {size}");
        done += n;
    }
    buf
}

/// Deterministic pseudo-random bytes (incompressible).
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
