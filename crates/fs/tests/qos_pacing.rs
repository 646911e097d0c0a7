//! QoS admission in the fs core, without mounting: writes into a directory tree holding
//! `qos` are paced to its rate whatever the number of writer threads, nested trees share as
//! HTB classes do, reads are never paced. Bounds are generous (the machine is shared); what
//! they check is the mechanism: a tree never goes faster than its bucket allows, and a
//! guaranteed child is not starved.
use squeezefs_fs::{Creds, Fs, FsConfig, Ino, ROOT_INO};
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Admission's bucket depth (AdmissionTunables::burst_secs).
const BURST_SECS: f64 = 0.25;

fn fs_with(cfg: FsConfig) -> (tempfile::TempDir, Arc<Fs>) {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).unwrap(), cfg).unwrap();
    (dir, Arc::new(fs))
}

fn mkdir(fs: &Fs, parent: Ino, name: &str, qos: Option<&str>) -> Ino {
    let ino = fs.mkdir(&Creds::root(), parent, name.as_bytes(), 0o755).unwrap().ino;
    if let Some(q) = qos {
        fs.setxattr(&Creds::root(), ino, b"user.squeezefs.qos", q.as_bytes(), 0).unwrap();
    }
    ino
}

fn create(fs: &Fs, dir: Ino, name: &str) -> Ino {
    fs.create(&Creds::root(), dir, name.as_bytes(), 0o644, libc::O_WRONLY).unwrap().0.ino
}

/// Compressible but not trivial data (a record of text-like bytes).
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"the quick brown fox jumps over the lazy dog "[(x % 44) as usize]
        })
        .collect()
}

/// `threads` writers, each into its own file of `dir`, write `chunk`-byte writes until
/// `deadline`; the bytes each wrote.
fn write_until(fs: &Arc<Fs>, dir: Ino, prefix: &str, threads: usize, chunk: usize, until: Instant) -> Vec<u64> {
    let hs: Vec<_> = (0..threads)
        .map(|k| {
            let fs = fs.clone();
            let ino = create(&fs, dir, &format!("{prefix}{k}"));
            let buf = data(chunk, k as u64 + 7);
            std::thread::spawn(move || {
                let mut off = 0u64;
                while Instant::now() < until {
                    fs.write(&Creds::root(), ino, off, &buf, false).unwrap();
                    off += buf.len() as u64;
                }
                off
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The most a tree at `rate` may admit in `secs` with `leaves` leaves asking with requests
/// of `req` bytes (admission.rs BUCKET bound), plus the requests in flight at the end.
fn most(rate: f64, secs: f64, leaves: usize, req: usize, writers: usize) -> f64 {
    rate * (secs + BURST_SECS) + ((leaves + writers) * req) as f64
}

#[test]
fn one_tree_is_paced_to_its_rate_whatever_the_number_of_writers() {
    let (_d, fs) = fs_with(FsConfig::default());
    let tree = mkdir(&fs, ROOT_INO, "t", Some("4M"));
    for writers in [1usize, 6] {
        let t0 = Instant::now();
        let secs = 2.0;
        let got =
            write_until(&fs, tree, &format!("w{writers}-"), writers, 128 << 10, t0 + Duration::from_secs_f64(secs));
        let took = t0.elapsed().as_secs_f64();
        let total: u64 = got.iter().sum();
        let rate = total as f64 / took;
        eprintln!("{writers} writers into a 4 MB/s tree: {rate:.0} B/s ({got:?})");
        // never faster than the bucket allows: per tree, not per writer
        assert!(
            (total as f64) <= most(4e6, took, 1, 128 << 10, writers),
            "{writers} writers: {total} bytes in {took:.2} s = {rate:.0} B/s into a 4 MB/s tree"
        );
        // and not starved (a 4 MB/s tree is far below what the machine writes)
        assert!(rate > 4e6 * 0.6, "{writers} writers: only {rate:.0} B/s into a 4 MB/s tree");
        // every writer gets a turn: no writer shut out by the others
        assert!(got.iter().all(|&b| b > 0), "{got:?}");
    }
    fs.sync().unwrap();
    let t = fs.qos_trees().unwrap().into_iter().find(|t| t.tree == tree).expect("the tree is known");
    assert_eq!(t.row.target_bps, 4e6);
    assert!(t.row.mean_bps > 0.0 && t.row.mean_bps < 4e6 * 1.2, "{:?}", t.row);
    // with no compression chosen anywhere, the tree's records are compressed at its plan's
    // levels; how many the plan can afford depends on the CPU others leave (short of CPU
    // it stores records raw), so the check is that it compressed some and that those
    // compressed as its levels do, not how much of the input they were
    let compressed: Vec<_> = t.row.levels.iter().filter(|l| l.0.alg != squeezefs_codec::Algorithm::None).collect();
    let (input, stored) = compressed.iter().fold((0u64, 0u64), |(i, s), l| (i + l.1, s + l.2));
    assert!(input > 0, "no record of the tree was compressed: {:?}", t.row.levels);
    assert!(input as f64 / stored as f64 > 1.5, "{:?}", t.row.levels);
}

#[test]
fn nested_trees_guarantee_children_and_never_exceed_the_parent() {
    let (_d, fs) = fs_with(FsConfig::default());
    let parent = mkdir(&fs, ROOT_INO, "p", Some("8M"));
    let child = mkdir(&fs, parent, "c", Some("2M"));
    // no qos of its own: shares the parent's bucket (the parent's self leaf)
    let shared = mkdir(&fs, parent, "s", None);
    let secs = 3.0;
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs_f64(secs);
    let (fs2, fs3) = (fs.clone(), fs.clone());
    let c = std::thread::spawn(move || write_until(&fs2, child, "c", 2, 64 << 10, until));
    let s = std::thread::spawn(move || write_until(&fs3, shared, "s", 3, 64 << 10, until));
    let (c, s): (u64, u64) = (c.join().unwrap().iter().sum(), s.join().unwrap().iter().sum());
    let took = t0.elapsed().as_secs_f64();
    let (rc, rs) = (c as f64 / took, s as f64 / took);
    eprintln!("8 MB/s parent: 2 MB/s child {rc:.0} B/s, shared part {rs:.0} B/s");
    // children together never exceed the parent
    assert!((c + s) as f64 <= most(8e6, took, 2, 64 << 10, 5), "child {rc:.0} + shared {rs:.0} B/s over 8 MB/s");
    // the child gets at least its guarantee, the rest of the parent goes to the shared part
    assert!(rc > 2e6 * 0.7, "child got {rc:.0} B/s of its 2 MB/s guarantee (shared: {rs:.0})");
    assert!(rs > 6e6 * 0.6, "shared part got {rs:.0} B/s of the 6 MB/s the child leaves (child: {rc:.0})");
    // alone, the child borrows the parent's unused rate, up to the parent's rate
    let t0 = Instant::now();
    let alone: u64 = write_until(&fs, child, "alone", 2, 64 << 10, t0 + Duration::from_secs_f64(2.5)).iter().sum();
    let took = t0.elapsed().as_secs_f64();
    let ra = alone as f64 / took;
    eprintln!("the child alone: {ra:.0} B/s");
    assert!(alone as f64 <= most(8e6, took, 2, 64 << 10, 2), "alone: {ra:.0} B/s over the parent's 8 MB/s");
    assert!(ra > 2e6 * 1.5, "alone the child should borrow beyond its 2 MB/s, got {ra:.0} B/s");
}

#[test]
fn the_mount_option_makes_the_whole_filesystem_a_tree_with_subtrees() {
    let (_d, fs) = fs_with(FsConfig { qos: Some(6_000_000), ..FsConfig::default() });
    let plain = mkdir(&fs, ROOT_INO, "plain", None);
    let sub = mkdir(&fs, ROOT_INO, "sub", Some("1M"));
    assert_eq!(fs.qos_tree(plain).unwrap(), ROOT_INO, "inherits the mount's tree");
    assert_eq!(fs.qos_tree(sub).unwrap(), sub);
    let f = create(&fs, sub, "f");
    assert_eq!(fs.qos_tree(f).unwrap(), sub);
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs_f64(2.0);
    let (fs2, fs3) = (fs.clone(), fs.clone());
    let a = std::thread::spawn(move || write_until(&fs2, plain, "a", 2, 64 << 10, until));
    let b = std::thread::spawn(move || write_until(&fs3, sub, "b", 2, 64 << 10, until));
    let (a, b): (u64, u64) = (a.join().unwrap().iter().sum(), b.join().unwrap().iter().sum());
    let took = t0.elapsed().as_secs_f64();
    assert!((a + b) as f64 <= most(6e6, took, 2, 64 << 10, 4), "{a} + {b} bytes in {took:.2} s over 6 MB/s");
    assert!(b as f64 / took > 1e6 * 0.7, "the 1 MB/s subtree got {:.0} B/s", b as f64 / took);
    // qos=none at a remount ends the mount's tree: writes outside `sub` are not paced
    fs.setxattr(&Creds::root(), ROOT_INO, b"trusted.squeezefs.remount", b"qos=none", 0).unwrap();
    assert_eq!(fs.qos_tree(plain).unwrap(), squeezefs_fs::NO_TREE);
    let g = create(&fs, plain, "g");
    let buf = data(1 << 20, 3);
    let t0 = Instant::now();
    for k in 0..16u64 {
        fs.write(&Creds::root(), g, k << 20, &buf, false).unwrap();
    }
    let fast = 16e6 / t0.elapsed().as_secs_f64();
    assert!(fast > 6e6 * 1.5, "16 MB outside any tree took {:?} ({fast:.0} B/s)", t0.elapsed());
    assert!(fs.qos_trees().unwrap().iter().all(|t| t.tree != ROOT_INO), "the mount's tree is gone");
}

#[test]
fn readers_are_never_paced_and_clearing_qos_ends_the_pacing() {
    let (_d, fs) = fs_with(FsConfig::default());
    let tree = mkdir(&fs, ROOT_INO, "slow", Some("500K"));
    let f = create(&fs, tree, "f");
    let buf = data(1 << 20, 9);
    // the first write goes (an empty bucket admits one request), and leaves a 2 s debt
    fs.write(&Creds::root(), f, 0, &buf, false).unwrap();
    // a writer now waits for the debt; a reader of the same file does not
    let fs2 = fs.clone();
    let writer = std::thread::spawn(move || {
        let t0 = Instant::now();
        fs2.write(&Creds::root(), f, 1 << 20, &data(1 << 16, 1), false).unwrap();
        t0.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let mut out = vec![0u8; 1 << 20];
    assert_eq!(fs.read_into(f, 0, &mut out).unwrap(), 1 << 20);
    assert_eq!(out, buf);
    let read = t0.elapsed();
    let waited = writer.join().unwrap();
    assert!(waited > Duration::from_millis(1500), "the writer went after {waited:?} into a 500 KB/s tree");
    assert!(read < waited / 2, "the read took {read:?} (the writer {waited:?})");
    // the property cleared: no pacing from the next write on
    fs.removexattr(&Creds::root(), tree, b"user.squeezefs.qos").unwrap();
    let t0 = Instant::now();
    for k in 0..8u64 {
        fs.write(&Creds::root(), f, (2 + k) << 20, &buf, false).unwrap();
    }
    assert!(t0.elapsed() < Duration::from_secs(4), "8 MB after qos was cleared took {:?}", t0.elapsed());
    assert_eq!(fs.qos_tree(f).unwrap(), squeezefs_fs::NO_TREE);
}

/// Text of words drawn from a vocabulary with repeats at all distances: stronger levels
/// find more of it (not just what an entropy coder gets).
fn prose(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 32] = [
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "pack", "my", "box", "with", "five", "dozen",
        "liquor", "jugs", "sphinx", "of", "black", "quartz", "judge", "vow", "how", "vexingly", "daft", "zebras",
        "jump", "waltz", "nymph", "for", "quick", "jigs",
    ];
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 16);
    let mut line: Vec<u8> = Vec::new();
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(5) && out.len() > 4096 {
            // repeat an earlier stretch: matches far back reward deeper searches
            let back = (x >> 8) as usize % out.len().min(1 << 20);
            let n = 16 + (x >> 40) as usize % 48;
            let start = out.len() - back.max(n);
            let piece: Vec<u8> = out[start..start + n.min(back.max(n))].to_vec();
            out.extend_from_slice(&piece);
        } else {
            line.clear();
            line.extend_from_slice(WORDS[(x >> 3) as usize % 32].as_bytes());
            line.push(if x.is_multiple_of(11) { b'\n' } else { b' ' });
            out.extend_from_slice(&line);
        }
    }
    out.truncate(len);
    out
}

/// The level choice: a slow tree's records get stronger levels than a tree asking for more
/// than the machine compresses, on the same data.
#[test]
fn a_slow_tree_compresses_harder_than_a_fast_one() {
    let (_d, fs) = fs_with(FsConfig::default());
    let slow = mkdir(&fs, ROOT_INO, "slow", Some("3M"));
    let fast = mkdir(&fs, ROOT_INO, "fast", Some("300M"));
    let run = |dir: Ino, name: &str, secs: f64| {
        let f = create(&fs, dir, name);
        let buf = prose(1 << 20, 5);
        let t0 = Instant::now();
        let mut off = 0u64;
        while t0.elapsed().as_secs_f64() < secs {
            fs.write(&Creds::root(), f, off, &buf, false).unwrap();
            off += buf.len() as u64;
        }
        fs.sync().unwrap();
        fs.qos_trees().unwrap().into_iter().find(|t| t.tree == dir).unwrap().row
    };
    let s = run(slow, "s", 4.0);
    let f = run(fast, "f", 2.0);
    eprintln!("slow tree: ratio {:.3} levels {:?}", s.ratio, s.levels);
    eprintln!("fast tree: ratio {:.3} levels {:?}", f.ratio, f.levels);
    assert!(s.ratio > f.ratio * 1.05, "slow {:.3} vs fast {:.3}", s.ratio, f.ratio);
}

/// A fixed compression chosen for a tree (here on the tree itself) is kept: the tree's
/// writes are paced, its records stored with that codec, not the plan's.
#[test]
fn a_fixed_compression_in_a_tree_is_kept_and_paced() {
    let (_d, fs) = fs_with(FsConfig::default());
    let tree = mkdir(&fs, ROOT_INO, "t", Some("4M"));
    fs.setxattr(&Creds::root(), tree, b"user.squeezefs.compression", b"lz4", 0).unwrap();
    let t0 = Instant::now();
    let total: u64 = write_until(&fs, tree, "w", 2, 128 << 10, t0 + Duration::from_secs(2)).iter().sum();
    let took = t0.elapsed().as_secs_f64();
    assert!((total as f64) <= most(4e6, took, 1, 128 << 10, 2), "{total} bytes in {took:.2} s");
    fs.sync().unwrap();
    let t = fs.qos_trees().unwrap().into_iter().find(|t| t.tree == tree).unwrap();
    let lz4: squeezefs_codec::Codec = "lz4".parse().unwrap();
    assert!(t.row.levels.iter().all(|l| l.0 == lz4), "{:?}", t.row.levels);
}
