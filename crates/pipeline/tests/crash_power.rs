//! Crash safety under power loss: the engine runs on a real device file armed with
//! `squeezefs_device::power_loss`; at a random moment the "power" is cut (every further
//! device write and sync fails), and the device file is rewritten as a power loss would
//! leave it: writes since the last successful `fdatasync` dropped, kept, or torn at sector
//! granularity (seeded, in the style of redb's crash_consistency tests). The pool is then
//! reopened and checked like after a SIGKILL (`crash_common`): every byte acknowledged by
//! fsync intact, nothing garbage, scrub and fsck clean.
//!
//! Unlike SIGKILL (where the kernel keeps every written page), this catches a commit that
//! references data not yet synced to the device. The redb metadata file is not cut (redb's
//! own crash safety covers it).
//!
//! Rounds: `SQUEEZEFS_POWER_CUTS` (default 40). Seed: `SQUEEZEFS_CRASH_SEED`.

mod crash_common;

use crash_common::*;
use squeezefs_device::doubles::{CrashMode, SplitMix64};
use squeezefs_device::power_loss;
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions, ROOT_INO};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn open_options() -> OpenOptions {
    OpenOptions {
        compression: "zstd:1".parse().expect("zstd:1 is a valid spec"),
        txg_timeout: Duration::from_millis(50),
        max_dirty_bytes: 4 * 1024 * 1024,
        workers: 2,
        ..OpenOptions::default()
    }
}

/// Random writes and fsyncs until an engine call fails (the power is gone) or `stop`.
fn workload(engine: &Engine, seed: u64, log: &Mutex<Vec<LogRec>>, stop: &AtomicBool) {
    let rec = |r: LogRec| log.lock().unwrap().push(r);
    let mut rng = SplitMix64::new(seed);
    let mut inos: Vec<Option<u64>> = Vec::new();
    for i in 0..FILES {
        match engine.lookup(ROOT_INO, &file_name(i)) {
            Ok(found) => inos.push(found.map(|(ino, _)| ino)),
            Err(_) => return,
        }
    }
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let file = rng.below(FILES as u64) as usize;
        let ino = match inos[file] {
            Some(ino) => ino,
            None => match create_file(engine, &file_name(file)) {
                Ok(ino) => {
                    rec(LogRec::Create(file));
                    inos[file] = Some(ino);
                    ino
                }
                Err(_) => return,
            },
        };
        let off = rng.below(MAX_OFFSET);
        let len = match rng.below(10) {
            0..=3 => 1 + rng.below(4096),
            4..=7 => 4096 + rng.below(124 * 1024),
            _ => 128 * 1024 + rng.below(384 * 1024),
        };
        let wseed = seed.wrapping_mul(1_000_003).wrapping_add(n);
        rec(LogRec::Write { file, off, len, seed: wseed });
        if engine.write(ino, off, &content(wseed, len)).is_err() {
            return;
        }
        match rng.below(20) {
            0..=4 => match engine.fsync(ino) {
                Ok(()) => rec(LogRec::Fsync(file)),
                Err(_) => return,
            },
            5 => match engine.sync() {
                Ok(()) => rec(LogRec::SyncAll),
                Err(_) => return,
            },
            _ => {}
        }
    }
}

#[test]
fn power_cut_at_random_points_keeps_acknowledged_data() {
    let rounds = std::env::var("SQUEEZEFS_POWER_CUTS").ok().and_then(|v| v.parse().ok()).unwrap_or(40u64);
    let seed = std::env::var("SQUEEZEFS_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("power-cut test: {rounds} cuts, SQUEEZEFS_CRASH_SEED={seed}");
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).expect("mkfs");
    let dev_path = pool.join("data.0");
    assert!(dev_path.exists(), "expected the pool's device file at {}", dev_path.display());
    let mut rng = SplitMix64::new(seed);
    let mut baseline: Vec<Option<Vec<u8>>> = vec![None; FILES];
    let (mut total_writes, mut total_syncs, mut total_pending) = (0u64, 0u64, 0usize);
    let t0 = Instant::now();
    for round in 0..rounds {
        let power = power_loss::arm(&dev_path, 512).expect("arm");
        let engine = Engine::open(&pool, &open_options()).expect("open");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let child_seed = rng.next_u64();
        let worker = {
            let (engine, log, stop) = (engine.clone(), log.clone(), stop.clone());
            std::thread::spawn(move || workload(&engine, child_seed, &log, &stop))
        };
        // Half the cuts after a random time, half after a random number of device writes
        // (which lands them between the writes of one txg, or between data and commit).
        if rng.below(2) == 0 {
            std::thread::sleep(Duration::from_micros(rng.below(200_000)));
            power.cut_now();
        } else {
            power.cut_after_writes(1 + rng.below(8));
            let t = Instant::now();
            while !power.is_cut() && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            power.cut_now();
        }
        let (writes, syncs) = power.counts();
        total_writes += writes;
        total_syncs += syncs;
        total_pending += power.pending_writes();
        // The workload stops at its first failed call; stop it anyway after a while in case
        // it only touches the dirty cache.
        let t = Instant::now();
        while !worker.is_finished() && t.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(2));
        }
        stop.store(true, Ordering::Relaxed);
        worker.join().expect("workload thread");
        let _ = engine.close(); // fails: the pool is suspended without power
        drop(engine);
        let mode = match rng.below(6) {
            0 => CrashMode::DropUnsynced,
            1 => CrashMode::KeepUnsynced,
            _ => CrashMode::Random { seed: rng.next_u64() },
        };
        power.apply_crash(mode).expect("apply crash image");
        power_loss::disarm(&dev_path);

        let log = log.lock().unwrap().clone();
        let exp = expectations(&baseline, &log);
        let what = format!("cut {round} (seed {seed}, {mode:?})");
        let engine = Engine::open(&pool, &open_options())
            .unwrap_or_else(|e| panic!("{what}: reopening after the power cut failed: {e}"));
        let actual = read_files(&engine).unwrap_or_else(|e| panic!("{what}: reading back failed: {e}"));
        for (i, (e, a)) in exp.iter().zip(&actual).enumerate() {
            if let Err(msg) = check_file(&format!("f{i}"), e, a.as_deref()) {
                panic!("{what}: {msg}");
            }
        }
        let scrub = engine.scrub(&|_, _| {}).unwrap_or_else(|e| panic!("{what}: scrub failed: {e}"));
        assert!(scrub.is_clean(), "{what}: scrub found damage: {:?}", scrub.damaged);
        let fsck = engine.fsck().unwrap_or_else(|e| panic!("{what}: fsck failed: {e}"));
        assert!(fsck.is_clean(), "{what}: fsck problems: {:?}", fsck.problems);
        engine.close().expect("close after check");
        drop(engine);
        baseline = actual;
    }
    eprintln!(
        "power-cut test: {rounds} cuts passed in {:.1} s; {total_writes} device writes, {total_syncs} syncs, {total_pending} unsynced writes at the cuts",
        t0.elapsed().as_secs_f64()
    );
    assert!(total_writes > rounds, "the engine hardly wrote: {total_writes} device writes");
    assert!(total_pending > 0, "no cut ever caught an unsynced write: the test exercised nothing");
}
