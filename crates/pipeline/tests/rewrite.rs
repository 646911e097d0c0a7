//! `Engine::rewrite_record` (rewrite/record.rs) without mounting: records change codec and keep
//! their bytes, `if_different` skips, dirty records are left to their txg, a write racing
//! the rewrite wins, and a crash or a power cut at any device write leaves every record in
//! its old or new encoding with the pool fsck-clean.

mod common;
use common::*;
use squeezefs_codec::{Codec, Spec};
use squeezefs_device::doubles::{CrashDevice, CrashMode, SplitMix64};
use squeezefs_device::Device;
use squeezefs_pipeline::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const RS: u64 = 128 << 10;

fn spec(s: &str) -> Spec {
    s.parse().unwrap()
}

fn to(s: &str) -> RewriteTo {
    RewriteTo { spec: spec(s), force: false }
}

fn lz4_opts() -> OpenOptions {
    OpenOptions { compression: spec("lz4"), workers: 2, ..fast_opts() }
}

/// Text that compresses at every level, different per `seed`.
fn text(seed: u64, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 64);
    let mut i = seed;
    while v.len() < n {
        v.extend_from_slice(format!("line {i}: the quick brown fox {} jumps over\n", i * 7919 % 1013).as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

/// Codec of every committed record of `ino`.
fn codecs(e: &Engine, ino: Ino) -> BTreeMap<u64, Codec> {
    e.extents(ino).unwrap().into_iter().map(|(off, x)| (off / RS, stored_codec(&x).unwrap())).collect()
}

fn rewrite_all(e: &Engine, ino: Ino, target: RewriteTo, if_different: bool) -> Vec<RewriteOutcome> {
    let n = e.getattr(ino).unwrap().size.div_ceil(RS);
    (0..n).map(|i| e.rewrite_record(ino, i, target, if_different).unwrap()).collect()
}

fn assert_clean(e: &Engine) {
    let f = e.fsck().unwrap();
    assert!(f.is_clean(), "fsck: {:?}", f.problems);
    let s = e.scrub(&|_, _| {}).unwrap();
    assert!(s.is_clean(), "scrub: {:?}", s.damaged);
}

#[test]
fn rewritten_records_change_codec_keep_their_bytes_and_free_the_old_copies() {
    let d = tempfile::tempdir().unwrap();
    // 10 whole records and a short one
    let data = text(1, 10 * RS as usize + 5000);
    let (pool, ino) = pool_with_file(d.path(), &lz4_opts(), "f", &data);
    let e = Engine::open(&pool, &lz4_opts()).unwrap();
    let lz4 = Codec::lz4(1).unwrap();
    assert!(codecs(&e, ino).values().all(|c| *c == lz4));
    let before: u64 = e.usage(ino).unwrap().iter().map(|r| r.disk_bytes).sum();
    let out = rewrite_all(&e, ino, to("zstd:15"), false);
    for (i, o) in out.iter().enumerate() {
        match o {
            RewriteOutcome::Rewritten { old_codec, new_codec, logical, old_stored, new_stored } => {
                assert_eq!(*old_codec, lz4);
                assert_eq!(*new_codec, Codec::zstd(15).unwrap());
                assert!(new_stored < old_stored, "record {i}: zstd:15 stores less than lz4");
                assert_eq!(*logical, if i == 10 { 5000 } else { RS });
            }
            other => panic!("record {i}: {other:?}"),
        }
    }
    // before the commit, reads see the same bytes (the open layer holds them packed)
    assert_eq!(read_all(&e, ino), data);
    e.sync().unwrap();
    assert!(codecs(&e, ino).values().all(|c| *c == Codec::zstd(15).unwrap()), "{:?}", codecs(&e, ino));
    let after: u64 = e.usage(ino).unwrap().iter().map(|r| r.disk_bytes).sum();
    assert!(after < before, "{after} < {before}");
    assert_eq!(read_all(&e, ino), data);
    assert_clean(&e);
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &lz4_opts()).unwrap();
    assert_eq!(read_all(&e, ino), data);
    assert_clean(&e);
}

/// Files with record sizes of their own (16 KiB, 1 MiB, 4 KiB) are rewritten record by
/// record at that size: each record keeps its offset and length (a full one its own record
/// size, the tail its remainder), gets the new codec, and the file reads back the same, also
/// after a reopen; an index past the file's own records is a hole.
#[test]
fn records_of_files_with_their_own_record_size_are_rewritten_at_that_size() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &lz4_opts()).unwrap();
    let mut files = Vec::new();
    for (i, rs) in [16u64 << 10, 1 << 20, 4 << 10].into_iter().enumerate() {
        let ino = e
            .meta_write(|tx| {
                let ino = tx.alloc_ino()?;
                tx.put_inode(&attr(ino, FileKind::File, 1))?;
                tx.set_record_size(ino, rs)?;
                tx.dir_insert(ROOT_INO, format!("f{rs}").as_bytes(), ino, FileKind::File)?;
                Ok(ino)
            })
            .unwrap();
        let data = text(40 + i as u64, (2 * rs + rs / 3 + 11) as usize);
        e.write(ino, 0, &data).unwrap();
        files.push((ino, rs, data));
    }
    e.sync().unwrap();
    let zstd = Codec::zstd(9).unwrap();
    for (ino, rs, data) in &files {
        let n = (data.len() as u64).div_ceil(*rs);
        assert_eq!(n, 3);
        for i in 0..n {
            match e.rewrite_record(*ino, i, to("zstd:9"), false).unwrap() {
                RewriteOutcome::Rewritten { logical, new_codec, .. } => {
                    assert_eq!(logical, (data.len() as u64 - i * rs).min(*rs), "file of {rs}: record {i}");
                    assert_eq!(new_codec, zstd);
                }
                other => panic!("file of {rs}: record {i}: {other:?}"),
            }
        }
        assert_eq!(e.rewrite_record(*ino, n, to("zstd:9"), false).unwrap(), RewriteOutcome::Skipped(RewriteSkip::Hole));
        assert_eq!(&read_all(&e, *ino), data, "file of {rs} before the commit");
    }
    e.sync().unwrap();
    for (ino, rs, data) in &files {
        let ext = e.extents(*ino).unwrap();
        let offs: Vec<u64> = ext.iter().map(|(off, _)| *off).collect();
        assert_eq!(offs, [0, *rs, 2 * rs], "file of {rs}");
        assert!(ext.iter().all(|(_, x)| stored_codec(x) == Some(zstd)), "file of {rs}: {ext:?}");
        assert_eq!(&read_all(&e, *ino), data, "file of {rs}");
    }
    assert_clean(&e);
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &lz4_opts()).unwrap();
    for (ino, rs, data) in &files {
        assert_eq!(&read_all(&e, *ino), data, "file of {rs} after a reopen");
    }
    assert_clean(&e);
}

#[test]
fn if_different_skips_records_stored_that_way_and_raw_records_that_stay_raw() {
    let d = tempfile::tempdir().unwrap();
    let mut data = text(2, 3 * RS as usize);
    data.extend(noise(9, RS as usize));
    let (pool, ino) = pool_with_file(d.path(), &lz4_opts(), "f", &data);
    let e = Engine::open(&pool, &lz4_opts()).unwrap();
    assert_eq!(codecs(&e, ino)[&3], Codec::NONE, "noise is stored raw");
    let first = rewrite_all(&e, ino, to("zstd:3"), true);
    assert!(matches!(first[0], RewriteOutcome::Rewritten { .. }));
    assert_eq!(first[3], RewriteOutcome::Skipped(RewriteSkip::NoGain), "raw and raw again: nothing to do");
    e.sync().unwrap();
    let second = rewrite_all(&e, ino, to("zstd:3"), true);
    assert!(second[..3].iter().all(|o| *o == RewriteOutcome::Skipped(RewriteSkip::AlreadyThere)), "{second:?}");
    // without if_different a record already so is written again (a fresh copy)
    let third = rewrite_all(&e, ino, to("zstd:3"), false);
    assert!(matches!(third[0], RewriteOutcome::Rewritten { .. }));
    // an adaptive target counts any codec of its range as stored so
    e.sync().unwrap();
    let fourth = rewrite_all(&e, ino, to("auto:1..9"), true);
    assert!(fourth[..3].iter().all(|o| *o == RewriteOutcome::Skipped(RewriteSkip::AlreadyThere)), "{fourth:?}");
    // to none: compressed records become raw
    rewrite_all(&e, ino, to("none"), true);
    e.sync().unwrap();
    assert!(codecs(&e, ino).values().all(|c| *c == Codec::NONE));
    assert_eq!(read_all(&e, ino), data);
    assert_clean(&e);
}

#[test]
fn a_record_with_uncommitted_changes_is_left_to_its_txg() {
    let d = tempfile::tempdir().unwrap();
    let data = text(3, 2 * RS as usize);
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..lz4_opts() };
    let (pool, ino) = pool_with_file(d.path(), &opts, "f", &data);
    let e = Engine::open(&pool, &opts).unwrap();
    e.write(ino, 10, b"changed").unwrap();
    assert_eq!(e.rewrite_record(ino, 0, to("zstd:9"), false).unwrap(), RewriteOutcome::Skipped(RewriteSkip::Dirty));
    assert!(matches!(e.rewrite_record(ino, 1, to("zstd:9"), false).unwrap(), RewriteOutcome::Rewritten { .. }));
    // a record past the end, a hole and a deleted file
    assert_eq!(e.rewrite_record(ino, 7, to("zstd:9"), false).unwrap(), RewriteOutcome::Skipped(RewriteSkip::Hole));
    e.sync().unwrap();
    let c = codecs(&e, ino);
    assert_eq!(c[&0], Codec::lz4(1).unwrap(), "the write's policy, not the rewrite's");
    assert_eq!(c[&1], Codec::zstd(9).unwrap());
    let mut want = data.clone();
    want[10..17].copy_from_slice(b"changed");
    assert_eq!(read_all(&e, ino), want);
    e.meta_write(|tx| {
        tx.dir_remove(ROOT_INO, b"f")?;
        tx.delete_inode(ino)
    })
    .unwrap();
    assert_eq!(e.rewrite_record(ino, 0, to("zstd:9"), false).unwrap(), RewriteOutcome::Skipped(RewriteSkip::Gone));
    assert_clean(&e);
}

#[test]
fn a_write_after_the_swap_wins_over_the_rewritten_copy() {
    let d = tempfile::tempdir().unwrap();
    let data = text(4, 3 * RS as usize);
    let (pool, ino) = pool_with_file(d.path(), &lz4_opts(), "f", &data);
    let e = Engine::open(&pool, &lz4_opts()).unwrap();
    assert!(matches!(e.rewrite_record(ino, 1, to("zstd:15"), false).unwrap(), RewriteOutcome::Rewritten { .. }));
    // a partial write into the record held packed, and a whole-record one into another
    e.write(ino, RS + 100, b"newer bytes").unwrap();
    assert!(matches!(e.rewrite_record(ino, 2, to("zstd:15"), false).unwrap(), RewriteOutcome::Rewritten { .. }));
    let whole = text(99, RS as usize);
    e.write(ino, 2 * RS, &whole).unwrap();
    let mut want = data.clone();
    want[RS as usize + 100..RS as usize + 111].copy_from_slice(b"newer bytes");
    want[2 * RS as usize..].copy_from_slice(&whole);
    assert_eq!(read_all(&e, ino), want);
    e.sync().unwrap();
    assert_eq!(read_all(&e, ino), want);
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &lz4_opts()).unwrap();
    assert_eq!(read_all(&e, ino), want);
    assert_clean(&e);
}

#[test]
fn small_files_and_short_records_are_rewritten_too() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &lz4_opts()).unwrap();
    let small = create(&e, "small");
    let tiny = text(5, 1500);
    e.write(small, 0, &tiny).unwrap();
    let short = create(&e, "short");
    let some = text(6, 70_000);
    e.write(short, 0, &some).unwrap();
    // a short committed record, then the file grows past it without touching it
    let grown = create(&e, "grown");
    e.write(grown, 0, &text(7, 3000)).unwrap();
    e.sync().unwrap();
    e.set_size(grown, 2 * RS).unwrap();
    e.sync().unwrap();
    for ino in [small, short, grown] {
        assert!(
            matches!(e.rewrite_record(ino, 0, to("zstd:19"), false).unwrap(), RewriteOutcome::Rewritten { .. }),
            "inode {ino}"
        );
    }
    e.sync().unwrap();
    for ino in [small, short, grown] {
        assert_eq!(codecs(&e, ino)[&0], Codec::zstd(19).unwrap(), "inode {ino}");
    }
    assert_eq!(read_all(&e, small), tiny);
    assert_eq!(read_all(&e, short), some);
    let mut g = text(7, 3000);
    g.resize(2 * RS as usize, 0);
    assert_eq!(read_all(&e, grown), g);
    assert_clean(&e);
}

/// Writers and rewriters on the same records at once: every acknowledged write survives,
/// in memory, after the commit and after a reopen.
#[test]
fn concurrent_writes_and_rewrites_lose_nothing() {
    let d = tempfile::tempdir().unwrap();
    let records = 96u64;
    let data = text(8, (records * RS) as usize);
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_millis(30), ..lz4_opts() };
    let (pool, ino) = pool_with_file(d.path(), &opts, "f", &data);
    let e = Engine::open(&pool, &opts).unwrap();
    let model = Arc::new(std::sync::Mutex::new(data));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (e, model, stop) = (e.clone(), model.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = SplitMix64::new(11);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let off = rng.below(records * RS - 9000);
                let len = 1 + rng.below(8000) as usize;
                let bytes = text(1000 + n, len);
                // the model changes under the same lock as the write, so it is the truth
                let mut m = model.lock().unwrap();
                e.write(ino, off, &bytes).unwrap();
                m[off as usize..off as usize + len].copy_from_slice(&bytes);
                drop(m);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            n
        })
    };
    let mut rewritten = 0;
    let mut dirty = 0;
    let t0 = std::time::Instant::now();
    let mut round = 0;
    while t0.elapsed() < std::time::Duration::from_secs(4) {
        round += 1;
        let target = if round % 2 == 0 { to("zstd:5") } else { to("lz4") };
        for i in 0..records {
            match e.rewrite_record(ino, i, target, true).unwrap() {
                RewriteOutcome::Rewritten { .. } => rewritten += 1,
                RewriteOutcome::Skipped(RewriteSkip::Dirty) => dirty += 1,
                _ => {}
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    eprintln!("{writes} writes, {rewritten} records rewritten, {dirty} left dirty, {round} rounds");
    assert!(rewritten > records, "the rewrites raced the writes: {rewritten}");
    assert!(dirty > 0, "some records were caught with changes in flight");
    let want = model.lock().unwrap().clone();
    assert_eq!(read_all(&e, ino), want, "before the commit");
    e.sync().unwrap();
    assert_eq!(read_all(&e, ino), want, "after the commit");
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &opts).unwrap();
    assert_eq!(read_all(&e, ino), want, "after a reopen");
    assert_clean(&e);
}

/// Dropping the engine mid-way (a crash of the daemon): committed rewrites stay, the rest is
/// the old copy, and nothing leaks.
#[test]
fn a_crash_mid_rewrite_leaves_old_or_new_records() {
    let d = tempfile::tempdir().unwrap();
    let data = text(12, 40 * RS as usize);
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..lz4_opts() };
    let (pool, ino) = pool_with_file(d.path(), &opts, "f", &data);
    let e = Engine::open(&pool, &opts).unwrap();
    for i in 0..20 {
        e.rewrite_record(ino, i, to("zstd:12"), false).unwrap();
    }
    e.sync().unwrap();
    for i in 20..40 {
        e.rewrite_record(ino, i, to("zstd:12"), false).unwrap();
    }
    drop(e); // no close: the second half was never committed
    let e = Engine::open(&pool, &opts).unwrap();
    let c = codecs(&e, ino);
    assert!((0..20).all(|i| c[&i] == Codec::zstd(12).unwrap()));
    assert!((20..40).all(|i| c[&i] == Codec::lz4(1).unwrap()));
    assert_eq!(read_all(&e, ino), data);
    assert_clean(&e);
}

/// The power goes after device write n, for n over the whole rewrite of a file; each cut is
/// replayed with unsynced writes dropped, kept and torn. Every record reads back its bytes,
/// in its old or new codec, and scrub and fsck are clean.
#[test]
fn a_power_cut_at_any_device_write_of_a_rewrite_leaves_every_record_readable() {
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_secs(3600), ..lz4_opts() };
    let tdir = tempfile::tempdir().unwrap();
    let tpool = tdir.path().join("pool");
    let tdev = Arc::new(CrashDevice::new("crashdev0", 512));
    let devs: Vec<Arc<dyn Device>> = vec![tdev.clone()];
    Engine::mkfs_with_devices(&tpool, devs.clone(), &MkfsOptions::default()).unwrap();
    let data = text(13, 12 * RS as usize + 777);
    let e = Engine::open_with_devices(&tpool, devs, &opts).unwrap();
    let ino = create(&e, "f");
    e.write(ino, 0, &data).unwrap();
    e.close().unwrap();
    drop(e);
    let image = tdev.crash_image(CrashMode::DropUnsynced);
    let (lz4, z) = (Codec::lz4(1).unwrap(), Codec::zstd(7).unwrap());
    let mut cut = 0u64;
    let mut mixed = 0;
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
            let e = Engine::open_with_devices(&pool, vec![dev.clone() as Arc<dyn Device>], &opts).unwrap();
            dev.cut_power_after(cut);
            let mut failed = false;
            for i in 0..13 {
                if e.rewrite_record(ino, i, RewriteTo { spec: Spec::Fixed(z), force: false }, false).is_err() {
                    failed = true;
                    break;
                }
                if i % 4 == 3 && e.sync().is_err() {
                    failed = true;
                    break;
                }
            }
            if !failed && e.sync().is_err() {
                failed = true;
            }
            let _ = e.close();
            drop(e);
            if m == 0 && !failed && !dev.power_is_cut() {
                finished = true;
            }
            let after = Arc::new(CrashDevice::with_image("crashdev0", 512, dev.crash_image(mode), None));
            let e = Engine::open_with_devices(&pool, vec![after as Arc<dyn Device>], &opts)
                .unwrap_or_else(|err| panic!("cut after write {cut} ({mode:?}): reopen: {err}"));
            assert_eq!(read_all(&e, ino), data, "cut after write {cut} ({mode:?})");
            let c = codecs(&e, ino);
            assert!(c.values().all(|c| *c == lz4 || *c == z), "cut {cut}: {c:?}");
            if c.values().any(|c| *c == lz4) && c.values().any(|c| *c == z) {
                mixed += 1;
            }
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
        assert!(cut < 10_000, "the rewrite never finished without a cut");
    }
    eprintln!("{cut} crash points, {mixed} images with records in both encodings");
    assert!(cut > 3 && mixed > 0, "the cuts fell inside the rewrite");
}

/// Commits of other files (a pool busy with small files) never make a rewrite give up: the
/// swap compares the file's own commit token, not a pool-wide generation.
#[test]
fn commits_of_other_files_do_not_hold_rewrites_up() {
    let d = tempfile::tempdir().unwrap();
    let data = text(20, 32 * RS as usize);
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_millis(5), ..lz4_opts() };
    let (pool, ino) = pool_with_file(d.path(), &opts, "quiet", &data);
    let e = Engine::open(&pool, &opts).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let (e, stop) = (e.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let f = create(&e, &format!("small{n}"));
                e.write(f, 0, &text(n, 3000)).unwrap();
                n += 1;
            }
            n
        })
    };
    let out = rewrite_all(&e, ino, to("zstd:9"), true);
    stop.store(true, Ordering::Relaxed);
    let files = busy.join().unwrap();
    assert!(files > 10, "the pool was busy: {files} files");
    assert!(out.iter().all(|o| matches!(o, RewriteOutcome::Rewritten { .. })), "{out:?}");
    e.sync().unwrap();
    assert_eq!(read_all(&e, ino), data);
    assert_clean(&e);
}
