//! The decoded-record cache under sequential and random readers.
mod common;
use common::*;
use squeezefs_pipeline::*;

const REC: u64 = 128 * 1024;

fn pool_with_records(records: u64) -> (tempfile::TempDir, std::path::PathBuf, OpenOptions, Ino, Vec<u8>) {
    let d = tempfile::tempdir().unwrap();
    let opts = zstd_read_opts(64 << 20);
    let data: Vec<u8> = (0..records * REC).map(|i| (i / 5 % 241) as u8 ^ (i / REC) as u8).collect();
    let (pool, ino) = pool_with_file(d.path(), &opts, "f", &data);
    (d, pool, opts, ino, data)
}

/// A cold sequential read filled the cache with records the reader had finished (the kernel
/// caches what it read), each in a freshly mapped buffer: page faults were 17% of the
/// daemon's CPU in a cold read. Finished records now leave the cache as the reader passes.
#[test]
fn sequential_reads_drop_finished_records_from_the_cache() {
    let records = 64;
    let (_d, pool, opts, ino, data) = pool_with_records(records);
    let e = Engine::open(&pool, &opts).unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut off = 0u64;
    let mut peak = 0;
    while off < data.len() as u64 {
        let n = e.read(ino, off, &mut buf).unwrap();
        assert_eq!(&buf[..n], &data[off as usize..off as usize + n], "bytes at {off}");
        off += n as u64;
        peak = peak.max(e.record_cache_bytes());
    }
    // what stays: the prefetches ahead of the reader and the records of the reads in
    // progress (with slack for workers finishing late, as in a debug build), never the
    // records behind it — without drop-behind, all 64 stay
    let ahead = (PREFETCH_RECORDS + 8) * REC;
    assert!(peak as u64 <= ahead, "cache peaked at {peak} bytes (read-ahead allows {ahead})");
    assert!((e.record_cache_bytes() as u64) < ahead);
}

/// Random small reads keep their records: the next read of the same record is a cache hit.
#[test]
fn random_reads_keep_their_records() {
    let records = 16;
    let (_d, pool, opts, ino, data) = pool_with_records(records);
    let e = Engine::open(&pool, &opts).unwrap();
    let mut buf = vec![0u8; 4096];
    for r in (0..records).rev() {
        let off = r * REC + 1000;
        let n = e.read(ino, off, &mut buf).unwrap();
        assert_eq!(&buf[..n], &data[off as usize..off as usize + n]);
    }
    assert_eq!(e.record_cache_bytes() as u64, records * REC, "every record read stays cached");
}
