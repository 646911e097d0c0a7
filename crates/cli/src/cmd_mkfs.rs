//! `squeezefs mkfs POOL [--device PATH]… [--sector 512|4096] [--recordsize SIZE]
//! [--bundle-size SIZE] [--force] [--rootdir DIR [--compress SPEC] [--jobs N] [--strict]
//! [--owner keep|me] [--no-seal]]`
use crate::rootdir::{self, CopyOptions, Owner};
use anyhow::{bail, Context, Result};
use squeezefs_codec::Spec;
use squeezefs_fs::{Compression, Fs, FsConfig};
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Compression of `--rootdir` without `--compress`.
const ROOTDIR_DEFAULT_SPEC: &str = "zstd:3";

#[derive(clap::Args, Debug)]
pub struct MkfsArgs {
    /// Pool directory (holds the metadata store and, without --device, the data file)
    pub pool: PathBuf,
    /// A device file, block device or object store prefix (s3://BUCKET/PREFIX; endpoint and
    /// credentials from the AWS_* environment or ~/.aws) for data (repeat for several);
    /// default: one growable file inside the pool directory
    #[arg(long = "device", value_name = "PATH")]
    pub devices: Vec<PathBuf>,
    /// Allocation unit in bytes (default: 4096 with block devices, 512 with files)
    #[arg(long, value_parser = ["512", "4096"])]
    pub sector: Option<String>,
    /// Record size: a power of two from 4K to 1M, e.g. 128K (default 128K)
    #[arg(long, value_parser = parse_size)]
    pub recordsize: Option<u32>,
    /// Largest bundle (small files and tails compressed together): a power of two from the
    /// record size to 4M (default twice the record size; equal to it, the pool stays
    /// readable by builds without bundle sizes)
    #[arg(long, value_parser = parse_size)]
    pub bundle_size: Option<u32>,
    /// Largest compressed size of a small file stored inline in the metadata (default 2K)
    #[arg(long, value_parser = parse_size)]
    pub max_inline: Option<u32>,
    /// Copies of the metadata store, each 4 KiB block checksummed: 2 (default) repairs a
    /// damaged block from the other copy, 1 only detects it. Both copies live in the pool
    /// directory
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=2))]
    pub meta_copies: Option<u8>,
    /// Overwrite an existing pool or non-empty devices
    #[arg(long)]
    pub force: bool,
    /// Fill the new pool with a copy of this directory tree (no mount, no root needed)
    #[arg(long, value_name = "DIR")]
    pub rootdir: Option<PathBuf>,
    /// Compression of the copied data: a spec such as zstd:3, zstd:15, lz4, auto (default zstd:3)
    #[arg(long, value_name = "SPEC", requires = "rootdir")]
    pub compress: Option<String>,
    /// Files copied in parallel, and compression workers (default: one per core)
    #[arg(long, value_name = "N", requires = "rootdir")]
    pub jobs: Option<usize>,
    /// Stop at the first entry that cannot be copied (default: report it and go on)
    #[arg(long, requires = "rootdir")]
    pub strict: bool,
    /// Owner of the copied entries: the source's (keep; default when run as root) or the
    /// invoking user's (me; default otherwise)
    #[arg(long, value_enum, requires = "rootdir")]
    pub owner: Option<OwnerArg>,
    /// No progress bar
    #[arg(long, short, requires = "rootdir")]
    pub quiet: bool,
    /// Keep the metadata store as meta.redb (default with --rootdir: seal it into meta.seal,
    /// several times smaller; a read-write mount unseals it)
    #[arg(long, requires = "rootdir")]
    pub no_seal: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerArg {
    Keep,
    Me,
}

/// "131072", "128K", "128KiB", "1M" → bytes (binary multiples).
pub fn parse_size(s: &str) -> std::result::Result<u32, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (accepted: a number with an optional K or M suffix, e.g. 128K)"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (accepted: K, M)")),
    };
    n.checked_mul(mult).and_then(|v| u32::try_from(v).ok()).ok_or_else(|| format!("{s:?} is too large"))
}

pub fn run(a: MkfsArgs) -> Result<()> {
    // everything about --rootdir is checked before the pool is created
    let rootdir = match &a.rootdir {
        Some(dir) => Some(RootdirPlan::check(dir, &a)?),
        None => None,
    };
    let opts = MkfsOptions {
        devices: a.devices.clone(),
        sector: a.sector.as_deref().map(|s| s.parse().expect("clap allows 512 or 4096 only")),
        recordsize: a.recordsize,
        bundle_size: a.bundle_size,
        force: a.force,
        max_inline: a.max_inline,
        device_capacity: None,
        object: Default::default(),
        meta_copies: a.meta_copies,
    };
    Engine::mkfs(&a.pool, &opts).with_context(|| format!("mkfs {}", a.pool.display()))?;
    if let Some(plan) = rootdir {
        return plan.run(&a);
    }
    let e = Engine::open(&a.pool, &Default::default()).context("opening the new pool")?;
    let info = e.info();
    e.close()?;
    println!(
        "created pool {}: {} device(s), sector {} B, record size {} KiB, bundles up to {} KiB, inline up to {} B",
        a.pool.display(),
        info.devices,
        info.sector,
        info.recordsize / 1024,
        info.bundle_size / 1024,
        info.max_inline
    );
    Ok(())
}

/// A checked `--rootdir` request.
struct RootdirPlan {
    dir: PathBuf,
    spec: Spec,
    jobs: usize,
    owner: Owner,
}

impl RootdirPlan {
    fn check(dir: &Path, a: &MkfsArgs) -> Result<RootdirPlan> {
        let flag = format!("--rootdir {}", dir.display());
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!("{flag}: not a directory"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("{flag}: no such directory"),
            Err(e) => bail!("{flag}: {e}"),
        }
        std::fs::read_dir(dir).with_context(|| format!("{flag}: cannot list it"))?;
        // a symlink given as DIR is followed (its target's tree is copied, as mksquashfs does)
        let dir = &std::fs::canonicalize(dir).with_context(|| format!("{flag}: cannot resolve the path"))?;
        let text = a.compress.as_deref().unwrap_or(ROOTDIR_DEFAULT_SPEC);
        let spec: Spec = text.parse().with_context(|| format!("--compress {text}"))?;
        let jobs = match a.jobs {
            Some(0) => bail!("--jobs 0: the number of parallel copies must be at least 1"),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        // SAFETY: plain queries of the caller's own ids
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let owner = match a.owner {
            Some(OwnerArg::Keep) => Owner::Keep,
            Some(OwnerArg::Me) => Owner::Fixed { uid: euid, gid: egid },
            None if euid == 0 => Owner::Keep,
            None => Owner::Fixed { uid: euid, gid: egid },
        };
        Ok(RootdirPlan { dir: dir.to_path_buf(), spec, jobs, owner })
    }

    fn run(self, a: &MkfsArgs) -> Result<()> {
        // the engine's warnings (a device error, a codec failure) reach stderr
        let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).try_init();
        let t0 = std::time::Instant::now();
        // a tree written once: small files and tails are stored compressed together
        let oopts = OpenOptions {
            compression: self.spec,
            workers: self.jobs,
            bundle_small_records: true,
            ..OpenOptions::default()
        };
        let engine = Engine::open(&a.pool, &oopts).context("opening the new pool")?;
        let cfg = FsConfig {
            check_permissions: false,
            compression: Some(Compression { spec: self.spec, force: false }),
            noatime: true,
            ..FsConfig::default()
        };
        let fs = Fs::new(engine.clone(), cfg).context("starting the filesystem core")?;
        // the pool's own files, when they lie inside the tree being copied
        let mut skip = vec![];
        for p in std::iter::once(&a.pool).chain(a.devices.iter()) {
            if let Ok(m) = std::fs::metadata(p) {
                skip.push((m.dev(), m.ino()));
            }
        }
        let copy = CopyOptions { jobs: self.jobs, strict: a.strict, owner: self.owner, skip, progress: !a.quiet };
        let summary = rootdir::copy_tree(&fs, &self.dir, &copy);
        // COMMIT: also after a --strict stop, so the pool is consistent either way
        fs.sync().context("committing the copy")?;
        let data_bytes: u64 = engine.device_stats().iter().map(|d| d.used_bytes).sum();
        let info = engine.info();
        fs.shutdown().context("closing the pool")?;
        drop((fs, engine));
        log::info!("rootdir: pool closed after {:.2} s", t0.elapsed().as_secs_f64());
        // the copy committed many txgs, each leaving the pages it replaced free in the store,
        // and rows inserted in key order leave half-full leaves: a store kept as it is gets
        // rewritten; a sealed one needs no rewrite, since the seal holds rows, not pages, and
        // unsealing builds the store in key order
        let meta_file = if a.no_seal {
            let (before, after) = Engine::compact_meta(&a.pool).context("compacting the metadata store")?;
            log::info!(
                "rootdir: metadata store compacted from {before} to {after} bytes after {:.2} s",
                t0.elapsed().as_secs_f64()
            );
            squeezefs_pipeline::COPY_FILES[0]
        } else {
            let r = Engine::seal(&a.pool, squeezefs_pipeline::seal_level_for(self.spec))
                .context("sealing the metadata store")?;
            if let Some(r) = r {
                log::info!(
                    "rootdir: metadata store sealed from {} to {} bytes in {:.2} s",
                    r.store_bytes,
                    r.seal_bytes,
                    r.secs
                );
            }
            squeezefs_pipeline::SEAL_FILE
        };
        let mut meta_bytes = disk_bytes(&a.pool.join(meta_file));
        if a.no_seal {
            meta_bytes += disk_bytes(&a.pool.join(squeezefs_pipeline::COPY_FILES[1]));
        }
        let pool_bytes = if a.devices.is_empty() { disk_bytes_tree(&a.pool) } else { data_bytes + meta_bytes };
        if let Some(first) = &summary.stopped_by {
            bail!(
                "--strict: stopped at {first}; {} holds the {} entries copied before",
                a.pool.display(),
                summary.files + summary.dirs + summary.symlinks + summary.specials + summary.hardlinks
            );
        }
        println!(
            "created pool {} from {}: {} files, {} directories, {} symlinks, {} hard links, {} special files{}",
            a.pool.display(),
            self.dir.display(),
            summary.files,
            summary.dirs,
            summary.symlinks,
            summary.hardlinks,
            summary.specials,
            match summary.errors {
                0 => String::new(),
                n => format!("; {n} reported above"),
            }
        );
        // the whole run, the last commit included
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "{} in, {} on disk (data {}, metadata {}), ratio {:.2}; {} in {:.1} s ({}/s); record size {} KiB, bundles up to {} KiB",
            human(summary.bytes_in),
            human(pool_bytes),
            human(data_bytes),
            human(meta_bytes),
            summary.bytes_in as f64 / pool_bytes.max(1) as f64,
            self.spec,
            secs,
            human((summary.bytes_in as f64 / secs.max(1e-3)) as u64),
            info.recordsize / 1024,
            info.bundle_size / 1024,
        );
        Ok(())
    }
}

/// Bytes a file occupies on its filesystem (`du -B1`).
fn disk_bytes(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).map_or(0, |m| m.blocks() * 512)
}

/// Bytes the files of a directory occupy (`du -B1 -s`, one level: a pool has no subdirectories).
fn disk_bytes_tree(p: &Path) -> u64 {
    std::fs::read_dir(p).map_or(0, |rd| rd.flatten().map(|e| disk_bytes(&e.path())).sum())
}

/// Bytes in binary units with one decimal.
fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("131072"), Ok(131072));
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("128KiB"), Ok(131072));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert!(parse_size("12Q").unwrap_err().contains("unknown unit"));
        assert!(parse_size("K").is_err());
        assert!(parse_size("9999999M").unwrap_err().contains("too large"));
    }
}
