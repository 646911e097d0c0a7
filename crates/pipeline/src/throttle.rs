//! Write throttle (ZFS dirty-data delay): below `DELAY_MIN_PERCENT` of `max_dirty_bytes`
//! writers run free; above it each write sleeps
//! `DELAY_SCALE × (dirty − min) / (max − dirty)` (capped at `MAX_DELAY`), so the delay grows
//! smoothly and without bound as dirty data approaches the maximum; at the maximum writers
//! wait for a txg to release memory. A write is delayed, never failed, for load.
//!
//! Tunables: `DELAY_MIN_PERCENT` (60, zfs_delay_min_dirty_percent), `DELAY_SCALE` (500 µs,
//! zfs_delay_scale), `MAX_DELAY` (100 ms).

use crate::error::Result;
use crate::inner::Inner;
use crate::txg::SYNC_DIRTY_PERCENT;
use std::time::Duration;

pub const DELAY_MIN_PERCENT: u64 = 60;
pub const DELAY_SCALE: Duration = Duration::from_micros(500);
pub const MAX_DELAY: Duration = Duration::from_millis(100);

/// The delay for `dirty` bytes out of `max` (pure; tested over the whole range).
pub fn delay_for(dirty: u64, max: u64) -> Duration {
    let min = max / 100 * DELAY_MIN_PERCENT;
    if dirty <= min {
        return Duration::ZERO;
    }
    if dirty >= max {
        return MAX_DELAY;
    }
    let num = (dirty - min) as f64;
    let den = (max - dirty) as f64;
    DELAY_SCALE.mul_f64(num / den).min(MAX_DELAY)
}

pub fn delay(inner: &Inner) -> Result<()> {
    let max = inner.opts.max_dirty_bytes;
    loop {
        let dirty = inner.acct.dirty();
        if dirty < max {
            let d = delay_for(dirty, max);
            if !d.is_zero() {
                inner.txg.kick();
                std::thread::sleep(d);
            }
            return Ok(());
        }
        if let Some(e) = inner.txg.halted() {
            return Err(e);
        }
        inner.txg.kick();
        let mut g = inner.throttle_lock.lock();
        g.wait_for(&inner.throttle_cv, Duration::from_millis(50));
    }
}

/// Wake the driver when dirty data passed the sync threshold.
pub fn maybe_kick(inner: &Inner) {
    let threshold = inner.opts.max_dirty_bytes / 100 * SYNC_DIRTY_PERCENT;
    if inner.acct.dirty() >= threshold {
        inner.txg.kick();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_is_zero_below_min_and_grows_monotonically() {
        let max = 1000u64;
        let mut last = Duration::ZERO;
        for d in 0..=1100 {
            let x = delay_for(d, max);
            if d <= 600 {
                assert_eq!(x, Duration::ZERO);
            }
            assert!(x >= last, "delay must not shrink as dirty grows ({d})");
            assert!(x <= MAX_DELAY);
            last = x;
        }
        assert_eq!(delay_for(1000, max), MAX_DELAY);
    }
}
