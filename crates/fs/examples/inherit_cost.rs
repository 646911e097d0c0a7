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
    let create = |parent: Ino, name: &[u8]| {
        let (a, fh) = fs.create(&c, parent, name, 0o644, libc::O_RDWR).expect("create");
        fs.release(fh).expect("release");
        a.ino
    };
    // one file per target, written alike
    let (root_f, deep_f, deep_g) = (create(ROOT_INO, b"f"), create(dir, b"f"), create(dir, b"g"));
    let data: Vec<u8> = (0..RECORD).map(|i| (i * 7 % 251) as u8).collect();
    // one chunk of writes; `walk`: every write after an invalidation (what a write would
    // cost if it walked the tree each time)
    let chunk = |ino: Ino, n: u64, at: &mut u64, walk: bool| {
        let t0 = thread_cpu_ns();
        for _ in 0..n {
            if walk {
                fs.invalidate_inheritance();
            }
            // as the kernel's writeback cache sends them (it keeps mtime itself)
            fs.write(&c, ino, (*at % CYCLE) * RECORD as u64, &data, true).expect("write");
            *at += 1;
        }
        thread_cpu_ns() - t0
    };
    let targets = [(root_f, false), (deep_f, false), (deep_g, true)];
    let mut at = [0u64; 3];
    // warm both files (records exist, caches filled)
    for (i, &(ino, walk)) in targets.iter().enumerate() {
        chunk(ino, CYCLE, &mut at[i], walk);
    }
    // chunks of CHUNK writes, the targets taking turns in a rotating order, so load drift
    // and the background txg work fall on all of them alike
    const CHUNK: u64 = 50;
    let mut per_round: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for r in 0..rounds {
        let mut ns = [0u64; 3];
        for k in 0..writes.div_ceil(CHUNK) {
            for j in 0..3 {
                let i = (j + k as usize + r) % 3;
                ns[i] += chunk(targets[i].0, CHUNK, &mut at[i], targets[i].1);
            }
        }
        for i in 0..3 {
            per_round[i].push(ns[i] as f64 / (writes.div_ceil(CHUNK) * CHUNK) as f64);
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
    let [rw, dw, ww] = [0, 1, 2].map(|i| median(&mut per_round[i]));
    println!("writer-thread CPU per 128 KiB write ({writes} writes per target x {rounds} rounds, median of rounds):");
    println!("  {:<36} {:>9.2} us", "file in the root", rw / 1e3);
    println!("  {:<36} {:>9.2} us  ({:.4} x root)", "file 10 levels deep", dw / 1e3, dw / rw);
    println!("  {:<36} {:>9.2} us  ({:.4} x root)", "10 deep, walking up at every write", ww / 1e3, ww / rw);
    println!("resolving a file's properties (median of {rounds} x 20000):");
    println!("  {:<28} {:>12} {:>12}", "", "root file", "10-deep file");
    println!("  {:<28} {:>9.0} ns {:>9.0} ns", "cache current (every write)", res[0], res[1]);
    println!("  {:<28} {:>9.0} ns {:>9.0} ns", "after an invalidation (walk)", res[2], res[3]);
    fs.shutdown().expect("shutdown");
    let _ = std::fs::remove_dir_all(&pool);
}
