//! The engine's locks and their order, checked in debug builds.
//!
//! Every lock of the engine is a [`Mutex`] or [`RwLock`] of this module, created with its
//! [`Rank`]. A thread may take a lock only while every lock it already holds has a lower
//! rank; so no two threads can wait for each other (no deadlock), whatever the paths. In
//! debug builds each thread keeps the ranks it holds and a lock taken out of order panics
//! naming both locks; release builds keep nothing (the wrappers are parking_lot's locks).
//!
//! The order, outermost first (the rank list below is the one place it is written):
//!
//! | rank | lock | held while taking |
//! |---|---|---|
//! | `QuiesceGate` | `Inner::quiesce_gate`: the quiesce (write) against `share_range` (read) | the quiesce takes `File`; `share_range` takes `FileShard`, `NsRows`, `File` |
//! | `DurableSpace` | the durable space image (space/placement.rs) | the commit stage takes `MetaWriters` and `NsRows` to take the namespace delta |
//! | `MetaWriters` | `NsDelta::meta_lock`: one metadata writer at a time | inode lookups (`FileShard`, `NsRows`, `File`), `TxgState`, `DirtySet` |
//! | `TxgState` | the txg state machine (txg/state.rs) | `DirtySet` |
//! | `FileShard` | a shard of the file table (dirty.rs) | `NsRows` (a file's first use reads its committed size under the shard lock), `File` |
//! | `NsRows` | the namespace delta's generations | the redb snapshot cache (`Leaf`) |
//! | `File` | one file's dirty data (`FileData`) | `DirtySet`, `LiveSpace` (early placement), `Slot` (packing a result) |
//! | `DirtySet` | inodes changed in the open txg | nothing |
//! | `LiveSpace` | the live space image | `FrozenRun`, `HostSpace` |
//! | `FrozenRun` | a frozen layer's early-placement run | nothing |
//! | `HostSpace` | host filesystems under growable devices | nothing |
//! | `Slot` | one early-compression slot (early.rs) | `Backlog` |
//! | `Backlog` | the backlog waiters (accounting.rs) | nothing |
//! | `Leaf` | caches, pools, queues, completions, the snapshot cache, the early-placement sink, waiter locks | nothing |
//!
//! Two locks of the same rank are never held together (two files, two shards, two leaves).
//! Condition-variable waits keep their lock's rank held: the thread takes nothing while it
//! waits.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

/// A lock's place in the order (see the block comment); lower ranks are taken first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    QuiesceGate,
    DurableSpace,
    MetaWriters,
    TxgState,
    FileShard,
    NsRows,
    File,
    DirtySet,
    LiveSpace,
    FrozenRun,
    HostSpace,
    Slot,
    Backlog,
    Leaf,
}

#[cfg(debug_assertions)]
mod check {
    use super::Rank;
    use std::cell::RefCell;

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    pub fn acquire(rank: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(&top) = h.iter().max() {
                if rank <= top {
                    let held = h.clone();
                    drop(h);
                    panic!("lock order: taking {rank:?} while holding {held:?} (locks.rs)");
                }
            }
            h.push(rank);
        });
    }

    pub fn release(rank: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&r| r == rank) {
                h.remove(i);
            }
        });
    }
}

#[cfg(not(debug_assertions))]
mod check {
    use super::Rank;

    #[inline(always)]
    pub fn acquire(_: Rank) {}

    #[inline(always)]
    pub fn release(_: Rank) {}
}

/// A mutex with a rank.
#[derive(Debug)]
pub struct Mutex<T> {
    rank: Rank,
    m: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    pub const fn new(rank: Rank, v: T) -> Mutex<T> {
        Mutex { rank, m: parking_lot::Mutex::new(v) }
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        check::acquire(self.rank);
        MutexGuard { g: self.m.lock(), rank: self.rank }
    }

    /// The lock if it is free now (the rank is checked as for `lock`: a try never waits,
    /// but the order must still hold for the locks taken while holding it).
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        check::acquire(self.rank);
        match self.m.try_lock() {
            Some(g) => Some(MutexGuard { g, rank: self.rank }),
            None => {
                check::release(self.rank);
                None
            }
        }
    }

    /// The value, through exclusive access (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        self.m.get_mut()
    }

    pub fn into_inner(self) -> T {
        self.m.into_inner()
    }
}

/// A leaf lock (the usual kind: takes no other lock while held).
impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(Rank::Leaf, T::default())
    }
}

pub struct MutexGuard<'a, T> {
    g: parking_lot::MutexGuard<'a, T>,
    rank: Rank,
}

impl<T> MutexGuard<'_, T> {
    /// Wait on `cv`, releasing the lock meanwhile.
    pub fn wait(&mut self, cv: &parking_lot::Condvar) {
        cv.wait(&mut self.g);
    }

    /// Wait on `cv` for at most `d`; whether the wait timed out.
    pub fn wait_for(&mut self, cv: &parking_lot::Condvar, d: Duration) -> bool {
        cv.wait_for(&mut self.g, d).timed_out()
    }

    /// Wait on `cv` until `deadline` at the latest; whether the wait timed out.
    pub fn wait_until(&mut self, cv: &parking_lot::Condvar, deadline: Instant) -> bool {
        cv.wait_until(&mut self.g, deadline).timed_out()
    }

    /// Run `f` with the lock released (it may take any lock), then take it again.
    pub fn unlocked<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let rank = self.rank;
        parking_lot::MutexGuard::unlocked(&mut self.g, || {
            check::release(rank);
            let r = f();
            check::acquire(rank);
            r
        })
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.g
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.g
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        check::release(self.rank);
    }
}

/// A readers-writer lock with a rank (readers and writers alike take it in order).
#[derive(Debug)]
pub struct RwLock<T> {
    rank: Rank,
    l: parking_lot::RwLock<T>,
}

impl<T> RwLock<T> {
    pub const fn new(rank: Rank, v: T) -> RwLock<T> {
        RwLock { rank, l: parking_lot::RwLock::new(v) }
    }

    pub fn read(&self) -> Guard<parking_lot::RwLockReadGuard<'_, T>> {
        check::acquire(self.rank);
        Guard { g: self.l.read(), rank: self.rank }
    }

    pub fn write(&self) -> Guard<parking_lot::RwLockWriteGuard<'_, T>> {
        check::acquire(self.rank);
        Guard { g: self.l.write(), rank: self.rank }
    }
}

/// A read or write guard of a [`RwLock`].
pub struct Guard<G> {
    g: G,
    rank: Rank,
}

impl<G: Deref> Deref for Guard<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.g
    }
}

impl<G: DerefMut> DerefMut for Guard<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.g
    }
}

impl<G> Drop for Guard<G> {
    fn drop(&mut self) {
        check::release(self.rank);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_in_rank_order_pass() {
        let a = Mutex::new(Rank::File, 1);
        let b = Mutex::new(Rank::LiveSpace, 2);
        let l = RwLock::new(Rank::NsRows, 0);
        let r = l.read();
        let ga = a.lock();
        let gb = b.lock();
        assert_eq!(*ga + *gb + *r, 3);
        drop((gb, ga, r));
        // and again after releasing, in any order
        let _gb = b.lock();
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "lock order: taking File while holding [LiveSpace]")]
    fn a_lock_taken_out_of_order_panics_in_debug_builds() {
        let a = Mutex::new(Rank::File, ());
        let b = Mutex::new(Rank::LiveSpace, ());
        let _gb = b.lock();
        let _ga = a.lock();
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "lock order")]
    fn two_locks_of_one_rank_are_never_held_together() {
        let a = Mutex::new(Rank::File, ());
        let b = Mutex::new(Rank::File, ());
        let _ga = a.lock();
        let _gb = b.lock();
    }

    #[test]
    fn unlocked_lets_the_closure_take_lower_ranks() {
        let outer = Mutex::new(Rank::TxgState, ());
        let inner = Mutex::new(Rank::MetaWriters, ());
        let mut g = outer.lock();
        g.unlocked(|| drop(inner.lock()));
    }
}
