//! Record sizes per file: a file's records have the size it was created with (its
//! `recordsizes` row, else the pool's), through writes, reads, truncation, holes, commits,
//! reopens and crashes; the feature flag is set by the first row; a file with data keeps
//! its size; fsck checks extents against the file's size.
mod common;
use common::*;
use redb::{ReadableDatabase, ReadableTable};
use squeezefs_meta::{tables, Features, Superblock};
use squeezefs_pipeline::*;
use std::path::Path;

const K: u64 = 1024;

/// Create a regular file `name` in the root with records of `rs` bytes.
fn create_rs(e: &Engine, name: &str, rs: u64) -> Ino {
    e.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        tx.put_inode(&attr(ino, FileKind::File, 1))?;
        tx.set_record_size(ino, rs)?;
        tx.dir_insert(ROOT_INO, name.as_bytes(), ino, FileKind::File)?;
        Ok(ino)
    })
    .unwrap()
}

fn text(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 64);
    let mut i = 0u64;
    while v.len() < n {
        v.extend_from_slice(format!("record size test line {i} {}\n", i * 7919 % 1000).as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

fn superblock(pool: &Path) -> Superblock {
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let v = rx.open_table(tables::SUPERBLOCK).unwrap().get(0u8).unwrap().unwrap().value().to_vec();
    Superblock::decode(&v).unwrap()
}

fn rows(pool: &Path) -> Vec<(u64, u32)> {
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let t = rx.open_table(tables::RECORDSIZES).unwrap();
    t.iter().unwrap().map(|r| r.unwrap()).map(|(k, v)| (k.value(), v.value())).collect()
}

fn assert_clean(e: &Engine) {
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

/// Every extent of `ino` starts on a record boundary of `rs` and holds at most `rs` bytes.
fn assert_records_of(e: &Engine, ino: Ino, rs: u64) {
    let ext = e.extents(ino).unwrap();
    assert!(!ext.is_empty(), "inode {ino} has no committed records");
    for (off, x) in ext {
        assert_eq!(off % rs, 0, "inode {ino}: a record at {off} in a file of {rs}-byte records");
        assert!(u64::from(x.logical) <= rs, "inode {ino}: a record of {} bytes, record size {rs}", x.logical);
    }
}

#[test]
fn files_of_every_record_size_read_back_through_commits_and_reopens() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let opts = OpenOptions { compression: "zstd:3".parse().unwrap(), ..fast_opts() };
    let e = Engine::open(&pool, &opts).unwrap();
    let sizes: Vec<u64> = (12..=20).map(|s| 1u64 << s).collect();
    let mut files = Vec::new();
    for &rs in &sizes {
        let f = create_rs(&e, &format!("f{rs}"), rs);
        assert_eq!(u64::from(e.record_size(f).unwrap()), rs);
        // whole records, a short last one, writes straddling record boundaries
        let data = text((3 * rs + rs / 3 + 17) as usize);
        for (i, chunk) in data.chunks((rs * 2 / 3 + 1) as usize).enumerate() {
            e.write(f, (i as u64) * (rs * 2 / 3 + 1), chunk).unwrap();
        }
        assert_eq!(read_all(&e, f), data, "record size {rs}, dirty");
        files.push((f, rs, data));
    }
    e.sync().unwrap();
    for (f, rs, data) in &files {
        assert_eq!(read_all(&e, *f), *data, "record size {rs}, committed");
        assert_records_of(&e, *f, *rs);
    }
    assert_clean(&e);
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts).unwrap();
    for (f, rs, data) in &files {
        assert_eq!(u64::from(e.record_size(*f).unwrap()), *rs);
        assert_eq!(read_all(&e, *f), *data, "record size {rs}, reopened");
    }
    // the pool's own size has no row: only the others are stored
    e.close().unwrap();
    drop(e);
    let stored: Vec<u32> = rows(&pool).into_iter().map(|(_, b)| b).collect();
    let mut want: Vec<u32> = sizes.iter().filter(|&&b| b != 128 * K).map(|&b| b as u32).collect();
    want.sort_unstable();
    let mut got = stored.clone();
    got.sort_unstable();
    assert_eq!(got, want);
}

#[test]
fn the_first_row_sets_the_feature_and_older_builds_would_refuse_the_pool() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    assert_eq!(superblock(&pool).features.incompat & Features::INCOMPAT_RECORDSIZES, 0, "mkfs does not set it");
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    // a file at the pool's record size writes no row and sets nothing
    let plain = create_rs(&e, "plain", 128 * K);
    e.write(plain, 0, &text(300_000)).unwrap();
    e.close().unwrap();
    drop(e);
    assert_eq!(superblock(&pool).features.incompat & Features::INCOMPAT_RECORDSIZES, 0);
    assert!(rows(&pool).is_empty());
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let big = create_rs(&e, "big", 1024 * K);
    e.write(big, 0, &text(3_000_000)).unwrap();
    e.close().unwrap();
    drop(e);
    let sb = superblock(&pool);
    assert_ne!(sb.features.incompat & Features::INCOMPAT_RECORDSIZES, 0);
    assert_eq!(rows(&pool), vec![(big, 1 << 20)]);
    // what a build that knows only the flags mkfs sets would see: an unknown incompat bit
    let known_before = Features::MKFS_INCOMPAT;
    assert_ne!(sb.features.incompat & !known_before, 0, "a build without per-file record sizes must refuse it");
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(read_all(&e, big), text(3_000_000));
    assert_eq!(read_all(&e, plain), text(300_000));
    assert_clean(&e);
}

#[test]
fn a_file_with_data_keeps_its_record_size_until_it_is_emptied() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let f = create_rs(&e, "f", 16 * K);
    let data = text(100_000);
    e.write(f, 0, &data).unwrap();
    let set = |rs: u64| e.meta_write(|tx| tx.set_record_size(f, rs));
    // dirty data
    assert!(matches!(set(64 * K), Err(EngineError::Invalid(InvalidArg::RecordSizeOfFileWithData { .. }))));
    e.sync().unwrap();
    // committed data; the same size is no change
    assert!(matches!(set(64 * K), Err(EngineError::Invalid(InvalidArg::RecordSizeOfFileWithData { .. }))));
    set(16 * K).unwrap();
    assert_eq!(e.record_size(f).unwrap(), 16 << 10);
    assert_eq!(read_all(&e, f), data);
    // bad sizes and the wrong kind of inode
    for bad in [0, 1000, 3 * K, 2048 * K] {
        assert!(matches!(set(bad), Err(EngineError::Invalid(InvalidArg::RecordSizeUnsupported { .. }))), "{bad}");
    }
    assert!(matches!(
        e.meta_write(|tx| tx.set_record_size(ROOT_INO, 64 * K)),
        Err(EngineError::Invalid(InvalidArg::RecordSizeNotAFile { .. }))
    ));
    // emptied: its old records are freed by the next commit only
    e.set_size(f, 0).unwrap();
    assert!(matches!(set(64 * K), Err(EngineError::RecordSizeBusy { .. })));
    assert_eq!(e.record_size(f).unwrap(), 16 << 10, "a refused change changes nothing");
    e.sync().unwrap();
    set(64 * K).unwrap();
    assert_eq!(e.record_size(f).unwrap(), 64 << 10);
    let data2 = text(200_000);
    e.write(f, 0, &data2).unwrap();
    e.sync().unwrap();
    assert_records_of(&e, f, 64 * K);
    assert_clean(&e);
    // back to the pool's size: its row goes
    e.set_size(f, 0).unwrap();
    e.sync().unwrap();
    set(128 * K).unwrap();
    e.write(f, 0, &data2).unwrap();
    e.close().unwrap();
    drop(e);
    assert!(rows(&pool).is_empty(), "{:?}", rows(&pool));
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(e.record_size(f).unwrap(), 128 << 10);
    assert_eq!(read_all(&e, f), data2);
    assert_records_of(&e, f, 128 * K);
    assert_clean(&e);
}

#[test]
fn a_deleted_file_takes_its_row_with_it() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let keep = create_rs(&e, "keep", 8 * K);
    let gone = create_rs(&e, "gone", 512 * K);
    e.write(keep, 0, &text(50_000)).unwrap();
    e.write(gone, 0, &text(1_500_000)).unwrap();
    e.sync().unwrap();
    e.meta_write(|tx| {
        tx.dir_remove(ROOT_INO, b"gone")?;
        tx.delete_inode(gone)
    })
    .unwrap();
    e.close().unwrap();
    drop(e);
    assert_eq!(rows(&pool), vec![(keep, 8 << 10)]);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_clean(&e);
    assert_eq!(read_all(&e, keep), text(50_000));
}

/// The row is written by the same commit as the inode and its first data: a crash (the
/// engine dropped without close) after an fsync leaves both; before it, neither.
#[test]
fn the_record_size_commits_with_the_file() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e =
        Engine::open(&pool, &OpenOptions { txg_timeout: std::time::Duration::from_secs(60), ..fast_opts() }).unwrap();
    let synced = create_rs(&e, "synced", 32 * K);
    e.write(synced, 0, &text(100_000)).unwrap();
    e.fsync(synced).unwrap();
    let lost = create_rs(&e, "lost", 256 * K);
    e.write(lost, 0, &text(600_000)).unwrap();
    drop(e); // a crash of the data path: the open txg is lost
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(e.record_size(synced).unwrap(), 32 << 10);
    assert_eq!(read_all(&e, synced), text(100_000));
    assert!(e.lookup(ROOT_INO, b"lost").unwrap().is_none());
    assert_clean(&e);
    e.close().unwrap();
    drop(e);
    assert_eq!(rows(&pool), vec![(synced, 32 << 10)]);
}

/// fsck reads extents with the file's record size: a row changed behind the engine's back
/// (records of 16 KiB read as 4 KiB ones) is reported, and so is a row in a pool without the
/// feature flag.
#[test]
fn fsck_checks_extents_against_the_files_record_size() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let f = create_rs(&e, "f", 16 * K);
    e.write(f, 0, &noise(5, 60_000)).unwrap();
    e.close().unwrap();
    drop(e);
    let rewrite = |rs: u32, clear_flag: bool| {
        let db = Engine::open_meta_store(&pool).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(tables::RECORDSIZES).unwrap().insert(f, rs).unwrap();
        if clear_flag {
            let mut t = tx.open_table(tables::SUPERBLOCK).unwrap();
            let mut sb = Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
            sb.features.incompat &= !Features::INCOMPAT_RECORDSIZES;
            t.insert(0u8, &sb.encode()[..]).unwrap();
        }
        tx.commit().unwrap();
    };
    rewrite(4096, false);
    let ro = OpenOptions { read_only: true, ..fast_opts() };
    let e = Engine::open(&pool, &ro).unwrap();
    let r = e.fsck().unwrap();
    assert!(r.problems.iter().any(|p| p.contains("its record of 4096 bytes")), "{:?}", r.problems);
    drop(e);
    rewrite(16 << 10, true);
    let e = Engine::open(&pool, &ro).unwrap();
    let r = e.fsck().unwrap();
    assert!(r.problems.iter().any(|p| p.contains("lacks the RECORDSIZES feature")), "{:?}", r.problems);
    assert_eq!(read_all(&e, f), noise(5, 60_000));
    drop(e);
    // a size out of range is damage, reported by fsck and refused by reads (never misread)
    rewrite(3000, false);
    let e = Engine::open(&pool, &ro).unwrap();
    let r = e.fsck().unwrap();
    assert!(r.problems.iter().any(|p| p.contains("record size 3000")), "{:?}", r.problems);
    let mut buf = vec![0u8; 100];
    assert!(matches!(e.read(f, 0, &mut buf), Err(EngineError::Corrupt(_))));
}

/// A writer and a record size change racing on an empty file: the change happens wholly
/// before the first data (which then has the new size) or is refused; never records of
/// one size under a row of the other.
#[test]
fn a_record_size_change_racing_the_first_write_never_mixes_sizes() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_millis(5), ..fast_opts() };
    let e = Engine::open(&pool, &opts).unwrap();
    let mut files = Vec::new();
    for round in 0..40u64 {
        let f = create_rs(&e, &format!("f{round}"), 8 * K);
        let data = text(70_000 + round as usize * 997);
        let (e1, e2, d1) = (e.clone(), e.clone(), data.clone());
        let writer = std::thread::spawn(move || {
            for (i, c) in d1.chunks(5000).enumerate() {
                e1.write(f, i as u64 * 5000, c).unwrap();
            }
        });
        let changer = std::thread::spawn(move || loop {
            match e2.meta_write(|tx| tx.set_record_size(f, 32 * K)) {
                Ok(()) => return true,
                Err(EngineError::Invalid(InvalidArg::RecordSizeOfFileWithData { .. })) => return false,
                Err(EngineError::RecordSizeBusy { .. }) => std::thread::yield_now(),
                Err(other) => panic!("{other}"),
            }
        });
        writer.join().unwrap();
        let changed = changer.join().unwrap();
        assert_eq!(read_all(&e, f), data, "round {round}");
        files.push((f, if changed { 32 * K } else { 8 * K }, data));
    }
    e.sync().unwrap();
    for (f, rs, data) in &files {
        assert_eq!(u64::from(e.record_size(*f).unwrap()), *rs);
        assert_records_of(&e, *f, *rs);
        assert_eq!(read_all(&e, *f), *data);
    }
    assert_clean(&e);
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts).unwrap();
    for (f, rs, data) in &files {
        assert_eq!(u64::from(e.record_size(*f).unwrap()), *rs);
        assert_eq!(read_all(&e, *f), *data);
    }
    assert_clean(&e);
}

/// Holes, truncation, punching, seeking and allocation at record boundaries of small and
/// large records in one pool.
#[test]
fn sparse_files_punches_and_seeks_follow_each_files_records() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions { recordsize: Some(16 << 10), ..Default::default() }).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    for rs in [4 * K, 16 * K, 1024 * K] {
        let f = create_rs(&e, &format!("s{rs}"), rs);
        let mut model = vec![0u8; 0];
        let write = |off: u64, b: &[u8], model: &mut Vec<u8>| {
            e.write(f, off, b).unwrap();
            let end = off as usize + b.len();
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(b);
        };
        // data far past a hole of several records
        write(5 * rs + 100, &text(1000), &mut model);
        write(0, &text(10), &mut model);
        e.allocate(f, 0, 8 * rs, false).unwrap();
        model.resize(8 * rs as usize, 0);
        assert_eq!(e.seek_data(f, rs).unwrap(), Some(5 * rs), "record size {rs}");
        assert_eq!(e.seek_hole(f, 0).unwrap(), Some(rs));
        e.sync().unwrap();
        assert_eq!(e.seek_data(f, rs + 1).unwrap(), Some(5 * rs));
        // a punch across two record boundaries, then a truncation inside a record
        e.punch_hole(f, rs / 2, 5 * rs).unwrap();
        model[(rs / 2) as usize..(rs / 2 + 5 * rs) as usize].fill(0);
        assert_eq!(read_all(&e, f), model);
        e.set_size(f, 5 * rs + 700).unwrap();
        model.truncate((5 * rs + 700) as usize);
        e.set_size(f, 6 * rs).unwrap();
        model.resize(6 * rs as usize, 0);
        assert_eq!(read_all(&e, f), model);
        e.sync().unwrap();
        assert_eq!(read_all(&e, f), model, "record size {rs}, committed");
        assert_clean(&e);
    }
}

/// Admission and the metadata estimate follow the record sizes in use: a small fixed
/// device takes 1 MiB records of a file in a pool of 4 KiB records up to its room, and
/// reports ENOSPC cleanly past it.
#[test]
fn a_full_device_refuses_large_records_cleanly() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let mkfs = MkfsOptions { device_capacity: Some(8 << 20), recordsize: Some(4096), ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let f = create_rs(&e, "big", 1024 * K);
    let mut written = 0u64;
    let chunk = noise(9, 1 << 20);
    loop {
        match e.write(f, written, &chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("{other}"),
        }
        assert!(written <= 8 << 20, "more accepted than the device holds");
    }
    e.sync().unwrap();
    assert!(written >= 4 << 20, "only {written} bytes accepted on an 8 MiB device");
    assert_eq!(read_all(&e, f), chunk.repeat((written >> 20) as usize));
    assert_clean(&e);
}
