//! `squeezefs stats PATH [--json]`: compsize-like usage of a file, a tree or a mount.
//!
//! The daemon answers the virtual xattr `user.squeezefs.usage` on every file with its
//! rows (algorithm, level, disk, uncompressed, referenced) from its extents, which record
//! the codec each record was stored with; this command walks the tree (staying on PATH's
//! filesystem, counting hard-linked files once), sums per level and prints the totals, each
//! level with its share of the uncompressed data. Under `compress=auto` these rows are the
//! levels auto chose for the file or tree and how much data each got. For a directory it
//! then shows the directory's effective properties (what new files below it get;
//! `squeezefs prop get`).
//!
//! Background compression: the daemon answers over its control socket (crates/ctlsock)
//! with its state, totals converted, and the records below PATH it has still to convert
//! (pending); shown last, or `not known` with the reason when the socket cannot be reached.
//!
//! QoS trees: every directory under PATH holding `qos` (and the mount's root under a
//! `qos=` mount) answers `user.squeezefs.qos-stats` with its line (control::qos::stats
//! TEXT); the command lists them: target, allotment, achieved throughput over the last
//! 10 s and since the tree was first seen, ratio of its records and the levels chosen.
use crate::xattr_io::get_xattr;
use anyhow::{bail, Context, Result};
use squeezefs_codec::{Algorithm, Codec};
use squeezefs_ctlsock::proto::{self, Op};
use squeezefs_ctlsock::{Client, Reply};
use squeezefs_fs::{usage, xattr_names, QosStatsRow};
use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// File or directory on a squeezefs mount
    pub path: PathBuf,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

/// The `key=value` lines a squeezefs daemon reports on its root directory.
pub fn mount_info(root: &Path) -> Result<String> {
    let v = get_xattr(root, xattr_names::MOUNT)
        .with_context(|| format!("reading {} on {}", xattr_names::MOUNT, root.display()))?;
    Ok(String::from_utf8_lossy(&v).into_owned())
}

#[derive(Default, Clone, Copy)]
struct Sums {
    disk: u64,
    uncompressed: u64,
    referenced: u64,
}

impl Sums {
    fn add(&mut self, r: &usage::Row) {
        self.disk += r.disk_bytes;
        self.uncompressed += r.uncompressed_bytes;
        self.referenced += r.referenced_bytes;
    }
    fn percent(&self) -> u64 {
        (self.disk * 100).checked_div(self.uncompressed).unwrap_or(0)
    }
}

#[derive(Default)]
struct Walk {
    files: u64,
    rows: BTreeMap<(u8, i32), Sums>,
    seen: HashSet<(u64, u64)>,
    /// QoS trees met, in walk order
    trees: Vec<(PathBuf, QosStatsRow)>,
}

impl Walk {
    fn visit(&mut self, path: &Path, dev: u64) -> Result<()> {
        let m = std::fs::symlink_metadata(path).with_context(|| format!("stat {}", path.display()))?;
        if m.dev() != dev || m.file_type().is_symlink() {
            return Ok(());
        }
        if m.is_file() {
            if m.nlink() > 1 && !self.seen.insert((m.dev(), m.ino())) {
                return Ok(());
            }
            let raw = get_xattr(path, usage::XATTR_USAGE).map_err(|e| {
                if matches!(e.raw_os_error(), Some(libc::ENODATA) | Some(libc::EOPNOTSUPP)) {
                    anyhow::anyhow!("{} is not on a squeezefs mount (no usage attribute)", path.display())
                } else {
                    anyhow::anyhow!("reading usage of {}: {e}", path.display())
                }
            })?;
            for r in usage::decode(&raw).with_context(|| format!("usage of {}", path.display()))? {
                self.rows.entry((r.alg.id(), r.level)).or_default().add(&r);
            }
            self.files += 1;
        } else if m.is_dir() {
            match get_xattr(path, xattr_names::QOS_STATS) {
                Ok(v) => {
                    let line = String::from_utf8_lossy(&v);
                    let row =
                        QosStatsRow::parse(line.trim()).with_context(|| format!("qos stats of {}", path.display()))?;
                    self.trees.push((path.to_path_buf(), row));
                }
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err(e).with_context(|| format!("qos stats of {}", path.display())),
            }
            let entries = std::fs::read_dir(path).with_context(|| format!("listing {}", path.display()))?;
            for e in entries {
                let e = e.with_context(|| format!("listing {}", path.display()))?;
                self.visit(&e.path(), dev)?;
            }
        }
        Ok(())
    }
}

/// The level as a compression spec (`lz4:fast=32`, `zstd:-5`, `none`).
fn level_name(id: u8, level: i32) -> String {
    match Algorithm::from_id(id) {
        Some(Algorithm::None) => "none".into(),
        Some(alg) => Codec { alg, level }.to_string(),
        None => format!("alg{id}:{level}"),
    }
}

/// `part` of `whole` in percent, one decimal.
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 1000.0 / whole as f64).round() / 10.0
    }
}

pub(crate) fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}B")
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

pub fn run(args: StatsArgs) -> Result<()> {
    let path = std::fs::canonicalize(&args.path).with_context(|| format!("{}", args.path.display()))?;
    let dev = std::fs::metadata(&path)?.dev();
    let root = crate::on_mount::mount_root(&path);
    let info = mount_info(&root).map_err(|_| anyhow::anyhow!("{} is not on a squeezefs mount", path.display()))?;
    let compression = info
        .lines()
        .find(|l| l.starts_with("compress=") || l.starts_with("compress-force="))
        .unwrap_or("compress=default")
        .to_string();
    // "everything written so far": first the kernel hands over the pages its writeback
    // cache still holds (of files other processes keep open: a close would flush them, a
    // running writer's stay in the kernel; syncfs writes them back to the daemon), then
    // reading the root's usage commits the daemon's dirty data
    let dir = std::fs::File::open(&root).with_context(|| format!("opening {}", root.display()))?;
    // SAFETY: syncfs only reads the descriptor, which `dir` keeps open
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("syncing {}", root.display()));
    }
    // syncfs on a FUSE mount neither waits for the writeback it starts nor reaches the
    // daemon (the kernel sends FUSE_SYNCFS only to virtiofs), so a file's pages may still be
    // in flight; fsync waits for every WRITE of the inode to be answered. A tree keeps the
    // syncfs alone: an fsync per file would cost a round trip and a commit each.
    if path.is_file() {
        if let Ok(f) = std::fs::File::open(&path) {
            f.sync_all().with_context(|| format!("syncing {}", path.display()))?;
        }
    }
    get_xattr(&root, usage::XATTR_USAGE).with_context(|| format!("syncing {}", root.display()))?;
    let mut w = Walk::default();
    w.visit(&path, dev)?;
    let properties = if path.is_dir() { Some(directory_properties(&path)?) } else { None };
    let background = background(&path);
    let mut total = Sums::default();
    for s in w.rows.values() {
        total.disk += s.disk;
        total.uncompressed += s.uncompressed;
        total.referenced += s.referenced;
    }
    if args.json {
        let rows: Vec<serde_json::Value> = w
            .rows
            .iter()
            .map(|((id, level), s)| {
                serde_json::json!({
                    "algorithm": Algorithm::from_id(*id).map_or("unknown", |a| a.name()),
                    "level": level,
                    "spec": level_name(*id, *level),
                    "share_percent": share(s.uncompressed, total.uncompressed),
                    "disk_bytes": s.disk,
                    "uncompressed_bytes": s.uncompressed,
                    "referenced_bytes": s.referenced,
                })
            })
            .collect();
        let mut out = serde_json::json!({
            "path": path.display().to_string(),
            "mount": root.display().to_string(),
            "mount_compression": compression,
            "files": w.files,
            "total": {
                "disk_bytes": total.disk,
                "uncompressed_bytes": total.uncompressed,
                "referenced_bytes": total.referenced,
            },
            "rows": rows,
        });
        if let Some(p) = &properties {
            out["properties"] = serde_json::json!(p.iter().map(crate::cmd_prop::Row::json).collect::<Vec<_>>());
        }
        out["qos_trees"] = serde_json::json!(w.trees.iter().map(|(p, r)| tree_json(p, r)).collect::<Vec<_>>());
        match &background {
            Ok((status, pending)) => {
                out["background"] = serde_json::json!({ "status": status, "pending": pending });
            }
            Err(e) => {
                out["background"] = serde_json::Value::Null;
                out["background_error"] = serde_json::json!(format!("{e:#}"));
            }
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    if w.files == 0 && !path.is_dir() {
        bail!("{} is not a regular file or directory", path.display());
    }
    println!("Mount {} ({compression})", root.display());
    println!("Processed {} files.", w.files);
    println!(
        "{:<14} {:>5} {:>12} {:>12} {:>12} {:>7}",
        "Type", "Perc", "Disk Usage", "Uncompressed", "Referenced", "Share"
    );
    let line = |name: &str, s: &Sums| {
        println!(
            "{:<14} {:>4}% {:>12} {:>12} {:>12} {:>6.1}%",
            name,
            s.percent(),
            human(s.disk),
            human(s.uncompressed),
            human(s.referenced),
            share(s.uncompressed, total.uncompressed)
        )
    };
    line("TOTAL", &total);
    for ((id, level), s) in &w.rows {
        line(&level_name(*id, *level), s);
    }
    if !w.trees.is_empty() {
        println!("QoS trees (MB/s; achieved over the last 10 s and since the tree was first seen):");
        println!("  {:<30} {:>8} {:>8} {:>8} {:>8} {:>6}  levels", "Tree", "Target", "Allot", "Last", "Mean", "Ratio");
        for (p, r) in &w.trees {
            println!(
                "  {:<30} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6.2}  {}",
                p.display(),
                r.target_bps / 1e6,
                r.allotted_bps / 1e6,
                r.last_bps / 1e6,
                r.mean_bps / 1e6,
                r.ratio,
                levels_text(r)
            );
        }
    }
    match &background {
        Ok((st, pending)) => print_background(st, pending),
        Err(e) => println!("Background compression: not known ({e:#})"),
    }
    if let Some(props) = properties {
        println!("Properties of {}:", path.display());
        for r in &props {
            println!("  {:<22} {:<12} {}", r.prop.name(), r.value, r.source_text());
        }
    }
    Ok(())
}

/// Background compression's state and what it has still to convert below `path`, from the
/// daemon over its control socket.
fn background(path: &Path) -> Result<(proto::Background, proto::Pending)> {
    let at = crate::on_mount::locate(path)?;
    let reply = Client::connect(&at.pool)?
        .call(Op::Background { path: proto::WirePath::from_bytes(&at.rel) }, &mut |_| true)?;
    match reply {
        Reply::Background { status, pending } => Ok((status, pending)),
        other => bail!("unexpected answer: {other:?}"),
    }
}

fn print_background(st: &proto::Background, p: &proto::Pending) {
    let idle = st.idle_after_secs.map_or("off".to_string(), |s| format!("after {s} s idle"));
    println!("Background compression: {} ({idle}; {} passes done)", st.state, st.passes);
    println!(
        "  pending here: {} records, {} ({} stored) in {} of {} files with a background codec",
        p.records,
        human(p.logical_bytes),
        human(p.stored_bytes),
        p.files_pending,
        p.files_with_spec
    );
    println!(
        "  converted (pool): {} records, {} of data, stored {} -> {}; this mount: {} records, {}",
        st.converted_records,
        human(st.converted_logical),
        human(st.converted_before),
        human(st.converted_after),
        st.session_records,
        human(st.session_logical)
    );
    if let Some(e) = &st.last_error {
        println!("  last error: {e}");
    }
}

/// Effective properties of a directory, inherited values named by their directory.
fn directory_properties(dir: &Path) -> Result<Vec<crate::cmd_prop::Row>> {
    crate::cmd_prop::effective_rows(dir, &[], &crate::cmd_prop::ancestors(dir))
}

/// A tree's levels by share of its input, most used first: `zstd:9 71%, zstd:8 29%`.
fn levels_text(r: &QosStatsRow) -> String {
    let total: u64 = r.levels.iter().map(|l| l.1).sum();
    if total == 0 {
        return "-".into();
    }
    r.levels
        .iter()
        .map(|(c, i, _)| format!("{c} {:.0}%", *i as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

fn tree_json(path: &Path, r: &QosStatsRow) -> serde_json::Value {
    serde_json::json!({
        "path": path.display().to_string(),
        "tree": r.tree,
        "target_bps": r.target_bps,
        "allotted_bps": r.allotted_bps,
        "last_bps": r.last_bps,
        "mean_bps": r.mean_bps,
        "ratio": r.ratio,
        "levels": r.levels.iter().map(|(c, i, s)| serde_json::json!({
            "codec": c.to_string(), "input_bytes": i, "stored_bytes": s,
        })).collect::<Vec<_>>(),
    })
}
