//! Early compression (src/early.rs): a record is compressed as soon as a write fills it.
//! The crash-safety invariant: a compression result is only ever stored for the exact
//! bytes it was computed from. These tests modify records while their early compression
//! is queued or running, and check the bytes that reach the disk after a reopen.

mod records_common;
use records_common::*;
use squeezefs_device::doubles::SplitMix64;
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};
use std::time::{Duration, Instant};

fn opts(workers: usize) -> OpenOptions {
    OpenOptions { compression: "zstd:1".parse().unwrap(), workers, ..OpenOptions::default() }
}

/// Fill a record (starts its early compression), then change part of it after a varying
/// delay — while the job is queued, running or done — and sync: the committed record must
/// hold the modified bytes.
#[test]
fn record_modified_while_early_compression_runs_commits_new_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &opts(0)).unwrap();
    let ino = create(&e, "f");
    const RECS: usize = 48;
    let mut model = vec![0u8; RECS * RECORD];
    let mut rng = SplitMix64::new(7);
    for r in 0..RECS {
        let base = text(r as u64, RECORD);
        let off = r * RECORD;
        // fill the record in two writes, as a stream of writes would
        e.write(ino, off as u64, &base[..RECORD / 2]).unwrap();
        e.write(ino, (off + RECORD / 2) as u64, &base[RECORD / 2..]).unwrap();
        model[off..off + RECORD].copy_from_slice(&base);
        // 0..400 µs: before, during or after the job
        let spin = Duration::from_micros(rng.next_u64() % 400);
        let t0 = Instant::now();
        while t0.elapsed() < spin {
            std::hint::spin_loop();
        }
        let (a, len) = match r % 3 {
            0 => (0, RECORD),     // whole record replaced
            1 => (4096, 512),     // a small patch
            _ => (RECORD - 1, 1), // the last byte
        };
        let patch: Vec<u8> = if r % 2 == 0 { text(1000 + r as u64, len) } else { vec![0xA5; len] };
        e.write(ino, (off + a) as u64, &patch).unwrap();
        model[off + a..off + a + len].copy_from_slice(&patch);
        if r % 16 == 15 {
            e.sync().unwrap();
        }
    }
    sync_close_and_recheck(e, &pool, &opts(0), ino, &model);
}

/// Truncation and hole punching drop records whose early compression may still run.
#[test]
fn record_truncated_or_punched_while_early_compression_runs() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &opts(1)).unwrap();
    let ino = create(&e, "f");
    let data = text(3, 16 * RECORD);
    e.write(ino, 0, &data).unwrap();
    // punch records 2..4, truncate inside record 12 while their jobs are queued (1 worker)
    e.punch_hole(ino, 2 * RECORD as u64, 2 * RECORD as u64).unwrap();
    let size = 12 * RECORD + 1000;
    e.set_size(ino, size as u64).unwrap();
    let mut model = data[..size].to_vec();
    model[2 * RECORD..4 * RECORD].fill(0);
    check_file(&e, ino, &model);
    e.sync().unwrap();
    e.close().unwrap();
    drop(e);
    reopen_and_check(&pool, &opts(0), ino, &model);
}

/// Full records are compressed before any txg syncs; a finished record gives its raw
/// buffer back and is held compressed (counted once, at its logical size) until the txg
/// takes it, and reads of it return the bytes written.
#[test]
fn early_results_are_held_packed_before_the_txg_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let o = OpenOptions { txg_timeout: Duration::from_secs(600), ..opts(0) };
    let e = Engine::open(&pool, &o).unwrap();
    let ino = create(&e, "f");
    let data = text(5, 8 * RECORD);
    e.write(ino, 0, &data).unwrap();
    let t0 = Instant::now();
    while e.early_stats().packed_by_worker < 8 {
        assert!(t0.elapsed() < Duration::from_secs(30), "records were not packed: {:?}", e.early_stats());
        std::thread::sleep(Duration::from_millis(2));
    }
    let st = e.early_stats();
    assert_eq!(st.ready_bytes, data.len() as u64, "packed records wait for their txg: {st:?}");
    assert_eq!(e.dirty_bytes(), data.len() as u64, "a packed record counts its logical size once");
    check_file(&e, ino, &data);
    e.sync().unwrap();
    assert_eq!(e.dirty_bytes(), 0, "everything returned after the commit");
    assert_eq!(e.early_stats().ready_bytes, 0, "the txg took every packed record");
    check_file(&e, ino, &data);
    e.close().unwrap();
    drop(e);
    reopen_and_check(&pool, &opts(0), ino, &data);
}

/// Each record written once is compressed exactly once, whichever thread gets it (a worker,
/// the writer itself, or the sync stage for the partial last record), and an all-zero record
/// not at all: the engine's codec figures (`Engine::codec_stats`, which the throughput
/// benchmark reads) count the work done, and a record compressed twice would show here.
#[test]
fn each_record_written_once_is_compressed_once() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &opts(2)).unwrap();
    let ino = create(&e, "f");
    const FULL: usize = 40;
    const TAIL: usize = 10_000;
    let mut data = text(9, FULL * RECORD + TAIL);
    data[7 * RECORD..8 * RECORD].fill(0);
    for (k, chunk) in data.chunks(1 << 20).enumerate() {
        e.write(ino, (k << 20) as u64, chunk).unwrap();
    }
    e.sync().unwrap();
    check_file(&e, ino, &data);
    let s = e.codec_stats();
    assert_eq!(s.compress_calls, FULL as u64, "{FULL} full records less the zero one, plus the tail: {s:?}");
    assert_eq!(s.compress_src_bytes, ((FULL - 1) * RECORD + TAIL) as u64, "{s:?}");
    assert!(s.compress_cpu_ns > 0, "{s:?}");
    e.close().unwrap();
}
