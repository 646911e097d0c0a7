//! QoS trees (DESIGN.md §6): a directory holding `qos=N` has its writes paced to N bytes/s,
//! shared hierarchically with nested trees, and its records compressed with the strongest
//! levels that still keep up. Four pure building blocks, each with its own design comment:
//!
//! * [`admission`]: token buckets per tree nested like Linux HTB; `admit(tree, bytes, now)`
//!   answers Go or WaitUntil(t), never sleeps;
//! * [`levels`]: the CPU left for QoS split between trees along their ladders' hulls so as to
//!   save the most bytes while every rate is met; per-tree meters (`QosLevels`);
//! * [`sched`]: the compress queue, QoS records earliest deadline first with deadlines from
//!   each tree's rate, unpaced records on the CPU the QoS trees leave;
//! * [`stats`]: the per-tree line of `squeezefs stats`.
//!
//! Simulated end to end in tests/qos_sim.rs (writers → admission → plan → scheduler →
//! workers → device).
//!
//! # Integration (what the fs core, the pipeline and the FUSE layer provide)
//!
//! ```text
//! CLOCK: one monotonic clock per mount, seconds since mount as f64 (`now` everywhere below).
//!
//! TREES (fs core; Admission behind one short-held Mutex in the fs):
//!   tree id = inode number of the directory holding `qos`; the mount option qos=N makes the
//!     root directory (ROOT_INO) a tree, the ceiling of the whole filesystem.
//!   A file's tree = the source of its effective `qos` (props: Resolved.eff, Source::Local for
//!     a directory's own value, Source::Inherited(dir) otherwise; Source::Mount → ROOT_INO;
//!     none → NO_TREE, not paced). It is resolved with the file's compression policy on every
//!     write (the inheritance cache makes that one map lookup) and travels with the dirty
//!     data like the policy does (`Fill::Data`), so every record knows its tree.
//!   Registration is lazy: the first write resolving to a tree not in Admission registers it,
//!     after registering its parent tree (the effective `qos` source of the directory's
//!     parent) — a tree nobody writes to is idle anyway.
//!   Property changes (xattr set/clear of user.squeezefs.qos, `prop set/inherit`):
//!     set_tree(dir, parent tree, rate) / remove_tree(dir); then every registered tree whose
//!     parent tree changed (a new tree between a tree and its old parent) gets move_tree.
//!   Renames that move a directory (the inheritance generation bump): re-resolve each
//!     registered tree's parent tree (tens of trees: cheap) and move_tree those that changed.
//!   These calls never lose or make tokens (admission.rs TREE CHANGES).
//!
//! ADMISSION (fs write path, per FUSE WRITE, before the data enters the dirty cache):
//!   `Fs::admit_write(ino, len, now) -> Admit` resolves the tree and calls Admission::admit.
//!   Go: the caller goes on with `Fs::write` at once. WaitUntil(t): nothing was charged;
//!   the caller must ask again at t, WITHOUT holding any lock and without sleeping on a
//!   thread other requests need. The FUSE operation core (crates/fuse opcore.rs, shared by
//!   both transports) asks admission before `fs.write` for Op::Write and answers a Wait
//!   with a "deferred until t" outcome instead of a reply; each transport keeps the request
//!   and serves others meanwhile:
//!   * io_uring transport: requests are handled one at a time by the ring thread of each CPU,
//!     so a paced WRITE is deferred, not slept on: its ring entry (whose payload already
//!     holds the data: no copy) goes into the queue's deferred heap ordered by t, and the
//!     ring arms one timeout (IORING_OP_TIMEOUT, absolute) for the earliest t. When it
//!     fires the ring thread serves each due entry again: Go → handled like any WRITE (or
//!     lent to a helper thread as FSYNC is, uring/mod.rs `Queue::lend`, if the dirty
//!     throttle may block), the reply committed from that entry; Wait → back in the heap.
//!     A deferred entry stays with its request until the reply, so the queue registers a
//!     spare entry for each one deferred (up to a cap of DEPTH + 32 per queue, 1 MiB payload
//!     each), keeping DEPTH entries free for the other trees' requests on that CPU.
//!   * /dev/fuse transport (devfuse.rs: threads each reading into one buffer): the thread
//!     moves its buffer (holding the request: no copy) into a pacer heap shared by the
//!     mount's threads and carries on with a spare buffer from a small pool; the pacer (one
//!     thread per mount) serves due requests again and writes each reply to the descriptor
//!     its request came from (a cloned descriptor answers only its own requests). With the
//!     pool empty the thread waits for a buffer: more paced requests in flight than spare
//!     buffers.
//!   * the kernel writeback cache: a slow tree's paced flushes would keep its dirty pages in
//!     the page cache, and the kernel's dirty limit is per mount (the FUSE bdi), so writers
//!     of other trees would be throttled by balance_dirty_pages. Files in a QoS tree opened
//!     for writing are therefore opened with FOPEN_DIRECT_IO: each write(2) is one FUSE WRITE
//!     from the writer's own thread, paced on its own, with nothing shared filling up.
//!   * READ, and every other request, never asks admission: readers are never paced.
//!   The existing dirty-data throttle (pipeline throttle.rs) sleeps on the calling thread;
//!   on the ring thread it stalls the other requests of that CPU just as pacing would. It
//!   should be deferred the same way (it is outside this module).
//!
//! RECORDS (pipeline): a record's policy decision for a QoS tree is `QosLevels::pick(tree)`
//!   (the engine holds one QosLevels behind a Mutex; pick is O(1)) when the record is queued
//!   for compression; its level is traced with why = `qos`.
//!   The background list of the compress queue (early.rs CompressQueue) becomes a
//!   CompressScheduler: push(tree, record bytes, estimated CPU (plan cost_ns × bytes, or the
//!   codec's nominal figure for non-QoS records), now, slot); workers pop(now). The urgent
//!   list (records a syncing txg waits for) stays first.
//!   Backlog limits become per tree: a writer of tree X waits (deferred as above, not slept)
//!   while X's uncompressed records in flight exceed max(8 MiB, 0.5 s × X's allotment), so a
//!   slow tree's backlog never holds up a fast tree's writers; the global dirty limit stays.
//!   Caller-runs compression (a writer compressing its own records) is fine for QoS trees
//!   (it compresses its own tree's records, at `pick`'s level) but not on a ring thread.
//!
//! METERS (pipeline, after each record is compressed): QosLevels::observe(tree, Sample {
//!   codec, input_bytes, stored_bytes, cpu_ns }) with the codec CPU from
//!   Workspaces::compress_measured — only the tree's own records feed its meters (each tree's
//!   data compresses differently). TreeStats::written(codec, input, stored) for stats.
//!   Non-QoS records: their codec + overhead CPU is summed per replan interval; it is what
//!   the QoS plan cannot count on.
//!
//! REPLAN (pipeline, every LevelTunables::replan_secs = 0.1 s, from the txg driver or a
//!   timer; and when Admission reports a tree woke up): for each registered tree a
//!   TreeDemand { rate_bps: Admission::expected_rate, qos_bps: its rate, lag_secs:
//!   CompressScheduler::lag, max_cores: compress workers }; cores = min(workers,
//!   CpuMeter::available_cores) − non-QoS compression CPU (cores) of the last interval;
//!   overhead = OverheadMeter::ns_per_byte; device = Σ DeviceView::throughput_bps. Then
//!   CompressScheduler::set_rate(tree, expected_rate) for each tree.
//!
//! TRACE (mount option trace=FILE, control::trace v1): one row per record as for auto;
//!   `tree` = the record's tree id (0 outside QoS trees), `why` = `qos` for levels the plan
//!   chose; `squeezefs plot` draws throughput and level over time per tree from it.
//!
//! STATS: one TreeStats per registered tree (admitted(bytes, now) on each Go; written(...)
//!   per record). The daemon serves StatsRow's line (stats.rs TEXT) as the virtual xattr
//!   `user.squeezefs.qos` of the tree's directory, with target = the property, allotted =
//!   Admission's allotment; `squeezefs stats PATH` lists, for each directory under PATH that
//!   answers it: path, target, allotted, achieved over the last 10 s and since mount, ratio,
//!   levels by share of input (and the same fields in --json).
//! ```

pub mod admission;
pub mod levels;
pub mod sched;
pub mod stats;

pub use admission::{split, Admission, AdmissionTunables, Admit, Claim, QosError, TreeId, TreeInfo, NO_TREE};
pub use levels::{plan, LevelTunables, Plan, QosLevels, TreeDemand, TreeLoad, TreePlan, START};
pub use sched::{CompressScheduler, Job, SchedTunables};
pub use stats::{StatsParseError, StatsRow, TreeStats, INTERVAL_SECS};
