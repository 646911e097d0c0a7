//! Pool-level behaviour: feature flags, big files, big directories, ENOSPC, concurrency.
mod common;
use common::*;
use redb::ReadableTable;
use squeezefs_meta::{tables, Superblock};
use squeezefs_pipeline::*;
use std::sync::Arc;

fn set_features(pool: &std::path::Path, f: impl FnOnce(&mut Superblock)) {
    let db = Engine::open_meta_store(pool).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(tables::SUPERBLOCK).unwrap();
        let mut sb = Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
        f(&mut sb);
        t.insert(0u8, &sb.encode()[..]).unwrap();
    }
    tx.commit().unwrap();
}

#[test]
fn unknown_incompat_feature_refuses_and_ro_compat_opens_read_only() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    set_features(&pool, |sb| sb.features.ro_compat |= 1 << 20);
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    assert!(e.read_only());
    assert!(matches!(e.meta_write(|tx| tx.alloc_ino()), Err(EngineError::ReadOnly)));
    assert!(matches!(e.write(ROOT_INO, 0, b"x"), Err(EngineError::ReadOnly)));
    drop(e);
    set_features(&pool, |sb| sb.features.incompat |= 1 << 40);
    let err = Engine::open(&pool, &OpenOptions::default()).err().unwrap();
    assert!(err.to_string().contains("incompat"), "{err}");
}

#[test]
fn a_sealed_pool_is_checked_before_it_is_unsealed() {
    // a read-write open of a sealed pool this build may only read, or cannot open at all,
    // leaves it sealed: nothing is written to a pool the build does not fully understand
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    set_features(&pool, |sb| sb.features.ro_compat |= 1 << 20);
    Engine::seal(&pool, 3).unwrap().expect("sealed");
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    assert!(e.read_only());
    drop(e);
    assert!(pool.join(SEAL_FILE).exists() && !pool.join(META_FILE).exists(), "the pool was unsealed");
    Engine::unseal(&pool).unwrap();
    set_features(&pool, |sb| sb.features.incompat |= 1 << 40);
    Engine::seal(&pool, 3).unwrap().expect("sealed");
    let err = Engine::open(&pool, &OpenOptions::default()).err().unwrap();
    assert!(err.to_string().contains("incompat"), "{err}");
    assert!(pool.join(SEAL_FILE).exists() && !pool.join(META_FILE).exists(), "the pool was unsealed");
}

#[test]
fn files_beyond_4_gib_are_sparse_and_exact() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let e = new_pool(&pool);
    let f = create(&e, "huge");
    let off = 5u64 << 30;
    e.write(f, off, b"past four gigabytes").unwrap();
    e.write(f, (4u64 << 30) - 3, b"straddle").unwrap();
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(e.getattr(f).unwrap().size, off + 19);
    let mut b = [0u8; 19];
    e.read(f, off, &mut b).unwrap();
    assert_eq!(&b, b"past four gigabytes");
    let mut s = [0u8; 8];
    e.read(f, (4u64 << 30) - 3, &mut s).unwrap();
    assert_eq!(&s, b"straddle");
    assert_eq!(e.seek_data(f, 0).unwrap(), Some((4u64 << 30) - 128 * 1024));
    assert!(e.getattr(f).unwrap().blocks_bytes < 1 << 20);
    assert!(e.fsck().unwrap().is_clean());
}

#[test]
fn directory_of_100k_entries_stays_fast() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let t0 = std::time::Instant::now();
    // batches of 1000 creates per transaction, like an untar flushed by the fs core
    for batch in 0..100u64 {
        e.meta_write(|tx| {
            for i in 0..1000u64 {
                let ino = tx.alloc_ino()?;
                tx.put_inode(&attr(ino, FileKind::File, 1))?;
                tx.dir_insert(ROOT_INO, format!("file-{:06}", batch * 1000 + i).as_bytes(), ino, FileKind::File)?;
            }
            Ok(())
        })
        .unwrap();
    }
    let created = t0.elapsed();
    // lookups and a full listing
    let t1 = std::time::Instant::now();
    for i in (0..100_000u64).step_by(97) {
        assert!(e.lookup(ROOT_INO, format!("file-{i:06}").as_bytes()).unwrap().is_some());
    }
    let mut n = 0;
    let mut after = 0;
    loop {
        let page = e.dir_list(ROOT_INO, after, 1000).unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().unwrap().cookie;
        n += page.len();
    }
    assert_eq!(n, 100_000);
    let listed = t1.elapsed();
    // generous bounds: these catch quadratic behaviour, not speed regressions
    assert!(created.as_secs() < 60, "creating 100k entries took {created:?}");
    assert!(listed.as_secs() < 20, "lookups + listing took {listed:?}");
}

#[test]
fn enospc_is_reported_and_committed_data_stays_readable() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions { device_capacity: Some(4 << 20), ..Default::default() }).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let a = create(&e, "a");
    let data = noise(11, 2 << 20);
    e.write(a, 0, &data).unwrap();
    e.sync().unwrap();
    let b = create(&e, "b");
    let mut hit = false;
    for i in 0..64u64 {
        match e.write(b, i * (128 << 10), &noise(100 + i, 128 << 10)) {
            Ok(()) => {}
            Err(EngineError::NoSpace) => {
                hit = true;
                break;
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert!(hit, "a 4 MiB device must run out of space");
    e.sync().unwrap();
    assert_eq!(read_all(&e, a), data);
    assert!(e.statfs().unwrap().free_bytes < 256 << 10);
    assert!(e.fsck().unwrap().is_clean(), "{:?}", e.fsck().unwrap().problems);
    // deleting a file gives the space back after its commit
    e.meta_write(|tx| {
        tx.dir_remove(ROOT_INO, b"a")?;
        tx.delete_inode(a)
    })
    .unwrap();
    e.sync().unwrap();
    e.write(b, 0, &noise(5, 1 << 20)).unwrap();
    e.close().unwrap();
}

#[test]
fn concurrent_writers_and_readers_during_syncs() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let opts = OpenOptions {
        txg_timeout: std::time::Duration::from_millis(20),
        max_dirty_bytes: 8 << 20,
        ..Default::default()
    };
    let e = Engine::open(&pool, &opts).unwrap();
    e.set_compression("zstd:1".parse().unwrap(), false);
    let inos: Vec<Ino> = (0..4).map(|i| create(&e, &format!("f{i}"))).collect();
    let threads: Vec<_> = inos
        .iter()
        .enumerate()
        .map(|(t, &ino)| {
            let e: Arc<Engine> = e.clone();
            std::thread::spawn(move || {
                let chunk = 96 * 1024;
                for i in 0..40u64 {
                    let data: Vec<u8> =
                        if i % 2 == 0 { noise(t as u64 * 1000 + i, chunk) } else { vec![(i as u8) ^ (t as u8); chunk] };
                    e.write(ino, i * chunk as u64, &data).unwrap();
                    // read back what we wrote a step ago while txgs sync it
                    if i > 0 {
                        let mut b = vec![0u8; chunk];
                        e.read(ino, (i - 1) * chunk as u64, &mut b).unwrap();
                        let prev: Vec<u8> = if (i - 1) % 2 == 0 {
                            noise(t as u64 * 1000 + i - 1, chunk)
                        } else {
                            vec![((i - 1) as u8) ^ (t as u8); chunk]
                        };
                        assert!(b == prev, "thread {t} step {i}");
                    }
                    if i % 10 == 9 {
                        e.fsync(ino).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts).unwrap();
    for (t, &ino) in inos.iter().enumerate() {
        let got = read_all(&e, ino);
        let chunk = 96 * 1024;
        assert_eq!(got.len(), 40 * chunk);
        for i in 0..40u64 {
            let want: Vec<u8> =
                if i % 2 == 0 { noise(t as u64 * 1000 + i, chunk) } else { vec![(i as u8) ^ (t as u8); chunk] };
            assert!(got[i as usize * chunk..(i as usize + 1) * chunk] == want[..], "thread {t} chunk {i}");
        }
    }
    assert!(e.fsck().unwrap().is_clean());
}

#[test]
fn slow_device_throttles_writers_without_failing_and_bounds_dirty_memory() {
    use squeezefs_device::doubles::{MemDevice, Throttled};
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let dev: Arc<dyn Device> = Arc::new(Throttled::new(MemDevice::new("slow"), 40 << 20));
    Engine::mkfs_with_devices(&pool, vec![dev.clone()], &MkfsOptions::default()).unwrap();
    let max = 2u64 << 20;
    let opts = OpenOptions { max_dirty_bytes: max, ..fast_opts() };
    let e = Engine::open_with_devices(&pool, vec![dev], &opts).unwrap();
    let f = create(&e, "f");
    let chunk = 256 << 10;
    let mut peak = 0;
    let t = std::time::Instant::now();
    for i in 0..64u64 {
        e.write(f, i * chunk as u64, &noise(i, chunk)).unwrap();
        peak = peak.max(e.dirty_bytes());
    }
    e.sync().unwrap();
    let secs = t.elapsed().as_secs_f64();
    // 16 MiB at 40 MiB/s: the writer was held to the device's pace, not failed
    assert!(secs > 0.25, "writes outran a 40 MiB/s device: {secs}s");
    // dirty memory: at most the bound plus one write and one record of slack
    assert!(peak <= max + chunk as u64 + (128 << 10), "peak dirty {peak}");
    for i in [0u64, 31, 63] {
        let mut b = vec![0u8; chunk];
        e.read(f, i * chunk as u64, &mut b).unwrap();
        assert!(b == noise(i, chunk));
    }
}

#[test]
fn corrupt_superblock_parameters_are_refused_not_panicked_on() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    set_features(&pool, |sb| sb.sector = 0);
    let err = Engine::open(&pool, &OpenOptions::default()).err().unwrap();
    assert!(err.to_string().contains("superblock") && err.to_string().contains("corrupt"), "{err}");
}

/// A pool is refused at once while another holder has it open, and reported closing (not
/// in use) from the moment its holder begins to close it until the store is closed; then
/// it opens (pool_lock.rs).
#[test]
fn a_pool_in_use_is_refused_and_a_closing_pool_opens_once_closed() {
    use squeezefs_device::doubles::{MemDevice, Throttled};
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let mem = MemDevice::new("slow");
    let dev = Arc::new(Throttled::new(mem, 0));
    Engine::mkfs_with_devices(&pool, vec![dev.clone() as Arc<dyn Device>], &MkfsOptions::default()).unwrap();
    let e = Engine::open_with_devices(&pool, vec![dev.clone() as Arc<dyn Device>], &fast_opts()).unwrap();
    for ro in [false, true] {
        let err = Engine::open(&pool, &OpenOptions { read_only: ro, ..OpenOptions::default() }).err().unwrap();
        match &err {
            EngineError::Pool(PoolError::InUse { holder, .. }) => assert_eq!(holder.pid, Some(std::process::id())),
            other => panic!("read_only={ro}: {other}"),
        }
        assert!(err.to_string().contains("already open"), "{err}");
    }
    // 8 MiB of dirty data over a 4 MiB/s device: closing takes about 2 s
    let f = create(&e, "f");
    for i in 0..8u64 {
        e.write(f, i << 20, &noise(i, 1 << 20)).unwrap();
    }
    dev.set_rate(4 << 20);
    let closer = std::thread::spawn({
        let e = e.clone();
        move || e.close()
    });
    let mut saw_closing = false;
    while !closer.is_finished() {
        match Engine::open_with_devices(&pool, vec![dev.clone() as Arc<dyn Device>], &fast_opts()) {
            Err(EngineError::Pool(PoolError::Closing { holder, .. })) => {
                assert_eq!(holder.pid, Some(std::process::id()), "the closing holder is named");
                saw_closing = true;
            }
            // before `close` began: still in use
            Err(EngineError::Pool(PoolError::InUse { .. })) if !saw_closing => {}
            Err(other) => panic!("while the pool closes: {other}"),
            Ok(_) => panic!("opened while the store was still open"),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    closer.join().unwrap().unwrap();
    assert!(saw_closing, "the close was never seen");
    // closed, but the store is open until the last reference goes: still closing
    assert!(matches!(Engine::open(&pool, &fast_opts()), Err(EngineError::Pool(PoolError::Closing { .. }))));
    drop(e);
    let reopened = Engine::open_with_devices(&pool, vec![dev.clone() as Arc<dyn Device>], &fast_opts()).unwrap();
    dev.set_rate(0);
    let mut b = vec![0u8; 1 << 20];
    reopened.read(f, 7 << 20, &mut b).unwrap();
    assert!(b == noise(7, 1 << 20), "data flushed by the close reads back");
    reopened.close().unwrap();
}

/// `compact_meta` shrinks a store that many commits left with free pages and half-full
/// leaves, keeps every row (the pool reads back and stays fsck-clean), leaves no temporary
/// file, keeps a table it does not know (compacting in place then), and is refused while
/// the pool is open.
#[test]
fn compact_meta_shrinks_the_store_and_is_refused_while_open() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(d.path());
    let mut files = Vec::new();
    for round in 0..40 {
        for i in 0..50 {
            let f = create(&e, &format!("r{round}-{i}"));
            e.write(f, 0, format!("file {i} of round {round}\n").repeat(40).as_bytes()).unwrap();
            files.push(f);
        }
        e.sync().unwrap();
    }
    match Engine::compact_meta(d.path()) {
        Err(EngineError::Pool(PoolError::InUse { .. })) => {}
        other => panic!("compacting an open pool: {other:?}"),
    }
    e.close().unwrap();
    drop(e);
    let (before, after) = Engine::compact_meta(d.path()).unwrap();
    assert!(after < before, "{before} -> {after}");
    assert_eq!(std::fs::metadata(d.path().join(COPY_FILES[0])).unwrap().len(), after);
    let names: Vec<String> =
        std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.contains("rebuild")), "{names:?}");
    let check = |e: &Engine| {
        for (k, f) in files.iter().enumerate() {
            let (round, i) = (k / 50, k % 50);
            assert_eq!(read_all(e, *f), format!("file {i} of round {round}\n").repeat(40).into_bytes());
        }
        assert!(e.fsck().unwrap().is_clean());
    };
    let e = Engine::open(d.path(), &fast_opts()).unwrap();
    check(&e);
    e.close().unwrap();
    drop(e);
    // a table of a later build: kept, the store compacted in place
    let other: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("from_a_later_build");
    {
        let db = Engine::open_meta_store(d.path()).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(other).unwrap().insert(7, 8).unwrap();
        tx.commit().unwrap();
    }
    Engine::compact_meta(d.path()).unwrap();
    {
        let db = Engine::open_meta_store(d.path()).unwrap();
        let rx = redb::ReadableDatabase::begin_read(&db).unwrap();
        assert_eq!(rx.open_table(other).unwrap().get(7).unwrap().unwrap().value(), 8);
    }
    let e = Engine::open(d.path(), &fast_opts()).unwrap();
    check(&e);
}
