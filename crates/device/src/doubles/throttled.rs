//! `Throttled<D>`: delays writes so that `D` behaves like a device of `rate` bytes/s.
//!
//! Model: a single-server queue. The device is busy until `busy_until`; a write of `b`
//! bytes starts at max(now, busy_until) and ends `b / rate` later; the caller sleeps until
//! then. Concurrent writers thus share the bandwidth, like one disk. The rate can change at
//! run time (controller tests change the "device speed" mid-run); 0 = unthrottled.
//! Reads and syncs are not delayed.

use crate::{Device, DeviceError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Throttled<D> {
    inner: D,
    rate_bps: AtomicU64,
    busy_until: Mutex<Instant>,
}

impl<D: Device> Throttled<D> {
    pub fn new(inner: D, rate_bps: u64) -> Self {
        Self { inner, rate_bps: AtomicU64::new(rate_bps), busy_until: Mutex::new(Instant::now()) }
    }

    pub fn set_rate(&self, rate_bps: u64) {
        self.rate_bps.store(rate_bps, Ordering::Relaxed);
    }

    pub fn rate(&self) -> u64 {
        self.rate_bps.load(Ordering::Relaxed)
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// When a write of `bytes` issued now completes on the emulated device.
    fn reserve(&self, bytes: usize) -> Option<Instant> {
        let rate = self.rate();
        if rate == 0 {
            return None;
        }
        let mut busy = self.busy_until.lock().unwrap_or_else(|e| e.into_inner());
        let start = (*busy).max(Instant::now());
        let end = start + transfer_time(bytes as u64, rate);
        *busy = end;
        Some(end)
    }
}

/// Time to move `bytes` at `rate` bytes/s (rate > 0).
fn transfer_time(bytes: u64, rate: u64) -> Duration {
    Duration::from_secs_f64(bytes as f64 / rate as f64)
}

impl<D: Device> Device for Throttled<D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        let done_at = self.reserve(data.len());
        self.inner.write_at(data, offset)?;
        if let Some(t) = done_at {
            let now = Instant::now();
            if t > now {
                std::thread::sleep(t - now);
            }
        }
        Ok(())
    }
    fn sync(&self) -> Result<(), DeviceError> {
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn capacity(&self) -> Option<u64> {
        self.inner.capacity()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doubles::MemDevice;

    #[test]
    fn transfer_time_units() {
        assert_eq!(transfer_time(1_000_000, 1_000_000), Duration::from_secs(1));
        assert_eq!(transfer_time(0, 5), Duration::ZERO);
        assert_eq!(transfer_time(500, 1000), Duration::from_millis(500));
    }

    #[test]
    fn writes_take_bytes_over_rate() {
        // 10 MB/s, 1 MB written in 10 pieces: at least 100 ms.
        let d = Throttled::new(MemDevice::new("m"), 10_000_000);
        let t0 = Instant::now();
        for i in 0..10u64 {
            d.write_at(&[0u8; 100_000], i * 100_000).unwrap();
        }
        let el = t0.elapsed();
        assert!(el >= Duration::from_millis(100), "{el:?}");
        assert!(el < Duration::from_secs(2), "{el:?}");
        assert_eq!(d.len(), 1_000_000);
    }

    #[test]
    fn concurrent_writers_share_the_bandwidth() {
        let d = std::sync::Arc::new(Throttled::new(MemDevice::new("m"), 20_000_000));
        let t0 = Instant::now();
        let hs: Vec<_> = (0..2u64)
            .map(|k| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for i in 0..5u64 {
                        d.write_at(&[1u8; 200_000], (k * 5 + i) * 200_000).unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // 2 MB at 20 MB/s: 100 ms even though two threads wrote.
        assert!(t0.elapsed() >= Duration::from_millis(100), "{:?}", t0.elapsed());
    }

    #[test]
    fn zero_rate_is_unthrottled_and_rate_changes_apply() {
        let d = Throttled::new(MemDevice::new("m"), 0);
        let t0 = Instant::now();
        d.write_at(&vec![0u8; 10_000_000], 0).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(1));
        d.set_rate(1_000_000);
        let t1 = Instant::now();
        d.write_at(&[0u8; 50_000], 0).unwrap();
        assert!(t1.elapsed() >= Duration::from_millis(50));
    }
}
