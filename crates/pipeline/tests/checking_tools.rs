//! The checking tools (fsck, scrub, read-only opens, mkfs) on damaged, crashed and foreign
//! pools and devices. Each test but the last pins a bug: it fails on code without the fix it
//! is named after.
mod common;
use common::*;
use redb::ReadableTable;
use squeezefs_meta::{keys, tables, DeviceExtent, ExtentPtr, StoredRecord};
use squeezefs_pipeline::*;
use std::path::{Path, PathBuf};

/// A closed pool holding two 300 KiB files `a` and `b` (raw, on the device).
fn two_file_pool(dir: &Path) -> (PathBuf, Ino, Ino) {
    let pool = dir.join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let a = create(&e, "a");
    let b = create(&e, "b");
    e.write(a, 0, &vec![b'a'; 300 * 1024]).unwrap();
    e.write(b, 0, &vec![b'b'; 300 * 1024]).unwrap();
    e.close().unwrap();
    (pool, a, b)
}

fn with_db(pool: &Path, f: impl FnOnce(&redb::WriteTransaction)) {
    let db = Engine::open_meta_store(pool).unwrap();
    let tx = db.begin_write().unwrap();
    f(&tx);
    tx.commit().unwrap();
}

/// Rewrite the extent pointer of record `idx` of `ino` in a closed pool (it must be a device
/// extent): the way these tests make one metadata value corrupt.
fn rewrite_extent(pool: &Path, ino: Ino, idx: u64, f: impl FnOnce(&mut ExtentPtr)) {
    with_db(pool, |tx| {
        let mut t = tx.open_table(tables::EXTENTS).unwrap();
        let k = keys::pair(ino, idx);
        let mut x = ExtentPtr::decode(t.get(&k[..]).unwrap().unwrap().value()).unwrap();
        assert!(matches!(x.stored, StoredRecord::Device(_)), "expected a device extent");
        f(&mut x);
        t.insert(&k[..], &x.encode()[..]).unwrap();
    });
}

fn ro() -> OpenOptions {
    OpenOptions { read_only: true, ..fast_opts() }
}

/// A corrupt free range whose end lies past 2^64 (length bits flipped): fsck must report
/// it, not die of an arithmetic overflow (`off + len` in fsck.rs).
#[test]
fn fsck_reports_a_free_range_reaching_past_u64_max_instead_of_panicking() {
    let d = tempfile::tempdir().unwrap();
    let (pool, _, _) = two_file_pool(d.path());
    with_db(&pool, |tx| {
        let mut ft = tx.open_table(tables::FREE_SPACE).unwrap();
        ft.insert(&keys::dev_offset(0, 1 << 40)[..], u64::MAX - 5).unwrap();
    });
    let e = Engine::open(&pool, &ro()).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.fsck()));
    let r = r.expect("fsck panicked on a corrupt free range").unwrap();
    assert!(!r.is_clean());
}

/// A corrupt extent pointer whose device offset is near 2^64: fsck must report it.
#[test]
fn fsck_reports_an_extent_at_the_end_of_the_address_space_instead_of_panicking() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, _) = two_file_pool(d.path());
    rewrite_extent(&pool, a, 0, |e| {
        if let StoredRecord::Device(dx) = e.stored {
            e.stored = StoredRecord::Device(DeviceExtent { offset: u64::MAX - 100, ..dx });
        }
    });
    let e = Engine::open(&pool, &ro()).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.fsck()));
    let r = r.expect("fsck panicked on a corrupt extent").unwrap();
    assert!(!r.is_clean());
    // scrub: a read error for that record, not a panic either
    let s = e.scrub(&|_, _| {}).unwrap();
    assert!(s.damaged.iter().any(|x| x.ino == a && x.offset == 0), "{:?}", s.damaged);
}

/// `squeezefs fsck` and `squeezefs scrub` open the pool read-only; that open must not
/// write the metadata store (a pool on read-only media, an image being examined).
#[test]
fn read_only_open_fsck_scrub_and_close_leave_meta_redb_untouched() {
    let d = tempfile::tempdir().unwrap();
    let (pool, _, _) = two_file_pool(d.path());
    let store = |p: &Path| -> Vec<u8> { COPY_FILES.iter().flat_map(|n| std::fs::read(p.join(n)).unwrap()).collect() };
    let dev = pool.join("data.0");
    // one read-only cycle first: whatever redb does once after a write, it has done
    {
        let e = Engine::open(&pool, &ro()).unwrap();
        e.close().unwrap();
    }
    let before = store(&pool);
    let dev_before = std::fs::read(&dev).unwrap();
    {
        let e = Engine::open(&pool, &ro()).unwrap();
        assert!(e.fsck().unwrap().is_clean());
        assert!(e.scrub(&|_, _| {}).unwrap().is_clean());
        e.close().unwrap();
    }
    let after = store(&pool);
    assert!(std::fs::read(&dev).unwrap() == dev_before, "the read-only open wrote the device");
    let differing = before.iter().zip(&after).filter(|(x, y)| x != y).count();
    assert!(
        before == after,
        "the read-only open wrote the metadata store: {differing} bytes differ, length {} -> {}",
        before.len(),
        after.len()
    );
}

/// A pool that was not closed cleanly (a crash image: the files copied while the engine had
/// them open) opens read-only for checking: the metadata store is repaired in memory, the
/// committed files read back, fsck is clean, and the files on disk stay as they were.
#[test]
fn a_crashed_pool_opens_read_only_for_checking_without_being_written() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let a = create(&e, "a");
    e.write(a, 0, &vec![b'a'; 300 * 1024]).unwrap();
    e.fsync(a).unwrap();
    let image = d.path().join("image");
    std::fs::create_dir(&image).unwrap();
    for f in [COPY_FILES[0], COPY_FILES[1], "data.0"] {
        std::fs::copy(pool.join(f), image.join(f)).unwrap();
    }
    e.close().unwrap();
    let store = |p: &Path| -> Vec<u8> { COPY_FILES.iter().flat_map(|n| std::fs::read(p.join(n)).unwrap()).collect() };
    let meta_before = store(&image);
    // the precondition: the copies were open, not closed cleanly (header byte 11)
    assert_eq!(meta_before[11], 0, "copy 0 of the image is marked clean");
    {
        let c = Engine::open(&image, &ro()).unwrap();
        let mut buf = vec![0u8; 300 * 1024];
        assert_eq!(c.read(a, 0, &mut buf).unwrap(), buf.len());
        assert!(buf.iter().all(|&b| b == b'a'));
        assert!(c.fsck().unwrap().is_clean());
        assert!(c.scrub(&|_, _| {}).unwrap().is_clean());
        assert!(matches!(c.write(a, 0, b"x"), Err(EngineError::ReadOnly)));
        c.close().unwrap();
    }
    assert!(store(&image) == meta_before, "the read-only open wrote the metadata store");
    // and the image still opens read-write, repairing for real
    let w = Engine::open(&image, &fast_opts()).unwrap();
    assert!(w.fsck().unwrap().is_clean());
    w.close().unwrap();
}

/// One corrupt extent row must not hide the damage scrub found in other files: scrub
/// lists the corrupt pointer as damage of its file and goes on.
#[test]
fn one_corrupt_extent_row_does_not_abort_scrub() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b) = two_file_pool(d.path());
    // flip a byte inside b's first record on the device
    let off = {
        let e = Engine::open(&pool, &ro()).unwrap();
        let x = e.extents(b).unwrap();
        let StoredRecord::Device(dx) = x[0].1.stored else { panic!("expected a device extent") };
        e.close().unwrap();
        dx.offset
    };
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(pool.join("data.0")).unwrap();
        let mut byte = [0u8; 1];
        f.read_exact_at(&mut byte, off + 10).unwrap();
        f.write_all_at(&[byte[0] ^ 0x40], off + 10).unwrap();
    }
    // truncate a's second extent pointer (a torn/corrupt metadata value)
    with_db(&pool, |tx| {
        let mut t = tx.open_table(tables::EXTENTS).unwrap();
        let k = keys::pair(a, 1);
        let v = t.get(&k[..]).unwrap().unwrap().value().to_vec();
        t.insert(&k[..], &v[..20]).unwrap();
    });
    let e = Engine::open(&pool, &ro()).unwrap();
    let s = e.scrub(&|_, _| {}).expect("scrub gave up on the pool because of one corrupt extent row");
    assert!(s.damaged.iter().any(|x| x.ino == b && x.offset == 0), "{:?}", s.damaged);
    assert!(s.damaged.iter().any(|x| x.ino == a), "{:?}", s.damaged);
}

/// A corrupt directory entry somewhere in the pool must not make scrub fail after it found
/// damaged records: the paths are a courtesy, the damage list is the point.
#[test]
fn a_corrupt_dirent_does_not_turn_scrub_results_into_an_error() {
    let d = tempfile::tempdir().unwrap();
    let (pool, _a, b) = two_file_pool(d.path());
    let off = {
        let e = Engine::open(&pool, &ro()).unwrap();
        let StoredRecord::Device(dx) = e.extents(b).unwrap()[0].1.stored else { panic!() };
        e.close().unwrap();
        dx.offset
    };
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(pool.join("data.0")).unwrap();
        f.write_all_at(&[0xff, 0x00, 0xff], off + 100).unwrap();
    }
    with_db(&pool, |tx| {
        let mut t = tx.open_table(tables::DIRENTS).unwrap();
        let k = keys::dir_name(ROOT_INO, b"a");
        t.insert(&k[..], &[1u8, 1, 0][..]).unwrap(); // truncated value
    });
    let e = Engine::open(&pool, &ro()).unwrap();
    let s = e.scrub(&|_, _| {}).expect("scrub failed instead of listing the damage");
    assert!(s.damaged.iter().any(|x| x.ino == b && x.offset == 0), "{:?}", s.damaged);
}

/// mkfs without --force must refuse a device holding another filesystem. btrfs (and
/// reiserfs) keep their superblock at 64 KiB and leave the first 64 KiB zero; the
/// non-empty probe reads only `[0, 64 KiB)`.
#[test]
fn mkfs_without_force_refuses_a_device_holding_btrfs() {
    let d = tempfile::tempdir().unwrap();
    let devp = d.path().join("btrfs.img");
    let mut img = vec![0u8; 1 << 20];
    // btrfs: superblock at 65536, magic "_BHRfS_M" at offset 64 inside it
    img[65536 + 64..65536 + 72].copy_from_slice(b"_BHRfS_M");
    img[65536..65536 + 32].fill(0xab); // checksum
    std::fs::write(&devp, &img).unwrap();
    let pool = d.path().join("pool");
    let opts = MkfsOptions { devices: vec![devp.clone()], ..Default::default() };
    let r = Engine::mkfs(&pool, &opts);
    let after = std::fs::read(&devp).unwrap();
    assert!(r.is_err(), "mkfs overwrote a btrfs device without --force");
    assert!(after == img, "the btrfs superblock was overwritten");
}

/// `mkfs --force` that fails (here: a mistyped device path) must leave the existing pool as
/// it was; today it deletes the pool's meta.redb before it has checked anything else.
#[test]
fn a_failed_mkfs_force_does_not_destroy_the_existing_pool() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, _) = two_file_pool(d.path());
    let opts =
        MkfsOptions { devices: vec![d.path().join("no-such-dir").join("dev")], force: true, ..Default::default() };
    assert!(Engine::mkfs(&pool, &opts).is_err());
    let e = Engine::open(&pool, &ro()).expect("the old pool is gone after a failed mkfs");
    assert_eq!(e.getattr(a).unwrap().size, 300 * 1024);
}

/// The free map keeps its ranges merged (alloc.rs); fsck did not check it, so a split range
/// (two rows that touch) went unnoticed.
#[test]
fn fsck_reports_free_ranges_that_touch_without_being_merged() {
    let d = tempfile::tempdir().unwrap();
    let (pool, _, _) = two_file_pool(d.path());
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    e.meta_write(|tx| {
        let (ino, _) = tx.dir_remove(ROOT_INO, b"a")?;
        tx.delete_inode(ino)
    })
    .unwrap();
    e.close().unwrap();
    drop(e);
    with_db(&pool, |tx| {
        let mut ft = tx.open_table(tables::FREE_SPACE).unwrap();
        let (k, len) = {
            let (k, v) = ft.iter().unwrap().next().expect("a free range after the delete").unwrap();
            (k.value().to_vec(), v.value())
        };
        let (dev, off) = keys::split_dev_offset(&k).unwrap();
        assert!(len >= 1024, "free range of {len} bytes");
        ft.insert(&k[..], 512).unwrap();
        ft.insert(&keys::dev_offset(dev, off + 512)[..], len - 512).unwrap();
    });
    let e = Engine::open(&pool, &ro()).unwrap();
    let r = e.fsck().unwrap();
    assert!(r.problems.iter().any(|p| p.contains("without being merged")), "{:?}", r.problems);
}

/// Records packed into one sector must come from one txg: a torn write of that sector can
/// then only hurt records no commit points to. fsck did not check it.
#[test]
fn fsck_reports_a_sector_shared_by_records_of_two_txgs() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    // 5000 incompressible bytes each (over max_inline): packed back to back in one txg
    let a = create(&e, "a");
    let b = create(&e, "b");
    e.write(a, 0, &noise(1, 5000)).unwrap();
    e.write(b, 0, &noise(2, 5000)).unwrap();
    e.close().unwrap();
    drop(e);
    let clean = Engine::open(&pool, &ro()).unwrap().fsck().unwrap();
    assert!(clean.is_clean(), "{:?}", clean.problems);
    rewrite_extent(&pool, b, 0, |x| x.birth += 1);
    let r = Engine::open(&pool, &ro()).unwrap().fsck().unwrap();
    assert!(r.problems.iter().any(|p| p.contains("holds records of txg")), "{:?}", r.problems);
}

/// A free-space row starting near 2^64 made every open panic (sector
/// arithmetic in the allocator overflowed), so fsck could not even start. Such a row is now
/// left out of the maps at open (its space is never handed out) and fsck reports it.
#[test]
fn a_free_space_row_outside_the_data_area_does_not_stop_open_and_fsck_reports_it() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, _) = two_file_pool(d.path());
    with_db(&pool, |tx| {
        let mut ft = tx.open_table(tables::FREE_SPACE).unwrap();
        ft.insert(&keys::dev_offset(0, 0xffff_ffff_ffff_ff00)[..], 16).unwrap();
    });
    let e = Engine::open(&pool, &ro()).expect("open with a damaged free-space row");
    assert!(!e.fsck().unwrap().is_clean(), "fsck must report the row");
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let c = create(&e, "c");
    e.write(c, 0, &vec![b'c'; 200 * 1024]).unwrap();
    e.sync().unwrap();
    assert_eq!(read_all(&e, c), vec![b'c'; 200 * 1024]);
    assert_eq!(read_all(&e, a), vec![b'a'; 300 * 1024]);
    e.close().unwrap();
}

/// With the inode counter at its end, `alloc_ino` wrapped to 0 and 1 (the
/// root) and then handed out the numbers of live files: creates turned into hard links to
/// them. The counter now stops; every later create fails cleanly.
#[test]
fn the_inode_counter_stops_at_its_end_instead_of_wrapping() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, _) = two_file_pool(d.path());
    with_db(&pool, |tx| {
        let mut t = tx.open_table(tables::SUPERBLOCK).unwrap();
        let mut sb = squeezefs_meta::superblock::Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
        sb.next_ino = u64::MAX - 2;
        t.insert(0u8, &sb.encode()[..]).unwrap();
    });
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(create(&e, "x"), u64::MAX - 2);
    assert_eq!(create(&e, "y"), u64::MAX - 1);
    for _ in 0..4 {
        let r = e.meta_write(|tx| tx.alloc_ino());
        assert!(r.is_err(), "handed out {r:?} after the last number");
    }
    e.sync().unwrap();
    assert!(e.fsck().unwrap().is_clean());
    assert_eq!(read_all(&e, a), vec![b'a'; 300 * 1024]);
    e.close().unwrap();
}

/// A directory whose next readdir cookie is u64::MAX made the next entry
/// overflow the cookie (a panic on the request thread, the caller hung). It is an error now.
#[test]
fn a_directory_out_of_cookies_refuses_new_entries_with_an_error() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, _) = two_file_pool(d.path());
    with_db(&pool, |tx| {
        let mut t = tx.open_table(tables::DIR_NEXT_COOKIE).unwrap();
        t.insert(ROOT_INO, u64::MAX).unwrap();
    });
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let r = e.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        tx.put_inode(&attr(ino, FileKind::File, 1))?;
        tx.dir_insert(ROOT_INO, b"z", ino, FileKind::File)
    });
    assert!(matches!(r, Err(EngineError::Corrupt(_))), "{r:?}");
    assert_eq!(e.lookup(ROOT_INO, b"z").unwrap(), None);
    assert_eq!(read_all(&e, a), vec![b'a'; 300 * 1024]);
    e.close().unwrap();
}

/// Freeing an extent whose pointer names a device the pool does not have
/// panicked the txg thread (index out of bounds), which left every fsync waiting forever.
/// The commit now fails with an error, so the pool suspends and waiters get it.
#[test]
fn freeing_an_extent_of_a_device_the_pool_lacks_fails_the_commit_instead_of_hanging() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b) = two_file_pool(d.path());
    rewrite_extent(&pool, a, 0, |e| {
        if let StoredRecord::Device(dx) = e.stored {
            e.stored = StoredRecord::Device(DeviceExtent { dev: 7, ..dx });
        }
    });
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    e.set_size(a, 0).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let e2 = std::sync::Arc::new(e);
    let e3 = e2.clone();
    std::thread::spawn(move || {
        let _ = tx.send(e3.sync());
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("sync hung after the txg thread met the damaged extent");
    assert!(r.is_err(), "the commit freeing a bogus range must fail: {r:?}");
    // the suspended pool still serves what was committed
    assert_eq!(read_all(&e2, b), vec![b'b'; 300 * 1024]);
}
