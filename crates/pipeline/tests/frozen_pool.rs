//! A pool written by an older build (tests/fixtures/pool-v1-sector-packed, made before the
//! `PACKED_BYTES` feature) opens, reads back exactly, stays sector-packed for new writes
//! (its free map and footprints are in whole sectors), and stays fsck-clean.

mod common;
use common::*;
use squeezefs_pipeline::*;
use std::path::Path;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-sector-packed");

fn unpack(to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for name in ["meta.redb", "data.0"] {
        let z = std::fs::read(Path::new(FIXTURE).join(format!("{name}.zst"))).unwrap();
        std::fs::write(to.join(name), zstd::decode_all(&z[..]).unwrap()).unwrap();
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
        let db = redb::Database::open(pool.join(META_FILE)).unwrap();
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

/// A pool made before background compression has no `background` table and no
/// COMPAT_BACKGROUND bit: it reads as "never ran", a saved cursor is committed with the next
/// txg, the bit is set then, and the pool stays readable and clean.
#[test]
fn a_pool_of_an_older_build_gets_a_background_cursor_and_its_compat_bit() {
    use redb::ReadableDatabase;
    let superblock = |pool: &Path| {
        let db = redb::Database::open(pool.join(META_FILE)).unwrap();
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
