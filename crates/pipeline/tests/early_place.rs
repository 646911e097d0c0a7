//! Early placement (src/early_place.rs): records held packed in an open layer are placed on
//! a device and written before their txg syncs. What must hold: the data reads back after a
//! clean close and after a crash; a crash leaves no early placement allocated in the
//! persisted space map (fsck: no leak); placements given up (overwrite, truncate, delete)
//! return their space; one txg's records of a file stay in file order on the device.

mod records_common;
use records_common::*;
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions, StoredRecord, ROOT_INO};
use std::time::{Duration, Instant};

fn opts() -> OpenOptions {
    OpenOptions {
        compression: "zstd:1".parse().unwrap(),
        txg_timeout: Duration::from_secs(600),
        ..OpenOptions::default()
    }
}

fn new_pool() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    (dir, pool)
}

/// Wait until `n` records were placed early since open.
fn wait_placed(e: &Engine, n: u64) {
    let t0 = Instant::now();
    while e.early_stats().placed_early < n {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "records were not placed early (is the pool's host filesystem nearly full?): {:?}",
            e.early_stats()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `used_and_referenced` once the placements given up so far are back: a txg gives back
/// those whose write has finished, so a write still in flight waits for the next txg; a
/// few tiny txgs (an inline file's bytes) settle it.
fn settled(e: &Engine, inos: &[u64]) -> (u64, u64) {
    let scratch = match e.lookup(ROOT_INO, b"scratch").unwrap() {
        Some((i, _)) => i,
        None => create(e, "scratch"),
    };
    for n in 0..50u64 {
        let (used, referenced) = used_and_referenced(e, inos);
        if used == referenced {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        e.write(scratch, 0, &n.to_le_bytes()).unwrap();
        e.sync().unwrap();
    }
    used_and_referenced(e, inos)
}

/// Device bytes the live space map holds, and what the file extents of `inos` take.
fn used_and_referenced(e: &Engine, inos: &[u64]) -> (u64, u64) {
    let used: u64 = e.device_stats().iter().map(|d| d.used_bytes).sum();
    let referenced: u64 = inos
        .iter()
        .flat_map(|&i| e.extents(i).unwrap())
        .map(|(_, p)| match p.stored {
            StoredRecord::Device(d) => u64::from(d.psize),
            StoredRecord::Inline(_) | StoredRecord::Bundled(_) => 0,
        })
        .sum();
    (used, referenced)
}

#[test]
fn records_placed_early_read_back_after_close_and_reopen() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &opts()).unwrap();
    let ino = create(&e, "f");
    let model = text(1, 24 * RECORD + 777);
    e.write(ino, 0, &model).unwrap();
    wait_placed(&e, 20);
    check_file(&e, ino, &model);
    e.sync().unwrap();
    check_file(&e, ino, &model);
    let (used, referenced) = settled(&e, &[ino]);
    assert_eq!(used, referenced, "byte-packed records: the space map holds exactly the file's extents");
    sync_close_and_recheck(e, &pool, &opts(), ino, &model);
}

/// The engine dropped without close (a crash) while records of the open txg were placed
/// and written early: what the last commit holds reads back, and the space map persisted
/// holds none of the early placements (fsck finds no leak, no double allocation).
#[test]
fn a_crash_after_early_writes_leaks_no_space() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &opts()).unwrap();
    let a = create(&e, "a");
    let model = text(2, 16 * RECORD);
    e.write(a, 0, &model).unwrap();
    e.fsync(a).unwrap();
    let before = e.early_stats().placed_early;
    // the next txg: a new file and an overwrite of a's records, placed early, never committed
    let b = create(&e, "b");
    e.write(b, 0, &text(3, 16 * RECORD)).unwrap();
    e.write(a, 0, &text(4, 8 * RECORD)).unwrap();
    wait_placed(&e, before + 20);
    drop(e);
    let e = Engine::open(&pool, &opts()).unwrap();
    let report = e.fsck().unwrap();
    assert!(report.is_clean(), "{report:?}");
    check_file(&e, a, &model);
    assert!(e.lookup(ROOT_INO, b"b").unwrap().is_none(), "b was never committed");
    // the space the lost txg had placed is free again: a new file takes the same room
    let (used, referenced) = used_and_referenced(&e, &[a]);
    assert_eq!(used, referenced);
    e.close().unwrap();
}

/// Records placed early, then overwritten, truncated away or deleted before their txg
/// synced: their space comes back (the next txg reclaims it), nothing else is lost.
#[test]
fn early_placements_given_up_return_their_space() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &opts()).unwrap();
    let a = create(&e, "a");
    let b = create(&e, "b");
    let c = create(&e, "c");
    let mut ma = text(5, 12 * RECORD);
    let mb = text(6, 12 * RECORD);
    e.write(a, 0, &ma).unwrap();
    e.write(b, 0, &mb).unwrap();
    e.write(c, 0, &text(7, 12 * RECORD)).unwrap();
    wait_placed(&e, 30);
    // a: half of it rewritten (new bytes, new placements); b: cut to 3 records; c: deleted
    let patch = text(8, 6 * RECORD);
    e.write(a, 3 * RECORD as u64, &patch).unwrap();
    ma[3 * RECORD..9 * RECORD].copy_from_slice(&patch);
    e.set_size(b, 3 * RECORD as u64).unwrap();
    e.meta_write(|tx| {
        tx.dir_remove(ROOT_INO, b"c")?;
        tx.delete_inode(c)
    })
    .unwrap();
    e.sync().unwrap();
    // the placements given up above are reclaimed by this txg or the next ones
    let (used, referenced) = settled(&e, &[a, b]);
    assert_eq!(used, referenced, "space of abandoned early placements not given back");
    check_file(&e, a, &ma);
    check_file(&e, b, &mb[..3 * RECORD]);
    assert!(e.fsck().unwrap().is_clean());
    // the freed space is used again, and all of it comes back once the files go
    let d = create(&e, "d");
    let md = text(9, 12 * RECORD);
    e.write(d, 0, &md).unwrap();
    e.sync().unwrap();
    let (used, referenced) = settled(&e, &[a, b, d]);
    assert_eq!(used, referenced);
    check_file(&e, d, &md);
    e.close().unwrap();
    drop(e);
    reopen_and_check(&pool, &opts(), a, &ma);
}

/// Two workers pack records in the order they finish; early placement still lays one
/// txg's records of a file out in file order and back to back (sequential reads), as the
/// sync stage does.
#[test]
fn records_placed_early_lie_in_file_order() {
    let (_d, pool) = new_pool();
    let e = Engine::open(&pool, &OpenOptions { workers: 2, ..opts() }).unwrap();
    for round in 0..4u64 {
        let f = create(&e, &format!("f{round}"));
        let before = e.early_stats().placed_early;
        // records that compress at different speeds, so workers finish out of order
        let mut data = Vec::new();
        for i in 0..16u64 {
            if i % 3 == 0 {
                data.extend(std::iter::repeat_n(b'x', RECORD - 10).chain(text(i, 10)));
            } else {
                data.extend(text(round * 100 + i, RECORD));
            }
        }
        e.write(f, 0, &data).unwrap();
        wait_placed(&e, before + 15);
        e.sync().unwrap();
        let exts: Vec<(u64, u64)> = e
            .extents(f)
            .unwrap()
            .iter()
            .filter_map(|(_, p)| match &p.stored {
                StoredRecord::Device(d) => Some((d.offset, u64::from(d.psize))),
                StoredRecord::Inline(_) | StoredRecord::Bundled(_) => None,
            })
            .collect();
        assert_eq!(exts.len(), 16);
        // in file order and back to back: the sync stage places whatever was not placed
        // early after the early records, in the layer's run
        assert!(
            exts.windows(2).all(|w| w[1].0 == w[0].0 + w[0].1),
            "round {round}: records not in file order or not back to back: {exts:?}"
        );
        check_file(&e, f, &data);
    }
    e.close().unwrap();
}

/// Early writes that fail (an I/O error on the device): the txg that would point to them
/// fails and the pool is suspended, and after a reopen the last commit reads back, fsck clean.
#[test]
fn a_failed_early_write_fails_its_txg_and_keeps_the_last_commit() {
    use squeezefs_device::doubles::{FailAfter, MemDevice};
    use squeezefs_device::Device;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    let dev = Arc::new(FailAfter::new(MemDevice::new("failing"), u64::MAX));
    let as_dyn = || vec![dev.clone() as Arc<dyn Device>];
    Engine::mkfs_with_devices(&pool, as_dyn(), &MkfsOptions::default()).unwrap();
    let e = Engine::open_with_devices(&pool, as_dyn(), &opts()).unwrap();
    let a = create(&e, "a");
    let ma = text(11, 8 * RECORD);
    e.write(a, 0, &ma).unwrap();
    e.sync().unwrap();
    let before = e.early_stats().placed_early;
    dev.reset(0);
    e.write(a, 0, &text(12, 8 * RECORD)).unwrap();
    wait_placed(&e, before + 7);
    assert!(e.sync().is_err(), "a txg whose early writes failed must not commit");
    assert!(dev.failures() > 0);
    drop(e);
    dev.reset(u64::MAX);
    let e = Engine::open_with_devices(&pool, as_dyn(), &opts()).unwrap();
    assert!(e.fsck().unwrap().is_clean());
    check_file(&e, a, &ma);
    e.close().unwrap();
}
