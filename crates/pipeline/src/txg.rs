//! Transaction groups: the state machine and its one driver thread.
//!
//! States of a txg (number N):
//! * `OPEN`: N accepts writes: `write`/`set_size`/`punch_hole` change the open layer of
//!   each file's dirty data; metadata changes go into the namespace delta
//!   (nsdelta.rs), which N's commit takes whole. Full records compressed
//!   meanwhile are placed and written already (early_place.rs), but nothing
//!   durable points to them before N commits.
//! * `QUIESCING`: the driver took N's dirty-inode set and freezes each file's open layer into
//!   its syncing layer (per-file lock, one at a time: a write either lands wholly
//!   in N or wholly in N+1). N+1 is OPEN from the moment N starts quiescing.
//! * `SYNCING`: the stages of sync.rs run on N's frozen layers: cut → compress → allocate
//!   → issue → flush → commit → release. Writers keep filling N+1 meanwhile
//!   (double buffering); only one txg syncs at a time.
//! * `COMMITTED`: N's extent pointers, sizes, freed space and every namespace change before
//!   the commit are durable (one durable redb commit). `fsync`/`sync` waiters
//!   for N return.
//!
//! Transitions OPEN → QUIESCING happen when any of these holds (checked by the driver):
//!   - someone waits for N (`fsync`, `sync`, `close`): `want >= N`;
//!   - dirty data reached `SYNC_DIRTY_PERCENT` of `max_dirty_bytes` (ZFS
//!     zfs_dirty_data_sync_percent);
//!   - `early::EARLY_SYNC_BYTES` of records were compressed early and wait for a txg;
//!   - the namespace delta holds more than `nsdelta::MAX_OPEN_ROWS` rows;
//!   - the txg has been open `txg_timeout` (default 5 s) and something changed.
//!
//! A failed sync moves the pool to one of two halted states; in both the pool on disk stays
//! at the last committed txg and the failed txg's data stays readable from memory:
//! * `STALLED`: the txg found no room before its commit stage (placement, a device's host
//!   filesystem full at write or fdatasync): nothing of it is referenced, so the
//!   driver tries the same frozen layers again every `RETRY_INTERVAL` (placing
//!   and writing them anew) and once more at shutdown; writes, syncs and fsyncs
//!   get NoSpace meanwhile. Success → the txg is COMMITTED and the pool runs on:
//!   another program filling a device's filesystem for a while loses nothing.
//! * `SUSPENDED`: any other failure (device I/O error, a failed commit), a stall still
//!   failing at shutdown, or a panic anywhere in the engine or a request handler
//!   (fault.rs; `TxgCtl::suspend`, from any thread, also in the middle of a
//!   sync, which then fails before its commit stage): nothing more is synced,
//!   every later write/fsync reports the error. Final: nothing leaves it.
//!
//! Tunables: `OpenOptions::txg_timeout`, `OpenOptions::max_dirty_bytes`,
//! `SYNC_DIRTY_PERCENT` (20), `RETRY_INTERVAL` (1 s), the throttle in throttle.rs.

use crate::dirty::Layer;
use crate::inner::Inner;
use crate::sync;
use parking_lot::{Condvar, Mutex};
#[allow(unused_imports)]
use redb::{ReadableDatabase, ReadableTable};
use squeezefs_meta::Ino;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Start syncing when dirty data passes this percentage of `max_dirty_bytes`.
pub const SYNC_DIRTY_PERCENT: u64 = 20;
/// A STALLED txg is tried again this often.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// no txg between OPEN and COMMITTED besides the open one
    Idle,
    Quiescing(u64),
    Syncing(u64),
}

pub struct TxgState {
    /// the OPEN txg
    pub open: u64,
    /// last COMMITTED txg
    pub synced: u64,
    /// highest txg someone waits for
    pub want: u64,
    pub phase: Phase,
    pub error: Option<String>,
    /// `error` is a STALLED txg's (no room; retried), not a suspension
    pub stalled: bool,
    pub shutdown: bool,
    /// exit without syncing (engine dropped without close)
    pub abandon: bool,
    pub exited: bool,
    pub opened_at: Instant,
    /// a metadata change went into the namespace delta since the last quiesce
    pub meta_dirty: bool,
    /// the namespace delta is large: commit without waiting for the timeout
    pub meta_full: bool,
}

pub struct TxgCtl {
    st: Mutex<TxgState>,
    wake: Condvar,
    done: Condvar,
}

impl TxgCtl {
    pub fn new(last_txg: u64) -> TxgCtl {
        TxgCtl {
            st: Mutex::new(TxgState {
                open: last_txg + 1,
                synced: last_txg,
                want: 0,
                phase: Phase::Idle,
                error: None,
                stalled: false,
                shutdown: false,
                abandon: false,
                exited: false,
                opened_at: Instant::now(),
                meta_dirty: false,
                meta_full: false,
            }),
            wake: Condvar::new(),
            done: Condvar::new(),
        }
    }

    pub fn error(&self) -> Option<String> {
        self.st.lock().error.clone()
    }

    /// The error a halted pool gives writers and syncs: NoSpace while a txg is STALLED,
    /// Suspended after any other failure; `None` when running.
    pub fn halted(&self) -> Option<crate::EngineError> {
        Self::halt_error(&self.st.lock())
    }

    fn halt_error(st: &TxgState) -> Option<crate::EngineError> {
        let e = st.error.as_ref()?;
        Some(if st.stalled { crate::EngineError::NoSpace } else { crate::EngineError::Suspended(e.clone()) })
    }

    fn is_suspended(st: &TxgState) -> bool {
        st.error.is_some() && !st.stalled
    }

    /// The error of a SUSPENDED pool; `None` while running or STALLED.
    pub fn suspension(&self) -> Option<crate::EngineError> {
        let st = self.st.lock();
        Self::is_suspended(&st).then(|| Self::halt_error(&st)).flatten()
    }

    /// → SUSPENDED (from any state; a suspension already there keeps its reason). A sync
    /// in flight fails before its commit stage; waiters wake up to the error.
    pub fn suspend(&self, why: String) {
        let mut st = self.st.lock();
        if !Self::is_suspended(&st) {
            st.error = Some(why);
            st.stalled = false;
        }
        self.done.notify_all();
        self.wake.notify_one();
    }

    pub fn synced(&self) -> u64 {
        self.st.lock().synced
    }

    pub fn note_meta_change(&self) {
        self.st.lock().meta_dirty = true;
    }

    /// The namespace delta is large: have the driver commit the open txg now.
    pub fn request_commit(&self) {
        let mut st = self.st.lock();
        if !st.meta_full {
            st.meta_full = true;
            self.wake.notify_one();
        }
    }

    /// Wake the driver (dirty threshold reached).
    pub fn kick(&self) {
        self.wake.notify_one();
    }

    /// Make every change made before this call durable: wait for the commit of the txg
    /// holding them.
    pub fn sync_and_wait(&self, inner: &Inner) -> crate::Result<()> {
        let mut st = self.st.lock();
        if let Some(e) = Self::halt_error(&st) {
            return Err(e);
        }
        if st.exited {
            return Err(crate::EngineError::Closed);
        }
        let open_clean = !st.meta_dirty && inner.dirty_set.lock().is_empty();
        let target = match (open_clean, st.phase) {
            (true, Phase::Idle) => return Ok(()),
            // nothing changed since N was frozen: N's commit suffices
            (true, Phase::Quiescing(n) | Phase::Syncing(n)) => n,
            (false, _) => st.open,
        };
        st.want = st.want.max(target);
        self.wake.notify_one();
        while st.synced < target {
            if let Some(e) = Self::halt_error(&st) {
                return Err(e);
            }
            if st.exited {
                return Err(crate::EngineError::Closed);
            }
            self.done.wait(&mut st);
        }
        Ok(())
    }

    /// Return once every change made to `ino` before this call will commit in the same txg
    /// as a namespace change made after it, or in an earlier one (see
    /// `Engine::order_data_before_rename`). The namespace delta is taken by the commit of
    /// the txg in flight, but data changed after that txg's freeze belongs to the next one;
    /// so while a txg N is quiescing or syncing and `ino` has changes in the open txg
    /// (`dirty_set`, conservatively including changes N will still freeze), wait for N's
    /// commit. No txg in flight, or no open changes: the next commit takes both anyway.
    /// Without forcing a txg: the wait is at most the one already under way.
    pub fn wait_for_txg_in_flight_if_dirty(&self, inner: &Inner, ino: Ino) -> crate::Result<()> {
        let mut st = self.st.lock();
        let n = match st.phase {
            Phase::Idle => return Ok(()),
            Phase::Quiescing(n) | Phase::Syncing(n) => n,
        };
        if !inner.dirty_set.lock().contains(&ino) {
            return Ok(());
        }
        while st.synced < n {
            if let Some(e) = Self::halt_error(&st) {
                return Err(e);
            }
            if st.exited {
                return Err(crate::EngineError::Closed);
            }
            self.done.wait(&mut st);
        }
        Ok(())
    }

    /// Ask the driver to exit at once without syncing.
    pub fn abandon(&self) {
        let mut st = self.st.lock();
        st.abandon = true;
        self.wake.notify_one();
        while !st.exited {
            self.done.wait(&mut st);
        }
    }

    /// Ask the driver to sync what is left and exit; waits for it.
    pub fn shutdown(&self) {
        let mut st = self.st.lock();
        st.shutdown = true;
        self.wake.notify_one();
        while !st.exited {
            self.done.wait(&mut st);
        }
    }
}

/// A txg's frozen layers: (inode, its syncing layer) per file.
pub type Frozen = Vec<(Ino, Arc<Layer>)>;

/// What the driver does next.
enum Next {
    Exit,
    /// quiesce and sync this (newly closed) txg
    Sync(u64),
    /// sync the STALLED txg again
    Retry,
}

/// The driver thread: runs txgs one after another ([`drive`]). A panic in it suspends the
/// pool and ends the thread as an exit would, so waiters and `close` see an error instead
/// of waiting for it forever.
pub fn driver(inner: Arc<Inner>) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drive(&inner))) {
        inner.caught_panic("the txg driver", &*p);
        let mut st = inner.txg.st.lock();
        st.phase = Phase::Idle;
        st.exited = true;
        inner.txg.done.notify_all();
        drop(st);
        inner.throttle_cv.notify_all();
    }
}

fn drive(inner: &Arc<Inner>) {
    let ctl = &inner.txg;
    // the STALLED txg and its frozen layers, kept for the next try
    let mut stalled: Option<(u64, Frozen)> = None;
    let mut last_try = Instant::now();
    let mut final_try = false;
    loop {
        let next = {
            let mut st = ctl.st.lock();
            loop {
                let has_work = st.meta_dirty || !inner.dirty_set.lock().is_empty();
                if st.abandon {
                    break Next::Exit;
                }
                if stalled.is_some() && st.stalled {
                    // once more at shutdown, then give up (the pool is then SUSPENDED)
                    if st.shutdown {
                        if final_try {
                            break Next::Exit;
                        }
                        final_try = true;
                        break Next::Retry;
                    }
                    let since = last_try.elapsed();
                    if since >= RETRY_INTERVAL {
                        break Next::Retry;
                    }
                    ctl.done.notify_all();
                    ctl.wake.wait_for(&mut st, RETRY_INTERVAL - since);
                    continue;
                }
                if st.shutdown && (!has_work || st.error.is_some()) {
                    break Next::Exit;
                }
                if st.error.is_some() {
                    // suspended: wake waiters (they see the error) and idle
                    ctl.done.notify_all();
                    ctl.wake.wait_for(&mut st, Duration::from_secs(1));
                    continue;
                }
                if st.shutdown || st.want >= st.open {
                    break Next::Sync(open_next(&mut st));
                }
                let dirty = inner.dirty_bytes.load(Ordering::Relaxed);
                let threshold = inner.opts.max_dirty_bytes / 100 * SYNC_DIRTY_PERCENT;
                // compressed early and waiting: write it out, so its buffers return to the pool
                let ready = inner.compress_q.counters.ready.load(Ordering::Relaxed);
                if has_work && (dirty >= threshold || ready >= crate::early::EARLY_SYNC_BYTES || st.meta_full) {
                    break Next::Sync(open_next(&mut st));
                }
                let elapsed = st.opened_at.elapsed();
                if elapsed >= inner.opts.txg_timeout {
                    if has_work {
                        break Next::Sync(open_next(&mut st));
                    }
                    // idle: early placements given up since the last txg go back now (and
                    // their host space with them), not only when the next txg starts
                    parking_lot::MutexGuard::unlocked(&mut st, || crate::early_place::reclaim(inner, false));
                    st.opened_at = Instant::now();
                    continue;
                }
                ctl.wake.wait_for(&mut st, inner.opts.txg_timeout - elapsed);
            }
        };
        let (txg, frozen) = match next {
            Next::Exit => {
                let (abandon, failed) = {
                    let st = ctl.st.lock();
                    (st.abandon, st.error.is_some())
                };
                if !abandon && !failed {
                    // early placements given up since the last txg: their host space back
                    crate::early_place::reclaim(inner, true);
                }
                let mut st = ctl.st.lock();
                if let Some((txg, _)) = stalled.as_ref().filter(|_| st.stalled) {
                    // the last try failed too: the txg's changes are lost with the process
                    st.stalled = false;
                    log::error!("txg {txg}: still no room at shutdown; its changes are not saved");
                }
                st.exited = true;
                ctl.done.notify_all();
                return;
            }
            Next::Retry => stalled.take().expect("a stalled txg to retry"),
            Next::Sync(txg) => (txg, quiesce(inner)),
        };
        inner.syncing_files.store(frozen.len() as u64, Ordering::Relaxed);
        ctl.st.lock().phase = Phase::Syncing(txg);
        inner.faults.hit(crate::fault::Site::TxgDriver);
        let r = sync::sync_txg(inner, txg, frozen);
        last_try = Instant::now();
        inner.syncing_files.store(0, Ordering::Relaxed);
        let mut st = ctl.st.lock();
        st.phase = Phase::Idle;
        match r {
            Ok(()) => {
                st.synced = txg;
                if st.stalled {
                    log::warn!("txg {txg} committed after waiting for room; the pool runs again");
                    st.error = None;
                    st.stalled = false;
                }
            }
            Err(sync::SyncFailure { error, .. }) if TxgCtl::is_suspended(&st) => {
                log::error!("txg {txg} failed, pool suspended at txg {}: {error}", st.synced);
            }
            Err(sync::SyncFailure { error, retry: Some(frozen) }) => {
                if !st.stalled {
                    log::warn!(
                        "txg {txg}: {error}; trying again every {} s (writes and syncs get ENOSPC until it fits)",
                        RETRY_INTERVAL.as_secs()
                    );
                }
                st.error = Some(error.to_string());
                st.stalled = true;
                stalled = Some((txg, frozen));
            }
            Err(sync::SyncFailure { error, retry: None }) => {
                log::error!("txg {txg} failed, pool suspended at txg {}: {error}", st.synced);
                st.error = Some(error.to_string());
                st.stalled = false;
            }
        }
        ctl.done.notify_all();
        drop(st);
        inner.throttle_cv.notify_all();
    }
}

/// OPEN → QUIESCING for the open txg: returns its number; the next one opens.
fn open_next(st: &mut TxgState) -> u64 {
    let txg = st.open;
    st.open += 1;
    st.phase = Phase::Quiescing(txg);
    st.meta_dirty = false;
    st.meta_full = false;
    st.opened_at = Instant::now();
    txg
}

/// QUIESCING: freeze the open layer of every dirty file into its syncing layer.
fn quiesce(inner: &Inner) -> Vec<(Ino, Arc<Layer>)> {
    let inos = std::mem::take(&mut *inner.dirty_set.lock());
    let mut inos: Vec<Ino> = inos.into_iter().collect();
    inos.sort_unstable();
    let rs = inner.recordsize;
    let mut out = Vec::with_capacity(inos.len());
    for ino in inos {
        let Some(f) = inner.files.get(ino) else { continue };
        let mut fd = f.lock();
        if fd.retired || !fd.open_dirty {
            continue;
        }
        debug_assert!(fd.syncing.is_none(), "one txg syncs at a time");
        let mut layer = std::mem::take(&mut fd.open);
        layer.size = fd.size;
        layer.policy = fd.policy;
        normalize(&mut layer, rs, inner);
        let layer = Arc::new(layer);
        fd.syncing = Some(layer.clone());
        fd.open_dirty = false;
        // records moved out of the open layer: a write that looked at the open layer before
        // this freeze must redo its read-modify-write decisions (see write.rs)
        fd.gen += 1;
        out.push((ino, layer));
    }
    out
}

/// Give every data record exactly its logical length (zeros after a short buffer).
fn normalize(layer: &mut Layer, rs: u64, inner: &Inner) {
    let size = layer.size;
    let mut grow: i64 = 0;
    for (&idx, rec) in layer.recs.iter_mut() {
        if let crate::dirty::Rec::Data(d) = rec {
            let want = crate::units::record_len_in_file(idx, size, rs) as usize;
            if want == 0 {
                grow -= d.len() as i64;
                *rec = crate::dirty::Rec::Hole;
                continue;
            }
            if d.len() != want {
                // changes the bytes: drops any early compression of the old ones. Records
                // held packed are full and set_size cuts them, so they are never here; a
                // failed decode (impossible for our own output) keeps the record as it is
                match d.buf_mut(inner.workspaces()) {
                    Ok(b) => {
                        grow += want as i64 - b.len() as i64;
                        b.resize(want, 0);
                    }
                    Err(e) => log::error!("record {idx}: cannot resize: {e}"),
                }
            }
        }
    }
    layer.bytes = (layer.bytes as i64 + grow) as u64;
    if grow >= 0 {
        inner.dirty_bytes.fetch_add(grow as u64, Ordering::Relaxed);
    } else {
        inner.dirty_bytes.fetch_sub((-grow) as u64, Ordering::Relaxed);
    }
}
