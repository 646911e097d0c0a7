//! The per-record level decision (docs/design.md §8): which codec a record is compressed
//! with, given its policy and what the engine measures, and what its compression gave, fed
//! back. Every record that is not a hole passes [`Levels::choose`] once and then
//! [`Levels::finish`] (compress/queue.rs `Compression::compress`): the one decision point of the
//! compress stage, where the adaptive policies plug in.
//!
//! ```text
//! choose(policy, record), in order:
//!   off, none                      → raw, why `fixed`
//!   the heuristic finds nothing    → raw, why `incompressible`; no controller is asked and no
//!     to gain (skipped under          codec runs, so incompressible data costs no CPU at any
//!     compress-force and while the    level
//!     file's records keep
//!     compressing: the streak)
//!   fixed codec                    → that codec, why `fixed`
//!   a QoS tree's record under an    → the level its tree's plan picks (qos.rs `Qos::pick`:
//!     adaptive spec (`auto`, `qos:N`;  the rate decides), why `qos`; under a fixed spec the
//!     `policy.tree` ≠ NO_TREE)         tree's records keep that codec (paced all the same)
//!   auto:MIN..MAX                  → the engine's auto controller for that range decides
//!                                    (crates/control auto/model.rs, pure) from the inputs below;
//!                                    its answer may be raw (`Codec::NONE`)
//!   qos:N (as a spec, outside a     → zstd:3 (the `qos` property or mount option makes a
//!     QoS tree)                       tree; the spec alone paces nothing)
//! finish(record, choice, outcome):
//!   an auto choice that ran a codec → the controller's `observe` (codec CPU time of the call,
//!     stored bytes: the input size when the output did not save a sector);
//!   a QoS tree's record → its tree's meters and stats (`Qos::observe`); any other record's
//!     codec CPU counts as CPU the QoS plan cannot use;
//!   every record → one trace row when the engine traces (`OpenOptions::trace`).
//!
//! Inputs gathered for auto, without taking any lock of the engine's state:
//!   devices   per device: averaged throughput (DeviceStats: the device's drain rate, which
//!             its writeback watcher measures, device file.rs; bounded by its sustained
//!             rate over spans in which its write queue never emptied, BusyDrain, sampled
//!             with the CPU meters: a throttled device lets a burst through after each idle
//!             gap, and the per-range average read 2–4.7× its limit). Until a device has
//!             written RATE_CONFIRM_BYTES and then has a sustained rate or is seen with an
//!             empty queue, its rate counts as unmeasured and auto holds its starting level:
//!             the first ranges of a throttled device, or of one behind a write cache,
//!             complete at memory speed whatever the limit (1.4 GB/s at a 100 MB/s loop
//!             throttle), and on that figure the model stores records raw, which it then
//!             decides at memory speed too. Room (a hint space/placement.rs
//!             refreshes at every placement), and queued bytes: its write queue, plus an even
//!             share of the bytes compressed (or decided raw) and not yet handed to any
//!             device. The thesis's queue is what left the compressor and waits for a
//!             device; here records wait in memory for their txg too (raw ones always: only
//!             compressed records are placed early), and a queue that left them out would
//!             look empty whenever auto chose raw, and the guard would keep choosing raw.
//!             Pending = stored bytes of records finished − bytes the devices wrote, both
//!             counted from the last moment the engine held no dirty data (`rebase`), so
//!             that records that never reach a device (overwritten, stored inline) do not
//!             count for ever.
//!   range     the devices' summed drain rate per range (their throughput before the bound
//!             by a sustained rate and before confirmation), once each device with room
//!             has drained RATE_CONFIRM_BYTES: the floor's device bound until the devices
//!             have been the bottleneck (control feedback.rs, FLOOR). It reads a device that
//!             serves each write at its rate right and a throttled or cached one high.
//!   cores     UsableCores (crates/control cpu.rs): the cores our threads obtain when they
//!             demand CPU — codec CPU ÷ codec wall time of the calls (`Outcome`) made with a
//!             backlog, times the workers, or the process's CPU per second while most
//!             records had a backlog, whichever is more; then the share of all calls; never
//!             less than the process's CPU per second; /proc/stat's idle + ours before any
//!             call — and
//!   overhead  OverheadMeter (process CPU − codec CPU per input byte; of it, the device
//!             writers' CPU per byte written, from their thread clocks): all sampled at most
//!             every METER_PERIOD by whichever deciding thread comes first; the others use
//!             the last figures (atomics)
//!   workers   the compress workers
//!   backlog   whether more records wait in the compress queue (the pipeline is saturated)
//!   workers busy  the share of the recent time the compress workers ran jobs (WorkerUse,
//!             from workers.rs `WorkerBusy`), sampled with the meters
//!   cpu idle  the idle share of the CPUs the process may use, every process counted
//!             (CpuMeter, /proc/stat), sampled with the meters: the rate check's sign that
//!             the machine's CPU bounds a write whose workers wait
//!
//! Logged with auto's inputs, not one of them: the device writers' share of their writes'
//! wall time spent neither running nor waiting for a CPU (WriterBlocked, from DeviceStats:
//! thread clock and schedstat run delay around each write), which tells a drain held up by
//! its device from one starved of CPU when a trace is read.
//!
//! Locks: one Mutex per auto range in use (normally one: the mount's), held for `decide`
//! and again for `observe` (about a microsecond each, docs/benchmarks.md "auto: the cost of
//! a decision"); the trace writer's Mutex for one row. No two are held together, none
//! across compression, and no engine lock is held by the callers (Rank::Leaf).
//! ```

use crate::base::locks::{Mutex, Rank, RwLock};
use crate::base::workers::WorkerBusy;
use crate::compress::policy::{Policy, ADAPTIVE_PLACEHOLDER};
use crate::compress::qos::Qos;
use squeezefs_codec::heuristic::{self, Verdict};
use squeezefs_codec::{Algorithm, Codec, Spec};
use squeezefs_control::cpu::process_cpu_ns;
use squeezefs_control::qos::{TreeId, NO_TREE};
use squeezefs_control::{
    AutoController, AutoInputs, BusyDrain, CallTotals, CoresSample, CpuSource, DeviceView, OverheadMeter, ProcStat,
    Reason, Sample, TraceRow, TraceWriter, Tunables, UsableCores, WorkerUse, WriterBlocked,
};
use squeezefs_device::DeviceStats;
use squeezefs_meta::Ino;
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the CPU and overhead meters are sampled (a /proc read each).
pub const METER_PERIOD: Duration = Duration::from_millis(100);
/// Bytes a device must have written before its rate is trusted (block comment): past the
/// burst a throttled device or a write cache lets through at first.
pub const RATE_CONFIRM_BYTES: u64 = 32 << 20;
/// How often the trace file is flushed while rows come in (so a live trace can be plotted).
pub const TRACE_FLUSH: Duration = Duration::from_secs(1);

/// The record a decision is for.
#[derive(Clone, Copy, Debug)]
pub struct RecordInfo<'a> {
    pub ino: Ino,
    pub data: &'a [u8],
    /// skip the heuristic: compress-force, or the file's records kept compressing
    pub trusted: bool,
    /// more records wait for compression behind this one
    pub backlog: bool,
}

/// The codec for one record and why.
#[derive(Clone, Copy, Debug)]
pub struct Choice {
    /// `Codec::NONE`: store the record raw without running a codec
    pub codec: Codec,
    pub reason: Reason,
    /// the expected queue delay the decision saw (auto only)
    pub queue_delay_secs: Option<f64>,
    /// seconds since the engine started, when chosen
    pub at_secs: f64,
    /// the auto controller that chose (index into `Levels::autos`)
    auto: Option<usize>,
    /// the record's QoS tree (NO_TREE: none)
    tree: TreeId,
}

/// What compressing a record with its choice gave.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// bytes stored: the compressed size, or the input size when stored raw
    pub stored_bytes: u64,
    /// thread CPU time inside the codec (0 when none ran)
    pub cpu_ns: u64,
    /// wall time of the same span (the scheduler's share of a core: cpu ÷ wall)
    pub wall_ns: u64,
}

/// One auto range in use and its controller.
struct Auto {
    spec: Spec,
    ctl: Mutex<AutoController>,
}

/// The CPU figures auto needs, refreshed every `METER_PERIOD`.
struct Meters {
    /// nanoseconds since the engine started at which the next sample is due
    next_ns: AtomicU64,
    state: Mutex<MeterState>,
    /// f64 bits; 0 = not measured yet
    cores: AtomicU64,
    /// cores not taken by other processes (/proc/stat, `CpuMeter`): the QoS plan's figure
    idle_cores: AtomicU64,
    /// the idle share of the allowed CPUs, every process counted (`CpuMeter::idle_share`),
    /// f64 bits; NaN = not measured yet
    cpu_idle: AtomicU64,
    overhead: AtomicU64,
    /// the part of `overhead` per byte the devices write (`OverheadMeter::update_store`),
    /// f64 bits; NaN = not measured yet
    store_overhead: AtomicU64,
    /// the device writers' blocked share of their writes (`WriterBlocked`), f64 bits; NaN =
    /// not measured lately
    writers_blocked: AtomicU64,
    /// the compress workers' busy share (`WorkerUse`), f64 bits; NaN = not measured
    workers_busy: AtomicU64,
    /// per device, its sustained rate while its queue never emptied (BusyDrain), f64 bits;
    /// 0 = not measured lately
    busy_bps: Vec<AtomicU64>,
    /// per device, whether its drain rate may be trusted: it has a sustained rate, or its
    /// queue was seen empty after writing (it kept up)
    rate_confirmed: Vec<AtomicBool>,
    /// the CPUs this process may use (the figure while `cores` is unmeasured)
    cpus: f64,
}

struct MeterState {
    src: Option<ProcStat>,
    busy: Vec<BusyDrain>,
    cores: UsableCores,
    overhead: OverheadMeter,
    blocked: WriterBlocked,
    worker_use: WorkerUse,
}

struct Tracer {
    out: TraceWriter<std::fs::File>,
    last_flush: Instant,
}

/// The compress stage's level decisions (see the block comment).
pub struct Levels {
    start: Instant,
    workers: usize,
    devices: Vec<Arc<DeviceStats>>,
    room: Arc<[AtomicU64]>,
    autos: RwLock<Vec<Arc<Auto>>>,
    tunables: Tunables,
    meters: Meters,
    /// input bytes of every record decided, and codec CPU of every call (OverheadMeter)
    input_bytes: AtomicU64,
    codec_ns: AtomicU64,
    /// codec wall time of every call; codec CPU and wall time of the calls made with a
    /// backlog (UsableCores)
    codec_wall_ns: AtomicU64,
    saturated_ns: AtomicU64,
    saturated_wall_ns: AtomicU64,
    /// records finished, and those of them decided with a backlog (UsableCores)
    records: AtomicU64,
    saturated_records: AtomicU64,
    /// stored bytes of every record finished; and, at the last `rebase`, that figure and the
    /// bytes the devices had written (pending bytes, block comment)
    stored_bytes: AtomicU64,
    base_stored: AtomicU64,
    base_written: AtomicU64,
    trace: Option<Mutex<Tracer>>,
    /// a trace write failed: tracing stopped (logged once)
    trace_failed: AtomicBool,
    /// QoS trees: their levels and meters (qos.rs)
    qos: Arc<Qos>,
    /// nanoseconds since start when the next debug line of auto's inputs is due
    next_debug_ns: AtomicU64,
    /// the compress workers' busy time (workers.rs), when the engine gave it
    busy: Option<Arc<WorkerBusy>>,
    /// per auto range, the rung the store holds for it (store/auto_start.rs): a controller
    /// created for the range starts there, and the commit writes a range's point again only
    /// when it differs (`resume_changes`)
    resume: Mutex<Vec<(Spec, Codec)>>,
}

/// Environment variable with auto tunable overrides (`name=value,…`, control tunables.rs
/// `Tunables::set`): for tuning on a real device; a bad value is logged and ignored.
pub const AUTO_TUNE_ENV: &str = "SQUEEZEFS_AUTO_TUNE";

/// The auto tunables of an engine whose txgs gather `batch_bytes` before they sync early:
/// the defaults, the queue target counting that batch (records wait for their txg, and at
/// a drain rate of what arrives that queue alone reads as seconds behind), then the
/// environment's overrides.
fn tunables_from_env(batch_bytes: u64) -> Tunables {
    let mut t = Tunables { batch_bytes, ..Tunables::default() };
    if let Ok(v) = std::env::var(AUTO_TUNE_ENV) {
        match t.set(&v) {
            Ok(()) => log::info!("auto: tunables {v} from {AUTO_TUNE_ENV}"),
            Err(e) => log::warn!("auto: {AUTO_TUNE_ENV} ignored: {e}"),
        }
    }
    t
}

thread_local! {
    /// Device views of the decision being made on this thread (no allocation per record).
    static VIEWS: RefCell<Vec<DeviceView>> = const { RefCell::new(Vec::new()) };
}

impl Levels {
    /// `devices`: each device's write statistics; `room`: each device's room hint (space/placement.rs);
    /// `trace`: the trace writer when the engine traces; `batch_bytes`: the bytes a txg
    /// gathers before it syncs early (the queue the pipeline holds by itself).
    pub fn new(
        workers: usize,
        devices: Vec<Arc<DeviceStats>>,
        room: Arc<[AtomicU64]>,
        trace: Option<TraceWriter<std::fs::File>>,
        batch_bytes: u64,
    ) -> Levels {
        let src = ProcStat::new().map_err(|e| log::warn!("auto: the CPU meter is off ({e})")).ok();
        let cpus = src
            .as_ref()
            .map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |s| s.cpus().len().max(1))
            as f64;
        let n_devices = devices.len();
        Levels {
            start: Instant::now(),
            workers: workers.max(1),
            devices,
            room,
            autos: RwLock::new(Rank::Leaf, Vec::new()),
            tunables: tunables_from_env(batch_bytes),
            meters: Meters {
                next_ns: AtomicU64::new(0),
                state: Mutex::new(
                    Rank::Leaf,
                    MeterState {
                        src,
                        busy: vec![BusyDrain::new(); n_devices],
                        cores: UsableCores::new(workers, cpus),
                        overhead: OverheadMeter::new(),
                        blocked: WriterBlocked::new(),
                        worker_use: WorkerUse::new(),
                    },
                ),
                cores: AtomicU64::new(0),
                idle_cores: AtomicU64::new(0),
                cpu_idle: AtomicU64::new(f64::NAN.to_bits()),
                overhead: AtomicU64::new(0),
                store_overhead: AtomicU64::new(f64::NAN.to_bits()),
                writers_blocked: AtomicU64::new(f64::NAN.to_bits()),
                workers_busy: AtomicU64::new(f64::NAN.to_bits()),
                busy_bps: (0..n_devices).map(|_| AtomicU64::new(0)).collect(),
                rate_confirmed: (0..n_devices).map(|_| AtomicBool::new(false)).collect(),
                cpus,
            },
            input_bytes: AtomicU64::new(0),
            codec_ns: AtomicU64::new(0),
            codec_wall_ns: AtomicU64::new(0),
            saturated_ns: AtomicU64::new(0),
            saturated_wall_ns: AtomicU64::new(0),
            records: AtomicU64::new(0),
            saturated_records: AtomicU64::new(0),
            stored_bytes: AtomicU64::new(0),
            base_stored: AtomicU64::new(0),
            base_written: AtomicU64::new(0),
            trace: trace.map(|out| Mutex::new(Rank::Leaf, Tracer { out, last_flush: Instant::now() })),
            trace_failed: AtomicBool::new(false),
            qos: Arc::new(Qos::default()),
            next_debug_ns: AtomicU64::new(0),
            busy: None,
            resume: Mutex::new(Rank::Leaf, Vec::new()),
        }
    }

    /// The same decisions, with the busy time of the workers that compress (`WorkerUse`).
    pub fn with_busy(mut self, busy: Arc<WorkerBusy>) -> Levels {
        self.busy = Some(busy);
        self
    }

    /// The same decisions, with the engine's QoS trees in `qos`.
    pub fn with_qos(mut self, qos: Arc<Qos>) -> Levels {
        self.qos = qos;
        self
    }

    /// The rungs the store holds per auto range (pool open): controllers created from now
    /// on start there (control `AutoController::resume_at`).
    pub fn set_resume(&self, rows: Vec<(Spec, Codec)>) {
        *self.resume.lock() = rows;
    }

    /// The auto ranges whose controller sits at another rung than the store holds for it
    /// (block comment of docs/design.md §9, "Resume"), with that rung: what the next commit
    /// writes.
    pub fn resume_changes(&self) -> Vec<(Spec, Codec)> {
        let autos: Vec<Arc<Auto>> = self.autos.read().clone();
        let points: Vec<(Spec, Codec)> = autos.iter().map(|a| (a.spec, a.ctl.lock().resume_point())).collect();
        let held = self.resume.lock();
        points.into_iter().filter(|p| !held.contains(p)).collect()
    }

    /// The commit made `rows` durable: the store holds them now.
    pub fn resume_written(&self, rows: &[(Spec, Codec)]) {
        let mut held = self.resume.lock();
        for (spec, c) in rows {
            match held.iter_mut().find(|(s, _)| s == spec) {
                Some(r) => r.1 = *c,
                None => held.push((*spec, *c)),
            }
        }
    }

    /// (cores not taken by other processes, pipeline overhead ns per input byte) now,
    /// sampling the meters when due: what the QoS plan is made on (qos.rs REPLAN). The
    /// plan keeps /proc/stat's figure (`CpuMeter`), which its pacing was tuned and measured
    /// with; auto takes the cores our threads obtain (`UsableCores`).
    pub fn cpu_figures(&self) -> (f64, f64) {
        self.meters(self.now_secs());
        let m = &self.meters;
        let idle = f64::from_bits(m.idle_cores.load(Ordering::Relaxed));
        (if idle > 0.0 { idle } else { m.cpus }, f64::from_bits(m.overhead.load(Ordering::Relaxed)))
    }

    /// Seconds since the engine started.
    fn now_secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn tracing(&self) -> bool {
        self.trace.is_some() && !self.trace_failed.load(Ordering::Relaxed)
    }

    /// The codec for `rec` under `policy` (see the block comment).
    pub fn choose(&self, policy: Policy, rec: &RecordInfo) -> Choice {
        let at_secs = self.now_secs();
        let tree = policy.tree;
        let plain =
            |codec: Codec, reason: Reason| Choice { codec, reason, queue_delay_secs: None, at_secs, auto: None, tree };
        let fixed = match policy.spec {
            Spec::Off => return plain(Codec::NONE, Reason::Fixed),
            Spec::Fixed(c) if c.alg == Algorithm::None => return plain(Codec::NONE, Reason::Fixed),
            Spec::Fixed(c) => Some(c),
            Spec::Auto { .. } => None,
            // `qos:N` as a spec paces nothing (the property and mount option make trees)
            _ if tree == NO_TREE => Some(ADAPTIVE_PLACEHOLDER),
            _ => None,
        };
        if !rec.trusted && heuristic::assess(rec.data) != Verdict::Compressible {
            return plain(Codec::NONE, Reason::Incompressible);
        }
        // an adaptive spec inside a QoS tree: the tree's plan chooses
        if tree != NO_TREE && fixed.is_none() {
            return plain(self.qos.pick(tree), Reason::Qos);
        }
        if let Some(c) = fixed {
            return plain(c, Reason::Fixed);
        }
        let (i, auto) = self.auto_for(policy.spec);
        let (cores, overhead) = self.meters(at_secs);
        let d = VIEWS.with(|v| {
            let mut v = v.borrow_mut();
            let range_bps = self.views_into(&mut v, rec.data.len() as u64);
            let inputs = AutoInputs {
                now_secs: at_secs,
                record_bytes: rec.data.len() as u64,
                devices: &v,
                range_bps,
                cores,
                workers: self.workers,
                overhead_ns_per_byte: overhead,
                store_ns_per_byte: Some(f64::from_bits(self.meters.store_overhead.load(Ordering::Relaxed)))
                    .filter(|o| o.is_finite()),
                backlog: rec.backlog,
                workers_busy: Some(f64::from_bits(self.meters.workers_busy.load(Ordering::Relaxed)))
                    .filter(|b| b.is_finite()),
                cpu_idle: Some(f64::from_bits(self.meters.cpu_idle.load(Ordering::Relaxed))).filter(|i| i.is_finite()),
            };
            let mut ctl = auto.ctl.lock();
            let d = ctl.decide(&inputs);
            if log::log_enabled!(log::Level::Debug) && self.debug_due(at_secs) {
                let ladder: Vec<String> = ctl
                    .ladder()
                    .iter()
                    .map(|(c, p, m)| format!("{c}{}({:.2}ns,{:.3})", if *m { "" } else { "?" }, p.cost, p.stored))
                    .collect();
                let at = ctl.position().map_or(String::new(), |(x, f, d)| {
                    let d = d.map_or("unknown".into(), |d| format!("{:.0} MB/s", d / 1e6));
                    format!(", position {x:.2} floor {f:.2} capacity {d}")
                });
                // each device's drain figures, MB/s: per range from its kick, sustained while
                // its queue never emptied (the view takes the lower of the two), and in
                // large writes (the floor's rate per range)
                let mbs = |bps: f64| (bps / 1e6).round();
                let drain: Vec<(f64, f64, f64)> = (self.devices.iter().zip(self.meters.busy_bps.iter()))
                    .map(|(s, b)| {
                        let st = s.snapshot();
                        (mbs(st.throughput_bps), mbs(f64::from_bits(b.load(Ordering::Relaxed))), mbs(st.bulk_bps))
                    })
                    .collect();
                log::debug!(
                    "auto {}: cores {cores:.2}, overhead {overhead:.2} ns/B ({:.2} per stored B), devices {:?} drain {drain:?}, writers blocked {:.2}, workers busy {:.2}, backlog {}, gain {:.2}{at} → {} ({}); ladder {}",
                    policy.spec,
                    inputs.store_ns_per_byte.unwrap_or(f64::NAN),
                    v.iter().map(|d| (d.queued_bytes, (d.throughput_bps / 1e6).round())).collect::<Vec<_>>(),
                    f64::from_bits(self.meters.writers_blocked.load(Ordering::Relaxed)),
                    inputs.workers_busy.unwrap_or(f64::NAN),
                    rec.backlog,
                    ctl.gain(),
                    d.codec,
                    d.reason.name(),
                    ladder.join(" ")
                );
            }
            d
        });
        Choice { codec: d.codec, reason: d.reason, queue_delay_secs: d.queue_delay_secs, at_secs, auto: Some(i), tree }
    }

    /// `rec` was compressed (or stored raw) as `choice` said, with `outcome`.
    pub fn finish(&self, rec: &RecordInfo, choice: &Choice, outcome: Outcome) {
        let input = rec.data.len() as u64;
        self.input_bytes.fetch_add(input, Ordering::Relaxed);
        self.stored_bytes.fetch_add(outcome.stored_bytes, Ordering::Relaxed);
        self.records.fetch_add(1, Ordering::Relaxed);
        if rec.backlog {
            self.saturated_records.fetch_add(1, Ordering::Relaxed);
        }
        if outcome.cpu_ns > 0 {
            self.codec_ns.fetch_add(outcome.cpu_ns, Ordering::Relaxed);
            self.codec_wall_ns.fetch_add(outcome.wall_ns, Ordering::Relaxed);
            if rec.backlog {
                self.saturated_ns.fetch_add(outcome.cpu_ns, Ordering::Relaxed);
                self.saturated_wall_ns.fetch_add(outcome.wall_ns, Ordering::Relaxed);
            }
        }
        if let (Some(i), false) = (choice.auto, choice.codec == Codec::NONE) {
            let auto = self.autos.read().get(i).cloned();
            if let Some(a) = auto {
                a.ctl.lock().observe(&Sample {
                    codec: choice.codec,
                    input_bytes: input,
                    stored_bytes: outcome.stored_bytes.min(input),
                    cpu_ns: outcome.cpu_ns,
                });
            }
        }
        // a tree's record feeds its meters and stats; any other counts as CPU the QoS
        // plan cannot use (qos.rs)
        let ran = (choice.codec != Codec::NONE && outcome.cpu_ns > 0).then_some(choice.codec);
        self.qos.observe(choice.tree, ran, input, outcome.stored_bytes.min(input), outcome.cpu_ns);
        if self.tracing() {
            self.trace_row(rec, choice, outcome);
        }
    }

    /// The controller of `spec`'s auto range, created on first use.
    fn auto_for(&self, spec: Spec) -> (usize, Arc<Auto>) {
        if let Some(found) = self.autos.read().iter().enumerate().find(|(_, a)| a.spec == spec) {
            return (found.0, found.1.clone());
        }
        // looked up before the write lock: both are leaf locks, never held together
        let start = self.resume.lock().iter().find(|(s, _)| *s == spec).map(|r| r.1);
        let mut autos = self.autos.write();
        if let Some(found) = autos.iter().enumerate().find(|(_, a)| a.spec == spec) {
            return (found.0, found.1.clone());
        }
        let mut ctl = AutoController::for_spec(spec, self.tunables.clone()).expect("an auto spec");
        if let Some(c) = start {
            ctl.resume_at(c);
        }
        let a = Arc::new(Auto { spec, ctl: Mutex::new(Rank::Leaf, ctl) });
        autos.push(a.clone());
        (autos.len() - 1, a)
    }

    /// Whether a debug line of auto's inputs is due (one every 0.2 s: a fast cell writes for
    /// two seconds).
    fn debug_due(&self, now_secs: f64) -> bool {
        let now = (now_secs * 1e9) as u64;
        let due = self.next_debug_ns.load(Ordering::Relaxed);
        now >= due
            && self.next_debug_ns.compare_exchange(due, now + 200_000_000, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// Every device's view now: throughput from its statistics, room from the hint, queue
    /// from both and the pending bytes (block comment). Returns the devices' summed drain
    /// rate per range in large writes (`DeviceStatsSnapshot::bulk_bps`), bytes/s, 0 while a
    /// device with room for `record_bytes` has drained less than RATE_CONFIRM_BYTES
    /// (`AutoInputs::range_bps`).
    fn views_into(&self, v: &mut Vec<DeviceView>, record_bytes: u64) -> f64 {
        v.clear();
        let mut written = 0u64;
        let mut range = Some(0.0);
        let confirmed = self.meters.rate_confirmed.iter();
        v.extend(self.devices.iter().zip(self.room.iter()).zip(confirmed).map(|((s, r), ok)| {
            let st = s.snapshot();
            written = written.saturating_add(st.written_bytes);
            if st.queued_bytes == 0 && st.drained_bytes >= RATE_CONFIRM_BYTES {
                ok.store(true, Ordering::Relaxed);
            }
            let free_bytes = r.load(Ordering::Relaxed);
            if free_bytes >= record_bytes {
                let measured = st.drained_bytes >= RATE_CONFIRM_BYTES && st.bulk_bps > 0.0;
                range = range.filter(|_| measured).map(|sum| sum + st.bulk_bps);
            }
            DeviceView { queued_bytes: st.queued_bytes, throughput_bps: st.throughput_bps, free_bytes }
        }));
        // a sustained rate measured with the queue full bounds the drain average, and a
        // rate not confirmed yet counts as unmeasured (block comment)
        for ((d, b), ok) in v.iter_mut().zip(self.meters.busy_bps.iter()).zip(self.meters.rate_confirmed.iter()) {
            let busy = f64::from_bits(b.load(Ordering::Relaxed));
            if busy > 0.0 && d.throughput_bps > 0.0 {
                d.throughput_bps = d.throughput_bps.min(busy);
            }
            if !ok.load(Ordering::Relaxed) {
                d.throughput_bps = 0.0;
            }
        }
        let queued: u64 = v.iter().map(|d| d.queued_bytes).sum();
        let share = self.pending_bytes(written).saturating_sub(queued) / v.len().max(1) as u64;
        for d in v.iter_mut() {
            d.queued_bytes = d.queued_bytes.saturating_add(share);
        }
        range.unwrap_or(0.0)
    }

    /// Stored bytes finished and not yet written by a device, given the bytes written now.
    fn pending_bytes(&self, written: u64) -> u64 {
        let stored = self.stored_bytes.load(Ordering::Relaxed).saturating_sub(self.base_stored.load(Ordering::Relaxed));
        stored.saturating_sub(written.saturating_sub(self.base_written.load(Ordering::Relaxed)))
    }

    /// The engine holds no dirty data: count pending bytes from here (block comment).
    pub fn rebase(&self) {
        let written = self.devices.iter().map(|s| s.snapshot().written_bytes).fold(0u64, u64::saturating_add);
        self.base_written.store(written, Ordering::Relaxed);
        self.base_stored.store(self.stored_bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// (available cores, pipeline overhead ns per byte), sampling the meters when due.
    fn meters(&self, now_secs: f64) -> (f64, f64) {
        let m = &self.meters;
        let now_ns = (now_secs * 1e9) as u64;
        let due = m.next_ns.load(Ordering::Relaxed);
        if now_ns >= due
            && m.next_ns
                .compare_exchange(due, now_ns + METER_PERIOD.as_nanos() as u64, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            if let Some(mut st) = m.state.try_lock() {
                let st = &mut *st;
                let process = process_cpu_ns();
                let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
                let sample = CoresSample {
                    proc: st.src.as_mut().and_then(|s| s.sample().ok()),
                    process_cpu_ns: process,
                    saturated: CallTotals { cpu_ns: load(&self.saturated_ns), wall_ns: load(&self.saturated_wall_ns) },
                    all: CallTotals { cpu_ns: load(&self.codec_ns), wall_ns: load(&self.codec_wall_ns) },
                    saturated_records: load(&self.saturated_records),
                    records: load(&self.records),
                };
                if let Some(c) = st.cores.update(now_secs, sample) {
                    m.cores.store(c.to_bits(), Ordering::Relaxed);
                }
                if let Some(c) = st.cores.idle_cores() {
                    m.idle_cores.store(c.to_bits(), Ordering::Relaxed);
                }
                if let Some(i) = st.cores.idle_share() {
                    m.cpu_idle.store(i.to_bits(), Ordering::Relaxed);
                }
                let devices = self.devices.iter().zip(st.busy.iter_mut()).zip(m.busy_bps.iter());
                for (((dev, meter), out), ok) in devices.zip(m.rate_confirmed.iter()) {
                    let d = dev.snapshot();
                    let bps = meter.update(now_secs, d.drained_bytes, d.queued_bytes > 0);
                    out.store(bps.unwrap_or(0.0).to_bits(), Ordering::Relaxed);
                    if d.drained_bytes >= RATE_CONFIRM_BYTES && (bps.is_some() || d.queued_bytes == 0) {
                        ok.store(true, Ordering::Relaxed);
                    }
                }
                let o = st.overhead.update(
                    process,
                    self.codec_ns.load(Ordering::Relaxed),
                    self.input_bytes.load(Ordering::Relaxed),
                );
                if let Some(o) = o {
                    m.overhead.store(o.to_bits(), Ordering::Relaxed);
                }
                let (mut cpu, mut written, mut wall, mut delay) = (0u64, 0u64, 0u64, 0u64);
                for d in self.devices.iter().map(|s| s.snapshot()) {
                    cpu = cpu.saturating_add(d.write_cpu_ns);
                    written = written.saturating_add(d.written_bytes);
                    wall = wall.saturating_add(d.write_wall_ns);
                    delay = delay.saturating_add(d.write_run_delay_ns);
                }
                if let Some(o) = st.overhead.update_store(cpu, written) {
                    m.store_overhead.store(o.to_bits(), Ordering::Relaxed);
                }
                let blocked = st.blocked.update(now_secs, wall, cpu, delay).unwrap_or(f64::NAN);
                m.writers_blocked.store(blocked.to_bits(), Ordering::Relaxed);
                if let Some(b) = &self.busy {
                    let used = st.worker_use.update(now_secs, b.busy_ns(), self.workers).unwrap_or(f64::NAN);
                    m.workers_busy.store(used.to_bits(), Ordering::Relaxed);
                }
            }
        }
        let cores = f64::from_bits(m.cores.load(Ordering::Relaxed));
        let cores = if cores > 0.0 { cores } else { m.cpus };
        (cores, f64::from_bits(m.overhead.load(Ordering::Relaxed)))
    }

    fn trace_row(&self, rec: &RecordInfo, choice: &Choice, outcome: Outcome) {
        let Some(t) = &self.trace else { return };
        // the queues as the controller sees them (with the pending bytes)
        let queued: Vec<u64> = VIEWS.with(|v| {
            let mut v = v.borrow_mut();
            self.views_into(&mut v, rec.data.len() as u64);
            v.iter().map(|d| d.queued_bytes).collect()
        });
        let row = TraceRow {
            time_s: choice.at_secs,
            inode: rec.ino,
            tree: choice.tree,
            codec: choice.codec,
            reason: choice.reason,
            input_bytes: rec.data.len() as u64,
            stored_bytes: outcome.stored_bytes,
            cpu_ns: outcome.cpu_ns,
            queue_delay_secs: choice.queue_delay_secs,
            queued: Cow::Owned(queued),
        };
        let mut t = t.lock();
        let mut r = t.out.write(&row);
        if r.is_ok() && t.last_flush.elapsed() >= TRACE_FLUSH {
            t.last_flush = Instant::now();
            r = t.out.flush();
        }
        if let Err(e) = r {
            if !self.trace_failed.swap(true, Ordering::Relaxed) {
                log::error!("writing the trace failed ({e}); tracing stopped, the data path goes on");
            }
        }
    }

    /// Write out the rows buffered so far (engine close, sync).
    pub fn flush_trace(&self) {
        if let (Some(t), true) = (&self.trace, self.tracing()) {
            if let Err(e) = t.lock().out.flush() {
                if !self.trace_failed.swap(true, Ordering::Relaxed) {
                    log::error!("writing the trace failed ({e}); tracing stopped, the data path goes on");
                }
            }
        }
    }
}
