//! A pool made before per-file record sizes (crates/pipeline tests/fixtures/
//! pool-v1-before-recordsizes), through the fs core: its directories carry `recordsize`
//! properties that the old build stored without acting on, so its files have the pool's
//! 128 KiB records; they keep them (shown as `fixed`), read back unchanged, and files
//! created now get their directory's record size. The same for a pool made later, with
//! bundles and compact rows (pool-v1-bundles-before-recordsizes).
use squeezefs_fs::props::{Prop, Source};
use squeezefs_fs::{Creds, Fs, FsConfig, Ino, ROOT_INO};
use squeezefs_pipeline::{Engine, OpenOptions};
use std::path::Path;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../pipeline/tests/fixtures/pool-v1-before-recordsizes");

const WITH_BUNDLES: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../pipeline/tests/fixtures/pool-v1-bundles-before-recordsizes");

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

fn lookup(fs: &Fs, path: &str) -> Ino {
    path.split('/').fold(ROOT_INO, |dir, name| fs.lookup(&Creds::root(), dir, name.as_bytes()).unwrap().ino)
}

fn recordsize(fs: &Fs, ino: Ino) -> (String, Source) {
    let (v, s) = fs.effective(ino).unwrap().get(Prop::Recordsize);
    (v.to_string(), s)
}

fn read(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32 + 1).unwrap()
}

fn lines(n: usize, f: impl Fn(usize) -> String) -> Vec<u8> {
    (0..n).flat_map(|i| f(i).into_bytes()).collect()
}

#[test]
fn old_files_keep_the_pools_record_size_and_new_ones_take_their_directorys() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack(&pool);
    let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).unwrap(), FsConfig::default()).unwrap();
    let c = Creds::root();
    let logs = lookup(&fs, "logs");
    let log = lookup(&fs, "logs/app.log");
    let data = lookup(&fs, "big/data");
    assert_eq!(recordsize(&fs, logs), ("16K".into(), Source::Local));
    assert_eq!(recordsize(&fs, log), ("128K".into(), Source::Fixed));
    assert_eq!(recordsize(&fs, data), ("128K".into(), Source::Fixed));
    assert_eq!(recordsize(&fs, lookup(&fs, "text")), ("128K".into(), Source::Default));
    assert_eq!(read(&fs, log), lines(15000, |i| format!("log line {i}\n")));
    assert_eq!(read(&fs, data), lines(120000, |i| format!("block {i} of big data\n")));
    // a new file in `logs` gets 16 KiB records
    let (a, fh) = fs.create(&c, logs, b"new.log", 0o644, libc::O_RDWR).unwrap();
    let new = lines(30000, |i| format!("new line {i}\n"));
    fs.write(&c, a.ino, 0, &new, false).unwrap();
    fs.release(fh).unwrap();
    assert_eq!(recordsize(&fs, a.ino), ("16K".into(), Source::Inherited(logs)));
    fs.shutdown().unwrap();
    drop(fs);
    let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).unwrap(), FsConfig::default()).unwrap();
    let new_ino = lookup(&fs, "logs/new.log");
    assert_eq!(fs.engine().record_size(new_ino).unwrap(), 16 << 10);
    assert_eq!(read(&fs, new_ino), new);
    assert_eq!(read(&fs, lookup(&fs, "logs/app.log")), lines(15000, |i| format!("log line {i}\n")));
    let r = fs.engine().fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

#[test]
fn a_pool_with_bundles_keeps_its_files_record_size_and_new_ones_take_their_directorys() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    unpack_fixture(WITH_BUNDLES, &pool);
    let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).unwrap(), FsConfig::default()).unwrap();
    let c = Creds::root();
    let (db, big) = (lookup(&fs, "db"), lookup(&fs, "big"));
    let table = lookup(&fs, "db/table");
    assert_eq!(recordsize(&fs, db), ("16K".into(), Source::Local));
    assert_eq!(recordsize(&fs, big), ("1M".into(), Source::Local));
    assert_eq!(recordsize(&fs, table), ("128K".into(), Source::Fixed));
    assert_eq!(recordsize(&fs, lookup(&fs, "big/data")), ("128K".into(), Source::Fixed));
    assert_eq!(recordsize(&fs, lookup(&fs, "many/007")), ("128K".into(), Source::Default));
    let table_data = lines(10000, |i| format!("row {i} of the table\n"));
    assert_eq!(read(&fs, table), table_data);
    // new files below `db` and `big` get 16 KiB and 1 MiB records
    let mut new = Vec::new();
    for (dir, name, n) in [(db, "new.rows", 3000), (big, "new.blocks", 90000)] {
        let (a, fh) = fs.create(&c, dir, name.as_bytes(), 0o644, libc::O_RDWR).unwrap();
        let data = lines(n, |i| format!("{name} line {i}\n"));
        fs.write(&c, a.ino, 0, &data, false).unwrap();
        fs.release(fh).unwrap();
        new.push((a.ino, data));
    }
    fs.shutdown().unwrap();
    drop(fs);
    let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).unwrap(), FsConfig::default()).unwrap();
    assert_eq!(fs.engine().record_size(new[0].0).unwrap(), 16 << 10);
    assert_eq!(fs.engine().record_size(new[1].0).unwrap(), 1 << 20);
    for (ino, data) in &new {
        assert_eq!(&read(&fs, *ino), data);
    }
    assert_eq!(read(&fs, lookup(&fs, "db/table")), table_data);
    assert_eq!(read(&fs, lookup(&fs, "db/tiny")), b"tiny row\n".repeat(10));
    let r = fs.engine().fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert_eq!(r.bundles, 3);
}
