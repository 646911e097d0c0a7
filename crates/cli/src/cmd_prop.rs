//! `squeezefs prop set|get|inherit|list`: properties of files and directories on a mounted
//! squeezefs, through the mount's extended attributes (the daemon validates and stores
//! them; docs/design.md §10, crates/fs props.rs):
//! * `set PATH NAME=VALUE…`: every value is checked here first with the daemon's parser
//!   (nothing is set if one is bad), then written as `user.squeezefs.NAME`;
//! * `get [-r] PATH [NAME…]`: effective values with their source, `zfs get` style, read
//!   from the virtual attribute `user.squeezefs.effective`; an "inherited" source names the
//!   ancestor directory (found among PATH's ancestors by inode number);
//! * `inherit [-r] PATH NAME…`: drop local values (`-r`: everywhere below PATH too);
//! * `list [-r] PATH`: the values set on PATH itself (`-r`: on everything below it).
//!
//! Symbolic links are never followed and never carry properties; `-r` stays on PATH's
//! filesystem.
use crate::xattr_io::{get_xattr, set_xattr};
use anyhow::{anyhow, bail, Context, Result};
use squeezefs_fs::props::{self, Prop, Source};
use squeezefs_fs::{xattr_names, FileKind};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const ABOUT: &str = "Properties of files and directories on a squeezefs mount

Properties (a file without its own value inherits its nearest ancestor directory's, then the
mount option's, then the default; a change applies to data written afterwards):
  compression             compression spec: zstd:9, zstd-fast-5, gzip-6, lz4, lz4hc:9, none, ...
  compress-force          on | off: compress every record, skipping the compressibility check
  recordsize              4K ... 1M, power of two: record size of files created afterwards; a
                          file's own is fixed once it holds data (get shows its records' size)
  background_compression  fixed codec or none: what idle-time rewriting converts data to
  qos                     directories only: 50 (MB/s), 50M, 1G, 500K, none (writes into the tree paced to that rate)

The same values are the extended attributes user.squeezefs.NAME (setfattr/getfattr; cp -a,
rsync -X and tar --xattrs carry them; setfattr -x inherits).";

#[derive(clap::Args, Debug)]
#[command(about = "Get, set, inherit and list properties of files and directories", long_about = ABOUT)]
pub struct PropArgs {
    #[command(subcommand)]
    pub cmd: PropCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum PropCmd {
    /// Set properties: squeezefs prop set PATH NAME=VALUE...
    Set {
        path: PathBuf,
        #[arg(required = true, value_name = "NAME=VALUE")]
        assignments: Vec<String>,
    },
    /// Effective values and their source (local, inherited from DIR, mount option, default)
    Get {
        /// also every file and directory below PATH
        #[arg(short, long)]
        recursive: bool,
        #[arg(long)]
        json: bool,
        path: PathBuf,
        /// properties to show (default: all)
        names: Vec<String>,
    },
    /// Drop local values: the path inherits them again
    Inherit {
        /// also everywhere below PATH
        #[arg(short, long)]
        recursive: bool,
        path: PathBuf,
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Values set on PATH itself (with -r: on everything below it too)
    List {
        #[arg(short, long)]
        recursive: bool,
        #[arg(long)]
        json: bool,
        path: PathBuf,
    },
}

pub fn run(a: PropArgs) -> Result<()> {
    match a.cmd {
        PropCmd::Set { path, assignments } => set(&path, &assignments),
        PropCmd::Get { recursive, json, path, names } => get(&path, &names, recursive, json),
        PropCmd::Inherit { recursive, path, names } => inherit(&path, &names, recursive),
        PropCmd::List { recursive, json, path } => list(&path, recursive, json),
    }
}

fn prop_named(name: &str) -> Result<Prop> {
    Prop::from_name(name).ok_or_else(|| anyhow!("unknown property '{name}' (properties: {})", props::NAMES))
}

fn kind_of(m: &std::fs::Metadata) -> FileKind {
    let t = m.file_type();
    if t.is_dir() {
        FileKind::Dir
    } else if t.is_file() {
        FileKind::File
    } else if t.is_symlink() {
        FileKind::Symlink
    } else {
        FileKind::Fifo
    }
}

/// PATH's metadata, refusing what cannot carry properties.
fn target(path: &Path) -> Result<std::fs::Metadata> {
    let m = std::fs::symlink_metadata(path).with_context(|| format!("{}", path.display()))?;
    match kind_of(&m) {
        FileKind::File | FileKind::Dir => Ok(m),
        k => bail!(
            "{} is a {}: properties live on regular files and directories{}",
            path.display(),
            props::kind_name(k),
            if k == FileKind::Symlink { " (give the link's target)" } else { "" }
        ),
    }
}

/// An errno from the daemon, in words.
fn xattr_error(path: &Path, what: &str, e: std::io::Error) -> anyhow::Error {
    let why = match e.raw_os_error() {
        Some(libc::ENOTSUP) | Some(libc::ENODATA) => "not on a squeezefs mount".to_string(),
        Some(libc::EACCES) | Some(libc::EPERM) => "permission denied".to_string(),
        Some(libc::EROFS) => "the mount is read-only".to_string(),
        Some(libc::EINVAL) => "refused by the daemon (invalid value)".to_string(),
        _ => e.to_string(),
    };
    anyhow!("{what} {}: {why}", path.display())
}

fn remove_xattr(path: &Path, name: &str) -> std::io::Result<()> {
    let p = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let n = CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: both strings are NUL-terminated and live across the call
    if unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn set(path: &Path, assignments: &[String]) -> Result<()> {
    let m = target(path)?;
    let kind = kind_of(&m);
    // every assignment checked before any is made
    let mut todo = Vec::new();
    for a in assignments {
        let (name, value) = a.split_once('=').ok_or_else(|| anyhow!("'{a}': expected NAME=VALUE"))?;
        let prop = prop_named(name)?;
        let v = props::parse(prop, value)?;
        props::check_kind(prop, kind).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        todo.push((prop, v));
    }
    for (prop, v) in &todo {
        if let (Prop::Recordsize, FileKind::File, Some(v)) = (prop, kind, v) {
            recordsize_settable(path, &m, *v)?;
        }
    }
    for (prop, v) in todo {
        let text = v.map_or_else(|| "none".to_string(), |v| v.to_string());
        set_xattr(path, prop.xattr(), text.as_bytes()).map_err(|e| match (prop, e.raw_os_error()) {
            // the file got data since the check above
            (Prop::Recordsize, Some(libc::EINVAL)) if kind == FileKind::File => anyhow!(
                "setting recordsize={text} on {}: refused, the file holds data (a file's record size is fixed once \
                 it has data)",
                path.display()
            ),
            _ => xattr_error(path, &format!("setting {prop}={text} on"), e),
        })?;
    }
    Ok(())
}

/// A regular file's record size changes only while it is empty (crates/fs xattr.rs
/// `refix_record_size`): refuse, with the file's record size, before anything is set.
fn recordsize_settable(path: &Path, m: &std::fs::Metadata, v: props::Value) -> Result<()> {
    if m.len() == 0 {
        return Ok(());
    }
    let rows = effective_rows(path, &[Prop::Recordsize], &HashMap::new())?;
    let now = rows.first().map(|r| r.value.clone()).unwrap_or_default();
    if now == v.to_string() {
        return Ok(());
    }
    bail!(
        "{}: cannot set recordsize={v}: the file holds {} bytes stored in {now} records, and a file's record \
         size is fixed once it has data. Set recordsize on the directory before creating files there, or copy \
         the file into a directory whose recordsize is {v}.",
        path.display(),
        m.len()
    )
}

/// Directories above `path` (itself included) by (device, inode), to name the ancestor a
/// value is inherited from.
pub fn ancestors(path: &Path) -> HashMap<(u64, u64), PathBuf> {
    let mut out = HashMap::new();
    let mut p = Some(path);
    while let Some(dir) = p {
        if let Ok(m) = std::fs::metadata(dir) {
            out.insert((m.dev(), m.ino()), dir.to_path_buf());
        }
        p = dir.parent();
    }
    out
}

/// One effective value, ready to print.
pub struct Row {
    pub path: PathBuf,
    pub prop: Prop,
    pub value: String,
    pub source: Source,
    /// the directory an inherited value comes from, if found
    pub from: Option<PathBuf>,
}

impl Row {
    pub fn source_text(&self) -> String {
        match (self.source, &self.from) {
            (Source::Local, _) => "local".into(),
            (Source::Inherited(_), Some(d)) => format!("inherited from {}", d.display()),
            (Source::Inherited(ino), None) => format!("inherited from inode {ino}"),
            (Source::Mount, _) => "mount option".into(),
            (Source::Default, _) => "default".into(),
            (Source::Fixed, _) => "fixed (the file's records, since it was created)".into(),
        }
    }

    pub fn json(&self) -> serde_json::Value {
        let source = match self.source {
            Source::Local => "local",
            Source::Inherited(_) => "inherited",
            Source::Mount => "mount option",
            Source::Default => "default",
            Source::Fixed => "fixed",
        };
        serde_json::json!({
            "path": self.path.display().to_string(),
            "property": self.prop.name(),
            "value": self.value,
            "source": source,
            "inherited_from": match (self.source, &self.from) {
                (Source::Inherited(_), Some(d)) => serde_json::json!(d.display().to_string()),
                (Source::Inherited(ino), None) => serde_json::json!({ "inode": ino }),
                _ => serde_json::Value::Null,
            },
        })
    }
}

/// Effective values of `path` (one row per property in `want`, all if empty). `dirs` maps
/// known directories to paths (the ancestors of the walk's start and what it visited).
pub fn effective_rows(path: &Path, want: &[Prop], dirs: &HashMap<(u64, u64), PathBuf>) -> Result<Vec<Row>> {
    let raw = get_xattr(path, xattr_names::EFFECTIVE).map_err(|e| xattr_error(path, "reading properties of", e))?;
    let dev = std::fs::symlink_metadata(path)?.dev();
    let rows = props::decode_effective(&raw).with_context(|| format!("properties of {}", path.display()))?;
    Ok(rows
        .into_iter()
        .filter(|(p, _, _)| want.is_empty() || want.contains(p))
        .map(|(prop, value, source)| Row {
            path: path.to_path_buf(),
            prop,
            value,
            source,
            from: match source {
                Source::Inherited(ino) => dirs.get(&(dev, ino)).cloned(),
                _ => None,
            },
        })
        .collect())
}

/// `path` and, with `recursive`, every regular file and directory below it on the same
/// filesystem (symbolic links skipped), parents before children; `visit` gets each with
/// its metadata.
fn walk(path: &Path, recursive: bool, visit: &mut dyn FnMut(&Path, &std::fs::Metadata) -> Result<()>) -> Result<()> {
    let m = target(path)?;
    let dev = m.dev();
    let mut stack = vec![(path.to_path_buf(), m)];
    while let Some((p, m)) = stack.pop() {
        visit(&p, &m)?;
        if recursive && m.is_dir() {
            let mut children = Vec::new();
            for e in std::fs::read_dir(&p).with_context(|| format!("listing {}", p.display()))? {
                let e = e.with_context(|| format!("listing {}", p.display()))?;
                let cm = std::fs::symlink_metadata(e.path()).with_context(|| format!("{}", e.path().display()))?;
                if cm.dev() == dev && (cm.is_dir() || cm.is_file()) {
                    children.push((e.path(), cm));
                }
            }
            children.sort_by(|a, b| b.0.cmp(&a.0));
            stack.extend(children);
        }
    }
    Ok(())
}

fn absolute(path: &Path) -> Result<PathBuf> {
    // the link itself, not its target: `target` refuses it with a clear message
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => std::fs::canonicalize(p).with_context(|| format!("{}", p.display()))?,
        _ => std::env::current_dir()?,
    };
    Ok(match path.file_name() {
        Some(n) => parent.join(n),
        None => std::fs::canonicalize(path).with_context(|| format!("{}", path.display()))?,
    })
}

fn get(path: &Path, names: &[String], recursive: bool, json: bool) -> Result<()> {
    let want = names.iter().map(|n| prop_named(n)).collect::<Result<Vec<_>>>()?;
    let path = absolute(path)?;
    let mut dirs = ancestors(path.parent().unwrap_or(&path));
    let mut rows = Vec::new();
    walk(&path, recursive, &mut |p, m| {
        if m.is_dir() {
            dirs.insert((m.dev(), m.ino()), p.to_path_buf());
        }
        rows.extend(effective_rows(p, &want, &dirs)?);
        Ok(())
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows.iter().map(Row::json).collect::<Vec<_>>())?);
        return Ok(());
    }
    let w = rows.iter().map(|r| r.path.display().to_string().len()).max().unwrap_or(4).max(4);
    println!("{:<w$}  {:<22}  {:<12}  SOURCE", "PATH", "PROPERTY", "VALUE");
    for r in &rows {
        println!("{:<w$}  {:<22}  {:<12}  {}", r.path.display(), r.prop.name(), r.value, r.source_text());
    }
    Ok(())
}

fn inherit(path: &Path, names: &[String], recursive: bool) -> Result<()> {
    let props = names.iter().map(|n| prop_named(n)).collect::<Result<Vec<_>>>()?;
    walk(path, recursive, &mut |p, _| {
        for prop in &props {
            match remove_xattr(p, prop.xattr()) {
                Ok(()) => {}
                // not set here: nothing to drop
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err(xattr_error(p, &format!("dropping {prop} of"), e)),
            }
        }
        Ok(())
    })
}

fn list(path: &Path, recursive: bool, json: bool) -> Result<()> {
    let mut rows = Vec::new();
    walk(path, recursive, &mut |p, _| {
        // the table says which values are local, in one read
        for r in effective_rows(p, &[], &HashMap::new())? {
            if r.source == Source::Local {
                rows.push((p.to_path_buf(), r.prop, r.value));
            }
        }
        Ok(())
    })?;
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(p, prop, v)| serde_json::json!({"path": p.display().to_string(), "property": prop.name(), "value": v}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for (p, prop, v) in &rows {
        println!("{}\t{prop}={v}", p.display());
    }
    Ok(())
}
