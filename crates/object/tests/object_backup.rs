//! Metadata backups in the bucket against a real S3 server (`rclone serve s3`): a segment
//! that only a kept backup references survives overwrites, repack and a reopen, and goes
//! once that backup is pruned; the newest complete backup is the one found, a backup
//! without its manifest (a torn upload) or with a damaged image is passed over, and the
//! map of a found backup opens as a device that reads the data of that backup.

use squeezefs_device::Device;
use squeezefs_object::testing::S3Server;
use squeezefs_object::{ObjectDevice, ObjectError, ObjectOptions, ObjectSpec};
use std::path::Path;

const BUCKET: &str = "backup-bucket";

fn opts(dir: &Path) -> ObjectOptions {
    let mut o = ObjectOptions::new(dir.join("cache"));
    o.segment_bytes = 256 << 10;
    o.cache_bytes = 0;
    o
}

fn pattern(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn read(d: &ObjectDevice, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    d.read_at(&mut b, off).unwrap();
    b
}

/// Write 1 MiB of `seed`'s bytes at 0 (four 256 KiB segments) and sync.
fn fill(d: &ObjectDevice, seed: u64) {
    for i in 0..4u64 {
        d.write_at(&pattern(seed * 10 + i, 256 << 10), i * (256 << 10)).unwrap();
    }
    d.sync().unwrap();
}

fn segments(s3: &S3Server, prefix: &str) -> Vec<String> {
    s3.objects(BUCKET, &format!("{prefix}/segments"))
}

fn backup(d: &ObjectDevice, txg: u64) -> u64 {
    let snap = d.snapshot_map().unwrap();
    d.write_backup(snap, txg, format!("seal of txg {txg}").into_bytes(), 2).unwrap().generation
}

#[test]
fn segments_of_kept_backups_outlive_overwrites_and_go_when_pruned() {
    let s3 = S3Server::start(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let sp = ObjectSpec::parse(&format!("s3://{BUCKET}/p")).unwrap();
    let map = dir.path().join("object.0.redb");
    let d = ObjectDevice::create(&sp, &s3.config(), &map, opts(dir.path()), false).unwrap();
    fill(&d, 1);
    let first = segments(&s3, "p");
    assert_eq!(first.len(), 4, "{first:?}");
    let g1 = backup(&d, 1);
    assert_eq!(d.newest_backup_txg(), Some(1));

    // overwrite everything: the first segments lose every extent, yet gen 1 holds them
    fill(&d, 2);
    d.repack(u64::MAX).unwrap();
    d.sync().unwrap();
    let now = segments(&s3, "p");
    for s in &first {
        assert!(now.contains(s), "{s} deleted while backup {g1} references it: {now:?}");
    }
    assert_eq!(d.usage().deleted_segments, 0);

    // the backup restores as a device reading the data of its time
    let found = ObjectDevice::find_backup(&sp, &s3.config()).unwrap();
    assert_eq!((found.image.generation, found.image.txg), (g1, 1));
    assert_eq!(found.image.meta_seal, b"seal of txg 1");
    let restored = dir.path().join("restored.redb");
    ObjectDevice::restore_map(&restored, &found.image.map).unwrap();
    let mut ro = opts(dir.path());
    ro.read_only = true;
    ro.cache_dir = dir.path().join("cache-ro");
    let old = ObjectDevice::open(&sp, &s3.config(), &restored, ro.clone()).unwrap();
    for i in 0..4u64 {
        assert_eq!(read(&old, i * (256 << 10), 256 << 10), pattern(10 + i, 256 << 10), "block {i} of backup 1");
    }
    drop(old);

    // a reopen rebuilds the protection from the manifests in the bucket
    drop(d);
    let d = ObjectDevice::open(&sp, &s3.config(), &map, opts(dir.path())).unwrap();
    d.write_at(&pattern(77, 4096), 0).unwrap();
    d.sync().unwrap();
    let now = segments(&s3, "p");
    for s in &first {
        assert!(now.contains(s), "{s} deleted after a reopen while backup {g1} references it");
    }
    for i in 0..4u64 {
        let want = if i == 0 { pattern(77, 4096) } else { pattern(20 + i, 4096) };
        assert_eq!(read(&d, i * (256 << 10), 4096), want, "block {i}");
    }

    // two newer backups (keep 2): gen 1 is pruned, and the segments only it held go
    let g2 = backup(&d, 2);
    let now = segments(&s3, "p");
    assert!(first.iter().all(|s| now.contains(s)), "pruned too early");
    let g3 = backup(&d, 3);
    assert!(g1 < g2 && g2 < g3);
    let now = segments(&s3, "p");
    for s in &first {
        assert!(!now.contains(s), "{s} kept after backup {g1} was pruned: {now:?}");
    }
    let backups = s3.objects(BUCKET, "p/backup");
    assert_eq!(backups.len(), 4, "two backups of two objects each: {backups:?}");
    assert!(!backups.iter().any(|b| b.contains(&format!("{g1:020}"))), "{backups:?}");
    assert_eq!(ObjectDevice::find_backup(&sp, &s3.config()).unwrap().image.generation, g3);
    // the data of now is whole
    for i in 1..4u64 {
        assert_eq!(read(&d, i * (256 << 10), 256 << 10), pattern(20 + i, 256 << 10), "block {i}");
    }
}

#[test]
fn a_torn_or_damaged_backup_is_passed_over_for_the_one_before() {
    let s3 = S3Server::start(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let sp = ObjectSpec::parse(&format!("s3://{BUCKET}/torn")).unwrap();
    let e = ObjectDevice::find_backup(&sp, &s3.config()).unwrap_err();
    assert!(matches!(e, ObjectError::NoBackup { .. }), "{e}");
    assert!(e.to_string().contains("holds no pool"), "{e}");
    let map = dir.path().join("object.0.redb");
    let d = ObjectDevice::create(&sp, &s3.config(), &map, opts(dir.path()), false).unwrap();
    fill(&d, 1);
    let e = ObjectDevice::find_backup(&sp, &s3.config()).unwrap_err();
    assert!(e.to_string().contains("no backup objects"), "{e}");
    let g1 = backup(&d, 5);
    let g2 = backup(&d, 6);
    let backup_file = |g: u64, ext: &str| s3.data_dir().join(BUCKET).join(format!("torn/backup/{g:020}.{ext}"));
    // the upload of g2's manifest never happened
    s3.delete_object(BUCKET, &format!("torn/backup/{g2:020}.done"));
    let found = ObjectDevice::find_backup(&sp, &s3.config()).unwrap();
    assert_eq!((found.image.generation, found.image.txg), (g1, 5));
    assert!(found.skipped.is_empty());
    // a damaged image behind a manifest: passed over, named
    let g3 = backup(&d, 7);
    let img = backup_file(g3, "bak");
    let mut b = std::fs::read(&img).unwrap();
    b[70] ^= 0x40;
    std::fs::write(&img, b).unwrap();
    let found = ObjectDevice::find_backup(&sp, &s3.config()).unwrap();
    assert_eq!(found.image.generation, g1);
    assert_eq!(found.skipped.len(), 1);
    assert!(found.skipped[0].contains(&format!("{g3:020}.bak")), "{:?}", found.skipped);
    // a new pool on the prefix (--force) takes the old backups with it
    drop(d);
    let e = ObjectDevice::create(&sp, &s3.config(), &map, opts(dir.path()), false).err().unwrap();
    assert!(matches!(e, ObjectError::PrefixInUse { .. }), "{e}");
    let _d = ObjectDevice::create(&sp, &s3.config(), &map, opts(dir.path()), true).unwrap();
    assert!(s3.objects(BUCKET, "torn/backup").is_empty());
    assert!(matches!(ObjectDevice::find_backup(&sp, &s3.config()), Err(ObjectError::NoBackup { .. })));
}
