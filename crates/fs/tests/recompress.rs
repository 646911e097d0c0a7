//! Recompress jobs and background compression in the fs core, on a real engine in a
//! temporary pool (no mounting): a job rewrites a tree and counts what it did, skips with
//! `if_different`, refuses bad requests; the background worker converts a tree to its
//! `background_compression` when idle, holds off while writes come in, goes on after a
//! restart from its saved cursor, and looks again at files moved under another codec.
use squeezefs_fs::recompress::{JobError, JobRequest};
use squeezefs_fs::{Compression, Creds, Fs, FsConfig, Ino, ROOT_INO};
use squeezefs_pipeline::{stored_codec, Engine, MkfsOptions, OpenOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn open(pool: &Path, cfg: FsConfig) -> Arc<Fs> {
    let opts = OpenOptions {
        compression: "lz4".parse().unwrap(),
        txg_timeout: Duration::from_millis(200),
        ..OpenOptions::default()
    };
    Arc::new(Fs::new(Engine::open(pool, &opts).unwrap(), cfg).unwrap())
}

fn new_pool(dir: &Path) -> std::path::PathBuf {
    let pool = dir.join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    pool
}

fn mkdir(fs: &Fs, parent: Ino, name: &str) -> Ino {
    fs.mkdir(&Creds::root(), parent, name.as_bytes(), 0o755).unwrap().ino
}

fn text(seed: u64, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 64);
    let mut i = seed;
    while v.len() < n {
        v.extend_from_slice(format!("{i}: a line of text that compresses, {} times\n", i * 7919 % 1013).as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

fn file(fs: &Fs, dir: Ino, name: &str, data: &[u8]) -> Ino {
    let (a, fh) = fs.create(&Creds::root(), dir, name.as_bytes(), 0o644, libc::O_RDWR).unwrap();
    fs.write(&Creds::root(), a.ino, 0, data, false).unwrap();
    fs.release(fh).unwrap();
    a.ino
}

fn read(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

/// Logical bytes per codec over `inos`.
fn levels(fs: &Fs, inos: &[Ino]) -> BTreeMap<String, u64> {
    fs.sync().unwrap();
    let mut m = BTreeMap::new();
    for &ino in inos {
        for (_, e) in fs.engine().extents(ino).unwrap() {
            *m.entry(stored_codec(&e).unwrap().to_string()).or_default() += u64::from(e.logical);
        }
    }
    m
}

/// A tree: /t/a (3 records), /t/sub/b (2 records and a bit), /t/sub/deep/c (small), /u/d.
fn tree(fs: &Fs) -> (Vec<(Ino, Vec<u8>)>, Ino) {
    let t = mkdir(fs, ROOT_INO, "t");
    let sub = mkdir(fs, t, "sub");
    let deep = mkdir(fs, sub, "deep");
    let u = mkdir(fs, ROOT_INO, "u");
    let files = vec![
        (t, "a", text(1, 3 << 17)),
        (sub, "b", text(2, (2 << 17) + 999)),
        (deep, "c", text(3, 3000)),
        (u, "d", text(4, 1 << 17)),
    ];
    let out = files.into_iter().map(|(dir, name, data)| (file(fs, dir, name, &data), data)).collect();
    fs.sync().unwrap();
    (out, t)
}

fn request(paths: &[&str], to: Option<&str>) -> JobRequest {
    JobRequest {
        paths: paths.iter().map(|p| p.as_bytes().to_vec()).collect(),
        to: to.map(|s| Compression { spec: s.parse().unwrap(), force: false }),
        if_different: false,
        recursive: true,
        jobs: 2,
    }
}

#[test]
fn a_job_rewrites_a_tree_counts_what_it_did_and_skips_with_if_different() {
    let d = tempfile::tempdir().unwrap();
    let fs = open(&new_pool(d.path()), FsConfig::default());
    let (files, _) = tree(&fs);
    let inos: Vec<Ino> = files.iter().map(|f| f.0).collect();
    assert_eq!(levels(&fs, &inos).keys().collect::<Vec<_>>(), vec!["lz4"]);
    let mut calls = 0;
    let s = fs
        .recompress(&request(&["t"], Some("zstd:15")), &mut |_| {
            calls += 1;
            true
        })
        .unwrap();
    assert!(calls >= 2, "progress before and after");
    let c = s.counts;
    assert_eq!((c.files_total, c.files_done), (3, 3));
    assert_eq!(c.records_total, 3 + 3 + 1);
    assert_eq!(c.records_rewritten, c.records_total);
    assert_eq!(c.bytes_total, (3 << 17) + (2 << 17) + 999 + 3000);
    assert!(c.stored_total_after() < c.stored_total_before, "{c:?}");
    let l = levels(&fs, &inos[..3]);
    assert_eq!(l.keys().collect::<Vec<_>>(), vec!["zstd:15"], "{l:?}");
    assert_eq!(levels(&fs, &inos[3..]).keys().collect::<Vec<_>>(), vec!["lz4"], "outside the path: untouched");
    // again with if_different: every record is stored so already
    let mut again = request(&["/t/"], Some("zstd:15"));
    again.if_different = true;
    let s = fs.recompress(&again, &mut |_| true).unwrap();
    assert_eq!(s.counts.records_rewritten, 0);
    assert_eq!(s.skipped.get("already stored so"), Some(&7), "{:?}", s.skipped);
    // no --to: each file's effective compression (a property on t/sub, the mount's lz4 elsewhere)
    let sub = fs.lookup_path(b"t/sub").unwrap().last().unwrap().0;
    fs.setxattr(&Creds::root(), sub, b"user.squeezefs.compression", b"zstd:3", 0).unwrap();
    let mut own = request(&["t", "u/d"], None);
    own.if_different = true;
    let s = fs.recompress(&own, &mut |_| true).unwrap();
    assert_eq!(s.counts.files_total, 4);
    assert_eq!(levels(&fs, &inos[..1]).keys().collect::<Vec<_>>(), vec!["lz4"]);
    assert_eq!(levels(&fs, &inos[1..3]).keys().collect::<Vec<_>>(), vec!["zstd:3"]);
    assert_eq!(s.skipped.get("already stored so"), Some(&1), "u/d is lz4 already: {:?}", s.skipped);
    for (ino, data) in &files {
        assert_eq!(&read(&fs, *ino), data);
    }
    let r = fs.engine().fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

#[test]
fn bad_requests_are_refused_naming_the_problem() {
    let d = tempfile::tempdir().unwrap();
    let fs = open(&new_pool(d.path()), FsConfig::default());
    tree(&fs);
    let err = |r: JobRequest| fs.recompress(&r, &mut |_| true).unwrap_err();
    assert!(matches!(err(request(&["nope"], None)), JobError::NoSuchPath { path } if path == "/nope"));
    assert!(matches!(err(request(&["t/a/x"], None)), JobError::NotADirectoryOnPath { .. }));
    let mut flat = request(&["t"], None);
    flat.recursive = false;
    let e = err(flat);
    assert!(matches!(e, JobError::IsDirectory { .. }));
    assert!(e.to_string().contains("-r"), "{e}");
    let mut none = request(&["t"], None);
    none.jobs = 0;
    assert!(matches!(err(none), JobError::BadJobs(0)));
    assert!(matches!(err(request(&[], None)), JobError::NoPaths));
    assert!(matches!(err(request(&["t/../u"], None)), JobError::Path { .. }));
    // a job cancelled at its first progress report stops, and the files stay whole; the big
    // file keeps the workers busy past the moment the driver first looks at them, which
    // happens before any report
    let big = text(9, 64 << 17);
    let big_ino = file(&fs, ROOT_INO, "big", &big);
    fs.sync().unwrap();
    let mut reports = 0;
    let s = fs
        .recompress(&request(&["t", "big"], Some("zstd:1")), &mut |_| {
            reports += 1;
            reports < 2
        })
        .unwrap();
    assert!(s.cancelled, "{s:?}");
    assert_eq!(read(&fs, big_ino), big);
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_background_worker_converts_a_tree_when_idle_and_resumes_after_a_restart() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path());
    let fs = open(&pool, FsConfig::default());
    let t = mkdir(&fs, ROOT_INO, "t");
    fs.setxattr(&Creds::root(), t, b"user.squeezefs.background_compression", b"zstd:12", 0).unwrap();
    let other = mkdir(&fs, ROOT_INO, "other");
    let mut files = Vec::new();
    for i in 0..6u64 {
        let dir = if i < 4 { t } else { other };
        let data = text(100 + i, (4 << 17) + 10 * i as usize);
        files.push((file(&fs, dir, &format!("f{i}"), &data), data));
    }
    fs.sync().unwrap();
    let inos: Vec<Ino> = files.iter().map(|f| f.0).collect();
    let pending = fs.background_pending(b"").unwrap();
    assert_eq!(pending.files_with_spec, 4);
    assert_eq!(pending.records, 4 + 3 * 5, "f0 fills 4 records, f1..f3 one byte-run more");
    assert!(pending.logical_bytes > 4 * (4 << 17));
    // a worker that never gets idle time does nothing
    fs.start_background(Some(Duration::from_secs(3600)));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(fs.background_status().state, "waiting");
    fs.shutdown().unwrap();
    drop(fs);

    // idle after 100 ms; stop it after the first records are converted
    let fs = open(&pool, FsConfig::default());
    fs.start_background(Some(Duration::from_millis(100)));
    wait_for("the first conversions", 60, || fs.background_status().session_records >= 3);
    fs.shutdown().unwrap();
    let first = fs.background_status();
    assert_eq!(first.state, "stopped");
    drop(fs);
    let fs = open(&pool, FsConfig::default());
    let saved = fs.engine().background_cursor().unwrap().expect("saved at stop");
    assert!(saved.converted_records >= 3, "{saved:?}");
    assert_eq!(saved.converted_records, first.session_records, "{saved:?} {first:?}");
    fs.start_background(Some(Duration::from_millis(100)));
    wait_for("the tree converted", 120, || fs.background_pending(b"t").unwrap().records == 0);
    wait_for("the pass to end", 60, || fs.background_status().cursor.passes >= 1);
    let st = fs.background_status();
    // the last records of f1..f3 (10 to 30 bytes) are stored raw: they do not compress
    assert_eq!(st.cursor.converted_records, 16, "{st:?}");
    assert!(st.cursor.converted_after < st.cursor.converted_before, "{st:?}");
    let l = levels(&fs, &inos[..4]);
    assert_eq!(l.keys().collect::<Vec<_>>(), vec!["none", "zstd:12"], "{l:?}");
    assert_eq!(l["none"], 10 + 20 + 30, "only the short tails are raw");
    let l = levels(&fs, &inos[4..]);
    assert_eq!(l.keys().collect::<Vec<_>>(), vec!["lz4", "none"], "no background codec there: {l:?}");
    // a file moved under the background codec is looked at again, though its records are
    // older than the finished pass's floor
    let other_file = fs.lookup_path(b"other/f4").unwrap().last().unwrap().0;
    fs.rename(&Creds::root(), other, b"f4", t, b"f4", 0).unwrap();
    wait_for("the moved file converted", 120, || {
        levels(&fs, &[other_file]).keys().collect::<Vec<_>>() == vec!["none", "zstd:12"]
    });
    // new writes are converted too, after they stop
    let late = text(999, 3 << 17);
    let late_ino = file(&fs, t, "late", &late);
    fs.sync().unwrap();
    wait_for("the new file converted", 120, || levels(&fs, &[late_ino]).keys().collect::<Vec<_>>() == vec!["zstd:12"]);
    for (ino, data) in &files {
        assert_eq!(&read(&fs, *ino), data);
    }
    assert_eq!(read(&fs, late_ino), late);
    let r = fs.engine().fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    fs.shutdown().unwrap();
}

/// Files under directories with their own `recordsize` (16K, 1M) are converted record by
/// record at their own record size, by a job and by the background worker: every record is
/// rewritten once (none is taken for another, none is left), and the files read back.
#[test]
fn files_with_their_own_record_size_are_converted_record_by_record() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path());
    let fs = open(&pool, FsConfig::default());
    let small = mkdir(&fs, ROOT_INO, "small");
    fs.setxattr(&Creds::root(), small, b"user.squeezefs.recordsize", b"16K", 0).unwrap();
    let big = mkdir(&fs, ROOT_INO, "big");
    fs.setxattr(&Creds::root(), big, b"user.squeezefs.recordsize", b"1M", 0).unwrap();
    // 16K records: 6 whole and a 4K tail; 1M records: one whole and a 512K tail
    let a = text(7, 100 << 10);
    let b = text(8, 3 << 19);
    let files = [(file(&fs, small, "a", &a), a, 16u32 << 10), (file(&fs, big, "b", &b), b, 1 << 20)];
    fs.sync().unwrap();
    for (ino, _, rs) in &files {
        assert_eq!(fs.engine().record_size(*ino).unwrap(), *rs);
    }
    let inos: Vec<Ino> = files.iter().map(|f| f.0).collect();
    let s = fs.recompress(&request(&["small", "big"], Some("zstd:15")), &mut |_| true).unwrap();
    assert_eq!(s.counts.records_total, 7 + 2);
    assert_eq!(s.counts.records_rewritten, 7 + 2, "{:?}", s.skipped);
    let l = levels(&fs, &inos);
    assert_eq!(l.keys().collect::<Vec<_>>(), vec!["zstd:15"], "{l:?}");
    for (ino, data, _) in &files {
        assert_eq!(&read(&fs, *ino), data);
    }
    // the background worker: both trees to zstd:3, every record converted once
    for dir in [small, big] {
        fs.setxattr(&Creds::root(), dir, b"user.squeezefs.background_compression", b"zstd:3", 0).unwrap();
    }
    assert_eq!(fs.background_pending(b"").unwrap().records, 7 + 2);
    fs.start_background(Some(Duration::from_millis(100)));
    wait_for("both trees converted", 120, || fs.background_pending(b"").unwrap().records == 0);
    wait_for("the pass to end", 60, || fs.background_status().cursor.passes >= 1);
    assert_eq!(fs.background_status().cursor.converted_records, 7 + 2);
    let l = levels(&fs, &inos);
    assert_eq!(l.keys().collect::<Vec<_>>(), vec!["zstd:3"], "{l:?}");
    for (ino, data, rs) in &files {
        assert_eq!(&read(&fs, *ino), data);
        for (off, e) in fs.engine().extents(*ino).unwrap() {
            assert_eq!(off % u64::from(*rs), 0);
            assert!(e.logical <= *rs);
        }
    }
    let r = fs.engine().fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    fs.shutdown().unwrap();
}

/// Background compression leaves records shared between copies as they are (rewriting one
/// file's would store a second copy); the file's own records are converted. `recompress`
/// of one file of the pair rewrites that file and leaves the other unchanged.
#[test]
fn background_compression_keeps_shared_records_shared() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path());
    let fs = open(&pool, FsConfig::default());
    let t = mkdir(&fs, ROOT_INO, "t");
    fs.setxattr(&Creds::root(), t, b"user.squeezefs.background_compression", b"zstd:12", 0).unwrap();
    let data = text(7, 4 << 17);
    let a = file(&fs, t, "a", &data);
    fs.sync().unwrap();
    let b = file(&fs, t, "b", &[]);
    fs.engine().share_range(a, 0, b, 0, 2 << 17).unwrap();
    fs.sync().unwrap();
    let extents = |ino| fs.engine().extents(ino).unwrap().into_iter().map(|(_, e)| e).collect::<Vec<_>>();
    let shared = extents(b);
    // a's records 2 and 3 are its own: only they are pending
    assert_eq!(fs.background_pending(b"t").unwrap().records, 2);
    fs.start_background(Some(Duration::from_millis(100)));
    wait_for("a's own records converted", 120, || fs.background_pending(b"t").unwrap().records == 0);
    fs.shutdown().unwrap();
    drop(fs);
    let fs = open(&pool, FsConfig::default());
    let extents = |ino| fs.engine().extents(ino).unwrap().into_iter().map(|(_, e)| e).collect::<Vec<_>>();
    let (xa, xb) = (extents(a), extents(b));
    assert_eq!(&xa[..2], &shared[..], "the shared records stay");
    assert_eq!(xb, shared);
    assert!(xa[2..].iter().all(|e| stored_codec(e).unwrap().to_string() == "zstd:12"), "{xa:?}");
    assert_eq!(read(&fs, a), data);
    assert_eq!(read(&fs, b), data[..2 << 17]);
}
