//! Write throttle (ZFS dirty-data delay): below `DELAY_MIN_PERCENT` of `max_dirty_bytes`
//! writers run free; above it each write sleeps
//! `DELAY_SCALE × (dirty − min) / (max − dirty)` (capped at `MAX_DELAY`), so the delay grows
//! smoothly and without bound as dirty data approaches the maximum; at the maximum writers
//! wait for a txg to release memory. A write is delayed, never failed, for load.
//!
//! Tunables: `DELAY_MIN_PERCENT` (60, zfs_delay_min_dirty_percent), `DELAY_SCALE` (500 µs,
//! zfs_delay_scale), `MAX_DELAY` (100 ms).

use crate::base::accounting::Accounting;
use crate::base::error::Result;
use crate::base::locks::Mutex;
use crate::txg::state::{TxgCtl, SYNC_DIRTY_PERCENT};
use parking_lot::Condvar;
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

/// The throttle of one pool: where writers delayed at the dirty bound wait; every txg's
/// end and every suspension wakes them.
pub struct Throttle {
    max_dirty: u64,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Throttle {
    pub fn new(max_dirty: u64) -> Throttle {
        Throttle { max_dirty, lock: Mutex::default(), cv: Condvar::new() }
    }

    /// Delay a writer for the dirty data in `acct` (see the block comment); at the maximum,
    /// wait until a txg releases memory, or fail with the error of a halted pool.
    pub fn delay(&self, acct: &Accounting, txg: &TxgCtl) -> Result<()> {
        let max = self.max_dirty;
        loop {
            let dirty = acct.dirty();
            if dirty < max {
                let d = delay_for(dirty, max);
                if !d.is_zero() {
                    txg.kick();
                    std::thread::sleep(d);
                }
                return Ok(());
            }
            if let Some(e) = txg.halted() {
                return Err(e);
            }
            txg.kick();
            let mut g = self.lock.lock();
            g.wait_for(&self.cv, Duration::from_millis(50));
        }
    }

    /// Wake the driver when dirty data passed the sync threshold.
    pub fn maybe_kick(&self, acct: &Accounting, txg: &TxgCtl) {
        if acct.dirty() >= self.max_dirty / 100 * SYNC_DIRTY_PERCENT {
            txg.kick();
        }
    }

    pub fn wake_all(&self) {
        let _g = self.lock.lock();
        self.cv.notify_all();
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
