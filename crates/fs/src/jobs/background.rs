//! Background compression (docs/design.md §15): while the pool is idle, records stored with
//! another codec than their file's effective `background_compression` are rewritten with it
//! (`Engine::rewrite_record`, the operation `squeezefs recompress` uses), so data written
//! fast (`compression=lz4`) ends up small (`background_compression=zstd:15`).
//!
//! One worker thread per mount (`Fs::start_background`), at the lowest CPU and I/O priority.
//! Before each step it asks `squeezefs_control::background::decide` (idle for `bg-idle`, no
//! recompress job, dirty data low) and otherwise sleeps.
//!
//! ```text
//! pass states (the durable cursor, squeezefs_meta::BgCursor):
//!   NO PASS   ceiling = 0. A pass starts when the pool committed file data after the floor
//!             (Engine::data_txg > floor) or a reset was asked: ceiling = the pool's txg,
//!             the walk starts at the root.
//!   RUNNING   a depth-first walk of the namespace in listing order (path: directory,
//!             its cookie in its parent, last cookie done). Each step handles one record of
//!             the file in hand, or looks at up to STEP_ENTRIES entries of the directory on
//!             top: a file whose effective background spec is a codec and that has records
//!             born in (floor, ceiling] stored otherwise becomes the file in hand; a
//!             directory is entered; a directory listed to its end is left.
//!   DONE      the root is left: floor = ceiling, ceiling = 0, passes + 1 → NO PASS.
//! reset (a `background_compression` property set or removed, a rename that changed what an
//!   inode inherits, a mount whose background spec differs from the cursor's): floor = 0,
//!   and a running pass starts again from the root with ceiling = the pool's txg.
//! The cursor is saved (Engine::save_background_cursor, committed with the next txg) every
//! SAVE_EVERY while it changes, at the end of each pass and when the worker stops; after a
//! remount the walk goes on from the saved path (a directory gone or moved since is left at
//! the deepest level still valid). Records of the file in hand are not in the cursor: they
//! are looked at again, and those converted already are skipped as stored so.
//! ```
//!
//! Records the pass leaves raw because they do not compress are not tried again by later
//! passes (their birth is at or below the floor), unless a reset asks for it.
//!
//! Tunables: SAVE_EVERY (5 s), STEP_ENTRIES (64), ERROR_PAUSE (5 s).
use crate::error::{FsError, Result};
use crate::props::inherit::Resolved;
use crate::props::Prop;
use crate::Fs;
use squeezefs_codec::Spec;
use squeezefs_control::background::{decide, BgDecision, BgInputs};
use squeezefs_pipeline::{
    stored_codec, BgCursor, BgFrame, EngineError, FileKind, Ino, RewriteOutcome, RewriteTo, StoredRecord, ROOT_INO,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often a changing cursor is saved.
pub const SAVE_EVERY: Duration = Duration::from_secs(5);
/// Directory entries one step looks at.
pub const STEP_ENTRIES: usize = 64;
/// Pause after a failed step.
pub const ERROR_PAUSE: Duration = Duration::from_secs(5);

/// What `squeezefs stats` shows of background compression.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BgStatus {
    /// the idle time it waits for; `None`: off
    pub idle_after: Option<Duration>,
    /// `off`, `waiting` (for the pool to be idle), `held` (a recompress job, dirty data),
    /// `working`, `done` (nothing to look at), `stopped`
    pub state: &'static str,
    /// the cursor as last known (totals since mkfs, floor, running pass)
    pub cursor: BgCursor,
    /// records and bytes converted since this mount
    pub session_records: u64,
    pub session_logical: u64,
    pub session_before: u64,
    pub session_after: u64,
    pub last_error: Option<String>,
}

/// Records of a tree not yet stored with their background codec (`Fs::background_pending`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BgPending {
    /// files with a background codec, and those holding records to convert
    pub files_with_spec: u64,
    pub files_pending: u64,
    pub records: u64,
    pub logical_bytes: u64,
    pub stored_bytes: u64,
}

/// The worker's shared state (one per `Fs`).
#[derive(Default)]
pub(crate) struct Background {
    stop: AtomicBool,
    reset: AtomicBool,
    status: parking_lot::Mutex<BgStatus>,
    thread: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Background {
    /// Ask for a reset (module comment): what files inherit may have changed.
    pub fn reset(&self) {
        self.reset.store(true, Ordering::Release);
    }
}

/// The effective background codec of an inode (`None`: no background compression).
fn target_of(res: &Resolved) -> Option<Spec> {
    match res.eff.get(Prop::BackgroundCompression).0.spec() {
        Some(s @ Spec::Fixed(_)) => Some(s),
        _ => None,
    }
}

/// Whether a record is one the pass converts to `target`: born in (floor, ceiling], of a
/// kind the rewrite handles, stored otherwise.
fn wants(e: &squeezefs_pipeline::ExtentPtr, target: Spec, floor: u64, ceiling: u64) -> bool {
    e.birth > floor
        && e.birth <= ceiling
        && matches!(e.stored, StoredRecord::Device(_) | StoredRecord::Inline(_))
        && stored_codec(e).is_some_and(|c| !target.stores_as(c))
}

/// The file in hand.
struct FileWork {
    ino: Ino,
    cookie: u64,
    to: RewriteTo,
    records: VecDeque<u64>,
}

/// The running pass in memory: the cursor, each path level's resolution, the file in hand.
struct Walker {
    cursor: BgCursor,
    res: Vec<Arc<Resolved>>,
    file: Option<FileWork>,
    changed: bool,
}

/// What one step did.
enum Step {
    Worked,
    /// no pass runs and none is due
    NothingToDo,
}

impl Fs {
    /// Start the background worker: it works after `idle_after` without foreground
    /// operations (`None`: never; the worker still answers `background_status`).
    pub fn start_background(self: &Arc<Self>, idle_after: Option<Duration>) {
        self.bg.status.lock().idle_after = idle_after;
        if self.read_only() || idle_after.is_none() {
            self.bg.status.lock().state = "off";
            return;
        }
        let weak = Arc::downgrade(self);
        match std::thread::Builder::new().name("sqz-background".into()).spawn(move || worker(weak, idle_after)) {
            Ok(h) => *self.bg.thread.lock() = Some(h),
            Err(e) => log::error!("starting background compression: {e}; it stays off"),
        }
    }

    /// Stop the worker and wait for it (it saves its cursor first). Called before the
    /// engine closes (`shutdown`).
    pub(crate) fn stop_background(&self) {
        self.bg.stop.store(true, Ordering::Release);
        let h = self.bg.thread.lock().take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// Background compression's state and totals.
    pub fn background_status(&self) -> BgStatus {
        let mut s = self.bg.status.lock().clone();
        if s.state.is_empty() {
            s.state = "off";
        }
        if s.cursor == BgCursor::default() {
            if let Ok(Some(c)) = self.engine.background_cursor() {
                s.cursor = c;
            }
        }
        s
    }

    /// Records below the directory or file at `rel` (relative to the root) that background
    /// compression has still to convert: not stored with their file's background codec,
    /// and not left raw by a finished pass (those do not compress).
    pub fn background_pending(&self, rel: &[u8]) -> Result<BgPending> {
        let floor = self.engine.background_cursor()?.map_or(0, |c| c.floor_txg);
        let chain = self.lookup_path(rel)?;
        let res = self.resolve_chain(&chain)?;
        let (ino, kind) = *chain.last().expect("the root at least");
        let mut p = BgPending::default();
        let mut seen = std::collections::HashSet::new();
        let mut count = |ino: Ino, res: &Resolved| -> Result<bool> {
            let Some(target) = target_of(res) else { return Ok(true) };
            if !seen.insert(ino) {
                return Ok(true);
            }
            p.files_with_spec += 1;
            let mut any = false;
            for (_, e) in self.engine.extents(ino)? {
                let raw_tried = e.alg == 0 && e.birth <= floor;
                if !raw_tried && wants(&e, target, 0, u64::MAX) && !self.shared_record(&e) {
                    any = true;
                    p.records += 1;
                    p.logical_bytes += u64::from(e.logical);
                    p.stored_bytes += e.psize();
                }
            }
            p.files_pending += u64::from(any);
            Ok(true)
        };
        match kind {
            FileKind::File => {
                count(ino, &res)?;
            }
            FileKind::Dir => {
                self.walk_files(ino, &res, &mut |v| count(v.ino, &v.resolved))?;
            }
            _ => {}
        }
        Ok(p)
    }

    /// The mount's background spec, as the cursor keeps it.
    fn mount_bg_text(&self) -> String {
        self.mount_level().get(Prop::BackgroundCompression).0.to_string()
    }

    /// The cursor at the worker's start: the saved one, reset if the mount's background
    /// spec changed, with its path checked against the namespace.
    fn load_walker(&self) -> Result<Walker> {
        let mut cursor = self.engine.background_cursor()?.unwrap_or_default();
        let spec = self.mount_bg_text();
        let mut changed = false;
        if cursor.mount_spec != spec {
            cursor.mount_spec = spec;
            cursor.floor_txg = 0;
            if cursor.ceiling_txg != 0 {
                cursor.path.clear();
            }
            changed = true;
        }
        let mut w = Walker { cursor, res: Vec::new(), file: None, changed };
        if w.cursor.ceiling_txg != 0 {
            self.rebuild_path(&mut w)?;
        }
        Ok(w)
    }

    /// The resolutions of the saved path, cut at the first level no longer valid.
    fn rebuild_path(&self, w: &mut Walker) -> Result<()> {
        w.res.clear();
        let path = std::mem::take(&mut w.cursor.path);
        for (i, f) in path.into_iter().enumerate() {
            let valid = if i == 0 {
                f.dir == ROOT_INO
            } else {
                let parent = w.cursor.path[i - 1].dir;
                let listed = self.engine.dir_list(parent, f.cookie_in_parent.saturating_sub(1), 1)?;
                listed
                    .first()
                    .is_some_and(|e| e.cookie == f.cookie_in_parent && e.ino == f.dir && e.kind == FileKind::Dir)
            };
            if !valid {
                break;
            }
            let r = if i == 0 {
                self.resolve(ROOT_INO)?
            } else {
                self.resolve_below(w.cursor.path[i - 1].dir, &w.res[i - 1], f.dir)?
            };
            w.res.push(r);
            w.cursor.path.push(f);
        }
        Ok(())
    }

    /// Start a pass from the root (module comment: NO PASS → RUNNING, or a reset).
    fn start_pass(&self, w: &mut Walker) -> Result<()> {
        w.cursor.ceiling_txg = self.engine.info().last_txg.max(self.engine.data_txg());
        w.cursor.path = vec![BgFrame { dir: ROOT_INO, cookie_in_parent: 0, done_through: 0 }];
        w.res = vec![self.resolve(ROOT_INO)?];
        w.file = None;
        w.changed = true;
        Ok(())
    }

    /// One step of the worker (module comment).
    fn bg_step(&self, w: &mut Walker) -> Result<Step> {
        if self.bg.reset.swap(false, Ordering::AcqRel) {
            w.cursor.floor_txg = 0;
            w.changed = true;
            if w.cursor.ceiling_txg != 0 {
                self.start_pass(w)?;
            }
        }
        if let Some(f) = &mut w.file {
            match f.records.pop_front() {
                Some(idx) => {
                    match self.engine.rewrite_record(f.ino, idx, f.to, true) {
                        Ok(RewriteOutcome::Rewritten { logical, old_stored, new_stored, .. }) => {
                            let c = &mut w.cursor;
                            c.converted_records += 1;
                            c.converted_logical += logical;
                            c.converted_before += old_stored;
                            c.converted_after += new_stored;
                            w.changed = true;
                            let mut s = self.bg.status.lock();
                            s.session_records += 1;
                            s.session_logical += logical;
                            s.session_before += old_stored;
                            s.session_after += new_stored;
                        }
                        Ok(RewriteOutcome::Skipped(_)) => {}
                        // a damaged record stays as it is; scrub reports it
                        Err(EngineError::Checksum { .. } | EngineError::Corrupt(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                    return Ok(Step::Worked);
                }
                None => {
                    let cookie = f.cookie;
                    w.file = None;
                    if let Some(top) = w.cursor.path.last_mut() {
                        top.done_through = top.done_through.max(cookie);
                    }
                    w.changed = true;
                    return Ok(Step::Worked);
                }
            }
        }
        if w.cursor.ceiling_txg == 0 {
            if self.engine.data_txg() <= w.cursor.floor_txg {
                return Ok(Step::NothingToDo);
            }
            self.start_pass(w)?;
            return Ok(Step::Worked);
        }
        let Some(top) = w.cursor.path.last().copied() else {
            return self.finish_pass(w);
        };
        let res = w.res.last().cloned().expect("a resolution per level");
        let entries = match self.engine.dir_list(top.dir, top.done_through, STEP_ENTRIES) {
            Ok(e) => e,
            Err(EngineError::NoInode(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        if entries.is_empty() {
            let left = w.cursor.path.pop().expect("the top");
            w.res.pop();
            match w.cursor.path.last_mut() {
                Some(parent) => parent.done_through = parent.done_through.max(left.cookie_in_parent),
                None => return self.finish_pass(w),
            }
            w.changed = true;
            return Ok(Step::Worked);
        }
        for e in entries {
            match e.kind {
                FileKind::Dir => {
                    let r = match self.resolve_below(top.dir, &res, e.ino) {
                        Ok(r) => r,
                        Err(FsError::NotFound) => continue,
                        Err(err) => return Err(err),
                    };
                    w.cursor.path.push(BgFrame { dir: e.ino, cookie_in_parent: e.cookie, done_through: 0 });
                    w.res.push(r);
                    w.changed = true;
                    return Ok(Step::Worked);
                }
                FileKind::File => {
                    if let Some(f) = self.file_work(top.dir, &res, e.ino, e.cookie, &w.cursor)? {
                        w.file = Some(f);
                        return Ok(Step::Worked);
                    }
                }
                _ => {}
            }
            if let Some(t) = w.cursor.path.last_mut() {
                t.done_through = t.done_through.max(e.cookie);
            }
            w.changed = true;
        }
        Ok(Step::Worked)
    }

    /// A record shared with other files (copies, docs/design.md §6.2): background
    /// compression leaves it as it is, since rewriting one file's would store a second copy
    /// of it (`squeezefs recompress` does that when asked).
    fn shared_record(&self, e: &squeezefs_pipeline::ExtentPtr) -> bool {
        match e.stored {
            StoredRecord::Device(d) => self.engine.references(&d).is_ok_and(|n| n > 1),
            _ => false,
        }
    }

    /// The records of file `ino` (an entry of `dir`) the pass converts, if any.
    fn file_work(&self, dir: Ino, res: &Resolved, ino: Ino, cookie: u64, c: &BgCursor) -> Result<Option<FileWork>> {
        let r = match self.resolve_below(dir, res, ino) {
            Ok(r) => r,
            Err(FsError::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(target) = target_of(&r) else { return Ok(None) };
        // offsets map to records of the file's own record size (fixed while it holds data)
        let (rs, extents) = match self.engine.record_size(ino).and_then(|rs| Ok((rs, self.engine.extents(ino)?))) {
            Ok((rs, x)) => (u64::from(rs), x),
            Err(EngineError::NoInode(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let records: VecDeque<u64> = extents
            .into_iter()
            .filter(|(_, e)| wants(e, target, c.floor_txg, c.ceiling_txg) && !self.shared_record(e))
            .map(|(off, _)| off / rs)
            .collect();
        if records.is_empty() {
            return Ok(None);
        }
        Ok(Some(FileWork { ino, cookie, to: RewriteTo { spec: target, force: false }, records }))
    }

    /// DONE (module comment).
    fn finish_pass(&self, w: &mut Walker) -> Result<Step> {
        w.cursor.floor_txg = w.cursor.ceiling_txg;
        w.cursor.ceiling_txg = 0;
        w.cursor.path.clear();
        w.cursor.passes += 1;
        w.res.clear();
        w.changed = true;
        self.save_cursor(w)?;
        Ok(Step::Worked)
    }

    fn save_cursor(&self, w: &mut Walker) -> Result<()> {
        if w.changed {
            self.engine.save_background_cursor(w.cursor.clone())?;
            w.changed = false;
        }
        self.bg.status.lock().cursor = w.cursor.clone();
        Ok(())
    }
}

/// Lowest CPU priority (nice 19) and the idle I/O class for the calling thread: whatever
/// else runs on the machine goes first.
fn lower_priority() {
    // SAFETY: plain syscalls on the calling thread's id
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        if libc::setpriority(libc::PRIO_PROCESS, tid, 19) != 0 {
            log::debug!("background compression: nice 19: {}", std::io::Error::last_os_error());
        }
        // ioprio_set(IOPRIO_WHO_PROCESS, tid, IOPRIO_CLASS_IDLE << 13)
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_CLASS_IDLE: libc::c_long = 3;
        if libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid as libc::c_long, IOPRIO_CLASS_IDLE << 13) != 0 {
            log::debug!("background compression: idle I/O class: {}", std::io::Error::last_os_error());
        }
    }
}

/// Sleep `d`, waking early when the worker is asked to stop.
fn nap(fs: &Weak<Fs>, d: Duration) {
    let end = Instant::now() + d;
    loop {
        let now = Instant::now();
        if now >= end || fs.upgrade().is_none_or(|f| f.bg.stop.load(Ordering::Acquire)) {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// The worker thread (module comment).
fn worker(fs: Weak<Fs>, idle_after: Option<Duration>) {
    lower_priority();
    let mut walker: Option<Walker> = None;
    let mut last_save = Instant::now();
    loop {
        let Some(f) = fs.upgrade() else { return };
        let set_state = |state: &'static str| f.bg.status.lock().state = state;
        if f.bg.stop.load(Ordering::Acquire) {
            if let Some(w) = &mut walker {
                if let Err(e) = f.save_cursor(w) {
                    log::warn!("background compression: saving its position at stop: {e}");
                }
            }
            set_state("stopped");
            return;
        }
        let inputs = BgInputs {
            idle_after,
            idle_for: f.engine.idle_for(),
            jobs_running: f.recompress_jobs(),
            dirty_bytes: f.engine.dirty_bytes(),
            dirty_max: f.engine.max_dirty_bytes(),
        };
        if let BgDecision::Sleep(d) = decide(&inputs) {
            set_state(if inputs.idle_for < idle_after.unwrap_or_default() { "waiting" } else { "held" });
            drop(f);
            nap(&fs, d);
            continue;
        }
        if walker.is_none() {
            match f.load_walker() {
                Ok(w) => walker = Some(w),
                Err(e) => {
                    f.bg.status.lock().last_error = Some(format!("reading the cursor: {e}"));
                    drop(f);
                    nap(&fs, ERROR_PAUSE);
                    continue;
                }
            }
        }
        let w = walker.as_mut().expect("loaded above");
        let step = f.bg_step(w);
        let saved = if last_save.elapsed() >= SAVE_EVERY {
            last_save = Instant::now();
            f.save_cursor(w)
        } else {
            f.bg.status.lock().cursor = w.cursor.clone();
            Ok(())
        };
        match step.and_then(|s| saved.map(|()| s)) {
            Ok(Step::Worked) => set_state("working"),
            Ok(Step::NothingToDo) => {
                set_state("done");
                drop(f);
                nap(&fs, squeezefs_control::background::POLL_MAX);
            }
            Err(e) => {
                log::warn!("background compression: {e}; trying again in {ERROR_PAUSE:?}");
                f.bg.status.lock().last_error = Some(e.to_string());
                // the in-memory walk may be stale: go on from the saved cursor
                walker = None;
                drop(f);
                nap(&fs, ERROR_PAUSE);
            }
        }
    }
}
