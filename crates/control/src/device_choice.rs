//! Device choice and queue-delay estimation (thesis §3.2.1, eq. 3.8–3.10).
//!
//! Inputs, per device (a `DeviceView`, taken from the device's `DeviceStats`):
//!   queued_bytes    bytes waiting in the device's write queue (compressed bytes),
//!   throughput_bps  moving average of measured write throughput, 0 = not measured yet,
//!   free_bytes      space left (u64::MAX for a growable file).
//!
//! Estimates:
//!   queue delay        = queued_bytes / throughput                               (eq. 3.8)
//!   safety buffer      queued_bytes - buffer, floored at 0, where
//!                      buffer = record size × DEFAULT_SAFETY_RECORDS             (eq. 3.9)
//!   min queue delay    = min over devices of the buffered queue delay            (eq. 3.10)
//!   completion time    = (queued_bytes + record_bytes) / throughput  (eq. 3.8 plus the
//!                        record's own transfer, so that among idle devices the faster wins)
//!
//! Decisions:
//!   choose_device(devices, record_bytes) → index of the device with room for the record
//!     and the smallest expected completion time; `None` when no device has room.
//!     Ties (exactly equal times, e.g. idle devices at equal speed) go to the higher
//!     throughput, then the fewer queued bytes, then the lower index — deterministic, and
//!     since the caller adds the record to the chosen queue, equal devices alternate.
//!   min_queue_delay(devices, buffer) → the time budget the auto controller may spend on
//!     compressing a record: the shortest time any device's queue would take to drain
//!     below the safety buffer (the record goes to that device at best).
//!
//! Unmeasured devices (throughput 0, NaN or infinite): their throughput is taken as the mean
//! of the measured devices, so a new device competes on equal terms and is tried as soon as
//! its queue is the shortest (which produces its first measurement). If no device is
//! measured, all get the same nominal throughput: the least-queued device wins, and
//! min_queue_delay is 0 (no evidence that compression time is free; the thesis returns 0
//! likewise when the write speed is unknown).
//!
//! The safety buffer (why eq. 3.9 exists): estimating the delay as if `buffer` bytes fewer
//! were queued makes the auto controller pick a faster level before the queue runs dry, so
//! some data always stays queued and the device never idles. It is applied only to the
//! compression budget, not to device choice: flooring all short queues to 0 would make
//! different devices look tied.
//!
//! Tunables: DEFAULT_SAFETY_RECORDS = 25 records (the thesis keeps max_queue_depth/4 = 25
//! blocks queued).

/// Records of data kept queued as a safety buffer (thesis §5.3: a quarter of the maximum
/// queue depth of 100).
pub const DEFAULT_SAFETY_RECORDS: u64 = 25;

/// What the controllers know about one device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceView {
    pub queued_bytes: u64,
    /// Measured write throughput in bytes/s; 0 (or not finite) = not measured yet.
    pub throughput_bps: f64,
    /// Bytes still free; `u64::MAX` for a growable device.
    pub free_bytes: u64,
}

impl DeviceView {
    fn measured_throughput(&self) -> Option<f64> {
        (self.throughput_bps.is_finite() && self.throughput_bps > 0.0).then_some(self.throughput_bps)
    }
}

/// Seconds to drain `queued_bytes` at `throughput_bps` (eq. 3.8); 0 for an empty queue.
/// `throughput_bps` must be positive.
pub fn queue_delay_secs(queued_bytes: u64, throughput_bps: f64) -> f64 {
    debug_assert!(throughput_bps > 0.0);
    queued_bytes as f64 / throughput_bps
}

/// The safety buffer in bytes for records of `record_bytes` (eq. 3.9's `buffer`).
pub fn safety_buffer_bytes(record_bytes: u64, records: u64) -> u64 {
    record_bytes.saturating_mul(records)
}

/// Throughput to assume for unmeasured devices: the mean of the measured ones, or 1 byte/s
/// if none is measured (any common positive value gives the same ordering).
fn fallback_throughput(devices: &[DeviceView]) -> f64 {
    let measured: Vec<f64> = devices.iter().filter_map(|d| d.measured_throughput()).collect();
    if measured.is_empty() {
        1.0
    } else {
        measured.iter().sum::<f64>() / measured.len() as f64
    }
}

/// Seconds until a record of `record_bytes` queued on `d` now would be written.
pub fn expected_completion_secs(d: &DeviceView, record_bytes: u64, fallback_bps: f64) -> f64 {
    let tp = d.measured_throughput().unwrap_or(fallback_bps);
    queue_delay_secs(d.queued_bytes.saturating_add(record_bytes), tp)
}

/// The device a record of `record_bytes` should go to, or `None` if none has room.
pub fn choose_device(devices: &[DeviceView], record_bytes: u64) -> Option<usize> {
    let fallback = fallback_throughput(devices);
    devices
        .iter()
        .enumerate()
        .filter(|(_, d)| d.free_bytes >= record_bytes)
        .min_by(|(ia, a), (ib, b)| {
            let ta = expected_completion_secs(a, record_bytes, fallback);
            let tb = expected_completion_secs(b, record_bytes, fallback);
            let pa = a.measured_throughput().unwrap_or(fallback);
            let pb = b.measured_throughput().unwrap_or(fallback);
            ta.total_cmp(&tb).then(pb.total_cmp(&pa)).then(a.queued_bytes.cmp(&b.queued_bytes)).then(ia.cmp(ib))
        })
        .map(|(i, _)| i)
}

/// The smallest expected queue delay over devices after subtracting the safety buffer
/// (eq. 3.9 + 3.10), in seconds; 0 when no device is measured or there are no devices.
pub fn min_queue_delay(devices: &[DeviceView], safety_buffer_bytes: u64) -> f64 {
    if !devices.iter().any(|d| d.measured_throughput().is_some()) {
        return 0.0;
    }
    let fallback = fallback_throughput(devices);
    devices
        .iter()
        .map(|d| {
            let tp = d.measured_throughput().unwrap_or(fallback);
            queue_delay_secs(d.queued_bytes.saturating_sub(safety_buffer_bytes), tp)
        })
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MB: f64 = 1e6;

    fn dev(queued: u64, tp: f64) -> DeviceView {
        DeviceView { queued_bytes: queued, throughput_bps: tp, free_bytes: u64::MAX }
    }

    #[test]
    fn queue_delay_is_bytes_over_throughput() {
        assert_eq!(queue_delay_secs(0, 100.0 * MB), 0.0);
        assert_eq!(queue_delay_secs(50_000_000, 100.0 * MB), 0.5);
        assert_eq!(queue_delay_secs(u64::MAX, 1.0), u64::MAX as f64);
    }

    #[test]
    fn picks_smallest_delay_not_smallest_queue() {
        // 10 MB at 200 MB/s (50 ms) beats 2 MB at 20 MB/s (100 ms).
        let d = [dev(2_000_000, 20.0 * MB), dev(10_000_000, 200.0 * MB)];
        assert_eq!(choose_device(&d, 0), Some(1));
    }

    #[test]
    fn among_idle_devices_the_faster_wins() {
        let d = [dev(0, 50.0 * MB), dev(0, 400.0 * MB), dev(0, 100.0 * MB)];
        assert_eq!(choose_device(&d, 131_072), Some(1));
        assert_eq!(choose_device(&d, 0), Some(1), "tie at zero delay goes to throughput");
    }

    #[test]
    fn equal_devices_alternate_as_the_caller_queues() {
        let mut d = [dev(0, 100.0 * MB), dev(0, 100.0 * MB), dev(0, 100.0 * MB)];
        let mut picks = Vec::new();
        for _ in 0..6 {
            let i = choose_device(&d, 1000).unwrap();
            d[i].queued_bytes += 1000;
            picks.push(i);
        }
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn full_devices_are_skipped_and_none_when_nothing_fits() {
        let mut d = [dev(0, 500.0 * MB), dev(9_000_000, 10.0 * MB)];
        d[0].free_bytes = 4095;
        assert_eq!(choose_device(&d, 4096), Some(1));
        d[1].free_bytes = 0;
        assert_eq!(choose_device(&d, 4096), None);
        assert_eq!(choose_device(&[], 1), None);
    }

    #[test]
    fn unmeasured_device_competes_with_the_mean_speed() {
        // Mean of measured = 100 MB/s. The new device holds 1 MB (≈10 ms), the measured ones
        // 5 MB at 100 MB/s (50 ms) and 1.5 MB at 100 MB/s (15 ms).
        let d = [dev(5_000_000, 100.0 * MB), dev(1_000_000, 0.0), dev(1_500_000, 100.0 * MB)];
        assert_eq!(choose_device(&d, 0), Some(1));
        // An idle unmeasured device is tried at once (delay 0): this yields its first sample.
        let d = [dev(1, 1000.0 * MB), dev(0, f64::NAN)];
        assert_eq!(choose_device(&d, 0), Some(1));
    }

    #[test]
    fn nothing_measured_means_least_queued() {
        let d = [dev(300, 0.0), dev(100, 0.0), dev(200, f64::INFINITY)];
        assert_eq!(choose_device(&d, 10), Some(1));
        assert_eq!(min_queue_delay(&d, 0), 0.0);
    }

    #[test]
    fn min_queue_delay_applies_the_safety_buffer() {
        let rec = 131_072;
        let buf = safety_buffer_bytes(rec, DEFAULT_SAFETY_RECORDS);
        assert_eq!(buf, 3_276_800);
        // Queue shorter than the buffer: no time to spend (eq. 3.9 floors at 0).
        assert_eq!(min_queue_delay(&[dev(1_000_000, 100.0 * MB)], buf), 0.0);
        // 13.2768 MB queued at 100 MB/s, minus 3.2768 MB buffer = 0.1 s.
        let d = [dev(13_276_800, 100.0 * MB), dev(50_000_000, 100.0 * MB)];
        assert!((min_queue_delay(&d, buf) - 0.1).abs() < 1e-12);
        assert_eq!(min_queue_delay(&[], buf), 0.0);
        assert_eq!(safety_buffer_bytes(u64::MAX, 25), u64::MAX);
    }

    /// Simulated pool: records arrive faster than the devices drain them; each device
    /// drains at its own speed. Choosing by expected completion time splits bytes in
    /// proportion to device speed, which keeps both devices busy.
    #[test]
    fn bytes_split_in_proportion_to_device_speed() {
        let speeds = [100.0 * MB, 300.0 * MB];
        let mut d = [dev(0, speeds[0]), dev(0, speeds[1])];
        let mut sent = [0u64; 2];
        let rec = 128 * 1024;
        let dt = 0.001; // 1 ms steps; 512 MB/s offered
        for _ in 0..2000 {
            for _ in 0..4 {
                let i = choose_device(&d, rec).unwrap();
                d[i].queued_bytes += rec;
                sent[i] += rec;
            }
            for (v, s) in d.iter_mut().zip(speeds) {
                v.queued_bytes = v.queued_bytes.saturating_sub((s * dt) as u64);
            }
        }
        let share = sent[1] as f64 / (sent[0] + sent[1]) as f64;
        assert!((share - 0.75).abs() < 0.02, "fast device got {share:.3} of the bytes");
    }

    fn arb_dev() -> impl Strategy<Value = DeviceView> {
        (0u64..1 << 40, prop_oneof![Just(0.0), 1.0f64..1e10], prop_oneof![Just(u64::MAX), 0u64..1 << 30])
            .prop_map(|(q, t, f)| DeviceView { queued_bytes: q, throughput_bps: t, free_bytes: f })
    }

    proptest! {
        #[test]
        fn never_picks_a_strictly_slower_device(
            devs in prop::collection::vec(arb_dev(), 1..8),
            rec in 0u64..1 << 20,
        ) {
            let fallback = fallback_throughput(&devs);
            match choose_device(&devs, rec) {
                None => prop_assert!(devs.iter().all(|d| d.free_bytes < rec)),
                Some(i) => {
                    prop_assert!(devs[i].free_bytes >= rec);
                    let ti = expected_completion_secs(&devs[i], rec, fallback);
                    for d in devs.iter().filter(|d| d.free_bytes >= rec) {
                        prop_assert!(ti <= expected_completion_secs(d, rec, fallback));
                    }
                }
            }
        }

        #[test]
        fn equal_throughput_picks_least_queued(
            queues in prop::collection::vec(0u64..1 << 40, 1..8),
            tp in 1.0f64..1e10,
            rec in 0u64..1 << 20,
        ) {
            let devs: Vec<_> = queues.iter().map(|&q| dev(q, tp)).collect();
            let i = choose_device(&devs, rec).unwrap();
            let least = *queues.iter().min().unwrap();
            prop_assert_eq!(queues[i], least);
            prop_assert_eq!(i, queues.iter().position(|&q| q == least).unwrap());
        }

        #[test]
        fn min_queue_delay_is_below_every_devices_delay(
            devs in prop::collection::vec(arb_dev(), 1..8),
            buf in 0u64..1 << 30,
        ) {
            let m = min_queue_delay(&devs, buf);
            prop_assert!(m >= 0.0 && m.is_finite());
            let fallback = fallback_throughput(&devs);
            for d in &devs {
                prop_assert!(m <= expected_completion_secs(d, 0, fallback));
            }
        }
    }
}
