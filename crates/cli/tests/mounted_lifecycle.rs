//! Mount life cycle, mounted with the built binary: the default request transport, a mount
//! right after a plain `umount` (the old daemon still flushing), a pool in use refused at once.
mod mounted_common;
use mounted_common::*;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

fn mount_info(m: &Mounted) -> String {
    String::from_utf8(xattr_get(&m.mnt, "user.squeezefs.mount").expect("mount info")).unwrap()
}

/// The daemon log's lines written by `pid`.
fn log_lines(m: &Mounted, pid: i32) -> Vec<String> {
    let log = std::fs::read_to_string(m.pool.join("squeezefs.log")).unwrap_or_default();
    log.lines().filter(|l| l.contains(&format!("pid {pid}]"))).map(str::to_string).collect()
}

/// The default mount (no `uring=`) of root on a kernel with FUSE over io_uring takes the
/// fast path, switching the kernel's `enable_uring` from N (its boot value) to Y, and says
/// so in its log and in `user.squeezefs.mount`.
#[test]
fn the_default_mount_switches_fuse_over_io_uring_on() {
    if !can_mount() {
        return;
    }
    if !Path::new(ENABLE_URING).exists() {
        let m = Mounted::new_as_given("");
        assert_transport(&m, "");
        assert!(mount_info(&m).contains("transport=/dev/fuse (this kernel has no FUSE over io_uring"));
        return;
    }
    // another mount (a test running beside this one) may set Y between our N and our mount:
    // then this mount found Y and says nothing about switching; try again
    for attempt in 0..10 {
        std::fs::write(ENABLE_URING, b"N").unwrap();
        let m = Mounted::new_as_given("");
        assert_transport(&m, "");
        assert_eq!(std::fs::read_to_string(ENABLE_URING).unwrap().trim(), "Y");
        let info = mount_info(&m);
        let transport = info.lines().find_map(|l| l.strip_prefix("transport=")).expect("transport line").to_string();
        assert!(transport.starts_with("io_uring, "), "{info}");
        let lines = log_lines(&m, m.daemon_pid());
        let mounted = lines.iter().find(|l| l.contains("mounted")).expect("mounted line");
        if transport.contains("this mount set") {
            assert!(mounted.contains("this mount set /sys/module/fuse/parameters/enable_uring to Y"), "{mounted}");
            return;
        }
        eprintln!("attempt {attempt}: another mount set enable_uring first");
    }
    panic!("no default mount switched enable_uring from N to Y in 10 attempts");
}

/// `uring=off` opts out: /dev/fuse, with one log line saying why and how to get the fast path.
#[test]
fn uring_off_serves_dev_fuse_and_says_why() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("uring=off");
    assert_transport(&m, "uring=off");
    assert!(mount_info(&m).contains("transport=/dev/fuse (uring=off was given"), "{}", mount_info(&m));
    let why: Vec<_> =
        log_lines(&m, m.daemon_pid()).into_iter().filter(|l| l.contains("requests come through /dev/fuse")).collect();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why[0].contains("leave it out for FUSE over io_uring"), "{}", why[0]);
}

/// 500 MB of data whose every MiB differs (and compresses ~2:1), from a seed.
fn chunk(seed: u64, i: u64) -> Vec<u8> {
    let mut x = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut out = vec![0u8; 1 << 20];
    for w in out.chunks_mut(16) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[..8].copy_from_slice(&x.to_le_bytes());
        w[8..].copy_from_slice(b"squeezef");
    }
    out
}

fn has_live_thread(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// `umount MNT && squeezefs mount POOL MNT` failed with "pool … is already open" while the
/// old daemon was still flushing: the new mount now waits for it and mounts.
#[test]
fn a_mount_right_after_a_plain_umount_waits_for_the_flushing_daemon() {
    if !can_mount() {
        return;
    }
    const MIB: u64 = 500;
    let mut m = Mounted::new("compress=zstd:1");
    {
        let mut f = std::fs::File::create(m.path("big")).unwrap();
        for i in 0..MIB {
            f.write_all(&chunk(1, i)).unwrap();
        }
    }
    // and many small files: their metadata makes the daemon's final commit long enough
    // that the new mount usually finds it still closing the pool
    std::fs::create_dir(m.path("small")).unwrap();
    for i in 0..20_000 {
        std::fs::write(m.path(&format!("small/{i}")), i.to_string()).unwrap();
    }
    let old = m.daemon_pid();
    // plain umount(2), as `umount MNT` does: returns before the daemon has flushed
    assert_eq!(unsafe { libc::umount2(cstr(&m.mnt).as_ptr(), 0) }, 0, "umount: errno {}", errno());
    m.unmounted_by_hand();
    let still_flushing = has_live_thread(old);
    let t = Instant::now();
    let out = run(&["mount", m.pool.to_str().unwrap(), m.mnt.to_str().unwrap(), "-o", "allow_other,compress=zstd:1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mount right after umount failed: {stderr}");
    m.mounted_by_hand();
    eprintln!(
        "old daemon {old} still running after umount: {still_flushing}; mount took {:?}; stderr: {stderr}",
        t.elapsed()
    );
    if stderr.contains("waiting") {
        assert!(stderr.contains(&format!("pid {old}")), "the wait names the old daemon: {stderr}");
    }
    let mut f = std::fs::File::open(m.path("big")).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..MIB {
        std::io::Read::read_exact(&mut f, &mut buf).unwrap();
        assert!(buf == chunk(1, i), "MiB {i} differs after the remount");
    }
    assert_eq!(std::fs::metadata(m.path("big")).unwrap().len(), MIB << 20);
    for i in (0..20_000).step_by(997) {
        assert_eq!(std::fs::read_to_string(m.path(&format!("small/{i}"))).unwrap(), i.to_string());
    }
    assert_eq!(std::fs::read_dir(m.path("small")).unwrap().count(), 20_000);
}

/// A pool held by a live mount is refused at once, by a second mount and by fsck, naming
/// the daemon and its mount point.
#[test]
fn a_pool_held_by_a_live_mount_is_refused_at_once() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("");
    std::fs::write(m.path("f"), b"live").unwrap();
    let other = m.dir.path().join("mnt2");
    std::fs::create_dir(&other).unwrap();
    let pid = m.daemon_pid();
    for args in [
        vec!["mount", m.pool.to_str().unwrap(), other.to_str().unwrap()],
        vec!["fsck", m.pool.to_str().unwrap()],
        vec!["scrub", m.pool.to_str().unwrap()],
    ] {
        let t = Instant::now();
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded on a mounted pool");
        // a closing daemon is waited for up to 60 s: well under that means it did not wait,
        // with room for a debug build starting on a loaded machine
        assert!(t.elapsed() < Duration::from_secs(20), "{args:?} took {:?} to refuse", t.elapsed());
        assert!(stderr.contains("already open"), "{args:?}: {stderr}");
        assert!(stderr.contains(&format!("pid {pid}, mounted on {}", m.mnt.display())), "{args:?}: {stderr}");
        assert!(!stderr.contains("waiting"), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read(m.path("f")).unwrap(), b"live");
}

/// Scheduling classes of the threads of `pid` whose names start with `prefix`, by name:
/// field 41 of /proc/PID/task/TID/stat (0 SCHED_OTHER, 1 SCHED_FIFO, 5 SCHED_IDLE).
fn thread_classes(pid: i32, prefix: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let name = head.split_once('(').map_or("", |(_, n)| n).to_string();
        // fields after the name start at field 3 (state)
        let policy = rest.split_whitespace().nth(41 - 3).and_then(|p| p.parse().ok());
        if let (true, Some(p)) = (name.starts_with(prefix), policy) {
            out.push((name, p));
        }
    }
    out
}

/// Wait until every /dev/fuse thread of `pid` is in class `want` (each sets its class
/// before it waits for its next request); the classes seen otherwise.
fn devfuse_threads_reach(pid: i32, want: u32) -> Result<(), Vec<(String, u32)>> {
    let t = Instant::now();
    loop {
        let c = thread_classes(pid, "sqz-fuse-");
        let devfuse: Vec<_> = c.iter().filter(|(n, _)| n != "sqz-fuse-wait").collect();
        if !devfuse.is_empty() && devfuse.iter().all(|(_, p)| *p == want) {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(10) {
            return Err(c);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// /dev/fuse threads wait for requests as SCHED_FIFO when asked (`SQUEEZEFS_FUSE_SCHED=fifo`;
/// the default does so while every CPU is busy), handle large writes and reads as
/// SCHED_OTHER and wait as FIFO again afterwards; the helper an fsync goes to runs as
/// SCHED_OTHER whatever class the thread that started it was in; `normal` keeps every
/// thread SCHED_OTHER.
#[test]
fn devfuse_threads_wait_as_sched_fifo_when_asked_and_helpers_run_as_other() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new_as_given("uring=off");
    for (mode, want) in [("fifo", 1), ("normal", 0)] {
        m.umount();
        let out = std::process::Command::new(BIN)
            .env("SQUEEZEFS_FUSE_SCHED", mode)
            .args(["mount", m.pool.to_str().unwrap(), m.mnt.to_str().unwrap(), "-o", "allow_other,uring=off"])
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {}", String::from_utf8_lossy(&out.stderr));
        m.mounted_by_hand();
        let pid = m.daemon_pid();
        devfuse_threads_reach(pid, want).unwrap_or_else(|c| panic!("{mode}: classes after the mount {c:?}"));
        let data = chunk(7, 0);
        let mut f = std::fs::File::create(m.path(mode)).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        let helpers: Vec<_> =
            thread_classes(pid, "sqz-fuse-wait").into_iter().filter(|(n, _)| n == "sqz-fuse-wait").collect();
        assert!(!helpers.is_empty(), "{mode}: the fsync went to no helper thread");
        assert!(helpers.iter().all(|(_, p)| *p == 0), "{mode}: helper classes {helpers:?}");
        drop(f);
        assert!(std::fs::read(m.path(mode)).unwrap() == data, "{mode}: read back differs");
        devfuse_threads_reach(pid, want).unwrap_or_else(|c| panic!("{mode}: classes after writing {c:?}"));
    }
}
