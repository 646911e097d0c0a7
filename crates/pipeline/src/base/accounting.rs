//! Dirty-data accounting: the one owner of the counters that write admission, the write
//! throttle and the txg driver read, and the only code that changes them.
//!
//! Counters (bytes):
//! * `dirty`: record buffers held by open and syncing layers (each layer's [`LayerBytes`])
//!   plus the compressed output of early results that are DONE and not yet taken
//!   (early.rs). The throttle and the sync threshold compare it with `max_dirty_bytes`.
//! * `placed`: stored bytes of records placed on the devices whose dirty bytes are still
//!   counted — the syncing txg's placements until just before its release stage, early
//!   placements until their txg commits or they are given up. Admission subtracts it from
//!   `dirty`, since those bytes already left the devices' free space.
//! * `ready`: record bytes compressed early and not yet taken by a txg (DONE results and
//!   records held PACKED); reaching `early::EARLY_SYNC_BYTES` closes the open txg.
//! * `backlog`: record bytes queued for background compression; writers wait above a bound
//!   (`wait_backlog`).
//!
//! Who holds what: a layer's dirty bytes are its [`LayerBytes`], changed only through
//! [`Accounting::resize_layer`] and given back by [`Accounting::release_layer`] (the release
//! stage, for a frozen layer) or [`Accounting::drop_layer`] (an open layer thrown away). Every
//! other holder keeps a [`Charge`] against one counter: taken out when its holder says so
//! (`take`) or when it is dropped, exactly once.
//!
//! Invariants: each counter is the sum of what its holders have charged; so a counter
//! never goes below zero, and a subtraction that would is a double release — asserted in
//! debug builds (in release builds the counter stops at zero and the error is logged).
//! Order: `placed` is taken out before the dirty bytes it overlaps are released, so a
//! reader that loads `dirty` first and `placed` second never subtracts bytes the release
//! already took out (write/data.rs `reserve`).
//!
//! Statistics (monotonic, for `Engine::early_stats`): records packed by a worker or by a
//! writer, records placed early.

use crate::base::locks::{Mutex, Rank};
use parking_lot::Condvar;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Which counter a [`Charge`] is held against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    Dirty,
    Placed,
    Ready,
    Backlog,
}

pub struct Accounting {
    dirty: AtomicU64,
    placed: AtomicU64,
    ready: AtomicU64,
    backlog: AtomicU64,
    packed_by_worker: AtomicU64,
    packed_by_caller: AtomicU64,
    placed_early: AtomicU64,
    /// writers waiting for the backlog to fall (`wait_backlog`)
    backlog_lock: Mutex<()>,
    backlog_cv: Condvar,
}

impl Default for Accounting {
    fn default() -> Self {
        Accounting {
            dirty: AtomicU64::new(0),
            placed: AtomicU64::new(0),
            ready: AtomicU64::new(0),
            backlog: AtomicU64::new(0),
            packed_by_worker: AtomicU64::new(0),
            packed_by_caller: AtomicU64::new(0),
            placed_early: AtomicU64::new(0),
            backlog_lock: Mutex::new(Rank::Backlog, ()),
            backlog_cv: Condvar::new(),
        }
    }
}

/// The dirty bytes of one layer (dirty.rs `Layer`): read anywhere, changed only here.
#[derive(Debug, Default)]
pub struct LayerBytes(u64);

impl LayerBytes {
    pub fn get(&self) -> u64 {
        self.0
    }
}

/// A snapshot of the early-compression figures ([`crate::Engine::early_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EarlyStats {
    /// record bytes queued for background compression
    pub backlog_bytes: u64,
    /// record bytes compressed early and not yet taken by a txg
    pub ready_bytes: u64,
    /// records whose raw buffer a worker released after compressing them (since open)
    pub packed_by_worker: u64,
    /// whole records a writer compressed itself from its caller's bytes (since open)
    pub packed_by_caller: u64,
    /// records placed on a device and written while their txg was open (since open)
    pub placed_early: u64,
}

/// What an event adds to the statistics.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    PackedByWorker,
    PackedByCaller,
    PlacedEarly(u64),
}

impl Accounting {
    fn counter(&self, c: Counter) -> &AtomicU64 {
        match c {
            Counter::Dirty => &self.dirty,
            Counter::Placed => &self.placed,
            Counter::Ready => &self.ready,
            Counter::Backlog => &self.backlog,
        }
    }

    /// Add `n` to `c`; returns the new total.
    fn add(&self, c: Counter, n: u64) -> u64 {
        self.counter(c).fetch_add(n, Ordering::SeqCst) + n
    }

    /// Take `n` out of `c` (see the block comment on underflow).
    fn sub(&self, c: Counter, n: u64) {
        if n == 0 {
            return;
        }
        let prev = self.counter(c).fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(v.saturating_sub(n)));
        let prev = prev.unwrap_or_else(|v| v);
        if prev < n {
            debug_assert!(prev >= n, "{c:?} counter {prev} < {n}: bytes taken out twice");
            log::error!("{c:?} accounting: {n} bytes taken out of {prev}; a charge was released twice");
        }
        if c == Counter::Backlog {
            let _g = self.backlog_lock.lock();
            self.backlog_cv.notify_all();
        }
    }

    pub fn dirty(&self) -> u64 {
        self.dirty.load(Ordering::SeqCst)
    }

    pub fn placed(&self) -> u64 {
        self.placed.load(Ordering::SeqCst)
    }

    pub fn ready(&self) -> u64 {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Relaxed)
    }

    /// Dirty bytes not yet on a device's free space: what write admission compares with
    /// the room left. `dirty` is read first (see the block comment).
    pub fn dirty_unplaced(&self) -> u64 {
        let dirty = self.dirty();
        dirty.saturating_sub(self.placed())
    }

    /// A layer's buffers grew by `grown` and shrank by `freed` bytes.
    pub fn resize_layer(&self, layer: &mut LayerBytes, grown: u64, freed: u64) {
        debug_assert!(layer.0 + grown >= freed, "layer of {} bytes grows {grown}, frees {freed}", layer.0);
        layer.0 = (layer.0 + grown).saturating_sub(freed);
        if grown > freed {
            self.add(Counter::Dirty, grown - freed);
        } else {
            self.sub(Counter::Dirty, freed - grown);
        }
    }

    /// The release stage: a frozen layer's bytes leave the dirty data (the layer itself may
    /// live on a little in readers' hands; its bytes are not counted again).
    pub fn release_layer(&self, layer: &LayerBytes) {
        self.sub(Counter::Dirty, layer.0);
    }

    /// An open layer is thrown away (its inode was deleted): its bytes leave the dirty data.
    pub fn drop_layer(&self, layer: LayerBytes) {
        self.sub(Counter::Dirty, layer.0);
    }

    /// A charge of `n` bytes against `c`, held by the caller.
    pub fn charge(self: &Arc<Self>, c: Counter, n: u64) -> Charge {
        self.add(c, n);
        Charge { acct: self.clone(), counter: c, n: AtomicU64::new(n) }
    }

    pub fn record(&self, e: Event) {
        match e {
            Event::PackedByWorker => self.packed_by_worker.fetch_add(1, Ordering::Relaxed),
            Event::PackedByCaller => self.packed_by_caller.fetch_add(1, Ordering::Relaxed),
            Event::PlacedEarly(n) => self.placed_early.fetch_add(n, Ordering::Relaxed),
        };
    }

    pub fn early_stats(&self) -> EarlyStats {
        EarlyStats {
            backlog_bytes: self.backlog(),
            ready_bytes: self.ready(),
            packed_by_worker: self.packed_by_worker.load(Ordering::Relaxed),
            packed_by_caller: self.packed_by_caller.load(Ordering::Relaxed),
            placed_early: self.placed_early.load(Ordering::Relaxed),
        }
    }

    /// Wait while the backlog exceeds `max` bytes, or until `give_up()` says to stop (the
    /// engine closed or stopped syncing).
    pub fn wait_backlog(&self, max: u64, give_up: impl Fn() -> bool) {
        while self.backlog() > max {
            if give_up() {
                return;
            }
            let mut g = self.backlog_lock.lock();
            if self.backlog() <= max {
                return;
            }
            // the timeout only guards against a lost wakeup; every decrease notifies
            g.wait_for(&self.backlog_cv, Duration::from_millis(10));
        }
    }
}

/// Bytes one holder has charged against one counter; taken out by `take` or on drop,
/// exactly once.
pub struct Charge {
    acct: Arc<Accounting>,
    counter: Counter,
    n: AtomicU64,
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Charge({:?}, {})", self.counter, self.n.load(Ordering::Relaxed))
    }
}

impl Charge {
    /// Charge `n` more bytes; returns the counter's new total.
    pub fn add(&self, n: u64) -> u64 {
        self.n.fetch_add(n, Ordering::SeqCst);
        self.acct.add(self.counter, n)
    }

    /// Take the charge out of its counter now (later calls, and the drop, do nothing);
    /// returns the bytes taken out.
    pub fn take(&self) -> u64 {
        let n = self.n.swap(0, Ordering::SeqCst);
        self.acct.sub(self.counter, n);
        n
    }

    /// Hand the bytes charged to a new holder, leaving this one empty; the counter does
    /// not change.
    pub fn transfer(&self) -> Charge {
        let n = self.n.swap(0, Ordering::SeqCst);
        Charge { acct: self.acct.clone(), counter: self.counter, n: AtomicU64::new(n) }
    }

    pub fn bytes(&self) -> u64 {
        self.n.load(Ordering::Relaxed)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_come_out_once_whether_taken_or_dropped() {
        let a = Arc::new(Accounting::default());
        let c = a.charge(Counter::Ready, 100);
        assert_eq!(c.add(20), 120);
        let moved = c.transfer();
        assert_eq!((c.bytes(), moved.bytes(), a.ready()), (0, 120, 120));
        assert_eq!(c.take(), 0);
        drop(moved);
        assert_eq!(a.ready(), 0);
        let p = a.charge(Counter::Placed, 7);
        assert_eq!(p.take(), 7);
        assert_eq!(p.take(), 0, "a second take takes nothing");
        drop(p);
        assert_eq!(a.placed(), 0);
    }

    #[test]
    fn layers_move_the_dirty_counter_with_their_own_bytes() {
        let a = Accounting::default();
        let mut open = LayerBytes::default();
        let mut other = LayerBytes::default();
        a.resize_layer(&mut open, 300, 0);
        a.resize_layer(&mut other, 50, 0);
        a.resize_layer(&mut open, 10, 110);
        assert_eq!((open.get(), a.dirty()), (200, 250));
        a.release_layer(&open);
        a.drop_layer(other);
        assert_eq!(a.dirty(), 0);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "taken out twice")]
    fn releasing_a_layer_twice_is_caught() {
        let a = Accounting::default();
        let mut l = LayerBytes::default();
        a.resize_layer(&mut l, 10, 0);
        a.release_layer(&l);
        a.release_layer(&l);
    }

    #[test]
    fn admission_sees_placed_bytes_once() {
        let a = Arc::new(Accounting::default());
        let mut l = LayerBytes::default();
        a.resize_layer(&mut l, 1000, 0);
        let placed = a.charge(Counter::Placed, 400);
        assert_eq!(a.dirty_unplaced(), 600);
        placed.take();
        a.release_layer(&l);
        assert_eq!(a.dirty_unplaced(), 0);
    }

    #[test]
    fn backlog_waiters_wake_when_it_falls() {
        let a = Arc::new(Accounting::default());
        let c = a.charge(Counter::Backlog, 10);
        let a2 = a.clone();
        let t = std::thread::spawn(move || a2.wait_backlog(5, || false));
        std::thread::sleep(Duration::from_millis(20));
        c.take();
        t.join().unwrap();
        assert_eq!(a.backlog(), 0);
    }
}
