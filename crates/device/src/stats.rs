//! Per-device write statistics, updated by the engine's device writers and read by the
//! controllers (device choice, auto level).
//!
//! * `queued_bytes`: bytes handed to the device's write queue and not yet written
//!   (`queued_add` when a record is queued, `queued_sub` when its write completed).
//! * `last_write_latency`: duration of the most recent `write_at`.
//! * `throughput_bps`: moving average of write throughput: bytes written over the time the
//!   writes took, over roughly the last `THROUGHPUT_WINDOW_BYTES` written. What is averaged
//!   is the time per byte of each write (duration / bytes), exponentially weighted by bytes:
//!   a write of `b` bytes gets weight `b / (b + THROUGHPUT_WINDOW_BYTES)`, so the average
//!   spans about the last window whatever the write size, and the throughput is its
//!   inverse — the ratio of the sums, which is what draining a queue takes. (Averaging each
//!   write's bytes/s instead overstates a device whose writes alternate between fast, into
//!   the page cache, and slow, waiting for the writeback window: three writes at 1 GB/s and
//!   one at 6 MB/s would average to 750 MB/s for a device that drains 25 MB/s.) The thesis
//!   averages over the last 1000 ZIOs of ~128 KiB, i.e. ~128 MiB; squeezefs writes larger
//!   batches and wants to follow a device whose speed changes within a few txgs, hence a
//!   smaller window. The first measurement sets the average; writes of zero bytes or zero
//!   duration are ignored (thesis eq. 5.2 ignores zero samples too).
//!
//!   When the device measures its own drain rate (`Device::measure_drain`: a device file
//!   behind the page cache, whose writes return long before the data is on the device),
//!   that rate is the average instead: `record_drain` feeds it the same way, and the
//!   writes' own timing no longer does.
//!
//! * `bulk_bps`: what the device takes in large writes. A write costs the device a fixed
//!   time per request (the round trip, a disk's command overhead) and a time per byte, so a
//!   device that keeps up and gets one small record per write drains at a fraction of what
//!   it takes once a backlog coalesces its writes into runs of megabytes (a paced device at
//!   400 MB/s: 101 MB/s in 16 KiB direct writes, 336 in 1 MiB, 356 in 8 MiB). The writes'
//!   times are fitted as `t = latency + bytes / bulk` by least squares over about the last
//!   64 writes (exponentially weighted sums, every write alike); `bulk_bps` is that fit's rate
//!   where the writes' sizes spread enough to separate the two terms and the fitted latency
//!   is not negative, else `throughput_bps`. It is never below `throughput_bps` and at most
//!   `BULK_MAX_GAIN` times it (a fit over noisy times can put the slope near zero). A
//!   device that measures its own drain has no per-write times: there it is the
//!   throughput.
//!
//! * `drained_bytes`: bytes the device finished writing: the drain samples' bytes when the
//!   device measures its drain, else the writes' bytes. Over an interval in which the
//!   device's queue never emptied, its growth is the device's sustained rate (control
//!   measure/meters.rs `BusyDrain`): unlike the per-range average, it gives no credit for the
//!   burst a throttled device lets through after an idle gap.
//!
//! * `write_cpu_ns`: CPU time of the writer threads inside the writes (their thread clocks
//!   around each call: the kernel's copy of the stored bytes and its page handling). What
//!   storing a byte costs the pipeline beyond compressing it, so that a controller can charge
//!   it per stored byte and the rest of the pipeline's CPU per input byte.
//!
//! * `write_wall_ns`, `write_run_delay_ns`: wall time of the writes, and the part of it the
//!   writer threads waited on a run queue for a CPU (schedstat; 0 where the kernel keeps
//!   none). The rest of the wall time beyond `write_cpu_ns` the writer was blocked by the
//!   device (its queue, the page cache's writeback limit): a writer mostly running or
//!   waiting for a CPU drains as fast as it gets CPU, whatever its queue.
//!
//! All fields are atomics: writers update without locks; readers may see one update late.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bytes over which the throughput average roughly extends (see module comment).
pub const THROUGHPUT_WINDOW_BYTES: u64 = 16 * 1024 * 1024;

/// Most `bulk_bps` exceeds `throughput_bps` by (see the module comment): a device whose
/// small writes are 8 times slower per byte than its large ones is far out already (the
/// paced device at 16 KiB: 3.5 times).
pub const BULK_MAX_GAIN: f64 = 8.0;

/// Weight of one write in the fit of `bulk_bps`: every write counts alike (weighting by
/// bytes, as the throughput does, would leave the small writes that show the time per
/// write out), over about the last 64 writes.
const FIT_WEIGHT: f64 = 1.0 / 64.0;

/// Least spread of the write sizes, as a coefficient of variation, that separates a fixed
/// time per write from a time per byte (see the module comment).
const BULK_MIN_SPREAD: f64 = 0.2;

/// Exponentially weighted sums of the writes' sizes and times, for the fit `t = a + b·x`.
#[derive(Debug, Default, Clone, Copy)]
struct WriteFit {
    w: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

impl WriteFit {
    /// Add a write of `bytes` that took `secs`, the older writes decayed by its weight.
    fn add(&mut self, bytes: f64, secs: f64, weight: f64) {
        let k = 1.0 - weight;
        self.w = k * self.w + weight;
        self.x = k * self.x + weight * bytes;
        self.y = k * self.y + weight * secs;
        self.xx = k * self.xx + weight * bytes * bytes;
        self.xy = k * self.xy + weight * bytes * secs;
    }

    /// Bytes per second of the fit's time per byte, given the plain throughput `plain`
    /// (see the module comment).
    fn bulk_bps(&self, plain: f64) -> f64 {
        if plain.is_nan() || plain <= 0.0 || self.w <= 0.0 {
            return plain;
        }
        let (mx, my) = (self.x / self.w, self.y / self.w);
        let var = self.xx / self.w - mx * mx;
        let cov = self.xy / self.w - mx * my;
        let spread = var.max(0.0).sqrt() / mx.max(1.0);
        if spread < BULK_MIN_SPREAD || cov <= 0.0 {
            return plain;
        }
        let slope = cov / var;
        if my - slope * mx < 0.0 {
            // a negative time per write: the sizes do not explain the times
            return plain;
        }
        (1.0 / slope).clamp(plain, plain * BULK_MAX_GAIN)
    }
}

#[derive(Debug, Default)]
pub struct DeviceStats {
    queued: AtomicU64,
    last_latency_ns: AtomicU64,
    /// f64 seconds per byte (the averaged quantity, see the module comment) as bits;
    /// 0.0 = not measured yet.
    secs_per_byte_bits: AtomicU64,
    written_total: AtomicU64,
    drained_total: AtomicU64,
    write_cpu_total: AtomicU64,
    write_wall_total: AtomicU64,
    write_delay_total: AtomicU64,
    /// the throughput comes from `record_drain`, not from the writes' timing
    drain_measured: std::sync::atomic::AtomicBool,
    /// the writes' sizes and times for `bulk_bps` (see the module comment)
    fit: std::sync::Mutex<WriteFit>,
}

/// A consistent-enough copy of the statistics for a controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceStatsSnapshot {
    pub queued_bytes: u64,
    pub last_write_latency: Duration,
    /// Moving average of write throughput in bytes/s; 0.0 until the first write completed.
    pub throughput_bps: f64,
    /// What the device takes in large writes, bytes/s (see the module comment); 0.0 until
    /// the first write completed.
    pub bulk_bps: f64,
    pub written_bytes: u64,
    /// bytes the device finished writing (see the module comment)
    pub drained_bytes: u64,
    /// CPU nanoseconds the writer threads spent inside writes (see the module comment)
    pub write_cpu_ns: u64,
    /// wall nanoseconds the writes took (see the module comment)
    pub write_wall_ns: u64,
    /// of those, nanoseconds the writer threads waited for a CPU (see the module comment)
    pub write_run_delay_ns: u64,
}

impl DeviceStats {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn queued_add(&self, bytes: u64) {
        self.queued.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Saturates at zero: an accounting slip must not wrap into an "infinitely full" queue.
    pub fn queued_sub(&self, bytes: u64) {
        let _ = self.queued.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| Some(q.saturating_sub(bytes)));
    }

    /// A write of `bytes` took `duration` (measured around `Device::write_at`).
    pub fn record_write(&self, bytes: u64, duration: Duration) {
        self.last_latency_ns.store(duration_to_nanos(duration), Ordering::Relaxed);
        self.written_total.fetch_add(bytes, Ordering::Relaxed);
        if !self.drain_measured.load(Ordering::Relaxed) {
            self.drained_total.fetch_add(bytes, Ordering::Relaxed);
            self.average(bytes, duration);
            if throughput_bps(bytes, duration).is_some() {
                let mut f = self.fit.lock().unwrap_or_else(|p| p.into_inner());
                f.add(bytes as f64, duration.as_secs_f64(), FIT_WEIGHT);
            }
        }
    }

    /// A write took the writer thread `wall_ns`, of which it ran `cpu_ns` and waited for a
    /// CPU `run_delay_ns`.
    pub fn record_write_clocks(&self, wall_ns: u64, cpu_ns: u64, run_delay_ns: u64) {
        self.write_cpu_total.fetch_add(cpu_ns, Ordering::Relaxed);
        self.write_wall_total.fetch_add(wall_ns, Ordering::Relaxed);
        self.write_delay_total.fetch_add(run_delay_ns, Ordering::Relaxed);
    }

    /// The device measures its drain rate (`Device::measure_drain` said so): the writes'
    /// timing, which measures the cache in front of it, stops feeding the throughput, which
    /// stays unmeasured (0) until the first `record_drain`.
    pub fn drain_measured_by_device(&self) {
        if !self.drain_measured.swap(true, Ordering::Relaxed) {
            self.secs_per_byte_bits.store(0, Ordering::Relaxed);
        }
    }

    /// The device took `bytes` in `duration` of its own work (see the module comment): from
    /// the first call on, the throughput average is of these.
    pub fn record_drain(&self, bytes: u64, duration: Duration) {
        self.drain_measured_by_device();
        self.drained_total.fetch_add(bytes, Ordering::Relaxed);
        self.average(bytes, duration);
    }

    fn average(&self, bytes: u64, duration: Duration) {
        let Some(sample) = throughput_bps(bytes, duration) else {
            return;
        };
        let w = sample_weight(bytes);
        let _ = self.secs_per_byte_bits.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some(ewma(f64::from_bits(bits), 1.0 / sample, w).to_bits())
        });
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    pub fn throughput_bps(&self) -> f64 {
        let spb = f64::from_bits(self.secs_per_byte_bits.load(Ordering::Relaxed));
        if spb > 0.0 && spb.is_finite() {
            1.0 / spb
        } else {
            0.0
        }
    }

    /// What the device takes in large writes (see the module comment); 0.0 before any.
    pub fn bulk_bps(&self) -> f64 {
        let plain = self.throughput_bps();
        if self.drain_measured.load(Ordering::Relaxed) {
            return plain;
        }
        self.fit.lock().unwrap_or_else(|p| p.into_inner()).bulk_bps(plain)
    }

    pub fn snapshot(&self) -> DeviceStatsSnapshot {
        DeviceStatsSnapshot {
            queued_bytes: self.queued_bytes(),
            last_write_latency: Duration::from_nanos(self.last_latency_ns.load(Ordering::Relaxed)),
            throughput_bps: self.throughput_bps(),
            bulk_bps: self.bulk_bps(),
            written_bytes: self.written_total.load(Ordering::Relaxed),
            drained_bytes: self.drained_total.load(Ordering::Relaxed),
            write_cpu_ns: self.write_cpu_total.load(Ordering::Relaxed),
            write_wall_ns: self.write_wall_total.load(Ordering::Relaxed),
            write_run_delay_ns: self.write_delay_total.load(Ordering::Relaxed),
        }
    }
}

fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Bytes per second of one write; `None` for an empty or unmeasurably short write.
fn throughput_bps(bytes: u64, d: Duration) -> Option<f64> {
    let secs = d.as_secs_f64();
    if bytes == 0 || secs <= 0.0 {
        return None;
    }
    Some(bytes as f64 / secs)
}

/// Weight of a sample of `bytes` in the moving average, in (0, 1).
fn sample_weight(bytes: u64) -> f64 {
    let b = bytes as f64;
    b / (b + THROUGHPUT_WINDOW_BYTES as f64)
}

/// One EWMA step; an unset (zero) average takes the sample as is.
fn ewma(old: f64, sample: f64, weight: f64) -> f64 {
    if old <= 0.0 || !old.is_finite() {
        return sample;
    }
    old + weight * (sample - old)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    /// Writes of a device that spends `latency` per write and takes `bps` per byte.
    fn paced_writes(s: &DeviceStats, sizes: &[u64], latency: f64, bps: f64) {
        for _ in 0..50 {
            for &b in sizes {
                s.record_write(b, Duration::from_secs_f64(latency + b as f64 / bps));
            }
        }
    }

    #[test]
    fn the_bulk_rate_of_a_device_with_a_time_per_write_is_its_rate_per_byte() {
        let s = DeviceStats::new();
        // 0.1 ms per write and 400 MB/s: records of 16 KiB to 1 MiB
        paced_writes(&s, &[16 << 10, 64 << 10, 256 << 10, MIB], 1e-4, 400e6);
        let (plain, bulk) = (s.throughput_bps(), s.bulk_bps());
        assert!(plain < 360e6, "the plain throughput pays the time per write: {plain}");
        assert!((bulk - 400e6).abs() < 4e6, "bulk {bulk}");
        assert_eq!(s.snapshot().bulk_bps, bulk);
    }

    #[test]
    fn the_bulk_rate_is_the_throughput_where_the_fit_cannot_say_more() {
        // writes of one size: the time per write and per byte cannot be told apart
        let s = DeviceStats::new();
        paced_writes(&s, &[MIB], 1e-3, 100e6);
        assert_eq!(s.bulk_bps(), s.throughput_bps());
        // no time per write: both are the rate
        let s = DeviceStats::new();
        paced_writes(&s, &[64 << 10, MIB, 4 * MIB], 0.0, 100e6);
        assert!((s.bulk_bps() - 100e6).abs() < 1e6 && (s.throughput_bps() - 100e6).abs() < 1e6);
        // large writes slower per byte than small ones (a negative time per write): the
        // throughput, never less
        let s = DeviceStats::new();
        for _ in 0..50 {
            s.record_write(64 << 10, Duration::from_secs_f64((64 << 10) as f64 / 400e6));
            s.record_write(4 * MIB, Duration::from_secs_f64(0.004 + (4 * MIB) as f64 / 100e6));
        }
        assert_eq!(s.bulk_bps(), s.throughput_bps());
        // a slope near zero: capped at BULK_MAX_GAIN times the throughput
        let s = DeviceStats::new();
        paced_writes(&s, &[4096, MIB], 0.01, 1e10);
        assert!((s.bulk_bps() / s.throughput_bps() - BULK_MAX_GAIN).abs() < 1e-9);
        // a device measuring its own drain: no per-write times
        let s = DeviceStats::new();
        paced_writes(&s, &[16 << 10, MIB], 1e-4, 400e6);
        s.record_drain(MIB, Duration::from_millis(10));
        assert_eq!(s.bulk_bps(), s.throughput_bps());
    }

    #[test]
    fn queue_accounting_saturates() {
        let s = DeviceStats::new();
        s.queued_add(100);
        s.queued_add(50);
        s.queued_sub(30);
        assert_eq!(s.queued_bytes(), 120);
        s.queued_sub(1000);
        assert_eq!(s.queued_bytes(), 0);
    }

    #[test]
    fn first_sample_sets_the_average_and_zeros_are_ignored() {
        let s = DeviceStats::new();
        assert_eq!(s.throughput_bps(), 0.0);
        s.record_write(0, Duration::from_millis(5));
        s.record_write(MIB, Duration::ZERO);
        assert_eq!(s.throughput_bps(), 0.0);
        s.record_write(MIB, Duration::from_millis(10));
        let t = s.throughput_bps();
        assert!((t - 104_857_600.0).abs() < 1.0, "{t}");
        let snap = s.snapshot();
        assert_eq!(snap.last_write_latency, Duration::from_millis(10));
        assert_eq!(snap.written_bytes, 2 * MIB);
    }

    #[test]
    fn average_converges_to_a_new_speed_within_a_few_windows() {
        let s = DeviceStats::new();
        // 100 MB/s for a while ...
        for _ in 0..64 {
            s.record_write(MIB, Duration::from_secs_f64(MIB as f64 / 100e6));
        }
        assert!((s.throughput_bps() - 100e6).abs() < 1e3);
        // ... then the device slows to 20 MB/s: after 3 windows' worth of bytes less than 6% of the
        // old excess remains (weight per MiB write = 1/17, (16/17)^48 < 0.06).
        for _ in 0..(3 * THROUGHPUT_WINDOW_BYTES / MIB) {
            s.record_write(MIB, Duration::from_secs_f64(MIB as f64 / 20e6));
        }
        let t = s.throughput_bps();
        assert!(t > 20e6 && t < 25e6, "{t}");
    }

    #[test]
    fn a_measured_drain_replaces_the_timing_of_writes() {
        let s = DeviceStats::new();
        // writes into a cache: 1 GB/s
        s.record_write(16 * MIB, Duration::from_secs_f64(16.0 * MIB as f64 / 1e9));
        assert!(s.throughput_bps() > 9e8);
        // once the device says it measures its drain, the cache's speed is no figure
        let d = DeviceStats::new();
        d.drain_measured_by_device();
        d.record_write(16 * MIB, Duration::from_millis(16));
        assert_eq!(d.throughput_bps(), 0.0, "unmeasured until the first drain sample");
        // the device drains 25 MB/s: that is the throughput from the first drain sample on
        s.record_drain(4 * MIB, Duration::from_secs_f64(4.0 * MIB as f64 / 25e6));
        assert!((s.throughput_bps() - 25e6).abs() < 1.0, "{}", s.throughput_bps());
        s.record_write(16 * MIB, Duration::from_millis(1));
        assert!((s.throughput_bps() - 25e6).abs() < 1.0, "fast writes no longer count");
        assert_eq!(s.snapshot().written_bytes, 32 * MIB, "written bytes still count");
        // drained: the writes' bytes while they were the device's timing, then the drain's
        assert_eq!(s.snapshot().drained_bytes, 20 * MIB);
        assert_eq!(d.snapshot().drained_bytes, 0, "writes into a cache are not drained");
    }

    #[test]
    fn weight_grows_with_write_size() {
        assert!(sample_weight(4096) < sample_weight(MIB));
        assert!((sample_weight(THROUGHPUT_WINDOW_BYTES) - 0.5).abs() < 1e-12);
        assert!(sample_weight(u64::MAX) <= 1.0);
        assert!(sample_weight(1) > 0.0);
    }

    #[test]
    fn a_slow_write_counts_by_the_time_it_took() {
        let s = DeviceStats::new();
        s.record_write(64 * MIB, Duration::from_millis(640)); // 100 MiB/s
        let before = s.throughput_bps();
        // a small write that stalled 100 ms: the device took no data meanwhile, and over the
        // window (16 MiB, 160 ms at 100 MiB/s) that is a lot; its bytes alone would say little
        s.record_write(4096, Duration::from_millis(100));
        let after = s.throughput_bps();
        assert!(after < 0.7 * before && after > 0.5 * before, "{before} -> {after}");
        assert_eq!(s.snapshot().last_write_latency, Duration::from_millis(100));
        // a tiny fast write moves it little
        let s = DeviceStats::new();
        s.record_write(64 * MIB, Duration::from_millis(640));
        s.record_write(4096, Duration::from_micros(1));
        assert!((s.throughput_bps() - before).abs() / before < 0.001);
    }

    #[test]
    fn writes_alternating_fast_and_waiting_average_to_what_the_device_drains() {
        // three 1 MiB writes into the page cache (1 ms each), one that waits for the
        // writeback window (the device drains 25 MB/s: 4 MiB take 168 ms in all)
        let s = DeviceStats::new();
        let drain = 4.0 * MIB as f64 / 25e6;
        for _ in 0..64 {
            for _ in 0..3 {
                s.record_write(MIB, Duration::from_millis(1));
            }
            s.record_write(MIB, Duration::from_secs_f64(drain - 0.003));
        }
        // (the recency weighting leans to the last write: within 15% either way; the average
        // of each write's bytes/s would say about 750 MB/s)
        let t = s.throughput_bps();
        assert!((t - 25e6).abs() < 0.15 * 25e6, "{t}");
    }

    #[test]
    fn concurrent_updates_are_not_lost() {
        let s = std::sync::Arc::new(DeviceStats::new());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        s.queued_add(10);
                        s.record_write(10, Duration::from_micros(1));
                        s.queued_sub(10);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.queued_bytes(), 0);
        assert_eq!(s.snapshot().written_bytes, 40_000);
    }
}
