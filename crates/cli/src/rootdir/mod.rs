//! `squeezefs mkfs POOL --rootdir DIR`: copy a directory tree into a new pool through the fs
//! core (crates/fs `Fs`, used without mounting), without FUSE and without root.
//!
//! Why the fs core and not the engine's metadata transactions directly: it is the code a
//! mount runs, so the pool comes out exactly as if the tree had been copied through a mount
//! — link counts, directory parents, name and symlink-target limits, xattr namespaces,
//! and compression properties (`user.squeezefs.*`, whose values the core validates and
//! whose inheritance decides how each file's data is compressed) — with nothing to keep in
//! step. Permission checks are off (`check_permissions: false`) and every call carries
//! all capabilities: the copy stores what the source says, whoever runs it.
//!
//! Phases (one scanner thread, `jobs` copy workers):
//!   SCAN    the scanner walks DIR depth first in name order. Per entry it creates the node
//!           (directory, symlink, device, FIFO, socket, or an empty regular file), sets its
//!           extended attributes at once (so a directory's properties are in place before
//!           its children are written, and a file's own before its data), and sets the
//!           final attributes of everything that is not a directory or regular file. A
//!           regular file is opened here (an unreadable one is reported before any node
//!           exists) and queued, open, to the workers; a second name of a hard-linked
//!           source inode becomes a link. Workers meanwhile copy queued files: data ranges
//!           found with SEEK_DATA/SEEK_HOLE (holes stay holes), then mode, owner, times.
//!   DRAIN   the scanner is done (or stopped: `--strict` and an error); workers finish
//!           every queued file, so no empty placeholder is left behind.
//!   FINISH  directories and hard-linked files get their final attributes: creating
//!           children and links changed their times after the scanner saw them.
//!   COMMIT  the caller closes the fs (`Fs::shutdown`): the last txg commits.
//! Transitions: SCAN → DRAIN when the walk ends or stops; DRAIN → FINISH when the workers
//! have joined; FINISH → COMMIT always, also after an error under `--strict`, so the pool
//! is consistent either way (and, the engine committing a txg every few seconds during the
//! copy, a crash at any point leaves a pool that opens and passes fsck).
//! Tunables: `jobs` (workers), `QUEUE_PER_JOB` (open files queued per worker), `CHUNK`
//! (bytes per read and write).
//!
//! Errors of one entry (unreadable, name too long, a device number or an attribute the
//! pool cannot hold, a file changing while it is read) are reported with the entry's path
//! and the copy goes on without it; a file whose data could not be read is removed again
//! (all its names), never left short. `--strict` stops at the first one.
mod source;
pub mod units;

use crossbeam_channel::{bounded, Receiver};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parking_lot::Mutex;
use source::SrcStat;
use squeezefs_fs::{Creds, FileKind, Fs, FsError, Ino, SetAttr, TimeSet, ALL_CAPS, NAME_MAX, ROOT_INO};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bytes read from the source and handed to the fs per call: a multiple of every record size
/// (4 KiB … 1 MiB), so aligned chunks cover whole records.
const CHUNK: u64 = 1 << 20;
/// Open files waiting for a worker, per worker (bounds the descriptors held).
const QUEUE_PER_JOB: usize = 64;

/// Whose owner the pool's entries get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// the source's uid and gid
    Keep,
    /// this uid and gid for every entry
    Fixed { uid: u32, gid: u32 },
}

#[derive(Clone, Debug)]
pub struct CopyOptions {
    pub jobs: usize,
    pub strict: bool,
    pub owner: Owner,
    /// host inodes (dev, ino) left out of the copy: the pool itself when it lies inside DIR
    pub skip: Vec<(u64, u64)>,
    pub progress: bool,
}

/// What the copy did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// names beyond the first of hard-linked files
    pub hardlinks: u64,
    /// devices, FIFOs, sockets
    pub specials: u64,
    /// logical bytes of the regular files copied
    pub bytes_in: u64,
    /// entries reported and left out (or, for a file that changed, kept as read)
    pub errors: u64,
    /// the first error, when `--strict` stopped the copy
    pub stopped_by: Option<String>,
}

/// A problem with one source entry.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    #[error("cannot list the directory (copied without its contents): {0}")]
    List(#[source] std::io::Error),
    #[error("cannot read its extended attributes: {0}")]
    ListXattrs(#[source] std::io::Error),
    #[error("name longer than {NAME_MAX} bytes, which the pool does not hold")]
    NameTooLong,
    #[error("unsupported file type (mode {0:o})")]
    UnknownType(u32),
    #[error("device number {major}:{minor} does not fit the pool's 12-bit major, 20-bit minor")]
    DeviceNumber { major: u32, minor: u32 },
    #[error("extended attribute {name}: {err}")]
    Xattr { name: String, err: FsError },
    #[error("changed while it was copied (the pool holds the bytes read then)")]
    Changed,
    #[error("was replaced by another file type while being copied")]
    Replaced,
    #[error("{0}")]
    Pool(#[from] FsError),
}

impl EntryError {
    /// Whether the entry stays in the pool despite the error.
    fn entry_kept(&self) -> bool {
        matches!(self, EntryError::Changed | EntryError::Xattr { .. } | EntryError::ListXattrs(_) | EntryError::List(_))
    }
}

/// Counters shared by the scanner and the workers.
#[derive(Default)]
struct Counters {
    files: AtomicU64,
    dirs: AtomicU64,
    symlinks: AtomicU64,
    hardlinks: AtomicU64,
    specials: AtomicU64,
    bytes_in: AtomicU64,
    errors: AtomicU64,
}

/// Per-path error reporting and the `--strict` stop.
struct Reporter {
    strict: bool,
    stop: AtomicBool,
    first: Mutex<Option<String>>,
    pb: ProgressBar,
}

impl Reporter {
    /// Print the problem (one line), or under `--strict` keep the first one for the
    /// command's final error and stop the scanner.
    fn report(&self, counters: &Counters, path: &Path, e: &EntryError) {
        counters.errors.fetch_add(1, Ordering::Relaxed);
        if self.strict {
            self.first.lock().get_or_insert_with(|| format!("{}: {e}", path.display()));
            self.stop.store(true, Ordering::Relaxed);
            return;
        }
        let what = if e.entry_kept() { "" } else { " (left out)" };
        self.pb.suspend(|| eprintln!("squeezefs: {}: {e}{what}", path.display()));
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A regular file queued for a worker: its node exists (empty), its source is open.
struct Job {
    path: PathBuf,
    file: File,
    st: SrcStat,
    ino: Ino,
    parent: Ino,
    name: Vec<u8>,
}

/// A hard-linked source inode (nlink > 1): its node and every name it got so far.
struct Linked {
    ino: Ino,
    st: SrcStat,
    /// its first name in the source (for reports)
    path: PathBuf,
    names: Vec<(Ino, Vec<u8>)>,
    /// its data could not be copied: its names were removed, later names are skipped
    failed: bool,
}

struct Ctx<'a> {
    fs: &'a Fs,
    creds: Creds,
    opts: &'a CopyOptions,
    counters: Counters,
    rep: Reporter,
    links: Mutex<HashMap<(u64, u64), Linked>>,
    /// directories (pool inode, source stat, source path) whose final attributes FINISH sets
    dirs: Mutex<Vec<(Ino, SrcStat, PathBuf)>>,
}

/// Copy the tree at `src` into the fs's root directory.
pub fn copy_tree(fs: &Fs, src: &Path, opts: &CopyOptions) -> Summary {
    let t0 = std::time::Instant::now();
    let pb = if opts.progress {
        let pb = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{wide_bar}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        pb
    } else {
        ProgressBar::hidden()
    };
    let ctx = Ctx {
        fs,
        creds: Creds::with_caps(0, 0, Vec::new(), ALL_CAPS),
        opts,
        counters: Counters::default(),
        rep: Reporter { strict: opts.strict, stop: AtomicBool::new(false), first: Mutex::new(None), pb: pb.clone() },
        links: Mutex::new(HashMap::new()),
        dirs: Mutex::new(Vec::new()),
    };
    let (tx, rx) = bounded::<Job>(opts.jobs.max(1) * QUEUE_PER_JOB);
    std::thread::scope(|s| {
        for i in 0..opts.jobs.max(1) {
            let rx = rx.clone();
            let ctx = &ctx;
            std::thread::Builder::new()
                .name(format!("sqz-rootdir-{i}"))
                .spawn_scoped(s, move || worker(ctx, rx))
                .expect("starting a copy worker");
        }
        drop(rx);
        scan(&ctx, src, &tx);
        drop(tx); // SCAN → DRAIN: workers exit once the queue is empty
        log::info!("rootdir: scan done after {:.2} s", t0.elapsed().as_secs_f64());
    });
    log::info!("rootdir: copy workers done after {:.2} s", t0.elapsed().as_secs_f64());
    finish(&ctx);
    log::info!("rootdir: final attributes set after {:.2} s", t0.elapsed().as_secs_f64());
    pb.finish_and_clear();
    let stopped_by = ctx.rep.first.lock().take();
    let c = &ctx.counters;
    Summary {
        files: c.files.load(Ordering::Relaxed),
        dirs: c.dirs.load(Ordering::Relaxed),
        symlinks: c.symlinks.load(Ordering::Relaxed),
        hardlinks: c.hardlinks.load(Ordering::Relaxed),
        specials: c.specials.load(Ordering::Relaxed),
        bytes_in: c.bytes_in.load(Ordering::Relaxed),
        errors: c.errors.load(Ordering::Relaxed),
        stopped_by,
    }
}

impl Ctx<'_> {
    fn owner(&self, st: &SrcStat) -> (u32, u32) {
        match self.opts.owner {
            Owner::Keep => (st.uid, st.gid),
            Owner::Fixed { uid, gid } => (uid, gid),
        }
    }

    /// The attributes an entry ends with: mode, owner and the three times of its source.
    fn final_attrs(&self, st: &SrcStat) -> SetAttr {
        let (uid, gid) = self.owner(st);
        SetAttr {
            mode: Some(st.perm),
            uid: Some(uid),
            gid: Some(gid),
            atime: Some(TimeSet::At(st.atime)),
            mtime: Some(TimeSet::At(st.mtime)),
            ctime: Some(st.ctime),
            ..Default::default()
        }
    }

    fn set_final(&self, ino: Ino, st: &SrcStat) -> Result<(), EntryError> {
        self.fs.setattr(&self.creds, ino, &self.final_attrs(st))?;
        Ok(())
    }

    /// Copy the source's extended attributes onto `ino`. An attribute the pool refuses is
    /// reported and the others still go in (the entry stays).
    fn copy_xattrs(&self, path: &Path, ino: Ino) {
        let list = match source::xattrs(path) {
            Ok(l) => l,
            Err(e) => return self.rep.report(&self.counters, path, &EntryError::ListXattrs(e)),
        };
        for (name, value) in list {
            if let Err(err) = self.fs.setxattr(&self.creds, ino, &name, &value, 0) {
                let name = String::from_utf8_lossy(&name).into_owned();
                self.rep.report(&self.counters, path, &EntryError::Xattr { name, err });
            }
        }
    }

    fn skipped(&self, st: &SrcStat) -> bool {
        self.opts.skip.contains(&(st.dev, st.ino))
    }
}

/// SCAN: walk `src` depth first, directories' entries in name order.
fn scan(ctx: &Ctx<'_>, src: &Path, tx: &crossbeam_channel::Sender<Job>) {
    let root_st = match source::lstat(src) {
        Ok(st) => st,
        Err(e) => return ctx.rep.report(&ctx.counters, src, &EntryError::Read(e)),
    };
    ctx.copy_xattrs(src, ROOT_INO);
    ctx.dirs.lock().push((ROOT_INO, root_st, src.to_path_buf()));
    let mut todo: Vec<(PathBuf, Ino)> = vec![(src.to_path_buf(), ROOT_INO)];
    while let Some((dir, dino)) = todo.pop() {
        if ctx.rep.stopped() {
            return;
        }
        let mut names = match source::list_dir(&dir) {
            Ok(n) => n,
            Err(e) => {
                ctx.rep.report(&ctx.counters, &dir, &EntryError::List(e));
                continue;
            }
        };
        names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (name, listed) in names {
            if ctx.rep.stopped() {
                return;
            }
            let path = dir.join(&name);
            match entry(ctx, &path, dino, name.as_bytes(), listed, tx) {
                Ok(Some(sub)) => subdirs.push((path, sub)),
                Ok(None) => {}
                Err(e) => ctx.rep.report(&ctx.counters, &path, &e),
            }
        }
        // popped in name order
        todo.extend(subdirs.into_iter().rev());
    }
}

/// Create one entry; `Some(ino)` for a directory to descend into.
fn entry(
    ctx: &Ctx<'_>,
    path: &Path,
    parent: Ino,
    name: &[u8],
    listed: source::Listed,
    tx: &crossbeam_channel::Sender<Job>,
) -> Result<Option<Ino>, EntryError> {
    if name.len() > NAME_MAX {
        return Err(EntryError::NameTooLong);
    }
    if listed == source::Listed::File {
        // opened without an lstat first (open never follows a symlink here, nor blocks)
        file_entry(ctx, path, parent, name, tx)?;
        return Ok(None);
    }
    let st = source::lstat(path).map_err(EntryError::Read)?;
    if ctx.skipped(&st) {
        return Ok(None);
    }
    let c = &ctx.creds;
    let fs = ctx.fs;
    let kind = st.kind.ok_or(EntryError::UnknownType(st.perm))?;
    match kind {
        FileKind::Dir => {
            let a = fs.mkdir(c, parent, name, st.perm)?;
            ctx.copy_xattrs(path, a.ino);
            ctx.dirs.lock().push((a.ino, st, path.to_path_buf()));
            ctx.counters.dirs.fetch_add(1, Ordering::Relaxed);
            Ok(Some(a.ino))
        }
        FileKind::File => {
            file_entry(ctx, path, parent, name, tx)?;
            Ok(None)
        }
        FileKind::Symlink => {
            let target = std::fs::read_link(path).map_err(EntryError::Read)?;
            let a = fs.symlink(c, parent, name, target.as_os_str().as_bytes())?;
            finish_node(ctx, path, a.ino, &st);
            ctx.counters.symlinks.fetch_add(1, Ordering::Relaxed);
            Ok(None)
        }
        FileKind::CharDev | FileKind::BlockDev | FileKind::Fifo | FileKind::Socket => {
            let rdev = match kind {
                FileKind::CharDev | FileKind::BlockDev => {
                    let (major, minor) = (libc::major(st.rdev), libc::minor(st.rdev));
                    units::fuse_rdev(major, minor).ok_or(EntryError::DeviceNumber { major, minor })?
                }
                _ => 0,
            };
            let a = fs.mknod(c, parent, name, kind, st.perm, rdev)?;
            finish_node(ctx, path, a.ino, &st);
            ctx.counters.specials.fetch_add(1, Ordering::Relaxed);
            Ok(None)
        }
    }
}

/// A symlink or special file: extended attributes, then its final attributes.
fn finish_node(ctx: &Ctx<'_>, path: &Path, ino: Ino, st: &SrcStat) {
    ctx.copy_xattrs(path, ino);
    if let Err(e) = ctx.set_final(ino, st) {
        ctx.rep.report(&ctx.counters, path, &e);
    }
    ctx.fs.forget(ino, 1);
}

/// A regular file: a link to a hard-linked inode already created, or a new node queued for
/// a worker with its source open.
fn file_entry(
    ctx: &Ctx<'_>,
    path: &Path,
    parent: Ino,
    name: &[u8],
    tx: &crossbeam_channel::Sender<Job>,
) -> Result<(), EntryError> {
    let file = source::open_file(path).map_err(EntryError::Read)?;
    let st = SrcStat::from_metadata(&file.metadata().map_err(EntryError::Read)?);
    if st.kind != Some(FileKind::File) {
        return Err(EntryError::Replaced);
    }
    if ctx.skipped(&st) {
        return Ok(());
    }
    let key = (st.dev, st.ino);
    if st.nlink > 1 {
        let mut links = ctx.links.lock();
        if let Some(l) = links.get_mut(&key) {
            if l.failed {
                return Err(EntryError::Read(std::io::Error::other("another name of this file could not be copied")));
            }
            ctx.fs.link(&ctx.creds, l.ino, parent, name)?;
            l.names.push((parent, name.to_vec()));
            ctx.counters.hardlinks.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
    }
    let a = ctx.fs.mknod(&ctx.creds, parent, name, FileKind::File, st.perm, 0)?;
    // the file's own properties before its data, so they decide its compression
    ctx.copy_xattrs(path, a.ino);
    if st.nlink > 1 {
        let names = vec![(parent, name.to_vec())];
        ctx.links.lock().insert(key, Linked { ino: a.ino, st, path: path.to_path_buf(), names, failed: false });
    }
    ctx.rep.pb.inc_length(st.size);
    let job = Job { path: path.to_path_buf(), file, st, ino: a.ino, parent, name: name.to_vec() };
    if tx.send(job).is_err() {
        unreachable!("the workers outlive the scanner");
    }
    Ok(())
}

fn worker(ctx: &Ctx<'_>, rx: Receiver<Job>) {
    let mut buf = vec![0u8; CHUNK as usize];
    for job in rx {
        let r = copy_file(ctx, &job, &mut buf);
        let hardlinked = job.st.nlink > 1;
        match r {
            Ok(()) => {}
            Err(e) if e.entry_kept() => ctx.rep.report(&ctx.counters, &job.path, &e),
            Err(e) => {
                ctx.rep.report(&ctx.counters, &job.path, &e);
                remove_failed(ctx, &job);
                continue;
            }
        }
        let files = ctx.counters.files.fetch_add(1, Ordering::Relaxed) + 1;
        ctx.counters.bytes_in.fetch_add(job.st.size, Ordering::Relaxed);
        if !hardlinked {
            ctx.fs.forget(job.ino, 1);
        }
        if files.is_multiple_of(256) {
            ctx.rep.pb.set_message(format!("{files} files"));
        }
    }
}

/// A file whose data could not be copied leaves the pool: every name it got.
fn remove_failed(ctx: &Ctx<'_>, job: &Job) {
    let names = if job.st.nlink > 1 {
        let mut links = ctx.links.lock();
        match links.get_mut(&(job.st.dev, job.st.ino)) {
            Some(l) => {
                l.failed = true;
                std::mem::take(&mut l.names)
            }
            None => vec![(job.parent, job.name.clone())],
        }
    } else {
        vec![(job.parent, job.name.clone())]
    };
    for (parent, name) in names {
        if let Err(e) = ctx.fs.unlink(&ctx.creds, parent, &name) {
            ctx.rep.report(&ctx.counters, &job.path, &EntryError::Pool(e));
        }
        ctx.fs.forget(job.ino, 1);
    }
}

/// Copy one file's data ranges, then set its final attributes. `Changed` when the source
/// moved under the copy (the bytes read stay).
fn copy_file(ctx: &Ctx<'_>, job: &Job, buf: &mut [u8]) -> Result<(), EntryError> {
    let (f, size, ino) = (&job.file, job.st.size, job.ino);
    let mut pos = 0u64;
    // bytes written, and the end of the last write (the file's size so far)
    let (mut done, mut written_end) = (0u64, 0u64);
    let mut short = false;
    let sparse = job.st.may_be_sparse();
    'ranges: while pos < size {
        let (start, end) = if sparse {
            let Some(start) = source::next_data(f, pos).map_err(EntryError::Read)? else { break };
            if start >= size {
                break;
            }
            (start, source::next_hole(f, start).map_err(EntryError::Read)?.unwrap_or(size).min(size))
        } else {
            (pos, size)
        };
        let mut at = start;
        while at < end {
            let chunk_end = units::chunk_end_byte(at, end, CHUNK);
            let want = (chunk_end - at) as usize;
            let n = source::read_full_at(f, at, &mut buf[..want]).map_err(EntryError::Read)?;
            if n > 0 {
                ctx.fs.write(&ctx.creds, ino, at, &buf[..n], true)?;
                ctx.rep.pb.inc(n as u64);
                done += n as u64;
                written_end = at + n as u64;
            }
            if n < want {
                short = true; // the file shrank: stop at its new end
                break 'ranges;
            }
            at = chunk_end;
        }
        pos = end.max(start + 1);
    }
    // holes count as done once the data is
    ctx.rep.pb.inc(size.saturating_sub(done));
    let after = SrcStat::from_metadata(&f.metadata().map_err(EntryError::Read)?);
    let mut s = ctx.final_attrs(&job.st);
    if written_end < size && !short {
        // a trailing hole: the size comes from the source, not from the last write
        s.size = Some(size);
    }
    ctx.fs.setattr(&ctx.creds, ino, &s)?;
    if short || after.changed_since(&job.st) {
        return Err(EntryError::Changed);
    }
    Ok(())
}

/// FINISH: final attributes of hard-linked files and of directories (in any order: setting
/// an inode's attributes touches no other inode).
fn finish(ctx: &Ctx<'_>) {
    let links = std::mem::take(&mut *ctx.links.lock());
    for (_, l) in links {
        if l.failed {
            continue;
        }
        if let Err(e) = ctx.set_final(l.ino, &l.st) {
            ctx.rep.report(&ctx.counters, &l.path, &e);
        }
        ctx.fs.forget(l.ino, l.names.len() as u64);
    }
    let dirs = std::mem::take(&mut *ctx.dirs.lock());
    for (ino, st, path) in dirs {
        if let Err(e) = ctx.set_final(ino, &st) {
            ctx.rep.report(&ctx.counters, &path, &e);
        }
        if ino != ROOT_INO {
            ctx.fs.forget(ino, 1);
        }
    }
}
