/*
 * Early compression ("compress on fill") and the compress task queue.
 *
 * When a write completes a full record of the open layer, the record is handed to the
 * compress workers at once, so compression overlaps the writer and the I/O of the txg
 * being synced. The sync stage (sync.rs) then reuses the result instead of compressing.
 *
 * A `Slot` is one attempt to compress one record's exact bytes. States:
 *   QUEUED   a queue entry for the slot waits; the slot holds the job (a shared handle on
 *            the record buffer, the policy).
 *   RUNNING  a worker took the job and compresses (no lock held while compressing).
 *   DONE     the result is stored in the slot; its output bytes are charged to
 *            `Inner::dirty_bytes` until taken or dropped.
 *   TAKEN    the sync stage has the result (directly, or through its channel).
 * Transitions:
 *   QUEUED  → RUNNING   a worker pops an entry of the slot;
 *   RUNNING → DONE      the worker finishes and nobody claimed the slot;
 *   RUNNING → TAKEN     the worker finishes and the sync stage claimed the slot meanwhile:
 *                       the result goes straight to the sync stage's channel;
 *   DONE    → TAKEN     the sync stage claims the slot: it sends the result itself;
 *   QUEUED  (claimed)   the sync stage registers its channel and pushes an urgent entry
 *                       of the same slot, so the job runs ahead of background work;
 *                       whichever entry a worker pops first runs the job, the other finds
 *                       the slot no longer QUEUED and does nothing.
 *
 * Invariants:
 *   - A slot belongs to the bytes its record held when it was created: the record drops
 *     its slot on every mutation (`DataRec::buf_mut`), so a stale result is unreachable
 *     (it lives on in a detached slot until the job ends, then is dropped).
 *   - Nobody waits on a slot: workers never block on one, and the sync driver only
 *     waits on its result channel, fed by jobs that are running or queued (queued jobs
 *     always run: one worker-pool job is submitted per queue entry).
 *
 * Queue: two FIFO lists, `urgent` (the sync stage's records) before `background` (early
 * compression). Each entry pushed submits one worker-pool job that runs one entry, taking
 * urgent entries first: a txg being synced never waits behind the next txg's records.
 * Tunables: none here; what triggers early compression is decided in write.rs (a write
 * that fills a record).
 */

use crate::inner::Inner;
use crate::policy::{compress_record, Compressed, Policy, TRUST_AFTER};
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

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
}

pub struct Slot {
    st: Mutex<SlotState>,
    /// the policy the job compresses with (a result under another policy is not reused)
    pub policy: Policy,
    dirty: Arc<AtomicU64>,
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
    pub fn new(buf: Arc<Vec<u8>>, policy: Policy, sector: usize, streak: Arc<AtomicU32>, dirty: Arc<AtomicU64>) -> Arc<Slot> {
        Arc::new(Slot {
            st: Mutex::new(SlotState { state: State::Queued(Job { buf, sector, streak }), forward: None, charged: 0 }),
            policy,
            dirty,
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
                drop(g);
                self.uncharge(charged);
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
        let job = {
            let mut g = self.st.lock();
            match std::mem::replace(&mut g.state, State::Running) {
                State::Queued(j) => j,
                other => {
                    g.state = other;
                    return;
                }
            }
        };
        let trust = job.streak.load(Ordering::Relaxed) >= TRUST_AFTER;
        let c = compress_record(&job.buf, self.policy, job.sector, trust, || inner.workspaces());
        match c {
            Compressed::Packed { .. } => {
                job.streak.fetch_add(1, Ordering::Relaxed);
            }
            Compressed::Raw { .. } => job.streak.store(0, Ordering::Relaxed),
            Compressed::Zeros => {}
        }
        // let go of the buffer before publishing: a writer or the buffer pool may then
        // own it alone again (no copy on write)
        drop(job);
        let mut g = self.st.lock();
        match g.forward.take() {
            Some(f) => {
                g.state = State::Taken;
                drop(g);
                let _ = f.tx.send((f.layer, f.idx, c));
            }
            None => {
                let charged = charge_of(&c);
                g.charged = charged;
                g.state = State::Done(c);
                drop(g);
                self.dirty.fetch_add(charged, Ordering::Relaxed);
            }
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
        let n = std::mem::take(&mut self.st.get_mut().charged);
        self.uncharge(n);
    }
}

/// Compress tasks in two priorities (see the block comment).
#[derive(Default)]
pub struct CompressQueue {
    q: Mutex<Lists>,
}

#[derive(Default)]
struct Lists {
    urgent: VecDeque<Arc<Slot>>,
    background: VecDeque<Arc<Slot>>,
}

impl CompressQueue {
    /// Queue `slot` and submit one worker job for it.
    pub fn push(inner: &Arc<Inner>, slot: Arc<Slot>, urgent: bool) {
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

    fn run_one(&self, inner: &Inner) {
        let next = {
            let mut q = self.q.lock();
            q.urgent.pop_front().or_else(|| q.background.pop_front())
        };
        if let Some(s) = next {
            s.run(inner);
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
        let opts = crate::OpenOptions { compression: Spec::Fixed(squeezefs_codec::Codec::zstd(1).unwrap()), ..Default::default() };
        let inner = crate::pool::open(&pool, &opts, None).unwrap();
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
        let s = Slot::new(buf, policy, 512, Arc::default(), inner.dirty_bytes.clone());
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
            let s = Slot::new(Arc::new(vec![i as u8; 64 << 10]), policy, 512, Arc::default(), inner.dirty_bytes.clone());
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
        let mut got: Vec<u64> = (0..64).map(|_| rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap().1).collect();
        got.sort_unstable();
        assert_eq!(got, (0..64).collect::<Vec<_>>());
        assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "no duplicate result");
    }

    #[test]
    fn dropped_done_slot_returns_its_charge() {
        let (_d, inner) = test_inner();
        let policy = *inner.policy.read();
        let before = inner.dirty_bytes.load(Ordering::Relaxed);
        let s = Slot::new(Arc::new(vec![1u8; 128 << 10]), policy, 512, Arc::default(), inner.dirty_bytes.clone());
        CompressQueue::push(&inner, s.clone(), false);
        wait_until(|| s.is_done());
        drop(s);
        assert_eq!(inner.dirty_bytes.load(Ordering::Relaxed), before);
    }
}
