//! `Engine::share_range` (write/share.rs) without mounting: a copy shares the source's whole
//! records (no new data on the devices), partial records at the edges are copied, and every
//! later change — overwrite of either side, truncation, punching, deletion of the original,
//! recompression — rewrites only the changing file's records, with the reference counts,
//! the space and fsck right after each step, after reopening, and after a power cut at any
//! device write.

mod common;
use common::*;
use redb::ReadableDatabase;
use squeezefs_codec::{Codec, Spec};
use squeezefs_device::doubles::{CrashDevice, CrashMode};
use squeezefs_device::Device;
use squeezefs_pipeline::*;
use std::collections::BTreeMap;
use std::sync::Arc;

const RS: u64 = 128 << 10;

/// What two files hold (`None`: deleted).
type Contents = (Option<Vec<u8>>, Option<Vec<u8>>);

fn opts() -> OpenOptions {
    OpenOptions { compression: "lz4".parse().unwrap(), workers: 2, ..fast_opts() }
}

/// Text that compresses, different per `seed`.
fn text(seed: u64, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 64);
    let mut i = seed;
    while v.len() < n {
        v.extend_from_slice(format!("line {i} of {seed}: the quick brown fox {} jumps\n", i * 7919 % 1013).as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

/// Device bytes holding data (the pool's data bytes).
fn used(e: &Engine) -> u64 {
    e.device_stats().iter().map(|d| d.used_bytes).sum()
}

/// Device extent of every committed record of `ino`, by record index.
fn device_extents(e: &Engine, ino: Ino) -> BTreeMap<u64, DeviceExtent> {
    e.extents(ino)
        .unwrap()
        .into_iter()
        .filter_map(|(off, x)| match x.stored {
            StoredRecord::Device(d) => Some((off / RS, d)),
            _ => None,
        })
        .collect()
}

fn refs(e: &Engine, d: &DeviceExtent) -> u64 {
    e.references(d).unwrap()
}

fn assert_clean(e: &Engine, what: &str) -> fsck::FsckReport {
    let f = e.fsck().unwrap();
    assert!(f.is_clean(), "{what}: fsck: {:?}", f.problems);
    let s = e.scrub(&|_, _| {}).unwrap();
    assert!(s.is_clean(), "{what}: scrub: {:?}", s.damaged);
    f
}

fn delete(e: &Engine, name: &str) {
    e.meta_write(|tx| {
        let (ino, _) = tx.dir_remove(ROOT_INO, name.as_bytes())?;
        tx.delete_inode(ino)
    })
    .unwrap();
}

fn superblock_incompat(pool: &std::path::Path) -> u64 {
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let t = rx.open_table(squeezefs_meta::tables::SUPERBLOCK).unwrap();
    let sb = squeezefs_meta::Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
    sb.features.incompat
}

/// A pool holding `a` (10 whole records and a tail of 5000 bytes, committed) and an empty
/// file `b`.
fn pool_with_pair(dir: &std::path::Path) -> (std::path::PathBuf, Ino, Ino, Vec<u8>) {
    let data = text(1, 10 * RS as usize + 5000);
    let (pool, a) = pool_with_file(dir, &opts(), "a", &data);
    let e = Engine::open(&pool, &opts()).unwrap();
    let b = create(&e, "b");
    e.close().unwrap();
    drop(e);
    (pool, a, b, data)
}

#[test]
fn a_copy_shares_whole_records_and_takes_no_space() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b, data) = pool_with_pair(d.path());
    assert_eq!(superblock_incompat(&pool) & squeezefs_meta::Features::INCOMPAT_SHARED_RECORDS, 0);
    let e = Engine::open(&pool, &opts()).unwrap();
    let before = used(&e);
    let out = e.share_range(a, 0, b, 0, data.len() as u64 + 99).unwrap();
    assert_eq!(out.bytes, data.len() as u64, "the copy stops at the source's end");
    assert_eq!((out.shared_records, out.copied_bytes), (10, 5000), "{out:?}");
    // readable at once, before any commit
    assert_eq!(read_all(&e, b), data);
    e.sync().unwrap();
    assert_eq!(read_all(&e, b), data);
    let grown = used(&e) - before;
    assert!(grown < 5000, "only the tail was stored again: grew {grown}");
    let (xa, xb) = (device_extents(&e, a), device_extents(&e, b));
    for i in 0..10 {
        assert_eq!(xa[&i], xb[&i], "record {i} is the same stored record");
        assert_eq!(refs(&e, &xa[&i]), 2);
    }
    assert_ne!(xa[&10], xb[&10], "the tail is a copy");
    assert_eq!(refs(&e, &xa[&10]), 1);
    // each file counts what it references; the pool counts the records once
    assert_eq!(e.getattr(a).unwrap().blocks_bytes, e.getattr(b).unwrap().blocks_bytes);
    let f = assert_clean(&e, "after the copy");
    assert_eq!(f.shared_records, 10);
    let s = e.scrub(&|_, _| {}).unwrap();
    assert_eq!(s.shared, 10, "scrub reads a shared record once");
    // usage: half of each shared record's disk bytes in each file, all of it referenced
    let ua: u64 = e.usage(a).unwrap().iter().map(|r| r.disk_bytes).sum();
    let ub: u64 = e.usage(b).unwrap().iter().map(|r| r.disk_bytes).sum();
    let shared: u64 = (0..10).map(|i| u64::from(xa[&i].psize)).sum();
    assert!((ua + ub).abs_diff(shared + u64::from(xa[&10].psize) + u64::from(xb[&10].psize)) <= 20);
    let rb: u64 = e.usage(b).unwrap().iter().map(|r| r.referenced_bytes).sum();
    assert_eq!(rb, data.len() as u64);
    e.close().unwrap();
    drop(e);
    assert_ne!(superblock_incompat(&pool) & squeezefs_meta::Features::INCOMPAT_SHARED_RECORDS, 0);
    // reopened
    let e = Engine::open(&pool, &opts()).unwrap();
    assert_eq!(read_all(&e, a), data);
    assert_eq!(read_all(&e, b), data);
    assert_clean(&e, "reopened");
    e.close().unwrap();
}

#[test]
fn writes_to_either_side_rewrite_only_the_writer() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b, data) = pool_with_pair(d.path());
    let e = Engine::open(&pool, &opts()).unwrap();
    e.share_range(a, 0, b, 0, data.len() as u64).unwrap();
    e.sync().unwrap();
    let shared = device_extents(&e, a);
    let (mut ma, mut mb) = (data.clone(), data.clone());
    // part of a record of b, a whole record of a
    let patch = text(7, 1000);
    e.write(b, 3 * RS + 100, &patch).unwrap();
    mb[(3 * RS + 100) as usize..(3 * RS + 1100) as usize].copy_from_slice(&patch);
    let whole = text(8, RS as usize);
    e.write(a, 5 * RS, &whole).unwrap();
    ma[(5 * RS) as usize..(6 * RS) as usize].copy_from_slice(&whole);
    assert_eq!(read_all(&e, a), ma);
    assert_eq!(read_all(&e, b), mb);
    e.sync().unwrap();
    let (xa, xb) = (device_extents(&e, a), device_extents(&e, b));
    assert_eq!(xa[&3], shared[&3], "a keeps its record 3");
    assert_ne!(xb[&3], shared[&3], "b's record 3 is its own now");
    assert_eq!(xb[&5], shared[&5], "b keeps record 5");
    assert_ne!(xa[&5], shared[&5]);
    assert_eq!((refs(&e, &shared[&3]), refs(&e, &shared[&5]), refs(&e, &shared[&4])), (1, 1, 2));
    assert_clean(&e, "after the writes");
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts()).unwrap();
    assert_eq!(read_all(&e, a), ma);
    assert_eq!(read_all(&e, b), mb);
    assert_clean(&e, "reopened");
}

#[test]
fn truncation_punching_and_deleting_the_original_free_only_unshared_records() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b, data) = pool_with_pair(d.path());
    let e = Engine::open(&pool, &opts()).unwrap();
    let base = used(&e);
    e.share_range(a, 0, b, 0, data.len() as u64).unwrap();
    e.sync().unwrap();
    let shared = device_extents(&e, a);
    let mut mb = data.clone();
    // b cut inside record 7 (that record becomes b's own), a's records stay
    e.set_size(b, 7 * RS + 300).unwrap();
    mb.truncate((7 * RS + 300) as usize);
    // a punched: record 2 whole, part of record 4
    e.punch_hole(a, 2 * RS, RS).unwrap();
    e.punch_hole(a, 4 * RS + 10, 20).unwrap();
    let mut ma = data.clone();
    ma[(2 * RS) as usize..(3 * RS) as usize].fill(0);
    ma[(4 * RS + 10) as usize..(4 * RS + 30) as usize].fill(0);
    assert_eq!(read_all(&e, b), mb);
    assert_eq!(read_all(&e, a), ma);
    e.sync().unwrap();
    let (xa, xb) = (device_extents(&e, a), device_extents(&e, b));
    assert!(!xa.contains_key(&2));
    assert_eq!(xb[&2], shared[&2], "b keeps the record a punched");
    assert_eq!(refs(&e, &shared[&2]), 1);
    assert_ne!(xa[&4], shared[&4]);
    assert_eq!(xb[&4], shared[&4]);
    assert_ne!(xb[&7], shared[&7]);
    for i in [8, 9] {
        assert_eq!(refs(&e, &shared[&i]), 1, "record {i}: only a points to it");
        assert!(!xb.contains_key(&i));
    }
    assert_eq!(refs(&e, &shared[&0]), 2);
    assert_clean(&e, "after truncate and punch");
    // the original goes: b reads on, every count is back to one
    delete(&e, "a");
    e.sync().unwrap();
    assert_eq!(read_all(&e, b), mb);
    for (i, x) in device_extents(&e, b) {
        assert_eq!(refs(&e, &x), 1, "record {i}");
    }
    assert_clean(&e, "after deleting the original");
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts()).unwrap();
    assert_eq!(read_all(&e, b), mb);
    assert_clean(&e, "reopened");
    // and the copy too: every byte of both is free again
    delete(&e, "b");
    e.sync().unwrap();
    assert!(used(&e) < base / 10, "space back: {} of {base}", used(&e));
    assert_clean(&e, "after deleting both");
}

#[test]
fn a_copy_within_one_file_and_misaligned_copies() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b, data) = pool_with_pair(d.path());
    let e = Engine::open(&pool, &opts()).unwrap();
    // records 0..4 of a again at record 20 of a
    let out = e.share_range(a, 0, a, 20 * RS, 4 * RS).unwrap();
    assert_eq!(out.shared_records, 4);
    // overlapping ranges of one file are refused
    assert!(matches!(e.share_range(a, 0, a, RS, 2 * RS), Err(EngineError::Invalid(_))));
    // not lined up with b's records: copied as data
    let out = e.share_range(a, 0, b, 100, 3 * RS).unwrap();
    assert_eq!((out.shared_records, out.copied_bytes), (0, 3 * RS));
    // lined up, starting inside a record: the edges are copied
    let out = e.share_range(a, RS / 2, b, 5 * RS + RS / 2, 3 * RS).unwrap();
    assert_eq!((out.shared_records, out.copied_bytes), (2, RS));
    let mut ma = data.clone();
    ma.resize(24 * RS as usize, 0);
    ma.copy_within(0..(4 * RS) as usize, (20 * RS) as usize);
    let mut mb = vec![0u8; 100];
    mb.extend_from_slice(&data[..(3 * RS) as usize]);
    mb.resize((5 * RS + RS / 2) as usize, 0);
    mb.extend_from_slice(&data[(RS / 2) as usize..(RS / 2 + 3 * RS) as usize]);
    for round in 0..2 {
        assert_eq!(read_all(&e, a), ma, "round {round}");
        assert_eq!(read_all(&e, b), mb, "round {round}");
        e.sync().unwrap();
    }
    let xa = device_extents(&e, a);
    assert_eq!(xa[&20], xa[&0]);
    assert_eq!(refs(&e, &xa[&1]), 3, "a's record 1 is also a's record 21 and b's record 6");
    assert_clean(&e, "after the copies");
}

/// The source written and not committed: the copy commits it first and shares it; a write to
/// the source right after the copy (same txg) leaves the copy with the old bytes.
#[test]
fn a_copy_of_dirty_data_shares_it_and_later_writes_do_not_leak_into_it() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let o = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..opts() };
    let e = Engine::open(&pool, &o).unwrap();
    let (a, b) = (create(&e, "a"), create(&e, "b"));
    let data = text(3, 8 * RS as usize);
    e.write(a, 0, &data).unwrap();
    let out = e.share_range(a, 0, b, 0, data.len() as u64).unwrap();
    assert_eq!(out.shared_records, 8, "{out:?}");
    let new = text(4, RS as usize);
    e.write(a, 2 * RS, &new).unwrap();
    e.punch_hole(a, 4 * RS, RS).unwrap();
    assert_eq!(read_all(&e, b), data);
    e.sync().unwrap();
    assert_eq!(read_all(&e, b), data);
    let shared = device_extents(&e, b);
    assert_eq!(refs(&e, &shared[&2]), 1);
    assert_eq!(refs(&e, &shared[&4]), 1);
    assert_eq!(refs(&e, &shared[&3]), 2);
    assert_clean(&e, "after the writes");
    // part of a shared record changed, and a shared record cut, before their commit
    let c = create(&e, "part");
    e.share_range(b, 0, c, 0, 4 * RS).unwrap();
    e.write(c, RS + 7, b"changed").unwrap();
    e.set_size(c, 3 * RS + 99).unwrap();
    let mut mc = data[..(3 * RS + 99) as usize].to_vec();
    mc[(RS + 7) as usize..(RS + 14) as usize].copy_from_slice(b"changed");
    assert_eq!(read_all(&e, c), mc);
    e.sync().unwrap();
    assert_eq!(read_all(&e, c), mc);
    assert_eq!(read_all(&e, b), data);
    let xc = device_extents(&e, c);
    assert_eq!(xc[&0], shared[&0]);
    assert_ne!(xc[&1], shared[&1]);
    assert_ne!(xc[&3], shared[&3]);
    assert_eq!(refs(&e, &shared[&0]), 3);
    assert_clean(&e, "shared records changed in part");
    // the copy itself overwritten before its commit: the shared record never gains a row
    let c = create(&e, "c");
    e.share_range(b, 0, c, 0, RS).unwrap();
    e.write(c, 0, &new).unwrap();
    e.sync().unwrap();
    assert_eq!(refs(&e, &shared[&0]), 3);
    assert_clean(&e, "a share overwritten in its own txg");
    e.close().unwrap();
}

/// recompress of one file of a pair leaves the other's records and bytes as they were.
#[test]
fn rewriting_one_file_of_a_pair_leaves_the_other() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b, data) = pool_with_pair(d.path());
    let e = Engine::open(&pool, &opts()).unwrap();
    e.share_range(a, 0, b, 0, data.len() as u64).unwrap();
    e.sync().unwrap();
    let before = device_extents(&e, b);
    let z = RewriteTo { spec: Spec::Fixed(Codec::zstd(9).unwrap()), force: false };
    for i in 0..11 {
        e.rewrite_record(a, i, z, false).unwrap();
    }
    e.sync().unwrap();
    assert_eq!(device_extents(&e, b), before);
    for (i, x) in device_extents(&e, a) {
        assert_ne!(Some(&x), before.get(&i), "record {i} of a is stored anew");
    }
    for x in before.values() {
        assert_eq!(refs(&e, x), 1);
    }
    assert_eq!(read_all(&e, a), data);
    assert_eq!(read_all(&e, b), data);
    assert_clean(&e, "after rewriting a");
}

/// A crash (the engine dropped without close) before the copy's commit leaves no trace of
/// it; after its commit the copy is whole, and changes after that are lost or kept whole.
#[test]
fn a_crash_before_or_after_the_commit_of_a_copy() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b, data) = pool_with_pair(d.path());
    let o = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..opts() };
    let e = Engine::open(&pool, &o).unwrap();
    e.share_range(a, 0, b, 0, data.len() as u64).unwrap();
    drop(e);
    let e = Engine::open(&pool, &o).unwrap();
    assert_eq!(e.getattr(b).unwrap().size, 0);
    assert_clean(&e, "crash before the commit");
    e.share_range(a, 0, b, 0, data.len() as u64).unwrap();
    e.sync().unwrap();
    e.write(a, 0, &text(9, RS as usize)).unwrap();
    delete(&e, "b");
    drop(e);
    let e = Engine::open(&pool, &o).unwrap();
    assert_eq!(read_all(&e, a), data);
    assert_eq!(read_all(&e, b), data);
    assert_eq!(refs(&e, &device_extents(&e, a)[&0]), 2);
    assert_clean(&e, "crash after the commit");
}

/// The power goes after device write n, for every n over a workload of copies and changes,
/// each cut replayed with unsynced writes dropped, kept and torn: the pool reopens at its
/// last commit, both files read what they held then, and fsck (references included) and
/// scrub are clean.
#[test]
fn a_power_cut_at_any_device_write_among_copies_and_changes() {
    let o = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..opts() };
    let tdir = tempfile::tempdir().unwrap();
    let tpool = tdir.path().join("pool");
    let tdev = Arc::new(CrashDevice::new("crashdev0", 512));
    let devs: Vec<Arc<dyn Device>> = vec![tdev.clone()];
    Engine::mkfs_with_devices(&tpool, devs.clone(), &MkfsOptions::default()).unwrap();
    let data = text(5, 6 * RS as usize + 777);
    let e = Engine::open_with_devices(&tpool, devs, &o).unwrap();
    let a = create(&e, "a");
    let b = create(&e, "b");
    e.write(a, 0, &data).unwrap();
    e.close().unwrap();
    drop(e);
    let image = tdev.crash_image(CrashMode::DropUnsynced);
    // the files' contents after each step (None: deleted)
    let patch = text(6, RS as usize);
    let mut states: Vec<Contents> = vec![(Some(data.clone()), Some(Vec::new()))];
    {
        let mut sa = data.clone();
        let mut sb = data.clone();
        states.push((Some(sa.clone()), Some(sb.clone())));
        sb[RS as usize..2 * RS as usize].copy_from_slice(&patch);
        sa[(3 * RS + 5) as usize..(3 * RS + 105) as usize].copy_from_slice(&patch[..100]);
        states.push((Some(sa.clone()), Some(sb.clone())));
        sb.truncate(2 * RS as usize + 10);
        states.push((Some(sa.clone()), Some(sb.clone())));
        states.push((None, Some(sb)));
    }
    let steps = |e: &Engine| -> Result<usize> {
        e.share_range(a, 0, b, 0, data.len() as u64)?;
        e.sync()?;
        e.write(b, RS, &patch)?;
        e.write(a, 3 * RS + 5, &patch[..100])?;
        e.sync()?;
        e.set_size(b, 2 * RS + 10)?;
        e.sync()?;
        e.meta_write(|tx| {
            let (ino, _) = tx.dir_remove(ROOT_INO, b"a")?;
            tx.delete_inode(ino)
        })?;
        e.sync()?;
        Ok(4)
    };
    let mut cut = 0u64;
    loop {
        let mut finished = false;
        for (m, mode) in
            [CrashMode::DropUnsynced, CrashMode::KeepUnsynced, CrashMode::Random { seed: cut }].into_iter().enumerate()
        {
            let dir = tempfile::tempdir().unwrap();
            let pool = dir.path().join("pool");
            std::fs::create_dir_all(&pool).unwrap();
            for entry in std::fs::read_dir(&tpool).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), pool.join(entry.file_name())).unwrap();
            }
            let dev = Arc::new(CrashDevice::with_image("crashdev0", 512, image.clone(), None));
            let e = Engine::open_with_devices(&pool, vec![dev.clone() as Arc<dyn Device>], &o).unwrap();
            dev.cut_power_after(cut);
            let r = steps(&e);
            let _ = e.close();
            drop(e);
            if m == 0 && r.is_ok() && !dev.power_is_cut() {
                finished = true;
            }
            let after = Arc::new(CrashDevice::with_image("crashdev0", 512, dev.crash_image(mode), None));
            let e = Engine::open_with_devices(&pool, vec![after as Arc<dyn Device>], &o)
                .unwrap_or_else(|err| panic!("cut after write {cut} ({mode:?}): reopen: {err}"));
            let read = |ino: Ino| match e.getattr(ino) {
                Ok(_) => Some(read_all(&e, ino)),
                Err(_) => None,
            };
            let found = (read(a), read(b));
            assert!(states.contains(&found), "cut after write {cut} ({mode:?}): contents of no commit");
            let f = e.fsck().unwrap();
            assert!(f.is_clean(), "cut after write {cut} ({mode:?}): fsck {:?}", f.problems);
            let s = e.scrub(&|_, _| {}).unwrap();
            assert!(s.is_clean(), "cut after write {cut} ({mode:?}): scrub {:?}", s.damaged);
            e.close().unwrap();
        }
        if finished {
            break;
        }
        cut += 1;
        assert!(cut < 10_000, "the workload never finished without a cut");
    }
    eprintln!("{cut} crash points");
    assert!(cut > 2, "the cuts fell inside the workload");
}

/// Shared records hold no dirty bytes: past a bound per txg, a copy commits before sharing
/// more, so one txg never carries an unbounded number of them.
#[test]
fn many_shared_records_close_the_txg() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let o = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..opts() };
    let e = Engine::open(&pool, &o).unwrap();
    let (a, b) = (create(&e, "a"), create(&e, "b"));
    e.write(a, 0, &text(11, 8 * RS as usize)).unwrap();
    e.sync().unwrap();
    let before = e.data_txg();
    for k in 0..8300u64 {
        e.share_range(a, 0, b, k * 8 * RS, 8 * RS).unwrap();
    }
    assert!(e.data_txg() > before, "the copies committed along the way");
    e.sync().unwrap();
    assert_eq!(refs(&e, &device_extents(&e, a)[&3]), 8301);
    assert_clean(&e, "after 66400 shares");
}

/// Regression: a record shared into a file that was truncated in the same open txg lies
/// above the layer's truncation floor; a partial write into it took the floor for the
/// record's content and started from zeros, losing the shared bytes around the write
/// (found by the mounted exerciser, crates/cli/tests/mounted_exerciser.rs).
#[test]
fn partial_write_into_a_record_shared_above_the_truncation_floor_keeps_its_bytes() {
    let d = tempfile::tempdir().unwrap();
    let (pool, a, b, data) = pool_with_pair(d.path());
    let e = Engine::open(&pool, &opts()).unwrap();
    e.write(b, 0, &text(4, 4 * RS as usize)).unwrap();
    e.sync().unwrap();
    // truncated in the open txg: its floor (record 0) lies below the record shared next
    e.set_size(b, 0).unwrap();
    let out = e.share_range(a, RS, b, 3 * RS, RS).unwrap();
    assert_eq!(out.shared_records, 1, "{out:?}");
    let mut mb = vec![0u8; 4 * RS as usize];
    mb[3 * RS as usize..].copy_from_slice(&data[RS as usize..2 * RS as usize]);
    assert!(read_all(&e, b) == mb, "after the copy");
    let patch = text(9, 1000);
    e.write(b, 3 * RS + 5000, &patch).unwrap();
    mb[(3 * RS + 5000) as usize..(3 * RS + 6000) as usize].copy_from_slice(&patch);
    assert!(read_all(&e, b) == mb, "the shared bytes around the write are kept");
    e.sync().unwrap();
    assert!(read_all(&e, b) == mb, "after the commit");
    assert_eq!(read_all(&e, a), data, "the source is unchanged");
    assert_clean(&e, "after the commit");
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts()).unwrap();
    assert!(read_all(&e, b) == mb, "after reopening");
    assert_clean(&e, "reopened");
    e.close().unwrap();
}
