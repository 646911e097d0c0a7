mod common;
use common::*;
use squeezefs_pipeline::*;
use std::sync::Arc;

#[test]
fn mkfs_open_root_exists_and_reopen() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let e = new_pool(&pool);
    let root = e.getattr(ROOT_INO).unwrap();
    assert_eq!(root.kind, FileKind::Dir);
    assert_eq!(root.nlink, 2);
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(e.getattr(ROOT_INO).unwrap().kind, FileKind::Dir);
}

#[test]
fn mkfs_refuses_existing_pool_without_force() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let err = Engine::mkfs(&pool, &MkfsOptions::default()).unwrap_err();
    assert!(err.to_string().contains("--force"), "{err}");
    Engine::mkfs(&pool, &MkfsOptions { force: true, ..Default::default() }).unwrap();
}

#[test]
fn mkfs_rejects_bad_sector_and_recordsize() {
    let d = tempfile::tempdir().unwrap();
    let err = Engine::mkfs(&d.path().join("p"), &MkfsOptions { sector: Some(1024), ..Default::default() }).unwrap_err();
    assert!(err.to_string().contains("512 or 4096"), "{err}");
    let err =
        Engine::mkfs(&d.path().join("p"), &MkfsOptions { recordsize: Some(3000), ..Default::default() }).unwrap_err();
    assert!(err.to_string().contains("power of two"), "{err}");
}

#[test]
fn open_missing_pool_is_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let err = Engine::open(&d.path().join("nope"), &OpenOptions::default()).err().unwrap();
    assert!(err.to_string().contains("not a squeezefs pool"), "{err}");
}

#[test]
fn namespace_ops() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let f = create(&e, "a");
    assert_eq!(e.lookup(ROOT_INO, b"a").unwrap(), Some((f, FileKind::File)));
    assert!(e.lookup(ROOT_INO, b"b").unwrap().is_none());
    let err = e.meta_write(|tx| tx.dir_insert(ROOT_INO, b"a", f, FileKind::File)).unwrap_err();
    assert!(matches!(err, EngineError::Exists));
    e.meta_write(|tx| tx.set_xattr(f, b"user.x", b"1")).unwrap();
    assert_eq!(e.get_xattr(f, b"user.x").unwrap(), Some(b"1".to_vec()));
    assert_eq!(e.list_xattr(f).unwrap(), vec![b"user.x".to_vec()]);
    assert!(matches!(e.meta_write(|tx| tx.remove_xattr(f, b"user.y")), Err(EngineError::NoEntry)));
    // a failed transaction leaves nothing behind
    let r: Result<()> = e.meta_write(|tx| {
        tx.dir_insert(ROOT_INO, b"ghost", f, FileKind::File)?;
        Err(EngineError::Aborted)
    });
    assert!(r.is_err());
    assert!(e.lookup(ROOT_INO, b"ghost").unwrap().is_none());
    let l = e.dir_list(ROOT_INO, 0, 10).unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].name, b"a");
    assert!(!e.meta_write(|tx| tx.dir_is_empty(ROOT_INO)).unwrap());
    e.meta_write(|tx| {
        tx.dir_remove(ROOT_INO, b"a")?;
        tx.delete_inode(f)
    })
    .unwrap();
    assert!(e.meta_write(|tx| tx.dir_is_empty(ROOT_INO)).unwrap());
    assert!(matches!(e.getattr(f), Err(EngineError::NoInode(_))));
    // symlink + orphan
    let s = e
        .meta_write(|tx| {
            let ino = tx.alloc_ino()?;
            tx.put_inode(&attr(ino, FileKind::Symlink, 1))?;
            tx.set_symlink_target(ino, b"/target")?;
            tx.dir_insert(ROOT_INO, b"s", ino, FileKind::Symlink)?;
            Ok(ino)
        })
        .unwrap();
    assert_eq!(e.read_link(s).unwrap(), b"/target");
    e.meta_write(|tx| tx.add_orphan(s)).unwrap();
    assert_eq!(e.orphans().unwrap(), vec![s]);
    e.meta_write(|tx| tx.remove_orphan(s)).unwrap();
    assert!(e.orphans().unwrap().is_empty());
}

#[test]
fn dir_list_cookies_are_stable_and_paginate() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    for i in 0..50 {
        create(&e, &format!("f{i:03}"));
    }
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = e.dir_list(ROOT_INO, after, 7).unwrap();
        if page.is_empty() {
            break;
        }
        for w in page.windows(2) {
            assert!(w[0].cookie < w[1].cookie);
        }
        after = page.last().unwrap().cookie;
        seen.extend(page.into_iter().map(|x| x.name));
        // removing an entry already listed must not disturb the listing
        if seen.len() == 14 {
            e.meta_write(|tx| tx.dir_remove(ROOT_INO, b"f000").map(|_| ())).unwrap();
        }
    }
    assert_eq!(seen.len(), 50);
}

#[test]
fn write_read_round_trip_and_reopen() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let e = new_pool(&pool);
    let f = create(&e, "big");
    let data = noise(1, 1_000_000);
    e.write(f, 0, &data).unwrap();
    assert_eq!(e.getattr(f).unwrap().size, 1_000_000);
    assert_eq!(read_all(&e, f), data);
    e.sync().unwrap();
    assert_eq!(read_all(&e, f), data);
    e.write(f, 500_000, b"hello").unwrap();
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let mut want = data.clone();
    want[500_000..500_005].copy_from_slice(b"hello");
    assert_eq!(read_all(&e, f), want);
    assert!(e.fsck().unwrap().is_clean(), "{:?}", e.fsck().unwrap().problems);
}

#[test]
fn fsync_is_durable_without_close() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..Default::default() };
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &opts).unwrap();
    let f = create(&e, "durable");
    let g = create(&e, "lost");
    e.write(f, 0, b"kept").unwrap();
    e.fsync(f).unwrap();
    e.write(g, 0, b"not synced").unwrap();
    drop(e); // no close: dirty data of `g` is lost like in a crash
    let e = Engine::open(&pool, &opts).unwrap();
    assert_eq!(read_all(&e, f), b"kept");
    assert_eq!(e.getattr(g).unwrap().size, 0);
    assert!(e.fsck().unwrap().is_clean());
}

#[test]
fn holes_read_as_zeros_and_zero_records_are_not_stored() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let f = create(&e, "sparse");
    e.write(f, 10 << 20, b"end").unwrap();
    e.write(f, 0, &vec![0u8; 256 << 10]).unwrap();
    e.sync().unwrap();
    let a = e.getattr(f).unwrap();
    assert_eq!(a.size, (10 << 20) + 3);
    assert!(a.blocks_bytes <= 4096, "only the last record is stored: {}", a.blocks_bytes);
    let mut buf = vec![1u8; 4096];
    e.read(f, 5 << 20, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(e.seek_data(f, 0).unwrap(), Some(10 << 20));
    assert_eq!(e.seek_hole(f, 0).unwrap(), Some(0));
    assert_eq!(e.seek_hole(f, 10 << 20).unwrap(), Some((10 << 20) + 3));
    assert_eq!(e.seek_data(f, (10 << 20) + 3).unwrap(), None);
}

#[test]
fn truncate_and_punch() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let f = create(&e, "t");
    let data = noise(2, 600_000);
    e.write(f, 0, &data).unwrap();
    e.sync().unwrap();
    e.set_size(f, 200_001).unwrap();
    assert_eq!(read_all(&e, f), &data[..200_001]);
    e.set_size(f, 400_000).unwrap();
    let got = read_all(&e, f);
    assert_eq!(&got[..200_001], &data[..200_001]);
    assert!(got[200_001..].iter().all(|&b| b == 0));
    e.sync().unwrap();
    assert_eq!(read_all(&e, f), got);
    e.punch_hole(f, 100, 300_000).unwrap();
    let mut want = got.clone();
    want[100..300_100].fill(0);
    assert_eq!(read_all(&e, f), want);
    e.sync().unwrap();
    assert_eq!(read_all(&e, f), want);
    assert_eq!(e.getattr(f).unwrap().size, 400_000);
    assert!(e.fsck().unwrap().is_clean(), "{:?}", e.fsck().unwrap().problems);
}

#[test]
fn small_files_are_inline() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let f = create(&e, "small");
    e.write(f, 0, b"tiny file").unwrap();
    e.sync().unwrap();
    assert_eq!(read_all(&e, f), b"tiny file");
    let st = e.device_stats();
    assert_eq!(st[0].used_bytes, 0, "inline data uses no device space");
    assert_eq!(e.getattr(f).unwrap().blocks_bytes, 9);
}

#[test]
fn flipped_byte_is_a_checksum_error_and_scrub_finds_it() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let e = new_pool(&pool);
    let f = create(&e, "victim");
    e.write(f, 0, &noise(3, 300_000)).unwrap();
    e.close().unwrap();
    drop(e);
    // flip one byte in the second record (device data starts at 4096)
    let dev = pool.join(DEFAULT_DEVICE_FILE);
    let mut bytes = std::fs::read(&dev).unwrap();
    let at = 4096 + 131072 + 77;
    bytes[at] ^= 0x40;
    std::fs::write(&dev, &bytes).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let mut buf = vec![0u8; 4096];
    e.read(f, 0, &mut buf).unwrap();
    let err = e.read(f, 131072 + 10, &mut buf).unwrap_err();
    assert!(matches!(err, EngineError::Checksum { ino, offset: 131072 } if ino == f), "{err}");
    let rep = e.scrub(&|_, _| {}).unwrap();
    assert_eq!(rep.records, 3);
    assert_eq!(rep.damaged.len(), 1);
    assert_eq!(rep.damaged[0].offset, 131072);
    assert_eq!(rep.damaged[0].path.as_deref(), Some("/victim"));
}

#[test]
fn multi_device_placement_uses_every_device() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let devs = vec![d.path().join("d0"), d.path().join("d1")];
    Engine::mkfs(&pool, &MkfsOptions { devices: devs.clone(), ..Default::default() }).unwrap();
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    let f = create(&e, "spread");
    let data = noise(4, 8 << 20);
    e.write(f, 0, &data).unwrap();
    e.sync().unwrap();
    let st = e.device_stats();
    assert!(st.iter().all(|s| s.used_bytes > 0), "{st:?}");
    assert_eq!(read_all(&e, f), data);
    e.close().unwrap();
    drop(e);
    // swapped devices are refused with a clear message
    let opts = OpenOptions { devices: vec![devs[1].clone(), devs[0].clone()], ..fast_opts() };
    let err = Engine::open(&pool, &opts).err().unwrap();
    assert!(err.to_string().contains("swapped"), "{err}");
}

#[test]
fn delete_frees_space_after_commit() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let f = create(&e, "x");
    e.write(f, 0, &noise(5, 1 << 20)).unwrap();
    e.sync().unwrap();
    let used = e.device_stats()[0].used_bytes;
    assert!(used >= 1 << 20);
    e.meta_write(|tx| {
        tx.dir_remove(ROOT_INO, b"x")?;
        tx.delete_inode(f)
    })
    .unwrap();
    e.sync().unwrap();
    assert_eq!(e.device_stats()[0].used_bytes, 0);
    assert!(e.fsck().unwrap().is_clean(), "{:?}", e.fsck().unwrap().problems);
}

#[test]
fn injected_devices_round_trip_and_extents_are_listed() {
    use squeezefs_device::doubles::MemDevice;
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let mem: Arc<dyn Device> = Arc::new(MemDevice::new("mem0"));
    Engine::mkfs_with_devices(&pool, vec![mem.clone()], &MkfsOptions::default()).unwrap();
    let e = Engine::open_with_devices(&pool, vec![mem.clone()], &fast_opts()).unwrap();
    let f = create(&e, "m");
    let data = noise(12, 300_000);
    e.write(f, 0, &data).unwrap();
    e.close().unwrap();
    drop(e);
    let e = Engine::open_with_devices(&pool, vec![mem.clone()], &fast_opts()).unwrap();
    assert_eq!(read_all(&e, f), data);
    let ex = e.extents(f).unwrap();
    assert_eq!(ex.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 131072, 262144]);
    assert!(matches!(ex[2].1.stored, StoredRecord::Device(DeviceExtent { dev: 0, psize: 37856, .. })));
    // a device of another pool is refused
    let other: Arc<dyn Device> = Arc::new(MemDevice::new("mem1"));
    Engine::mkfs_with_devices(&d.path().join("p2"), vec![other.clone()], &MkfsOptions::default()).unwrap();
    drop(e);
    let err = Engine::open_with_devices(&pool, vec![other], &fast_opts()).err().unwrap();
    assert!(err.to_string().contains("belongs to pool"), "{err}");
}

#[test]
fn device_failure_suspends_the_pool_at_its_last_commit() {
    use squeezefs_device::doubles::{FailAfter, MemDevice};
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let mem = Arc::new(MemDevice::new("mem0"));
    let failing = Arc::new(FailAfter::new(mem.clone(), u64::MAX));
    let dev: Arc<dyn Device> = failing.clone();
    Engine::mkfs_with_devices(&pool, vec![dev.clone()], &MkfsOptions::default()).unwrap();
    let e = Engine::open_with_devices(&pool, vec![dev.clone()], &fast_opts()).unwrap();
    let f = create(&e, "f");
    let good = noise(20, 200_000);
    e.write(f, 0, &good).unwrap();
    e.sync().unwrap();
    failing.reset(0);
    e.write(f, 0, &noise(21, 200_000)).unwrap();
    let err = e.sync().unwrap_err();
    assert!(matches!(err, EngineError::Suspended(_)), "{err}");
    assert!(matches!(e.write(f, 0, b"x"), Err(EngineError::Suspended(_))));
    // the data of the failed txg is still served from memory
    assert_eq!(read_all(&e, f), noise(21, 200_000));
    assert!(e.close().is_err());
    drop(e);
    failing.reset(u64::MAX);
    let e = Engine::open_with_devices(&pool, vec![dev], &fast_opts()).unwrap();
    assert_eq!(read_all(&e, f), good, "the pool stays at the last committed txg");
    assert!(e.fsck().unwrap().is_clean(), "{:?}", e.fsck().unwrap().problems);
}

#[test]
fn inode_numbers_of_committed_inodes_are_not_reused_after_a_crash() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..Default::default() };
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &opts).unwrap();
    let a = create(&e, "a");
    let b = create(&e, "b");
    e.sync().unwrap();
    let c = create(&e, "c");
    drop(e); // crash: `c` was never committed, so it is gone with its number
    let e = Engine::open(&pool, &opts).unwrap();
    assert!(e.lookup(ROOT_INO, b"c").unwrap().is_none());
    let c2 = create(&e, "c");
    assert!(c2 > a && c2 > b, "{a} {b} {c} {c2}");
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts).unwrap();
    assert!(create(&e, "d") > c2);
}

/// The sync stage used to place records in the order their compression finished, so a small
/// last record (or a quickly compressed one) could land before the file's first record, and
/// a sequential read of one txg's data jumped back and forth on the device.
#[test]
fn records_of_a_txg_are_placed_in_file_order() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &OpenOptions { compression: "zstd:3".parse().unwrap(), ..fast_opts() }).unwrap();
    for round in 0..5u64 {
        let f = create(&e, &format!("f{round}"));
        // records that compress very differently (noise, text, zeros-and-text), and a short tail
        let mut data = noise(round, 3 * 131072);
        data.extend((0..2 * 131072u64).map(|i| b"lorem ipsum dolor "[(i % 18) as usize]));
        data.extend(std::iter::repeat_n(0u8, 100_000).chain((0..31_072u64).map(|i| (i % 7) as u8)));
        data.extend(noise(round + 100, 5000));
        e.write(f, 0, &data).unwrap();
        e.sync().unwrap();
        let ext = e.extents(f).unwrap();
        assert!(ext.len() >= 6, "{} extents", ext.len());
        let offs: Vec<u64> = ext
            .iter()
            .filter_map(|(_, p)| match &p.stored {
                StoredRecord::Device(dx) => Some(dx.offset),
                StoredRecord::Inline(_) | StoredRecord::Bundled(_) => None,
            })
            .collect();
        assert!(offs.windows(2).all(|w| w[0] < w[1]), "round {round}: device offsets out of file order: {offs:?}");
        assert_eq!(read_all(&e, f), data);
    }
    e.close().unwrap();
}

/// A fixed device that became smaller than the data the pool keeps on it (a shrunk volume,
/// or a smaller device put in its place) opened as if nothing had happened: the records past
/// its end failed their reads, and free ranges past the end were handed to new records whose
/// writes failed and suspended the pool. Now the open is refused with the two sizes.
#[test]
fn a_device_smaller_than_the_pool_data_on_it_is_refused_at_open() {
    use squeezefs_device::doubles::MemDevice;
    const MIB: u64 = 1 << 20;
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let mem = Arc::new(MemDevice::with_capacity("mem0", 8 * MIB));
    Engine::mkfs_with_devices(&pool, vec![mem.clone()], &MkfsOptions::default()).unwrap();
    let e = Engine::open_with_devices(&pool, vec![mem.clone()], &fast_opts()).unwrap();
    let f = create(&e, "m");
    e.write(f, 0, &noise(3, 6 * MIB as usize)).unwrap();
    e.close().unwrap();
    drop(e);
    let mut bytes = mem.snapshot();
    bytes.truncate(4 * MIB as usize);
    let shrunk: Arc<dyn Device> = Arc::new(MemDevice::from_bytes("mem0", bytes, Some(4 * MIB)));
    let err = Engine::open_with_devices(&pool, vec![shrunk], &fast_opts()).err().expect("opened");
    let msg = err.to_string();
    assert!(msg.contains("4194304 bytes") && msg.contains("shrank"), "{msg}");
    // the device as it was still opens
    let e = Engine::open_with_devices(&pool, vec![mem.clone()], &fast_opts()).unwrap();
    assert_eq!(read_all(&e, f), noise(3, 6 * MIB as usize));
}

/// Scheduling class (field 41 of /proc/self/task/TID/stat: 0 SCHED_OTHER, 1 SCHED_FIFO,
/// 5 SCHED_IDLE) of this process's threads named `name`.
fn classes_of_threads_named(name: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        if head.split_once('(').map(|(_, n)| n) == Some(name) {
            out.extend(rest.split_whitespace().nth(41 - 3).and_then(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// The QoS level thread is started by the request that creates the first tree, and a thread
/// inherits its creator's scheduling class: from a FUSE request thread waiting as
/// SCHED_IDLE (or SCHED_FIFO) it kept that class for the life of the mount, starved (or
/// preempting everyone). It now runs as SCHED_OTHER whoever started it.
#[test]
fn the_qos_level_thread_runs_as_sched_other_whatever_class_started_it() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let e2 = e.clone();
    std::thread::spawn(move || {
        let p = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscall on this thread; SCHED_IDLE needs no privilege
        assert_eq!(unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) }, 0);
        e2.qos_set_tree(ROOT_INO, None, 10e6).unwrap();
    })
    .join()
    .unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let c = classes_of_threads_named("sqz-qos");
        if !c.is_empty() && c.iter().all(|&p| p == 0) {
            break;
        }
        assert!(t0.elapsed().as_secs() < 10, "classes of the QoS thread: {c:?}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    e.close().unwrap();
}
