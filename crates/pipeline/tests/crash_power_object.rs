//! Crash safety under power loss of a pool whose data device is the object device, against
//! a real S3 server (`rclone serve s3`, started here) behind a `FaultProxy`.
//!
//! A power cut of the machine running the pool: on the local side, the checked metadata
//! store's copies and the object map (`object.0.redb`) go through one `PowerCut` of the
//! pipeline (every write and sync after the cut fails, and the files are then put back as a
//! power loss could leave them: each change since the file's last sync dropped, kept or
//! torn at sectors), and the read cache, which is never synced, loses files or their tails
//! or has ranges zeroed; on the bucket side the proxy dies at the same moment, cutting the
//! uploads in flight, so the bucket keeps only the PUTs that completed (a multipart upload
//! cut before its completion is not an object). The engine runs in this process; each
//! round uses a new proxy and keeps the dead ones, so nothing of a cut engine reaches the
//! server afterwards.
//!
//! After each cut the pool is reopened directly on the server (which sweeps), and checked
//! as after a SIGKILL (crash_kill_object.rs): every acknowledged byte intact and nothing
//! garbage, truncates and unlinks all-or-nothing, scrub and fsck clean, and the bucket
//! holds no segment object that neither the map nor a kept backup references, and lacks
//! none they do. Half the cuts come after a random time, half right after the n-th PUT
//! the proxy saw (between uploads, or between an upload and the commits); one round in
//! eight writes a file large enough that its segment goes up as a multipart upload, and is
//! cut once that upload began.
//!
//! Rounds: `SQUEEZEFS_OBJECT_POWER_CUTS` (default 20). Seed: `SQUEEZEFS_CRASH_SEED`.

mod crash_common;
#[path = "crash_common/object.rs"]
mod crash_object;

use crash_common::*;
use crash_object::*;
use squeezefs_device::doubles::SplitMix64;
use squeezefs_object::testing::{arm_map_backend, disarm_map_backend, FaultProxy, S3Server};
use squeezefs_pipeline::testing::{arm_pool, disarm_pool, CopyFile, PowerCut};
use squeezefs_pipeline::{Engine, OpenOptions, ROOT_INO};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A file of the object map whose writes and syncs go through a power cut.
#[derive(Debug)]
struct CutBackend(CopyFile);

impl redb::StorageBackend for CutBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write_at(offset, data)
    }
}

/// Bytes of the one large write of a multipart round: compressed about 2:1, its segment
/// is past the 8 MiB above which a segment goes up in parts.
const BIG_WRITE: u64 = 24 << 20;

/// The workload until an engine call fails (the power is gone; `Err` says how) or `stop`: writes, punches,
/// truncates and unlinks (barriers, crash_common/object.rs), fsyncs and syncs. `big`: first
/// one write of `BIG_WRITE` bytes to `f0`, fsynced.
fn workload(engine: &Engine, seed: u64, big: bool, log: &Mutex<Vec<Rec>>, stop: &AtomicBool) -> Result<(), String> {
    let rec = |r: Rec| log.lock().unwrap().push(r);
    let base = |r: LogRec| Rec::Base(r);
    let sync_all = || -> Result<(), String> {
        engine.sync().map_err(|e| e.to_string())?;
        rec(base(LogRec::SyncAll));
        Ok(())
    };
    let mut rng = SplitMix64::new(seed);
    let mut inos: Vec<Option<u64>> = Vec::new();
    for i in 0..FILES {
        inos.push(engine.lookup(ROOT_INO, &file_name(i)).map_err(|e| e.to_string())?.map(|(ino, _)| ino));
    }
    let ino_of = |file: usize, inos: &mut Vec<Option<u64>>| -> Result<u64, String> {
        if let Some(ino) = inos[file] {
            return Ok(ino);
        }
        let ino = create_file(engine, &file_name(file)).map_err(|e| e.to_string())?;
        rec(base(LogRec::Create(file)));
        inos[file] = Some(ino);
        Ok(ino)
    };
    if big {
        let ino = ino_of(0, &mut inos)?;
        let wseed = seed | 1;
        rec(base(LogRec::Write { file: 0, off: 0, len: BIG_WRITE, seed: wseed }));
        engine.write(ino, 0, &content(wseed, BIG_WRITE)).map_err(|e| e.to_string())?;
        engine.fsync(ino).map_err(|e| e.to_string())?;
        rec(base(LogRec::Fsync(0)));
    }
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let file = rng.below(FILES as u64) as usize;
        let ino = ino_of(file, &mut inos)?;
        match rng.below(100) {
            0..=3 => {
                let size = rng.below(MAX_OFFSET + (256 << 10));
                sync_all()?;
                rec(Rec::Truncate { file, size });
                engine.set_size(ino, size).map_err(|e| e.to_string())?;
                sync_all()?;
                continue;
            }
            4..=6 => {
                sync_all()?;
                rec(Rec::Unlink(file));
                delete_file(engine, &file_name(file)).map_err(|e| e.to_string())?;
                inos[file] = None;
                sync_all()?;
                continue;
            }
            7..=12 => {
                let size = engine.getattr(ino).map_err(|e| e.to_string())?.size;
                if size > 0 {
                    let off = rng.below(size);
                    let len = (1 + rng.below(256 << 10)).min(size - off);
                    rec(base(LogRec::Write { file, off, len, seed: n << 5 }));
                    engine.punch_hole(ino, off, len).map_err(|e| e.to_string())?;
                }
            }
            _ => {
                let off = rng.below(MAX_OFFSET);
                let len = write_len(&mut rng);
                let wseed = seed.wrapping_mul(1_000_003).wrapping_add(n);
                rec(base(LogRec::Write { file, off, len, seed: wseed }));
                engine.write(ino, off, &content(wseed, len)).map_err(|e| e.to_string())?;
            }
        }
        match rng.below(20) {
            0..=4 => {
                engine.fsync(ino).map_err(|e| e.to_string())?;
                rec(base(LogRec::Fsync(file)));
            }
            5 => sync_all()?,
            _ => {}
        }
    }
    Ok(())
}

/// What a power loss does to the read cache, whose files are written and never synced:
/// each one kept, gone, cut short or with a 4 KiB-aligned range zeroed.
fn damage_cache(dir: &Path, rng: &mut SplitMix64) -> u64 {
    let mut damaged = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let Ok(len) = e.metadata().map(|m| m.len()) else { continue };
        match rng.below(4) {
            0 => continue,
            1 => std::fs::remove_file(&p).expect("remove a cache file"),
            2 => std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .and_then(|f| f.set_len(rng.below(len + 1)))
                .expect("cut a cache file short"),
            _ => {
                use std::os::unix::fs::FileExt;
                let at = rng.below(len.div_ceil(4096).max(1)) * 4096;
                let n = (4096 * (1 + rng.below(4))).min(len.saturating_sub(at));
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .and_then(|f| f.write_all_at(&vec![0u8; n as usize], at))
                    .expect("zero a range of a cache file");
            }
        }
        damaged += 1;
    }
    damaged
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn power_cut_of_a_pool_on_the_object_device_keeps_acknowledged_data() {
    let rounds = env_u64("SQUEEZEFS_OBJECT_POWER_CUTS").unwrap_or(20);
    let seed = env_u64("SQUEEZEFS_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("object power-cut test: {rounds} cuts, SQUEEZEFS_CRASH_SEED={seed}");
    let s3 = S3Server::start(BUCKET);
    let direct = store_config(&s3.endpoint());
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let map = squeezefs_pipeline::object_map_path(&pool, 0);
    mkfs(&pool, &direct);
    let mut rng = SplitMix64::new(seed);
    let mut baseline: State = vec![None; FILES];
    // proxies of cut rounds stay dead until the end, so that no thread of a cut engine
    // (an upload still retrying) ever reaches the server, nor a later proxy on its port
    let mut dead = Vec::new();
    let map_opens = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut most_unsynced = 0;
    let t0 = Instant::now();
    let (mut records, mut puts_cut, mut damaged, mut multipart) = (0usize, 0u64, 0u64, 0u64);
    for round in 0..rounds {
        let big = rng.below(8) == 0;
        let cut = Arc::new(PowerCut::default());
        arm_pool(&pool, cut.clone());
        let (c, opened) = (cut.clone(), map_opens.clone());
        arm_map_backend(
            &map,
            Arc::new(move |p: &Path| {
                opened.fetch_add(1, Ordering::Relaxed);
                let f = CopyFile::open(p, true)?.with_cut(Some(c.clone()));
                Ok(Box::new(CutBackend(f)) as Box<dyn redb::StorageBackend>)
            }),
        );
        let proxy = FaultProxy::start(s3.addr());
        let cfg = store_config(&proxy.endpoint());
        let mut opts = open_options(&cfg, Some(Duration::from_millis(300)));
        // a cut store fails the syncs after this long: the workload stops soon after a cut
        // (it also bounds each request: a multipart upload needs longer)
        opts.object.stall_timeout = Some(Duration::from_millis(if big { 2000 } else { 500 }));
        if big {
            // the whole write in one txg, so in one segment
            opts.object.segment_bytes = Some(32 << 20);
            opts.max_dirty_bytes = 64 << 20;
            opts.txg_timeout = Duration::from_secs(2);
        }
        let engine = Engine::open(&pool, &opts).unwrap_or_else(|e| panic!("round {round}: open: {e}"));
        disarm_pool(&pool);
        disarm_map_backend(&map);
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let child_seed = rng.next_u64();
        let worker = {
            let (engine, log, stop) = (engine.clone(), log.clone(), stop.clone());
            std::thread::spawn(move || workload(&engine, child_seed, big, &log, &stop))
        };
        let waited = |pred: &dyn Fn() -> bool| {
            let t = Instant::now();
            while !pred() && t.elapsed() < Duration::from_secs(5) && !worker.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let when = if big {
            // CreateMultipartUpload is a POST; then a while into the parts' upload
            waited(&|| proxy.requests("POST") > 0);
            std::thread::sleep(Duration::from_micros(rng.below(100_000)));
            multipart += u64::from(proxy.requests("POST") > 0);
            "during a multipart upload"
        } else if rng.below(2) == 0 {
            std::thread::sleep(Duration::from_micros(rng.below(300_000)));
            "after a random time"
        } else {
            let n = 1 + rng.below(10);
            waited(&|| proxy.requests("PUT") >= n);
            "after a PUT"
        };
        proxy.set_dead(true);
        cut.arm(0);
        puts_cut += proxy.requests("PUT");
        let t = Instant::now();
        while !worker.is_finished() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(2));
        }
        stop.store(true, Ordering::Relaxed);
        let _ = worker.join().expect("workload thread");
        // no close: the machine is gone (a drop stops the engine without syncing)
        drop(engine);
        most_unsynced = most_unsynced.max(cut.most_unsynced());
        let image_seed = rng.next_u64();
        cut.crash_image(image_seed).expect("crash image of the local files");
        // anything of the cut engine still running stays without power
        cut.arm(0);
        damaged += damage_cache(&pool.join("object.0.cache"), &mut rng);
        dead.push(proxy);
        settle(&s3);

        let log = log.lock().unwrap().clone();
        records += log.len();
        let o = outcome(&baseline, &log);
        let tail: Vec<String> = log.iter().rev().take(8).rev().map(|r| r.to_string()).collect();
        let what = format!(
            "cut {round} (seed {seed}, workload seed {child_seed}, image seed {image_seed}, cut {when}; \
             last records {tail:?})"
        );
        let mut check_opts: OpenOptions = open_options(&direct, Some(Duration::from_secs(3600)));
        if round % 2 == 0 {
            // read what the bucket holds, not what the cache kept
            check_opts.object.cache_bytes = Some(0);
        }
        let engine = Engine::open(&pool, &check_opts)
            .unwrap_or_else(|e| panic!("{what}: reopening after the power cut failed: {e}"));
        let actual = read_files(&engine).unwrap_or_else(|e| panic!("{what}: reading back failed: {e}"));
        if let Err(msg) = check(&o.expect, &actual) {
            panic!("{what}: {msg}");
        }
        let scrub = engine.scrub(&|_, _| {}).unwrap_or_else(|e| panic!("{what}: scrub failed: {e}"));
        assert!(scrub.is_clean(), "{what}: scrub found damage: {:?}", scrub.damaged);
        assert_fsck_clean(&engine, &what);
        engine.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
        drop(engine);
        check_bucket(&s3, &direct, &pool, &what);
        baseline = actual;
    }
    eprintln!(
        "object power-cut test: {rounds} cuts passed in {:.1} s; {records} logged operations, {puts_cut} PUTs \
         before the cuts, {damaged} cache files damaged, {multipart} cuts during a multipart upload",
        t0.elapsed().as_secs_f64()
    );
    assert!(records as u64 > rounds, "the workload did almost nothing: {records} log records");
    assert!(puts_cut > 0, "no segment was ever uploaded before a cut: the test exercised nothing");
    assert_eq!(map_opens.load(Ordering::Relaxed), rounds, "the object map did not open on the power cut");
    assert!(most_unsynced > 1, "the power cut never saw two local files between syncs: it cut nothing");
}
