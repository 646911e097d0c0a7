//! `squeezefs recompress` and background compression on a mounted squeezefs: per-level
//! stats change, `--if-different` skips, a daemon killed mid-way leaves every file readable
//! and the pool fsck-clean, writes during a job are never lost, a background run converts a
//! tree (across a remount) and stats shows it, and bad input gets a clear error.
mod mounted_common;
use mounted_common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Text that compresses at every level, different per seed.
fn text(seed: u64, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 80);
    let mut i = seed;
    while v.len() < n {
        v.extend_from_slice(
            format!("{seed}/{i}: the quick brown fox {} jumps over the lazy dog {}\n", i * 7919 % 1013, i % 17)
                .as_bytes(),
        );
        i += 1;
    }
    v.truncate(n);
    v
}

/// A tree of files under `dir`: (relative path, contents).
fn write_tree(dir: &Path, files: usize, size: usize) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..files {
        let sub = dir.join(format!("d{}", i % 3)).join(format!("e{}", i % 2));
        std::fs::create_dir_all(&sub).unwrap();
        let p = sub.join(format!("f{i}"));
        let data = text(i as u64 * 1000, size + i * 777);
        std::fs::write(&p, &data).unwrap();
        out.push((p, data));
    }
    out
}

fn check_tree(files: &[(PathBuf, Vec<u8>)]) {
    for (p, want) in files {
        let got = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(got == *want, "{}: content differs", p.display());
    }
}

/// `squeezefs stats --json PATH`: "alg:level" → uncompressed bytes, and the whole answer.
fn stats(p: &Path) -> (BTreeMap<String, u64>, serde_json::Value) {
    let out = run(&["stats", "--json", p.to_str().unwrap()]);
    assert!(out.status.success(), "stats: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (format!("{}:{}", r["algorithm"].as_str().unwrap(), r["level"]), r["uncompressed_bytes"].as_u64().unwrap())
        })
        .collect();
    (rows, v)
}

/// The levels holding more than a few bytes (short tails of files may stay raw).
fn main_levels(rows: &BTreeMap<String, u64>) -> Vec<String> {
    rows.iter().filter(|(_, b)| **b > 64 << 10).map(|(k, _)| k.clone()).collect()
}

fn recompress(args: &[&str]) -> std::process::Output {
    let mut a = vec!["recompress"];
    a.extend_from_slice(args);
    run(&a)
}

fn fsck_clean(pool: &Path) {
    let out = run(&["fsck", pool.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kill_daemon(m: &mut Mounted) {
    let pid = m.daemon_pid();
    unsafe { libc::kill(pid, libc::SIGKILL) };
    while unsafe { libc::kill(pid, 0) } == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    m.forget_dead_mount();
}

#[test]
fn recompress_changes_the_per_level_stats_of_a_tree_and_if_different_skips() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=lz4");
    let t = m.path("t");
    let files = write_tree(&t, 9, 300_000);
    std::fs::write(m.path("outside"), text(7, 500_000)).unwrap();
    let (before, _) = stats(&t);
    assert_eq!(main_levels(&before), vec!["lz4:1"]);
    let out = recompress(&["-r", "--to", "zstd:15", "--jobs", "2", t.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Rewrote") && said.contains("Stored:") && said.contains(" in 9 files"), "{said}");
    let (after, _) = stats(&t);
    assert_eq!(main_levels(&after), vec!["zstd:15"], "{after:?}");
    assert_eq!(before.values().sum::<u64>(), after.values().sum::<u64>(), "the same data");
    assert_eq!(main_levels(&stats(&m.path("outside")).0), vec!["lz4:1"], "outside the path: untouched");
    check_tree(&files);
    // again with --if-different: nothing to do
    let out = recompress(&["-r", "--to", "zstd-15", "--if-different", "--json", t.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["counts"]["records_rewritten"], 0, "{v}");
    let skipped: u64 = v["skipped"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(skipped, v["counts"]["records_total"].as_u64().unwrap(), "{v}");
    assert!(v["skipped"]["already stored so"].as_u64().unwrap() > 0, "{v}");
    // a file of the tree back to its own compression (the mount's lz4), one file alone
    let one = &files[0].0;
    let out = recompress(&["--if-different", one.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(main_levels(&stats(one).0), vec!["lz4:1"]);
    m.umount();
    fsck_clean(&m.pool);
    m.mount();
    check_tree(&files);
}

#[test]
fn a_daemon_killed_mid_recompress_leaves_every_file_readable_and_fsck_clean() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=lz4");
    let t = m.path("t");
    let files = write_tree(&t, 12, 3 << 20);
    // zstd:19 is slow: the job runs long enough to be killed in the middle
    let job = Command::new(BIN)
        .args(["recompress", "-r", "--to", "zstd:19", t.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        // stats commits what was rewritten so far: some records are durable at zstd:19
        let (rows, _) = stats(&t);
        if rows.contains_key("zstd:19") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no record rewritten after 2 minutes: {rows:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    kill_daemon(&mut m);
    let out = job.wait_with_output().unwrap();
    assert!(!out.status.success(), "the job cannot succeed without its daemon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recompress") && err.contains("daemon"), "{err}");
    fsck_clean(&m.pool);
    m.mount();
    check_tree(&files);
    let (rows, _) = stats(&t);
    assert!(rows.contains_key("zstd:19"), "the committed part stays rewritten: {rows:?}");
    assert!(rows.contains_key("lz4:1"), "the rest stays lz4: {rows:?}");
    // the job can simply be run again
    let out = recompress(&["-r", "--to", "zstd:3", "--jobs", "2", t.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    check_tree(&files);
}

#[test]
fn writes_during_a_recompress_are_never_lost() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=lz4");
    let t = m.path("t");
    let mut files = write_tree(&t, 6, 4 << 20);
    let mut job = Command::new(BIN)
        .args(["recompress", "-r", "--to", "zstd:12", "--jobs", "2", t.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // patch the files while the job runs, keeping the model; each patch fsynced or not
    let mut n = 0u64;
    let mut x = 0x9E3779B97F4A7C15u64;
    let t0 = Instant::now();
    loop {
        let done = job.try_wait().unwrap().is_some();
        if done && n >= 50 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "the job did not end");
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (p, model) = &mut files[(x % 6) as usize];
        let off = ((x >> 8) % (model.len() as u64 - 10_000)) as usize;
        let len = 1 + ((x >> 32) % 9000) as usize;
        let patch = text(1_000_000 + n, len);
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&patch, off as u64).unwrap();
        if n.is_multiple_of(7) {
            f.sync_data().unwrap();
        }
        model[off..off + len].copy_from_slice(&patch);
        n += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = job.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{n} patches during the job: {}", String::from_utf8_lossy(&out.stdout));
    check_tree(&files);
    m.umount();
    fsck_clean(&m.pool);
    m.mount();
    check_tree(&files);
}

/// Stats' background section: (pending records, converted records since mkfs).
fn background(p: &Path) -> (u64, u64, serde_json::Value) {
    let (_, v) = stats(p);
    let b = v["background"].clone();
    assert!(!b.is_null(), "stats has no background section: {v}");
    (b["pending"]["records"].as_u64().unwrap(), b["status"]["converted_records"].as_u64().unwrap(), b)
}

#[test]
fn a_background_run_converts_a_tree_across_a_remount_and_stats_shows_it() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=lz4,bg-idle=1s");
    let t = m.path("t");
    std::fs::create_dir(&t).unwrap();
    let out = run(&["prop", "set", t.to_str().unwrap(), "background_compression=zstd:15"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = write_tree(&t, 8, 2 << 20);
    std::fs::write(m.path("plain"), text(5, 1 << 20)).unwrap();
    let (rows, _) = stats(&t);
    assert_eq!(main_levels(&rows), vec!["lz4:1"], "written fast");
    let (pending0, _, b) = background(&t);
    assert!(pending0 > 100, "{b}");
    // some conversions, then a remount in the middle
    let t0 = Instant::now();
    loop {
        let (pending, converted, b) = background(&t);
        if converted > 0 && pending > 0 {
            break;
        }
        assert!(pending > 0, "converted everything before the remount: slow the test down ({b})");
        assert!(t0.elapsed() < Duration::from_secs(120), "nothing converted: {b}");
        std::thread::sleep(Duration::from_millis(200));
    }
    m.remount();
    let t0 = Instant::now();
    let b = loop {
        let (pending, _, b) = background(&t);
        if pending == 0 {
            break b;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "background compression did not finish: {b}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let (rows, v) = stats(&t);
    assert_eq!(main_levels(&rows), vec!["zstd:15"], "{rows:?}");
    assert!(b["status"]["converted_records"].as_u64().unwrap() >= pending0, "{b}");
    assert!(b["status"]["converted_after"].as_u64() < b["status"]["converted_before"].as_u64(), "{b}");
    let out = run(&["stats", t.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("Background compression:") && shown.contains("converted (pool)"), "{shown}");
    assert_eq!(main_levels(&stats(&m.path("plain")).0), vec!["lz4:1"], "no background codec there: {v}");
    check_tree(&files);
    m.umount();
    fsck_clean(&m.pool);
}

#[test]
fn bad_input_gets_a_clear_error() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=lz4");
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("f"), text(1, 200_000)).unwrap();
    // durable before the daemon is killed below (stats commits everything written)
    stats(&d);
    let err = |args: &[&str]| {
        let out = recompress(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = err(&[m.path("nope").to_str().unwrap()]);
    assert!(e.contains("nope") && e.contains("no such file"), "{e}");
    let outside = m.dir.path().join("elsewhere");
    std::fs::write(&outside, b"x").unwrap();
    let e = err(&[outside.to_str().unwrap()]);
    assert!(e.contains("is not on a squeezefs mount"), "{e}");
    let e = err(&["--to", "zstd:99", d.to_str().unwrap()]);
    assert!(e.contains("zstd:99") && e.contains("level"), "{e}");
    let e = err(&["--to", "brotli", d.to_str().unwrap()]);
    assert!(e.contains("brotli"), "{e}");
    let e = err(&[d.to_str().unwrap()]);
    assert!(e.contains("is a directory") && e.contains("-r"), "{e}");
    let e = err(&["--jobs", "0", d.to_str().unwrap()]);
    assert!(e.contains("--jobs"), "{e}");
    // no daemon: the socket gone (as after a daemon of an older version, or a crash that
    // left the mount), then the daemon itself
    let sock = m.pool.join("control.sock");
    std::fs::remove_file(&sock).unwrap();
    let e = err(&["-r", d.to_str().unwrap()]);
    assert!(e.contains("no squeezefs daemon serves the pool") && e.contains("control.sock"), "{e}");
    // the daemon killed, its mount still attached: every call there fails with ENOTCONN
    let pid = m.daemon_pid();
    unsafe { libc::kill(pid, libc::SIGKILL) };
    while unsafe { libc::kill(pid, 0) } == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = err(&["-r", d.to_str().unwrap()]);
    assert!(e.contains("daemon serving this mount is gone") && e.contains("umount -l"), "{e}");
    m.forget_dead_mount();
    std::os::unix::net::UnixListener::bind(&sock).map(drop).unwrap();
    m.mount();
    // the socket a dead daemon left was replaced by the new daemon's
    let out = recompress(&["-r", "--to", "zstd:3", d.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
