//! Pools written by older builds open, read back exactly and stay fsck-clean:
//! * tests/fixtures/pool-v1-sector-packed, made before the `PACKED_BYTES` feature, stays
//!   sector-packed for new writes (its free map and footprints are in whole sectors);
//! * tests/fixtures/pool-v1-before-recordsizes, made before per-file record sizes (no
//!   `recordsizes` table, directories with `recordsize` properties that build stored only):
//!   every file keeps the pool's record size, and the pool gets `RECORDSIZES` only when a
//!   file with another record size is created;
//! * tests/fixtures/pool-v1-bundles-before-recordsizes, made with bundles and compact rows
//!   but before per-file record sizes: the same, with its bundled tails read and changed;
//! * tests/fixtures/pool-v1-sealed, that pool sealed in seal format 1: it opens read-only
//!   from the seal and read-write by unsealing it;
//! * tests/fixtures/pool-v1-bundles-before-bundle-size, made with bundles bounded by its
//!   record size, before pools had a bundle size: its bundles, old and new, stay within a
//!   record and its superblock without the field;
//! * tests/fixtures/pool-v1-copy-headers-v1, a two-copy metadata store with version 1 copy
//!   headers: it opens and takes version 2 headers from its first read-write open.

mod common;
use common::*;
use squeezefs_pipeline::*;
use std::path::Path;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-sector-packed");

fn unpack(to: &Path) {
    unpack_fixture(FIXTURE, to)
}

fn unpack_fixture(fixture: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for name in ["meta.redb", "data.0"] {
        let z = std::fs::read(Path::new(fixture).join(format!("{name}.zst"))).unwrap();
        std::fs::write(to.join(name), zstd::decode_all(&z[..]).unwrap()).unwrap();
    }
}

/// Every `NAME.zst` of `fixture` into `to` as `NAME`.
fn unpack_zst_dir(fixture: &str, to: &Path) {
    for entry in std::fs::read_dir(fixture).unwrap() {
        let p = entry.unwrap().path();
        if let Some(name) = p.file_name().unwrap().to_str().unwrap().strip_suffix(".zst") {
            std::fs::write(to.join(name), zstd::decode_all(&std::fs::read(&p).unwrap()[..]).unwrap()).unwrap();
        }
    }
}

fn text() -> Vec<u8> {
    (0..20000).flat_map(|i| format!("line {i} of the frozen pool\n").into_bytes()).collect()
}

fn noise() -> Vec<u8> {
    let mut x: u64 = 1;
    (0..6000)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

fn sparse() -> Vec<u8> {
    let mut v = vec![0u8; 300000];
    v.extend(b"after the hole\n".repeat(100));
    v
}

fn file(e: &Engine, dir: Ino, name: &str) -> Ino {
    e.lookup(dir, name.as_bytes()).unwrap().unwrap_or_else(|| panic!("{name} missing")).0
}

fn check_contents(e: &Engine) {
    assert_eq!(read_all(e, file(e, ROOT_INO, "text")), text());
    assert_eq!(read_all(e, file(e, ROOT_INO, "noise")), noise());
    assert_eq!(read_all(e, file(e, ROOT_INO, "small")), b"hello frozen pool\n");
    assert_eq!(read_all(e, file(e, ROOT_INO, "sparse")), sparse());
    let dir = file(e, ROOT_INO, "dir");
    assert_eq!(e.read_link(file(e, dir, "link")).unwrap(), b"../text");
}

#[test]
fn a_sector_packed_pool_of_an_older_build_reads_back_and_stays_sector_packed() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack(&pool);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(e.info().sector, 512);
    check_contents(&e);
    let r = e.fsck().unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.allocated_bytes, 20_992);

    // new records, compressible and odd-sized: still whole sectors each, in this pool
    e.set_compression("zstd:3".parse().unwrap(), false);
    let f = create(&e, "new");
    let data: Vec<u8> = (0..3000).flat_map(|i| format!("{i} is new\n").into_bytes()).collect();
    e.write(f, 0, &data).unwrap();
    // and a record replaced: its old sectors are freed
    let t = file(&e, ROOT_INO, "text");
    e.write(t, 1000, b"CHANGED").unwrap();
    e.sync().unwrap();
    for (_, x) in e.extents(f).unwrap().into_iter().chain(e.extents(t).unwrap()) {
        if let StoredRecord::Device(dx) = x.stored {
            assert_eq!(dx.offset % 512, 0, "an extent of a sector-packed pool at {}", dx.offset);
        }
    }
    assert_eq!(e.device_stats()[0].used_bytes % 512, 0);
    let r = e.fsck().unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    e.close().unwrap();
    drop(e);

    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let mut want = text();
    want[1000..1007].copy_from_slice(b"CHANGED");
    assert_eq!(read_all(&e, file(&e, ROOT_INO, "text")), want);
    assert_eq!(read_all(&e, f), data);
    assert!(e.fsck().unwrap().problems.is_empty());
}

/// In a pool without byte packing every record starts on a sector (its footprint is whole
/// sectors); fsck did not check it, so a record moved off its sector went unnoticed as long
/// as it overlapped nothing.
#[test]
fn fsck_of_a_sector_packed_pool_reports_a_record_off_its_sector() {
    use redb::ReadableTable;
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack(&pool);
    {
        let db = Engine::open_meta_store(&pool).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(squeezefs_meta::tables::EXTENTS).unwrap();
            let (k, mut x) = t
                .iter()
                .unwrap()
                .map(|r| r.unwrap())
                .map(|(k, v)| (k.value().to_vec(), ExtentPtr::decode(v.value()).unwrap()))
                .find(|(_, x)| matches!(x.stored, StoredRecord::Device(_)))
                .expect("a device extent in the fixture");
            if let StoredRecord::Device(dx) = x.stored {
                x.stored = StoredRecord::Device(DeviceExtent { offset: dx.offset + 1, ..dx });
            }
            t.insert(&k[..], &x.encode()[..]).unwrap();
        }
        tx.commit().unwrap();
    }
    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
    let r = e.fsck().unwrap();
    assert!(r.problems.iter().any(|p| p.contains("is not on a 512-byte sector")), "{:?}", r.problems);
}

const BEFORE_RECORDSIZES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-before-recordsizes");

fn lines(n: usize, f: impl Fn(usize) -> String) -> Vec<u8> {
    (0..n).flat_map(|i| f(i).into_bytes()).collect()
}

/// The files of pool-v1-before-recordsizes (its README): (path, content).
fn before_recordsizes_files() -> Vec<(&'static str, Vec<u8>)> {
    let mut sparse = vec![0u8; 300000];
    sparse.extend(b"after the hole\n".repeat(100));
    vec![
        ("text", lines(20000, |i| format!("line {i} of the frozen pool\n"))),
        ("small", b"hello frozen pool\n".to_vec()),
        ("sparse", sparse),
        ("logs/app.log", lines(15000, |i| format!("log line {i}\n"))),
        ("big/data", lines(120000, |i| format!("block {i} of big data\n"))),
    ]
}

fn path_ino(e: &Engine, path: &str) -> Ino {
    path.split('/').fold(ROOT_INO, |dir, name| file(e, dir, name))
}

fn incompat(pool: &Path) -> u64 {
    use redb::ReadableDatabase;
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let v = rx.open_table(squeezefs_meta::tables::SUPERBLOCK).unwrap().get(0u8).unwrap().unwrap().value().to_vec();
    squeezefs_meta::Superblock::decode(&v).unwrap().features.incompat
}

#[test]
fn a_pool_from_before_record_sizes_reads_unchanged_at_its_record_size() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack_fixture(BEFORE_RECORDSIZES, &pool);
    let flag = squeezefs_meta::Features::INCOMPAT_RECORDSIZES;
    assert_eq!(incompat(&pool) & flag, 0);
    // read-only first: the store has no recordsizes table and must not need one
    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
    for (path, data) in before_recordsizes_files() {
        let f = path_ino(&e, path);
        assert_eq!(read_all(&e, f), data, "{path}");
        assert_eq!(e.record_size(f).unwrap(), 128 << 10, "{path}: written at the pool's record size");
        for (off, x) in e.extents(f).unwrap() {
            assert!(off % (128 << 10) == 0 && x.logical <= 128 << 10, "{path}: a record at {off}");
        }
    }
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert_eq!((r.inodes, r.extents, r.allocated_bytes), (8, 32, 100_202));
    drop(e);

    // read-write: changes at the pool's record size leave the pool readable by the old build
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    e.set_compression("zstd:3".parse().unwrap(), false);
    let log = path_ino(&e, "logs/app.log");
    let mut want_log = before_recordsizes_files()[3].1.clone();
    let more = lines(5000, |i| format!("appended {i}\n"));
    e.write(log, want_log.len() as u64, &more).unwrap();
    want_log.extend(&more);
    let plain = create(&e, "plain-new");
    e.write(plain, 0, &more).unwrap();
    e.close().unwrap();
    drop(e);
    assert_eq!(incompat(&pool) & flag, 0, "nothing with its own record size yet");

    // a file with its own record size marks the pool
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let own = e
        .meta_write(|tx| {
            let ino = tx.alloc_ino()?;
            tx.put_inode(&attr(ino, FileKind::File, 1))?;
            tx.set_record_size(ino, 16 << 10)?;
            tx.dir_insert(ROOT_INO, b"own", ino, FileKind::File)?;
            Ok(ino)
        })
        .unwrap();
    e.write(own, 0, &more).unwrap();
    e.close().unwrap();
    drop(e);
    assert_ne!(incompat(&pool) & flag, 0);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    for (path, data) in before_recordsizes_files() {
        let want = if path == "logs/app.log" { &want_log } else { &data };
        assert_eq!(read_all(&e, path_ino(&e, path)), *want, "{path}");
    }
    assert_eq!(read_all(&e, plain), more);
    assert_eq!((e.record_size(own).unwrap(), e.record_size(plain).unwrap()), (16 << 10, 128 << 10));
    assert_eq!(read_all(&e, own), more);
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

/// A pool made before background compression has no `background` table and no
/// COMPAT_BACKGROUND bit: it reads as "never ran", a saved cursor is committed with the next
/// txg, the bit is set then, and the pool stays readable and clean.
#[test]
fn a_pool_of_an_older_build_gets_a_background_cursor_and_its_compat_bit() {
    use redb::ReadableDatabase;
    let superblock = |pool: &Path| {
        let db = Engine::open_meta_store(pool).unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_table(squeezefs_meta::tables::SUPERBLOCK).unwrap();
        let v = t.get(0u8).unwrap().unwrap();
        squeezefs_meta::Superblock::decode(v.value()).unwrap()
    };
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack(&pool);
    assert_eq!(superblock(&pool).features.compat & squeezefs_meta::Features::COMPAT_BACKGROUND, 0);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(e.background_cursor().unwrap(), None, "never ran");
    let c = BgCursor {
        floor_txg: 3,
        ceiling_txg: 9,
        path: vec![BgFrame { dir: ROOT_INO, cookie_in_parent: 0, done_through: 4 }],
        mount_spec: "zstd:15".into(),
        converted_records: 2,
        ..Default::default()
    };
    e.save_background_cursor(c.clone()).unwrap();
    assert_eq!(e.background_cursor().unwrap(), Some(c.clone()), "pending, read back before its commit");
    e.close().unwrap();
    drop(e);
    assert_ne!(superblock(&pool).features.compat & squeezefs_meta::Features::COMPAT_BACKGROUND, 0);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(e.background_cursor().unwrap(), Some(c));
    check_contents(&e);
    assert!(e.fsck().unwrap().problems.is_empty());
}

/// A pool made before `auto_start` has no such table and no COMPAT_AUTO_START bit: it opens,
/// and the commit of its first write under `auto` writes the range's row and sets the bit;
/// the pool stays readable and clean.
#[test]
fn a_pool_of_an_older_build_gains_the_auto_start_row_and_its_compat_bit() {
    use redb::ReadableDatabase;
    let read = |pool: &Path| {
        let db = Engine::open_meta_store(pool).unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_table(squeezefs_meta::tables::SUPERBLOCK).unwrap();
        let sb = squeezefs_meta::Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
        let row = match rx.open_table(squeezefs_meta::tables::AUTO_START) {
            Ok(t) => t.get(&b"auto"[..]).unwrap().map(|v| squeezefs_meta::AutoStart::decode(v.value()).unwrap()),
            Err(_) => None,
        };
        (sb.features.compat & squeezefs_meta::Features::COMPAT_AUTO_START, row)
    };
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack(&pool);
    assert_eq!(read(&pool), (0, None));
    let opts = OpenOptions { compression: "auto".parse().unwrap(), ..fast_opts() };
    let e = Engine::open(&pool, &opts).unwrap();
    check_contents(&e);
    let f = create(&e, "auto");
    e.write(f, 0, &text().repeat(64)).unwrap();
    e.close().unwrap();
    drop(e);
    let (bit, row) = read(&pool);
    assert_ne!(bit, 0, "the commit that wrote a row set the bit");
    assert!(row.is_some(), "no row for the pool's auto range");
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    check_contents(&e);
    assert!(e.fsck().unwrap().problems.is_empty());
}

const BUNDLES_BEFORE_RECORDSIZES: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-bundles-before-recordsizes");

/// The files of pool-v1-bundles-before-recordsizes (its README): (path, content).
fn bundles_before_recordsizes_files() -> Vec<(String, Vec<u8>)> {
    let mut v = vec![
        ("text".to_string(), text()),
        ("small".to_string(), b"hello frozen pool\n".to_vec()),
        ("db/table".to_string(), lines(10000, |i| format!("row {i} of the table\n"))),
        ("db/tiny".to_string(), b"tiny row\n".repeat(10)),
        ("big/data".to_string(), lines(120000, |i| format!("block {i} of big data\n"))),
        ("noise".to_string(), noise()),
        ("sparse".to_string(), sparse()),
    ];
    v.extend((0..20).map(|n| (format!("many/{n:03}"), format!("small file {n}\n").repeat(20 * n + 1).into_bytes())));
    v
}

/// A pool with bundles and compact rows from before per-file record sizes: every file reads
/// back at the pool's record size (bundled tails included) without a `recordsizes` table;
/// new files at the pool's record size leave it without `RECORDSIZES`, a file with its own
/// record size sets it; a bundled old tail changed and one of a new 16 KiB-record file read
/// back; fsck and scrub stay clean.
#[test]
fn a_pool_with_bundles_from_before_record_sizes_takes_files_with_their_own() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack_fixture(BUNDLES_BEFORE_RECORDSIZES, &pool);
    let f = squeezefs_meta::Features::INCOMPAT_RECORDSIZES;
    let had = squeezefs_meta::Features::INCOMPAT_BUNDLES | squeezefs_meta::Features::INCOMPAT_COMPACT_ROWS;
    assert_eq!(incompat(&pool) & (f | had), had);
    let clean = |e: &Engine| {
        let r = e.fsck().unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
        let s = e.scrub(&|_, _| {}).unwrap();
        assert!(s.is_clean(), "{:?}", s.damaged);
        r
    };
    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
    let mut bundled = 0;
    for (path, data) in bundles_before_recordsizes_files() {
        let ino = path_ino(&e, &path);
        assert_eq!(read_all(&e, ino), data, "{path}");
        assert_eq!(e.record_size(ino).unwrap(), 128 << 10, "{path}: written at the pool's record size");
        for (off, x) in e.extents(ino).unwrap() {
            assert!(off % (128 << 10) == 0 && x.logical <= 128 << 10, "{path}: a record at {off}");
            bundled += usize::from(matches!(x.stored, StoredRecord::Bundled(_)));
        }
    }
    assert!(bundled >= 20, "{bundled} bundled records");
    let r = clean(&e);
    assert_eq!((r.inodes, r.extents, r.bundles, r.allocated_bytes), (31, 54, 3, 103_846));
    drop(e);

    // a new file at the pool's record size: the pool stays readable by the build that made it
    let opts = OpenOptions { compression: "zstd:3".parse().unwrap(), bundle_small_records: true, ..fast_opts() };
    let e = Engine::open(&pool, &opts).unwrap();
    let more = lines(3000, |i| format!("appended {i}\n"));
    let plain = create(&e, "plain-new");
    e.write(plain, 0, &more).unwrap();
    e.close().unwrap();
    drop(e);
    assert_eq!(incompat(&pool) & f, 0, "nothing with its own record size yet");

    // a file with its own record size (its tail bundled with another), an old tail changed
    let e = Engine::open(&pool, &opts).unwrap();
    let db = path_ino(&e, "db");
    let own = e
        .meta_write(|tx| {
            let ino = tx.alloc_ino()?;
            tx.put_inode(&attr(ino, FileKind::File, 1))?;
            tx.set_record_size(ino, 16 << 10)?;
            tx.dir_insert(db, b"own", ino, FileKind::File)?;
            Ok(ino)
        })
        .unwrap();
    let own_data = lines(2500, |i| format!("own row {i}\n"));
    e.write(own, 0, &own_data).unwrap();
    e.write(create(&e, "tail-mate"), 0, b"a short file bundled with own's tail\n").unwrap();
    let text_ino = path_ino(&e, "text");
    e.write(text_ino, 588_000, b"CHANGED").unwrap();
    e.close().unwrap();
    drop(e);
    assert_ne!(incompat(&pool) & f, 0);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let mut want_text = text();
    want_text[588_000..588_007].copy_from_slice(b"CHANGED");
    for (path, data) in bundles_before_recordsizes_files() {
        let want = if path == "text" { &want_text } else { &data };
        assert_eq!(read_all(&e, path_ino(&e, &path)), *want, "{path}");
    }
    assert_eq!(read_all(&e, plain), more);
    assert_eq!(e.record_size(own).unwrap(), 16 << 10);
    assert_eq!(read_all(&e, own), own_data);
    let own_ext = e.extents(own).unwrap();
    assert!(own_ext.iter().all(|(off, x)| off % (16 << 10) == 0 && x.logical <= 16 << 10));
    assert!(matches!(own_ext.last().unwrap().1.stored, StoredRecord::Bundled(_)), "own's tail is not bundled");
    clean(&e);
}

const SEALED_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-sealed");

/// A pool sealed in seal format 1 opens read-only from its seal, leaving it as it is, and
/// read-write by unsealing it; both read every file back and are fsck-clean.
#[test]
fn a_pool_sealed_in_seal_format_1_opens_read_only_and_unseals_for_writing() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    std::fs::create_dir_all(&pool).unwrap();
    let seal = std::fs::read(Path::new(SEALED_FIXTURE).join(SEAL_FILE)).unwrap();
    std::fs::write(pool.join(SEAL_FILE), &seal).unwrap();
    let z = std::fs::read(Path::new(SEALED_FIXTURE).join("data.0.zst")).unwrap();
    std::fs::write(pool.join("data.0"), zstd::decode_all(&z[..]).unwrap()).unwrap();
    let check = |e: &Engine| {
        for (path, want) in bundles_before_recordsizes_files() {
            assert_eq!(read_all(e, path_ino(e, &path)), want, "{path}");
        }
        let r = e.fsck().unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
        assert_eq!((r.inodes, r.extents, r.bundles), (31, 54, 3));
    };
    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
    check(&e);
    e.close().unwrap();
    drop(e);
    assert!(std::fs::read(pool.join(SEAL_FILE)).unwrap() == seal, "a read-only open wrote the seal");
    assert!(!pool.join(META_FILE).exists());
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert!(pool.join(META_FILE).exists() && !pool.join(SEAL_FILE).exists());
    check(&e);
}

const BUNDLES_BEFORE_BUNDLE_SIZE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-bundles-before-bundle-size");

/// The files of pool-v1-bundles-before-bundle-size (its README): (path, content).
fn bundles_before_bundle_size_files() -> Vec<(String, Vec<u8>)> {
    let mut v = vec![
        ("text".to_string(), text()),
        ("small".to_string(), b"hello frozen pool\n".to_vec()),
        ("noise".to_string(), noise()),
    ];
    v.extend((0..60).map(|n| (format!("many/{n:03}"), format!("small file {n}\n").repeat(20 * n + 1).into_bytes())));
    v
}

/// The superblock row of a closed pool, as stored.
fn superblock_bytes(pool: &Path) -> Vec<u8> {
    use redb::ReadableDatabase;
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let v = rx.open_table(squeezefs_meta::tables::SUPERBLOCK).unwrap().get(0u8).unwrap().unwrap().value().to_vec();
    v
}

/// A pool from before bundle sizes, its bundles bounded by its 32 KiB record size: it opens
/// with that bound (no `BUNDLE_SIZE`: its bundle size is its record size) and reads back;
/// an engine that bundles writes new bundles of at most a record, though they would fill
/// the default twice that, and leaves the superblock as it was (89 bytes, no new flag), so
/// the build that made the pool still opens it; a bundled file changed in place and new
/// small files read back, fsck and scrub stay clean.
#[test]
fn a_pool_with_bundles_from_before_bundle_sizes_keeps_them_within_a_record() {
    const RS: u32 = 32 << 10;
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack_fixture(BUNDLES_BEFORE_BUNDLE_SIZE, &pool);
    let flag = squeezefs_meta::Features::INCOMPAT_BUNDLE_SIZE;
    let had = incompat(&pool);
    assert_eq!(had & flag, 0);
    assert_ne!(had & squeezefs_meta::Features::INCOMPAT_BUNDLES, 0);
    let original_sb = superblock_bytes(&pool);
    assert_eq!(original_sb.len(), 89);
    let clean = |e: &Engine| {
        let r = e.fsck().unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
        let s = e.scrub(&|_, _| {}).unwrap();
        assert!(s.is_clean(), "{:?}", s.damaged);
        r
    };
    let within_a_record = |e: &Engine| {
        let b = e.bundles().unwrap();
        for (id, b) in &b {
            assert!(b.logical <= RS && b.ext.psize <= RS, "bundle {id}: {} / {} bytes", b.logical, b.ext.psize);
        }
        b.len()
    };
    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
    assert_eq!((e.info().recordsize, e.info().bundle_size), (RS, RS));
    for (path, data) in bundles_before_bundle_size_files() {
        assert_eq!(read_all(&e, path_ino(&e, &path)), data, "{path}");
    }
    assert_eq!(within_a_record(&e), 19);
    let r = clean(&e);
    assert_eq!((r.inodes, r.extents, r.bundles, r.allocated_bytes), (65, 80, 19, 20_982));
    drop(e);

    let opts = OpenOptions { compression: "zstd:3".parse().unwrap(), bundle_small_records: true, ..fast_opts() };
    let e = Engine::open(&pool, &opts).unwrap();
    assert!(e.bundling());
    assert_eq!(e.info().bundle_size, RS);
    let mut want = bundles_before_bundle_size_files();
    let old = e.bundles().unwrap().into_iter().map(|(id, _)| id).max().unwrap();
    // 40 new small files, 133 KB in all: at least 5 bundles of 32 KiB, where bundles of the
    // default size (64 KiB here) would hold them in 3
    for n in 0..40usize {
        let data = lines(100 + n * 3, |i| format!("new file {n} line {i}\n"));
        e.write(create(&e, &format!("new{n:02}")), 0, &data).unwrap();
        want.push((format!("new{n:02}"), data));
    }
    let changed = path_ino(&e, "many/030");
    e.write(changed, 100, b"CHANGED").unwrap();
    want.iter_mut().find(|w| w.0 == "many/030").unwrap().1[100..107].copy_from_slice(b"CHANGED");
    e.sync().unwrap();
    let new_bundles = e.bundles().unwrap().into_iter().filter(|(id, _)| *id > old).count();
    assert!(new_bundles >= 5, "{new_bundles} new bundles for 133 KB of small files in 32 KiB bundles");
    within_a_record(&e);
    for (path, data) in &want {
        assert_eq!(&read_all(&e, path_ino(&e, path)), data, "{path}");
    }
    clean(&e);
    e.close().unwrap();
    drop(e);
    let sb = superblock_bytes(&pool);
    assert_eq!(sb.len(), 89, "the superblock gained a field");
    assert_eq!(incompat(&pool), had, "the pool's features changed");

    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
    for (path, data) in &want {
        assert_eq!(&read_all(&e, path_ino(&e, path)), data, "{path} after a reopen");
    }
    within_a_record(&e);
    clean(&e);
}

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-shared-records");

/// The files of the pool with shared records (README.md of the fixture): `a` 10 records of
/// 128 KiB and a tail of 5000 bytes, `b` its copy, `c` records 2..6 of `a` at record 1.
fn shared_files() -> (Vec<u8>, Vec<u8>) {
    let mut a = lines(200_000, |i| format!("shared line {i}\n"));
    a.truncate(10 * 131072 + 5000);
    let mut c = vec![0u8; 131072];
    c.extend_from_slice(&a[2 * 131072..6 * 131072]);
    (a, c)
}

/// Makes tests/fixtures/pool-v1-shared-records (run by hand with SQUEEZEFS_MAKE_FIXTURE set
/// to an empty directory, then `zstd -19` its files; never regenerate a frozen fixture).
#[test]
#[ignore]
fn make_shared_records_fixture() {
    let pool = std::path::PathBuf::from(std::env::var("SQUEEZEFS_MAKE_FIXTURE").unwrap());
    Engine::mkfs(&pool, &MkfsOptions { meta_copies: Some(1), ..Default::default() }).unwrap();
    let e = Engine::open(&pool, &OpenOptions { compression: "zstd:3".parse().unwrap(), ..fast_opts() }).unwrap();
    let (a, _) = shared_files();
    let ia = create(&e, "a");
    e.write(ia, 0, &a).unwrap();
    e.sync().unwrap();
    let ib = create(&e, "b");
    e.share_range(ia, 0, ib, 0, a.len() as u64).unwrap();
    let ic = create(&e, "c");
    e.share_range(ia, 2 * 131072, ic, 131072, 4 * 131072).unwrap();
    e.close().unwrap();
}

/// A pool whose files share records (this build's format of `refcounts` and
/// `SHARED_RECORDS`) reads back, counts its references as it was written, and frees the
/// shared records only with their last file.
#[test]
fn a_pool_with_shared_records_reads_back_and_frees_them_with_their_last_file() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    std::fs::create_dir_all(&pool).unwrap();
    unpack_zst_dir(SHARED, &pool);
    assert_ne!(incompat(&pool) & squeezefs_meta::Features::INCOMPAT_SHARED_RECORDS, 0);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let (a, c) = shared_files();
    let (ia, ib, ic) = (file(&e, ROOT_INO, "a"), file(&e, ROOT_INO, "b"), file(&e, ROOT_INO, "c"));
    assert_eq!(read_all(&e, ia), a);
    assert_eq!(read_all(&e, ib), a);
    assert_eq!(read_all(&e, ic), c);
    let dev = |ino: Ino| -> Vec<DeviceExtent> {
        e.extents(ino)
            .unwrap()
            .into_iter()
            .map(|(_, x)| match x.stored {
                StoredRecord::Device(d) => d,
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let xa = dev(ia);
    let counts: Vec<u64> = xa.iter().map(|x| e.references(x).unwrap()).collect();
    assert_eq!(counts, [2, 2, 3, 3, 3, 3, 2, 2, 2, 2, 1]);
    let f = e.fsck().unwrap();
    assert!(f.is_clean(), "{:?}", f.problems);
    assert_eq!(f.shared_records, 10);
    let used = |e: &Engine| -> u64 { e.device_stats().iter().map(|d| d.used_bytes).sum() };
    let before = used(&e);
    for name in ["a", "b"] {
        e.meta_write(|tx| {
            let (ino, _) = tx.dir_remove(ROOT_INO, name.as_bytes())?;
            tx.delete_inode(ino)
        })
        .unwrap();
    }
    e.sync().unwrap();
    assert_eq!(read_all(&e, ic), c);
    let kept: u64 = xa[2..6].iter().map(|x| u64::from(x.psize)).sum();
    assert_eq!(used(&e), kept, "only c's records are left");
    assert!(before > used(&e));
    let f = e.fsck().unwrap();
    assert!(f.is_clean(), "{:?}", f.problems);
    assert_eq!(f.shared_records, 0);
}

const COPY_HEADERS_V1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-copy-headers-v1");

/// The files of the pool with version 1 copy headers (README.md of the fixture).
fn copy_headers_v1_files() -> Vec<(String, Vec<u8>)> {
    let mut v = vec![("text".to_string(), text()), ("noise".to_string(), noise())];
    for n in 0..40 {
        v.push((format!("f{n:02}"), format!("small file {n}\n").repeat(30 * n + 1).into_bytes()));
    }
    v
}

/// Makes tests/fixtures/pool-v1-copy-headers-v1 (run by hand with SQUEEZEFS_MAKE_FIXTURE set
/// to an empty directory, then `zstd -19` its files; never regenerate a frozen fixture).
#[test]
#[ignore]
fn make_copy_headers_v1_fixture() {
    let pool = std::path::PathBuf::from(std::env::var("SQUEEZEFS_MAKE_FIXTURE").unwrap());
    Engine::mkfs(&pool, &MkfsOptions { meta_copies: Some(2), ..Default::default() }).unwrap();
    let e = Engine::open(&pool, &OpenOptions { compression: "zstd:3".parse().unwrap(), ..fast_opts() }).unwrap();
    for (name, bytes) in copy_headers_v1_files() {
        let ino = create(&e, &name);
        e.write(ino, 0, &bytes).unwrap();
        e.sync().unwrap();
    }
    e.close().unwrap();
}

/// A two-copy store whose copy headers are version 1 (no seq, no digest) opens read-only
/// and read-write, reads back, gets version 2 headers from its first read-write open, and
/// its copies check intact and equal before and after.
#[test]
fn a_store_with_version_1_copy_headers_opens_and_takes_version_2_ones() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    std::fs::create_dir_all(&pool).unwrap();
    unpack_zst_dir(COPY_HEADERS_V1, &pool);
    let version = |i: usize| std::fs::read(pool.join(COPY_FILES[i])).unwrap()[8];
    assert_eq!((version(0), version(1)), (1, 1));
    let intact = |pool: &Path| {
        let c = Engine::check_meta(pool, false).unwrap().unwrap();
        assert!(c.is_clean() && c.copies.iter().all(|c| c.stale_blocks == 0 && c.clean), "{c:?}");
    };
    intact(&pool);
    let reads_back = |e: &Engine| {
        for (name, bytes) in copy_headers_v1_files() {
            assert_eq!(read_all(e, file(e, ROOT_INO, &name)), bytes, "{name}");
        }
    };
    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
    reads_back(&e);
    e.close().unwrap();
    drop(e);
    assert_eq!((version(0), version(1)), (1, 1), "a read-only open writes nothing");
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    reads_back(&e);
    let ino = create(&e, "new");
    e.write(ino, 0, b"written by this build\n").unwrap();
    e.sync().unwrap();
    e.close().unwrap();
    drop(e);
    assert_eq!((version(0), version(1)), (2, 2));
    intact(&pool);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    reads_back(&e);
    assert_eq!(read_all(&e, file(&e, ROOT_INO, "new")), b"written by this build\n");
    assert!(e.fsck().unwrap().is_clean());
    e.close().unwrap();
}
