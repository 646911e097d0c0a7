//! Shared helpers of the record-level engine tests (early_compress.rs, packed_records.rs):
//! a file in the root directory, compressible test bytes, and checks of a file's whole
//! content against a model — live, and after a reopen with fsck.
#![allow(dead_code)]
use squeezefs_device::doubles::SplitMix64;
use squeezefs_pipeline::{Engine, FileKind, InodeAttr, OpenOptions, Timestamp, ROOT_INO};
use std::path::Path;

pub const RECORD: usize = 128 * 1024;

pub fn create(e: &Engine, name: &str) -> u64 {
    e.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        tx.put_inode(&InodeAttr::new(ino, FileKind::File, 0o644, 0, 0, Timestamp { secs: 0, nanos: 0 }))?;
        tx.dir_insert(ROOT_INO, name.as_bytes(), ino, FileKind::File)?;
        Ok(ino)
    })
    .unwrap()
}

/// Compressible bytes that differ per `seed` (text-like).
pub fn text(seed: u64, len: usize) -> Vec<u8> {
    let words: [&[u8]; 8] = [b"squeeze ", b"record ", b"txg ", b"extent ", b"zstd ", b"sector ", b"packed ", b"dirty "];
    let mut rng = SplitMix64::new(seed);
    let mut v = Vec::with_capacity(len + 16);
    while v.len() < len {
        v.extend_from_slice(words[(rng.next_u64() % 8) as usize]);
        if rng.next_u64().is_multiple_of(16) {
            v.extend_from_slice(format!("{} ", rng.next_u64() % 100_000).as_bytes());
        }
    }
    v.truncate(len);
    v
}

/// The file holds exactly `want`: its size, every record, and unaligned reads across
/// record boundaries.
pub fn check_file(e: &Engine, ino: u64, want: &[u8]) {
    assert_eq!(e.getattr(ino).unwrap().size, want.len() as u64, "size");
    let mut got = vec![0xEEu8; want.len()];
    let n = e.read(ino, 0, &mut got).unwrap();
    assert_eq!(n, want.len());
    for (r, (g, w)) in got.chunks(RECORD).zip(want.chunks(RECORD)).enumerate() {
        assert!(g == w, "record {r} differs from what was written last");
    }
    let mut rng = SplitMix64::new(want.len() as u64);
    for _ in 0..16.min(want.len()) {
        let off = rng.below(want.len() as u64) as usize;
        let len = (rng.below(3 * RECORD as u64) as usize).min(want.len() - off);
        let mut got = vec![0xEEu8; len];
        assert_eq!(e.read(ino, off as u64, &mut got).unwrap(), len);
        assert!(got[..] == want[off..off + len], "read of {len} bytes at {off}");
    }
}

pub fn reopen_and_check(pool: &Path, opts: &OpenOptions, ino: u64, want: &[u8]) {
    let e = Engine::open(pool, opts).unwrap();
    check_file(&e, ino, want);
    let report = e.fsck().unwrap();
    assert!(report.is_clean(), "fsck: {report:?}");
    e.close().unwrap();
}

/// Check the live file, sync, check again, close, and check the reopened pool.
/// `e` is the engine or a shared handle to it; it is dropped before the reopen.
pub fn sync_close_and_recheck(
    e: impl std::ops::Deref<Target = Engine>,
    pool: &Path,
    opts: &OpenOptions,
    ino: u64,
    want: &[u8],
) {
    check_file(&e, ino, want);
    e.sync().unwrap();
    check_file(&e, ino, want);
    e.close().unwrap();
    drop(e);
    reopen_and_check(pool, opts, ino, want);
}
