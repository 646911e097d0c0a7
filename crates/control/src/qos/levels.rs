//! Level choice across QoS trees: for each tree the strongest mix whose compression keeps up
//! with its rate, with the CPU shared between all trees so as to save the most bytes.
//!
//! ```text
//! MODEL (per tree i, the pipeline model of auto/model.rs for one stream):
//!   r_i  input rate to plan for, bytes/s (admission's allotment; 0 while the tree is idle)
//!   o    pipeline CPU per input byte outside the codec, ns (OverheadMeter)
//!   c_i  codec CPU per input byte of the tree's mix, ns; s_i stored bytes per input byte.
//!        (c_i, s_i) moves along the lower convex hull of the tree's own ladder (its own
//!        meters: each tree's data compresses differently), so s_i(c_i) is convex, falling
//!   CPU the tree needs: r_i × (o + c_i) ns per second;      saving: r_i × (1 − s_i) bytes/s
//!   constraint: Σ_i r_i (o + c_i) ≤ n × cpu_utilization × 1e9, n = cores left for QoS
//!     compression (CpuMeter's cores, less what non-QoS compression uses, at most the
//!     compress workers); and per tree r_i (o + c_i) ≤ max_cores_i × 1e9 (a tree's records
//!     cannot use more workers than it may occupy).
//!
//! PLAN (`plan`):
//!   1. every tree at its hull's cheapest point (raw): the CPU its rate needs anyway. If that
//!      does not fit, no rate can be met by any level: all stay raw (fastest), `cpu_short`.
//!   2. the rest of the budget is spent greedily on hull segments in order of falling
//!      marginal saving per CPU-nanosecond. Along a segment of tree i that is
//!      (s_j − s_{j+1}) / (c_{j+1} − c_j): the rate cancels, so the order is the same whoever
//!      writes fast; the CPU a step takes is r_i × Δc. Segments of one tree come in hull order
//!      (convexity), and the segment the budget runs out in is taken in part: a mix of its two
//!      rungs (ladder.rs `Mix`); segments of equal marginal saving (trees of the same data)
//!      advance together, each by the same fraction. Because every tree's saving is concave in its CPU, this
//!      greedy is the optimum of the fractional problem: no other split of the CPU between the
//!      trees saves more bytes. With one tree it is `ladder::strongest_for_rate`.
//!      A consequence worth knowing: trees of the same data end at the same marginal saving,
//!      i.e. about the same level whatever their rates (a byte saved counts the same in any
//!      tree; the slow tree needs a tenth of the fast one's CPU for the same level). A slow
//!      tree compresses harder than a fast one when it has the CPU to itself, or when its
//!      data gains more from stronger levels.
//!   3. idle trees (r_i = 0) use no budget; they get the mix that would meet their `qos` rate
//!      on the CPU left over (at least IDLE_START_CORES of the cores), so their first records
//!      after waking are compressed sensibly until the next plan counts them. A tree that was
//!      planned active before keeps its last active mix instead (`QosLevels::replan`): a
//!      writer pausing for a moment must not come back to a level chosen for a CPU it never
//!      had to share.
//!   4. the device: Σ r_i s_i is what the trees send to the devices; above device_utilization
//!      of the measured device throughput the rates cannot all be met (`device_short`). The
//!      greedy already stores the least bytes the CPU allows, so no other plan would fit.
//!   5. rates that do not fit (CPU or device short): the plan is for the largest common
//!      fraction k of the rates that fits (`scale`; found by bisection: CPU and stored bytes
//!      both fall with k). With one tree that is the level of the highest throughput the
//!      machine can do, as auto would pick; with several, every tree gets the same fraction
//!      of its target (the EDF scheduler serves them in proportion to their rates too).
//!
//! UTILIZATION: the share of the cores left that `QosLevels::replan` plans on (TUNABLES);
//!   it falls fast while trees lag their deadlines and creeps back while none does, so the
//!   plan meets the rates on the CPU a busy machine really gives, and uses all of it when
//!   the meters are right. States: at the ceiling, falling (a tree lags), rising.
//!
//! STATE (`QosLevels`, the part the pipeline holds): per tree an `AutoController` used as its
//!   ladder and meters (fed with the tree's compressed records; its `decide` is not used),
//!   the plan's mix and the dither accumulator spreading the mix's fraction over records.
//!   A tree not planned yet compresses at START (zstd:1). Transitions: `observe` (a record of the tree was compressed), `replan` (every
//!   replan_secs, and when a tree wakes up or a rate changes), `pick` (the next record's
//!   level), `forget` (the tree lost its `qos`).
//!
//! TUNABLES (`LevelTunables`):
//!   cpu_utilization 0.95    the share of the cores left a plan uses at most: headroom for
//!                           measurement noise (the plan's share, below, starts here)
//!   min_cpu_utilization 0.5, utilization_down 0.05, utilization_up 0.005,
//!   lag_tolerance_secs 0.1  the share actually planned (`QosLevels` UTILIZATION): down by
//!                           utilization_down at each replan while some active tree's
//!                           records are later than lag_tolerance_secs, up by
//!                           utilization_up otherwise, within [min, cpu_utilization]. On a
//!                           shared machine the cores the CPU meter sees free come and go
//!                           within its 1 s average: planned at a fixed 95%, trees fell
//!                           8-20% under their rates on the 2-core test machine at load 15
//!                           (docs/benchmarks.md, QoS); where the meter is right (the
//!                           simulation) nothing lags and the share stays at 95%
//!   device_utilization 0.95 the share of the device throughput that counts as usable
//!   min, max lz4:64, zstd:19 the ladder of every tree (a slow tree may use zstd:19)
//!   replan_secs 0.1         how often the caller should replan (a tree's allotment changes
//!                           within one admission realloc_secs)
//!   catchup_secs 0.25       a tree whose compression lags its deadlines by L seconds (the
//!                           scheduler's `lag`) is planned for rate × (1 + L / catchup_secs):
//!                           cheaper levels until it has caught up. This corrects what the
//!                           model gets wrong (cores or costs misjudged) from what happens;
//!                           a tree's backlog holds 0.5 s of its rate, so a full backlog
//!                           plans it for about three times its rate
//! ```

use super::admission::TreeId;
use crate::auto::decision::Sample;
use crate::auto::ladder::{Mix, Point};
use crate::auto::model::AutoController;
use crate::auto::tunables::Tunables;
use squeezefs_codec::{Algorithm, Codec};
use std::collections::HashMap;

/// The level of a tree's records before its first plan (auto's start: fast, and saving).
pub const START: Codec = Codec { alg: Algorithm::Zstd, level: 1 };

/// Share of the cores an idle tree's start level is planned on when the active trees use all.
pub const IDLE_START_CORES: f64 = 0.05;

/// Level-choice tunables (see the block comment).
#[derive(Clone, Debug, PartialEq)]
pub struct LevelTunables {
    pub cpu_utilization: f64,
    pub min_cpu_utilization: f64,
    pub utilization_down: f64,
    pub utilization_up: f64,
    pub lag_tolerance_secs: f64,
    pub device_utilization: f64,
    pub min: Codec,
    pub max: Codec,
    pub replan_secs: f64,
    pub catchup_secs: f64,
}

impl Default for LevelTunables {
    fn default() -> LevelTunables {
        LevelTunables {
            cpu_utilization: 0.95,
            min_cpu_utilization: 0.5,
            utilization_down: 0.05,
            utilization_up: 0.005,
            lag_tolerance_secs: 0.1,
            device_utilization: 0.95,
            min: squeezefs_codec::AUTO_DEFAULT_MIN,
            max: Codec { alg: Algorithm::Zstd, level: 19 },
            replan_secs: 0.1,
            catchup_secs: 0.25,
        }
    }
}

/// One tree's input to the plan.
#[derive(Clone, Copy, Debug)]
pub struct TreeLoad<'a> {
    pub tree: TreeId,
    /// input rate to plan for, bytes/s; 0 = idle
    pub rate_bps: f64,
    /// the tree's `qos` rate, bytes/s (the start level of an idle tree)
    pub qos_bps: f64,
    /// the tree's lower hull, cheapest (raw) first ([`AutoController::rate_hull`])
    pub hull: &'a [(Codec, Point)],
    /// most cores this tree's compression may use
    pub max_cores: f64,
}

/// One tree's share of the plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreePlan {
    pub tree: TreeId,
    pub mix: Mix,
    /// codec CPU per input byte of the mix, ns
    pub cost_ns: f64,
    /// stored bytes per input byte of the mix
    pub stored: f64,
    /// cores the tree's compression uses at its rate (codec and overhead)
    pub cores: f64,
}

impl TreePlan {
    /// Planned ratio (input / stored).
    pub fn ratio(&self) -> f64 {
        1.0 / self.stored.max(1e-9)
    }
}

/// The plan for all trees.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub trees: Vec<TreePlan>,
    /// cores used by the active trees' compression
    pub cores_used: f64,
    /// stored bytes per second the active trees send to the devices
    pub stored_bps: f64,
    /// the rates need more CPU than there is even storing raw
    pub cpu_short: bool,
    /// the stored rate exceeds what the devices take
    pub device_short: bool,
    /// the fraction of the rates the plan is for: 1 when they fit, else the largest common
    /// fraction that fits (the levels for the most the machine can do)
    pub scale: f64,
}

impl Plan {
    pub fn get(&self, tree: TreeId) -> Option<&TreePlan> {
        self.trees.iter().find(|p| p.tree == tree)
    }
}

/// A position on a hull: rung k and the fraction of the way to k + 1.
fn at(hull: &[(Codec, Point)], k: usize, f: f64) -> (Mix, Point) {
    let (lo, a) = hull[k];
    match hull.get(k + 1) {
        Some(&(hi, b)) if f > 0.0 => (
            Mix { lo, hi, frac: f },
            Point { cost: a.cost + f * (b.cost - a.cost), stored: a.stored + f * (b.stored - a.stored) },
        ),
        _ => (Mix { lo, hi: lo, frac: 0.0 }, a),
    }
}

fn positive(x: f64) -> bool {
    x > 0.0 && x.is_finite()
}

/// The plan (block comment, PLAN). `cores`: cores left for QoS compression; `device_bps`: the
/// devices' measured write throughput in stored bytes/s, if known.
pub fn plan(loads: &[TreeLoad], cores: f64, overhead_ns: f64, device_bps: Option<f64>, tun: &LevelTunables) -> Plan {
    let full = plan_rates(loads, cores, overhead_ns, device_bps, tun);
    if !full.cpu_short && !full.device_short {
        return full;
    }
    // 5: the rates cannot all be met: plan for the largest common fraction of them that fits
    // (the stored rate and the CPU both fall as the fraction does, so bisection finds it)
    let scaled =
        |k: f64| -> Vec<TreeLoad> { loads.iter().map(|l| TreeLoad { rate_bps: l.rate_bps * k, ..*l }).collect() };
    let fits = |p: &Plan| !p.cpu_short && !p.device_short;
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if fits(&plan_rates(&scaled(mid), cores, overhead_ns, device_bps, tun)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut p = plan_rates(&scaled(lo), cores, overhead_ns, device_bps, tun);
    (p.scale, p.cpu_short, p.device_short) = (lo, full.cpu_short, full.device_short);
    p
}

fn plan_rates(loads: &[TreeLoad], cores: f64, overhead_ns: f64, device_bps: Option<f64>, tun: &LevelTunables) -> Plan {
    let o = if overhead_ns.is_finite() { overhead_ns.max(0.0) } else { 0.0 };
    let budget = if positive(cores) { cores * tun.cpu_utilization.clamp(0.0, 1.0) * 1e9 } else { 0.0 };
    let rate = |l: &TreeLoad| if positive(l.rate_bps) { l.rate_bps } else { 0.0 };
    // 1: the cheapest point of every active tree
    let base: f64 = loads.iter().filter(|l| !l.hull.is_empty()).map(|l| rate(l) * (o + l.hull[0].1.cost)).sum();
    let cpu_short = base > budget;
    let mut pos: Vec<(usize, f64)> = vec![(0, 0.0); loads.len()];
    let mut left = budget - base;
    if !cpu_short {
        // per-tree room under max_cores, after its base
        let mut room: Vec<f64> = loads
            .iter()
            .map(|l| match l.hull.first() {
                Some(h) if positive(l.max_cores) => l.max_cores * 1e9 - rate(l) * (o + h.1.cost),
                Some(_) => f64::INFINITY,
                None => 0.0,
            })
            .collect();
        // 2: segments of the active trees by falling marginal saving per CPU-ns
        let mut segs: Vec<(usize, usize, f64)> = Vec::new();
        for (i, l) in loads.iter().enumerate().filter(|(_, l)| rate(l) > 0.0) {
            for j in 0..l.hull.len().saturating_sub(1) {
                let (a, b) = (l.hull[j].1, l.hull[j + 1].1);
                let dc = (b.cost - a.cost).max(1e-12);
                segs.push((i, j, (a.stored - b.stored) / dc));
            }
        }
        segs.sort_by(|x, y| y.2.total_cmp(&x.2).then(x.0.cmp(&y.0)).then(x.1.cmp(&y.1)));
        let mut stopped = vec![false; loads.len()];
        // segments of equal marginal saving (trees with the same data) advance together: when
        // the budget runs out among them, each gets the same fraction of its segment
        let mut g = 0;
        while g < segs.len() && left > 0.0 {
            let slope = segs[g].2;
            let end = (g..segs.len()).find(|&k| (segs[k].2 - slope).abs() > slope.abs() * 1e-9).unwrap_or(segs.len());
            let group: Vec<(usize, usize, f64)> = segs[g..end]
                .iter()
                .filter(|(i, j, _)| !stopped[*i] && pos[*i].0 == *j)
                .map(|&(i, j, _)| (i, j, rate(&loads[i]) * (loads[i].hull[j + 1].1.cost - loads[i].hull[j].1.cost)))
                .collect();
            for &(i, j, _) in &segs[g..end] {
                if pos[i].0 != j {
                    stopped[i] = true;
                }
            }
            g = end;
            let used = |f: f64| group.iter().map(|&(i, _, need)| (f * need).min(room[i].max(0.0))).sum::<f64>();
            let f = if used(1.0) <= left {
                1.0
            } else {
                let (mut lo, mut hi) = (0.0, 1.0);
                for _ in 0..60 {
                    let mid = 0.5 * (lo + hi);
                    if used(mid) <= left {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                lo
            };
            for &(i, j, need) in &group {
                let take = (f * need).min(room[i].max(0.0));
                left -= take;
                room[i] -= take;
                if need > 0.0 && take >= need * (1.0 - 1e-12) {
                    pos[i] = (j + 1, 0.0);
                } else {
                    pos[i] = (j, if need > 0.0 { (take / need).clamp(0.0, 1.0) } else { 0.0 });
                    stopped[i] = true;
                }
            }
        }
    }
    // 3: idle trees start at what their qos rate would get on the CPU left over
    let spare_cores = (left.max(0.0) / 1e9).max(if positive(cores) { cores * IDLE_START_CORES } else { 0.0 });
    let mut trees = Vec::with_capacity(loads.len());
    let (mut cores_used, mut stored_bps) = (0.0, 0.0);
    for (i, l) in loads.iter().enumerate() {
        if l.hull.is_empty() {
            trees.push(TreePlan { tree: l.tree, mix: Mix::RAW, cost_ns: 0.0, stored: 1.0, cores: 0.0 });
            continue;
        }
        let (mix, p) = if rate(l) > 0.0 {
            at(l.hull, pos[i].0, pos[i].1)
        } else {
            let m = crate::auto::ladder::strongest_for_rate(l.hull, spare_cores, o, l.qos_bps);
            let k = l.hull.iter().position(|h| h.0 == m.lo).unwrap_or(0);
            at(l.hull, k, m.frac)
        };
        let r = rate(l);
        cores_used += r * (o + p.cost) / 1e9;
        stored_bps += r * p.stored;
        trees.push(TreePlan { tree: l.tree, mix, cost_ns: p.cost, stored: p.stored, cores: r * (o + p.cost) / 1e9 });
    }
    let device_short = device_bps.is_some_and(|d| positive(d) && stored_bps > d * tun.device_utilization);
    Plan { trees, cores_used, stored_bps, cpu_short, device_short, scale: 1.0 }
}

/// What the pipeline knows about a tree when it replans.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreeDemand {
    pub tree: TreeId,
    /// admission's expected rate (`Admission::expected_rate`), bytes/s
    pub rate_bps: f64,
    /// the tree's `qos` rate, bytes/s
    pub qos_bps: f64,
    /// how late its compression is (`CompressScheduler::lag`), seconds
    pub lag_secs: f64,
    /// most cores its compression may use (the compress workers)
    pub max_cores: f64,
}

#[derive(Clone, Debug)]
struct TreeLevel {
    ctl: AutoController,
    mix: Mix,
    acc: f64,
    /// a plan counted the tree active once (its mix is one it met its rate with)
    was_active: bool,
}

/// Per-tree ladders and the current plan (block comment, STATE).
#[derive(Clone, Debug)]
pub struct QosLevels {
    tun: LevelTunables,
    trees: HashMap<TreeId, TreeLevel>,
    plan: Option<Plan>,
    /// the share of the cores left planned on (block comment, UTILIZATION)
    utilization: f64,
}

impl QosLevels {
    pub fn new(tun: LevelTunables) -> QosLevels {
        let utilization = tun.cpu_utilization;
        QosLevels { tun, trees: HashMap::new(), plan: None, utilization }
    }

    /// The share of the cores left the plans are made on now.
    pub fn utilization(&self) -> f64 {
        self.utilization
    }

    pub fn tunables(&self) -> &LevelTunables {
        &self.tun
    }

    fn tree(&mut self, tree: TreeId) -> &mut TreeLevel {
        let (min, max) = (self.tun.min, self.tun.max);
        self.trees.entry(tree).or_insert_with(|| {
            let ctl = AutoController::new(min, max, Tunables::model());
            let start = if ctl.candidates().contains(&START) { START } else { ctl.candidates()[0] };
            TreeLevel { ctl, mix: Mix { lo: start, hi: start, frac: 0.0 }, acc: 0.0, was_active: false }
        })
    }

    /// A record of `tree` was compressed (every record compressed with a codec other than
    /// `Codec::NONE`, whether or not its output was kept).
    pub fn observe(&mut self, tree: TreeId, s: &Sample) {
        self.tree(tree).ctl.observe(s);
    }

    /// Recompute the plan for `loads`: `cores` left for QoS compression, pipeline overhead per
    /// byte, the devices' write throughput if measured.
    pub fn replan(&mut self, loads: &[TreeDemand], cores: f64, overhead_ns: f64, device_bps: Option<f64>) -> &Plan {
        let hulls: Vec<Vec<(Codec, Point)>> = loads.iter().map(|l| self.tree(l.tree).ctl.rate_hull()).collect();
        let catchup = self.tun.catchup_secs.max(1e-3);
        let tl: Vec<TreeLoad> = loads
            .iter()
            .zip(&hulls)
            .map(|(l, h)| TreeLoad {
                tree: l.tree,
                rate_bps: l.rate_bps * (1.0 + l.lag_secs.max(0.0) / catchup),
                qos_bps: l.qos_bps,
                hull: h,
                max_cores: l.max_cores,
            })
            .collect();
        let lagging = loads.iter().any(|l| l.rate_bps > 0.0 && l.lag_secs > self.tun.lag_tolerance_secs);
        let (lo, hi) = (self.tun.min_cpu_utilization.min(self.tun.cpu_utilization), self.tun.cpu_utilization);
        let step = if lagging { -self.tun.utilization_down } else { self.tun.utilization_up };
        self.utilization = (self.utilization + step).clamp(lo, hi);
        let tun = LevelTunables { cpu_utilization: self.utilization, ..self.tun.clone() };
        let p = plan(&tl, cores, overhead_ns, device_bps, &tun);
        for (t, l) in p.trees.iter().zip(&tl) {
            let s = self.tree(t.tree);
            let active = l.rate_bps > 0.0;
            // an idle tree that was active keeps its last active mix (PLAN step 3)
            if active || !s.was_active {
                s.mix = t.mix;
            }
            s.was_active |= active;
        }
        self.plan.insert(p)
    }

    /// The last plan.
    pub fn current(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// The level of `tree`'s next record.
    pub fn pick(&mut self, tree: TreeId) -> Codec {
        let s = self.tree(tree);
        let mix = s.mix;
        mix.pick(&mut s.acc)
    }

    /// The mix `tree` is at.
    pub fn mix(&self, tree: TreeId) -> Option<Mix> {
        self.trees.get(&tree).map(|s| s.mix)
    }

    /// The tree's ladder, for stats and tests: (codec, point, measured on its data).
    pub fn ladder(&mut self, tree: TreeId) -> Vec<(Codec, Point, bool)> {
        self.tree(tree).ctl.ladder()
    }

    /// `tree` lost its `qos` (its meters go with it).
    pub fn forget(&mut self, tree: TreeId) {
        self.trees.remove(&tree);
    }
}
