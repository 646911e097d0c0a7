//! A pool on an object device (`mkfs --device s3://BUCKET/PREFIX`) against a real S3 server
//! (`rclone serve s3`, started here): files written and fsynced through a mount read back
//! after a remount with the read cache emptied, fsck finds the pool whole, no secret lands
//! in the pool directory, and a wrong key or a missing bucket is one clear line. The mount
//! options of object devices take effect (`s3-cache-dir=`, `s3-cache=`, `s3-backup=`,
//! `s3-timeout=`: a store that stays away past it gives EIO while cached reads go on) and
//! bad values are refused in one line.
mod mounted_common;
use mounted_common::*;
use squeezefs_object::testing::{S3Server, SECRET_KEY};
use std::io::Write;

const BUCKET: &str = "squeezefs-pools";

fn content(seed: u64, len: usize) -> Vec<u8> {
    let words = [&b"object "[..], b"segment ", b"bucket ", b"prefix ", b"record "];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 5) as usize]);
        if x.is_multiple_of(3) {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out.truncate(len);
    out
}

#[test]
fn files_on_an_object_device_survive_a_remount() {
    if !can_mount() {
        return;
    }
    let s3 = S3Server::start(BUCKET);
    let env = s3.env();
    let dir = tempfile::Builder::new().prefix("sqzobj").tempdir_in("/tmp").unwrap();
    let pool = dir.path().join("pool");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (p, m) = (pool.to_str().unwrap(), mnt.to_str().unwrap());
    let spec = format!("s3://{BUCKET}/pools/one");
    let out = ok(run_env(&env, &["mkfs", p, "--device", &spec]), "mkfs");
    assert!(out.contains("1 device"), "{out}");
    let _guard = Unmount(m.to_string());
    ok(run_env(&env, &["mount", p, m, "-o", "compress=zstd:3"]), "mount");
    let sizes = [0usize, 1, 3000, 131_072, 1_000_000, 5_000_000];
    for (i, &n) in sizes.iter().enumerate() {
        let mut f = std::fs::File::create(mnt.join(format!("f{i}"))).unwrap();
        f.write_all(&content(i as u64, n)).unwrap();
        f.sync_all().unwrap();
    }
    std::fs::create_dir(mnt.join("d")).unwrap();
    std::fs::write(mnt.join("d/small"), b"hello object store").unwrap();
    ok(run_env(&env, &["umount", m]), "umount");
    let segments = s3.objects(BUCKET, "pools/one/segments");
    assert!(!segments.is_empty(), "nothing was uploaded");
    // the read cache emptied: every byte comes back through ranged GETs
    std::fs::remove_dir_all(pool.join("object.0.cache")).unwrap();
    ok(run_env(&env, &["mount", p, m]), "second mount");
    for (i, &n) in sizes.iter().enumerate() {
        let got = std::fs::read(mnt.join(format!("f{i}"))).unwrap();
        assert!(got == content(i as u64, n), "f{i} differs after the remount");
    }
    assert_eq!(std::fs::read(mnt.join("d/small")).unwrap(), b"hello object store");
    ok(run_env(&env, &["umount", m]), "second umount");
    let fsck = ok(run_env(&env, &["fsck", p]), "fsck");
    assert!(fsck.contains("pool is clean"), "{fsck}");
    // credentials live in the environment only
    for e in std::fs::read_dir(&pool).unwrap().flatten() {
        if e.path().is_file() {
            let bytes = std::fs::read(e.path()).unwrap();
            assert!(
                !bytes.windows(SECRET_KEY.len()).any(|w| w == SECRET_KEY.as_bytes()),
                "{:?} holds the secret",
                e.path()
            );
        }
    }
}

#[test]
fn a_wrong_key_or_a_missing_bucket_is_one_clear_line() {
    let s3 = S3Server::start(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    let mut bad = s3.env();
    bad.insert("AWS_SECRET_ACCESS_KEY".into(), "not-the-key".into());
    let out = run_env(&bad, &["mkfs", p, "--device", &format!("s3://{BUCKET}/x")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("access denied") && !err.contains("not-the-key"), "{err}");
    let out = run_env(&s3.env(), &["mkfs", p, "--device", "s3://no-such-bucket/x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("the bucket does not exist"), "{err}");
    let out = run_env(&s3.env(), &["mkfs", p, "--device", "s3://Bad_Bucket/x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not valid"), "{err}");
    let mut none = s3.env();
    none.remove("AWS_ACCESS_KEY_ID");
    none.insert("HOME".into(), dir.path().to_str().unwrap().into());
    let out = run_env(&none, &["mkfs", p, "--device", &format!("s3://{BUCKET}/x")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no credentials"), "{err}");
}

fn backups(s3: &S3Server, prefix: &str) -> usize {
    s3.objects(BUCKET, &format!("{prefix}/backup")).iter().filter(|k| k.ends_with(".done")).count()
}

#[test]
fn object_mount_options_take_effect_and_a_store_gone_past_s3_timeout_gives_eio() {
    if !can_mount() {
        return;
    }
    let mut s3 = S3Server::start(BUCKET);
    let env = s3.env();
    let dir = tempfile::Builder::new().prefix("sqzobjopt").tempdir_in("/tmp").unwrap();
    let (pool, mnt, cache) = (dir.path().join("pool"), dir.path().join("mnt"), dir.path().join("cache"));
    std::fs::create_dir(&mnt).unwrap();
    let (p, m) = (pool.to_str().unwrap(), mnt.to_str().unwrap());
    ok(run_env(&env, &["mkfs", p, "--device", &format!("s3://{BUCKET}/pools/opts")]), "mkfs");
    let _guard = Unmount(m.to_string());
    // bad values: refused before anything is mounted, one line naming what is accepted
    for (opt, why) in [
        ("s3-timeout=0", "out of range"),
        ("s3-cache=10K", "too small"),
        ("s3-backup=soon", "not a duration"),
        ("s3-cache-dir=rel", "not an absolute path"),
        ("s3-cache-dir=/no/such/dir", "no such directory"),
    ] {
        let out = run_env(&env, &["mount", p, m, "-o", opt]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{opt}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{opt}: {err}");
    }
    std::fs::create_dir(&cache).unwrap();
    let opts = format!("s3-cache-dir={},s3-cache=8M,s3-backup=1,s3-timeout=3", cache.display());
    ok(run_env(&env, &["mount", p, m, "-o", &opts]), "mount with object options");
    let data = content(11, 2_000_000);
    let mut f = std::fs::File::create(mnt.join("cached")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // the read cache is where s3-cache-dir= says: the uploaded blocks went there
    let cached = std::fs::read_dir(cache.join("object.0.cache")).map(|d| d.count()).unwrap_or(0);
    assert!(cached > 0, "nothing in the read cache of s3-cache-dir=");
    // s3-backup=1: a backup follows within seconds, without an unmount
    let t0 = std::time::Instant::now();
    while backups(&s3, "pools/opts") == 0 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "no backup 20 s after a commit with s3-backup=1");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    // the store goes away: an fsync fails with EIO after about s3-timeout, cached reads go on
    s3.stop();
    let t0 = std::time::Instant::now();
    let mut g = std::fs::File::create(mnt.join("unsent")).unwrap();
    g.write_all(&content(12, 300_000)).unwrap();
    let err = g.sync_all().unwrap_err();
    let waited = t0.elapsed();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(waited >= std::time::Duration::from_secs(2), "EIO after {waited:?}, before s3-timeout=3");
    assert!(waited < std::time::Duration::from_secs(60), "EIO only after {waited:?}");
    assert!(std::fs::read(mnt.join("cached")).unwrap() == data, "a cached read failed while the store was away");
    drop(g);
    s3.restart();
    let _ = run_env(&env, &["umount", m]);
    // what fsync acknowledged is whole
    ok(run_env(&env, &["mount", p, m, "-o", "ro"]), "remount");
    assert!(std::fs::read(mnt.join("cached")).unwrap() == data);
    ok(run_env(&env, &["umount", m]), "umount");
    let fsck = ok(run_env(&env, &["fsck", p]), "fsck");
    assert!(fsck.contains("pool is clean"), "{fsck}");
}
