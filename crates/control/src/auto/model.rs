//! The auto controller (docs/design.md §9): for each record, the level that keeps the devices busy
//! with the strongest compression the CPU allows.
//!
//! Two modes. By default (tunable `feedback` 1) the queue-feedback mode of feedback.rs decides
//! every record: a fixed nominal ladder walked by the device queue alone. The model below
//! (`feedback` 0, `Tunables::model`) decides otherwise, and is what QoS plans with
//! (`mix_for_rate` reads its measured ladder, which only this mode keeps).
//!
//! ```text
//! MODEL (thesis §3.1, eq. 3.7, with the CPU the rest of the pipeline needs):
//!   write throughput W = min( n / (o + c),  D / s )                     [input bytes/s]
//!     n  cores compressing: min(compress workers, usable cores), times a correction g
//!        (below). Usable cores (cpu.rs `UsableCores`) are what our threads obtain from the
//!        scheduler when they demand CPU, not what is idle: on a shared machine the
//!        neighbours' load expands into whatever we leave idle
//!     o  pipeline CPU per input byte outside the codec (copies, checksums, FUSE, devices)
//!     c  codec CPU per input byte of the level (measured in thread CPU time, not wall time,
//!        so that other work on the cores does not make a level look slow)
//!     D  summed write throughput of the devices (stored bytes/s)
//!     s  stored bytes per input byte of the level (1/ratio)
//!   The first term falls and the second rises as the level gets stronger; W is largest where
//!   they cross: n·s(c) = D·(o + c). If they cannot cross the answer is an end of the ladder:
//!   raw when even storing raw is CPU-bound (n/o ≤ D: compression could only slow writing
//!   down, so auto is never slower than `none`), the strongest rung when the devices are
//!   slower than the strongest level. Between two rungs the crossing is a mix: a fraction of
//!   the records at the stronger rung (CPU and stored bytes add up per record, so a mix lies
//!   on the straight line between the two rungs).
//!   One exception, from the target "within 5% of the best fixed level's throughput with at
//!   least its ratio": when the best single level (the largest W of any one candidate) is
//!   CPU-bound, i.e. costlier than the crossing, the crossing's mix is a little faster but
//!   stores more than it. Then the target is the hull's mix at that level's cost: the same
//!   CPU per byte, hence the same speed, and no more stored bytes. The devices then wait a
//!   little by design ("CPU-bound regime").
//!
//! LADDER (ladder.rs): raw, then the candidates between `auto:MIN..MAX` that sit on the lower
//!   convex hull of their measured (c, s) points — each rung faster *and* weaker than the
//!   next, and none beaten by a mix of its neighbours — plus the candidates not yet trusted
//!   on the current data: *tentative* ones (measured on fewer than confident_bytes) by their
//!   measurement, unmeasured and stale ones by an estimate (their nominal figures scaled by
//!   the nominally nearest measured rung). Only confident rungs can drop out, so one unlucky
//!   record cannot hide a good level. A measured rung saving less than min_gain of the raw
//!   size is no rung: on incompressible data the ladder is raw alone and no CPU goes into
//!   compression — but only on the probe rung's own evidence (below): until it is measured on
//!   the current data it keeps its nominal point, since a fast rung saving nothing (an lz4
//!   acceleration on a binary) says little about zstd:1. A rung is *fresh* while its measurement is of the current data; it goes
//!   stale when another rung's figures drift (measure/meters.rs: the data changed) or after
//!   stale_bytes written since it was last used.
//!
//! STATE: the rung `lo` the position is on (a rung id, so it survives ladder changes: a rung
//!   that drops out maps to the next cheaper one), the dither accumulator spreading the mix's
//!   fraction over records, g and its integral, whether the queue ever reached its target,
//!   the regime (device-bound crossing or CPU-bound best level), one exploration in flight
//!   at most, the bytes written since the ladder became raw alone and since the last probe.
//!
//! DECISION for a record (`decide`), in order:
//!   1. target: the model's point on the ladder (rung k, fraction f), and the rungs it depends
//!      on (the hull segment around the crossing, the best single level, the target's two
//!      rungs and their neighbours); unknown while no device has a throughput measurement
//!      (the position holds).
//!   2. explore: the first of those rungs not yet confident and within reach — costing at
//!      most explore_reach times the next rung up from the position (or the probe rung's
//!      nominal cost) — gets this record (if its time fits the queue delay, below); with none
//!      such and the target more than a rung above, the next rung up does (the position
//!      walks to a far target, measuring on the way). No other exploration starts until its
//!      measurement is back (or explore_timeout passed). Rungs the position only passes are
//!      not explored.
//!   3. move: down to the target at once; within the current segment to the target fraction;
//!      up one measured rung per record, and only if that rung's compression time for this
//!      record (c × size × workers/cores when workers share fewer cores) fits the expected
//!      queue delay (thesis eq. 3.13). While the target's rungs are unmeasured the position
//!      aims at the measured rung nearest in cost.
//!   4. guard (thesis eq. 3.14): while the saturated pipeline's expected queue delay (less a
//!      margin of guard_safety_records records) is shorter than the compression time at
//!      `lo`, step down as far as needed; the stronger rung of the mix is used only if it
//!      fits too. Steps 3's fit test and this guard hold only where the devices are to be
//!      kept busy: not in the CPU-bound regime (the queue is empty by design) and not when no
//!      record waits behind this one (an unsaturated pipeline has no queue to fill).
//!   5. probe: on a ladder of raw alone, one record every probe_bytes goes to the probe rung
//!      (the candidate nominally nearest zstd:1: cheap on incompressible data, telling on the
//!      rest) and restarts its measurement, so that compressible data is noticed again.
//!   6. pick: `lo` or the next rung, the fraction spread evenly over records. Only neighbours
//!      are ever mixed (the guard's step down is the one exception, for single records).
//! FEEDBACK (`observe`): each compressed record updates its rung's averages; a drift starts
//!   a new epoch (the data changed) and CARRY decides what the other rungs keep; a probe, or
//!   a record of a rung that was stale or carried, restarts that rung's averages (old data
//!   does not dilute them).
//! CARRY (`carry`), when rung i drifts from point b to point a:
//!   1. the old data's figures (rungs measured on it with confidence, or restored from a
//!      profile and not measured since) become a profile, replacing the one they were
//!      restored from; at most `profiles` are kept, newest first;
//!   2. data seen before: if a profile's figure for rung i is within DRIFT_STORED / 2 of a
//!      (stored per byte, and a quarter of that weight on cost), every other rung gets that
//!      profile's figures (generation 0): the corpus cycles text, binaries, a database and
//!      XML, each seen many times;
//!   3. new data: every other rung's old figures scaled by i's change (cost × a.cost/b.cost,
//!      saving 1/s − 1 × i's saving ratio, capped at 4), one generation more; figures
//!      scaled over `carry_max` changes without a measurement are dropped (the rung goes
//!      stale: estimated and explored as before), since the scaling's error compounds;
//!   4. no carry when i now saves less than min_gain (a weak rung saving nothing on a
//!      binary says little about zstd:1): the others go stale.
//!   Carried rungs count as confident (on the hull, usable without exploring); the first
//!   record at one measures it again. Why: on data that changes kind every few MiB,
//!   re-measuring every relevant rung after each change makes a fifth to a third of the
//!   records explorations; carried, they stay under a tenth.
//! CORRECTION g (the model's n, o and D come from meters that can be off several times over
//!   on a shared machine — a device's drain rate read after idle gaps overstates a throttled
//!   device 2× —, and the pipeline is not perfectly parallel): ln g = P + I, from the queue
//!   delay q averaged over QUEUE_TAU_SECS against its target q* (queue_target_secs, or 4
//!   compression times of the strongest rung in use if longer: room for the guard; or the
//!   device time of batch_bytes if longer still: a queue the pipeline holds by itself —
//!   records waiting for their txg — says nothing about the device being slow).
//!   queue above its target — the devices are the bottleneck, whatever the regime and
//!     whether or not records wait for compression (a pessimistic model stores raw with the
//!     queue full and the workers idle): P = gain_p_up·ln(q/q*), proportional to how many
//!     times the target the queue holds, so a queue of seconds (the records decided before
//!     the first drain measurement) asks for strong levels until it drains, and no memory of
//!     it stays behind.
//!   queue below its target, saturated pipeline, device-bound regime — the CPU fell short:
//!     P = gain_p_down·e, e = (q − q*)/q* clamped to −1 (P is 0 until the queue first reached
//!     its target: an empty queue at start-up is not a slow CPU). Otherwise below the target
//!     (an unsaturated pipeline, the CPU-bound regime) the queue says nothing and g holds.
//!   I integrates gain_i·e per second (e clamped to ±1) only while q ≤ 2 q* (near the target,
//!     where it trims what the meters get wrong; far above it P acts and integrating would
//!     wind up) and not while the target is pinned at the end of the ladder e pushes
//!     towards. The queue is itself the integral of the rate mismatch, so a pure integral
//!     here would oscillate; the P part damps it.
//!   CPU-bound regime, queue not above its target — the queue is empty by design; the
//!     compression stage's own throughput: input bytes decided per second while saturated,
//!     over windows of at least RATE_WINDOW_SECS and RATE_WINDOW_RECORDS records, against
//!     the model's n / (o + c̄) for the mix used, moves ln g by RATE_WEIGHT of the difference
//!     (n·g at most the workers: a burst of records or costs from estimates read 8× here).
//!   g stays within [gain_min, gain_max].
//!
//! RESUME (`resume_point`, `resume_at`): the rung `lo` is where a later mount may start (the
//!   engine keeps the last write's point in the pool); `resume_at(c)` puts `lo` on the
//!   candidate nominally nearest c in cost (raw for raw), measurements still unknown. In
//!   the feedback mode both go to feedback.rs (RESUME). Tunable fb_resume 0: no resume.
//!
//! QoS entry (`mix_for_rate`): the strongest mix whose compression throughput on the CPU left
//!   still meets a target rate, on the same ladder (ladder.rs `strongest_for_rate`).
//!
//! TUNABLES (`Tunables`; defaults chosen with the simulation in tests/auto_sim.rs, which is
//! the place to re-tune them):
//!   queue_target_secs 0.05      enough queue to ride out a slow record; little dirty memory
//!   guard_safety_records 2      the records the other workers may be about to queue
//!   gain_p_up 1, gain_p_down 0.3, gain_i 0.5/s, g in 0.25…8
//!                               settles within a second; P down is weaker because running
//!                               short of queue costs ratio (faster levels) while a long queue
//!                               costs nothing but memory; up to 8× because two meters 2–3×
//!                               off multiply
//!   min_gain 0.03               3% smaller than raw, or the rung is not worth CPU
//!   confident_bytes 256 KiB     2 records of 128 KiB. Real data changes every few MiB (the
//!                               corpus alternates text, binaries, a database, XML): each
//!                               change marks the rungs stale and the relevant ones are
//!                               explored again, so with 8 records per rung a third to a half
//!                               of all records were explorations (bench/auto-eval.sh traces,
//!                               docs/benchmarks.md); 2 records still keep the simulation's
//!                               noise (±15% cost, ±8% ratio) from reordering the hull
//!   probe_bytes 64 MiB          ≤ 0.2% of the records probed on incompressible data
//!   stale_bytes 1 GiB           rungs not used for that long are measured again before use
//!   explore_timeout 1 s         an exploration whose result never came back is given up
//!   carry_max 2, profiles 8     each scaling adds one record's noise to an unused rung's
//!                               figures, so with no bound they wander far enough to pin the
//!                               position at a weak rung (ratio −17% on switching data at
//!                               100 MB/s, 1 core); 8 profiles hold a few kinds of data each
//!   explore_reach 2             a rung is explored only if it costs at most twice the next
//!                               rung up from the position (or zstd:1's nominal cost): with
//!                               every relevant rung explored, a target swinging up the ladder
//!                               had zstd:7–15 explored on a contended core, a third of the
//!                               records and as much codec CPU as zstd:1 spent on everything
//!   feedback 1                  the queue-feedback mode decides (feedback.rs); 0: this model
//!   fb_up 4, fb_down 6, fb_p 1  feedback mode's rates and proportional part (feedback.rs)
//!   fb_lead 1                   feedback mode's look-ahead on the queue's pace, s
//!   fb_capacity_secs 0.5        feedback mode: a queue above target this long makes the
//!                               devices' drain rate the floor's device bound
//!   fb_lift 4                   feedback mode: rungs per second a CPU-bound position rises
//!                               to a floor above it
//!   fb_range 1                  feedback mode: before the devices were the bottleneck, their
//!                               drain rate per range is the floor's device bound (0: none
//!                               until then); on a 100 MB/s device that serves each write at
//!                               its rate it read 99–121 MB/s from 0.4 s on, where the
//!                               bottleneck came at 2 s of a 2.4 s write
//!   fb_gap 0.5                  feedback mode: a CPU-bound descent x − f rungs above the
//!                               floor goes max(1, fb_gap·(x − f)) times faster
//!   fb_busy 0.9                 feedback mode: a backlog is the CPU being short only while
//!                               the compress workers were busy this share of the time. A
//!                               writer's 1 MiB write queues 8 records at once, so nearly
//!                               every record has a backlog; on the paced device the workers
//!                               were busy 0.97–0.99 at zstd:1 where the corpus is CPU-bound,
//!                               and 0.82–0.89 on the XML at 400 MB/s and unpaced, where
//!                               zstd:1 writes as fast as lz4 (the writer bounds the pipeline)
//!                               and the descent lost a third of the ratio for nothing
//!   fb_rate 1, fb_rate_secs 0.1 feedback mode: the CPU-bound position is held to the
//!   fb_rate_gain 0.03           strongest rung whose measured intake rate is within 3% of
//!   fb_rate_hold 1, _max 8      raw's, searched again after a hold of 1 s doubling to 8 s
//!                               (auto/rate_check.rs)
//!   fb_resume 1                 a mount starts where the pool's last write ended (RESUME)
//!   batch_bytes 0               the pipeline sets its txg's early-sync bytes (16 MiB): at
//!                               20 MB/s that alone is 0.8 s of queue, and a 0.05 s target
//!                               read it as a device 16 times too slow
//! ```

use crate::auto::decision::{AutoInputs, Decision, Reason, Sample};
use crate::auto::ladder::{candidates, locate, lower_hull, strongest_for_rate, Mix, Point};
use crate::auto::tunables::Tunables;
use crate::measure::ewma::TimeEwma;
use crate::measure::meters::{queue_estimate, Drift, LevelMeter, QueueEstimate, DRIFT_STORED};

/// Shortest window over which the compression stage's throughput is measured, seconds…
pub const RATE_WINDOW_SECS: f64 = 0.1;
/// …and fewest records in it.
pub const RATE_WINDOW_RECORDS: u64 = 16;
/// Weight of one window's measurement in ln g.
pub const RATE_WEIGHT: f64 = 0.5;
use squeezefs_codec::{Algorithm, Codec, Spec};

/// A rung's figures carried over data changes (`AutoController::carry`).
#[derive(Clone, Copy, Debug)]
struct Carried {
    /// the data (epoch) they are carried to
    epoch: u32,
    pt: Point,
    /// 0: restored from a profile of similar data; n: scaled over the last n changes
    generation: u32,
}

/// Rung id: `None` = raw, `Some(i)` = candidate i.
type RungId = Option<usize>;

/// Where the model wants the position: rung `k` of the ladder and `f` of the way to the next,
/// whether that is the CPU-bound best rung, and the rungs the answer depends on (to be
/// measured before they are trusted).
#[derive(Clone, Debug)]
struct Target {
    k: usize,
    f: f64,
    cpu_bound: bool,
    relevant: Vec<usize>,
}

#[derive(Clone, Copy, Debug)]
struct Rung {
    id: RungId,
    pt: Point,
    /// measured on the current data (the position may use it)
    measured: bool,
    /// measured on enough of it to be trusted against other rungs (or it stays explored)
    confident: bool,
}

/// The auto controller's state (see the block comment).
#[derive(Clone, Debug)]
pub struct AutoController {
    tun: Tunables,
    cands: Vec<Codec>,
    nominal: Vec<Point>,
    /// ln of each candidate's nominal cost (estimates look for the nominally nearest rung)
    nominal_ln_cost: Vec<f64>,
    meters: Vec<LevelMeter>,
    /// epoch in which each candidate was last measured (None: never)
    measured_epoch: Vec<Option<u32>>,
    /// input bytes (of `bytes`) when each candidate was last measured
    measured_at: Vec<u64>,
    /// the next sample of this candidate restarts its averages
    restart: Vec<bool>,
    /// a rung's figures carried over a drift (`carry`) and the epoch they are of: trusted
    /// like a measurement until the rung is measured on the new data
    carried: Vec<Option<Carried>>,
    /// the figures of data seen before (id, point per candidate), newest first, at most
    /// `profiles`; the one the current data's carried figures came from
    profiles: std::collections::VecDeque<(u64, Vec<Option<Point>>)>,
    restored_from: Option<u64>,
    next_profile: u64,
    epoch: u32,
    bytes: u64,
    ladder: Vec<Rung>,
    /// the ladder's points, their costs and the indices of their lower hull (kept with it by
    /// `rebuild`: `decide` needs them for every record)
    ladder_pts: Vec<Point>,
    ladder_costs: Vec<f64>,
    ladder_hull: Vec<usize>,
    /// every candidate's point (measured or estimated) that saves enough, hull or not
    singles: Vec<(RungId, Point)>,
    dirty: bool,
    lo: RungId,
    acc: f64,
    gain: f64,
    /// the integral part of ln g
    integral: f64,
    queue_avg: TimeEwma,
    last_now: Option<f64>,
    exploring: Option<(usize, f64)>,
    last_probe: u64,
    raw_since: u64,
    probe: usize,
    /// the last model target was at an end of the ladder (bottom, top)
    pinned: (bool, bool),
    /// the last model target was the CPU-bound best rung (the devices wait by design)
    cpu_bound: bool,
    /// while CPU-bound and saturated: (window start, input bytes decided, Σ cost × bytes)
    rate_window: Option<(f64, u64, f64)>,
    /// the queue has reached its target once
    primed: bool,
    /// the queue-feedback mode, when `feedback` is set: it decides every record
    feedback: Option<Box<crate::auto::feedback::Feedback>>,
}

/// The codec the controller starts at and probes with: the candidate nominally nearest zstd:1.
const START: Codec = Codec { alg: Algorithm::Zstd, level: 1 };

impl AutoController {
    /// A controller for `auto:min..max` (bounds as the spec grammar validated them).
    pub fn new(min: Codec, max: Codec, tun: Tunables) -> AutoController {
        let cands = candidates(min, max);
        let nominal: Vec<Point> = cands.iter().map(|c| Point::nominal(*c)).collect();
        let nominal_ln_cost: Vec<f64> = nominal.iter().map(|p| p.cost.ln()).collect();
        let start_cost = Point::nominal(START).cost.ln();
        let probe = (0..cands.len())
            .min_by(|&a, &b| {
                (nominal[a].cost.ln() - start_cost).abs().total_cmp(&(nominal[b].cost.ln() - start_cost).abs())
            })
            .unwrap_or(0);
        let n = cands.len();
        let queue_tau = tun.queue_tau_secs;
        let mut c = AutoController {
            tun,
            cands,
            nominal,
            nominal_ln_cost,
            meters: vec![LevelMeter::new(); n],
            measured_epoch: vec![None; n],
            measured_at: vec![0; n],
            restart: vec![false; n],
            carried: vec![None; n],
            profiles: std::collections::VecDeque::new(),
            restored_from: None,
            next_profile: 0,
            epoch: 0,
            bytes: 0,
            ladder: Vec::new(),
            ladder_pts: Vec::new(),
            ladder_costs: Vec::new(),
            ladder_hull: Vec::new(),
            singles: Vec::new(),
            dirty: true,
            lo: (n > 0).then_some(probe),
            acc: 0.0,
            gain: 1.0,
            integral: 0.0,
            queue_avg: TimeEwma::new(queue_tau),
            last_now: None,
            exploring: None,
            last_probe: 0,
            raw_since: 0,
            probe,
            pinned: (false, false),
            cpu_bound: false,
            rate_window: None,
            primed: false,
            feedback: None,
        };
        if c.tun.feedback != 0 {
            c.feedback = Some(Box::new(crate::auto::feedback::Feedback::new(&c.cands, START, c.tun.clone())));
        }
        c.rebuild();
        c
    }

    /// A controller for an `auto` spec; `None` for other specs.
    pub fn for_spec(spec: Spec, tun: Tunables) -> Option<AutoController> {
        match spec {
            Spec::Auto { min, max } => Some(AutoController::new(min, max, tun)),
            _ => None,
        }
    }

    /// The candidates, fastest first.
    pub fn candidates(&self) -> &[Codec] {
        &self.cands
    }

    /// The current ladder: (codec, cost ns/B, stored per byte, measured on the current data),
    /// raw first.
    pub fn ladder(&mut self) -> Vec<(Codec, Point, bool)> {
        if let Some(f) = &self.feedback {
            return f.figures();
        }
        if self.dirty {
            self.rebuild();
        }
        self.ladder.iter().map(|r| (self.codec(r.id), r.pt, r.measured)).collect()
    }

    /// The feedback mode's position, its floor rung at the last decision and the devices'
    /// capacity the floor took (None: the model decides).
    pub fn position(&self) -> Option<(f64, f64, Option<f64>)> {
        self.feedback.as_ref().map(|f| (f.position(), f.last_floor(), f.device_bound()))
    }

    /// The codec the controller sits at (block comment, RESUME): what a later mount may
    /// start at.
    pub fn resume_point(&self) -> Codec {
        match &self.feedback {
            Some(f) => f.resume_point(),
            None => self.codec(self.lo),
        }
    }

    /// Start at the rung of this range nominally nearest `codec` (raw or `none`: raw), as
    /// `resume_point` gave it on an earlier mount; nothing under tunable fb_resume 0.
    pub fn resume_at(&mut self, codec: Codec) {
        if let Some(f) = &mut self.feedback {
            f.resume_at(codec);
            return;
        }
        if self.tun.fb_resume == 0 || self.cands.is_empty() {
            return;
        }
        self.lo = if codec.alg == Algorithm::None {
            None
        } else {
            let want = Point::nominal(codec).cost.ln();
            let dist = |i: usize| (self.nominal_ln_cost[i] - want).abs();
            (0..self.cands.len()).min_by(|&a, &b| dist(a).total_cmp(&dist(b)))
        };
        self.acc = 0.0;
    }

    /// The queue correction g.
    pub fn gain(&self) -> f64 {
        self.gain
    }

    fn codec(&self, id: RungId) -> Codec {
        id.map_or(Codec::NONE, |i| self.cands[i])
    }

    fn fresh(&self, i: usize) -> bool {
        self.measured_epoch[i] == Some(self.epoch)
            && self.bytes.saturating_sub(self.measured_at[i]) <= self.tun.stale_bytes
            && self.meters[i].cost_ns_per_byte().is_some()
    }

    fn measured_point(&self, i: usize) -> Point {
        Point {
            cost: self.meters[i].cost_ns_per_byte().unwrap_or(self.nominal[i].cost),
            stored: self.meters[i].stored_per_byte().unwrap_or(self.nominal[i].stored),
        }
    }

    /// Candidate `i`'s point as the ladder has it: measured, carried or estimated.
    fn point(&self, i: usize) -> Point {
        if self.fresh(i) {
            self.measured_point(i)
        } else {
            self.carried_point(i).unwrap_or_else(|| self.estimate(i))
        }
    }

    /// Estimate for a candidate not measured on the current data: its nominal point scaled by
    /// the fresh rung nominally nearest to it (cost by the measured/nominal cost ratio, the
    /// saving 1/s − 1 by the measured/nominal saving ratio).
    fn estimate(&self, i: usize) -> Point {
        let fresh: Vec<usize> = (0..self.cands.len()).filter(|&j| self.fresh(j)).collect();
        self.estimate_among(i, &fresh)
    }

    /// [`Self::estimate`] given the fresh candidates (`rebuild` lists them once for all).
    fn estimate_among(&self, i: usize, fresh: &[usize]) -> Point {
        let nom = self.nominal[i];
        let d = |j: usize| (self.nominal_ln_cost[j] - self.nominal_ln_cost[i]).abs();
        let near = fresh.iter().copied().min_by(|&a, &b| d(a).total_cmp(&d(b)));
        let Some(j) = near else { return nom };
        let m = self.measured_point(j);
        let nj = self.nominal[j];
        let cost = nom.cost * (m.cost / nj.cost).max(1e-6);
        // the saving scale is capped: a weak rung that saves a lot says little about how much
        // more the strong ones would
        let scale = ((1.0 / m.stored - 1.0) / (1.0 / nj.stored - 1.0)).clamp(0.0, 4.0);
        let saving = (1.0 / nom.stored - 1.0) * scale;
        Point { cost, stored: 1.0 / (1.0 + saving) }
    }

    /// Fresh and measured on enough data to be trusted against other rungs, or carried over
    /// to the current data and not measured on too little of it since.
    fn confident(&self, i: usize) -> bool {
        self.fresh(i)
            && (self.meters[i].measured_bytes() >= self.tun.confident_bytes || self.carried_point(i).is_some())
    }

    /// Rung `i`'s figures carried over to the current data, if they were.
    fn carried_point(&self, i: usize) -> Option<Point> {
        self.carried[i].filter(|c| c.epoch == self.epoch).map(|c| c.pt)
    }

    /// The data changed: rung `i` went from `before` to `after` (block comment, CARRY).
    fn carry(&mut self, i: usize, before: Point, after: Point, old_epoch: u32) {
        let n = self.cands.len();
        // what the old data looked like: every rung measured on it with confidence, and
        // those restored from a profile of similar data and not measured since
        let base: Vec<Option<(Point, u32)>> = (0..n)
            .map(|j| {
                if self.measured_epoch[j] == Some(old_epoch)
                    && self.bytes.saturating_sub(self.measured_at[j]) <= self.tun.stale_bytes
                    && self.meters[j].cost_ns_per_byte().is_some()
                    && self.meters[j].measured_bytes() >= self.tun.confident_bytes
                {
                    Some((self.measured_point(j), 0))
                } else {
                    self.carried[j].filter(|c| c.epoch == old_epoch).map(|c| (c.pt, c.generation))
                }
            })
            .collect();
        let profile: Vec<Option<Point>> = base.iter().map(|b| b.filter(|(_, g)| *g == 0).map(|(p, _)| p)).collect();
        if profile.iter().flatten().count() >= 2 {
            if let Some(k) = self.restored_from.take() {
                self.profiles.retain(|p| p.0 != k);
            }
            self.next_profile += 1;
            self.profiles.push_front((self.next_profile, profile));
            self.profiles.truncate(self.tun.profiles);
        }
        self.restored_from = None;
        // data seen before: the profile whose figures for rung i are nearest its new ones
        let off = |p: Point| (p.stored / after.stored).ln().abs() + (p.cost / after.cost).ln().abs() * 0.25;
        let seen = self
            .profiles
            .iter()
            .filter_map(|(id, pts)| pts[i].map(|p| (*id, off(p))))
            .filter(|(_, d)| *d < DRIFT_STORED / 2.0)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((id, _)) = seen {
            let pts = self.profiles.iter().find(|p| p.0 == id).map(|p| p.1.clone()).unwrap_or_default();
            for j in (0..n).filter(|&j| j != i) {
                self.carried[j] =
                    pts.get(j).copied().flatten().map(|pt| Carried { epoch: self.epoch, pt, generation: 0 });
            }
            self.restored_from = Some(id);
            return;
        }
        // new data: the old figures scaled by rung i's change
        // a rung that now saves nothing says little about the others (lz4:fast=32 on an
        // office binary, where zstd:1 still saves a third): they are measured again
        let saving = |p: Point| 1.0 / p.stored - 1.0;
        if saving(before) < self.tun.min_gain
            || saving(after) < self.tun.min_gain
            || before.cost.is_nan()
            || after.cost.is_nan()
            || before.cost <= 0.0
            || after.cost <= 0.0
        {
            return;
        }
        let cost_scale = after.cost / before.cost;
        let saving_scale = (saving(after).max(0.0) / saving(before)).clamp(0.0, 4.0);
        for j in (0..n).filter(|&j| j != i) {
            self.carried[j] = base[j].filter(|(_, g)| *g < self.tun.carry_max).map(|(b, g)| Carried {
                epoch: self.epoch,
                pt: Point { cost: b.cost * cost_scale, stored: 1.0 / (1.0 + saving(b) * saving_scale) },
                generation: g + 1,
            });
        }
    }

    fn rebuild(&mut self) {
        let limit = 1.0 - self.tun.min_gain;
        // every candidate's point once: measured if fresh, else estimated from the fresh ones
        let n = self.cands.len();
        let is_fresh: Vec<bool> = (0..n).map(|i| self.fresh(i)).collect();
        let fresh: Vec<usize> = (0..n).filter(|&i| is_fresh[i]).collect();
        let carried: Vec<Option<Point>> = (0..n).map(|i| self.carried_point(i)).collect();
        let confident: Vec<bool> =
            (0..n).map(|i| if is_fresh[i] { self.confident(i) } else { carried[i].is_some() }).collect();
        let mut points: Vec<Point> = (0..n)
            .map(|i| match (is_fresh[i], carried[i]) {
                (true, _) => self.measured_point(i),
                (false, Some(p)) => p,
                (false, None) => self.estimate_among(i, &fresh),
            })
            .collect();
        // the ladder is raw alone only on the probe rung's own evidence: a weak rung that saves
        // nothing on some data (lz4:fast=32 on a binary) says little about zstd:1, and scaling
        // every estimate by it would store everything raw until the next probe
        if n > 0 && !is_fresh[self.probe] && points[self.probe].stored > limit {
            points[self.probe] = self.nominal[self.probe];
        }
        // confident rungs: the hull of raw and their points that save enough
        let mut pts = vec![(None, Point::RAW)];
        pts.extend((0..n).filter(|&i| confident[i]).map(|i| (Some(i), points[i])).filter(|(_, p)| p.stored <= limit));
        let just: Vec<Point> = pts.iter().map(|p| p.1).collect();
        let mut ladder: Vec<Rung> = lower_hull(&just)
            .into_iter()
            .map(|k| Rung { id: pts[k].0, pt: pts[k].1, measured: true, confident: true })
            .collect();
        // the others wherever they fall: tentative ones (too few records) by their measurement,
        // unmeasured and stale ones by estimate; both are explored before the position uses them
        for i in (0..n).filter(|&i| !confident[i]) {
            if points[i].stored <= limit {
                ladder.push(Rung { id: Some(i), pt: points[i], measured: is_fresh[i], confident: false });
            }
        }
        ladder.sort_by(|a, b| a.pt.cost.total_cmp(&b.pt.cost).then(b.confident.cmp(&a.confident)));
        self.ladder_pts = ladder.iter().map(|r| r.pt).collect();
        self.ladder_costs = self.ladder_pts.iter().map(|p| p.cost).collect();
        self.ladder_hull = lower_hull(&self.ladder_pts);
        self.ladder = ladder;
        // every candidate as a single level, hull or not
        self.singles = (0..n).map(|i| (Some(i), points[i])).filter(|(_, p)| p.stored <= limit).collect();
        self.dirty = false;
    }

    /// Index in the ladder of rung `id`, or of the most expensive rung cheaper than it was.
    fn index_of(&self, id: RungId) -> usize {
        if let Some(k) = self.ladder.iter().position(|r| r.id == id) {
            return k;
        }
        let cost = id.map_or(0.0, |i| self.point(i).cost);
        self.ladder.iter().rposition(|r| r.pt.cost <= cost).unwrap_or(0)
    }

    /// The model's target on the ladder, or None without a device measurement.
    fn target(&self, n: f64, o: f64, dev_bps: Option<f64>) -> Option<Target> {
        let d = dev_bps.filter(|d| *d > 0.0 && d.is_finite())?;
        let (pts, costs) = (&self.ladder_pts, &self.ladder_costs);
        if n.is_nan() || n <= 0.0 {
            return Some(Target { k: 0, f: 0.0, cpu_bound: false, relevant: vec![] });
        }
        // the crossing on the hull of the whole ladder (estimates included)
        let hull = &self.ladder_hull;
        let ne = n * self.gain * 1e9; // input bytes per second per (ns/B)
        let surplus = |p: Point| ne * p.stored - d * (o + p.cost);
        let last = *hull.last().expect("raw is on every hull");
        let mut relevant = Vec::with_capacity(6);
        let c_star = if surplus(pts[hull[0]]) <= 0.0 {
            relevant.push(hull[0]);
            pts[hull[0]].cost
        } else if surplus(pts[last]) >= 0.0 {
            relevant.push(last);
            pts[last].cost
        } else {
            let k = hull.windows(2).position(|w| surplus(pts[w[1]]) < 0.0).expect("a sign change");
            let (a, b) = (pts[hull[k]], pts[hull[k + 1]]);
            relevant.extend([hull[k], hull[k + 1]]);
            let m = (b.stored - a.stored) / (b.cost - a.cost);
            // ne·(s_a + m(c − c_a)) = d·(o + c)
            ((d * o - ne * a.stored + ne * m * a.cost) / (ne * m - d)).clamp(a.cost, b.cost)
        };
        // the best single rung (any candidate, on the hull or not): when it is CPU-bound
        // (costlier than the crossing) it stores less than the crossing's mix for a little less
        // speed. The mix on the hull at its cost runs as fast (same CPU) and stores no more:
        // take that
        let w = |p: Point| (ne / (o + p.cost).max(1e-9)).min(d / p.stored);
        let best = self.singles.iter().copied().fold((None, Point::RAW), |b, p| if w(p.1) > w(b.1) { p } else { b });
        let cpu_bound = best.1.cost > c_star;
        let (k, f) = locate(costs, if cpu_bound { best.1.cost } else { c_star });
        if cpu_bound {
            relevant.extend(self.ladder.iter().position(|r| r.id == best.0));
        }
        // the target's rungs first, then its neighbours: an estimate may hide a better rung
        relevant.push(k);
        if f > 0.0 && k + 1 < pts.len() {
            relevant.push(k + 1);
        }
        relevant.extend(k.checked_sub(1));
        relevant.extend((k + 1..(k + 3).min(pts.len())).filter(|&r| f > 0.0 || r == k + 1));
        Some(Target { k, f, cpu_bound, relevant })
    }

    /// The level for the next record.
    pub fn decide(&mut self, inp: &AutoInputs) -> Decision {
        if let Some(f) = &mut self.feedback {
            return f.decide(inp);
        }
        let now = inp.now_secs;
        let dt = self.last_now.map_or(0.0, |t| (now - t).clamp(0.0, 1.0));
        self.last_now = Some(now.max(self.last_now.unwrap_or(now)));
        self.bytes = self.bytes.saturating_add(inp.record_bytes);
        if let Some((_, t)) = self.exploring {
            if now - t > self.tun.explore_timeout_secs {
                self.exploring = None;
            }
        }
        if (0..self.cands.len()).any(|i| self.measured_epoch[i] == Some(self.epoch) && !self.fresh(i)) {
            // a rung went stale by age: forget its epoch so it is re-measured before use
            for i in 0..self.cands.len() {
                if self.measured_epoch[i] == Some(self.epoch) && !self.fresh(i) {
                    self.measured_epoch[i] = None;
                    self.restart[i] = true;
                }
            }
            self.dirty = true;
        }
        if self.dirty {
            self.rebuild();
        }
        let rec = inp.record_bytes.max(1);
        let q: QueueEstimate = queue_estimate(inp.devices, rec, self.tun.guard_safety_records.saturating_mul(rec));
        if let Some(qs) = q.queued_secs {
            self.queue_avg.update(now, qs);
        }
        let cores = if inp.cores > 0.0 && inp.cores.is_finite() { inp.cores } else { 1.0 };
        let workers = inp.workers.max(1) as f64;
        let n = workers.min(cores);
        let wall = (workers / cores).max(1.0);
        let o = inp.overhead_ns_per_byte.max(0.0);
        let time = |r: &Rung| r.pt.cost * rec as f64 * wall * 1e-9;
        let top = self.ladder.len() - 1;

        // 1–2: target and movement
        let mut lo = self.index_of(self.lo);
        let mut frac = 0.0;
        let mut reason = Reason::Model;
        let mut explore = None;
        let target = self.target(n, o, q.device_bps);
        self.cpu_bound = target.as_ref().is_some_and(|t| t.cpu_bound);
        // the queue delay bounds compression time only where the devices are to be kept busy:
        // not in an unsaturated pipeline (no queue to fill) nor at the CPU-bound best rung
        // (the devices wait by design)
        let guarded = inp.backlog && !self.cpu_bound;
        let fits = |r: &Rung| !guarded || q.delay_secs.is_none_or(|e| time(r) <= e);
        match &target {
            None => reason = Reason::Hold,
            Some(t) => {
                let (k, f) = (t.k, t.f);
                self.pinned = (k == 0 && f == 0.0, k == top);
                let measured = |r: usize| self.ladder[r].measured;
                // 3: a rung the decision depends on that is not measured on this data yet is
                // explored if it costs at most explore_reach times the next rung up from the
                // position (or the probe rung's nominal cost, if more), and so is that next
                // rung on the way to a target more than a rung above (a target far up the
                // ladder, where a queue or g swing puts it for a moment, is not worth
                // zstd:9–15 records on a busy core: the position walks there)
                let up = k > lo + 1 && lo < top;
                let next_up = up.then_some(lo + 1);
                let probe_cost = self.nominal.get(self.probe).map_or(0.0, |p| p.cost);
                let reach = self.ladder[(lo + 1).min(top)].pt.cost.max(probe_cost) * self.tun.explore_reach;
                let unknown = |r: &usize| self.ladder[*r].pt.cost <= reach && !self.ladder[*r].confident;
                if let Some(r) = t.relevant.iter().copied().chain(next_up).find(unknown) {
                    if self.exploring.is_none() && fits(&self.ladder[r]) {
                        explore = Some(r);
                    }
                }
                // the target as far as measured rungs reach: the measured rung nearest to it
                let (tk, tf) = if !measured(k) || (f > 0.0 && k < top && !measured(k + 1)) {
                    let c = self.ladder[k].pt.cost;
                    let near = (0..self.ladder.len())
                        .filter(|&r| measured(r))
                        .min_by(|&a, &b| {
                            (self.ladder[a].pt.cost - c).abs().total_cmp(&(self.ladder[b].pt.cost - c).abs())
                        })
                        .unwrap_or(0);
                    (near, 0.0)
                } else {
                    (k, f)
                };
                // 2: down at once, up one measured rung per record and only if it fits
                if tk < lo {
                    (lo, frac) = (tk, tf);
                } else if tk == lo {
                    frac = tf;
                } else {
                    let next = (lo + 1..=tk).find(|&r| measured(r)).unwrap_or(tk);
                    if fits(&self.ladder[next]) {
                        lo = next;
                        frac = if next == tk { tf } else { 0.0 };
                    } else {
                        reason = Reason::Guard;
                    }
                }
            }
        }
        // 4: the guard, while the pipeline is saturated and meant to keep the devices busy
        if guarded {
            if let Some(e) = q.delay_secs {
                if lo < top && frac > 0.0 && time(&self.ladder[lo + 1]) > e {
                    frac = 0.0;
                    reason = Reason::Guard;
                }
                while lo > 0 && time(&self.ladder[lo]) > e {
                    lo -= 1;
                    frac = 0.0;
                    reason = Reason::Guard;
                }
            }
        }
        self.lo = self.ladder[lo].id;
        if lo == top {
            frac = 0.0;
        }

        // the queue correction, from the averaged queue against its target (block comment,
        // CORRECTION g)
        let mut queue_long = false;
        if let (Some(avg), true) = (self.queue_avg.value(), target.is_some()) {
            let strongest = if frac > 0.0 { &self.ladder[lo + 1] } else { &self.ladder[lo] };
            let batch = q.device_bps.map_or(0.0, |d| self.tun.batch_bytes as f64 / d);
            let want = self.tun.queue_target_secs.max(4.0 * time(strongest)).max(batch);
            let err = ((avg - want) / want).clamp(-1.0, 1.0);
            queue_long = avg > want;
            if queue_long || (inp.backlog && !self.cpu_bound) {
                let (bottom, at_top) = self.pinned;
                let (lmin, lmax) = (self.tun.gain_min.ln(), self.tun.gain_max.ln());
                let wound = (err > 0.0 && at_top) || (err < 0.0 && bottom);
                if !wound && avg <= 2.0 * want {
                    self.integral = (self.integral + self.tun.gain_i * err * dt).clamp(lmin, lmax);
                }
                // an empty queue before it ever reached its target means a pipeline starting
                // up, not a slow CPU
                self.primed |= err >= 0.0;
                let p = if queue_long {
                    self.tun.gain_p_up * (avg / want).ln()
                } else if self.primed {
                    self.tun.gain_p_down * err
                } else {
                    0.0
                };
                self.gain = (p + self.integral).clamp(lmin, lmax).exp();
            }
        }
        // at the CPU-bound best rung the queue is empty by design and says nothing; the
        // compression stage's own throughput (records taken per second while saturated) against
        // the model's n / (o + c) corrects g instead — unless the queue is long: then the
        // devices, not the CPU, set that throughput
        if inp.backlog && self.cpu_bound && target.is_some() && !queue_long {
            let w = self.rate_window.get_or_insert((now, 0, 0.0));
            if now - w.0 >= RATE_WINDOW_SECS && w.1 >= RATE_WINDOW_RECORDS * rec {
                let rate = w.1 as f64 / (now - w.0);
                let cost = w.2 / w.1 as f64;
                // no more cores than the workers compressing: a window of records started in a
                // burst (a txg's queue drained at once) or costed by estimates must not make
                // the model believe in CPU the machine does not have
                let measured = (rate * (o + cost) / (n * 1e9)).min(workers / n);
                let (lmin, lmax) = (self.tun.gain_min.ln(), self.tun.gain_max.ln());
                let lg = self.gain.ln() + RATE_WEIGHT * (measured.ln() - self.gain.ln());
                self.integral = lg.clamp(lmin, lmax);
                self.gain = self.integral.exp();
                self.rate_window = Some((now, 0, 0.0));
            }
        } else {
            self.rate_window = None;
        }

        // 5–6: explore, probe or pick
        let only_raw = self.ladder.len() == 1;
        if !(lo == 0 && frac == 0.0) {
            self.raw_since = self.bytes;
        }
        let codec = if let Some(k) = explore {
            let i = self.ladder[k].id.expect("raw is always measured");
            self.exploring = Some((i, now));
            reason = Reason::Explore;
            self.cands[i]
        } else if only_raw
            && !self.cands.is_empty()
            && self.exploring.is_none()
            && self.bytes - self.raw_since >= self.tun.probe_bytes
            && self.bytes - self.last_probe >= self.tun.probe_bytes
        {
            self.last_probe = self.bytes;
            self.exploring = Some((self.probe, now));
            self.restart[self.probe] = true;
            reason = Reason::Probe;
            self.cands[self.probe]
        } else {
            let hi = self.ladder.get(lo + 1).map_or(self.ladder[lo].id, |r| r.id);
            let mix = Mix { lo: self.codec(self.ladder[lo].id), hi: self.codec(hi), frac };
            mix.pick(&mut self.acc)
        };
        let cost = self.cands.iter().position(|c| *c == codec).map_or(0.0, |i| self.point(i).cost);
        if let Some(w) = &mut self.rate_window {
            w.1 += inp.record_bytes;
            w.2 += cost * inp.record_bytes as f64;
        }
        Decision { codec, reason, queue_delay_secs: q.delay_secs }
    }

    /// Feed back a compressed record (every record `decide` gave a codec other than
    /// `Codec::NONE`, whether or not its output was kept).
    pub fn observe(&mut self, s: &Sample) {
        if let Some(f) = &mut self.feedback {
            f.observe(s);
            return;
        }
        let Some(i) = self.cands.iter().position(|c| *c == s.codec) else { return };
        if s.input_bytes == 0 {
            return;
        }
        let was_fresh = self.fresh(i);
        let before =
            (was_fresh && self.meters[i].measured_bytes() >= self.tun.confident_bytes).then(|| self.measured_point(i));
        let old_epoch = self.epoch;
        if std::mem::take(&mut self.restart[i]) || !was_fresh {
            // an exploration, a probe, or a rung used while stale: its old figures are of
            // other data, start over
            let old = self.meters[i].stored_per_byte();
            self.meters[i] = LevelMeter::new();
            self.meters[i].observe(s.input_bytes, s.stored_bytes, s.cpu_ns);
            // a rung measured on the current data that now stores differently: the data changed
            if let (true, Some(a), Some(b)) = (was_fresh, old, self.meters[i].stored_per_byte()) {
                if (a / b).ln().abs() > DRIFT_STORED {
                    self.epoch += 1;
                }
            }
        } else if self.meters[i].observe(s.input_bytes, s.stored_bytes, s.cpu_ns) == Drift::Changed {
            self.epoch += 1;
        }
        if let (true, Some(b)) = (self.epoch != old_epoch, before) {
            let after = self.measured_point(i);
            self.carry(i, b, after, old_epoch);
        }
        self.measured_epoch[i] = Some(self.epoch);
        self.measured_at[i] = self.bytes;
        if self.exploring.is_some_and(|(e, _)| e == i) {
            self.exploring = None;
        }
        self.dirty = true;
    }

    /// QoS: the strongest mix whose compression throughput on `cores` (the CPU left for this
    /// stream) with `overhead_ns_per_byte` of other pipeline CPU still meets `rate_bps`
    /// input bytes per second, on this controller's ladder (estimates included).
    pub fn mix_for_rate(&mut self, cores: f64, overhead_ns_per_byte: f64, rate_bps: f64) -> Mix {
        strongest_for_rate(&self.rate_hull(), cores, overhead_ns_per_byte, rate_bps)
    }

    /// The lower convex hull of the current ladder (estimates included), raw first, by rising
    /// cost: the mixes a rate-driven choice (QoS) moves along.
    pub fn rate_hull(&mut self) -> Vec<(Codec, Point)> {
        if self.dirty {
            self.rebuild();
        }
        let pts: Vec<Point> = self.ladder.iter().map(|r| r.pt).collect();
        lower_hull(&pts).into_iter().map(|k| (self.codec(self.ladder[k].id), self.ladder[k].pt)).collect()
    }
}
