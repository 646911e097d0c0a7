//! Sealed metadata stores (meta_seal.rs): seal → unseal gives back every row; a sealed pool
//! opens read-only without writing its store and read-write by unsealing; each state a
//! crash can leave opens; a damaged seal is a clear error.
mod common;
use common::*;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, TableHandle};
use squeezefs_meta::tables;
use squeezefs_pipeline::*;
use std::path::Path;

type Rows = Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)>;

/// Every row of every table of the store file `path`, in redb's byte forms, by table.
fn store_rows(pool: &Path) -> Rows {
    fn rows<K: redb::Key + 'static, V: redb::Value + 'static>(
        rx: &redb::ReadTransaction,
        def: TableDefinition<K, V>,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let t = rx.open_table(def).unwrap();
        t.iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                let (kv, vv) = (k.value(), v.value());
                let row = (K::as_bytes(&kv).as_ref().to_vec(), V::as_bytes(&vv).as_ref().to_vec());
                row
            })
            .collect()
    }
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let present: Vec<String> = rx.list_tables().unwrap().map(|t| t.name().to_string()).collect();
    let mut out = Vec::new();
    macro_rules! grab {
        ($def:expr) => {
            if present.iter().any(|n| n == $def.name()) {
                out.push(($def.name().to_string(), rows(&rx, $def)));
            }
        };
    }
    grab!(tables::SUPERBLOCK);
    grab!(tables::DEVICES);
    grab!(tables::INODES);
    grab!(tables::DIRENTS);
    grab!(tables::DIR_COOKIES);
    grab!(tables::DIR_NEXT_COOKIE);
    grab!(tables::XATTRS);
    grab!(tables::SYMLINKS);
    grab!(tables::ORPHANS);
    grab!(tables::EXTENTS);
    grab!(tables::FREE_SPACE);
    grab!(tables::BUNDLES);
    grab!(tables::RECORDSIZES);
    grab!(tables::BACKGROUND);
    grab!(tables::AUTO_START);
    grab!(tables::REFCOUNTS);
    assert_eq!(out.len(), present.len(), "a table the test does not know: {present:?}");
    out
}

fn content(i: usize) -> Vec<u8> {
    match i % 4 {
        0 => format!("small file {i}\n").into_bytes(),
        1 => format!("line {i} of a text file\n").repeat(300).into_bytes(),
        2 => noise(i as u64, 3000 + i * 7),
        _ => Vec::new(),
    }
}

/// A closed pool in `dir` holding 120 files over several commits (inline, device and
/// empty files, xattrs, a deleted file's freed space); their inodes.
fn filled_pool(dir: &Path) -> Vec<Ino> {
    let e = new_pool(dir);
    let mut files = Vec::new();
    for i in 0..120 {
        let f = create(&e, &format!("f{i:03}"));
        e.write(f, 0, &content(i)).unwrap();
        if i % 5 == 0 {
            e.meta_write(|tx| tx.set_xattr(f, b"user.n", format!("{i}").as_bytes())).unwrap();
        }
        files.push(f);
        if i % 30 == 29 {
            e.sync().unwrap();
        }
    }
    e.close().unwrap();
    files
}

fn check_files(e: &Engine, files: &[Ino]) {
    for (i, f) in files.iter().enumerate() {
        assert_eq!(read_all(e, *f), content(i), "file {i}");
    }
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn ro() -> OpenOptions {
    OpenOptions { read_only: true, ..fast_opts() }
}

#[test]
fn seal_then_unseal_gives_back_every_row_of_every_table() {
    let d = tempfile::tempdir().unwrap();
    let files = filled_pool(d.path());
    let before = store_rows(d.path());
    assert!(before.iter().any(|(n, r)| n == "xattrs" && !r.is_empty()));
    let r = Engine::seal(d.path(), 3).unwrap().expect("sealed");
    assert_eq!(r.rows, before.iter().map(|(_, r)| r.len() as u64).sum::<u64>());
    assert!(r.seal_bytes < r.store_bytes / 4, "{r:?}");
    assert!(Engine::is_sealed(d.path()));
    assert!(
        !names(d.path()).iter().any(|n| n == META_FILE || n.starts_with("meta.copy") || n == SEAL_TMP_FILE),
        "{:?}",
        names(d.path())
    );
    assert_eq!(std::fs::metadata(d.path().join(SEAL_FILE)).unwrap().len(), r.seal_bytes);
    assert!(Engine::seal(d.path(), 3).unwrap().is_none(), "sealing twice");
    let u = Engine::unseal(d.path()).unwrap().expect("unsealed");
    assert_eq!(u.rows, r.rows);
    assert!(!Engine::is_sealed(d.path()));
    assert!(!names(d.path()).iter().any(|n| n == SEAL_FILE || n == UNSEAL_TMP_FILE), "{:?}", names(d.path()));
    assert_eq!(store_rows(d.path()), before);
    assert!(Engine::unseal(d.path()).unwrap().is_none(), "unsealing twice");
    let e = Engine::open(d.path(), &fast_opts()).unwrap();
    check_files(&e, &files);
}

#[test]
fn a_sealed_pool_opens_read_only_and_its_store_stays_sealed() {
    let d = tempfile::tempdir().unwrap();
    let files = filled_pool(d.path());
    Engine::seal(d.path(), 3).unwrap().unwrap();
    let seal_before = std::fs::read(d.path().join(SEAL_FILE)).unwrap();
    let listing = names(d.path());
    let e = Engine::open(d.path(), &ro()).unwrap();
    assert!(e.read_only());
    check_files(&e, &files);
    assert!(matches!(e.write(files[0], 0, b"x"), Err(EngineError::ReadOnly)));
    e.close().unwrap();
    drop(e);
    assert_eq!(names(d.path()), listing);
    assert!(std::fs::read(d.path().join(SEAL_FILE)).unwrap() == seal_before, "the read-only open wrote meta.seal");
}

#[test]
fn a_read_write_open_unseals_and_the_pool_takes_writes() {
    let d = tempfile::tempdir().unwrap();
    let files = filled_pool(d.path());
    Engine::seal(d.path(), 3).unwrap().unwrap();
    let e = Engine::open(d.path(), &fast_opts()).unwrap();
    assert!(!Engine::is_sealed(d.path()));
    assert!(!names(d.path()).iter().any(|n| n == SEAL_FILE || n == UNSEAL_TMP_FILE), "{:?}", names(d.path()));
    check_files(&e, &files);
    let f = create(&e, "after");
    e.write(f, 0, b"written after unsealing").unwrap();
    e.close().unwrap();
    drop(e);
    Engine::seal(d.path(), 3).unwrap().unwrap();
    let e = Engine::open(d.path(), &ro()).unwrap();
    assert_eq!(read_all(&e, f), b"written after unsealing");
    check_files(&e, &files);
}

#[test]
fn sealing_is_refused_while_the_pool_is_open() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(d.path());
    match Engine::seal(d.path(), 3) {
        Err(EngineError::Pool(PoolError::InUse { .. })) => {}
        other => panic!("sealing an open pool: {other:?}"),
    }
    assert!(!Engine::is_sealed(d.path()));
    e.close().unwrap();
}

/// The states a crash during unsealing leaves: the seal with a half-written rebuild, and
/// both stores after the rename. Each opens read-only without being changed, and
/// read-write into the plain store.
#[test]
fn every_state_a_crash_while_unsealing_leaves_opens() {
    let d = tempfile::tempdir().unwrap();
    let files = filled_pool(d.path());
    let store = vec![0x5Au8; 64 << 10];
    Engine::seal(d.path(), 3).unwrap().unwrap();
    let sealed = std::fs::read(d.path().join(SEAL_FILE)).unwrap();

    // crash while rebuilding: a partial meta.redb.unseal next to the seal
    std::fs::write(d.path().join(UNSEAL_TMP_FILE), &store[..store.len() / 2]).unwrap();
    let listing = names(d.path());
    let e = Engine::open(d.path(), &ro()).unwrap();
    check_files(&e, &files);
    e.close().unwrap();
    drop(e);
    assert_eq!(names(d.path()), listing, "a read-only open changed the pool directory");
    let e = Engine::open(d.path(), &fast_opts()).unwrap();
    check_files(&e, &files);
    e.close().unwrap();
    drop(e);
    assert!(!names(d.path()).iter().any(|n| n == SEAL_FILE || n == UNSEAL_TMP_FILE), "{:?}", names(d.path()));

    // crash after the rename: meta.redb and meta.seal both present
    std::fs::write(d.path().join(SEAL_FILE), &sealed).unwrap();
    let listing = names(d.path());
    let e = Engine::open(d.path(), &ro()).unwrap();
    check_files(&e, &files);
    e.close().unwrap();
    drop(e);
    assert_eq!(names(d.path()), listing, "a read-only open changed the pool directory");
    let e = Engine::open(d.path(), &fast_opts()).unwrap();
    check_files(&e, &files);
    e.close().unwrap();
    drop(e);
    assert!(!names(d.path()).iter().any(|n| n == SEAL_FILE), "{:?}", names(d.path()));

    // the same state, settled by `unseal`
    std::fs::write(d.path().join(SEAL_FILE), &sealed).unwrap();
    assert!(Engine::unseal(d.path()).unwrap().is_none());
    assert!(!names(d.path()).iter().any(|n| n == SEAL_FILE), "{:?}", names(d.path()));
}

/// The state a crash during sealing leaves before the rename: the store and a partial
/// `meta.seal.tmp`. The store is used; the next seal replaces the stray.
#[test]
fn a_crash_while_sealing_leaves_the_store_in_use() {
    let d = tempfile::tempdir().unwrap();
    let files = filled_pool(d.path());
    Engine::seal(d.path(), 3).unwrap().unwrap();
    let sealed = std::fs::read(d.path().join(SEAL_FILE)).unwrap();
    Engine::unseal(d.path()).unwrap().unwrap();
    std::fs::write(d.path().join(SEAL_TMP_FILE), &sealed[..sealed.len() / 3]).unwrap();
    let e = Engine::open(d.path(), &ro()).unwrap();
    check_files(&e, &files);
    e.close().unwrap();
    drop(e);
    let e = Engine::open(d.path(), &fast_opts()).unwrap();
    check_files(&e, &files);
    e.close().unwrap();
    drop(e);
    assert!(!names(d.path()).iter().any(|n| n == SEAL_TMP_FILE), "{:?}", names(d.path()));
    std::fs::write(d.path().join(SEAL_TMP_FILE), &sealed[..10]).unwrap();
    Engine::seal(d.path(), 3).unwrap().unwrap();
    assert_eq!(names(d.path()).iter().filter(|n| n.starts_with("meta")).collect::<Vec<_>>(), [SEAL_FILE]);
    let e = Engine::open(d.path(), &ro()).unwrap();
    check_files(&e, &files);
}

fn open_error(pool: &Path, opts: &OpenOptions) -> EngineError {
    match Engine::open(pool, opts) {
        Ok(_) => panic!("opened a pool with a damaged seal"),
        Err(e) => e,
    }
}

#[test]
fn a_damaged_seal_is_an_error_naming_the_file_and_the_damage() {
    let d = tempfile::tempdir().unwrap();
    filled_pool(d.path());
    Engine::seal(d.path(), 3).unwrap().unwrap();
    let path = d.path().join(SEAL_FILE);
    let good = std::fs::read(&path).unwrap();
    let listing = names(d.path());

    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x10;
    std::fs::write(&path, &flipped).unwrap();
    for opts in [ro(), fast_opts()] {
        let e = open_error(d.path(), &opts);
        let msg = e.to_string();
        assert!(matches!(e, EngineError::Pool(PoolError::Seal { .. })), "{e:?}");
        assert!(msg.contains(&path.display().to_string()) && msg.contains("checksum of the compressed body"), "{msg}");
        assert_eq!(names(d.path()), listing, "a failed open left files behind");
    }

    std::fs::write(&path, &good[..good.len() - 5]).unwrap();
    let msg = open_error(d.path(), &ro()).to_string();
    assert!(msg.contains("truncated"), "{msg}");

    // a later format version, its header checksum intact
    let mut newer = good.clone();
    newer[8..10].copy_from_slice(&2u16.to_le_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&newer[..56]);
    newer[56..64].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&path, &newer).unwrap();
    let msg = open_error(d.path(), &fast_opts()).to_string();
    assert!(msg.contains("format version 2; this build reads version 1"), "{msg}");

    std::fs::write(&path, b"not a seal at all, but long enough to hold a header of sixty-four bytes").unwrap();
    let msg = open_error(d.path(), &ro()).to_string();
    assert!(msg.contains("not a sealed metadata store"), "{msg}");

    // the good seal still opens
    std::fs::write(&path, &good).unwrap();
    Engine::open(d.path(), &ro()).unwrap().close().unwrap();
}

#[test]
fn a_directory_with_neither_store_is_not_a_pool() {
    let d = tempfile::tempdir().unwrap();
    for opts in [ro(), fast_opts()] {
        let e = open_error(d.path(), &opts);
        assert!(matches!(e, EngineError::Pool(PoolError::NotAPool { .. })), "{e:?}");
        assert!(e.to_string().contains("is not a squeezefs pool (no meta.redb)"), "{e}");
    }
    assert!(matches!(Engine::seal(d.path(), 3), Err(EngineError::Pool(PoolError::NotAPool { .. }))));
    assert!(matches!(Engine::unseal(d.path()), Err(EngineError::Pool(PoolError::NotAPool { .. }))));
}

/// mkfs over a sealed pool is refused without `force`, and with it leaves no seal behind
/// (an open would otherwise still prefer the new store, but a stale seal must not outlive
/// the pool it belonged to).
#[test]
fn mkfs_over_a_sealed_pool_needs_force_and_removes_the_seal() {
    let d = tempfile::tempdir().unwrap();
    filled_pool(d.path());
    Engine::seal(d.path(), 3).unwrap().unwrap();
    let e = Engine::mkfs(d.path(), &MkfsOptions::default()).unwrap_err();
    assert!(matches!(e, EngineError::Pool(PoolError::AlreadyAPool { .. })), "{e:?}");
    assert!(Engine::is_sealed(d.path()));
    Engine::mkfs(d.path(), &MkfsOptions { force: true, ..MkfsOptions::default() }).unwrap();
    assert!(!names(d.path()).iter().any(|n| n == SEAL_FILE), "{:?}", names(d.path()));
    let e = Engine::open(d.path(), &ro()).unwrap();
    assert!(e.lookup(ROOT_INO, b"f000").unwrap().is_none(), "the old pool's files");
}
