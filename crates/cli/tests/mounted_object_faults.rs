//! Failures of the object store under a mounted pool, injected by a fault proxy in front of
//! a real S3 server (`rclone serve s3`, started here): the server killed and restarted
//! during a large write, a 503 SlowDown / 500 storm, writes blocked past `s3-timeout=`, a
//! cold read from a dead store, and an unreachable endpoint at mkfs and mount. What they
//! show is the behaviour docs/usage.md promises: transient errors are retried, a store that
//! stays away gives EIO after `s3-timeout=` (never a hang) while cached reads go on,
//! nothing fsync acknowledged is lost, the mount resumes by itself, and fsck is clean after.
mod mounted_common;
use mounted_common::*;
use squeezefs_object::testing::{FaultProxy, Injected, S3Server};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BUCKET: &str = "squeezefs-faults";

/// Compressible but not trivially so, different per seed.
fn content(seed: u64, len: usize) -> Vec<u8> {
    let words = [&b"object "[..], b"segment ", b"bucket ", b"prefix ", b"record "];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 5) as usize]);
        out.extend_from_slice(&x.to_le_bytes()[..(x % 6) as usize]);
    }
    out.truncate(len);
    out
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    for c in data.chunks(1 << 20) {
        f.write_all(c)?;
    }
    f.sync_all()
}

/// `f` on a thread of its own, its result within `limit` or the test fails (a hang).
fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what} did not return within {limit:?}"))
}

struct Pool {
    _dir: tempfile::TempDir,
    pool: PathBuf,
    mnt: PathBuf,
}

impl Pool {
    fn new(env: &HashMap<String, String>, prefix: &str) -> Pool {
        let dir = tempfile::Builder::new().prefix("sqzfault").tempdir_in("/tmp").unwrap();
        let (pool, mnt) = (dir.path().join("pool"), dir.path().join("mnt"));
        std::fs::create_dir(&mnt).unwrap();
        let spec = format!("s3://{BUCKET}/{prefix}");
        ok(run_env(env, &["mkfs", pool.to_str().unwrap(), "--device", &spec]), "mkfs");
        Pool { _dir: dir, pool, mnt }
    }

    fn p(&self) -> &str {
        self.pool.to_str().unwrap()
    }

    fn m(&self) -> &str {
        self.mnt.to_str().unwrap()
    }

    fn mount(&self, env: &HashMap<String, String>, opts: &str) {
        ok(run_env(env, &["mount", self.p(), self.m(), "-o", opts]), "mount");
    }

    fn umount(&self, env: &HashMap<String, String>) {
        ok(run_env(env, &["umount", self.m()]), "umount");
    }

    /// fsck clean, then every file of `files` reads back whole with the read cache emptied.
    fn check(&self, env: &HashMap<String, String>, files: &[(&str, &[u8])]) {
        let fsck = ok(run_env(env, &["fsck", self.p()]), "fsck");
        assert!(fsck.contains("pool is clean"), "{fsck}");
        let _ = std::fs::remove_dir_all(self.pool.join("object.0.cache"));
        self.mount(env, "ro");
        for (name, data) in files {
            let got = std::fs::read(self.mnt.join(name)).unwrap();
            assert!(got == *data, "{name} differs after the remount ({} bytes, {} expected)", got.len(), data.len());
        }
        self.umount(env);
    }
}

/// Write and fsync `data` as `name` again and again until it succeeds (the mount resumed by
/// itself once the store answers again) or `limit` passes; the daemon log on failure.
fn resumes(pool: &Pool, name: &str, data: &[u8], limit: Duration) {
    let t0 = Instant::now();
    let (p, d) = (pool.mnt.join(name), data.to_vec());
    let mut last = None;
    while t0.elapsed() < limit {
        let (p, d) = (p.clone(), d.clone());
        match within(limit, "an fsync after the store came back", move || write_synced(&p, &d)) {
            Ok(()) => return,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = std::fs::read_to_string(pool.pool.join("squeezefs.log")).unwrap_or_default();
    panic!("the mount did not resume within {limit:?} after the store came back: {last:?}\n{log}");
}

fn is_eio(r: &std::io::Result<()>) -> bool {
    matches!(r, Err(e) if e.raw_os_error() == Some(libc::EIO))
}

#[test]
fn a_store_killed_and_restarted_during_a_large_write_loses_nothing() {
    if !can_mount() {
        return;
    }
    let mut s3 = S3Server::start(BUCKET);
    let proxy = FaultProxy::start(s3.addr());
    let env = proxy.env(s3.env());
    let pool = Pool::new(&env, "killed");
    let _guard = Unmount(pool.m().to_string());
    pool.mount(&env, "s3-timeout=30");
    let before = content(1, 3_000_000);
    write_synced(&pool.mnt.join("before"), &before).unwrap();
    // the upload of the large file is slow enough to be cut in the middle
    proxy.set_bandwidth(Some(2 << 20));
    let big = content(2, 40_000_000);
    let (path, data) = (pool.mnt.join("big"), big.clone());
    let puts = proxy.requests("PUT") + proxy.requests("POST");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(write_synced(&path, &data));
    });
    let t0 = Instant::now();
    while proxy.requests("PUT") + proxy.requests("POST") == puts {
        assert!(t0.elapsed() < Duration::from_secs(60), "no upload began 60 s into the large write");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    s3.stop();
    std::thread::sleep(Duration::from_secs(3));
    s3.restart();
    proxy.set_bandwidth(None);
    let big_result = rx.recv_timeout(Duration::from_secs(90)).expect("the large write hung after the store came back");
    assert!(big_result.is_ok() || is_eio(&big_result), "{big_result:?}");
    // while and after: what was fsynced reads back, and the mount takes data again by itself
    assert!(std::fs::read(pool.mnt.join("before")).unwrap() == before);
    let after = content(3, 1_000_000);
    resumes(&pool, "after", &after, Duration::from_secs(60));
    pool.umount(&env);
    let mut files: Vec<(&str, &[u8])> = vec![("before", &before), ("after", &after)];
    if big_result.is_ok() {
        files.push(("big", &big));
    }
    pool.check(&env, &files);
}

#[test]
fn a_slowdown_storm_and_500s_are_retried_and_the_data_is_whole() {
    if !can_mount() {
        return;
    }
    let s3 = S3Server::start(BUCKET);
    let proxy = FaultProxy::start(s3.addr());
    let env = proxy.env(s3.env());
    let pool = Pool::new(&env, "storm");
    let _guard = Unmount(pool.m().to_string());
    pool.mount(&env, "s3-timeout=60");
    let one = content(4, 3_000_000);
    let two = content(5, 12_000_000);
    proxy.fail_for(Injected::SlowDown, Duration::from_secs(4));
    let t0 = Instant::now();
    write_synced(&pool.mnt.join("one"), &one).expect("fsync through a SlowDown storm");
    let slow = proxy.injected();
    assert!(slow > 0, "the storm answered no request");
    proxy.fail_next(Injected::InternalError, 4);
    write_synced(&pool.mnt.join("two"), &two).expect("fsync through 500s");
    assert!(proxy.injected() > slow, "no request met a 500");
    proxy.fail_next(Injected::Reset, 3);
    let three = content(6, 500_000);
    write_synced(&pool.mnt.join("three"), &three).expect("fsync through connection resets");
    assert!(t0.elapsed() < Duration::from_secs(60), "the storm took {:?}", t0.elapsed());
    pool.umount(&env);
    pool.check(&env, &[("one", &one), ("two", &two), ("three", &three)]);
}

#[test]
fn writes_blocked_past_s3_timeout_get_eio_cached_reads_go_on_and_the_mount_resumes() {
    if !can_mount() {
        return;
    }
    let s3 = S3Server::start(BUCKET);
    let proxy = std::sync::Arc::new(FaultProxy::start(s3.addr()));
    let env = proxy.env(s3.env());
    let pool = Pool::new(&env, "blocked");
    let _guard = Unmount(pool.m().to_string());
    pool.mount(&env, "s3-timeout=3");
    let cached = content(7, 2_000_000);
    write_synced(&pool.mnt.join("cached"), &cached).unwrap();
    // every request now hangs: no refusal to notice, only time
    proxy.set_delay(Duration::from_secs(3600));
    let p = pool.mnt.join("held");
    let t0 = Instant::now();
    let r =
        within(Duration::from_secs(40), "an fsync to a blocked store", move || write_synced(&p, &content(8, 600_000)));
    let waited = t0.elapsed();
    assert!(is_eio(&r), "{r:?}");
    assert!(waited >= Duration::from_secs(2), "EIO after {waited:?}, before s3-timeout=3");
    assert!(waited < Duration::from_secs(20), "EIO only after {waited:?} with s3-timeout=3");
    let p = pool.mnt.join("cached");
    let got = within(Duration::from_secs(10), "a cached read", move || std::fs::read(p).unwrap());
    assert!(got == cached, "a cached read failed while the store was blocked");
    // the held txg is tried again every second meanwhile; each try must not add its bytes
    // to the held ones (they would all be uploaded once the store is back)
    proxy.heal();
    proxy.set_dead(true);
    std::thread::sleep(Duration::from_secs(8));
    let sent = proxy.bytes_sent();
    proxy.heal();
    let resumed = content(9, 800_000);
    resumes(&pool, "resumed", &resumed, Duration::from_secs(30));
    let after = proxy.bytes_sent() - sent;
    // about 2 MB with data, map and backups; each held try adding its bytes made it 3.2 MB
    assert!(after < 2_600_000, "{after} bytes went up after the outage for 1.4 MB written: retries piled up");
    pool.umount(&env);
    pool.check(&env, &[("cached", &cached), ("resumed", &resumed)]);
}

#[test]
fn a_cold_read_from_a_dead_store_is_eio_in_bounded_time_and_the_mount_lives() {
    if !can_mount() {
        return;
    }
    let s3 = S3Server::start(BUCKET);
    let proxy = FaultProxy::start(s3.addr());
    let env = proxy.env(s3.env());
    let pool = Pool::new(&env, "cold");
    let _guard = Unmount(pool.m().to_string());
    pool.mount(&env, "s3-timeout=3");
    let data = content(10, 4_000_000);
    write_synced(&pool.mnt.join("cold"), &data).unwrap();
    pool.umount(&env);
    std::fs::remove_dir_all(pool.pool.join("object.0.cache")).unwrap();
    pool.mount(&env, "ro,s3-timeout=3");
    let gets = proxy.requests("GET");
    proxy.set_dead(true);
    let p = pool.mnt.join("cold");
    let t0 = Instant::now();
    let r = within(Duration::from_secs(60), "a cold read from a dead store", move || std::fs::read(p).map(|_| ()));
    assert!(is_eio(&r), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(20), "EIO only after {:?} with s3-timeout=3", t0.elapsed());
    proxy.set_dead(false);
    // a read just after a failed one may still fail (READ_BACKOFF); then the store is asked
    let t1 = Instant::now();
    let got = loop {
        match std::fs::read(pool.mnt.join("cold")) {
            Ok(d) => break d,
            Err(e) => assert!(t1.elapsed() < Duration::from_secs(10), "the mount is dead after a failed read: {e}"),
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(got == data, "the read after the store came back differs");
    assert!(proxy.requests("GET") > gets, "the data came without a GET");
    pool.umount(&env);
}

#[test]
fn an_unreachable_endpoint_at_mkfs_and_mount_is_one_clear_line() {
    let s3 = S3Server::start(BUCKET);
    let proxy = FaultProxy::start(s3.addr());
    let env = proxy.env(s3.env());
    let pool = Pool::new(&env, "unreachable");
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("pool");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    proxy.set_dead(true);
    let t0 = Instant::now();
    let out = run_env(&env, &["mkfs", other.to_str().unwrap(), "--device", &format!("s3://{BUCKET}/other")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("did not answer"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!other.join("meta.redb").exists() || !other.exists(), "mkfs left a pool behind");
    let out = run_env(&env, &["mount", pool.p(), mnt.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("did not answer"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(90), "the two refusals took {:?}", t0.elapsed());
}

#[test]
fn a_wrong_key_or_a_missing_bucket_at_mount_is_one_clear_line() {
    let s3 = S3Server::start(BUCKET);
    let env = s3.env();
    let pool = Pool::new(&env, "mountcheck");
    let mut bad = env.clone();
    bad.insert("AWS_SECRET_ACCESS_KEY".into(), "not-the-key".into());
    let out = run_env(&bad, &["mount", pool.p(), pool.m()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("access denied"), "{err}");
    assert!(!err.contains("not-the-key") && !err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // another server, without the pool's bucket
    let other = S3Server::start("another-bucket");
    let out = run_env(&other.env(), &["mount", pool.p(), pool.m()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("the bucket does not exist"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
