//! The queue-feedback mode of the auto controller (the default; tunable `feedback=0` selects
//! the model of auto/model.rs): the position on a fixed ladder moves with the device queue alone, so
//! no decision compares figures of two rungs measured on different data.
//!
//! ```text
//! WHY: the model (auto/model.rs) places the position where n/(o+c) = D/s on a ladder built from
//!   each rung's own measurements. On data that changes kind every few tens of records (the
//!   corpus: text, an office binary, a database, XML) the rungs are measured on different
//!   kinds, the hull is rebuilt from incomparable points and the position jumps between
//!   distant rungs. The device queue, in contrast, integrates the real mismatch between what
//!   compression delivers and what the devices drain, on whatever data is being written.
//!
//! LADDER (`spine`): the candidates of `auto:MIN..MAX` on the lower convex hull of their
//!   nominal figures (codec/nominal.rs), raw below them: one order, fixed for the mount, each
//!   rung nominally faster and weaker than the next and none beaten by a mix of its
//!   neighbours. Nominal figures are one consistent table, so the order holds on typical data
//!   even where single measurements disagree.
//!
//! STATE: the position x ∈ [0, R] (0 raw, j the j-th rung, a fraction mixes rung ⌊x⌋ with the
//!   next, spread over records by error diffusion); the queue delay averaged over
//!   queue_tau_secs; the saving of the recent compressed records and the raw state it drives;
//!   the last probe.
//!
//! TRANSITIONS, per record, with q the averaged queue delay q̄, looked fb_lead seconds ahead
//!   while it drains (q̄ + fb_lead·min(dq̄/dt, 0), at least 0; the pace averaged over
//!   queue_tau_secs), and q* its target — the larger of queue_target_secs, the device time
//!   of batch_bytes (records wait for their txg: a queue the pipeline holds by itself) and 4
//!   compression times of the current rung (room for a slow record). Looking ahead, a
//!   backlog draining towards an empty device turns the position down while the device
//!   still has work:
//!   q > q*              the devices are the bottleneck: x rises by fb_up·min(ln(q/q*), 2)
//!                       rungs per second (stronger levels cost CPU that is idle anyway)
//!   q ≤ q*, saturated   the CPU is the bottleneck (records wait for compression while the
//!                       devices run short; saturated: a backlog while the compress workers
//!                       were busy at least fb_busy of the recent time, for a writer's
//!                       write queues several records at once whether or not the workers
//!                       keep up): x falls by d·(1 − q/q*) rungs per second,
//!                       down to raw (never slower than `none`), but not below the floor f;
//!                       d = fb_down·max(1, fb_gap·(x − f)): far above the floor every
//!                       second spent there is throughput lost (a 1 GiB write on a fast
//!                       device lasts 1.5 s, and at fb_down the descent from zstd:1 to
//!                       raw took most of it), near it the queue's pace decides
//!   … backlog, x < f    the floor rose above the position (the devices' rate became known
//!                       after the descent, or the data changed the rungs' figures): x
//!                       rises by fb_lift rungs per second up to f. Below f a CPU-bound
//!                       pipeline is no faster and stores more, and nothing else lifts it:
//!                       the queue stays short
//!   otherwise           hold: an unsaturated pipeline says nothing
//!   START-UP: until some device has a rate (the pipeline confirms one after the burst a
//!   throttled device or a write cache lets through at memory speed), queue seconds are
//!   unknown and a short queue proves nothing. A long one does: when every device with
//!   room has queued more than fb_start_bytes of input (its stored bytes over the recent
//!   stored fraction: the share of the engine's dirty memory that waits for a device, not
//!   for the CPU), x rises by fb_up·min(ln(b/fb_start_bytes), 2) rungs per second, b the
//!   shortest of those queues; otherwise x holds. A start on a slow device then climbs
//!   while its rate is being confirmed instead of writing its first hundreds of megabytes
//!   (what the dirty limit lets a writer put in memory at once) at the starting rung.
//!   The record's rung is taken at x + fb_p·clamp(ln(q/q*), −1, 1) (the proportional part:
//!   the queue is itself the integral of the rate mismatch, and x integrating it again would
//!   oscillate without it).
//!   FLOOR: neither the descent nor the proportional part takes the rung below min(x, f),
//!   f the strongest rung whose write rate T(r) is within fb_floor_slack of the best
//!   rung's, T(r) = min(n / (cost(r) + oᵢ + oₛ·stored(r)), D / stored(r)): what the CPU (n cores)
//!   compresses and stores, or what the devices take (D bytes/s: their rate when last
//!   seen as the bottleneck, q̄ > q* for fb_capacity_secs — the larger of their drain rate
//!   and their rate per range in large writes, below —, or any higher drain rate since;
//!   until then their rate per range in large writes, and infinite while they have none.
//!   A device that keeps up drains only what arrives, so its drain over time says nothing
//!   of what it could take; per range it does on a device that serves each write at its
//!   rate, as a disk does, once the fixed time each write costs is taken out (device
//!   stats `bulk_bps`: a device kept up with gets one record per write, a backlog
//!   coalesces them into runs of megabytes, and the paced device at 400 MB/s takes 101
//!   MB/s in 16 KiB writes), and it reads high, never low, where a throttle's burst or a
//!   write cache lets writes through at memory speed: there it bounds the floor no more
//!   than infinity would). A
//!   descent only helps while the rung below is faster by both bounds: a stored byte
//!   costs the pipeline CPU too (copy, checksum, the write's kernel time), so on data
//!   that compresses well a weaker rung saves codec time and spends it again storing
//!   more; and a weaker rung that stores more can make the device the bottleneck
//!   at a lower rate than the CPU's at the stronger one (the corpus XML at 100 MB/s on one
//!   core: lz4 fills the device at 420 MB/s of input, zstd:1 is CPU-bound at 490). Below
//!   f a CPU-bound pipeline gets no faster and only loses ratio. cost(r) and stored(r) are
//!   each rung's measured averages (nominal until measured). oₛ, the pipeline CPU per
//!   stored byte, is the device writers' CPU inside their writes per byte written (the
//!   kernel's copy and page handling, from their thread clocks); oᵢ, per input byte, is
//!   the rest of the overhead meter's figure (process CPU beyond the codec per input byte,
//!   less oₛ at the recent stored fraction, at least 0: the FUSE round trips, the copies
//!   into dirty memory). A weaker rung pays oₛ on every extra byte it stores and nothing
//!   more on oᵢ: charging all of the overhead per stored byte makes a rung storing 0.35 of
//!   the XML look as slow as zstd:1 at 0.15, which lz4fast-20 outruns by a third. Before
//!   the writers have a figure (or with fb_split 0) all of it is taken per stored byte, and
//!   before the meter has any, 0: the CPU bound is then the codec's alone.
//!   RAW: when the records compressed over the last DRIFT_WINDOW_BYTES saved less than
//!   min_gain, records are stored raw and one record every probe_bytes is compressed at x's
//!   rung (at least the first); a probe that saves min_gain or more ends it.
//!
//! RESUME: `resume_point` is the rung the position sits at (x rounded, held to the rate
//!   check's ceiling when it has one: what the records are written at), and `resume_at(c)`
//!   puts x on the rung of the ladder nominally nearest c in CPU cost (raw: 0). The engine
//!   keeps the point of the last write in the pool and starts the next mount's controller
//!   there: a mount that has measured its device does not spend its first seconds (a whole
//!   short write) descending from the starting rung. Everything measured stays unknown
//!   (figures nominal, no device rate), so the rules above move it from there as from any
//!   position. Tunable fb_resume 0: resume_at does nothing, the start is the nominal one.
//!
//! RATE CHECK: while the CPU bounds the write and the queue is at or below its target
//!   and not growing by more than RATE_PACE (before any device has a rate: no device is
//!   behind), the rung the rules above give is checked against the mount's measured
//!   intake rate, and held to the strongest rung a hill climb on that rate finds as fast
//!   as the weaker ones (auto/rate_check.rs): what the floor cannot see (a loop device's
//!   kernel thread, the host filesystem, page-cache writeback, other load) the rate
//!   includes. The check is told Cpu (saturated, or the allowed CPUs idle fb_rate_idle
//!   of the time or less, every process counted; the queue short), Device (queue long or
//!   growing) or Neither (queue short, not saturated: a search measuring a rung weaker
//!   than the one it began at goes on, for that rung frees the workers; elsewhere it
//!   ends). The devices behind for fb_capacity_secs reset it (a stronger rung is free
//!   then). Tunable fb_rate 0 turns it off.
//!
//! TUNABLES (tunables.rs `Tunables`): fb_up 4 and fb_down 6 rungs/s (the ladder spans about 20
//!   rungs: a second or two from end to end, quicker down because a starved device loses
//!   throughput while a long queue costs only memory), fb_p 1 rung; fb_lead 1 s (about
//!   what a descent of several rungs takes, so that it ends as the backlog does);
//!   fb_start_bytes 32 MiB (twice the input the pipeline batches by itself before it
//!   syncs: past that, compressed data piles up for a device that does not keep up);
//!   fb_floor_slack 0.15 (more than the rungs' figures move on steady data: a rung
//!   the position only passes is measured over a few records, and on the corpus XML at
//!   100 MB/s their cost and stored bytes spread ±10–15% from one moment to the next,
//!   so a floor within 5% of the fastest moves between zstd:-1 and zstd:1 on that noise
//!   and the position mixes in the weaker rung, which fixed runs show no faster; a
//!   rung faster by more than the spread still lowers the floor), fb_floor 1 (0: no
//!   floor); fb_lift 4 rungs/s (as fast as a climb: the floor is a rung the figures say
//!   is as fast as any); fb_capacity_secs 0.5 (longer
//!   than one txg's records, handed over at once, take to drain); fb_range 1 (the rate
//!   per range bounds the floor before the capacity is known); fb_split 1 (the overhead
//!   split as measured, FLOOR); fb_busy 0.9 (the workers' busy share at which a backlog is
//!   saturation: see auto/model.rs); fb_gap 0.5 (the descent doubles its pace 4 rungs above
//!   the floor: from zstd:1 to a rung above raw in about 0.6 s instead of 1.2);
//!   fb_resume 1 (RESUME; 0: every mount starts at the nominal starting rung);
//!   queue_target_secs, queue_tau_secs, batch_bytes, min_gain and probe_bytes as the
//!   model uses them.
//! ```

use crate::auto::decision::{AutoInputs, Decision, Reason, Sample};
use crate::auto::ladder::{lower_hull, Mix, Point};
use crate::auto::rate_check::{Load, RateCheck, RateTunables};
use crate::auto::tunables::Tunables;
use crate::measure::ewma::{ByteEwma, TimeEwma};
use crate::measure::meters::{queue_estimate, DRIFT_WINDOW_BYTES, LEVEL_WINDOW_BYTES};
use squeezefs_codec::{Algorithm, Codec};

/// Seconds of device queue per second above which the queue counts as growing: the rate
/// check (auto/rate_check.rs) measures only while it does not.
const RATE_PACE: f64 = 0.05;

/// Longest time step one decision integrates, seconds (a pause between writes is not a
/// second of queue error).
const MAX_STEP_SECS: f64 = 0.25;

/// The queue-feedback controller's state (see the module comment).
#[derive(Clone, Debug)]
pub struct Feedback {
    tun: Tunables,
    spine: Vec<Codec>,
    /// CPU ns per byte of each rung, measured (nominal until then): the queue target's
    /// room for one record, and the floor
    cost: Vec<ByteEwma>,
    /// stored bytes per input byte of each rung, measured (nominal until then): the floor
    stored: Vec<ByteEwma>,
    /// input bytes each rung was measured on
    seen: Vec<u64>,
    x: f64,
    acc: f64,
    queue_avg: TimeEwma,
    /// the averaged queue at the previous decision, and its pace (seconds of queue per
    /// second, averaged over queue_tau_secs)
    last_avg: Option<f64>,
    pace: f64,
    last_now: Option<f64>,
    saving: ByteEwma,
    /// input bytes in `saving` since it restarted
    saving_bytes: u64,
    raw: bool,
    bytes: u64,
    last_probe: u64,
    last_floor: f64,
    /// the devices' rate when last seen as the bottleneck, bytes/s (or any higher drain
    /// rate seen since): the floor's device bound
    capacity: Option<f64>,
    /// the device bound the floor took at the last decision: `capacity`, or before it the
    /// devices' rate per range in large writes
    last_bound: Option<f64>,
    /// since when the averaged queue has been above its target
    behind_since: Option<f64>,
    /// the end-to-end check of a CPU-bound position (None: tunable fb_rate 0)
    check: Option<RateCheck>,
}

impl Feedback {
    /// The controller for the candidates of an `auto:MIN..MAX` range, fastest first,
    /// starting at the rung nominally nearest `start`.
    pub fn new(cands: &[Codec], start: Codec, tun: Tunables) -> Feedback {
        let mut pts = vec![Point { cost: 0.0, stored: 1.0 }];
        pts.extend(cands.iter().map(|c| Point::nominal(*c)));
        let spine: Vec<Codec> = lower_hull(&pts).into_iter().filter(|&k| k > 0).map(|k| cands[k - 1]).collect();
        let x = nearest_rung(&spine, start) as f64;
        let nominal = |figure: fn(Point) -> f64| -> Vec<ByteEwma> {
            spine
                .iter()
                .map(|c| {
                    let mut e = ByteEwma::new(LEVEL_WINDOW_BYTES);
                    e.set(figure(Point::nominal(*c)));
                    e
                })
                .collect()
        };
        let (cost, stored) = (nominal(|p| p.cost), nominal(|p| p.stored));
        let queue_avg = TimeEwma::new(tun.queue_tau_secs.max(1e-3));
        let check = (tun.fb_rate != 0).then(|| {
            RateCheck::new(RateTunables {
                window_secs: tun.fb_rate_secs,
                gain: tun.fb_rate_gain,
                hold_secs: tun.fb_rate_hold,
                hold_max_secs: tun.fb_rate_hold_max,
            })
        });
        Feedback {
            check,
            tun,
            seen: vec![0; spine.len()],
            spine,
            cost,
            stored,
            x,
            acc: 0.0,
            queue_avg,
            last_avg: None,
            pace: 0.0,
            last_now: None,
            saving: ByteEwma::new(DRIFT_WINDOW_BYTES),
            saving_bytes: 0,
            raw: false,
            bytes: 0,
            last_probe: 0,
            last_floor: 0.0,
            capacity: None,
            last_bound: None,
            behind_since: None,
        }
    }

    /// The ladder, fastest first (raw, below it, is not listed).
    pub fn spine(&self) -> &[Codec] {
        &self.spine
    }

    /// The position: 0 raw, j the j-th rung of the spine.
    pub fn position(&self) -> f64 {
        self.x
    }

    /// The codec of the rung the position sits at (module comment, RESUME): x rounded,
    /// no higher than the rate check's ceiling.
    pub fn resume_point(&self) -> Codec {
        let r = self.x.round().max(0.0) as usize;
        self.rung(self.rate_ceiling().map_or(r, |c| c.min(r)))
    }

    /// Put the position on the rung nominally nearest `codec` (raw or `none`: rung 0);
    /// nothing under tunable fb_resume 0.
    pub fn resume_at(&mut self, codec: Codec) {
        if self.tun.fb_resume != 0 {
            self.x = nearest_rung(&self.spine, codec) as f64;
        }
    }

    /// The codec of rung `r` (0: raw).
    fn rung(&self, r: usize) -> Codec {
        if r == 0 {
            Codec::NONE
        } else {
            self.spine[(r - 1).min(self.spine.len() - 1)]
        }
    }

    fn rung_cost(&self, r: usize) -> f64 {
        if r == 0 {
            0.0
        } else {
            self.cost[(r - 1).min(self.cost.len() - 1)].value().unwrap_or(0.0)
        }
    }

    /// The level for the next record.
    pub fn decide(&mut self, inp: &AutoInputs) -> Decision {
        let now = inp.now_secs;
        let dt = self.last_now.map_or(0.0, |t| (now - t).clamp(0.0, MAX_STEP_SECS));
        self.last_now = Some(now.max(self.last_now.unwrap_or(now)));
        self.bytes = self.bytes.saturating_add(inp.record_bytes);
        let rec = inp.record_bytes.max(1);
        let q = queue_estimate(inp.devices, rec, self.tun.guard_safety_records.saturating_mul(rec));
        let top = self.spine.len() as f64;
        if self.spine.is_empty() {
            return Decision { codec: Codec::NONE, reason: Reason::Model, queue_delay_secs: q.delay_secs };
        }
        let (Some(qs), Some(dev)) = (q.queued_secs, q.device_bps) else {
            // the shortest queue, in the input bytes it holds at the recent saving
            let stored = self.stored_fraction();
            let behind = inp
                .devices
                .iter()
                .filter(|d| d.free_bytes >= rec)
                .map(|d| d.queued_bytes as f64 / stored)
                .min_by(f64::total_cmp)
                .filter(|&b| b > self.tun.fb_start_bytes as f64);
            if let Some(b) = behind {
                let err = (b / self.tun.fb_start_bytes.max(1) as f64).ln();
                self.x = (self.x + self.tun.fb_up * err.min(2.0) * dt).clamp(0.0, top);
            }
            if self.raw {
                return self.raw_decision(self.x.round() as usize, q.delay_secs);
            }
            let load = match (behind.is_some(), self.saturated(inp) || self.cpus_busy(inp)) {
                (true, _) => Load::Device,
                (false, true) => Load::Cpu,
                (false, false) => Load::Neither,
            };
            if let Some(d) = self.checked(now, rec, self.x.round() as usize, load, behind.is_some()) {
                return Decision { queue_delay_secs: q.delay_secs, ..d };
            }
            if behind.is_some() {
                return Decision { codec: self.mixed(self.x), reason: Reason::Model, queue_delay_secs: q.delay_secs };
            }
            let codec = self.rung(self.x.round() as usize);
            return Decision { codec, reason: Reason::Hold, queue_delay_secs: q.delay_secs };
        };
        let avg = self.queue_avg.update(now, qs);
        if dt > 0.0 {
            if let Some(prev) = self.last_avg {
                let a = (dt / self.tun.queue_tau_secs.max(1e-3)).min(1.0);
                self.pace += a * ((avg - prev) / dt - self.pace);
            }
        }
        self.last_avg = Some(avg);
        // the queue as it will be fb_lead from now if it goes on draining at its pace: a
        // backlog draining towards an empty device turns the position down before the
        // device runs dry. A growing queue is taken as it is: the queue moves in steps as
        // txgs hand their records to the devices, and a step up read as a pace would hold
        // a descent back.
        let ahead = (avg + self.tun.fb_lead * self.pace.min(0.0)).max(0.0);
        let cores = if inp.cores > 0.0 && inp.cores.is_finite() { inp.cores } else { 1.0 };
        let wall = (inp.workers.max(1) as f64 / cores).max(1.0);
        let here = self.x.floor() as usize;
        let record_secs = self.rung_cost((here + 1).min(self.spine.len())) * rec as f64 * wall * 1e-9;
        let want = self.tun.queue_target_secs.max(self.tun.batch_bytes as f64 / dev).max(4.0 * record_secs).max(1e-6);
        let err = (ahead.max(1e-9) / want).ln();
        // the devices' rate is their capacity only while they are the bottleneck: a device
        // that keeps up drains what arrives, and that rate as a bound would hold the
        // position wherever it is. A queue above its target for a moment is a txg's batch
        // handed over at once; for fb_capacity_secs it is the device falling behind.
        if avg <= want {
            self.behind_since = None;
        } else if self.behind_since.is_none() {
            self.behind_since = Some(now);
        }
        let held = self.behind_since.is_some_and(|t| now - t >= self.tun.fb_capacity_secs);
        let range =
            (self.tun.fb_range != 0 && inp.range_bps.is_finite() && inp.range_bps > 0.0).then_some(inp.range_bps);
        if held {
            // a backlog coalesces the devices' writes into long runs, and their rate in
            // long runs is what they take: the drain over time reads what arrived in the
            // short writes before
            self.capacity = Some(dev.max(range.unwrap_or(0.0)));
        } else if self.capacity.is_some_and(|c| dev > c) {
            self.capacity = Some(dev);
        }
        self.last_bound = self.capacity.or(range);
        let f = self.floor(inp.overhead_ns_per_byte, inp.store_ns_per_byte, cores, self.last_bound);
        self.last_floor = f;
        let saturated = self.saturated(inp);
        if ahead > want {
            self.x += self.tun.fb_up * err.min(2.0) * dt;
        } else if inp.backlog && f > self.x && self.tun.fb_lift > 0.0 {
            self.x = (self.x + self.tun.fb_lift * dt).min(f);
        } else if saturated {
            self.x = (self.x - self.descent(f) * (1.0 - ahead / want) * dt).max(f.min(self.x));
        }
        let floor = f.min(self.x);
        self.x = self.x.clamp(0.0, top);
        let p = if ahead > want || saturated { self.tun.fb_p * err.clamp(-1.0, 1.0) } else { 0.0 };
        let xe = (self.x + p).clamp(floor, top);
        if self.raw {
            return self.raw_decision(xe.round() as usize, q.delay_secs);
        }
        // a queue growing by more than RATE_PACE seconds a second is a device falling
        // behind before the average shows it: a weaker rung's intake would only fill memory
        let steady = self.pace <= RATE_PACE;
        let load = match (ahead <= want && steady, saturated || self.cpus_busy(inp)) {
            (false, _) => Load::Device,
            (true, true) => Load::Cpu,
            (true, false) => Load::Neither,
        };
        if let Some(d) = self.checked(now, rec, xe.round() as usize, load, held) {
            return Decision { queue_delay_secs: q.delay_secs, ..d };
        }
        Decision { codec: self.mixed(xe), reason: Reason::Model, queue_delay_secs: q.delay_secs }
    }

    /// Short of CPU: records wait for compression while the workers were busy, not only
    /// the records of one write queued at once.
    fn saturated(&self, inp: &AutoInputs) -> bool {
        inp.backlog && inp.workers_busy.is_none_or(|u| u >= self.tun.fb_busy)
    }

    /// The allowed CPUs (nearly) never idle, every process counted: with the workers
    /// saturated or not, the CPU bounds the write (the rate check's Load::Cpu), for the FUSE
    /// round trips, the writer's copy and a loop device's worker compete with the workers
    /// for the cores, and a weaker rung can be faster though the workers wait.
    fn cpus_busy(&self, inp: &AutoInputs) -> bool {
        inp.cpu_idle.is_some_and(|i| i <= self.tun.fb_rate_idle)
    }

    /// The rate check's override of rung `top` (auto/rate_check.rs), given what bounds the
    /// write and whether the devices have been its bottleneck for long (which resets the
    /// check): a window of its search (reason Explore) or its ceiling.
    fn checked(&mut self, now: f64, rec: u64, top: usize, load: Load, device_bound: bool) -> Option<Decision> {
        if device_bound {
            if let Some(c) = self.check.as_mut() {
                c.reset();
            }
            return None;
        }
        let device = self.last_bound.filter(|d| d.is_finite() && *d > 0.0);
        let stored = &self.stored;
        let bound = |r: usize| match device {
            None => f64::INFINITY,
            Some(d) if r == 0 => d,
            Some(d) => {
                let i = (r - 1).min(stored.len() - 1);
                d / stored[i].value().unwrap_or(1.0).clamp(1e-3, 1.0)
            }
        };
        let check = self.check.as_mut()?;
        let r = check.rung(now, rec, top, load, &bound)?;
        let reason = if check.searching() { Reason::Explore } else { Reason::Model };
        Some(Decision { codec: self.rung(r), reason, queue_delay_secs: None })
    }

    /// The rate check's ceiling: the rung a CPU-bound position is held to (None: no check,
    /// or none searched yet).
    pub fn rate_ceiling(&self) -> Option<usize> {
        self.check.as_ref().and_then(RateCheck::ceiling)
    }

    /// Rungs per second a CPU-bound position descends at with no queue at all, given the
    /// floor f: fb_down, faster in proportion to the distance above f beyond 1/fb_gap rungs.
    fn descent(&self, f: f64) -> f64 {
        self.tun.fb_down * (self.tun.fb_gap * (self.x - f)).max(1.0)
    }

    /// Each rung's figures as the floor takes them, raw first: (codec, CPU ns and stored
    /// bytes per input byte, measured on this mount's data).
    pub fn figures(&self) -> Vec<(Codec, Point, bool)> {
        let rungs = self.spine.iter().enumerate().map(|(i, c)| {
            let pt = Point { cost: self.cost[i].value().unwrap_or(0.0), stored: self.stored[i].value().unwrap_or(1.0) };
            (*c, pt, self.seen[i] > 0)
        });
        std::iter::once((Codec::NONE, Point { cost: 0.0, stored: 1.0 }, true)).chain(rungs).collect()
    }

    /// The devices' drain rate the floor took as their capacity at the last decision,
    /// bytes/s: their rate when last the bottleneck, or before that their rate per range
    /// (None: neither measured).
    pub fn device_bound(&self) -> Option<f64> {
        self.last_bound
    }

    /// The floor rung f at the last decision (module comment, FLOOR): a descent stops at
    /// min(x, f), a CPU-bound position below it rises to it.
    pub fn last_floor(&self) -> f64 {
        self.last_floor
    }

    /// The rung for position `x`: ⌊x⌋ or the next, spread over records by error diffusion.
    fn mixed(&mut self, x: f64) -> Codec {
        let k = x.floor() as usize;
        let mix = Mix { lo: self.rung(k), hi: self.rung(k + 1), frac: x - k as f64 };
        mix.pick(&mut self.acc)
    }

    /// Stored bytes per input byte of the recent compressed records (1 before any; at
    /// least 0.01, so that it divides).
    fn stored_fraction(&self) -> f64 {
        1.0 - self.saving.value().unwrap_or(0.0).clamp(0.0, 0.99)
    }

    /// The floor rung f (module comment), given the pipeline's CPU per input byte beyond
    /// the codec's and the part of it the device writers spend per byte they write, the
    /// cores it runs on and the devices' drain rate (None: not known yet,
    /// the CPU alone bounds).
    pub fn floor(
        &self,
        overhead_ns_per_byte: f64,
        store_ns_per_byte: Option<f64>,
        cores: f64,
        device_bps: Option<f64>,
    ) -> f64 {
        if self.tun.fb_floor == 0 {
            return 0.0;
        }
        let o = if overhead_ns_per_byte.is_finite() { overhead_ns_per_byte.max(0.0) } else { 0.0 };
        let store = store_ns_per_byte.filter(|_| self.tun.fb_split != 0);
        let (per_input, per_stored) = overhead_split(o, store, self.stored_fraction());
        // a rung not measured yet: its nominal figures scaled as the measured rung nearest
        // the position departs from its own (the data compresses better or worse than the
        // nominal corpus, at every rung alike)
        let near = (0..self.spine.len())
            .filter(|&i| self.seen[i] > 0)
            .min_by(|&a, &b| (a as f64 + 1.0 - self.x).abs().total_cmp(&(b as f64 + 1.0 - self.x).abs()));
        let (ks, kc) = near.map_or((1.0, 1.0), |i| {
            let n = Point::nominal(self.spine[i]);
            let s = self.stored[i].value().unwrap_or(n.stored) / n.stored.max(1e-9);
            let c = self.cost[i].value().unwrap_or(n.cost) / n.cost.max(1e-9);
            (s, c)
        });
        let figures = |i: usize| {
            if self.seen[i] > 0 {
                (self.cost[i].value().unwrap_or(0.0), self.stored[i].value().unwrap_or(1.0))
            } else {
                let n = Point::nominal(self.spine[i]);
                (n.cost * kc, (n.stored * ks).min(1.0))
            }
        };
        let cores = if cores.is_finite() && cores > 0.0 { cores } else { 1.0 };
        let device_bps = device_bps.filter(|d| d.is_finite() && *d > 0.0).unwrap_or(f64::INFINITY);
        let rate = |r: usize| {
            let (cost, stored) = if r == 0 { (0.0, 1.0) } else { figures(r - 1) };
            let cpu = cores * 1e9 / (cost + per_input + per_stored * stored).max(1e-9);
            cpu.min(device_bps / stored.max(1e-6))
        };
        let best = (0..=self.spine.len()).map(rate).fold(0.0, f64::max);
        let bound = best / (1.0 + self.tun.fb_floor_slack);
        (0..=self.spine.len()).rev().find(|&r| rate(r) >= bound).unwrap_or(0) as f64
    }

    /// A record in raw mode: raw, or every probe_bytes a probe at rung `r` (at least the
    /// first compressing rung).
    fn raw_decision(&mut self, r: usize, queue_delay_secs: Option<f64>) -> Decision {
        if self.bytes.saturating_sub(self.last_probe) >= self.tun.probe_bytes {
            self.last_probe = self.bytes;
            return Decision { codec: self.rung(r.max(1)), reason: Reason::Probe, queue_delay_secs };
        }
        Decision { codec: Codec::NONE, reason: Reason::Model, queue_delay_secs }
    }

    /// Feed back a compressed record.
    pub fn observe(&mut self, s: &Sample) {
        if s.input_bytes == 0 {
            return;
        }
        if let Some(i) = self.spine.iter().position(|c| *c == s.codec) {
            self.cost[i].update(s.cpu_ns as f64 / s.input_bytes as f64, s.input_bytes);
            let stored = s.stored_bytes.min(s.input_bytes) as f64 / s.input_bytes as f64;
            self.stored[i].update(stored, s.input_bytes);
            self.seen[i] = self.seen[i].saturating_add(s.input_bytes);
        }
        let saved = 1.0 - s.stored_bytes.min(s.input_bytes) as f64 / s.input_bytes as f64;
        if self.raw {
            // a probe: one record decides, so that compressible data is taken up at once
            if saved >= self.tun.min_gain / (1.0 + self.tun.min_gain) {
                self.raw = false;
                self.saving = ByteEwma::new(DRIFT_WINDOW_BYTES);
                self.saving_bytes = 0;
            }
            return;
        }
        let avg = self.saving.update(saved, s.input_bytes).unwrap_or(1.0);
        self.saving_bytes = self.saving_bytes.saturating_add(s.input_bytes);
        if self.saving_bytes >= DRIFT_WINDOW_BYTES && avg < self.tun.min_gain / (1.0 + self.tun.min_gain) {
            self.raw = true;
            self.last_probe = self.bytes;
        }
    }
}

/// The rung of `spine` (1-based; 0 raw) nominally nearest `codec` in CPU cost, by ln of
/// the cost: raw for a codec that stores raw, and for an empty spine.
fn nearest_rung(spine: &[Codec], codec: Codec) -> usize {
    if codec.alg == Algorithm::None {
        return 0;
    }
    let want = Point::nominal(codec).cost.ln();
    let dist = |c: &Codec| (Point::nominal(*c).cost.ln() - want).abs();
    spine.iter().enumerate().min_by(|a, b| dist(a.1).total_cmp(&dist(b.1))).map_or(0, |(i, _)| i + 1)
}

/// The pipeline's CPU beyond the codec as (ns per input byte, ns per stored byte), from its
/// total per input byte `o`, the device writers' CPU per byte written `store` (None: not
/// measured) and the stored fraction `s` of the recent records: the writers' part goes per
/// stored byte and the rest, at least 0, per input byte. Unmeasured, all of it is taken
/// per stored byte, which favours the stronger rung where the split is not known.
fn overhead_split(o: f64, store: Option<f64>, s: f64) -> (f64, f64) {
    let s = s.clamp(0.01, 1.0);
    match store.filter(|v| v.is_finite() && *v >= 0.0) {
        Some(st) => {
            let st = st.min(o / s);
            ((o - st * s).max(0.0), st)
        }
        None => (0.0, o / s),
    }
}

#[cfg(test)]
mod tests {
    use super::overhead_split;

    #[test]
    fn the_overhead_splits_into_the_writers_part_per_stored_byte_and_the_rest_per_input_byte() {
        // 1.2 ns per input byte in all, at 0.4 stored: the writers' 1 ns per byte written is
        // 0.4 of it, the other 0.8 goes per input byte
        let (i, st) = overhead_split(1.2, Some(1.0), 0.4);
        assert!((i - 0.8).abs() < 1e-12 && (st - 1.0).abs() < 1e-12, "{i} {st}");
        // charged back at the same stored fraction, the split gives the total again
        assert!((i + st * 0.4 - 1.2).abs() < 1e-12);
        // unmeasured: all of it per stored byte
        let (i, st) = overhead_split(1.2, None, 0.4);
        assert!(i == 0.0 && (st - 3.0).abs() < 1e-12, "{i} {st}");
        // a writers' figure above the whole (meters sampled at different moments) is held to it
        let (i, st) = overhead_split(0.2, Some(1.0), 0.4);
        assert!(i == 0.0 && (st - 0.5).abs() < 1e-12, "{i} {st}");
        assert_eq!(overhead_split(0.0, Some(f64::NAN), 0.5), (0.0, 0.0));
    }
}
