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
//! # Integration (where the fs core, the pipeline and the FUSE layer use them)
//!
//! ```text
//! CLOCK: one monotonic clock per engine, seconds since it opened (pipeline qos.rs).
//!
//! TREES (fs core qos.rs): tree id = inode number of the directory holding `qos`; the mount
//!   option qos=N makes the root directory (ROOT_INO) the mount's tree. A file's tree = the
//!   source of its effective `qos` (inherit.rs, cached); none → NO_TREE, not paced. Trees
//!   are registered with the engine lazily (a tree's parent first) and reconciled when the
//!   inheritance generation moves (property changes, renames, remounts) or every second:
//!   set_tree / remove_tree / move_tree never lose or make tokens (admission.rs TREE
//!   CHANGES).
//!
//! ADMISSION (fs core `Fs::write`, before the data reaches the engine): admit → Go (write),
//!   or WaitUntil(t): the writing thread sleeps until t holding no lock of the fs or the
//!   engine, then asks again. The FUSE layer keeps those threads off the ones other
//!   requests need: a tree's files opened for writing get FOPEN_DIRECT_IO (each write(2)
//!   is a WRITE from the writer's own thread, paced on its own; through the writeback cache
//!   a slow tree would fill the connection's dirty-page budget and throttle everyone), and
//!   the operation core names such WRITEs (`may_wait`); /dev/fuse threads hand them with
//!   their buffer to a helper thread, io_uring queues lend the ring entry to one and
//!   register a spare entry. Reads never ask admission.
//!
//! RECORDS (pipeline): a record carries its tree in its policy; under an adaptive spec
//!   (or none chosen anywhere) the compress stage's decision point (levels.rs) gives it
//!   `QosLevels::pick(tree)` (a fixed spec keeps its codec), and feeds the tree's
//!   meters with its measured CPU and stored bytes (only the tree's own records: each
//!   tree's data compresses differently); the background compress queue is a
//!   CompressScheduler (EDF per tree); a tree's writer waits only for its own tree's
//!   queued records (max(8 MiB, 0.5 s of its allotment)) and never compresses them itself.
//!
//! REPLAN (pipeline qos.rs, every LevelTunables::replan_secs): per tree a TreeDemand
//!   (admission's allotment, 0 only when idle with nothing queued; its rate; its lag in the
//!   scheduler; the workers as its core limit), the cores the CPU meter sees free less what
//!   compression outside trees took, the overhead per byte, the devices' throughput; then
//!   the scheduler's lane rates.
//!
//! TRACE and STATS: the trace row of a tree's record names the tree and `qos` as the
//!   reason (`squeezefs plot` draws level and throughput per tree); a tree's StatsRow line
//!   is served as `user.squeezefs.qos-stats` of its directory and listed by `squeezefs
//!   stats`.
//! ```

pub mod admission;
pub mod levels;
pub mod sched;
pub mod stats;

pub use admission::{split, Admission, AdmissionTunables, Admit, Claim, QosError, TreeId, TreeInfo, NO_TREE};
pub use levels::{plan, LevelTunables, Plan, QosLevels, TreeDemand, TreeLoad, TreePlan, START};
pub use sched::{CompressScheduler, Job, SchedTunables};
pub use stats::{StatsParseError, StatsRow, TreeStats, INTERVAL_SECS};
