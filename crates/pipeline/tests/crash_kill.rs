//! Crash safety under SIGKILL: a child process writes files through the engine (mixed sizes,
//! random offsets, fsyncs), logging what it is about to write and what fsync acknowledged;
//! the parent kills it at random moments, reopens the pool and checks that every
//! acknowledged byte is intact, nothing is garbage (see `crash_common`), every checksum
//! verifies (scrub) and the metadata is consistent (fsck). Among the writes the child copies
//! ranges between files with `Engine::share_range` (sharing their records where they line up),
//! committing before and after each copy.
//!
//! The child is this test binary itself, re-executed with `SQZ_CRASH_CHILD_*` variables set
//! and told to run only `crash_child_process`; that works under `cargo test` on a fresh
//! clone with nothing else to build.
//!
//! Kill points: `SQUEEZEFS_CRASH_KILLS` (default 60); `bench/crash-kill.sh N` runs more.
//! Seed: `SQUEEZEFS_CRASH_SEED` (default: from the clock, printed so a failure can be
//! replayed).

mod crash_common;

use crash_common::*;
use squeezefs_device::doubles::SplitMix64;
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions, ROOT_INO};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ENV_POOL: &str = "SQZ_CRASH_CHILD_POOL";
const ENV_LOG: &str = "SQZ_CRASH_CHILD_LOG";
const ENV_SEED: &str = "SQZ_CRASH_CHILD_SEED";
/// A child that somehow outlives its parent stops by itself after this long.
const CHILD_MAX_RUN: Duration = Duration::from_secs(60);

fn open_options() -> OpenOptions {
    OpenOptions {
        compression: "zstd:1".parse().expect("zstd:1 is a valid spec"),
        // Short txgs and a small dirty bound so that kills land in every phase: dirty data,
        // txg sync in progress, commit, idle.
        txg_timeout: Duration::from_millis(50),
        max_dirty_bytes: 4 * 1024 * 1024,
        workers: 2,
        ..OpenOptions::default()
    }
}

/// The child's workload; runs until killed.
fn child_main(pool: &Path, log_path: &Path, seed: u64) {
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(log_path).expect("open log");
    let mut rec = |r: LogRec, durable: bool| {
        // One write(2) per line: the kernel has it when write returns, which survives the
        // kill of this process; fsync on acknowledgements as well, as for a power loss.
        log.write_all(format!("{r}\n").as_bytes()).expect("log write");
        if durable {
            log.sync_data().expect("log fsync");
        }
    };
    let engine = Engine::open(pool, &open_options()).expect("child: open pool");
    rec(LogRec::Ready, false);
    let mut rng = SplitMix64::new(seed);
    let mut inos: Vec<Option<u64>> =
        (0..FILES).map(|i| engine.lookup(ROOT_INO, &file_name(i)).expect("lookup").map(|(ino, _)| ino)).collect();
    let start = Instant::now();
    let mut n: u64 = 0;
    while start.elapsed() < CHILD_MAX_RUN {
        n += 1;
        let file = rng.below(FILES as u64) as usize;
        let ino = match inos[file] {
            Some(ino) => ino,
            None => {
                let ino = create_file(&engine, &file_name(file)).expect("create");
                rec(LogRec::Create(file), false);
                inos[file] = Some(ino);
                ino
            }
        };
        let off = rng.below(MAX_OFFSET);
        let len = write_len(&mut rng);
        if rng.below(25) == 0 {
            // a copy that shares records (offsets on record boundaries half the time),
            // between two commits so that its source is exactly the acknowledged state
            let to = rng.below(FILES as u64) as usize;
            if let (Some(src), Some(dst_ino)) = (inos[file], inos[to]) {
                let align =
                    |x: u64, r: &mut SplitMix64| if r.below(2) == 0 { x / (128 << 10) * (128 << 10) } else { x };
                let (coff, cdst) = (align(rng.below(MAX_OFFSET), &mut rng), align(rng.below(MAX_OFFSET), &mut rng));
                let clen = 1 + rng.below(512 * 1024);
                if file != to || coff + clen <= cdst || cdst + clen <= coff {
                    engine.sync().expect("sync");
                    rec(LogRec::SyncAll, true);
                    rec(LogRec::Copy { from: file, to, off: coff, dst: cdst, len: clen }, false);
                    engine.share_range(src, coff, dst_ino, cdst, clen).expect("copy");
                    engine.sync().expect("sync");
                    rec(LogRec::SyncAll, true);
                }
            }
        }
        let wseed = seed.wrapping_mul(1_000_003).wrapping_add(n);
        rec(LogRec::Write { file, off, len, seed: wseed }, false);
        engine.write(ino, off, &content(wseed, len)).expect("write");
        match rng.below(20) {
            0..=4 => {
                engine.fsync(ino).expect("fsync");
                rec(LogRec::Fsync(file), true);
            }
            5 => {
                engine.sync().expect("sync");
                rec(LogRec::SyncAll, true);
            }
            _ => {}
        }
    }
}

/// Entry point of the child process (does nothing in a normal test run).
#[test]
fn crash_child_process() {
    let (Ok(pool), Ok(log), Ok(seed)) = (std::env::var(ENV_POOL), std::env::var(ENV_LOG), std::env::var(ENV_SEED))
    else {
        return;
    };
    child_main(Path::new(&pool), Path::new(&log), seed.parse().expect("seed"));
}

/// The child's workload in-process and without kills: after `sync` and a reopen every file
/// must equal the model exactly. Separates plain data-path bugs from crash bugs.
#[test]
fn workload_without_kills_reads_back_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).expect("mkfs");
    let engine = Engine::open(&pool, &open_options()).expect("open");
    let mut rng = SplitMix64::new(env_u64("SQUEEZEFS_CRASH_SEED").unwrap_or(42));
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); FILES];
    let inos: Vec<u64> = (0..FILES).map(|i| create_file(&engine, &file_name(i)).expect("create")).collect();
    for n in 0..1500u64 {
        let file = rng.below(FILES as u64) as usize;
        let off = rng.below(MAX_OFFSET);
        let len = write_len(&mut rng);
        engine.write(inos[file], off, &content(n, len)).expect("write");
        apply_write(&mut model[file], off, len, n);
        if rng.below(25) == 0 {
            let to = rng.below(FILES as u64) as usize;
            let (coff, cdst, clen) =
                (rng.below(MAX_OFFSET) / 131072 * 131072, rng.below(MAX_OFFSET), 1 + rng.below(512 * 1024));
            let cdst = if rng.below(2) == 0 { cdst / 131072 * 131072 } else { cdst };
            if file != to || coff + clen <= cdst || cdst + clen <= coff {
                engine.share_range(inos[file], coff, inos[to], cdst, clen).expect("copy");
                let src = model[file].clone();
                apply_copy(&src, &mut model[to], coff, cdst, clen);
            }
        }
        if rng.below(20) == 0 {
            engine.fsync(inos[file]).expect("fsync");
        }
        if n % 100 == 99 {
            // reads see the latest writes at once, whatever txg they are in
            let got = read_all(&engine, inos[file]).expect("read");
            let exact = FileExpect { acked: Some(model[file].clone()), ..Default::default() };
            if let Err(msg) = check_file(&format!("f{file}"), &exact, Some(&got)) {
                panic!("after write {n}, before reopen: {msg}");
            }
        }
    }
    engine.sync().expect("sync");
    engine.close().expect("close");
    drop(engine);
    let engine = Engine::open(&pool, &open_options()).expect("reopen");
    for (i, m) in model.iter().enumerate() {
        let got = read_all(&engine, inos[i]).expect("read");
        if let Err(msg) =
            check_file(&format!("f{i}"), &FileExpect { acked: Some(m.clone()), ..Default::default() }, Some(&got))
        {
            panic!("after reopen: {msg}");
        }
    }
    check_pool_integrity(&engine, "workload without kills");
    engine.close().expect("close");
}

#[test]
fn crash_checker_self_test() {
    self_test();
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

struct Outcome {
    acked_bytes: u64,
    log_records: usize,
}

/// Spawn the child, kill it at a random moment, check the pool. Returns the new baseline.
fn one_kill(
    pool: &Path,
    work: &Path,
    k: u64,
    seed: u64,
    rng: &mut SplitMix64,
    baseline: &[Option<Vec<u8>>],
) -> (Vec<Option<Vec<u8>>>, Outcome) {
    let log_path = work.join(format!("log.{k}"));
    let err_path = work.join("child.stderr");
    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        .args(["crash_child_process", "--exact", "--nocapture", "--test-threads=1"])
        .env(ENV_POOL, pool)
        .env(ENV_LOG, &log_path)
        .env(ENV_SEED, seed.to_string())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn child");
    // One kill in eight lands at a random point of start-up (open, recovery); the others
    // after the child is working, at a random moment within its first 250 ms of work.
    let during_startup = rng.below(8) == 0;
    if during_startup {
        std::thread::sleep(Duration::from_millis(rng.below(60)));
    } else {
        let what = format!("kill {k}");
        wait_for_log(&mut child, &log_path, &err_path, &what, &|s| s.starts_with("R\n"));
        std::thread::sleep(Duration::from_micros(rng.below(250_000)));
    }
    kill_child(&mut child, &err_path, &format!("kill {k}"));
    let log = parse_log(&std::fs::read_to_string(&log_path).unwrap_or_default());
    let exp = expectations(baseline, &log);

    let engine = Engine::open(pool, &open_options())
        .unwrap_or_else(|e| panic!("kill {k} (seed {seed}): reopening the pool failed: {e}"));
    let actual = read_files(&engine).unwrap_or_else(|e| panic!("kill {k} (seed {seed}): reading back failed: {e}"));
    for (i, (e, a)) in exp.iter().zip(&actual).enumerate() {
        if let Err(msg) = check_file(&format!("f{i}"), e, a.as_deref()) {
            let tail: Vec<String> = log.iter().rev().take(12).rev().map(|r| r.to_string()).collect();
            let scrub = engine.scrub(&|_, _| {}).map(|r| format!("{:?}", r.damaged));
            let fsck = engine.fsck().map(|r| format!("{:?}", r.problems));
            drop(engine);
            let kept = keep_for_post_mortem(pool, &log_path, k);
            panic!(
                "kill {k} (child seed {seed}, {}): {msg}\nlast log records: {tail:?}\n\
                 scrub damage: {scrub:?}\nfsck problems: {fsck:?}\npool and log kept in {kept}",
                if during_startup { "killed during start-up" } else { "killed while working" }
            );
        }
    }
    check_pool_integrity(&engine, &format!("kill {k} (seed {seed})"));
    engine.close().expect("close after check");
    let acked_bytes = exp.iter().filter_map(|e| e.acked.as_ref()).map(|a| a.len() as u64).sum();
    std::fs::remove_file(&log_path).ok();
    (actual, Outcome { acked_bytes, log_records: log.len() })
}

/// Copy the pool and the child's log next to the temp dir for inspection after a failure.
fn keep_for_post_mortem(pool: &Path, log: &Path, k: u64) -> String {
    let dest = std::env::temp_dir().join(format!("squeezefs-crash-failure-{}-{k}", std::process::id()));
    let copy = || -> std::io::Result<()> {
        std::fs::create_dir_all(dest.join("pool"))?;
        for entry in std::fs::read_dir(pool)? {
            let entry = entry?;
            std::fs::copy(entry.path(), dest.join("pool").join(entry.file_name()))?;
        }
        std::fs::copy(log, dest.join("child.log"))?;
        Ok(())
    };
    match copy() {
        Ok(()) => dest.display().to_string(),
        Err(e) => format!("(nowhere: copying to {} failed: {e})", dest.display()),
    }
}

/// Scrub (every checksum) and fsck (metadata/space map) must both come out clean.
fn check_pool_integrity(engine: &Engine, what: &str) {
    let scrub = engine.scrub(&|_, _| {}).unwrap_or_else(|e| panic!("{what}: scrub failed: {e}"));
    assert!(scrub.is_clean(), "{what}: scrub found damage: {:?}", scrub.damaged);
    let fsck = engine.fsck().unwrap_or_else(|e| panic!("{what}: fsck failed: {e}"));
    assert!(fsck.is_clean(), "{what}: fsck problems: {:?}", fsck.problems);
}

#[test]
fn sigkill_at_random_points_keeps_acknowledged_data() {
    let kills = env_u64("SQUEEZEFS_CRASH_KILLS").unwrap_or(60);
    let seed = env_u64("SQUEEZEFS_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("crash test: {kills} kills, SQUEEZEFS_CRASH_SEED={seed}");
    let dir = tempfile::tempdir().expect("tempdir");
    let pool: PathBuf = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).expect("mkfs");
    let mut rng = SplitMix64::new(seed);
    let mut baseline: Vec<Option<Vec<u8>>> = vec![None; FILES];
    let t0 = Instant::now();
    let (mut records, mut acked_max) = (0usize, 0u64);
    for k in 0..kills {
        let child_seed = rng.next_u64();
        let (next, out) = one_kill(&pool, dir.path(), k, child_seed, &mut rng, &baseline);
        baseline = next;
        records += out.log_records;
        acked_max = acked_max.max(out.acked_bytes);
    }
    eprintln!(
        "crash test: {kills} kills passed in {:.1} s; {records} logged operations, up to {acked_max} acknowledged bytes checked per kill",
        t0.elapsed().as_secs_f64()
    );
    assert!(records as u64 > kills, "the child did almost nothing: {records} log records");
}
