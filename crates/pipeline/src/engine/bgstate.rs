//! What the engine keeps for background compression (the fs core's worker; docs/design.md
//! §15): when the last foreground operation happened, and the worker's cursor waiting for
//! the next commit.
//!
//! It also knows the last txg that committed file data, so that a background pass starts
//! only when there is data it has not looked at.
//!
//! Foreground operations are the API calls that serve applications: data reads and writes,
//! size changes, namespace and attribute changes (`Engine::touch` in each). Lookups,
//! listings and extended-attribute reads do not count: the background worker makes them
//! itself while it walks the tree, and a walk must not keep the pool from looking idle.
//!
//! The cursor (`squeezefs_meta::BgCursor`) is written into the store by the commit of the
//! next txg (commit.rs), with the compat feature `COMPAT_BACKGROUND`; until then reads get
//! the pending one.

use crate::base::locks::{Mutex, Rank};
use squeezefs_meta::BgCursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct BgState {
    epoch: Instant,
    /// nanoseconds from `epoch` to the last foreground operation's start
    last_ns: AtomicU64,
    /// a cursor saved and not committed yet
    pending: Mutex<Option<BgCursor>>,
    /// the last txg whose commit changed file data (the pool's last txg at open: what
    /// happened before is not known)
    data_txg: AtomicU64,
}

impl Default for BgState {
    fn default() -> Self {
        BgState::new(0)
    }
}

impl BgState {
    /// State of an engine opened at txg `last_txg`.
    pub fn new(last_txg: u64) -> BgState {
        BgState {
            epoch: Instant::now(),
            last_ns: AtomicU64::new(0),
            pending: Mutex::new(Rank::Leaf, None),
            data_txg: AtomicU64::new(last_txg),
        }
    }

    /// Txg `txg` committed changes of file data (sync/stages.rs, after its commit stage).
    pub fn data_committed(&self, txg: u64) {
        self.data_txg.fetch_max(txg, Ordering::Relaxed);
    }

    /// The last txg that committed changes of file data: a background pass has nothing new
    /// to look at while its floor is at or above it.
    pub fn data_txg(&self) -> u64 {
        self.data_txg.load(Ordering::Relaxed)
    }

    /// A foreground operation starts now.
    pub fn touch(&self) {
        let ns = self.epoch.elapsed().as_nanos() as u64;
        self.last_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Time since the last foreground operation started (since the engine opened when there
    /// was none).
    pub fn idle_for(&self) -> Duration {
        let now = self.epoch.elapsed().as_nanos() as u64;
        Duration::from_nanos(now.saturating_sub(self.last_ns.load(Ordering::Relaxed)))
    }

    /// Keep `c` for the next commit (a newer save replaces an older one).
    pub fn save(&self, c: BgCursor) {
        *self.pending.lock() = Some(c);
    }

    /// The cursor not committed yet, if any.
    pub fn pending(&self) -> Option<BgCursor> {
        self.pending.lock().clone()
    }

    /// The cursor for the commit starting now (commit.rs); `None` when none was saved
    /// since the last one.
    pub fn take(&self) -> Option<BgCursor> {
        self.pending.lock().take()
    }

    /// The commit that took `c` failed: keep it for the next one unless a newer one came.
    pub fn put_back(&self, c: BgCursor) {
        let mut p = self.pending.lock();
        if p.is_none() {
            *p = Some(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_time_restarts_at_each_touch_and_cursors_wait_for_a_commit() {
        let s = BgState::default();
        std::thread::sleep(Duration::from_millis(20));
        assert!(s.idle_for() >= Duration::from_millis(20));
        s.touch();
        assert!(s.idle_for() < Duration::from_millis(20));
        assert!(s.take().is_none());
        let c = BgCursor { passes: 3, ..Default::default() };
        s.save(c.clone());
        assert_eq!(s.pending(), Some(c.clone()));
        assert_eq!(s.take(), Some(c.clone()));
        assert!(s.pending().is_none());
        s.put_back(c.clone());
        let newer = BgCursor { passes: 4, ..Default::default() };
        s.save(newer.clone());
        s.put_back(c);
        assert_eq!(s.take(), Some(newer), "a failed commit's cursor never replaces a newer one");
    }
}
