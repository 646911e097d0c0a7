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
//! * `SYNCING`: the stages of sync/stages.rs (`STAGES`) run on N's frozen layers: cut → bundle →
//!   compress → place → write → flush → commit → release. Writers keep filling N+1 meanwhile
//!   (double buffering); only one txg syncs at a time.
//! * `COMMITTED`: N's extent pointers, sizes, freed space and every namespace change before
//!   the commit are durable (one durable redb commit). `fsync`/`sync` waiters
//!   for N return.
//!
//! Transitions OPEN → QUIESCING happen when any of these holds (checked by the driver):
//!   - someone waits for N (`fsync`, `sync`, `close`): `want >= N`;
//!   - dirty data reached `SYNC_DIRTY_PERCENT` of `max_dirty_bytes` (ZFS
//!     zfs_dirty_data_sync_percent);
//!   - `compress::EARLY_SYNC_BYTES` of records were compressed early and wait for a txg;
//!   - the namespace delta holds more than `OpenOptions::max_delta_rows` rows;
//!   - the txg has been open `txg_timeout` (default 5 s) and something changed.
//!
//! A failed sync moves the pool to one of two halted states; in both the pool on disk stays
//! at the last committed txg and the failed txg's data stays readable from memory:
//! * `STALLED`: the txg found no room before its commit stage (placement, a device's host
//!   filesystem full at write or fdatasync), or an object device's store did not
//!   take the data within its stall timeout (the device keeps it): nothing of it
//!   is referenced, so the driver tries the same frozen layers again every
//!   `RETRY_INTERVAL` (placing and writing them anew) and once more at shutdown;
//!   writes, syncs and fsyncs get NoSpace (EIO for a store) meanwhile. Success →
//!   the txg is COMMITTED and the pool runs on: another program filling a
//!   device's filesystem, or a store away for a while, loses nothing.
//! * `SUSPENDED`: any other failure (device I/O error, a failed commit), a stall still
//!   failing at shutdown, or a panic anywhere in the engine or a request handler
//!   (fault.rs; `TxgCtl::suspend`, from any thread, also in the middle of a
//!   sync, which then fails before its commit stage): nothing more is synced,
//!   every later write/fsync reports the error. Final: nothing leaves it.
//!
//! Tunables: `OpenOptions::txg_timeout`, `OpenOptions::max_dirty_bytes`,
//! `SYNC_DIRTY_PERCENT` (20), `RETRY_INTERVAL` (1 s), the throttle in throttle.rs.

use crate::base::locks::{Mutex, Rank};
use crate::txg::dirty::{DirtyData, Layer};
use parking_lot::Condvar;
use squeezefs_meta::Ino;
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

/// Why the pool stopped syncing (see the block comment).
#[derive(Clone, Debug)]
pub enum Halt {
    /// STALLED: the txg found no room before its commit stage; it is tried again
    Stalled(Arc<crate::EngineError>),
    /// SUSPENDED: nothing more is synced
    Suspended(Arc<crate::EngineError>),
}

pub struct TxgState {
    /// the OPEN txg
    pub open: u64,
    /// last COMMITTED txg
    pub synced: u64,
    /// highest txg someone waits for
    pub want: u64,
    pub phase: Phase,
    /// STALLED or SUSPENDED, with the error that failed the txg; `None` while running
    pub halt: Option<Halt>,
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
            st: Mutex::new(
                Rank::TxgState,
                TxgState {
                    open: last_txg + 1,
                    synced: last_txg,
                    want: 0,
                    phase: Phase::Idle,
                    halt: None,
                    shutdown: false,
                    abandon: false,
                    exited: false,
                    opened_at: Instant::now(),
                    meta_dirty: false,
                    meta_full: false,
                },
            ),
            wake: Condvar::new(),
            done: Condvar::new(),
        }
    }

    /// The error that halted the pool (STALLED or SUSPENDED), if it is halted.
    pub fn halt_cause(&self) -> Option<Arc<crate::EngineError>> {
        match &self.st.lock().halt {
            Some(Halt::Stalled(e) | Halt::Suspended(e)) => Some(e.clone()),
            None => None,
        }
    }

    /// The error a halted pool gives writers and syncs: NoSpace (the store's I/O error for
    /// an object store away) while a txg is STALLED,
    /// Suspended after any other failure; `None` when running.
    pub fn halted(&self) -> Option<crate::EngineError> {
        Self::halt_error(&self.st.lock())
    }

    fn halt_error(st: &TxgState) -> Option<crate::EngineError> {
        Some(match st.halt.as_ref()? {
            Halt::Stalled(e) => match &**e {
                crate::EngineError::Io(io) => crate::EngineError::Io(io.clone()),
                _ => crate::EngineError::NoSpace,
            },
            Halt::Suspended(e) => crate::EngineError::Suspended(e.clone()),
        })
    }

    fn is_suspended(st: &TxgState) -> bool {
        matches!(st.halt, Some(Halt::Suspended(_)))
    }

    /// The error of a SUSPENDED pool; `None` while running or STALLED.
    pub fn suspension(&self) -> Option<crate::EngineError> {
        let st = self.st.lock();
        Self::is_suspended(&st).then(|| Self::halt_error(&st)).flatten()
    }

    /// → SUSPENDED with `cause` (from any state; a suspension already there keeps its
    /// cause). A sync in flight fails before its commit stage; waiters wake up to the error.
    pub fn suspend(&self, cause: Arc<crate::EngineError>) {
        let mut st = self.st.lock();
        if !Self::is_suspended(&st) {
            st.halt = Some(Halt::Suspended(cause));
        }
        self.done.notify_all();
        self.wake.notify_one();
    }

    /// The driver thread ended by a panic (driver.rs): waiters see `exited`.
    pub fn driver_died(&self) {
        let mut st = self.st.lock();
        st.phase = Phase::Idle;
        st.exited = true;
        self.done.notify_all();
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
    pub fn sync_and_wait(&self, dirty: &DirtyData) -> crate::Result<()> {
        let mut st = self.st.lock();
        if let Some(e) = Self::halt_error(&st) {
            return Err(e);
        }
        if st.exited {
            return Err(crate::EngineError::Closed);
        }
        let open_clean = !st.meta_dirty && !dirty.any_changed();
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
            st.wait(&self.done);
        }
        Ok(())
    }

    /// Return once every change made to `ino` before this call will commit in the same txg
    /// as a namespace change made after it, or in an earlier one (see
    /// `Engine::order_data_before_rename`). The namespace delta is taken by the commit of
    /// the txg in flight, but data changed after that txg's freeze belongs to the next one;
    /// so while a txg N is quiescing or syncing and `ino` has changes in the open txg
    /// (`DirtyData::is_changed`, conservatively including changes N will still freeze), wait for N's
    /// commit. No txg in flight, or no open changes: the next commit takes both anyway.
    /// Without forcing a txg: the wait is at most the one already under way.
    pub fn wait_for_txg_in_flight_if_dirty(&self, dirty: &DirtyData, ino: Ino) -> crate::Result<()> {
        let mut st = self.st.lock();
        let n = match st.phase {
            Phase::Idle => return Ok(()),
            Phase::Quiescing(n) | Phase::Syncing(n) => n,
        };
        if !dirty.is_changed(ino) {
            return Ok(());
        }
        while st.synced < n {
            if let Some(e) = Self::halt_error(&st) {
                return Err(e);
            }
            if st.exited {
                return Err(crate::EngineError::Closed);
            }
            st.wait(&self.done);
        }
        Ok(())
    }

    /// Ask the driver to exit at once without syncing.
    pub fn abandon(&self) {
        let mut st = self.st.lock();
        st.abandon = true;
        self.wake.notify_one();
        while !st.exited {
            st.wait(&self.done);
        }
    }

    /// Ask the driver to sync what is left and exit; waits for it.
    pub fn shutdown(&self) {
        let mut st = self.st.lock();
        st.shutdown = true;
        self.wake.notify_one();
        while !st.exited {
            st.wait(&self.done);
        }
    }
}

/// A txg's frozen layers: (inode, its syncing layer) per file.
pub type Frozen = Vec<(Ino, Arc<Layer>)>;

/// Why a txg failed, and whether trying it again later is safe: a txg that found no room
/// before its commit stage wrote nothing any pointer refers to (its placements were given
/// back), so its frozen layers can be synced again once there is room (STALLED).
pub struct SyncFailure {
    pub error: crate::EngineError,
    /// the frozen layers, handed back when the txg may be tried again
    pub retry: Option<Frozen>,
}

/// What the driver asks of the engine: the figures its transitions look at, and the work
/// of the QUIESCING and SYNCING states (driver.rs).
pub trait TxgWork {
    /// The open txg holds data changes (namespace changes are `TxgState::meta_dirty`).
    fn data_changed(&self) -> bool;
    /// Dirty bytes, and the level at which the open txg closes.
    fn dirty_bytes(&self) -> (u64, u64);
    /// Record bytes compressed early and waiting for a txg.
    fn ready_bytes(&self) -> u64;
    fn txg_timeout(&self) -> Duration;
    /// Nothing to sync at a timeout: give back what early placement gave up meanwhile.
    fn idle(&self);
    /// The driver exits after its last commit: give back what early placement gave up,
    /// waiting for their writes.
    fn before_exit(&self);
    /// QUIESCING: freeze the open layers of the files changed in the txg.
    fn quiesce(&self) -> Frozen;
    /// SYNCING: the stages of sync/stages.rs.
    fn sync(&self, txg: u64, frozen: Frozen) -> std::result::Result<(), SyncFailure>;
    /// A txg ended (committed or failed): wake writers waiting for dirty memory.
    fn txg_ended(&self);
}

/// What the driver does next.
enum Next {
    Exit,
    /// quiesce and sync this (newly closed) txg
    Sync(u64),
    /// sync the STALLED txg again
    Retry,
}

/// The driver: one thread per engine, runs txgs one after another through the states of
/// the block comment.
pub fn drive(ctl: &TxgCtl, work: &impl TxgWork) {
    // the STALLED txg and its frozen layers, kept for the next try
    let mut stalled: Option<(u64, Frozen)> = None;
    let mut last_try = Instant::now();
    let mut final_try = false;
    loop {
        let next = ctl.next(work, stalled.is_some(), &mut final_try, last_try);
        let (txg, frozen) = match next {
            Next::Exit => {
                ctl.exit(work, stalled.as_ref().map(|(txg, _)| *txg));
                return;
            }
            Next::Retry => stalled.take().expect("a stalled txg to retry"),
            Next::Sync(txg) => (txg, work.quiesce()),
        };
        ctl.st.lock().phase = Phase::Syncing(txg);
        let r = work.sync(txg, frozen);
        last_try = Instant::now();
        stalled = ctl.synced_txg(txg, r);
        work.txg_ended();
    }
}

impl TxgCtl {
    /// Wait until the open txg must close (OPEN → QUIESCING), the STALLED one be tried
    /// again, or the driver exit.
    fn next(&self, work: &impl TxgWork, stalled: bool, final_try: &mut bool, last_try: Instant) -> Next {
        let mut st = self.st.lock();
        loop {
            let has_work = st.meta_dirty || work.data_changed();
            if st.abandon {
                return Next::Exit;
            }
            if stalled && matches!(st.halt, Some(Halt::Stalled(_))) {
                // once more at shutdown, then give up (the pool is then SUSPENDED)
                if st.shutdown {
                    if *final_try {
                        return Next::Exit;
                    }
                    *final_try = true;
                    return Next::Retry;
                }
                let since = last_try.elapsed();
                if since >= RETRY_INTERVAL {
                    return Next::Retry;
                }
                self.done.notify_all();
                st.wait_for(&self.wake, RETRY_INTERVAL - since);
                continue;
            }
            if st.shutdown && (!has_work || st.halt.is_some()) {
                return Next::Exit;
            }
            if st.halt.is_some() {
                // suspended: wake waiters (they see the error) and idle
                self.done.notify_all();
                st.wait_for(&self.wake, Duration::from_secs(1));
                continue;
            }
            if st.shutdown || st.want >= st.open {
                return Next::Sync(open_next(&mut st));
            }
            let (dirty, threshold) = work.dirty_bytes();
            // compressed early and waiting: write it out, so its buffers return to the pool
            let ready = work.ready_bytes();
            if has_work && (dirty >= threshold || ready >= crate::compress::queue::EARLY_SYNC_BYTES || st.meta_full) {
                return Next::Sync(open_next(&mut st));
            }
            let elapsed = st.opened_at.elapsed();
            let timeout = work.txg_timeout();
            if elapsed >= timeout {
                if has_work {
                    return Next::Sync(open_next(&mut st));
                }
                // idle: early placements given up since the last txg go back now (and
                // their host space with them), not only when the next txg starts
                st.unlocked(|| work.idle());
                st.opened_at = Instant::now();
                continue;
            }
            st.wait_for(&self.wake, timeout - elapsed);
        }
    }

    /// SYNCING → COMMITTED, STALLED or SUSPENDED with the outcome `r` of txg `txg`; returns
    /// the frozen layers to try again (STALLED).
    fn synced_txg(&self, txg: u64, r: std::result::Result<(), SyncFailure>) -> Option<(u64, Frozen)> {
        let mut st = self.st.lock();
        st.phase = Phase::Idle;
        let mut stalled = None;
        match r {
            Ok(()) => {
                st.synced = txg;
                // a suspension meanwhile stays (it failed no stage of this txg)
                if matches!(st.halt, Some(Halt::Stalled(_))) {
                    log::warn!("txg {txg} committed after it was held; the pool runs again");
                    st.halt = None;
                }
            }
            Err(SyncFailure { error, .. }) if Self::is_suspended(&st) => {
                log::error!("txg {txg} failed, pool suspended at txg {}: {error}", st.synced);
            }
            Err(SyncFailure { error, retry: Some(frozen) }) => {
                if !matches!(st.halt, Some(Halt::Stalled(_))) {
                    let until = if matches!(error, crate::EngineError::Io(_)) {
                        "EIO until the store takes the data"
                    } else {
                        "ENOSPC until it fits"
                    };
                    log::warn!(
                        "txg {txg}: {error}; trying again every {} s (writes and syncs get {until})",
                        RETRY_INTERVAL.as_secs()
                    );
                }
                st.halt = Some(Halt::Stalled(Arc::new(error)));
                stalled = Some((txg, frozen));
            }
            Err(SyncFailure { error, retry: None }) => {
                log::error!("txg {txg} failed, pool suspended at txg {}: {error}", st.synced);
                st.halt = Some(Halt::Suspended(Arc::new(error)));
            }
        }
        self.done.notify_all();
        stalled
    }

    /// The driver exits: a txg still STALLED (`stalled`) is given up (SUSPENDED); waiters
    /// wake up to `exited`.
    fn exit(&self, work: &impl TxgWork, stalled: Option<u64>) {
        let (abandon, failed) = {
            let st = self.st.lock();
            (st.abandon, st.halt.is_some())
        };
        if !abandon && !failed {
            work.before_exit();
        }
        let mut st = self.st.lock();
        if let Some(txg) = stalled.filter(|_| matches!(st.halt, Some(Halt::Stalled(_)))) {
            // the last try failed too: the txg's changes are lost with the process
            if let Some(Halt::Stalled(e)) = st.halt.take() {
                st.halt = Some(Halt::Suspended(e));
            }
            log::error!("txg {txg}: still held at shutdown (no room, or the store away); its changes are not saved");
        }
        st.exited = true;
        self.done.notify_all();
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
