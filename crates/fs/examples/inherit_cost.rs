//! What property inheritance costs a write, measured in the writing thread's CPU time
//! (CLOCK_THREAD_CPUTIME_ID, so other processes on a shared machine do not count): 128 KiB
//! writes through `Fs::write` into a file in the root and into one 10 directories deep
//! whose every level sets `compression` and `compress-force` (to `none`/`off`, the pool's
//! setting, so both files store alike and only the lookup differs); and the cost of
//! resolving a file's properties with the cache current and right after an invalidation
//! (the walk up the tree a write after a property change makes once).
//!
//!   cargo run --release -p squeezefs-fs --example inherit_cost -- [WORKDIR] [WRITES] [ROUNDS]
//!
//! Prints a table; bench/props-inherit.sh runs it.
use squeezefs_codec::thread_cpu_ns;
use squeezefs_fs::props::Prop;
use squeezefs_fs::{Creds, Fs, FsConfig, Ino, ROOT_INO};
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};

const RECORD: usize = 128 << 10;
/// Writes cycle over this many records of the file (dirty data stays bounded).
const CYCLE: u64 = 128;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tmp;
    let work = match args.get(1) {
        Some(w) => std::path::PathBuf::from(w),
        None => {
            tmp = tempfile::tempdir().expect("temp dir");
            tmp.path().to_path_buf()
        }
    };
    let writes: u64 = args.get(2).map_or(4000, |s| s.parse().expect("WRITES"));
    let rounds: usize = args.get(3).map_or(9, |s| s.parse().expect("ROUNDS"));
    let pool = work.join("inherit-cost-pool");
    let _ = std::fs::remove_dir_all(&pool);
    Engine::mkfs(&pool, &MkfsOptions::default()).expect("mkfs");
    let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).expect("open"), FsConfig::default()).expect("fs");
    let c = Creds::root();
    let set = |ino: Ino, p: Prop, v: &str| fs.setxattr(&c, ino, p.xattr().as_bytes(), v.as_bytes(), 0).expect("set");
    let mut dir = ROOT_INO;
    for i in 1..=10 {
        dir = fs.mkdir(&c, dir, format!("level{i}").as_bytes(), 0o755).expect("mkdir").ino;
        set(dir, Prop::Compression, "none");
        set(dir, Prop::CompressForce, "off");
    }
    let create = |parent: Ino| {
        let (a, fh) = fs.create(&c, parent, b"f", 0o644, libc::O_RDWR).expect("create");
        fs.release(fh).expect("release");
        a.ino
    };
    let (root_f, deep_f) = (create(ROOT_INO), create(dir));
    let data: Vec<u8> = (0..RECORD).map(|i| (i * 7 % 251) as u8).collect();
    let write_ns = |ino: Ino| {
        let t0 = thread_cpu_ns();
        for i in 0..writes {
            // as the kernel's writeback cache sends them (it keeps mtime itself)
            fs.write(&c, ino, (i % CYCLE) * RECORD as u64, &data, true).expect("write");
        }
        (thread_cpu_ns() - t0) as f64 / writes as f64
    };
    // warm both files (records exist, caches filled)
    write_ns(root_f);
    write_ns(deep_f);
    let (mut root_w, mut deep_w) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        // alternate which goes first
        if r % 2 == 0 {
            root_w.push(write_ns(root_f));
            deep_w.push(write_ns(deep_f));
        } else {
            deep_w.push(write_ns(deep_f));
            root_w.push(write_ns(root_f));
        }
    }
    let resolve_ns = |ino: Ino, invalidate: bool| {
        let n = 20_000u64;
        let t0 = thread_cpu_ns();
        for _ in 0..n {
            if invalidate {
                fs.invalidate_inheritance();
            }
            std::hint::black_box(fs.effective(ino).expect("resolve"));
        }
        (thread_cpu_ns() - t0) as f64 / n as f64
    };
    let mut res = Vec::new();
    for (ino, inv) in [(root_f, false), (deep_f, false), (root_f, true), (deep_f, true)] {
        let mut v: Vec<f64> = (0..rounds).map(|_| resolve_ns(ino, inv)).collect();
        res.push(median(&mut v));
    }
    let (rw, dw) = (median(&mut root_w), median(&mut deep_w));
    println!("writer-thread CPU per 128 KiB write ({writes} writes x {rounds} rounds, median of rounds):");
    println!("  {:<28} {:>10}", "file in the root", format!("{:.2} us", rw / 1e3));
    println!("  {:<28} {:>10}", "file 10 levels deep", format!("{:.2} us", dw / 1e3));
    println!("  {:<28} {:>10}", "deep / root", format!("{:.4}", dw / rw));
    println!("resolving a file's properties (median of {rounds} x 20000):");
    println!("  {:<28} {:>12} {:>12}", "", "root file", "10-deep file");
    println!("  {:<28} {:>9.0} ns {:>9.0} ns", "cache current (every write)", res[0], res[1]);
    println!("  {:<28} {:>9.0} ns {:>9.0} ns", "after an invalidation (walk)", res[2], res[3]);
    fs.shutdown().expect("shutdown");
    let _ = std::fs::remove_dir_all(&pool);
}
