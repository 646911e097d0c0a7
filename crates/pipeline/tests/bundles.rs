//! Bundles (small records of several files stored as one, pipeline bundle.rs): which records
//! go into them, reads through them, copy on write of a member, the member count and the
//! freeing of a bundle with its last member (space, fsck, scrub), fsck on damaged bundle
//! rows; compact rows (inodes, extents, directory entries); and pools made before both,
//! which keep their format.

mod common;
use common::*;
use squeezefs_pipeline::*;
use std::collections::BTreeSet;
use std::path::Path;

fn bundle_opts() -> OpenOptions {
    OpenOptions {
        compression: "zstd:3".parse().unwrap(),
        bundle_small_records: true,
        txg_timeout: std::time::Duration::from_secs(60),
        ..fast_opts()
    }
}

/// Compressible text, different per seed.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = ["bundle", "record", "slice", "member", "txg", "extent", "share", "\n"];
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut v = Vec::with_capacity(len + 16);
    while v.len() < len {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.extend_from_slice(words[(s >> 33) as usize % words.len()].as_bytes());
        v.push(b' ');
    }
    v.truncate(len);
    v
}

fn file(e: &Engine, name: &str) -> Ino {
    e.lookup(ROOT_INO, name.as_bytes()).unwrap().unwrap_or_else(|| panic!("{name} missing")).0
}

fn bundle_of(e: &Engine, ino: Ino) -> Option<u64> {
    match e.extents(ino).unwrap().last()?.1.stored {
        StoredRecord::Bundled(s) => Some(s.bundle),
        _ => None,
    }
}

fn used(e: &Engine) -> u64 {
    e.device_stats().iter().map(|d| d.used_bytes).sum()
}

fn check_clean(e: &Engine) -> fsck::FsckReport {
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "fsck: {:?}", r.problems);
    let s = e.scrub(&|_, _| {}).unwrap();
    assert!(s.is_clean(), "scrub: {:?}", s.damaged);
    r
}

fn delete(e: &Engine, name: &str) {
    e.meta_write(|tx| {
        let (ino, _) = tx.dir_remove(ROOT_INO, name.as_bytes())?;
        tx.delete_inode(ino)
    })
    .unwrap();
}

/// Small files of one txg share bundles of at most the pool's bundle size (twice the
/// record size by default; an incompressible one among them too: the bundle as a whole
/// compresses); an all-zero one and whole records stay as
/// they were; a txg of incompressible small files makes a raw bundle; everything reads
/// back, also after a reopen without bundling.
#[test]
fn small_records_of_one_txg_share_bundles_and_read_back() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &bundle_opts()).unwrap();
    assert!(e.bundling());
    assert_eq!(e.info().bundle_size, 256 * 1024, "the default: twice the record size");
    let mut want = Vec::new();
    for i in 0..120u64 {
        let data = text(i, 1 + (i as usize * 997) % 20_000);
        let f = create(&e, &format!("s{i}"));
        e.write(f, 0, &data).unwrap();
        want.push((format!("s{i}"), data));
    }
    // a whole record and a tail: only the tail is bundled
    let big = text(1000, 128 * 1024 + 5000);
    e.write(create(&e, "big"), 0, &big).unwrap();
    want.push(("big".into(), big));
    let raw = noise(7, 3000);
    e.write(create(&e, "noise"), 0, &raw).unwrap();
    want.push(("noise".into(), raw));
    e.write(create(&e, "zeros"), 0, &[0u8; 5000]).unwrap();
    want.push(("zeros".into(), vec![0u8; 5000]));
    e.sync().unwrap();

    let bundles = e.bundles().unwrap();
    assert!(bundles.len() >= 2, "{} bundles", bundles.len());
    let mut members = 0;
    for (id, b) in &bundles {
        assert!(u64::from(b.logical) <= 256 * 1024, "bundle {id} decodes to {}", b.logical);
        assert!(b.members >= 2);
        members += b.members;
    }
    for i in 0..120u64 {
        assert!(bundle_of(&e, file(&e, &format!("s{i}"))).is_some(), "s{i} is not bundled");
    }
    let big_ext = e.extents(file(&e, "big")).unwrap();
    assert!(matches!(big_ext[0].1.stored, StoredRecord::Device(_)), "a whole record is its own");
    assert!(matches!(big_ext[1].1.stored, StoredRecord::Bundled(_)), "the tail of big is bundled");
    assert_eq!(members, 122);
    assert!(e.extents(file(&e, "zeros")).unwrap().is_empty(), "zeros are a hole");
    // st_blocks: every bundled file is charged its share, at least one byte
    for i in 0..120u64 {
        assert!(e.getattr(file(&e, &format!("s{i}"))).unwrap().blocks_bytes >= 1);
    }
    // a txg of incompressible records only: their bundle is stored raw
    for i in 0..3u64 {
        let raw = noise(20 + i, 2000);
        e.write(create(&e, &format!("n{i}")), 0, &raw).unwrap();
        want.push((format!("n{i}"), raw));
    }
    e.sync().unwrap();
    let raw_bundle = bundle_of(&e, file(&e, "n0")).expect("n0 bundled");
    let (_, b) = e.bundles().unwrap().into_iter().find(|(id, _)| *id == raw_bundle).unwrap();
    assert_eq!((b.alg, b.logical, b.ext.psize), (0, 6000, 6000));
    let r = check_clean(&e);
    assert_eq!(r.bundles, bundles.len() as u64 + 1);
    for (name, data) in &want {
        assert_eq!(&read_all(&e, file(&e, name)), data, "{name}");
    }
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert!(!e.bundling());
    for (name, data) in &want {
        assert_eq!(&read_all(&e, file(&e, name)), data, "{name} after reopen");
    }
    check_clean(&e);
}

/// A member changed in place (read-modify-write through the bundle), cut, or deleted leaves
/// the bundle with one member fewer; the commit that removes the last one frees the
/// bundle's space. fsck and scrub stay clean at every step.
#[test]
fn a_bundle_is_freed_with_its_last_member() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &bundle_opts()).unwrap();
    let names: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
    let mut data: Vec<Vec<u8>> = (0..6).map(|i| text(50 + i, 3000 + 100 * i as usize)).collect();
    for (n, v) in names.iter().zip(&data) {
        e.write(create(&e, n), 0, v).unwrap();
    }
    e.sync().unwrap();
    let id = bundle_of(&e, file(&e, "m0")).expect("m0 bundled");
    for n in &names {
        assert_eq!(bundle_of(&e, file(&e, n)), Some(id), "{n} in another bundle");
    }
    let count = |e: &Engine| e.bundles().unwrap().into_iter().find(|(i, _)| *i == id).map(|(_, b)| b.members);
    assert_eq!(count(&e), Some(6));
    let psize = e.bundles().unwrap().into_iter().find(|(i, _)| *i == id).unwrap().1.ext.psize;
    check_clean(&e);

    // reopen without bundling, so changed records are stored on their own
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    // m0: a few bytes in the middle changed (the rest comes from the bundle)
    e.write(file(&e, "m0"), 1000, b"CHANGED").unwrap();
    data[0][1000..1007].copy_from_slice(b"CHANGED");
    // m1: truncated to half
    e.set_size(file(&e, "m1"), 1500).unwrap();
    data[1].truncate(1500);
    // m2: deleted
    delete(&e, "m2");
    e.sync().unwrap();
    assert_eq!(count(&e), Some(3));
    assert_ne!(bundle_of(&e, file(&e, "m0")), Some(id));
    for (i, n) in names.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert_eq!(read_all(&e, file(&e, n)), data[i], "{n}");
    }
    check_clean(&e);
    // the others go: the bundle with them
    let before = used(&e);
    delete(&e, "m3");
    e.write(file(&e, "m4"), 0, &text(99, 200_000)).unwrap();
    e.punch_hole(file(&e, "m5"), 0, 1 << 20).unwrap();
    e.sync().unwrap();
    assert_eq!(count(&e), None, "bundle {id} outlived its members");
    // m4's new records are stored raw (this engine does not compress)
    assert_eq!(used(&e), before + 200_000 - u64::from(psize), "the bundle's space was not freed");
    let r = check_clean(&e);
    assert_eq!(r.bundles, 0);
    assert_eq!(read_all(&e, file(&e, "m4")), text(99, 200_000));
    assert_eq!(read_all(&e, file(&e, "m5")), vec![0u8; data[5].len()]);
}

/// Create a regular file `name` in the root with records of `rs` bytes (its own record size).
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

/// Files with record sizes of their own share bundles by their own last record: a file of
/// 16 KiB or 4 KiB records bundles only its short tail (never a full record, though one is
/// shorter than the pool's record size), a 1 MiB-record file's tail joins a bundle when it
/// is shorter than the pool's record size and stays on its own when longer; every bundle
/// stays within the pool's bundle size. A member is changed in place through its bundle
/// (read-modify-write at its own record size), cut and extended; everything reads back,
/// also after a reopen without bundling, and fsck and scrub stay clean.
#[test]
fn bundles_take_each_files_last_record_at_its_own_record_size() {
    const K: u64 = 1024;
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &bundle_opts()).unwrap();
    // (name, own record size or the pool's, length)
    let spec: [(&str, Option<u64>, u64); 7] = [
        ("r16", Some(16 * K), 40 * K),       // 16K, 16K, 8K: the 8K tail only
        ("r16small", Some(16 * K), 5000),    // one short record
        ("r16whole", Some(16 * K), 32 * K),  // two full records: nothing
        ("r4", Some(4 * K), 10 * K),         // 4K, 4K, 2K
        ("r1m", Some(1 << 20), 20 * K),      // a short record below the pool's record size
        ("r1mlong", Some(1 << 20), 300 * K), // a short record above it: on its own
        ("plain", None, 7000),
    ];
    let mut want = Vec::new();
    for (i, &(name, rs, len)) in spec.iter().enumerate() {
        let f = match rs {
            Some(rs) => create_rs(&e, name, rs),
            None => create(&e, name),
        };
        let data = text(300 + i as u64, len as usize);
        e.write(f, 0, &data).unwrap();
        want.push((name, rs.unwrap_or(128 * K), data));
    }
    e.sync().unwrap();
    for (id, b) in e.bundles().unwrap() {
        assert!(u64::from(b.logical) <= 256 * K, "bundle {id} decodes to {} bytes", b.logical);
    }
    let bundled = |e: &Engine, name: &str| -> Vec<bool> {
        let f = file(e, name);
        e.extents(f).unwrap().iter().map(|(_, x)| matches!(x.stored, StoredRecord::Bundled(_))).collect()
    };
    assert_eq!(bundled(&e, "r16"), [false, false, true]);
    assert_eq!(bundled(&e, "r16small"), [true]);
    assert_eq!(bundled(&e, "r16whole"), [false, false]);
    assert_eq!(bundled(&e, "r4"), [false, false, true]);
    assert_eq!(bundled(&e, "r1m"), [true]);
    assert_eq!(bundled(&e, "r1mlong"), [false]);
    assert_eq!(bundled(&e, "plain"), [true]);
    for (name, rs, data) in &want {
        let f = file(&e, name);
        assert_eq!(u64::from(e.record_size(f).unwrap()), *rs, "{name}");
        for (off, x) in e.extents(f).unwrap() {
            assert_eq!(off % rs, 0, "{name}: a record at {off}");
            assert!(u64::from(x.logical) <= *rs, "{name}: a record of {} bytes", x.logical);
        }
        assert_eq!(&read_all(&e, f), data, "{name}");
    }
    check_clean(&e);

    // members changed through their bundles, without bundling: each stored on its own
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let change = |want: &mut Vec<(&str, u64, Vec<u8>)>, name: &str, off: usize, bytes: &[u8]| {
        e.write(file(&e, name), off as u64, bytes).unwrap();
        let v = &mut want.iter_mut().find(|w| w.0 == name).unwrap().2;
        if v.len() < off + bytes.len() {
            v.resize(off + bytes.len(), 0);
        }
        v[off..off + bytes.len()].copy_from_slice(bytes);
    };
    change(&mut want, "r1m", 10_000, b"CHANGED IN A 1M FILE");
    change(&mut want, "r16", 33 * 1024, b"CHANGED IN THE 16K TAIL");
    // the 4K file's tail extended into a full record and one more
    change(&mut want, "r4", 11 * 1024, &text(900, 3000));
    e.set_size(file(&e, "r16small"), 1000).unwrap();
    want.iter_mut().find(|w| w.0 == "r16small").unwrap().2.truncate(1000);
    e.sync().unwrap();
    for (name, _, data) in &want {
        assert_eq!(&read_all(&e, file(&e, name)), data, "{name} after the changes");
    }
    assert_eq!(bundled(&e, "r1m"), [false]);
    assert_eq!(bundled(&e, "r16"), [false, false, false]);
    check_clean(&e);
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    for (name, _, data) in &want {
        assert_eq!(&read_all(&e, file(&e, name)), data, "{name} after a reopen");
    }
    check_clean(&e);
}

/// Records of one txg with different policies go into different bundles, each compressed
/// with its own codec; a policy that stores raw bundles nothing.
#[test]
fn bundles_follow_each_files_policy() {
    let d = tempfile::tempdir().unwrap();
    let e = {
        Engine::mkfs(d.path(), &MkfsOptions::default()).unwrap();
        Engine::open(d.path(), &bundle_opts()).unwrap()
    };
    let lz4: squeezefs_codec::Spec = "lz4".parse().unwrap();
    let off: squeezefs_codec::Spec = "none".parse().unwrap();
    for i in 0..8u64 {
        let spec = match i % 3 {
            0 => None,
            1 => Some((lz4, false)),
            _ => Some((off, false)),
        };
        e.write_with_compression(create(&e, &format!("p{i}")), 0, &text(i, 4000), spec).unwrap();
    }
    e.sync().unwrap();
    let mut algs = BTreeSet::new();
    for i in 0..8u64 {
        let f = file(&e, &format!("p{i}"));
        let ext = &e.extents(f).unwrap()[0].1;
        match i % 3 {
            2 => assert!(!matches!(ext.stored, StoredRecord::Bundled(_)), "p{i} (none) bundled"),
            _ => {
                assert!(matches!(ext.stored, StoredRecord::Bundled(_)), "p{i} not bundled");
                algs.insert(ext.alg);
            }
        }
        assert_eq!(read_all(&e, f), text(i, 4000));
    }
    assert_eq!(algs.len(), 2, "zstd and lz4 bundles expected: {algs:?}");
    check_clean(&e);
}

/// Damaged bundle rows are found by fsck, named by bundle and file, and do not abort it.
#[test]
fn fsck_reports_damaged_bundles() {
    use redb::{ReadableTable, ReadableTableMetadata};
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &bundle_opts()).unwrap();
    for i in 0..4u64 {
        e.write(create(&e, &format!("f{i}")), 0, &text(i, 3000)).unwrap();
    }
    for i in 0..4u64 {
        e.write(create(&e, &format!("g{i}")), 0, &text(10 + i, 2000)).unwrap();
    }
    e.close().unwrap();
    drop(e);
    let db = Engine::open_meta_store(&pool).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(squeezefs_meta::tables::BUNDLES).unwrap();
        assert_eq!(t.len().unwrap(), 1, "one bundle of 8 small files expected");
        let (id, mut b) = {
            let (k, v) = t.first().unwrap().unwrap();
            (k.value(), Bundle::decode(v.value()).unwrap())
        };
        b.members += 1;
        t.insert(id, &b.encode()[..]).unwrap();
        // a bundle nobody points to
        t.insert(id + 100, &b.encode()[..]).unwrap();
        // a record pointing past its bundle's end, one naming a missing bundle
        let mut x = tx.open_table(squeezefs_meta::tables::EXTENTS).unwrap();
        let rows: Vec<(Vec<u8>, ExtentPtr)> = x
            .iter()
            .unwrap()
            .map(|r| r.unwrap())
            .map(|(k, v)| (k.value().to_vec(), ExtentPtr::decode(v.value()).unwrap()))
            .collect();
        let (k0, mut e0) = rows[0].clone();
        let StoredRecord::Bundled(s) = e0.stored else { panic!("first record not bundled") };
        e0.stored = StoredRecord::Bundled(BundleSlice { offset: b.logical, ..s });
        x.insert(&k0[..], &e0.encode()[..]).unwrap();
        let (k1, mut e1) = rows[1].clone();
        let StoredRecord::Bundled(s) = e1.stored else { panic!("second record not bundled") };
        e1.stored = StoredRecord::Bundled(BundleSlice { bundle: id + 7, ..s });
        x.insert(&k1[..], &e1.encode()[..]).unwrap();
    }
    tx.commit().unwrap();
    drop(db);
    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
    let r = e.fsck().unwrap();
    let has = |s: &str| r.problems.iter().any(|p| p.contains(s));
    assert!(has("counts 9 records but 7 point into it"), "{:?}", r.problems);
    assert!(has("holds no file's record (leak"), "{:?}", r.problems);
    assert!(has("which does not exist"), "{:?}", r.problems);
    assert!(has("which decodes to"), "{:?}", r.problems);
    // the bundle nobody points to overlaps the real one in the space checks
    assert!(has("double allocation"), "{:?}", r.problems);
    let s = e.scrub(&|_, _| {}).unwrap();
    assert_eq!(s.damaged.len(), 2, "{:?}", s.damaged);
}

fn unpack(fixture: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(fixture);
    for name in ["meta.redb", "data.0"] {
        let z = std::fs::read(dir.join(format!("{name}.zst"))).unwrap();
        std::fs::write(to.join(name), zstd::decode_all(&z[..]).unwrap()).unwrap();
    }
}

/// A pool made before bundles (tests/fixtures/pool-v1-before-bundles) opens, reads back,
/// gets no bundles even from an engine asked to bundle (the build that made it must still
/// open it), and stays fsck-clean.
#[test]
fn a_pool_made_before_bundles_reads_back_and_gets_none() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack("pool-v1-before-bundles", &pool);
    let e = Engine::open(&pool, &bundle_opts()).unwrap();
    assert!(!e.bundling(), "bundling in a pool without the feature");
    let text: Vec<u8> = (0..20000).flat_map(|i| format!("line {i} of the frozen pool\n").into_bytes()).collect();
    assert_eq!(read_all(&e, file(&e, "text")), text);
    assert_eq!(read_all(&e, file(&e, "tail")), &text[..131072 + 3000]);
    assert_eq!(read_all(&e, file(&e, "small")), b"hello frozen pool\n");
    let mut sparse = vec![0u8; 300000];
    sparse.extend(b"after the hole\n".repeat(100));
    assert_eq!(read_all(&e, file(&e, "sparse")), sparse);
    let many = file(&e, "many");
    for n in 0..40u64 {
        let f = e.lookup(many, format!("{n:03}").as_bytes()).unwrap().unwrap().0;
        assert_eq!(read_all(&e, f), format!("small file {n}\n").repeat(n as usize * 20 + 1).into_bytes());
    }
    let dir = file(&e, "dir");
    assert_eq!(e.read_link(e.lookup(dir, b"link").unwrap().unwrap().0).unwrap(), b"../text");
    let r = check_clean(&e);
    assert_eq!((r.inodes, r.extents, r.allocated_bytes), (49, 50, 22_883));
    for i in 0..10u64 {
        e.write(create(&e, &format!("new{i}")), 0, &text[..2000 + i as usize]).unwrap();
    }
    e.sync().unwrap();
    assert!(e.bundles().unwrap().is_empty());
    check_clean(&e);
    e.close().unwrap();
    drop(e);
    // its features are unchanged: no bundles table appeared, and every row, the new ones
    // too, is in the encoding of its time (version 1)
    assert_eq!(
        row_versions(&pool),
        [BTreeSet::from([1]), BTreeSet::from([1]), BTreeSet::from([1]), BTreeSet::from([1])]
    );
    let db = Engine::open_meta_store(&pool).unwrap();
    let rx = redb::ReadableDatabase::begin_read(&db).unwrap();
    assert!(!rx.list_tables().unwrap().any(|t| redb::TableHandle::name(&t) == "bundles"));
}

/// The version bytes of a closed pool's inode, extent, dirent and directory-cookie rows.
fn row_versions(pool: &Path) -> [BTreeSet<u8>; 4] {
    use redb::{ReadableDatabase, ReadableTable};
    use squeezefs_meta::tables;
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let inodes = rx.open_table(tables::INODES).unwrap();
    let bytes = |t: redb::ReadOnlyTable<&[u8], &[u8]>| -> BTreeSet<u8> {
        t.iter().unwrap().map(|r| r.unwrap().1.value()[0]).collect()
    };
    [
        inodes.iter().unwrap().map(|r| r.unwrap().1.value()[0]).collect(),
        bytes(rx.open_table(tables::EXTENTS).unwrap()),
        bytes(rx.open_table(tables::DIRENTS).unwrap()),
        bytes(rx.open_table(tables::DIR_COOKIES).unwrap()),
    ]
}

/// A new pool writes compact rows (version 2): inodes (the root's included), extents and
/// directory entries, and they read back whole.
#[test]
fn a_new_pool_writes_compact_rows() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let f = create(&e, "f");
    e.write(f, 0, b"data").unwrap();
    let t = Timestamp { secs: -5, nanos: 999_999_999 };
    e.update_attr(f, |a| -> Result<((), bool)> {
        a.atime = t;
        a.uid = u32::MAX;
        Ok(((), true))
    })
    .unwrap();
    let g = create(&e, "g");
    e.write(g, 0, &text(3, 300_000)).unwrap();
    let want = e.getattr(f).unwrap();
    e.close().unwrap();
    drop(e);
    assert_eq!(
        row_versions(&pool),
        [BTreeSet::from([2]), BTreeSet::from([2]), BTreeSet::from([2]), BTreeSet::from([2])]
    );
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(e.getattr(f).unwrap(), want);
    assert_eq!(read_all(&e, f), b"data");
    assert_eq!(read_all(&e, g), text(3, 300_000));
    assert_eq!(e.lookup(ROOT_INO, b"g").unwrap(), Some((g, FileKind::File)));
    assert_eq!(e.dir_list(ROOT_INO, 0, 10).unwrap().len(), 2);
    assert_eq!(want.atime, t);
    assert!(e.fsck().unwrap().is_clean());
}

/// The superblock of a closed pool.
fn superblock(pool: &Path) -> squeezefs_meta::Superblock {
    use redb::ReadableDatabase;
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let v = rx.open_table(squeezefs_meta::tables::SUPERBLOCK).unwrap().get(0u8).unwrap().unwrap().value().to_vec();
    squeezefs_meta::Superblock::decode(&v).unwrap()
}

/// mkfs takes bundle sizes that are powers of two from the record size to 4 MiB and
/// refuses the others naming the size, the record size and what is accepted (leaving no
/// pool); without one a pool's bundles are twice its record size long. A bundle size equal
/// to the record size leaves the superblock as builds without bundle sizes write it (no
/// `BUNDLE_SIZE`, 89 bytes); any other sets the flag, and the size survives a reopen.
#[test]
fn mkfs_takes_bundle_sizes_from_the_record_size_to_4m() {
    use squeezefs_meta::Features;
    const K: u32 = 1024;
    let d = tempfile::tempdir().unwrap();
    for (i, &(rs, bs)) in
        [(128 * K, 64 * K), (128 * K, 384 * K), (128 * K, 8192 * K), (1024 * K, 512 * K), (4 * K, 0), (4 * K, 6 * K)]
            .iter()
            .enumerate()
    {
        let pool = d.path().join(format!("bad{i}"));
        let opts = MkfsOptions { recordsize: Some(rs), bundle_size: Some(bs), ..Default::default() };
        let err = Engine::mkfs(&pool, &opts).unwrap_err();
        assert!(
            matches!(&err, EngineError::Pool(PoolError::BundleSizeUnsupported { bundle_size, recordsize })
                if (*bundle_size, *recordsize) == (bs, rs)),
            "{rs}/{bs}: {err:?}"
        );
        let msg = err.to_string();
        for part in [&format!("bundle size {bs} "), &format!("record size {rs} "), "power of two", "4194304"] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
        assert!(!pool.join(META_FILE).exists(), "a refused mkfs left a pool");
    }
    let cases: [(Option<u32>, Option<u32>, u32); 7] = [
        (None, None, 256 * K),
        (Some(4 * K), None, 8 * K),
        (Some(1024 * K), None, 2048 * K),
        (Some(128 * K), Some(128 * K), 128 * K),
        (Some(128 * K), Some(4096 * K), 4096 * K),
        (Some(4 * K), Some(4 * K), 4 * K),
        (Some(1024 * K), Some(4096 * K), 4096 * K),
    ];
    for (i, &(rs, bs, want)) in cases.iter().enumerate() {
        let pool = d.path().join(format!("good{i}"));
        Engine::mkfs(&pool, &MkfsOptions { recordsize: rs, bundle_size: bs, ..Default::default() }).unwrap();
        let sb = superblock(&pool);
        let flagged = sb.features.incompat & Features::INCOMPAT_BUNDLE_SIZE != 0;
        assert_eq!(flagged, want != sb.recordsize, "{rs:?}/{bs:?}");
        // and the byte of META_COPIES every new pool has
        assert_eq!(sb.encode().len(), if flagged { 94 } else { 90 });
        assert_eq!(sb.bundle_size(), want);
        let e = Engine::open(&pool, &bundle_opts()).unwrap();
        assert_eq!(e.info().bundle_size, want, "{rs:?}/{bs:?}");
        e.close().unwrap();
        drop(e);
        // commits re-encode the superblock: the field stays with its flag
        let e = Engine::open(&pool, &fast_opts()).unwrap();
        assert_eq!(e.info().bundle_size, want, "{rs:?}/{bs:?} after a reopen");
        e.close().unwrap();
        drop(e);
        assert_eq!(superblock(&pool).bundle_size(), want);
    }
}

/// A superblock whose bundle size is out of range (shorter than the record size, not a
/// power of two, longer than 4 MiB) is a damaged one: open refuses it naming the size.
#[test]
fn open_refuses_a_superblock_with_a_bundle_size_out_of_range() {
    let d = tempfile::tempdir().unwrap();
    for bad in [64 * 1024u32, 300 * 1024, 8 << 20] {
        let pool = d.path().join(format!("p{bad}"));
        Engine::mkfs(&pool, &MkfsOptions { bundle_size: Some(512 * 1024), ..Default::default() }).unwrap();
        {
            use redb::ReadableTable;
            let db = Engine::open_meta_store(&pool).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(squeezefs_meta::tables::SUPERBLOCK).unwrap();
                let mut sb = squeezefs_meta::Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
                sb.bundle_size = Some(bad);
                t.insert(0u8, &sb.encode()[..]).unwrap();
            }
            tx.commit().unwrap();
        }
        let err = Engine::open(&pool, &fast_opts()).err().expect("a damaged superblock opened");
        assert!(
            matches!(err, EngineError::Pool(PoolError::CorruptSuperblock { bundle_size, .. }) if bundle_size == bad)
        );
        assert!(err.to_string().contains(&format!("bundle size {bad}")), "{err}");
    }
}

/// The extents of `ino`: whether each record is bundled, and its decoded length.
fn records(e: &Engine, ino: Ino) -> Vec<(bool, u32)> {
    e.extents(ino).unwrap().iter().map(|(_, x)| (matches!(x.stored, StoredRecord::Bundled(_)), x.logical)).collect()
}

/// A pool whose bundles are four records long (32 KiB records, 128 KiB bundles): files of
/// every length around the record and bundle boundaries (and files with 1 MiB records of
/// their own) are written in one txg. Bundles fill past a record up to the bundle size,
/// never beyond, and a bundle is closed only when the next member would not fit; members
/// stay shorter than a record, full records stay on their own. Everything reads back and
/// stays fsck- and scrub-clean through the bundles' life: a member changed in place (copy
/// on write through its bundle), a full record of a bundled file changed (its tail stays),
/// members cut by truncations, then every file deleted one at a time until the last bundle
/// is freed and the pool's space with it; the bundle size survives reopens.
#[test]
fn bundles_four_records_long_hold_files_of_every_length_through_their_life() {
    const RS: u64 = 32 * 1024;
    const BS: u64 = 4 * RS;
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let mkfs = MkfsOptions { recordsize: Some(RS as u32), bundle_size: Some(BS as u32), ..Default::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &bundle_opts()).unwrap();
    assert_eq!((u64::from(e.info().recordsize), u64::from(e.info().bundle_size)), (RS, BS));
    let mut lens: Vec<u64> = vec![1, 2, 100, 2047, 2048, 2049, 4095, 4096, 4097];
    for base in [RS, 2 * RS, 3 * RS, BS, BS + RS] {
        lens.extend([base - 1, base, base + 1, base + RS / 2]);
    }
    lens.extend((0..40).map(|i| 300 + i * 617 % 9000));
    // (name, content, own record size)
    let mut want: Vec<(String, Vec<u8>, u64)> = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let name = format!("f{i:03}");
        let data = text(700 + i as u64, len as usize);
        e.write(create(&e, &name), 0, &data).unwrap();
        want.push((name, data, RS));
    }
    // 1 MiB records of their own: a short tail below the pool's record size is bundled, one
    // above it (though below the bundle size) stays on its own
    for (name, len) in [("own-small", 20 * 1024), ("own-mid", 100 * 1024)] {
        let data = text(len as u64, len);
        e.write(create_rs(&e, name, 1 << 20), 0, &data).unwrap();
        want.push((name.to_string(), data, 1 << 20));
    }
    e.sync().unwrap();

    let bundles = e.bundles().unwrap();
    assert!(bundles.len() >= 3, "{} bundles", bundles.len());
    for (id, b) in &bundles {
        assert!(u64::from(b.logical) <= BS, "bundle {id} decodes to {} bytes", b.logical);
    }
    assert!(bundles.iter().any(|(_, b)| u64::from(b.logical) > RS), "no bundle is longer than a record");
    // members are shorter than a record, so a bundle closed at most a record short of full
    let short = bundles.iter().filter(|(_, b)| u64::from(b.logical) <= BS - RS).count();
    assert!(short <= 1, "{short} bundles were closed while a member would have fit");
    let mut unbundled_tails = 0;
    for (name, data, rs) in &want {
        let f = file(&e, name);
        let recs = records(&e, f);
        let len = data.len() as u64;
        assert_eq!(recs.len() as u64, len.div_ceil(*rs), "{name}");
        let (last, whole) = recs.split_last().unwrap();
        assert!(whole.iter().all(|&(b, l)| !b && u64::from(l) == *rs), "{name}: a full record bundled");
        let tail = len % rs;
        if tail == 0 || tail >= RS {
            assert!(!last.0, "{name}: a record of {} bytes bundled", last.1);
        } else if !last.0 {
            unbundled_tails += 1;
        }
        assert_eq!(&read_all(&e, f), data, "{name}");
    }
    assert!(unbundled_tails <= 1, "{unbundled_tails} short tails stored on their own");
    assert!(records(&e, file(&e, "own-small"))[0].0 && !records(&e, file(&e, "own-mid"))[0].0);
    check_clean(&e);

    // changes through the bundles, by an engine that bundles
    let at = |want: &mut Vec<(String, Vec<u8>, u64)>, name: &str| want.iter().position(|w| w.0 == name).unwrap();
    let count = |e: &Engine, id: u64| e.bundles().unwrap().into_iter().find(|(i, _)| *i == id).map(|(_, b)| b.members);
    // copy on write of a member: a few bytes in the middle of the tail of a 2-record file
    let name = format!("f{:03}", lens.iter().position(|&l| l == 2 * RS + RS / 2).unwrap());
    let f = file(&e, &name);
    let id = bundle_of(&e, f).expect("tail bundled");
    let before = count(&e, id).unwrap();
    e.write(f, 2 * RS + 100, b"CHANGED IN PLACE").unwrap();
    let i = at(&mut want, &name);
    want[i].1[(2 * RS + 100) as usize..(2 * RS + 116) as usize].copy_from_slice(b"CHANGED IN PLACE");
    // a full record of another bundled file: its tail stays where it is
    let name2 = format!("f{:03}", lens.iter().position(|&l| l == 3 * RS + 1).unwrap());
    let f2 = file(&e, &name2);
    let id2 = bundle_of(&e, f2).expect("tail bundled");
    e.write(f2, 10, b"HEAD").unwrap();
    let i2 = at(&mut want, &name2);
    want[i2].1[10..14].copy_from_slice(b"HEAD");
    e.sync().unwrap();
    assert_ne!(bundle_of(&e, f), Some(id), "the changed tail is still in its old bundle");
    assert_eq!(count(&e, id), Some(before - 1));
    assert_eq!(bundle_of(&e, f2), Some(id2), "an untouched tail left its bundle");
    for (name, data, _) in &want {
        assert_eq!(&read_all(&e, file(&e, name)), data, "{name} after the changes");
    }
    check_clean(&e);

    // truncations: a tail cut shorter, a tail cut off at a record boundary, a file cut
    // into its first record's middle
    for (len, to) in [(BS + RS / 2, BS + 100), (3 * RS + RS / 2, 3 * RS), (2 * RS - 1, 5000)] {
        let name = format!("f{:03}", lens.iter().position(|&l| l == len).unwrap());
        e.set_size(file(&e, &name), to).unwrap();
        let i = at(&mut want, &name);
        want[i].1.truncate(to as usize);
    }
    e.sync().unwrap();
    for (name, data, _) in &want {
        assert_eq!(&read_all(&e, file(&e, name)), data, "{name} after the truncations");
    }
    check_clean(&e);
    e.close().unwrap();
    drop(e);

    // reopened: the bundle size is the pool's; every file deleted one by one
    let e = Engine::open(&pool, &bundle_opts()).unwrap();
    assert_eq!(u64::from(e.info().bundle_size), BS);
    for (name, data, _) in &want {
        assert_eq!(&read_all(&e, file(&e, name)), data, "{name} after a reopen");
    }
    let mut members: std::collections::BTreeMap<u64, u32> =
        e.bundles().unwrap().into_iter().map(|(id, b)| (id, b.members)).collect();
    for (k, (name, _, _)) in want.iter().enumerate() {
        if let Some(id) = bundle_of(&e, file(&e, name)) {
            *members.get_mut(&id).unwrap() -= 1;
        }
        delete(&e, name);
        e.sync().unwrap();
        let live: std::collections::BTreeMap<u64, u32> =
            e.bundles().unwrap().into_iter().map(|(id, b)| (id, b.members)).collect();
        members.retain(|_, m| *m > 0);
        assert_eq!(live, members, "after deleting {name}");
        if k % 8 == 7 {
            check_clean(&e);
        }
    }
    assert!(e.bundles().unwrap().is_empty());
    assert_eq!(used(&e), 0, "space left allocated after every file was deleted");
    check_clean(&e);
}
