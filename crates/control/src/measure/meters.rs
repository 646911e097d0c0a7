//! Measured inputs of the auto controller, as pure accumulators the pipeline feeds.
//!
//! ```text
//! Per device (`DeviceMeter`, or the engine's `DeviceStats` snapshot as a `DeviceView`):
//!   queued bytes (instant, and averaged over QUEUE_TAU_SECS for display), write throughput
//!   (bytes per second of each write, averaged over the last THROUGHPUT_WINDOW_BYTES).
//! Over devices (`queue_estimate`, thesis eq. 3.8–3.10):
//!   expected queue delay of a new record = min over devices with room for it of
//!     (queued − safety margin) / throughput, floored at 0 (the safety margin makes the
//!     controller pick a faster level before the queue runs dry);
//!   the same without the margin (what the queue holds, for the controller's queue target);
//!   the summed throughput of those devices (the device side of the pipeline model).
//!   Unmeasured devices count with the mean of the measured ones; with none measured every
//!   figure is `None` (no evidence either way).
//! Per ladder level (`LevelMeter`): CPU nanoseconds per input byte and stored bytes per input
//! byte (1/ratio) of the records compressed at that level, each averaged over a long window
//! (LEVEL_WINDOW_BYTES, the figure the controller uses) and a short one (DRIFT_WINDOW_BYTES).
//! When the short average leaves the long one by more than DRIFT_STORED / DRIFT_COST (in log
//! terms), the data being written has changed: `observe` reports `Drift`, the averages start
//! over from the record that showed it, and the controller marks every other level stale
//! (re-measure).
//! Averaging stored/input by input bytes is the ratio of the sums (the thesis averaged ratios
//! arithmetically, eq. 3.16, which overstates a mix).
//! Per device, sustained (`BusyDrain`): the bytes the device finished over spans of sampling
//! intervals in which its queue never emptied, per second, averaged by bytes over
//! BUSY_WINDOW_BYTES (time per byte, so slow spans weigh by their time). Spans that drained
//! less than BUSY_MIN_BYTES carry over into the next interval (a 4 MiB range at 25 MB/s
//! completes every other 100 ms interval). Valid for BUSY_FRESH_SECS after its last span.
//! The drain average above times each range from its kick: a throttled device (cgroup
//! blkio) lets a slice's worth through at once after an idle gap, and a pipeline that writes
//! in txg bursts read 2–4.7× a 100 MB/s limit. A device busy throughout has no such gaps.
//! Over the device writers (`WriterBlocked`): the share of the wall time of their writes in
//! which they were blocked by the devices, neither running nor waiting for a CPU (thread
//! clock and schedstat run delay around each write), per sampling interval with at least
//! BLOCKED_MIN_WALL_NS of writes, averaged over BLOCKED_TAU_SECS; valid for
//! BLOCKED_FRESH_SECS after its last interval. Near 1 the devices hold the writers up;
//! lower, storing itself takes CPU the writers must get (a diagnostic in the pipeline's
//! debug log: it does not separate a starved drain from a slow device well enough to steer
//! by, since storing costs the writers CPU at any pace).
//! Over the compress workers (`WorkerUse`): the share of the interval the workers were
//! running jobs, busy time ÷ (workers × wall), averaged over USE_TAU_SECS. A record decided
//! with others queued behind it says the workers are behind for a moment: a writer's 1 MiB
//! write queues 8 records at once whether or not the workers idle between writes. Their
//! busy share says whether they are behind over time.
//! ```

use crate::device_choice::DeviceView;
use crate::measure::ewma::{ByteEwma, TimeEwma};

/// Time constant of the averaged queue length, seconds.
pub const QUEUE_TAU_SECS: f64 = 0.2;
/// Bytes over which a device's write throughput is averaged.
pub const THROUGHPUT_WINDOW_BYTES: u64 = 16 << 20;
/// Bytes over which a level's cost and ratio are averaged.
pub const LEVEL_WINDOW_BYTES: u64 = 8 << 20;
/// Bytes of the short average that detects changed data (about 8 records of 128 KiB: one odd
/// record moves it by a ninth, a run of changed records moves it all the way).
pub const DRIFT_WINDOW_BYTES: u64 = 1 << 20;
/// |ln(short / long)| of stored bytes per input byte that means the data changed (±25%).
pub const DRIFT_STORED: f64 = 0.22;
/// The same for CPU per byte (noisier: other work on the core, caches; ±65%).
pub const DRIFT_COST: f64 = 0.5;
/// Bytes over which a device's sustained rate is averaged.
pub const BUSY_WINDOW_BYTES: u64 = 64 << 20;
/// Fewest drained bytes in a span for it to count (shorter spans carry over).
pub const BUSY_MIN_BYTES: u64 = 4 << 20;
/// A sustained rate measured longer ago than this is no longer used.
pub const BUSY_FRESH_SECS: f64 = 5.0;

/// One device, measured by the code that writes to it (single-threaded; the engine's
/// lock-free `DeviceStats` is the concurrent equivalent and yields the same `DeviceView`).
#[derive(Clone, Debug)]
pub struct DeviceMeter {
    queued_bytes: u64,
    queued_avg: TimeEwma,
    throughput: ByteEwma,
}

impl Default for DeviceMeter {
    fn default() -> Self {
        DeviceMeter {
            queued_bytes: 0,
            queued_avg: TimeEwma::new(QUEUE_TAU_SECS),
            throughput: ByteEwma::new(THROUGHPUT_WINDOW_BYTES),
        }
    }
}

impl DeviceMeter {
    pub fn new() -> DeviceMeter {
        DeviceMeter::default()
    }

    /// The queue holds `bytes` at `now_secs`.
    pub fn set_queued(&mut self, now_secs: f64, bytes: u64) {
        self.queued_bytes = bytes;
        self.queued_avg.update(now_secs, bytes as f64);
    }

    /// A write of `bytes` took `secs` (zero bytes or zero time: no sample).
    pub fn record_write(&mut self, bytes: u64, secs: f64) {
        if bytes > 0 && secs > 0.0 && secs.is_finite() {
            self.throughput.update(bytes as f64 / secs, bytes);
        }
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Queue length averaged over `QUEUE_TAU_SECS`.
    pub fn queued_avg_bytes(&self) -> f64 {
        self.queued_avg.value().unwrap_or(0.0)
    }

    /// Averaged throughput in bytes/s, 0 until the first write.
    pub fn throughput_bps(&self) -> f64 {
        self.throughput.value().unwrap_or(0.0)
    }

    /// The view the controllers take (instant queue length).
    pub fn view(&self, free_bytes: u64) -> DeviceView {
        DeviceView { queued_bytes: self.queued_bytes, throughput_bps: self.throughput_bps(), free_bytes }
    }
}

/// A device's sustained drain rate while its queue never emptied (see the module comment).
#[derive(Clone, Debug)]
pub struct BusyDrain {
    /// the previous sample: time, drained bytes, queue non-empty
    prev: Option<(f64, u64, bool)>,
    /// the busy span so far: seconds and bytes not yet averaged
    span: (f64, u64),
    secs_per_byte: ByteEwma,
    last_secs: f64,
}

impl Default for BusyDrain {
    fn default() -> Self {
        BusyDrain { prev: None, span: (0.0, 0), secs_per_byte: ByteEwma::new(BUSY_WINDOW_BYTES), last_secs: 0.0 }
    }
}

impl BusyDrain {
    pub fn new() -> BusyDrain {
        BusyDrain::default()
    }

    /// At `now_secs` the device had finished `drained_bytes` in all and its queue held
    /// something (`busy`). Returns the sustained rate in bytes/s, if measured within
    /// BUSY_FRESH_SECS.
    pub fn update(&mut self, now_secs: f64, drained_bytes: u64, busy: bool) -> Option<f64> {
        if let Some((t, d, was_busy)) = self.prev.replace((now_secs, drained_bytes, busy)) {
            let dt = now_secs - t;
            if was_busy && busy && dt > 0.0 {
                self.span.0 += dt;
                self.span.1 += drained_bytes.saturating_sub(d);
                if self.span.1 >= BUSY_MIN_BYTES {
                    self.secs_per_byte.update(self.span.0 / self.span.1 as f64, self.span.1);
                    self.last_secs = now_secs;
                    self.span = (0.0, 0);
                }
            } else {
                self.span = (0.0, 0);
            }
        }
        self.bps(now_secs)
    }

    /// The sustained rate in bytes/s, if measured within BUSY_FRESH_SECS of `now_secs`.
    pub fn bps(&self, now_secs: f64) -> Option<f64> {
        let spb = self.secs_per_byte.value().filter(|s| *s > 0.0)?;
        (now_secs - self.last_secs <= BUSY_FRESH_SECS).then(|| 1.0 / spb)
    }
}

/// Fewest nanoseconds of writes in a sampling interval for its blocked share to count.
pub const BLOCKED_MIN_WALL_NS: u64 = 2_000_000;
/// Time constant of the averaged blocked share of the writers, seconds.
pub const BLOCKED_TAU_SECS: f64 = 0.3;
/// A blocked share measured longer ago than this no longer says how the devices drain.
pub const BLOCKED_FRESH_SECS: f64 = 1.0;

/// The device writers' share of their writes' wall time spent blocked by the devices (see
/// the module comment).
#[derive(Clone, Debug)]
pub struct WriterBlocked {
    /// the previous sample's totals: wall, CPU and run delay of the writes, nanoseconds
    prev: Option<(u64, u64, u64)>,
    avg: TimeEwma,
    last_secs: f64,
}

impl Default for WriterBlocked {
    fn default() -> Self {
        WriterBlocked { prev: None, avg: TimeEwma::new(BLOCKED_TAU_SECS), last_secs: 0.0 }
    }
}

impl WriterBlocked {
    pub fn new() -> WriterBlocked {
        WriterBlocked::default()
    }

    /// At `now_secs` the writers' writes had taken `wall_ns` in all, of which they ran
    /// `cpu_ns` and waited for a CPU `run_delay_ns`. Returns the averaged blocked share in
    /// [0, 1], if measured within BLOCKED_FRESH_SECS.
    pub fn update(&mut self, now_secs: f64, wall_ns: u64, cpu_ns: u64, run_delay_ns: u64) -> Option<f64> {
        let Some((w, c, d)) = self.prev else {
            self.prev = Some((wall_ns, cpu_ns, run_delay_ns));
            return None;
        };
        // an interval with too few writes to say carries over into the next
        let wall = wall_ns.saturating_sub(w);
        if wall >= BLOCKED_MIN_WALL_NS {
            let on_cpu = cpu_ns.saturating_sub(c).saturating_add(run_delay_ns.saturating_sub(d));
            let blocked = (wall as f64 - on_cpu as f64) / wall as f64;
            self.avg.update(now_secs, blocked.clamp(0.0, 1.0));
            self.last_secs = now_secs;
            self.prev = Some((wall_ns, cpu_ns, run_delay_ns));
        }
        self.share(now_secs)
    }

    /// The averaged blocked share, if measured within BLOCKED_FRESH_SECS of `now_secs`.
    pub fn share(&self, now_secs: f64) -> Option<f64> {
        self.avg.value().filter(|_| now_secs - self.last_secs <= BLOCKED_FRESH_SECS)
    }
}

/// Time constant of the averaged busy share of the compress workers, seconds.
pub const USE_TAU_SECS: f64 = 0.2;

/// The compress workers' busy share (see the module comment).
#[derive(Clone, Debug)]
pub struct WorkerUse {
    /// the previous sample: time, busy nanoseconds in all
    prev: Option<(f64, u64)>,
    avg: TimeEwma,
}

impl Default for WorkerUse {
    fn default() -> Self {
        WorkerUse { prev: None, avg: TimeEwma::new(USE_TAU_SECS) }
    }
}

impl WorkerUse {
    pub fn new() -> WorkerUse {
        WorkerUse::default()
    }

    /// At `now_secs` the `workers` had been busy `busy_ns` in all. Returns the averaged
    /// busy share in [0, 1] (None before the second sample).
    pub fn update(&mut self, now_secs: f64, busy_ns: u64, workers: usize) -> Option<f64> {
        let (t, b) = self.prev.replace((now_secs, busy_ns))?;
        let wall = (now_secs - t) * 1e9 * workers.max(1) as f64;
        if wall > 0.0 {
            let share = busy_ns.saturating_sub(b) as f64 / wall;
            self.avg.update(now_secs, share.clamp(0.0, 1.0));
        }
        self.avg.value()
    }
}

/// What the device queues tell the auto controller about a new record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueEstimate {
    /// Expected queue delay less the safety margin, seconds (the compression-time budget).
    pub delay_secs: Option<f64>,
    /// Expected queue delay without the margin, seconds.
    pub queued_secs: Option<f64>,
    /// Summed write throughput of the devices with room, bytes/s of stored data.
    pub device_bps: Option<f64>,
}

impl QueueEstimate {
    /// Nothing measured yet.
    pub const UNKNOWN: QueueEstimate = QueueEstimate { delay_secs: None, queued_secs: None, device_bps: None };
}

fn measured(d: &DeviceView) -> Option<f64> {
    (d.throughput_bps.is_finite() && d.throughput_bps > 0.0).then_some(d.throughput_bps)
}

/// Expected queue delay of a record of `record_bytes` over the devices that have room for it
/// (thesis eq. 3.8–3.10), with `safety_bytes` subtracted from each queue (eq. 3.9).
pub fn queue_estimate(devices: &[DeviceView], record_bytes: u64, safety_bytes: u64) -> QueueEstimate {
    let usable: Vec<&DeviceView> = devices.iter().filter(|d| d.free_bytes >= record_bytes).collect();
    let speeds: Vec<f64> = usable.iter().filter_map(|d| measured(d)).collect();
    if speeds.is_empty() {
        return QueueEstimate::UNKNOWN;
    }
    let mean = speeds.iter().sum::<f64>() / speeds.len() as f64;
    let (mut delay, mut queued, mut total) = (f64::INFINITY, f64::INFINITY, 0.0);
    for d in usable {
        let tp = measured(d).unwrap_or(mean);
        total += tp;
        queued = queued.min(d.queued_bytes as f64 / tp);
        delay = delay.min(d.queued_bytes.saturating_sub(safety_bytes) as f64 / tp);
    }
    QueueEstimate { delay_secs: Some(delay), queued_secs: Some(queued), device_bps: Some(total) }
}

/// Whether a level's data changed (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drift {
    Steady,
    Changed,
}

/// Cost and ratio of one ladder level on the data written with it.
#[derive(Clone, Debug)]
pub struct LevelMeter {
    cost: ByteEwma,
    stored: ByteEwma,
    cost_short: ByteEwma,
    stored_short: ByteEwma,
    /// input bytes measured since the long averages last restarted
    bytes: u64,
}

impl Default for LevelMeter {
    fn default() -> Self {
        LevelMeter {
            cost: ByteEwma::new(LEVEL_WINDOW_BYTES),
            stored: ByteEwma::new(LEVEL_WINDOW_BYTES),
            cost_short: ByteEwma::new(DRIFT_WINDOW_BYTES),
            stored_short: ByteEwma::new(DRIFT_WINDOW_BYTES),
            bytes: 0,
        }
    }
}

impl LevelMeter {
    pub fn new() -> LevelMeter {
        LevelMeter::default()
    }

    /// A record of `input_bytes` was compressed at this level into `stored_bytes` (what is
    /// stored: the input size when the output did not save space), using `cpu_ns` of thread
    /// CPU time inside the codec.
    pub fn observe(&mut self, input_bytes: u64, stored_bytes: u64, cpu_ns: u64) -> Drift {
        if input_bytes == 0 {
            return Drift::Steady;
        }
        let b = input_bytes as f64;
        let (c, s) = (cpu_ns as f64 / b, (stored_bytes.min(input_bytes).max(1)) as f64 / b);
        let cs = self.cost_short.update(c, input_bytes).unwrap_or(c);
        let ss = self.stored_short.update(s, input_bytes).unwrap_or(s);
        self.cost.update(c, input_bytes);
        self.stored.update(s, input_bytes);
        self.bytes = self.bytes.saturating_add(input_bytes);
        // a change shows only once the short window holds mostly new data
        if self.bytes < 2 * DRIFT_WINDOW_BYTES {
            return Drift::Steady;
        }
        let (cl, sl) = (self.cost.value().unwrap_or(c), self.stored.value().unwrap_or(s));
        let off = |a: f64, b: f64, limit: f64| a > 0.0 && b > 0.0 && (a / b).ln().abs() > limit;
        if off(ss, sl, DRIFT_STORED) || off(cs.max(0.01), cl.max(0.01), DRIFT_COST) {
            // start over from this record: the short average still holds old data
            *self = LevelMeter::new();
            self.observe(input_bytes, stored_bytes, cpu_ns);
            return Drift::Changed;
        }
        Drift::Steady
    }

    /// CPU nanoseconds per input byte, once measured.
    pub fn cost_ns_per_byte(&self) -> Option<f64> {
        self.cost.value()
    }

    /// Stored bytes per input byte (1/ratio), once measured.
    pub fn stored_per_byte(&self) -> Option<f64> {
        self.stored.value()
    }

    /// Input bytes behind the current averages (since the meter started or the data changed).
    pub fn measured_bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::{WorkerUse, WriterBlocked};

    #[test]
    fn workers_busy_half_the_time_read_one_half() {
        let mut m = WorkerUse::new();
        assert_eq!(m.update(1.0, 0, 2), None);
        // two workers, 0.1 s: 0.1 s of busy time between them is half
        let u = m.update(1.1, 100_000_000, 2).expect("measured");
        assert!((u - 0.5).abs() < 1e-9, "{u}");
        // then always busy: the average moves towards 1 by the weight of 0.1 s
        let w = 1.0 - (-0.1f64 / super::USE_TAU_SECS).exp();
        let u = m.update(1.2, 300_000_000, 2).expect("measured");
        assert!((u - (0.5 + w * 0.5)).abs() < 1e-9, "{u}");
        // clocks out of step never read above 1
        let u2 = m.update(1.3, 600_000_000, 2).expect("measured");
        assert!(u2 <= 1.0 && u2 > u, "{u} → {u2}");
    }

    #[test]
    fn a_writer_blocked_by_its_device_reads_near_one_and_a_starved_one_near_zero() {
        let mut m = WriterBlocked::new();
        assert_eq!(m.update(0.0, 0, 0, 0), None, "one sample is no interval");
        // 100 ms of writes: 5 ms running, 5 ms waiting for a CPU, 90 ms blocked
        let b = m.update(0.1, 100_000_000, 5_000_000, 5_000_000).expect("measured");
        assert!((b - 0.9).abs() < 1e-9, "{b}");
        // a second interval of writes that ran 30 ms and waited 70 ms for a CPU moves the
        // average towards 0 by the weight of 0.1 s at BLOCKED_TAU_SECS
        let w = 1.0 - (-0.1f64 / super::BLOCKED_TAU_SECS).exp();
        let b = m.update(0.2, 200_000_000, 35_000_000, 75_000_000).expect("measured");
        assert!((b - 0.9 * (1.0 - w)).abs() < 1e-9, "{b}");
        // an interval of 1 ms of writes says nothing yet; with the next it counts
        let same = m.update(0.3, 201_000_000, 35_500_000, 75_500_000).expect("still fresh");
        assert_eq!(same, b);
        let b2 = m.update(0.4, 203_000_000, 36_000_000, 77_000_000).expect("measured");
        assert!(b2 < b, "3 ms of writes, all on a CPU, lower the share: {b} → {b2}");
        // clocks read out of step (CPU beyond the wall time) give 0, not a negative share
        let mut m = WriterBlocked::new();
        m.update(0.0, 0, 0, 0);
        assert_eq!(m.update(0.1, 10_000_000, 8_000_000, 4_000_000), Some(0.0));
        // stale after BLOCKED_FRESH_SECS without writes
        assert_eq!(m.update(0.1 + super::BLOCKED_FRESH_SECS + 0.01, 10_000_000, 8_000_000, 4_000_000), None);
    }

    use super::*;

    const MB: f64 = 1e6;

    fn dev(queued: u64, tp: f64, free: u64) -> DeviceView {
        DeviceView { queued_bytes: queued, throughput_bps: tp, free_bytes: free }
    }

    #[test]
    fn queue_estimate_is_the_shortest_usable_queue_less_the_margin() {
        let rec = 128 << 10;
        // 10 MB at 100 MB/s = 100 ms; 4 MB at 20 MB/s = 200 ms; a full device is left out
        let d = [dev(10_000_000, 100.0 * MB, u64::MAX), dev(4_000_000, 20.0 * MB, u64::MAX), dev(0, 500.0 * MB, 10)];
        let q = queue_estimate(&d, rec, 2_000_000);
        assert!((q.queued_secs.unwrap() - 0.1).abs() < 1e-12);
        assert!((q.delay_secs.unwrap() - 0.08).abs() < 1e-12);
        assert!((q.device_bps.unwrap() - 120.0 * MB).abs() < 1e-3);
        // a queue shorter than the margin leaves no time
        let q = queue_estimate(&[dev(1_000_000, 100.0 * MB, u64::MAX)], rec, 2_000_000);
        assert_eq!(q.delay_secs, Some(0.0));
        assert_eq!(q.queued_secs, Some(0.01));
        // nothing measured, no device, no device with room: unknown
        assert_eq!(queue_estimate(&[dev(5, 0.0, u64::MAX)], rec, 0), QueueEstimate::UNKNOWN);
        assert_eq!(queue_estimate(&[], rec, 0), QueueEstimate::UNKNOWN);
        assert_eq!(queue_estimate(&[dev(0, 100.0 * MB, 1)], rec, 0), QueueEstimate::UNKNOWN);
        // an unmeasured device counts with the mean speed: its empty queue is the minimum
        let q = queue_estimate(&[dev(10_000_000, 100.0 * MB, u64::MAX), dev(0, 0.0, u64::MAX)], rec, 0);
        assert_eq!(q.delay_secs, Some(0.0));
        assert!((q.device_bps.unwrap() - 200.0 * MB).abs() < 1e-3);
    }

    #[test]
    fn device_meter_averages_throughput_and_queue() {
        let mut m = DeviceMeter::new();
        assert_eq!(m.view(7).throughput_bps, 0.0);
        m.record_write(0, 1.0);
        m.record_write(1 << 20, 0.0);
        assert_eq!(m.throughput_bps(), 0.0, "empty or instant writes are no sample");
        m.record_write(10_000_000, 0.1);
        assert_eq!(m.throughput_bps(), 100.0 * MB);
        for _ in 0..200 {
            m.record_write(1_000_000, 0.02); // 50 MB/s
        }
        assert!((m.throughput_bps() - 50.0 * MB).abs() < 0.5 * MB, "{}", m.throughput_bps());
        m.set_queued(0.0, 1000);
        m.set_queued(10.0, 3000);
        assert_eq!(m.queued_bytes(), 3000);
        assert!((m.queued_avg_bytes() - 3000.0).abs() < 1.0, "10 s is 50 time constants");
        assert_eq!(m.view(5), DeviceView { queued_bytes: 3000, throughput_bps: m.throughput_bps(), free_bytes: 5 });
    }

    #[test]
    fn busy_drain_is_the_rate_while_the_queue_never_emptied() {
        let mib = 1u64 << 20;
        let mut b = BusyDrain::new();
        assert_eq!(b.update(0.0, 0, true), None);
        // a 25 MB/s device finishing 4 MiB ranges every 168 ms, sampled every 100 ms: spans
        // without a completed range carry over, so the rate is the device's
        let mut drained = 0u64;
        let mut next = 4.0 * mib as f64 / 25e6;
        let mut got = None;
        for i in 1..=100 {
            let t = i as f64 * 0.1;
            while next <= t {
                drained += 4 * mib;
                next += 4.0 * mib as f64 / 25e6;
            }
            got = b.update(t, drained, true);
        }
        let r = got.expect("measured");
        assert!((r - 25e6).abs() < 1.5e6, "{r}");
        // a throttle's burst after an idle gap: 8 MiB at once, then the queue empties — the
        // interval that ends idle does not count
        let before = b.bps(10.0).unwrap();
        b.update(10.1, drained + 8 * mib, false);
        b.update(10.2, drained + 8 * mib, false);
        assert_eq!(b.bps(10.2), Some(before));
        // stale after BUSY_FRESH_SECS without a busy span
        assert_eq!(b.update(10.0 + BUSY_FRESH_SECS + 0.5, drained + 8 * mib, false), None);
    }

    #[test]
    fn level_meter_averages_and_detects_changed_data() {
        let mut m = LevelMeter::new();
        assert_eq!(m.cost_ns_per_byte(), None);
        let rec = 128 << 10;
        // text-like: 4 ns/B, ratio 3
        for _ in 0..100 {
            assert_eq!(m.observe(rec, rec / 3, 4 * rec), Drift::Steady);
        }
        assert!((m.cost_ns_per_byte().unwrap() - 4.0).abs() < 1e-9);
        assert!((m.stored_per_byte().unwrap() - 1.0 / 3.0).abs() < 1e-3);
        // one odd record (stored raw) is not a change
        assert_eq!(m.observe(rec, rec, 4 * rec), Drift::Steady);
        for _ in 0..10 {
            m.observe(rec, rec / 3, 4 * rec);
        }
        // random data from now on: a change within a few records, and the level's figure
        // jumps to the new data instead of converging slowly
        let mut changed_after = None;
        for i in 0..40 {
            if m.observe(rec, rec + 100, 2 * rec) == Drift::Changed {
                changed_after = Some(i + 1);
                break;
            }
        }
        let n = changed_after.expect("random data after text is a change");
        assert!(n <= 8, "took {n} records");
        assert!(m.stored_per_byte().unwrap() > 0.6, "{:?}", m.stored_per_byte());
        // stored bytes above the input (a caller passing the compressor's output size) count
        // as stored raw
        let mut r = LevelMeter::new();
        r.observe(1000, 5000, 10);
        assert_eq!(r.stored_per_byte(), Some(1.0));
    }
}
