//! Early placement: a record held PACKED in an open layer (dirty.rs) gets its device space
//! and goes to its device's write queue at once, so when its txg syncs the record is on the
//! device already (and its writeback started, devq.rs). The last txg of a stream then waits
//! for the I/O of a few records instead of all of its data.
//!
//! Two space images (space/placement.rs). Placements, early or in the sync stage, are taken in the
//! *live* image. The *durable* image is what the commits persist: the commit of a txg takes
//! exactly the ranges of the records it points to (`DevSpace::alloc_exact`) and gives back
//! its frees; the live image gets those frees only after the commit is durable. Hence:
//!   - a range placed early is never persisted as allocated before a pointer to it is
//!     (a crash leaves it free: no leak for fsck);
//!   - an early write lands only in space free in the live image, which is free in the
//!     durable image too, so it never overwrites data the last durable commit refers to.
//!
//! States of an `EarlyPlace` (one atomic; the sync driver changes it, `Drop` reads it):
//!   VALID      placed, its write queued (its own `Completion`);
//!   COMMITTED  its txg committed a pointer to it: the durable image owns the range, which
//!              is freed like any committed extent when replaced.
//!   ABANDONED  given up: the range went to the `EarlySink`, and a txg gives it back to
//!              the live image once its write has finished (`reclaim`).
//! Transitions: VALID → COMMITTED (commit stage, for the placements `place` reused);
//!              VALID → ABANDONED when dropped (the record was overwritten, truncated or
//!              deleted) or, for placements its txg did not keep (the record went inline,
//!              or was placed again after its early write failed), right after the commit
//!              (`abandon`).
//! An `EarlyRun` (one per open layer, so a file's records lie back to back) stays with the
//! layer when it is frozen: the sync stage places the layer's other records after the early
//! ones in it, then closes it. A run dropped otherwise (a file deleted while its layer was
//! open) hands its unused end to the sink like an abandoned placement.
//!
//! When: only records held PACKED (full records, compressed) in an open layer; not a file's
//! first record while it may go inline; never in a read-only pool; off after a failed txg until
//! a txg starts with room again; only
//! while the pool's room is far beyond what the dirty data can take
//! (`EARLY_ROOM_FACTOR` × max_dirty_bytes + `EARLY_ROOM_MIN`, refreshed per txg): near full,
//! placement stays in the sync stage, which handles ENOSPC.
//!
//! Which records, and in what order, is the layer's business (dirty.rs
//! `Layer::place_early`); this module places the records it is handed.
//!
//! Accounting: an early placement holds a `placed` charge (accounting.rs) of its stored
//! bytes from its placement until its txg commits (sync/stages.rs) or it is given up (here).
//!
//! Tunables: `EARLY_ROOM_FACTOR` (4), `EARLY_ROOM_MIN` (256 MiB).

use crate::base::accounting::{Accounting, Charge, Counter, Event};
use crate::base::locks::{Mutex, Rank};
use crate::compress::outbuf::OutBytes;
use crate::space::alloc::{DevSpace, Run};
use crate::space::devq::{Completion, Payload, WriteReq};
use crate::space::placement::Space;
use squeezefs_control::choose_device;
use squeezefs_meta::DeviceExtent;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

pub const EARLY_ROOM_FACTOR: u64 = 4;
pub const EARLY_ROOM_MIN: u64 = 256 << 20;

const VALID: u8 = 0;
const COMMITTED: u8 = 1;
const ABANDONED: u8 = 2;

/// A range of the live image to give back once `done` (if any) has no write in flight.
struct Abandoned {
    dev: u32,
    offset: u64,
    footprint: u64,
    done: Option<Arc<Completion>>,
}

/// Early placements and run ends given up, waiting for the next txg (`reclaim`).
pub struct EarlySink {
    list: Mutex<Vec<Abandoned>>,
}

impl Default for EarlySink {
    fn default() -> Self {
        EarlySink { list: Mutex::new(Rank::Leaf, Vec::new()) }
    }
}

impl EarlySink {
    fn push(&self, a: Abandoned) {
        self.list.lock().push(a);
    }
}

/// Early placement of the pool: whether it is on, and what was given up.
pub struct EarlyPlacement {
    /// early placements given up before their txg committed
    sink: Arc<EarlySink>,
    /// early placement is allowed: the pool's room is far above what dirty data can take
    /// (refreshed per txg, `refresh_room`)
    room: AtomicBool,
    granule: u64,
}

impl EarlyPlacement {
    pub fn new(granule: u64) -> EarlyPlacement {
        EarlyPlacement { sink: Arc::default(), room: AtomicBool::new(false), granule }
    }

    /// Early placement is on (see the block comment).
    pub fn allowed(&self) -> bool {
        self.room.load(Ordering::Relaxed)
    }

    /// Ranges waiting for `reclaim` (tests).
    pub fn pending(&self) -> usize {
        self.sink.list.lock().len()
    }

    /// Whether early placement is on: a writable pool that has not failed a txg, with room
    /// (`placeable` bytes) far beyond what `max_dirty` bytes of dirty data can take. Called
    /// as each txg starts and after a failed one.
    pub fn refresh_room(&self, placeable: u64, max_dirty: u64, writable: bool, failed: bool) {
        let want = EARLY_ROOM_FACTOR.saturating_mul(max_dirty).saturating_add(EARLY_ROOM_MIN);
        let ok = !failed && writable && placeable >= want;
        self.room.store(ok, Ordering::SeqCst);
    }

    /// Place and queue the writes of `todo` (stored bytes of records held PACKED in one open
    /// layer, in file order, each with the cell its placement goes into) in the layer's
    /// `run`, or in a new run on the device `choose_device` picks. Stops at the first record
    /// that finds no room (the sync stage places the rest). The caller holds the file lock;
    /// lock order: file, then the live space image.
    pub fn place(
        &self,
        space: &Space,
        acct: &Arc<Accounting>,
        run: &mut Option<EarlyRun>,
        todo: &[(&Arc<OutBytes>, &OnceLock<EarlyPlace>)],
    ) {
        let mut placed = Vec::with_capacity(todo.len());
        {
            let mut live = space.live();
            for (bytes, cell) in todo {
                let stored = bytes.len() as u64;
                // no room: the sync stage places the rest
                let Some((dev, offset)) = self.alloc(space, &mut live, run, stored) else { break };
                placed.push((*bytes, *cell, dev, offset));
            }
        }
        acct.record(Event::PlacedEarly(placed.len() as u64));
        for (bytes, cell, dev, offset) in placed {
            let stored = bytes.len() as u64;
            let charge = acct.charge(Counter::Placed, stored);
            // a completion of its own: giving the record up waits for this write only
            let done = Arc::new(Completion::default());
            done.add(1);
            space.submit(dev, WriteReq { offset, payload: Payload::Owned(bytes.clone()), done: done.clone() });
            let e = EarlyPlace {
                ext: DeviceExtent { dev: dev as u32, offset, psize: stored as u32 },
                footprint: crate::base::units::granule_bytes(stored, self.granule),
                state: AtomicU8::new(VALID),
                done,
                sink: self.sink.clone(),
                placed: charge,
            };
            // only this function sets it, under the file lock, for records found unset
            let _ = cell.set(e);
        }
    }

    /// Space for `stored` bytes in the layer's run, or in a new run on the device
    /// `choose_device` picks (the old run's unused end goes to the sink).
    fn alloc(
        &self,
        space: &Space,
        live: &mut [DevSpace],
        run: &mut Option<EarlyRun>,
        stored: u64,
    ) -> Option<(usize, u64)> {
        if let Some(r) = run.as_mut() {
            if let Some(off) = live[r.dev].alloc_in(&mut r.run, stored) {
                return Some((r.dev, off));
            }
        }
        let need = crate::base::units::granule_bytes(stored, self.granule).max(1);
        // a growable device has the room of its own host filesystem (lock order: live
        // space, then host space)
        let host = space.host_rooms();
        let mut views = space.device_views(live, |i| host.get(i).copied().flatten().map_or(0, |h| h.free));
        loop {
            let dev = choose_device(&views, need)?;
            let mut fresh = None;
            match live[dev].alloc_in(&mut fresh, stored) {
                Some(off) => {
                    // dropping the old run hands its unused end to the sink
                    *run = Some(EarlyRun { dev, run: fresh, sink: self.sink.clone() });
                    return Some((dev, off));
                }
                None => views[dev].free_bytes = 0,
            }
        }
    }

    /// Give the abandoned ranges back to the live image, each once its write has finished: a
    /// range is never handed out again while a write into it may still land. The sync driver
    /// calls it as a txg starts and after its commit without waiting (ranges still being
    /// written stay for the next call), and at shutdown with `wait` (each waits for its own
    /// write, queued already, so the wait is bounded by the device queue).
    pub fn reclaim(&self, space: &Space, wait: bool) {
        let list = std::mem::take(&mut *self.sink.list.lock());
        if list.is_empty() {
            return;
        }
        let (ready, busy): (Vec<Abandoned>, Vec<Abandoned>) = list.into_iter().partition(|a| {
            a.done.as_ref().is_none_or(|d| {
                if wait {
                    // its error, if any, failed (or fails) the txg that used the placement
                    let _ = d.wait();
                }
                d.is_idle()
            })
        });
        if !busy.is_empty() {
            self.sink.list.lock().extend(busy);
        }
        let ranges: Vec<(u32, u64, u64)> = ready.iter().map(|a| (a.dev, a.offset, a.footprint)).collect();
        space.give_back(&ranges);
    }
}

/// Where one packed record was placed and written while its layer was open.
pub struct EarlyPlace {
    pub ext: DeviceExtent,
    footprint: u64,
    state: AtomicU8,
    done: Arc<Completion>,
    sink: Arc<EarlySink>,
    /// the stored bytes, counted as placed until committed or given up
    placed: Charge,
}

impl std::fmt::Debug for EarlyPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EarlyPlace({:?}, state {})", self.ext, self.state.load(Ordering::Relaxed))
    }
}

impl EarlyPlace {
    /// Usable by the sync stage: not committed by an earlier txg, and its write has not
    /// failed so far (a later failure fails the txg at its wait, sync/stages.rs).
    pub fn usable(&self) -> bool {
        self.state.load(Ordering::SeqCst) == VALID && self.done.error().is_none()
    }

    /// The txg keeping this placement is about to release its dirty bytes: its stored
    /// bytes stop counting as placed (accounting.rs: before the release).
    pub fn uncount(&self) {
        self.placed.take();
    }

    /// Its txg committed a pointer to it (sync driver, after the durable commit).
    pub fn set_committed(&self) {
        self.state.store(COMMITTED, Ordering::SeqCst);
    }

    /// Its write.
    pub fn done(&self) -> &Arc<Completion> {
        &self.done
    }

    /// VALID → ABANDONED: the range goes to the sink, its bytes out of `placed`.
    /// Does nothing in any other state (committed, or given up already).
    pub fn abandon(&self) {
        if self.state.compare_exchange(VALID, ABANDONED, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return;
        }
        self.placed.take();
        self.sink.push(Abandoned {
            dev: self.ext.dev,
            offset: self.ext.offset,
            footprint: self.footprint,
            done: Some(self.done.clone()),
        });
    }
}

impl Drop for EarlyPlace {
    fn drop(&mut self) {
        self.abandon();
    }
}

/// An open layer's run on one device.
pub struct EarlyRun {
    dev: usize,
    run: Option<Run>,
    sink: Arc<EarlySink>,
}

impl std::fmt::Debug for EarlyRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EarlyRun(dev {}, {:?})", self.dev, self.run)
    }
}

impl EarlyRun {
    /// Its device.
    pub fn dev(&self) -> usize {
        self.dev
    }

    /// Space for `stored` bytes in this run (the sync stage places a frozen layer's other
    /// records after its early ones); `None` when its device has no room left.
    pub fn alloc(&mut self, live: &mut [DevSpace], stored: u64) -> Option<(usize, u64)> {
        live[self.dev].alloc_in(&mut self.run, stored).map(|off| (self.dev, off))
    }

    /// End the run now: its unused end goes back to the live image at once (no write went
    /// there).
    pub fn close(mut self, live: &mut [DevSpace]) {
        live[self.dev].close_run_of(self.run.take());
    }
}

impl Drop for EarlyRun {
    fn drop(&mut self) {
        if let Some(r) = self.run.take() {
            let (offset, footprint) = DevSpace::unused_of(&r);
            if footprint > 0 {
                self.sink.push(Abandoned { dev: self.dev as u32, offset, footprint, done: None });
            }
        }
    }
}
