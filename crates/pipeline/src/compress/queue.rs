//! The compress stage's parts: the codecs every compression goes through ([`Codecs`]),
//! one attempt to compress one record ([`Slot`]) and the queue of attempts waiting for a
//! worker ([`CompressQueue`]). Who creates slots and runs the queue is early.rs (records
//! filled in the open txg, and caller-runs) and sync/stages.rs (the records of the syncing txg).
//!
//! Per-record decision: every record is compressed by [`Compression::compress`], given the
//! file it belongs to, its policy (`Policy`: fixed, or adaptive) and what is known of the
//! file so far (its streak): a zero test (a hole), then levels.rs `Levels::choose` (the
//! decision point: heuristic, fixed codec, the auto controller, or for a record of a QoS
//! tree its tree's plan), the codec run by `policy::compress_with` (which measures the
//! codec's CPU time), and `Levels::finish` (the controller or the tree's meters fed the
//! measurement, the trace row written).
//!
//! A `Slot` is one attempt to compress one record's exact bytes. States:
//!   QUEUED   a queue entry for the slot waits; the slot holds the job (a shared handle on
//!            the record buffer, the policy).
//!   RUNNING  a worker took the job and compresses (no lock held while compressing).
//!   DONE     the result is stored in the slot; its output bytes are charged to the dirty
//!            counter (accounting.rs) until taken or dropped, its record bytes to `ready`.
//!   TAKEN    the result went to the sync stage (through its channel) or into the record.
//! Transitions:
//!   QUEUED  → RUNNING   a worker pops an entry of the slot;
//!   RUNNING → DONE      the worker finishes and nobody claimed the slot;
//!   RUNNING → TAKEN     the worker finishes and the sync stage claimed the slot meanwhile:
//!                       the result goes straight to the sync stage's channel;
//!   RUNNING → TAKEN     the compression panicked (fault.rs): no result exists; a claimed
//!                       slot's channel sender is dropped unused, so the sync stage waiting
//!                       for it fails its txg (the pool is suspended already);
//!   DONE    → TAKEN     the sync stage claims the slot: it sends the result itself;
//!   DONE    → TAKEN     (packing, early.rs) right after finishing a background job, the
//!                       worker moves a Packed result into its record if the record still
//!                       holds this slot in its file's open layer (`take_packed`);
//!   QUEUED  (claimed)   the sync stage registers its channel and pushes an urgent entry
//!                       of the same slot, so the job runs ahead of background work;
//!                       whichever entry a worker pops first runs the job, the other finds
//!                       the slot no longer QUEUED and does nothing.
//!
//! Invariants:
//!   - A slot belongs to the bytes its record held when it was created: the record drops
//!     its slot on every mutation (dirty.rs `DataRec::buf_mut`), so a stale result is
//!     unreachable (it lives on in a detached slot until the job ends, then is dropped).
//!   - Nobody waits on a slot: workers never block on one, and the sync driver only
//!     waits on its result channel, fed by jobs that are running or queued (queued jobs
//!     always run: a worker-pool job is submitted for every entry, early.rs).
//!   - A slot's charges are changed under its lock, together with its state: a claim
//!     never takes out bytes that the finishing job has not added yet.
//!
//! Queue: `urgent` (the sync stage's records, FIFO) before `background` (early
//! compression); `pop` takes urgent entries first. The background entries are scheduled
//! per QoS tree (control::qos::sched `CompressScheduler`): each tree's records in order,
//! QoS trees earliest deadline first with deadlines from their allotted rates, so a fast
//! tree's records never wait behind a slow tree's expensive ones; records outside QoS trees
//! in arrival order on the CPU the trees leave. A background entry carries where its record
//! lives (`H`, dirty.rs `RecordHome`), so that the worker can pack the result into it; the
//! bytes of one outside QoS trees count in the `backlog` until a worker runs it (a QoS
//! tree's queued bytes are bounded per tree, qos.rs BACKLOG).

use crate::base::accounting::{Accounting, Charge, Counter};
use crate::base::locks::{Mutex, Rank, RwLock};
use crate::compress::levels::{Levels, Outcome, RecordInfo};
use crate::compress::outbuf::OutPool;
use crate::compress::policy::{compress_with, raw_of, Compressed, Policy, TRUST_AFTER};
use crossbeam_channel::Sender;
use squeezefs_codec::heuristic::is_zeros;
use squeezefs_codec::{CallTime, Codec, WorkspaceConfig, Workspaces};
use squeezefs_control::qos::{CompressScheduler, SchedTunables, TreeId, NO_TREE};
use squeezefs_meta::Ino;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// What one compression job holds: a record of a file, or a bundle of short records
/// (bundle.rs), which is searched as one record of the pool's record size
/// ([`Codecs::compress_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Record,
    Bundle,
}

/// The compress stage's state: the pool's compression policy (a file's own, when it has
/// one, travels with its dirty data), the level decisions, the codecs, the queue of work.
pub struct Compression<H> {
    policy: RwLock<Policy>,
    pub levels: Levels,
    pub codecs: Codecs,
    pub queue: CompressQueue<H>,
}

impl<H> Compression<H> {
    pub fn new(policy: Policy, levels: Levels, codecs: Codecs) -> Compression<H> {
        Compression { policy: RwLock::new(Rank::Leaf, policy), levels, codecs, queue: CompressQueue::default() }
    }

    /// Compress one record of file `ino` whose `streak` records in a row compressed: the
    /// one place a record's codec is decided and its compression measured (block comment).
    /// `backlog`: more records wait for compression behind this one.
    pub fn compress(
        &self,
        ino: Ino,
        data: &[u8],
        policy: Policy,
        streak: &AtomicU32,
        backlog: bool,
        unit: Unit,
    ) -> Compressed {
        if is_zeros(data) {
            return Compressed::Zeros;
        }
        let trusted = policy.force || streak.load(Ordering::Relaxed) >= TRUST_AFTER;
        let rec = RecordInfo { ino, data, trusted, backlog };
        let choice = self.levels.choose(policy, &rec);
        let (c, time) = if choice.codec == Codec::NONE {
            (raw_of(data), CallTime::default())
        } else {
            let (c, time) = self.codecs.compress_with(data, choice.codec, unit);
            // the file's streak follows what its records do when compressed; a record stored
            // raw by decision (auto's, the heuristic's) says nothing about that
            match &c {
                Compressed::Packed { .. } => {
                    streak.fetch_add(1, Ordering::Relaxed);
                }
                _ => streak.store(0, Ordering::Relaxed),
            }
            (c, time)
        };
        let stored_bytes = match &c {
            Compressed::Packed { bytes, .. } => bytes.len() as u64,
            _ => data.len() as u64,
        };
        self.levels.finish(&rec, &choice, Outcome { stored_bytes, cpu_ns: time.cpu_ns, wall_ns: time.wall_ns });
        c
    }

    /// The mount-wide policy (files without their own).
    pub fn pool_policy(&self) -> Policy {
        *self.policy.read()
    }

    pub fn set_pool_policy(&self, p: Policy) {
        *self.policy.write() = p;
    }
}

/// Block sizes of the compression-context pools: a record or a bundle goes to the smallest
/// that holds it. Records up to 128 KiB share the first (their contexts are sized and their
/// zstd parameters tuned for it, as before files had record sizes of their own); each
/// longer size gets its own pool, sized for it, so a 1 MiB record is compressed with a
/// window over the whole record and no 128 KiB record pays for a 1 MiB context. The sizes
/// above the largest record size serve bundles (bundle.rs; up to `MAX_BUNDLE_SIZE`): a
/// bundle is compressed with a window over all its members, which is where its gain
/// comes from.
pub const CONTEXT_BLOCKS: [usize; 6] = [128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20];

/// Index in [`CONTEXT_BLOCKS`] of the pool for a record of `len` bytes (the last pool for
/// anything longer, which the codec then refuses and the record is stored raw).
pub fn context_class(len: usize) -> usize {
    CONTEXT_BLOCKS.iter().position(|&b| len <= b).unwrap_or(CONTEXT_BLOCKS.len() - 1)
}

/// The compression contexts and output buffers: everything compressing a record needs.
pub struct Codecs {
    /// one pool of contexts per block size ([`CONTEXT_BLOCKS`]), each created on first use;
    /// the first also serves every decode (decoding contexts do not depend on block sizes)
    ws: [OnceLock<Workspaces>; CONTEXT_BLOCKS.len()],
    /// the pools of bundles longer than the record size, per block size: their contexts
    /// search as on one record of `recordsize` bytes (codec `WorkspaceConfig::search_size`)
    bundle_ws: [OnceLock<Workspaces>; CONTEXT_BLOCKS.len()],
    /// the pool's record size
    recordsize: usize,
    outs: Arc<OutPool>,
    /// worker threads (sizes the contexts' memory bound)
    threads: usize,
    sector: usize,
}

impl Codecs {
    /// `out_bytes`: idle compressed-output buffers kept for reuse (outbuf.rs); `recordsize`:
    /// the pool's.
    pub fn new(threads: usize, sector: u64, out_bytes: usize, recordsize: u64) -> Codecs {
        Codecs {
            ws: Default::default(),
            bundle_ws: Default::default(),
            recordsize: recordsize as usize,
            outs: OutPool::new(out_bytes),
            threads,
            sector: sector as usize,
        }
    }

    /// The pool of [`CONTEXT_BLOCKS`]`[class]`, created on first use (a pool that stores raw
    /// never needs one). Each pool has the whole memory bound: a mount writing records of
    /// several sizes above 128 KiB at once may hold up to one bound per size, and an engine
    /// that bundles uses the class of its bundles besides its records' (a bundle is
    /// compressed in one context sized for the bundle size, never more than one per
    /// worker at a time).
    fn pool(&self, class: usize) -> &Workspaces {
        self.ws[class].get_or_init(|| self.new_pool(class, None))
    }

    /// The pool for bundles of [`CONTEXT_BLOCKS`]`[class]`: the record pool of that size
    /// when a record can be that long, else one whose contexts search as on one record.
    fn bundle_pool(&self, class: usize) -> &Workspaces {
        if CONTEXT_BLOCKS[class] <= self.recordsize {
            return self.pool(class);
        }
        self.bundle_ws[class].get_or_init(|| self.new_pool(class, Some(self.recordsize)))
    }

    fn new_pool(&self, class: usize, search_size: Option<usize>) -> Workspaces {
        let workers = self.threads.max(1);
        Workspaces::new(WorkspaceConfig {
            max_bytes: (64usize << 20).max(workers * (8 << 20)),
            idle_timeout: std::time::Duration::from_secs(60),
            block_size: CONTEXT_BLOCKS[class],
            search_size,
        })
    }

    /// Contexts for decoding (and for compressing records up to 128 KiB).
    pub fn workspaces(&self) -> &Workspaces {
        self.pool(0)
    }

    /// Figures of the compression contexts (every pool's summed), without creating them.
    pub fn stats(&self) -> squeezefs_codec::PoolStats {
        let mut total = squeezefs_codec::PoolStats::default();
        for s in self.ws.iter().chain(&self.bundle_ws).filter_map(OnceLock::get).map(Workspaces::stats) {
            total.max_bytes += s.max_bytes;
            total.reserve_bytes += s.reserve_bytes;
            total.used_bytes += s.used_bytes;
            total.live_bytes += s.live_bytes;
            total.peak_live_bytes += s.peak_live_bytes;
            total.idle += s.idle;
            total.busy += s.busy;
            total.created += s.created;
            total.reclaimed += s.reclaimed;
            total.reserve_lends += s.reserve_lends;
            total.waits += s.waits;
            total.compress_calls += s.compress_calls;
            total.compress_src_bytes += s.compress_src_bytes;
            total.compress_cpu_ns += s.compress_cpu_ns;
        }
        total
    }

    /// Compress `data` with `codec` (policy.rs `compress_with`), with the contexts of its
    /// size class (a record's, or a bundle's: at most the pool's bundle size): the result
    /// and the codec's CPU and wall time. A bundle is searched as one record of the pool's
    /// record size over a window of the whole bundle (codec `shaped_cparams`): a level
    /// costs per byte what it costs on the records the user chose it for, and the bundle
    /// adds the matches and entropy tables its members share.
    pub fn compress_with(&self, data: &[u8], codec: Codec, unit: Unit) -> (Compressed, CallTime) {
        let class = context_class(data.len());
        let pool = || match unit {
            Unit::Record => self.pool(class),
            Unit::Bundle => self.bundle_pool(class),
        };
        compress_with(data, codec, self.sector, pool, &self.outs)
    }
}

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
    /// output bytes of a DONE result, against `dirty`
    dirty: Option<Charge>,
    /// record bytes of a DONE result, against `ready`
    ready: Option<Charge>,
    /// record bytes of a queued background entry, against `backlog`
    backlog: Option<Charge>,
}

pub struct Slot {
    st: Mutex<SlotState>,
    /// the policy the job compresses with: that of the write that filled the record
    pub policy: Policy,
    /// the file the record belongs to
    pub ino: Ino,
    pub unit: Unit,
    acct: Arc<Accounting>,
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

/// What running a slot's job did (for the worker that ran it).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ran {
    /// the result is DONE and Packed: the worker may pack it into its record
    pub packable: bool,
    /// `ready` reached `EARLY_SYNC_BYTES`: the txg driver should close the open txg
    pub kick: bool,
}

/// Close the open txg once this many record bytes were compressed early and wait unclaimed.
pub const EARLY_SYNC_BYTES: u64 = 16 << 20;

/// Dirty bytes a DONE result holds: its output buffer.
fn charge_of(c: &Compressed) -> u64 {
    match c {
        Compressed::Packed { bytes, .. } => bytes.capacity() as u64,
        _ => 0,
    }
}

impl Slot {
    /// A QUEUED slot compressing the record `buf`.
    pub fn new(
        buf: Arc<Vec<u8>>,
        policy: Policy,
        ino: Ino,
        streak: Arc<AtomicU32>,
        acct: &Arc<Accounting>,
    ) -> Arc<Slot> {
        Slot::queued(buf, policy, ino, streak, Unit::Record, acct)
    }

    /// A QUEUED slot compressing the bundle `buf` (its first member's file: `ino`).
    pub fn bundle(buf: Arc<Vec<u8>>, policy: Policy, ino: Ino, acct: &Arc<Accounting>) -> Arc<Slot> {
        Slot::queued(buf, policy, ino, Arc::default(), Unit::Bundle, acct)
    }

    fn queued(
        buf: Arc<Vec<u8>>,
        policy: Policy,
        ino: Ino,
        streak: Arc<AtomicU32>,
        unit: Unit,
        acct: &Arc<Accounting>,
    ) -> Arc<Slot> {
        Arc::new(Slot {
            st: Mutex::new(
                Rank::Slot,
                SlotState {
                    state: State::Queued(Job { buf, streak }),
                    forward: None,
                    dirty: None,
                    ready: None,
                    backlog: None,
                },
            ),
            policy,
            ino,
            unit,
            acct: acct.clone(),
        })
    }

    /// A slot DONE from the start (caller-runs computed `c` from the record's bytes, which
    /// `ready` already counts).
    pub fn finished(c: Compressed, policy: Policy, ino: Ino, ready: Charge, acct: &Arc<Accounting>) -> Arc<Slot> {
        let dirty = Some(acct.charge(Counter::Dirty, charge_of(&c)));
        Arc::new(Slot {
            st: Mutex::new(
                Rank::Slot,
                SlotState { state: State::Done(c), forward: None, dirty, ready: Some(ready), backlog: None },
            ),
            policy,
            ino,
            unit: Unit::Record,
            acct: acct.clone(),
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
                g.dirty.take();
                g.ready.take();
                drop(g);
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

    /// Run the job if it is still queued (called by a worker): `compress` compresses the
    /// record's bytes (of file `ino`) with the slot's policy, or returns `None` when it
    /// panicked.
    pub fn run(&self, compress: impl FnOnce(Ino, &[u8], Policy, &AtomicU32, Unit) -> Option<Compressed>) -> Ran {
        let job = {
            let mut g = self.st.lock();
            match std::mem::replace(&mut g.state, State::Running) {
                State::Queued(j) => j,
                other => {
                    g.state = other;
                    return Ran::default();
                }
            }
        };
        let len = job.buf.len() as u64;
        let c = compress(self.ino, &job.buf, self.policy, &job.streak, self.unit);
        let packed = matches!(c, Some(Compressed::Packed { .. }));
        // let go of the buffer before publishing: a writer or the buffer pool may then
        // own it alone again (no copy on write)
        drop(job);
        let mut g = self.st.lock();
        g.backlog.take();
        let Some(c) = c else {
            g.state = State::Taken;
            let forward = g.forward.take();
            drop(g);
            drop(forward);
            return Ran::default();
        };
        match g.forward.take() {
            Some(f) => {
                g.state = State::Taken;
                drop(g);
                let _ = f.tx.send((f.layer, f.idx, c));
                Ran::default()
            }
            None => {
                g.dirty = Some(self.acct.charge(Counter::Dirty, charge_of(&c)));
                let ready = self.acct.charge(Counter::Ready, 0);
                let kick = ready.add(len) >= EARLY_SYNC_BYTES;
                g.ready = Some(ready);
                g.state = State::Done(c);
                Ran { packable: packed, kick }
            }
        }
    }

    /// DONE (Packed) → TAKEN for packing the result into its record (early.rs): the
    /// compressed bytes and the record bytes' `ready` charge; `None` in any other state.
    /// The caller holds the record's file lock and checked the record still holds this
    /// slot (lock order: file, then slot).
    pub fn take_packed(&self) -> Option<(Codec, Arc<crate::compress::outbuf::OutBytes>, u64, Charge)> {
        let mut g = self.st.lock();
        let State::Done(Compressed::Packed { .. }) = &g.state else { return None };
        let State::Done(Compressed::Packed { codec, bytes, hash }) = std::mem::replace(&mut g.state, State::Taken)
        else {
            unreachable!("matched above")
        };
        g.dirty.take();
        let ready = g.ready.take().map_or_else(|| self.acct.charge(Counter::Ready, 0), |r| r.transfer());
        Some((codec, bytes, hash, ready))
    }

    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        matches!(self.st.lock().state, State::Done(_))
    }
}

/// Compress tasks in two priorities (see the block comment); `H` says where a background
/// entry's record lives.
pub struct CompressQueue<H> {
    q: Mutex<Lists<H>>,
    /// entries queued (both lists), readable without the lock
    len: AtomicUsize,
}

struct Lists<H> {
    urgent: VecDeque<Arc<Slot>>,
    background: CompressScheduler<(Arc<Slot>, H)>,
}

impl<H> Default for CompressQueue<H> {
    fn default() -> Self {
        CompressQueue {
            q: Mutex::new(
                Rank::Leaf,
                Lists { urgent: VecDeque::new(), background: CompressScheduler::new(SchedTunables::default()) },
            ),
            len: AtomicUsize::new(0),
        }
    }
}

impl<H> CompressQueue<H> {
    /// Queue a background entry for `slot` at `now` (qos.rs clock), estimated to cost
    /// `cost_ns` of codec CPU; outside QoS trees its bytes count in the backlog until it runs.
    pub fn push_background(&self, slot: Arc<Slot>, home: H, now: f64, cost_ns: f64) {
        let tree = slot.policy.tree;
        let bytes = {
            let mut g = slot.st.lock();
            match &g.state {
                State::Queued(j) => {
                    let len = j.buf.len() as u64;
                    if tree == NO_TREE {
                        g.backlog = Some(slot.acct.charge(Counter::Backlog, len));
                    }
                    len
                }
                _ => 0,
            }
        };
        self.q.lock().background.push(tree, bytes, cost_ns, now, (slot, home));
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    /// Queue urgent entries (the sync stage's records), ahead of every background entry.
    pub fn push_urgent(&self, slots: impl IntoIterator<Item = Arc<Slot>>) {
        let mut q = self.q.lock();
        let was = q.urgent.len();
        q.urgent.extend(slots);
        self.len.fetch_add(q.urgent.len() - was, Ordering::Relaxed);
    }

    /// The next entry to run at `now`: urgent first; a background entry comes with its home.
    pub fn pop(&self, now: f64) -> Option<(Arc<Slot>, Option<H>)> {
        let mut q = self.q.lock();
        let e = match q.urgent.pop_front() {
            Some(s) => Some((s, None)),
            None => q.background.pop(now).map(|j| (j.item.0, Some(j.item.1))),
        };
        if e.is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        e
    }

    /// Set each QoS tree's lane rate (its allotment, bytes/s; 0: the tree is gone or idle).
    pub fn set_rates(&self, rates: &[(TreeId, f64)]) {
        let mut q = self.q.lock();
        for &(t, r) in rates {
            q.background.set_rate(t, r);
        }
    }

    /// How late `tree`'s oldest queued record is at `now`, seconds.
    pub fn lag(&self, tree: TreeId, now: f64) -> f64 {
        self.q.lock().background.lag(tree, now)
    }

    /// Bytes of `tree` queued in the background.
    pub fn queued(&self, tree: TreeId) -> u64 {
        self.q.lock().background.queued(tree).0
    }

    /// Entries waiting (a snapshot: others may push or pop meanwhile).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_and_bundle_size_gets_the_smallest_context_pool_that_holds_it() {
        for shift in 12..=22u32 {
            let rs = 1usize << shift;
            for len in [1, rs / 2 + 1, rs - 1, rs] {
                let c = context_class(len);
                assert!(len <= CONTEXT_BLOCKS[c], "{len} bytes in a {} pool", CONTEXT_BLOCKS[c]);
                assert!(c == 0 || len > CONTEXT_BLOCKS[c - 1], "{len} bytes fit a smaller pool than {c}");
            }
        }
        assert_eq!(context_class(128 << 10), 0);
        assert_eq!(context_class((128 << 10) + 1), 1);
        assert_eq!(context_class(1 << 20), 3);
        assert_eq!(context_class((1 << 20) + 1), 4);
        assert_eq!(context_class(4 << 20), CONTEXT_BLOCKS.len() - 1);
        assert!(CONTEXT_BLOCKS.contains(&(crate::base::options::MAX_RECORDSIZE as usize)));
        // the largest bundle has a pool sized for it, so no bundle is stored raw for being
        // too long for its contexts
        assert_eq!(CONTEXT_BLOCKS[CONTEXT_BLOCKS.len() - 1], crate::base::options::MAX_BUNDLE_SIZE as usize);
    }

    /// A bundle of a 1 MiB-record pool and a 2 MiB record go to different contexts: the
    /// bundle's search is the record size's, the record's its own (codec
    /// `shaped_cparams`), so at zstd:15 the same bytes give different frames, and both
    /// decode.
    #[test]
    fn a_bundle_is_compressed_in_contexts_that_search_as_one_record() {
        let codecs = Codecs::new(2, 512, 8 << 20, 1 << 20);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let words = ["bundle ", "record ", "search ", "window ", "zstd ", "txg ", "extent\n"];
        let mut data = Vec::with_capacity(2 << 20);
        while data.len() < 2 << 20 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.extend_from_slice(words[(x % 7) as usize].as_bytes());
        }
        data.truncate(2 << 20);
        let zstd15 = Codec { alg: squeezefs_codec::Algorithm::Zstd, level: 15 };
        let frame = |unit| match codecs.compress_with(&data, zstd15, unit).0 {
            Compressed::Packed { bytes, .. } => bytes.to_vec(),
            _ => panic!("{unit:?}: not compressed"),
        };
        let (bundle, record) = (frame(Unit::Bundle), frame(Unit::Record));
        assert_ne!(bundle, record, "the bundle's context searched as the 2 MiB record's");
        for f in [&bundle, &record] {
            assert!(zstd::bulk::decompress(f, data.len()).is_ok_and(|d| d == data));
        }
    }
}
