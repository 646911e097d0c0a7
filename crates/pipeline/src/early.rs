//! Early compression ("compress on fill") and the compress task queue.
//!
//! When a write completes a full record of the open layer, the record is handed to the
//! compress workers at once, so compression overlaps the writer and the I/O of the txg
//! being synced. The sync stage (sync.rs) then reuses the result instead of compressing.
//!
//! A `Slot` is one attempt to compress one record's exact bytes. States:
//!   QUEUED   a queue entry for the slot waits; the slot holds the job (a shared handle on
//!            the record buffer, the policy).
//!   RUNNING  a worker took the job and compresses (no lock held while compressing).
//!   DONE     the result is stored in the slot; its output bytes are charged to
//!            `Inner::dirty_bytes` until taken or dropped.
//!   TAKEN    the sync stage has the result (directly, or through its channel).
//! Transitions:
//!   QUEUED  → RUNNING   a worker pops an entry of the slot;
//!   RUNNING → DONE      the worker finishes and nobody claimed the slot;
//!   RUNNING → TAKEN     the worker finishes and the sync stage claimed the slot meanwhile:
//!                       the result goes straight to the sync stage's channel;
//!   RUNNING → TAKEN     the compression panicked (fault.rs): no result exists; a claimed
//!                       slot's channel sender is dropped unused, so the sync stage waiting
//!                       for it fails its txg (the pool is suspended already);
//!   DONE    → TAKEN     the sync stage claims the slot: it sends the result itself;
//!   DONE    → TAKEN     (packing) right after finishing a background job, the worker moves
//!                       a Packed result into its record if the record still holds this
//!                       slot in its file's open layer: the record becomes PACKED
//!                       (dirty.rs) and its raw buffer goes back to the buffer pool at
//!                       once, so the raw buffers alive are only those of records queued
//!                       or being filled, and the writer refills warm buffers instead of
//!                       touching fresh memory;
//!   QUEUED  (claimed)   the sync stage registers its channel and pushes an urgent entry
//!                       of the same slot, so the job runs ahead of background work;
//!                       whichever entry a worker pops first runs the job, the other finds
//!                       the slot no longer QUEUED and does nothing.
//!
//! Invariants:
//!   - A slot belongs to the bytes its record held when it was created: the record drops
//!     its slot on every mutation (`DataRec::buf_mut`), so a stale result is unreachable
//!     (it lives on in a detached slot until the job ends, then is dropped).
//!   - Nobody waits on a slot: workers never block on one, and the sync driver only
//!     waits on its result channel, fed by jobs that are running or queued (queued jobs
//!     always run: one worker-pool job is submitted per queue entry).
//!
//! Queue: two FIFO lists, `urgent` (the sync stage's records) before `background` (early
//! compression). A worker-pool job runs entries, urgent ones first, until both lists are
//! empty: a txg being synced never waits behind the next txg's records. `push` submits one
//! job per entry; `push_urgent_many` (the sync stage's whole list) submits at most one per
//! worker, because a txg of small files has one record per file and a worker wake-up per
//! record cost more than hashing or compressing it (~50 µs each in a `none` extract).
//! Every entry is run: the last job to find the queue empty exits only after taking
//! everything pushed before that moment, and whatever is pushed later comes with a job.
//!
//! Flow control (`EarlyCounters`): `backlog` = record bytes of background slots not yet
//! compressed; a writer waits while it exceeds `max_backlog` (`wait_backlog`), so a writer
//! faster than the compressors stays a bounded distance ahead. `ready` = record bytes whose
//! early result is DONE and unclaimed; reaching `EARLY_SYNC_BYTES` closes the open txg
//! (txg.rs), so compressed records reach the disk and their buffers return to the buffer pool
//! (and are refilled by the writer) instead of the writer touching fresh memory for every
//! record of a long stream.
//! Records held PACKED keep their bytes counted in `ready` (a `ReadyCharge`) until their
//! txg takes them.
//!
//! Caller-runs: while more than `CALLER_RUNS_RECORDS_PER_WORKER` records per worker wait in
//! the background list, a writer compresses the whole records its write covers itself,
//! straight from its caller's slice (`compress_in_caller`): a record that compresses goes
//! into the open layer PACKED with no copy into a record buffer; one that does not (zeros,
//! or no sector saved) is copied as usual with a DONE slot holding the result, so it is
//! never compressed twice. The writer then works instead of waiting for the queue, and the
//! queue stays short, so the raw buffers in flight are few and reused. (A per-file streak
//! cannot gate this: a writer this far ahead has not seen any result of its current file.)
//!
//! Tunables: `EARLY_SYNC_BYTES` (16 MiB), `BACKLOG_RECORDS_PER_WORKER` (64),
//! `CALLER_RUNS_RECORDS_PER_WORKER` (8); what triggers early compression is decided in
//! write.rs (a write that fills a record).

use crate::dirty::{FileData, PackedRec, Rec};
use crate::inner::Inner;
use crate::policy::{compress_record, Compressed, Policy, TRUST_AFTER};
use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// (layer index, record index, result) as the sync stage consumes them.
pub type CompressResult = (usize, u64, Compressed);

/// Where a claimed slot delivers its result.
struct Forward {
    tx: Sender<CompressResult>,
    layer: usize,
    idx: u64,
}

struct Job {
    buf: Arc<Vec<u8>>,
    sector: usize,
    /// records of the file that compressed in a row (policy::TRUST_AFTER)
    streak: Arc<AtomicU32>,
    /// the record this job compresses, for packing the result into it (background jobs)
    home: Option<Home>,
}

/// Where a background job's record lives: its file and record index.
pub struct Home {
    pub file: Weak<Mutex<FileData>>,
    pub idx: u64,
}

enum State {
    Queued(Job),
    Running,
    Done(Compressed),
    Taken,
}

struct SlotState {
    state: State,
    forward: Option<Forward>,
    /// bytes charged to the dirty counter for a DONE result
    charged: u64,
    /// record bytes counted in `EarlyCounters::ready` (DONE, unclaimed)
    ready: u64,
    /// record bytes counted in `EarlyCounters::backlog` (queued in the background list)
    backlog: u64,
}

/// Close the open txg once this many record bytes were compressed early and wait unclaimed.
pub const EARLY_SYNC_BYTES: u64 = 16 << 20;
/// A writer waits while more than this many records per worker wait for early compression.
pub const BACKLOG_RECORDS_PER_WORKER: u64 = 64;
/// A writer compresses whole records itself while more than this many records per worker
/// wait for early compression (caller-runs, see the block comment). 8 records = one 1 MiB
/// write: while the writer compresses its 8 records, each worker has as many queued, so
/// neither side idles (with 3 threads on 2 cores each runs at the same share).
pub const CALLER_RUNS_RECORDS_PER_WORKER: u64 = 8;

/// Flow-control figures of early compression (see the block comment).
#[derive(Default)]
pub struct EarlyCounters {
    pub backlog: AtomicU64,
    pub ready: AtomicU64,
    /// records packed into the open layer by a worker / by a writer (caller-runs), so far
    packed_by_worker: AtomicU64,
    packed_by_caller: AtomicU64,
    /// records placed and written while their layer was open (early_place.rs), so far
    pub placed_early: AtomicU64,
    lock: Mutex<()>,
    cv: Condvar,
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

impl EarlyCounters {
    pub fn stats(&self) -> EarlyStats {
        EarlyStats {
            backlog_bytes: self.backlog.load(Ordering::Relaxed),
            ready_bytes: self.ready.load(Ordering::Relaxed),
            packed_by_worker: self.packed_by_worker.load(Ordering::Relaxed),
            packed_by_caller: self.packed_by_caller.load(Ordering::Relaxed),
            placed_early: self.placed_early.load(Ordering::Relaxed),
        }
    }
}

impl EarlyCounters {
    fn sub(a: &AtomicU64, n: u64) {
        if n > 0 {
            let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| Some(d.saturating_sub(n)));
        }
    }
}

/// Record bytes a PACKED record (dirty.rs) counts in `EarlyCounters::ready`, returned
/// when its txg takes the record (`release`) or when the record is dropped.
pub struct ReadyCharge {
    counters: Arc<EarlyCounters>,
    n: AtomicU64,
}

impl std::fmt::Debug for ReadyCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReadyCharge({})", self.n.load(Ordering::Relaxed))
    }
}

impl ReadyCharge {
    /// Take over `n` bytes already counted (by a DONE slot).
    fn adopt(counters: Arc<EarlyCounters>, n: u64) -> ReadyCharge {
        ReadyCharge { counters, n: AtomicU64::new(n) }
    }

    /// Count `n` more bytes; also says whether `EARLY_SYNC_BYTES` is reached.
    fn add(counters: &Arc<EarlyCounters>, n: u64) -> (ReadyCharge, bool) {
        let kick = counters.ready.fetch_add(n, Ordering::Relaxed) + n >= EARLY_SYNC_BYTES;
        (ReadyCharge::adopt(counters.clone(), n), kick)
    }

    /// The txg took the record: stop counting it (idempotent).
    pub fn release(&self) {
        EarlyCounters::sub(&self.counters.ready, self.n.swap(0, Ordering::Relaxed));
    }
}

impl Drop for ReadyCharge {
    fn drop(&mut self) {
        self.release();
    }
}

/// Caller-runs (see the block comment): should a writer compress its whole records itself?
pub fn caller_should_run(inner: &Inner) -> bool {
    let c = &inner.compress_q.counters;
    let over = CALLER_RUNS_RECORDS_PER_WORKER * inner.workers.threads() as u64 * inner.recordsize;
    c.backlog.load(Ordering::Relaxed) > over
}

/// What caller-runs made of one whole record.
pub enum CallerResult {
    /// it compresses: the record goes into the open layer PACKED
    Packed(PackedRec),
    /// all zeros, or it does not save a sector: the record is stored the usual way (copied
    /// into a buffer), with this DONE slot holding the result, so nobody compresses it again
    Finished(Arc<Slot>),
}

/// Caller-runs: compress one whole record on the calling thread, from the caller's bytes.
pub fn compress_in_caller(inner: &Inner, data: &[u8], policy: Policy, streak: &AtomicU32) -> CallerResult {
    let trust = streak.load(Ordering::Relaxed) >= TRUST_AFTER;
    let c = compress_record(data, policy, inner.sector as usize, trust, || inner.workspaces(), &inner.outs);
    let len = data.len() as u64;
    let (ready, kick) = ReadyCharge::add(&inner.compress_q.counters, len);
    if kick {
        inner.txg.kick();
    }
    match c {
        Compressed::Packed { codec, bytes, hash } => {
            streak.fetch_add(1, Ordering::Relaxed);
            inner.compress_q.counters.packed_by_caller.fetch_add(1, Ordering::Relaxed);
            CallerResult::Packed(PackedRec {
                codec,
                bytes,
                hash,
                logical: data.len(),
                ready,
                place: Default::default(),
            })
        }
        other => {
            if matches!(other, Compressed::Raw { .. }) {
                streak.store(0, Ordering::Relaxed);
            }
            // the slot takes over the ready count (its Drop or claim returns it)
            ready.n.store(0, Ordering::Relaxed);
            CallerResult::Finished(Slot::finished(other, policy, len, inner))
        }
    }
}

pub struct Slot {
    st: Mutex<SlotState>,
    /// the policy the job compresses with: that of the write that filled the record
    pub policy: Policy,
    dirty: Arc<AtomicU64>,
    counters: Arc<EarlyCounters>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = match self.st.lock().state {
            State::Queued(_) => "queued",
            State::Running => "running",
            State::Done(_) => "done",
            State::Taken => "taken",
        };
        write!(f, "Slot({st})")
    }
}

/// What claiming a slot gave the sync stage.
pub enum Claim {
    /// The result was sent to the channel already (the slot was DONE).
    Sent,
    /// A worker runs the job and will send the result.
    Running,
    /// The job is still queued: push an urgent entry for it ([`CompressQueue::push`]).
    Queued,
    /// The slot cannot deliver (already taken): compress afresh.
    Unusable,
}

fn charge_of(c: &Compressed) -> u64 {
    match c {
        Compressed::Packed { bytes, .. } => bytes.capacity() as u64,
        _ => 0,
    }
}

impl Slot {
    /// A slot for `buf`; `home` (background jobs) lets the worker pack the result into
    /// the record.
    pub fn new(
        buf: Arc<Vec<u8>>,
        policy: Policy,
        streak: Arc<AtomicU32>,
        home: Option<Home>,
        inner: &Inner,
    ) -> Arc<Slot> {
        let sector = inner.sector as usize;
        Arc::new(Slot {
            st: Mutex::new(SlotState {
                state: State::Queued(Job { buf, sector, streak, home }),
                forward: None,
                charged: 0,
                ready: 0,
                backlog: 0,
            }),
            policy,
            dirty: inner.dirty_bytes.clone(),
            counters: inner.compress_q.counters.clone(),
        })
    }

    /// A slot DONE from the start (caller-runs computed `c` from the record's `len` bytes,
    /// already counted in `ready`).
    fn finished(c: Compressed, policy: Policy, len: u64, inner: &Inner) -> Arc<Slot> {
        let charged = charge_of(&c);
        inner.dirty_bytes.fetch_add(charged, Ordering::Relaxed);
        Arc::new(Slot {
            st: Mutex::new(SlotState { state: State::Done(c), forward: None, charged, ready: len, backlog: 0 }),
            policy,
            dirty: inner.dirty_bytes.clone(),
            counters: inner.compress_q.counters.clone(),
        })
    }

    /// Make a fresh (unqueued) slot deliver to `tx` (the sync stage compressing a record
    /// itself).
    pub fn forward_to(self: Arc<Slot>, tx: Sender<CompressResult>, layer: usize, idx: u64) -> Arc<Slot> {
        self.st.lock().forward = Some(Forward { tx, layer, idx });
        self
    }

    /// The sync stage wants the result for (`layer`, `idx`) on `tx`.
    pub fn claim(&self, tx: &Sender<CompressResult>, layer: usize, idx: u64) -> Claim {
        let mut g = self.st.lock();
        match std::mem::replace(&mut g.state, State::Taken) {
            State::Done(c) => {
                let charged = std::mem::take(&mut g.charged);
                let ready = std::mem::take(&mut g.ready);
                drop(g);
                self.uncharge(charged);
                EarlyCounters::sub(&self.counters.ready, ready);
                let _ = tx.send((layer, idx, c));
                Claim::Sent
            }
            State::Taken => Claim::Unusable,
            other => {
                if g.forward.is_some() {
                    g.state = other;
                    return Claim::Unusable;
                }
                let queued = matches!(other, State::Queued(_));
                g.state = other;
                g.forward = Some(Forward { tx: tx.clone(), layer, idx });
                if queued {
                    Claim::Queued
                } else {
                    Claim::Running
                }
            }
        }
    }

    /// Run the job if it is still queued (called by a worker).
    fn run(&self, inner: &Inner) {
        let mut job = {
            let mut g = self.st.lock();
            match std::mem::replace(&mut g.state, State::Running) {
                State::Queued(j) => j,
                other => {
                    g.state = other;
                    return;
                }
            }
        };
        let len = job.buf.len() as u64;
        let trust = job.streak.load(Ordering::Relaxed) >= TRUST_AFTER;
        let c = inner.catch("a compression job", || {
            inner.faults.hit(crate::fault::Site::CompressJob);
            compress_record(&job.buf, self.policy, job.sector, trust, || inner.workspaces(), &inner.outs)
        });
        match &c {
            Ok(Compressed::Packed { .. }) => {
                job.streak.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Compressed::Raw { .. }) => job.streak.store(0, Ordering::Relaxed),
            Ok(Compressed::Zeros) | Err(_) => {}
        }
        let home = job.home.take();
        let packed = matches!(c, Ok(Compressed::Packed { .. }));
        // let go of the buffer before publishing: a writer or the buffer pool may then
        // own it alone again (no copy on write)
        drop(job);
        let mut g = self.st.lock();
        let backlog = std::mem::take(&mut g.backlog);
        let mut kick = false;
        match (g.forward.take(), c) {
            (forward, Err(_)) => {
                g.state = State::Taken;
                drop(g);
                drop(forward);
            }
            (Some(f), Ok(c)) => {
                g.state = State::Taken;
                drop(g);
                let _ = f.tx.send((f.layer, f.idx, c));
            }
            (None, Ok(c)) => {
                let charged = charge_of(&c);
                g.charged = charged;
                g.ready = len;
                g.state = State::Done(c);
                drop(g);
                self.dirty.fetch_add(charged, Ordering::Relaxed);
                kick = self.counters.ready.fetch_add(len, Ordering::Relaxed) + len >= EARLY_SYNC_BYTES;
            }
        }
        if backlog > 0 {
            EarlyCounters::sub(&self.counters.backlog, backlog);
            let _g = self.counters.lock.lock();
            self.counters.cv.notify_all();
        }
        if kick {
            inner.txg.kick();
        }
        if let (true, Some(home)) = (packed, home) {
            self.pack_into_record(inner, home);
        }
    }

    /// DONE → TAKEN by packing the result into the record (see the block comment), if
    /// the record still holds this slot in its file's open layer (then it still holds
    /// the bytes the result was computed from). Lock order: file, then slot.
    fn pack_into_record(&self, inner: &Inner, home: Home) {
        let Some(f) = home.file.upgrade() else { return };
        let mut fd = f.lock();
        if fd.retired {
            return;
        }
        let Some(Rec::Data(rec)) = fd.open.recs.get_mut(&home.idx) else { return };
        if !rec.early().is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), self)) {
            return;
        }
        let mut g = self.st.lock();
        let State::Done(Compressed::Packed { .. }) = &g.state else { return };
        let State::Done(Compressed::Packed { codec, bytes, hash }) = std::mem::replace(&mut g.state, State::Taken)
        else {
            unreachable!("matched above")
        };
        let charged = std::mem::take(&mut g.charged);
        let ready = std::mem::take(&mut g.ready);
        drop(g);
        self.uncharge(charged);
        let logical = rec.len();
        let ready = ReadyCharge::adopt(self.counters.clone(), ready);
        let raw = rec.pack(PackedRec { codec, bytes, hash, logical, ready, place: Default::default() });
        crate::early_place::place_in_order(inner, &mut fd.open);
        drop(fd);
        self.counters.packed_by_worker.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = raw {
            inner.bufs.give(b);
        }
    }

    fn uncharge(&self, n: u64) {
        if n > 0 {
            let _ = self.dirty.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| Some(d.saturating_sub(n)));
        }
    }

    #[cfg(test)]
    fn is_done(&self) -> bool {
        matches!(self.st.lock().state, State::Done(_))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let st = self.st.get_mut();
        let (n, ready) = (std::mem::take(&mut st.charged), std::mem::take(&mut st.ready));
        self.uncharge(n);
        EarlyCounters::sub(&self.counters.ready, ready);
    }
}

/// Compress tasks in two priorities (see the block comment).
#[derive(Default)]
pub struct CompressQueue {
    q: Mutex<Lists>,
    pub counters: Arc<EarlyCounters>,
}

#[derive(Default)]
struct Lists {
    urgent: VecDeque<Arc<Slot>>,
    background: VecDeque<Arc<Slot>>,
}

impl CompressQueue {
    /// Queue `slot` and submit one worker job for it.
    pub fn push(inner: &Arc<Inner>, slot: Arc<Slot>, urgent: bool) {
        if !urgent {
            let mut g = slot.st.lock();
            if let State::Queued(j) = &g.state {
                let n = j.buf.len() as u64;
                g.backlog = n;
                inner.compress_q.counters.backlog.fetch_add(n, Ordering::Relaxed);
            }
        }
        {
            let mut q = inner.compress_q.q.lock();
            if urgent {
                q.urgent.push_back(slot);
            } else {
                q.background.push_back(slot);
            }
        }
        let i = inner.clone();
        inner.workers.execute(move || i.compress_q.run_one(&i));
    }

    /// Queue the sync stage's slots as urgent entries, with at most one job per worker.
    pub fn push_urgent_many(inner: &Arc<Inner>, slots: Vec<Arc<Slot>>) {
        if slots.is_empty() {
            return;
        }
        let jobs = slots.len().min(inner.workers.threads().max(1));
        inner.compress_q.q.lock().urgent.extend(slots);
        for _ in 0..jobs {
            let i = inner.clone();
            inner.workers.execute(move || i.compress_q.run_one(&i));
        }
    }

    /// Wait while too many records wait for early compression (see the block comment).
    pub fn wait_backlog(inner: &Inner) {
        let c = &inner.compress_q.counters;
        let max = BACKLOG_RECORDS_PER_WORKER * inner.workers.threads() as u64 * inner.recordsize;
        while c.backlog.load(Ordering::Relaxed) > max {
            if inner.closed.load(Ordering::Acquire) || inner.txg.suspension().is_some() {
                return;
            }
            let mut g = c.lock.lock();
            if c.backlog.load(Ordering::Relaxed) <= max {
                return;
            }
            // the timeout only guards against a lost wakeup; workers notify
            c.cv.wait_for(&mut g, Duration::from_millis(10));
        }
    }

    /// Run entries, urgent first, until the queue is empty (see the block comment).
    fn run_one(&self, inner: &Inner) {
        loop {
            let next = {
                let mut q = self.q.lock();
                q.urgent.pop_front().or_else(|| q.background.pop_front())
            };
            match next {
                Some(s) => s.run(inner),
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_codec::Spec;

    fn test_inner() -> (tempfile::TempDir, Arc<Inner>) {
        let dir = tempfile::tempdir().unwrap();
        let pool = dir.path().join("p");
        crate::pool::mkfs(&pool, &crate::MkfsOptions::default(), None).unwrap();
        let opts = crate::OpenOptions {
            compression: Spec::Fixed(squeezefs_codec::Codec::zstd(1).unwrap()),
            ..Default::default()
        };
        let (inner, _lock) = crate::pool::open(&pool, &opts, None).unwrap();
        (dir, inner)
    }

    fn wait_until(mut f: impl FnMut() -> bool) {
        let t0 = std::time::Instant::now();
        while !f() {
            assert!(t0.elapsed() < std::time::Duration::from_secs(20), "timed out");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn done_result_is_charged_until_claimed_and_sent_once() {
        let (_d, inner) = test_inner();
        let policy = *inner.policy.read();
        let buf = Arc::new(vec![7u8; 128 << 10]);
        let before = inner.dirty_bytes.load(Ordering::Relaxed);
        let s = Slot::new(buf, policy, Arc::default(), None, &inner);
        CompressQueue::push(&inner, s.clone(), false);
        wait_until(|| s.is_done());
        assert!(inner.dirty_bytes.load(Ordering::Relaxed) > before, "a done result is charged");
        let (tx, rx) = crossbeam_channel::unbounded();
        assert!(matches!(s.claim(&tx, 3, 9), Claim::Sent));
        assert_eq!(inner.dirty_bytes.load(Ordering::Relaxed), before, "claiming uncharges");
        let (l, i, c) = rx.try_recv().unwrap();
        assert_eq!((l, i), (3, 9));
        assert!(matches!(c, Compressed::Packed { .. }));
        assert!(matches!(s.claim(&tx, 3, 9), Claim::Unusable), "a result is delivered once");
        drop(inner);
    }

    #[test]
    fn claimed_while_queued_runs_once_and_forwards() {
        let (_d, inner) = test_inner();
        let policy = *inner.policy.read();
        let (tx, rx) = crossbeam_channel::unbounded();
        // many background slots, each claimed right away: every result arrives exactly once
        let mut slots = Vec::new();
        for i in 0..64u64 {
            let s = Slot::new(Arc::new(vec![i as u8; 64 << 10]), policy, Arc::default(), None, &inner);
            CompressQueue::push(&inner, s.clone(), false);
            slots.push(s);
        }
        for (i, s) in slots.iter().enumerate() {
            match s.claim(&tx, 0, i as u64) {
                Claim::Queued => CompressQueue::push(&inner, s.clone(), true),
                Claim::Running | Claim::Sent => {}
                Claim::Unusable => panic!("fresh slot unusable"),
            }
        }
        let mut got: Vec<u64> =
            (0..64).map(|_| rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap().1).collect();
        got.sort_unstable();
        assert_eq!(got, (0..64).collect::<Vec<_>>());
        assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "no duplicate result");
    }

    #[test]
    fn dropped_done_slot_returns_its_charge() {
        let (_d, inner) = test_inner();
        let policy = *inner.policy.read();
        let before = inner.dirty_bytes.load(Ordering::Relaxed);
        let s = Slot::new(Arc::new(vec![1u8; 128 << 10]), policy, Arc::default(), None, &inner);
        CompressQueue::push(&inner, s.clone(), false);
        wait_until(|| s.is_done());
        drop(s);
        assert_eq!(inner.dirty_bytes.load(Ordering::Relaxed), before);
    }

    #[test]
    fn backlog_bounds_the_writer_and_counters_return_to_zero() {
        let (_d, inner) = test_inner();
        let policy = *inner.policy.read();
        let c = inner.compress_q.counters.clone();
        let max = BACKLOG_RECORDS_PER_WORKER * inner.workers.threads() as u64 * inner.recordsize;
        let n = (max / (128 << 10)) as usize * 2;
        let slots: Vec<_> = (0..n)
            .map(|i| {
                let s = Slot::new(Arc::new(vec![i as u8; 128 << 10]), policy, Arc::default(), None, &inner);
                CompressQueue::push(&inner, s.clone(), false);
                s
            })
            .collect();
        CompressQueue::wait_backlog(&inner);
        assert!(c.backlog.load(Ordering::Relaxed) <= max, "wait_backlog returned above the bound");
        wait_until(|| slots.iter().all(|s| s.is_done()));
        assert_eq!(c.backlog.load(Ordering::Relaxed), 0);
        assert_eq!(c.ready.load(Ordering::Relaxed), n as u64 * (128 << 10));
        let (tx, _rx) = crossbeam_channel::unbounded();
        for (i, s) in slots.iter().enumerate().take(n / 2) {
            assert!(matches!(s.claim(&tx, 0, i as u64), Claim::Sent));
        }
        drop(slots); // the unclaimed half is dropped while DONE
        assert_eq!(c.ready.load(Ordering::Relaxed), 0);
    }
}
