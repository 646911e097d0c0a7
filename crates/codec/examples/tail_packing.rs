//! What compressing small files and file tails together would save on a directory tree:
//! every regular file is cut into records; whole records are compressed one by one (as the
//! pool does today); the last, short record of each file (the whole file when it is smaller
//! than a record) is compressed (a) alone, as today, and (b) appended to a shared buffer of
//! `--shared` bytes that is compressed as one unit whenever the next tail would not fit,
//! in the order `mkfs --rootdir` writes files (depth first, names sorted). Tails longer than
//! `--pack-max` stay alone in both cases.
//!
//! `cargo run --release -p squeezefs-codec --example tail_packing -- DIR [--level 3]
//!  [--record 131072] [--shared 131072] [--pack-max 131072] [--max-inline 2048]`
use squeezefs_codec::{compress_bound, Algorithm, Codec, WorkspaceConfig, Workspaces};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

struct Args {
    dir: PathBuf,
    level: i32,
    record: usize,
    shared: usize,
    pack_max: usize,
    max_inline: usize,
}

fn args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        dir: PathBuf::new(),
        level: 3,
        record: 128 << 10,
        shared: 128 << 10,
        pack_max: 128 << 10,
        max_inline: 2048,
    };
    while let Some(x) = it.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            it.next().and_then(|v| v.parse().ok()).ok_or(format!("{name} needs a number"))
        };
        match x.as_str() {
            "--level" => a.level = num("--level")? as i32,
            "--record" => a.record = num("--record")?,
            "--shared" => a.shared = num("--shared")?,
            "--pack-max" => a.pack_max = num("--pack-max")?,
            "--max-inline" => a.max_inline = num("--max-inline")?,
            d if !d.starts_with('-') => a.dir = PathBuf::from(d),
            o => return Err(format!("unknown option {o}")),
        }
    }
    if a.dir.as_os_str().is_empty() {
        return Err(
            "usage: tail_packing DIR [--level N] [--record B] [--shared B] [--pack-max B] [--max-inline B]".into()
        );
    }
    Ok(a)
}

/// Regular files in `mkfs --rootdir` order: a directory's entries by name, then its
/// subdirectories in name order, depth first; one path per hard-linked inode.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort_unstable();
        let mut subdirs = Vec::new();
        for n in names {
            let p = dir.join(n);
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                subdirs.push(p);
            } else if m.is_file() && seen.insert((m.dev(), m.ino())) {
                out.push(p);
            }
        }
        todo.extend(subdirs.into_iter().rev());
    }
    out
}

#[derive(Default)]
struct Sum {
    count: u64,
    logical: u64,
    stored: u64,
}

impl Sum {
    fn add(&mut self, logical: usize, stored: usize) {
        self.count += 1;
        self.logical += logical as u64;
        self.stored += stored as u64;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let codec = Codec { alg: Algorithm::Zstd, level: a.level };
    let ws = Workspaces::new(WorkspaceConfig { block_size: a.record.max(a.shared), ..WorkspaceConfig::default() });
    let mut dst = vec![0u8; compress_bound(codec, a.record.max(a.shared))];
    // stored size of one compressed unit: the codec's output, or the raw bytes if that is
    // not smaller (the pool keeps output only when it saves)
    let mut stored = |src: &[u8]| -> usize {
        match ws.compress(codec, src, &mut dst) {
            Ok(n) if n < src.len() => n,
            _ => src.len(),
        }
    };
    let list = files(&a.dir);
    let (mut full, mut inline, mut alone_dev, mut big_tails) =
        (Sum::default(), Sum::default(), Sum::default(), Sum::default());
    let mut packed = Sum::default();
    let mut shared_units = 0u64;
    let mut buf: Vec<u8> = Vec::with_capacity(a.shared);
    let (mut t_alone, mut t_packed) = (0f64, 0f64);
    let mut small_files = 0u64;
    for p in &list {
        let data = std::fs::read(p)?;
        let whole = data.len() / a.record * a.record;
        for rec in data[..whole].chunks(a.record) {
            full.add(rec.len(), stored(rec));
        }
        let tail = &data[whole..];
        if tail.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        let alone = stored(tail);
        t_alone += t0.elapsed().as_secs_f64();
        let single = whole == 0;
        if single {
            small_files += 1;
        }
        if tail.len() > a.pack_max {
            big_tails.add(tail.len(), alone);
            continue;
        }
        if single && alone <= a.max_inline {
            inline.add(tail.len(), alone);
        } else {
            alone_dev.add(tail.len(), alone);
        }
        if buf.len() + tail.len() > a.shared {
            let t0 = Instant::now();
            packed.add(buf.len(), stored(&buf));
            t_packed += t0.elapsed().as_secs_f64();
            shared_units += 1;
            buf.clear();
        }
        buf.extend_from_slice(tail);
    }
    if !buf.is_empty() {
        packed.add(buf.len(), stored(&buf));
        shared_units += 1;
    }
    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "{} files ({} smaller than a record); zstd:{}, record {} B, shared unit {} B, tails up to {} B packed, inline up to {} B",
        list.len(),
        small_files,
        a.level,
        a.record,
        a.shared,
        a.pack_max,
        a.max_inline
    );
    println!("whole records: {} ({:.1} MB -> {:.1} MB)", full.count, mb(full.logical), mb(full.stored));
    println!(
        "tails too long to pack: {} ({:.1} MB -> {:.1} MB)",
        big_tails.count,
        mb(big_tails.logical),
        mb(big_tails.stored)
    );
    let tails = inline.logical + alone_dev.logical;
    println!(
        "packable tails: {} ({:.1} MB): alone {:.1} MB ({} inline, {:.1} MB; {} on the device, {:.1} MB), {:.2} s of zstd",
        inline.count + alone_dev.count,
        mb(tails),
        mb(inline.stored + alone_dev.stored),
        inline.count,
        mb(inline.stored),
        alone_dev.count,
        mb(alone_dev.stored),
        t_alone
    );
    println!(
        "packed: {} shared units, {:.1} MB ({:.1}% of alone), {:.2} s of zstd",
        shared_units,
        mb(packed.stored),
        100.0 * packed.stored as f64 / (inline.stored + alone_dev.stored).max(1) as f64,
        t_packed
    );
    println!(
        "data total: today {:.1} MB, packed {:.1} MB",
        mb(full.stored + big_tails.stored + inline.stored + alone_dev.stored),
        mb(full.stored + big_tails.stored + packed.stored)
    );
    Ok(())
}
