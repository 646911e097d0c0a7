//! A pool on an object device restored from its bucket alone, against a real S3 server
//! (`rclone serve s3`, started here): files written through a mount, the unmount's last
//! metadata backup, the pool directory deleted, `squeezefs restore` into a new one, and a
//! mount of it serves exactly those files, byte for byte, fsck clean, read-only and then
//! read-write. A backup whose manifest never arrived (a torn upload) is passed over for the
//! one before it; bad targets and stores are one clear line.
mod mounted_common;
use mounted_common::*;
use squeezefs_object::testing::{S3Server, SECRET_KEY};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const BUCKET: &str = "squeezefs-restore";

fn fails(out: std::process::Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} succeeded: {}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: not one line: {err}");
    err
}

fn content(seed: u64, len: usize) -> Vec<u8> {
    let words = [&b"restore "[..], b"backup ", b"bucket ", b"manifest ", b"segment "];
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

fn write_file(path: &Path, data: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// Every regular file under `root` (relative path → bytes), and every symlink's target.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                out.insert(rel, std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes());
            } else if t.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn manifests(s3: &S3Server, prefix: &str) -> Vec<String> {
    s3.objects(BUCKET, &format!("{prefix}/backup")).into_iter().filter(|k| k.ends_with(".done")).collect()
}

fn no_secret_in(pool: &Path) {
    for e in std::fs::read_dir(pool).unwrap().flatten() {
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
fn a_pool_restored_from_its_bucket_serves_the_files_of_its_last_backup() {
    if !can_mount() {
        return;
    }
    let s3 = S3Server::start(BUCKET);
    let env = s3.env();
    let dir = tempfile::Builder::new().prefix("sqzrestore").tempdir_in("/tmp").unwrap();
    let (pool, mnt) = (dir.path().join("pool"), dir.path().join("mnt"));
    std::fs::create_dir(&mnt).unwrap();
    let (p, m) = (pool.to_str().unwrap(), mnt.to_str().unwrap());
    let spec = format!("s3://{BUCKET}/pools/lost");
    ok(run_env(&env, &["mkfs", p, "--device", &spec]), "mkfs");
    let _guard = Unmount(m.to_string());
    ok(run_env(&env, &["mount", p, m, "-o", "compress=zstd:3"]), "mount");
    for (i, n) in [0usize, 1, 4095, 131_072, 700_000, 3_000_000].into_iter().enumerate() {
        write_file(&mnt.join(format!("f{i}")), &content(i as u64, n));
    }
    std::fs::create_dir_all(mnt.join("a/b")).unwrap();
    write_file(&mnt.join("a/b/deep"), b"deep in the tree");
    std::os::unix::fs::symlink("../f3", mnt.join("a/link")).unwrap();
    std::fs::write(mnt.join("a/unsynced"), content(99, 50_000)).unwrap();
    let before = tree(&mnt);
    // the unmount commits the last txg and then writes the last backup
    ok(run_env(&env, &["umount", m]), "umount");
    assert!(!manifests(&s3, "pools/lost").is_empty(), "no backup in the bucket");

    // the machine is gone: nothing of the pool directory is left
    std::fs::remove_dir_all(&pool).unwrap();
    let out = ok(run_env(&env, &["restore", &spec, p]), "restore");
    assert!(out.contains("restored pool") && out.contains("backup"), "{out}");
    no_secret_in(&pool);
    ok(run_env(&env, &["mount", p, m, "-o", "ro"]), "read-only mount of the restored pool");
    let after = tree(&mnt);
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    for (k, v) in &before {
        assert!(after[k] == *v, "{k} differs after the restore");
    }
    ok(run_env(&env, &["umount", m]), "umount ro");
    let fsck = ok(run_env(&env, &["fsck", p]), "fsck of the restored pool");
    assert!(fsck.contains("pool is clean"), "{fsck}");

    // and it is a pool like any other: written, unmounted, checked
    ok(run_env(&env, &["mount", p, m]), "read-write mount of the restored pool");
    write_file(&mnt.join("after-restore"), &content(7, 200_000));
    std::fs::remove_file(mnt.join("f4")).unwrap();
    ok(run_env(&env, &["umount", m]), "umount rw");
    let fsck = ok(run_env(&env, &["fsck", p]), "fsck after writing");
    assert!(fsck.contains("pool is clean"), "{fsck}");
    ok(run_env(&env, &["mount", p, m, "-o", "ro"]), "remount");
    assert_eq!(std::fs::read(mnt.join("after-restore")).unwrap(), content(7, 200_000));
    assert!(!mnt.join("f4").exists());
    assert!(std::fs::read(mnt.join("f5")).unwrap() == content(5, 3_000_000));
    ok(run_env(&env, &["umount", m]), "last umount");
    no_secret_in(&pool);
}

#[test]
fn a_torn_backup_is_passed_over_for_the_one_before() {
    if !can_mount() {
        return;
    }
    let s3 = S3Server::start(BUCKET);
    let env = s3.env();
    let dir = tempfile::Builder::new().prefix("sqztorn").tempdir_in("/tmp").unwrap();
    let (pool, mnt) = (dir.path().join("pool"), dir.path().join("mnt"));
    std::fs::create_dir(&mnt).unwrap();
    let (p, m) = (pool.to_str().unwrap(), mnt.to_str().unwrap());
    let spec = format!("s3://{BUCKET}/pools/torn");
    ok(run_env(&env, &["mkfs", p, "--device", &spec]), "mkfs");
    let _guard = Unmount(m.to_string());
    ok(run_env(&env, &["mount", p, m]), "mount");
    write_file(&mnt.join("kept"), &content(1, 1_000_000));
    write_file(&mnt.join("changed"), &content(2, 300_000));
    let first = tree(&mnt);
    ok(run_env(&env, &["umount", m]), "umount");
    let first_backups = manifests(&s3, "pools/torn");
    assert!(!first_backups.is_empty());

    ok(run_env(&env, &["mount", p, m]), "second mount");
    write_file(&mnt.join("new"), &content(3, 500_000));
    write_file(&mnt.join("changed"), &content(4, 100_000));
    ok(run_env(&env, &["umount", m]), "second umount");
    // every backup of the second mount lost its manifest: their uploads were cut off
    let later: Vec<String> = manifests(&s3, "pools/torn").into_iter().filter(|k| !first_backups.contains(k)).collect();
    assert!(!later.is_empty(), "the second mount wrote no backup");
    for k in &later {
        s3.delete_object(BUCKET, k);
    }

    std::fs::remove_dir_all(&pool).unwrap();
    ok(run_env(&env, &["restore", &spec, p]), "restore");
    ok(run_env(&env, &["mount", p, m, "-o", "ro"]), "mount of the restored pool");
    let got = tree(&mnt);
    assert_eq!(got.keys().collect::<Vec<_>>(), first.keys().collect::<Vec<_>>());
    for (k, v) in &first {
        assert!(got[k] == *v, "{k} is not as the first backup has it");
    }
    ok(run_env(&env, &["umount", m]), "umount");
    let fsck = ok(run_env(&env, &["fsck", p]), "fsck");
    assert!(fsck.contains("pool is clean"), "{fsck}");
}

#[test]
fn a_restore_that_cannot_be_done_is_one_clear_line() {
    let s3 = S3Server::start(BUCKET);
    let env = s3.env();
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    let err = fails(run_env(&env, &["restore", &format!("s3://{BUCKET}/nothing/here"), p]), "restore of nothing");
    assert!(err.contains("no complete metadata backup") && err.contains("holds no pool"), "{err}");
    let err = fails(run_env(&env, &["restore", "s3://no-such-bucket/x", p]), "restore from a missing bucket");
    assert!(err.contains("the bucket does not exist"), "{err}");
    let mut bad = env.clone();
    bad.insert("AWS_SECRET_ACCESS_KEY".into(), "not-the-key".into());
    let err = fails(run_env(&bad, &["restore", &format!("s3://{BUCKET}/x"), p]), "restore with a wrong key");
    assert!(err.contains("access denied") && !err.contains("not-the-key"), "{err}");
    let err = fails(run_env(&env, &["restore", "/not/s3", p]), "restore from a path");
    assert!(err.contains("not an object device"), "{err}");
    std::fs::create_dir(&pool).unwrap();
    std::fs::write(pool.join("something"), b"x").unwrap();
    let err = fails(run_env(&env, &["restore", &format!("s3://{BUCKET}/x"), p]), "restore into a full directory");
    assert!(err.contains("is not empty"), "{err}");
    assert!(!pool.join("meta.seal").exists());
}
