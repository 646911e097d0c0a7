//! `squeezefs recompress` in the fs core (docs/design.md §15): rewrite the records of files
//! and trees with a compression spec, record by record, through the engine's one rewrite
//! operation (`Engine::rewrite_record`: compare-and-swap on each record's extent, then the
//! normal txg pipeline).
//!
//! A job runs in three phases:
//! * PLAN: every path is looked up from the root (the request names paths relative to the
//!   mount); a directory is walked when the job is recursive; every file gets its target
//!   (the job's spec, else the file's effective `compression`) and the list of its
//!   committed records, which make the totals the progress reports.
//! * WORK: `jobs` threads take files off one shared list and rewrite each file's records
//!   in order, on their own thread (the compression runs there). Every record is counted
//!   once, rewritten or skipped with its reason; a damaged record is reported and skipped,
//!   a full pool or a suspended one ends the job.
//! * SYNC: one commit makes the rewrites durable before the summary is returned, so its
//!   byte counts are what the pool holds.
//!
//! Progress goes to a callback on the calling thread every `PROGRESS_EVERY`; the callback
//! returning `false` cancels the job (records rewritten so far stay, and are committed).
//! While a job runs, background compression holds off (background.rs).
use crate::error::{FsError, Result};
use crate::jobs::walk::FileVisit;
use crate::props::inherit::Resolved;
use crate::{Compression, Fs};
use squeezefs_pipeline::{EngineError, FileKind, Ino, RewriteOutcome, RewriteTo};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the progress callback runs.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(200);
/// Most worker threads one job may ask for.
pub const MAX_JOBS: usize = 64;
/// How long an unmount waits for running jobs to stop (each stops within a record).
pub const JOBS_STOP_WAIT: Duration = Duration::from_secs(30);
/// Damaged records listed in a summary (the count covers them all).
const MAX_LISTED_ERRORS: usize = 20;

/// What to recompress and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRequest {
    /// paths relative to the mount's root (`/`-separated bytes)
    pub paths: Vec<Vec<u8>>,
    /// the spec to rewrite with; `None`: each file's effective `compression`
    pub to: Option<Compression>,
    /// leave records stored that way already (`Spec::stores_as`)
    pub if_different: bool,
    /// walk directories
    pub recursive: bool,
    /// worker threads, 1..=MAX_JOBS
    pub jobs: usize,
}

/// Counters of a job (progress and summary). Bytes are logical (in the files) unless
/// named stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobCounts {
    pub files_total: u64,
    pub files_done: u64,
    pub records_total: u64,
    pub records_done: u64,
    pub bytes_total: u64,
    pub bytes_done: u64,
    pub records_rewritten: u64,
    /// stored bytes of every record the job covers, before it
    pub stored_total_before: u64,
    /// stored bytes of the records rewritten, before and after
    pub stored_rewritten_before: u64,
    pub stored_rewritten_after: u64,
}

impl JobCounts {
    /// Stored bytes of every record the job covers, after it.
    pub fn stored_total_after(&self) -> u64 {
        self.stored_total_before - self.stored_rewritten_before + self.stored_rewritten_after
    }
}

/// What a finished job did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobSummary {
    pub counts: JobCounts,
    /// records left as they were, per reason (`RewriteSkip::name`)
    pub skipped: BTreeMap<String, u64>,
    /// damaged records met (not rewritten), at most MAX_LISTED_ERRORS, and how many in all
    pub errors: Vec<String>,
    pub error_count: u64,
    pub elapsed: Duration,
    pub cancelled: bool,
}

/// Why a job could not run or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    #[error("{path}: no such file or directory")]
    NoSuchPath { path: String },
    #[error("{path}: a component of the path is not a directory")]
    NotADirectoryOnPath { path: String },
    #[error("{path} is a directory: pass -r to recompress the files below it")]
    IsDirectory { path: String },
    #[error("{path} is a {kind}: only regular files hold data to recompress")]
    NoData { path: String, kind: &'static str },
    #[error("--jobs {0}: between 1 and {MAX_JOBS} worker threads")]
    BadJobs(usize),
    #[error("the filesystem is mounted read-only")]
    ReadOnly,
    #[error("no paths to recompress")]
    NoPaths,
    #[error("the filesystem is being unmounted")]
    Unmounting,
    #[error("{path}: {source}")]
    Path { path: String, source: FsError },
    #[error("recompressing stopped: {0}")]
    Stopped(FsError),
}

/// One file of a job: its target and committed records (index, logical, stored bytes).
struct Planned {
    ino: Ino,
    to: RewriteTo,
    records: Vec<(u64, u64, u64)>,
}

/// Shared state of the WORK phase.
#[derive(Default)]
struct Work {
    next: AtomicUsize,
    files_done: AtomicU64,
    records_done: AtomicU64,
    bytes_done: AtomicU64,
    rewritten: AtomicU64,
    before: AtomicU64,
    after: AtomicU64,
    stop: AtomicBool,
    skipped: Mutex<BTreeMap<String, u64>>,
    errors: Mutex<(Vec<String>, u64)>,
    fatal: Mutex<Option<FsError>>,
}

/// Whether an engine error ends the job (the pool cannot take more) or only the record.
fn ends_the_job(e: &EngineError) -> bool {
    !matches!(e, EngineError::Checksum { .. } | EngineError::Corrupt(_))
}

/// A job's running count in `Fs` (background compression holds off while it is not 0).
struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Fs {
    /// Recompress jobs running now.
    pub fn recompress_jobs(&self) -> usize {
        self.jobs_running.load(Ordering::Acquire)
    }

    /// Whether the filesystem is being unmounted (`shutdown`): jobs stop.
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Wait until no job runs, at most `max`.
    pub(crate) fn wait_for_jobs(&self, max: Duration) {
        let t0 = Instant::now();
        while self.recompress_jobs() > 0 && t0.elapsed() < max {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Run a recompress job (module comment). `progress` gets the counts every
    /// `PROGRESS_EVERY` and returns `false` to cancel.
    pub fn recompress(
        &self,
        req: &JobRequest,
        progress: &mut dyn FnMut(&JobCounts) -> bool,
    ) -> std::result::Result<JobSummary, JobError> {
        let t0 = Instant::now();
        if self.read_only() {
            return Err(JobError::ReadOnly);
        }
        if self.closing() {
            return Err(JobError::Unmounting);
        }
        if req.jobs == 0 || req.jobs > MAX_JOBS {
            return Err(JobError::BadJobs(req.jobs));
        }
        if req.paths.is_empty() {
            return Err(JobError::NoPaths);
        }
        self.jobs_running.fetch_add(1, Ordering::AcqRel);
        let _running = Running(&self.jobs_running);
        let files = self.plan(req)?;
        let mut counts = JobCounts {
            files_total: files.len() as u64,
            records_total: files.iter().map(|f| f.records.len() as u64).sum(),
            bytes_total: files.iter().flat_map(|f| &f.records).map(|r| r.1).sum(),
            stored_total_before: files.iter().flat_map(|f| &f.records).map(|r| r.2).sum(),
            ..Default::default()
        };
        let work = Work::default();
        let mut cancelled = !progress(&counts);
        if !cancelled {
            std::thread::scope(|s| {
                for _ in 0..req.jobs.min(files.len().max(1)) {
                    s.spawn(|| self.work_files(&files, req.if_different, &work));
                }
                loop {
                    let all_done = work.files_done.load(Ordering::Acquire) == files.len() as u64;
                    if all_done || work.stop.load(Ordering::Acquire) {
                        break;
                    }
                    std::thread::sleep(PROGRESS_EVERY);
                    fill(&mut counts, &work);
                    if !progress(&counts) || self.closing() {
                        cancelled = true;
                        work.stop.store(true, Ordering::Release);
                    }
                }
            });
        }
        // what was rewritten becomes durable, whether the job ended, failed or was cancelled
        let synced = self.engine.sync();
        if let Some(e) = work.fatal.lock().expect("not poisoned").take() {
            return Err(JobError::Stopped(e));
        }
        synced.map_err(|e| JobError::Stopped(e.into()))?;
        fill(&mut counts, &work);
        progress(&counts);
        let (errors, error_count) = std::mem::take(&mut *work.errors.lock().expect("not poisoned"));
        let skipped = std::mem::take(&mut *work.skipped.lock().expect("not poisoned"));
        Ok(JobSummary { counts, skipped, errors, error_count, elapsed: t0.elapsed(), cancelled })
    }

    /// PLAN (module comment).
    fn plan(&self, req: &JobRequest) -> std::result::Result<Vec<Planned>, JobError> {
        let mut seen: HashSet<Ino> = HashSet::new();
        let mut out = Vec::new();
        for path in &req.paths {
            let shown = || {
                let p = String::from_utf8_lossy(path);
                if p.is_empty() {
                    "/".to_string()
                } else {
                    format!("/{}", p.trim_start_matches('/'))
                }
            };
            let chain = self.lookup_path(path).map_err(|e| match e {
                FsError::NotFound => JobError::NoSuchPath { path: shown() },
                FsError::NotDir => JobError::NotADirectoryOnPath { path: shown() },
                e => JobError::Path { path: shown(), source: e },
            })?;
            let (ino, kind) = *chain.last().expect("the root at least");
            let res = self.resolve_chain(&chain).map_err(|e| JobError::Path { path: shown(), source: e })?;
            let mut add = |v: FileVisit| -> Result<bool> {
                if seen.insert(v.ino) {
                    out.push(self.plan_file(v.ino, &v.resolved, req.to)?);
                }
                Ok(true)
            };
            let r = match kind {
                FileKind::File => add(FileVisit { ino, resolved: res }).map(|_| ()),
                FileKind::Dir if req.recursive => self.walk_files(ino, &res, &mut add).map(|_| ()),
                FileKind::Dir => return Err(JobError::IsDirectory { path: shown() }),
                other => return Err(JobError::NoData { path: shown(), kind: crate::props::kind_name(other) }),
            };
            r.map_err(|e| JobError::Path { path: shown(), source: e })?;
        }
        Ok(out)
    }

    /// One file's target and records.
    fn plan_file(&self, ino: Ino, res: &Resolved, to: Option<Compression>) -> Result<Planned> {
        let to = match to {
            Some(c) => RewriteTo { spec: c.spec, force: c.force },
            None => {
                let (spec, force) = res.policy.unwrap_or_else(|| self.engine.compression());
                RewriteTo { spec, force }
            }
        };
        // offsets map to records of the file's own record size (fixed while it holds data)
        let records = match self.engine.record_size(ino).and_then(|rs| Ok((u64::from(rs), self.engine.extents(ino)?))) {
            Ok((rs, x)) => x.into_iter().map(|(off, e)| (off / rs, u64::from(e.logical), e.psize())).collect(),
            Err(EngineError::NoInode(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        Ok(Planned { ino, to, records })
    }

    /// WORK (module comment): one thread's loop over the shared file list.
    fn work_files(&self, files: &[Planned], if_different: bool, w: &Work) {
        loop {
            if w.stop.load(Ordering::Acquire) {
                return;
            }
            let i = w.next.fetch_add(1, Ordering::AcqRel);
            let Some(f) = files.get(i) else { return };
            for &(idx, logical, _) in &f.records {
                if w.stop.load(Ordering::Acquire) {
                    break;
                }
                match self.engine.rewrite_record(f.ino, idx, f.to, if_different) {
                    Ok(RewriteOutcome::Rewritten { old_stored, new_stored, .. }) => {
                        w.rewritten.fetch_add(1, Ordering::Relaxed);
                        w.before.fetch_add(old_stored, Ordering::Relaxed);
                        w.after.fetch_add(new_stored, Ordering::Relaxed);
                    }
                    Ok(RewriteOutcome::Skipped(why)) => {
                        *w.skipped.lock().expect("not poisoned").entry(why.name().to_string()).or_default() += 1;
                    }
                    Err(e) if !ends_the_job(&e) => {
                        let mut errs = w.errors.lock().expect("not poisoned");
                        if errs.0.len() < MAX_LISTED_ERRORS {
                            errs.0.push(format!("inode {} record {idx}: {e}", f.ino));
                        }
                        errs.1 += 1;
                    }
                    Err(e) => {
                        w.fatal.lock().expect("not poisoned").get_or_insert(e.into());
                        w.stop.store(true, Ordering::Release);
                        break;
                    }
                }
                w.records_done.fetch_add(1, Ordering::Relaxed);
                w.bytes_done.fetch_add(logical, Ordering::Relaxed);
            }
            w.files_done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

fn fill(c: &mut JobCounts, w: &Work) {
    c.files_done = w.files_done.load(Ordering::Acquire);
    c.records_done = w.records_done.load(Ordering::Relaxed);
    c.bytes_done = w.bytes_done.load(Ordering::Relaxed);
    c.records_rewritten = w.rewritten.load(Ordering::Relaxed);
    c.stored_rewritten_before = w.before.load(Ordering::Relaxed);
    c.stored_rewritten_after = w.after.load(Ordering::Relaxed);
}
