//! QoS trees in the engine (DESIGN.md §6): writes into a tree paced to its rate, its records
//! compressed at the strongest levels that keep up, its figures for `squeezefs stats`. The
//! decisions are the pure parts of `squeezefs_control::qos`; this module holds their state,
//! feeds them what the engine measures and answers the fs core and the compress stage.
//!
//! ```text
//! CLOCK: seconds since the engine opened (`Qos::now`), for every call below.
//!
//! TREES (set by the fs core, which resolves them from the `qos` property and the mount
//!   option): `set_tree(tree, parent, rate)`, `remove_tree(tree)`. A tree is known to
//!   admission (its bucket), to the stats (its counters, kept while it exists) and, once its
//!   first record is compressed, to the level choice (its ladder and meters).
//!
//! ADMISSION (`admit(tree, bytes)`, asked by the fs core before a write enters the dirty
//!   cache): Go (the bytes were charged; the tree's stats count them as achieved) or
//!   Wait(instant): nothing was charged, ask again then. Never sleeps, holds one Leaf lock
//!   for a few microseconds.
//!
//! LEVEL (per record, levels.rs `Levels::choose`, the compress stage's decision point): a
//!   record of a tree gets `QosLevels::pick(tree)`; after compressing, `observe` (from
//!   `Levels::finish`) feeds the tree's meters (only its own records: each tree's data
//!   compresses differently) and its stats (codec, input, stored). Records outside QoS trees
//!   add their codec CPU to `unpaced_cpu_ns`: CPU the QoS plan cannot count on.
//!
//! REPLAN (the QoS thread, every `LevelTunables::replan_secs` while a tree exists): per tree
//!   its demand (admission's allotment — 0 only while admission finds it idle and none of
//!   its records wait for compression: a writer held by its tree's backlog sends no request
//!   but is not idle —, its `qos` rate, how late its queued records are, the compress
//!   workers as its core limit); cores for QoS = min(workers, cores the CPU meter
//!   sees free for us) − the cores unpaced compression took over the last interval; the
//!   pipeline overhead per byte (levels.rs's CPU meter — /proc/stat's cores not taken by
//!   others, where auto takes the cores our threads obtain — and OverheadMeter, which auto
//!   uses too: `Levels::cpu_figures`); the devices' summed write throughput. Then the plan's mixes are picked
//!   from, and the compress queue's lanes get the trees' allotments as their rates (EDF
//!   deadlines, compress/queue.rs).
//!   States of the thread: not started (no tree yet) → running (started by the first
//!   `set_tree`) → ended (the engine closed or was dropped: it holds only a weak reference
//!   between rounds).
//!
//! BACKLOG (per tree): a writer of tree X waits while X's records queued for compression
//!   exceed max(TREE_BACKLOG_MIN_BYTES, TREE_BACKLOG_SECS × X's allotment): a slow tree's
//!   backlog never holds up another tree's writers (the global backlog bound of early.rs
//!   applies to records outside QoS trees only).
//!
//! TUNABLES: `AdmissionTunables`, `LevelTunables` (control::qos); TREE_BACKLOG_MIN_BYTES 8 MiB,
//!   TREE_BACKLOG_SECS 0.5 s; FLOOR_CORES 0.1 (the cores the plan always assumes it has: the
//!   scheduler gives our threads some share, and a plan on 0 cores would store raw forever).
//! ```

use crate::base::locks::{Mutex, Rank};
use squeezefs_codec::{Algorithm, Codec};
use squeezefs_control::qos::{
    Admission, AdmissionTunables, Admit, LevelTunables, QosError, QosLevels, StatsRow, TreeDemand, TreeId, TreeInfo,
    TreeStats, NO_TREE,
};
use squeezefs_control::Sample;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A writer waits while its tree has more than this queued for compression, or…
pub const TREE_BACKLOG_MIN_BYTES: u64 = 8 << 20;
/// …this many seconds of its allotment, whichever is larger.
pub const TREE_BACKLOG_SECS: f64 = 0.5;
/// Fewest cores a plan assumes it has.
pub const FLOOR_CORES: f64 = 0.1;

/// The answer to a write asking to enter its tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosAdmit {
    /// the bytes were charged: write
    Go,
    /// nothing was charged: ask again at this instant
    Wait(Instant),
}

/// One tree as `squeezefs stats` and the fs core see it.
#[derive(Clone, Debug, PartialEq)]
pub struct QosTree {
    pub tree: TreeId,
    pub info: TreeInfo,
    pub row: StatsRow,
}

struct AdmPart {
    adm: Admission,
    /// per tree: the stats counters (admitted bytes; written levels come from `LevelPart`)
    stats: HashMap<TreeId, TreeStats>,
}

struct LevelPart {
    levels: QosLevels,
    /// per tree: (codec, input, stored) of its records written
    written: HashMap<TreeId, Vec<(Codec, u64, u64)>>,
    /// per tree: codec ns per input byte of its planned mix (compress-queue cost estimates)
    cost: HashMap<TreeId, f64>,
    /// (time, unpaced codec ns) at the last replan
    last: (f64, u64),
}

/// The engine's QoS state (see the block comment).
pub struct Qos {
    epoch: Instant,
    adm: Mutex<AdmPart>,
    lv: Mutex<LevelPart>,
    /// some tree exists (records and writes outside QoS trees never take a lock)
    any: AtomicBool,
    thread_started: AtomicBool,
    /// codec CPU of records outside QoS trees, ns
    unpaced_cpu_ns: AtomicU64,
}

impl Default for Qos {
    fn default() -> Self {
        Qos::new(AdmissionTunables::default(), LevelTunables::default())
    }
}

/// The nominal codec CPU per byte of a codec, ns, as a scheduling estimate before a plan.
fn nominal_cost(c: Codec) -> f64 {
    if c.alg == Algorithm::None {
        return 0.0;
    }
    squeezefs_control::ladder::Point::nominal(c).cost
}

impl Qos {
    /// Seconds between two replans of the QoS thread (qos_thread.rs).
    pub fn replan_secs(&self) -> f64 {
        self.lv.lock().levels.tunables().replan_secs
    }

    pub fn new(adm: AdmissionTunables, lv: LevelTunables) -> Qos {
        Qos {
            epoch: Instant::now(),
            adm: Mutex::new(Rank::Leaf, AdmPart { adm: Admission::new(adm), stats: HashMap::new() }),
            lv: Mutex::new(
                Rank::Leaf,
                LevelPart { levels: QosLevels::new(lv), written: HashMap::new(), cost: HashMap::new(), last: (0.0, 0) },
            ),
            any: AtomicBool::new(false),
            thread_started: AtomicBool::new(false),
            unpaced_cpu_ns: AtomicU64::new(0),
        }
    }

    /// Seconds between two replans of the QoS thread (qos_replan.rs).
    pub fn replan_period_secs(&self) -> f64 {
        self.lv.lock().levels.tunables().replan_secs
    }

    /// Seconds since the engine opened.
    pub fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn instant(&self, t: f64) -> Instant {
        self.epoch + Duration::from_secs_f64(t.max(0.0))
    }

    /// Some tree exists.
    pub fn active(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Create or change tree `tree` (rate in bytes/s) under `parent`. Returns whether the
    /// replan thread still has to be started (the first tree).
    pub fn set_tree(&self, tree: TreeId, parent: Option<TreeId>, rate_bps: f64) -> Result<bool, QosError> {
        let now = self.now();
        let mut g = self.adm.lock();
        g.adm.set_tree(tree, parent, rate_bps, now)?;
        g.stats.entry(tree).or_insert_with(|| TreeStats::new(now));
        drop(g);
        self.any.store(true, Ordering::Relaxed);
        Ok(!self.thread_started.swap(true, Ordering::AcqRel))
    }

    /// `tree` lost its `qos` (its children go to its parent, admission.rs).
    pub fn remove_tree(&self, tree: TreeId) -> Result<(), QosError> {
        let now = self.now();
        let mut g = self.adm.lock();
        g.adm.remove_tree(tree, now)?;
        g.stats.remove(&tree);
        let left = !g.stats.is_empty();
        drop(g);
        self.any.store(left, Ordering::Relaxed);
        let mut l = self.lv.lock();
        l.levels.forget(tree);
        l.written.remove(&tree);
        l.cost.remove(&tree);
        Ok(())
    }

    /// May `bytes` be written into `tree` now? (Block comment, ADMISSION.)
    pub fn admit(&self, tree: TreeId, bytes: u64) -> QosAdmit {
        if tree == NO_TREE || !self.active() {
            return QosAdmit::Go;
        }
        let now = self.now();
        let mut g = self.adm.lock();
        match g.adm.admit(tree, bytes, now) {
            Admit::Go => {
                if let Some(s) = g.stats.get_mut(&tree) {
                    s.admitted(bytes, now);
                }
                QosAdmit::Go
            }
            Admit::WaitUntil(t) => QosAdmit::Wait(self.instant(t)),
        }
    }

    /// The trees, each with its admission state and its stats line.
    pub fn trees(&self) -> Vec<QosTree> {
        let now = self.now();
        let g = self.adm.lock();
        let mut out: Vec<QosTree> = g
            .stats
            .iter()
            .filter_map(|(&tree, s)| {
                let info = g.adm.info(tree, now)?;
                Some(QosTree { tree, info, row: s.row(tree, info.rate_bps, info.allocated_bps, now) })
            })
            .collect();
        drop(g);
        let l = self.lv.lock();
        for t in &mut out {
            if let Some(w) = l.written.get(&t.tree) {
                t.row = t.row.clone().with_levels(w.clone());
            }
        }
        out.sort_by_key(|t| t.tree);
        out
    }

    /// One tree (`trees` filtered).
    pub fn tree(&self, tree: TreeId) -> Option<QosTree> {
        self.trees().into_iter().find(|t| t.tree == tree)
    }

    /// The most `tree` may have queued for compression before its writers wait.
    pub fn backlog_bound(&self, tree: TreeId) -> u64 {
        let rate = self.adm.lock().adm.expected_rate(tree, self.now());
        TREE_BACKLOG_MIN_BYTES.max((rate * TREE_BACKLOG_SECS) as u64)
    }

    /// The codec of a record of `tree` (block comment, LEVEL).
    pub fn pick(&self, tree: TreeId) -> Codec {
        self.lv.lock().levels.pick(tree)
    }

    /// Estimated codec CPU of compressing `bytes` of `tree` with `fallback` (records outside
    /// QoS trees), ns: what the compress queue weighs shares with.
    pub fn cost_estimate(&self, tree: TreeId, bytes: u64, fallback: Option<Codec>) -> f64 {
        let per_byte = if tree != NO_TREE && self.active() {
            self.lv.lock().cost.get(&tree).copied().unwrap_or_else(|| nominal_cost(squeezefs_control::qos::START))
        } else {
            fallback.map_or(0.0, nominal_cost)
        };
        per_byte * bytes as f64
    }

    /// A record of `tree` was compressed with `codec` (`None`: stored raw without running a
    /// codec), `input` bytes stored as `stored`, the codec taking `cpu_ns`.
    pub fn observe(&self, tree: TreeId, codec: Option<Codec>, input: u64, stored: u64, cpu_ns: u64) {
        if tree == NO_TREE {
            self.unpaced_cpu_ns.fetch_add(cpu_ns, Ordering::Relaxed);
            return;
        }
        let mut l = self.lv.lock();
        if let Some(c) = codec.filter(|c| c.alg != Algorithm::None) {
            l.levels.observe(tree, &Sample { codec: c, input_bytes: input, stored_bytes: stored, cpu_ns });
        }
        let shown = codec.unwrap_or(Codec::NONE);
        let w = l.written.entry(tree).or_default();
        match w.iter_mut().find(|x| x.0 == shown) {
            Some(x) => {
                x.1 += input;
                x.2 += stored;
            }
            None => w.push((shown, input, stored)),
        }
    }

    /// One replan (block comment, REPLAN): `workers` compress workers, `avail_cores` the
    /// cores the CPU meter sees free for us, `overhead_ns` the pipeline CPU per input byte
    /// outside the codec, `device_bps` the devices' write throughput if measured, `lag` how
    /// late each tree's queued records are and how many bytes of it are queued. Returns each
    /// tree's allotment (the compress queue's lane rates).
    pub fn replan(
        &self,
        workers: usize,
        (avail_cores, overhead_ns): (f64, f64),
        device_bps: Option<f64>,
        queue: impl Fn(TreeId) -> (f64, u64),
    ) -> Vec<(TreeId, f64)> {
        let now = self.now();
        let demands: Vec<TreeDemand> = {
            let g = self.adm.lock();
            g.stats
                .keys()
                .filter_map(|&tree| {
                    let info = g.adm.info(tree, now)?;
                    Some((
                        info.idle,
                        TreeDemand {
                            tree,
                            rate_bps: info.allocated_bps,
                            qos_bps: info.rate_bps,
                            lag_secs: 0.0,
                            max_cores: workers as f64,
                        },
                    ))
                })
                .collect::<Vec<_>>()
        }
        .into_iter()
        .map(|(idle, d)| {
            let (lag_secs, queued) = queue(d.tree);
            let rate_bps = if idle && queued == 0 { 0.0 } else { d.rate_bps };
            TreeDemand { lag_secs, rate_bps, ..d }
        })
        .collect();
        let mut l = self.lv.lock();
        let unpaced = self.unpaced_cpu_ns.load(Ordering::Relaxed);
        let (t0, u0) = l.last;
        l.last = (now, unpaced);
        let unpaced_cores = if now > t0 { unpaced.saturating_sub(u0) as f64 / (now - t0) / 1e9 } else { 0.0 };
        let avail = if avail_cores > 0.0 { avail_cores } else { workers as f64 };
        let cores = (avail.min(workers as f64) - unpaced_cores).max(FLOOR_CORES);
        let overhead = if overhead_ns.is_finite() { overhead_ns.max(0.0) } else { 0.0 };
        let plan = l.levels.replan(&demands, cores, overhead, device_bps).clone();
        for p in &plan.trees {
            l.cost.insert(p.tree, p.cost_ns);
        }
        log::debug!(
            "qos replan: cores {cores:.2} (free {avail:.2}, outside trees {unpaced_cores:.2}) at {:.2}, overhead \
             {overhead:.2} ns/B; {}",
            l.levels.utilization(),
            demands
                .iter()
                .zip(&plan.trees)
                .map(|(d, p)| format!(
                    "tree {} {:.1} MB/s lag {:.2} s: {} {:.2} {}",
                    d.tree,
                    d.rate_bps / 1e6,
                    d.lag_secs,
                    p.mix.lo,
                    p.mix.frac,
                    p.mix.hi
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        demands.iter().map(|d| (d.tree, d.rate_bps)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_paced_and_counted_and_others_are_not() {
        let q = Qos::default();
        assert_eq!(q.admit(5, 1 << 20), QosAdmit::Go, "no tree: not paced");
        assert!(q.set_tree(5, None, 1e6).unwrap(), "the first tree starts the thread");
        assert!(!q.set_tree(6, Some(5), 5e5).unwrap());
        assert_eq!(q.admit(5, 1 << 20), QosAdmit::Go);
        assert!(matches!(q.admit(5, 1 << 20), QosAdmit::Wait(t) if t > Instant::now()));
        assert_eq!(q.admit(NO_TREE, 1 << 30), QosAdmit::Go);
        assert_eq!(q.admit(77, 1 << 30), QosAdmit::Go, "a tree not known is not paced");
        let t = q.tree(5).unwrap();
        assert_eq!(t.info.rate_bps, 1e6);
        assert_eq!(t.info.admitted_bytes, 1 << 20);
        assert!(t.row.mean_bps > 0.0);
        q.observe(5, Some(Codec::zstd(3).unwrap()), 1000, 250, 10);
        q.observe(5, None, 1000, 1000, 0);
        let t = q.tree(5).unwrap();
        assert!((t.row.ratio - 2000.0 / 1250.0).abs() < 1e-9, "{:?}", t.row);
        assert_eq!(t.row.levels.len(), 2);
        q.remove_tree(6).unwrap();
        q.remove_tree(5).unwrap();
        assert!(!q.active());
        assert!(q.trees().is_empty());
        assert_eq!(q.remove_tree(5), Err(QosError::UnknownTree(5)));
    }

    #[test]
    fn replan_gives_each_tree_its_allotment_and_a_level() {
        let q = Qos::default();
        q.set_tree(1, None, 20e6).unwrap();
        q.set_tree(2, Some(1), 5e6).unwrap();
        assert_eq!(q.admit(2, 1 << 16), QosAdmit::Go);
        let rates = q.replan(2, (2.0, 1.0), None, |_| (0.0, 0));
        assert_eq!(rates.len(), 2);
        let r2 = rates.iter().find(|r| r.0 == 2).unwrap().1;
        assert!((5e6..=20e6 * 1.0001).contains(&r2), "{rates:?}");
        assert_ne!(q.pick(2).alg, Algorithm::None, "compressible by default: a level");
        assert!(q.cost_estimate(2, 1 << 17, None) > 0.0);
        assert!(q.backlog_bound(2) >= TREE_BACKLOG_MIN_BYTES);
    }
}
