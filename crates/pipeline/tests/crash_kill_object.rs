//! Crash safety under SIGKILL of a pool whose data device is the object device, against a
//! real S3 server (`rclone serve s3`, started here): crash_kill.rs's harness, with the
//! uploads of segment objects, the object map's commits and the metadata backups in the
//! window a kill can land in.
//!
//! A child process (this test binary, re-executed with `SQZ_OBJ_CHILD_*` set) writes,
//! overwrites, punches, copies, truncates, unlinks and fsyncs files through the engine,
//! logging what it is about to do and what fsync acknowledged; the parent kills it at a
//! random moment (one kill in eight during start-up, which includes the sweep of objects a
//! previous kill left), reopens the pool and checks: every acknowledged byte intact and
//! nothing garbage (crash_common; truncates and unlinks are all-or-nothing, see
//! crash_common/object.rs), scrub and fsck clean, and, once the pool is closed, that the
//! bucket holds no segment object that neither the object map nor a kept metadata backup
//! references, and lacks none they do.
//!
//! The second test kills a child that takes metadata backups into the bucket between
//! bursts of writes (half the kills right as a backup starts, so that they land during its
//! upload), then restores a new pool directory from the bucket alone and opens it
//! read-only: it must hold exactly the files of the last backup the child completed, or of
//! the one it was writing (if that one's manifest made it). The original pool is then
//! checked as above, and carries on.
//!
//! Kill points: `SQUEEZEFS_OBJECT_CRASH_KILLS` (default 60 for the first test, 30 for the
//! backup one). Seed: `SQUEEZEFS_CRASH_SEED` (default: from the clock, printed).

mod crash_common;
#[path = "crash_common/object.rs"]
mod crash_object;

use crash_common::*;
use crash_object::*;
use squeezefs_device::doubles::SplitMix64;
use squeezefs_object::testing::S3Server;
use squeezefs_object::StoreConfig;
use squeezefs_pipeline::{Engine, OpenOptions, ROOT_INO};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ENV_POOL: &str = "SQZ_OBJ_CHILD_POOL";
const ENV_LOG: &str = "SQZ_OBJ_CHILD_LOG";
const ENV_SEED: &str = "SQZ_OBJ_CHILD_SEED";
const ENV_ENDPOINT: &str = "SQZ_OBJ_CHILD_ENDPOINT";
/// `work` (the workload, metadata backups every 300 ms as a mount takes them while
/// writing) or `backup` (bursts of work, each followed by a sync and a backup).
const ENV_MODE: &str = "SQZ_OBJ_CHILD_MODE";
/// A child that somehow outlives its parent stops by itself after this long.
const CHILD_MAX_RUN: Duration = Duration::from_secs(60);
/// Metadata backups of the work child: often, so kills land in them and their pruning.
const WORK_BACKUP_INTERVAL: Duration = Duration::from_millis(300);
/// The backup child takes its backups itself; the backup thread must not add others.
const NO_AUTO_BACKUP: Duration = Duration::from_secs(3600);

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

struct Child<'a> {
    engine: &'a Engine,
    log: std::fs::File,
    rng: SplitMix64,
    seed: u64,
    inos: Vec<Option<u64>>,
    n: u64,
}

impl Child<'_> {
    /// One write(2) per line, so the kernel has it when write returns (which survives the
    /// kill); acknowledgements and backups are synced too.
    fn rec(&mut self, r: Rec, durable: bool) {
        self.log.write_all(format!("{r}\n").as_bytes()).expect("log write");
        if durable {
            self.log.sync_data().expect("log fsync");
        }
    }

    fn sync_all(&mut self) {
        self.engine.sync().expect("sync");
        self.rec(Rec::Base(LogRec::SyncAll), true);
    }

    /// One operation of the workload, then maybe an fsync or sync.
    fn step(&mut self) {
        self.n += 1;
        let rng = &mut self.rng;
        let file = rng.below(FILES as u64) as usize;
        let ino = match self.inos[file] {
            Some(ino) => ino,
            None => {
                let ino = create_file(self.engine, &file_name(file)).expect("create");
                self.rec(Rec::Base(LogRec::Create(file)), false);
                self.inos[file] = Some(ino);
                ino
            }
        };
        let wseed = self.seed.wrapping_mul(1_000_003).wrapping_add(self.n);
        match self.rng.below(100) {
            0..=3 => {
                let size = self.rng.below(MAX_OFFSET + (256 << 10));
                self.sync_all();
                self.rec(Rec::Truncate { file, size }, false);
                self.engine.set_size(ino, size).expect("truncate");
                self.sync_all();
                return;
            }
            4..=6 => {
                self.sync_all();
                self.rec(Rec::Unlink(file), false);
                delete_file(self.engine, &file_name(file)).expect("unlink");
                self.inos[file] = None;
                self.sync_all();
                return;
            }
            7..=12 => {
                // a punched range reads as zeros: logged as a write of zeros (seed ≡ 0 mod
                // 32) clamped to the size, which a punch never changes
                let size = self.engine.getattr(ino).expect("getattr").size;
                if size > 0 {
                    let off = self.rng.below(size);
                    let len = (1 + self.rng.below(256 << 10)).min(size - off);
                    self.rec(Rec::Base(LogRec::Write { file, off, len, seed: self.n << 5 }), false);
                    self.engine.punch_hole(ino, off, len).expect("punch");
                }
            }
            13..=16 => {
                // a copy between two commits, so that its source is the acknowledged state
                let to = self.rng.below(FILES as u64) as usize;
                if let Some(dst) = self.inos[to] {
                    let align = |x: u64, r: &mut SplitMix64| {
                        if r.below(2) == 0 {
                            x / (128 << 10) * (128 << 10)
                        } else {
                            x
                        }
                    };
                    let coff = align(self.rng.below(MAX_OFFSET), &mut self.rng);
                    let cdst = align(self.rng.below(MAX_OFFSET), &mut self.rng);
                    let clen = 1 + self.rng.below(512 * 1024);
                    if file != to || coff + clen <= cdst || cdst + clen <= coff {
                        self.sync_all();
                        self.rec(Rec::Base(LogRec::Copy { from: file, to, off: coff, dst: cdst, len: clen }), false);
                        self.engine.share_range(ino, coff, dst, cdst, clen).expect("copy");
                        self.sync_all();
                    }
                }
            }
            _ => {
                let off = self.rng.below(MAX_OFFSET);
                let len = write_len(&mut self.rng);
                self.rec(Rec::Base(LogRec::Write { file, off, len, seed: wseed }), false);
                self.engine.write(ino, off, &content(wseed, len)).expect("write");
            }
        }
        match self.rng.below(20) {
            0..=4 => {
                self.engine.fsync(ino).expect("fsync");
                self.rec(Rec::Base(LogRec::Fsync(file)), true);
            }
            5 => self.sync_all(),
            _ => {}
        }
    }
}

fn child_main(pool: &Path, log_path: &Path, seed: u64, cfg: &StoreConfig, backups: bool) {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log_path).expect("open log");
    let interval = if backups { NO_AUTO_BACKUP } else { WORK_BACKUP_INTERVAL };
    let engine = Engine::open(pool, &open_options(cfg, Some(interval))).expect("child: open pool");
    let inos =
        (0..FILES).map(|i| engine.lookup(ROOT_INO, &file_name(i)).expect("lookup").map(|(ino, _)| ino)).collect();
    let mut c = Child { engine: &engine, log, rng: SplitMix64::new(seed), seed, inos, n: 0 };
    c.rec(Rec::Base(LogRec::Ready), false);
    let start = Instant::now();
    let mut repacked = 0;
    while start.elapsed() < CHILD_MAX_RUN {
        if !backups {
            c.step();
            let now = engine.object_usage().expect("a pool on one object device").repacked_bytes;
            if now > repacked {
                repacked = now;
                c.rec(Rec::Repacked(now), false);
            }
            continue;
        }
        for _ in 0..1 + c.rng.below(6) {
            c.step();
        }
        c.sync_all();
        c.rec(Rec::BackupBegin, true);
        engine.backup_now().expect("backup");
        c.rec(Rec::BackupDone, true);
    }
}

/// Entry point of the child process (does nothing in a normal test run).
#[test]
fn crash_child_process() {
    let vars = [ENV_POOL, ENV_LOG, ENV_SEED, ENV_ENDPOINT, ENV_MODE].map(std::env::var);
    let [Ok(pool), Ok(log), Ok(seed), Ok(endpoint), Ok(mode)] = vars else { return };
    child_main(
        Path::new(&pool),
        Path::new(&log),
        seed.parse().expect("seed"),
        &store_config(&endpoint),
        mode == "backup",
    );
}

#[test]
fn crash_checker_self_test() {
    crash_common::self_test();
    crash_object::self_test();
}

fn seed_from_env() -> u64 {
    env_u64("SQUEEZEFS_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    })
}

/// The parent's side of the harness: the server, the pool and what was last verified.
struct Rig {
    s3: S3Server,
    cfg: StoreConfig,
    dir: tempfile::TempDir,
    baseline: State,
    /// kills that found a backup under way
    inflight_kills: u64,
    records: usize,
    checks: u64,
}

impl Rig {
    fn new() -> Rig {
        let s3 = S3Server::start(BUCKET);
        let cfg = store_config(&s3.endpoint());
        let dir = tempfile::tempdir().expect("tempdir");
        mkfs(&dir.path().join("pool"), &cfg);
        Rig { s3, cfg, dir, baseline: vec![None; FILES], inflight_kills: 0, records: 0, checks: 0 }
    }

    fn pool(&self) -> std::path::PathBuf {
        self.dir.path().join("pool")
    }

    /// Every other check reads cold, without the read cache, so that what it reads back
    /// is what the bucket holds (a cache that kept a block would hide an object missing).
    fn check_options(&self) -> OpenOptions {
        let mut o = open_options(&self.cfg, Some(NO_AUTO_BACKUP));
        if self.checks.is_multiple_of(2) {
            o.object.cache_bytes = Some(0);
        }
        o
    }

    /// Run a child, kill it, return its log. `at_backup`: kill right after it logs that a
    /// backup begins.
    fn run_child(&self, k: u64, seed: u64, rng: &mut SplitMix64, mode: &str, at_backup: bool) -> (Vec<Rec>, String) {
        let log_path = self.dir.path().join(format!("log.{k}"));
        let err_path = self.dir.path().join("child.stderr");
        let mut child = Command::new(std::env::current_exe().expect("current_exe"))
            .args(["crash_child_process", "--exact", "--nocapture", "--test-threads=1"])
            .env(ENV_POOL, self.pool())
            .env(ENV_LOG, &log_path)
            .env(ENV_SEED, seed.to_string())
            .env(ENV_ENDPOINT, self.s3.endpoint())
            .env(ENV_MODE, mode)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path).expect("stderr file"))
            .spawn()
            .expect("spawn child");
        let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        let during_startup = !at_backup && rng.below(8) == 0;
        let when;
        if during_startup {
            // open includes the sweep of what the previous kill left in the bucket
            std::thread::sleep(Duration::from_millis(rng.below(150)));
            when = "during start-up";
        } else {
            let what = format!("kill {k}");
            let mut wait_for =
                |reached: &dyn Fn(&str) -> bool| wait_for_log(&mut child, &log_path, &err_path, &what, reached);
            wait_for(&|s| s.starts_with("R\n"));
            if at_backup {
                // the n-th backup to begin after a random number of them
                let nth = 1 + rng.below(4) as usize;
                wait_for(&|s| s.matches("\nB\n").count() >= nth);
                std::thread::sleep(Duration::from_micros(rng.below(30_000)));
                when = "as a backup began";
            } else {
                std::thread::sleep(Duration::from_micros(rng.below(400_000)));
                when = "while working";
            }
        }
        kill_child(&mut child, &err_path, &format!("kill {k}"));
        settle(&self.s3);
        let log = parse(&read_log());
        std::fs::remove_file(&log_path).ok();
        (log, when.to_string())
    }

    /// Reopen the pool (which sweeps), check it against `expect`, scrub and fsck, close it
    /// (a metadata backup first when `backup`), check the bucket; the files become the new
    /// baseline.
    fn check_pool(&mut self, expect: &Expect, what: &str, backup: bool) -> BucketUse {
        let pool = self.pool();
        let engine = Engine::open(&pool, &self.check_options())
            .unwrap_or_else(|e| panic!("{what}: reopening the pool failed: {e}"));
        let actual = read_files(&engine).unwrap_or_else(|e| panic!("{what}: reading back failed: {e}"));
        if let Err(msg) = check(expect, &actual) {
            let scrub = engine.scrub(&|_, _| {}).map(|r| format!("{:?}", r.damaged));
            let fsck = engine.fsck().map(|r| format!("{:?}", r.problems));
            panic!("{what}: {msg}\nscrub damage: {scrub:?}\nfsck problems: {fsck:?}");
        }
        let scrub = engine.scrub(&|_, _| {}).unwrap_or_else(|e| panic!("{what}: scrub failed: {e}"));
        assert!(scrub.is_clean(), "{what}: scrub found damage: {:?}", scrub.damaged);
        assert_fsck_clean(&engine, what);
        if backup {
            engine.backup_now().unwrap_or_else(|e| panic!("{what}: backup after the check: {e}"));
        }
        engine.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
        drop(engine);
        self.baseline = actual;
        self.checks += 1;
        check_bucket(&self.s3, &self.cfg, &pool, what)
    }
}

#[test]
fn sigkill_of_a_pool_on_the_object_device_keeps_acknowledged_data() {
    let kills = env_u64("SQUEEZEFS_OBJECT_CRASH_KILLS").unwrap_or(60);
    let seed = seed_from_env();
    eprintln!("object crash test: {kills} kills, SQUEEZEFS_CRASH_SEED={seed}");
    let mut rig = Rig::new();
    let mut rng = SplitMix64::new(seed);
    let t0 = Instant::now();
    let (mut most_segments, mut most_manifests, mut repacking) = (0, 0, 0);
    for k in 0..kills {
        let child_seed = rng.next_u64();
        let (log, when) = rig.run_child(k, child_seed, &mut rng, "work", false);
        rig.records += log.len();
        repacking += usize::from(log.iter().any(|r| matches!(r, Rec::Repacked(_))));
        let o = outcome(&rig.baseline, &log);
        let tail: Vec<String> = log.iter().rev().take(8).rev().map(|r| r.to_string()).collect();
        let what = format!("kill {k} (seed {seed}, child seed {child_seed}, killed {when}; last records {tail:?})");
        let u = rig.check_pool(&o.expect, &what, false);
        most_segments = most_segments.max(u.segments);
        most_manifests = most_manifests.max(u.manifests);
    }
    eprintln!(
        "object crash test: {kills} kills passed in {:.1} s; {} logged operations; up to {most_segments} segment \
         objects and {most_manifests} backups in the bucket; {repacking} children repacked",
        t0.elapsed().as_secs_f64(),
        rig.records
    );
    assert!(repacking > 0, "no child ever repacked: kills during a repack were not exercised");
    assert!(rig.records as u64 > kills, "the child did almost nothing: {} log records", rig.records);
    assert!(most_manifests > 0, "no metadata backup was ever in the bucket: backups were not exercised");
}

#[test]
fn sigkill_during_a_metadata_backup_leaves_the_last_backup_restorable() {
    let kills = env_u64("SQUEEZEFS_OBJECT_CRASH_KILLS").unwrap_or(30);
    let seed = seed_from_env();
    eprintln!("object backup crash test: {kills} kills, SQUEEZEFS_CRASH_SEED={seed}");
    let mut rig = Rig::new();
    // the state of the newest complete backup in the bucket, as the parent knows it
    rig.check_pool(&Expect::Files(expectations(&rig.baseline, &[])), "first backup", true);
    let mut last_backup: State = rig.baseline.clone();
    let mut rng = SplitMix64::new(seed);
    let t0 = Instant::now();
    let mut restored_inflight = 0;
    for k in 0..kills {
        let child_seed = rng.next_u64();
        let at_backup = rng.below(2) == 0;
        let (log, when) = rig.run_child(k, child_seed, &mut rng, "backup", at_backup);
        rig.records += log.len();
        let o = outcome(&rig.baseline, &log);
        let tail: Vec<String> = log.iter().rev().take(8).rev().map(|r| r.to_string()).collect();
        let what = format!("kill {k} (seed {seed}, child seed {child_seed}, killed {when}; last records {tail:?})");
        if let Some(s) = &o.last_backup {
            last_backup = s.clone();
        }
        if o.inflight_backup.is_some() {
            rig.inflight_kills += 1;
        }
        // restore from the bucket alone, as the kill left it, into a new directory
        let restored = rig.dir.path().join(format!("restored.{k}"));
        let r = Engine::restore(&restored, &spec_str(), &settings(&rig.cfg, None))
            .unwrap_or_else(|e| panic!("{what}: restore failed: {e}"));
        let ro = OpenOptions { read_only: true, ..rig.check_options() };
        let engine =
            Engine::open(&restored, &ro).unwrap_or_else(|e| panic!("{what}: opening the restored pool failed: {e}"));
        let got = read_files(&engine).unwrap_or_else(|e| panic!("{what}: reading the restored pool failed: {e}"));
        if o.inflight_backup.as_ref() == Some(&got) && got != last_backup {
            restored_inflight += 1;
        } else if got != last_backup {
            panic!(
                "{what}: the restored pool (backup generation {}, txg {}) holds {}, not the last backup's {}{}",
                r.generation,
                r.txg,
                describe(&got),
                describe(&last_backup),
                o.inflight_backup
                    .as_ref()
                    .map(|s| format!(" nor the one being written's {}", describe(s)))
                    .unwrap_or_default()
            );
        }
        assert_fsck_clean(&engine, &format!("{what}: the restored pool"));
        engine.close().expect("close the restored pool");
        drop(engine);
        std::fs::remove_dir_all(&restored).ok();
        // the original pool carries on from its last commit; its check ends with a backup
        rig.check_pool(&o.expect, &what, true);
        last_backup = rig.baseline.clone();
    }
    eprintln!(
        "object backup crash test: {kills} kills passed in {:.1} s; {} logged operations; {} kills during a \
         backup, {restored_inflight} of which had completed it",
        t0.elapsed().as_secs_f64(),
        rig.records,
        rig.inflight_kills
    );
    assert!(rig.inflight_kills > 0, "no kill landed during a backup: the test exercised nothing");
}
