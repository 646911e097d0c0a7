//! Dirty records held compressed (src/dirty.rs PACKED): a full record whose early
//! compression finished while it was in the open layer, or that a writer compressed from
//! its own bytes (caller-runs, src/early.rs). Every operation on such a record must see the
//! bytes written: reads (open and syncing layer), partial overwrites, truncation, hole
//! punching, and fsync durability.

mod records_common;
use records_common::*;
use squeezefs_device::doubles::{MemDevice, SplitMix64, Throttled};
use squeezefs_device::Device;
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn opts(workers: usize) -> OpenOptions {
    OpenOptions {
        compression: "zstd:1".parse().unwrap(),
        workers,
        txg_timeout: Duration::from_secs(600),
        ..OpenOptions::default()
    }
}

fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    SplitMix64::new(seed).fill(&mut v);
    v
}

/// Wait until workers packed `n` records since open.
fn wait_packed(e: &Engine, n: u64) {
    let t0 = Instant::now();
    while e.early_stats().packed_by_worker < n {
        assert!(t0.elapsed() < Duration::from_secs(30), "records were not packed: {:?}", e.early_stats());
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn new_pool() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    (dir, pool)
}

/// Overwrites of records held packed: small patches, patches across a record boundary,
/// the last byte, a whole record, and an append past the end.
#[test]
fn partial_overwrite_of_packed_records_keeps_the_rest() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &opts(0)).unwrap();
    let ino = create(&e, "f");
    let mut model = text(1, 8 * RECORD);
    e.write(ino, 0, &model).unwrap();
    wait_packed(&e, 8);
    let patches: [(usize, Vec<u8>); 5] = [
        (2 * RECORD + 4096, text(2, 512)),
        (5 * RECORD - 300, noise(3, 700)),
        (8 * RECORD - 1, vec![0x5A]),
        (6 * RECORD, text(4, RECORD)),
        (8 * RECORD - 10, text(5, RECORD)),
    ];
    for (off, p) in &patches {
        e.write(ino, *off as u64, p).unwrap();
        if model.len() < off + p.len() {
            model.resize(off + p.len(), 0);
        }
        model[*off..off + p.len()].copy_from_slice(p);
        check_file(&e, ino, &model);
    }
    e.sync().unwrap();
    check_file(&e, ino, &model);
    e.close().unwrap();
    drop(e);
    reopen_and_check(&pool, &opts(0), ino, &model);
}

/// Truncation into and below packed records, hole punching inside one and over whole
/// ones, then growing the file again.
#[test]
fn truncate_and_punch_of_packed_records() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &opts(0)).unwrap();
    let ino = create(&e, "f");
    let mut model = text(11, 16 * RECORD);
    e.write(ino, 0, &model).unwrap();
    wait_packed(&e, 16);
    // inside record 1 (edge: the packed record is decoded and zeroed in part)
    e.punch_hole(ino, RECORD as u64 + 1000, 5000).unwrap();
    model[RECORD + 1000..RECORD + 6000].fill(0);
    // records 3 and 4 whole, plus the start of 5
    e.punch_hole(ino, 3 * RECORD as u64, 2 * RECORD as u64 + 77).unwrap();
    model[3 * RECORD..5 * RECORD + 77].fill(0);
    check_file(&e, ino, &model);
    // into record 10, then below record 12 again with zeros
    let size = 10 * RECORD + 12_345;
    e.set_size(ino, size as u64).unwrap();
    model.truncate(size);
    check_file(&e, ino, &model);
    e.set_size(ino, 12 * RECORD as u64).unwrap();
    model.resize(12 * RECORD, 0);
    sync_close_and_recheck(e, &pool, &opts(0), ino, &model);
}

/// What fsync acknowledged survives a crash (the engine dropped without close) although
/// its records were held only compressed in memory before the fsync.
#[test]
fn packed_records_are_durable_after_fsync_and_a_crash() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &opts(0)).unwrap();
    let ino = create(&e, "f");
    let model = text(21, 12 * RECORD);
    e.write(ino, 0, &model).unwrap();
    wait_packed(&e, 12);
    e.fsync(ino).unwrap();
    // more records after the fsync: they may be lost, the acknowledged ones not
    e.write(ino, model.len() as u64, &text(22, 4 * RECORD)).unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts(0)).unwrap();
    let mut got = vec![0u8; model.len()];
    assert_eq!(e.read(ino, 0, &mut got).unwrap(), model.len());
    assert!(got == model, "fsynced packed records lost or changed by the crash");
    assert!(e.fsck().unwrap().is_clean());
    e.close().unwrap();
}

/// Records held packed in the syncing layer (their txg writes to a slow device) are read
/// and partly overwritten from there.
#[test]
fn packed_records_read_and_overwritten_while_their_txg_writes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    let slow = Arc::new(Throttled::new(MemDevice::new("slow"), 0));
    let dev: Arc<dyn Device> = slow.clone();
    Engine::mkfs_with_devices(&pool, vec![dev.clone()], &MkfsOptions::default()).unwrap();
    let e = Engine::open_with_devices(&pool, vec![dev.clone()], &opts(0)).unwrap();
    let ino = create(&e, "f");
    let mut model = text(31, 8 * RECORD);
    // the records' device writes take ~1 s: those placed early (early_place.rs) too, and
    // the txg waits for them
    slow.set_rate(64 << 10);
    e.write(ino, 0, &model).unwrap();
    wait_packed(&e, 8);
    let syncer = {
        let e = e.clone();
        std::thread::spawn(move || e.sync().unwrap())
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(!syncer.is_finished(), "the txg finished before the reads (device too fast)");
    check_file(&e, ino, &model);
    let patch = noise(32, 3000);
    e.write(ino, 3 * RECORD as u64 - 1000, &patch).unwrap();
    model[3 * RECORD - 1000..3 * RECORD + 2000].copy_from_slice(&patch);
    check_file(&e, ino, &model);
    syncer.join().unwrap();
    slow.set_rate(0);
    e.sync().unwrap();
    check_file(&e, ino, &model);
    assert!(e.fsck().unwrap().is_clean());
    e.close().unwrap();
    drop(e);
    let e = Engine::open_with_devices(&pool, vec![dev], &opts(0)).unwrap();
    check_file(&e, ino, &model);
    e.close().unwrap();
}

/// A writer far ahead of one worker compresses whole records itself (caller-runs):
/// compressible records go in packed, incompressible ones raw and zero records as holes,
/// each compressed once; the file reads back and survives a reopen.
#[test]
fn caller_runs_stores_whole_records_the_writer_compressed() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &opts(1)).unwrap();
    let ino = create(&e, "f");
    const RECS: usize = 160;
    let mut model = Vec::with_capacity(RECS * RECORD);
    for r in 0..RECS {
        match r % 10 {
            7 => model.extend(noise(r as u64, RECORD)),
            9 => model.extend(std::iter::repeat_n(0u8, RECORD)),
            _ => model.extend(text(100 + r as u64, RECORD)),
        }
    }
    for (k, chunk) in model.chunks(1 << 20).enumerate() {
        e.write(ino, (k << 20) as u64, chunk).unwrap();
    }
    let st = e.early_stats();
    assert!(st.packed_by_caller > 0, "the writer never compressed a record itself: {st:?}");
    check_file(&e, ino, &model);
    // overwrite parts of records the writer packed
    for r in [40usize, 41, 150] {
        let off = r * RECORD + 333;
        let p = text(900 + r as u64, 2000);
        e.write(ino, off as u64, &p).unwrap();
        model[off..off + p.len()].copy_from_slice(&p);
    }
    e.sync().unwrap();
    check_file(&e, ino, &model);
    let exts = e.extents(ino).unwrap();
    for (off, ext) in &exts {
        let r = *off as usize / RECORD;
        assert_ne!(r % 10, 9, "zero record {r} stored");
        if r % 10 == 7 {
            assert_eq!(ext.alg, 0, "incompressible record {r} stored compressed");
        } else {
            assert_ne!(ext.alg, 0, "compressible record {r} stored raw");
        }
    }
    assert_eq!(exts.len(), RECS - RECS / 10, "one extent per non-zero record");
    e.close().unwrap();
    drop(e);
    reopen_and_check(&pool, &opts(0), ino, &model);
}

/// Writers racing the workers that pack their records: three threads own disjoint regions
/// of one file and overwrite them (whole 1 MiB spans, which may go through caller-runs, and
/// small patches into records that may be packed, queued or being packed right then),
/// reading their region back after every change; txgs close meanwhile. Every read sees the
/// thread's own last writes, and the file survives a reopen.
#[test]
fn writers_and_readers_racing_record_packing_see_their_writes() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &opts(1)).unwrap();
    let ino = create(&e, "f");
    const REGION: usize = 24 * RECORD;
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3u64)
            .map(|t| {
                let e = &e;
                s.spawn(move || {
                    let base = t as usize * REGION;
                    let mut model = text(500 + t, REGION);
                    e.write(ino, base as u64, &model).unwrap();
                    let mut rng = SplitMix64::new(77 + t);
                    for step in 0..60u64 {
                        let (off, p) = if step % 3 == 0 {
                            let span = (rng.below(REGION as u64 / (1 << 20)) as usize) << 20;
                            (span, text(1000 * t + step, 1 << 20))
                        } else {
                            let off = rng.below(REGION as u64 - 5000) as usize;
                            (off, noise(2000 * t + step, 1 + rng.below(4999) as usize))
                        };
                        e.write(ino, (base + off) as u64, &p).unwrap();
                        model[off..off + p.len()].copy_from_slice(&p);
                        let mut got = vec![0u8; REGION];
                        assert_eq!(e.read(ino, base as u64, &mut got).unwrap(), REGION);
                        assert!(got == model, "thread {t} step {step}: region differs from its writes");
                        if step % 20 == 19 {
                            e.sync().unwrap();
                        }
                    }
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want: Vec<u8> = models.concat();
    e.sync().unwrap();
    check_file(&e, ino, &want);
    assert!(e.fsck().unwrap().is_clean());
    e.close().unwrap();
    drop(e);
    reopen_and_check(&pool, &opts(0), ino, &want);
}
