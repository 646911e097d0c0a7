//! `FailAfter<D>`: passes the first `n` writes and syncs through to `D`, then fails every
//! write and sync with an injected I/O error (reads keep working), for error-path tests.
//! `reset(n)` re-arms it, e.g. to check that the engine recovers after the fault clears.

use crate::{Device, DeviceError};
use std::sync::atomic::{AtomicU64, Ordering};

pub struct FailAfter<D> {
    inner: D,
    remaining: AtomicU64,
    failures: AtomicU64,
}

impl<D: Device> FailAfter<D> {
    pub fn new(inner: D, n: u64) -> Self {
        Self { inner, remaining: AtomicU64::new(n), failures: AtomicU64::new(0) }
    }

    pub fn reset(&self, n: u64) {
        self.remaining.store(n, Ordering::SeqCst);
    }

    /// Operations that were refused so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Take one operation from the budget, or fail.
    fn admit(&self, what: &str) -> Result<(), DeviceError> {
        let ok = self.remaining.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1)).is_ok();
        if ok {
            return Ok(());
        }
        self.failures.fetch_add(1, Ordering::SeqCst);
        Err(DeviceError::Io {
            path: self.inner.name().to_string(),
            source: std::io::Error::other(format!("injected {what} failure (FailAfter)")),
        })
    }
}

impl<D: Device> Device for FailAfter<D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.admit("write")?;
        self.inner.write_at(data, offset)
    }
    fn sync(&self) -> Result<(), DeviceError> {
        self.admit("sync")?;
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
    fn fails_after_budget_and_recovers_on_reset() {
        let d = FailAfter::new(MemDevice::new("m"), 2);
        d.write_at(b"x", 0).unwrap();
        d.sync().unwrap();
        let err = d.write_at(b"y", 1).unwrap_err();
        assert!(err.to_string().contains("injected write failure"), "{err}");
        assert!(d.sync().is_err());
        assert_eq!(d.failures(), 2);
        assert_eq!(d.len(), 1, "the refused write must not reach the device");
        let mut b = [0u8; 1];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"x");
        d.reset(1);
        d.write_at(b"y", 1).unwrap();
        assert!(d.write_at(b"z", 2).is_err());
        assert_eq!(d.inner().snapshot(), b"xy".to_vec());
    }

    #[test]
    fn zero_budget_fails_at_once() {
        let d = FailAfter::new(MemDevice::new("m"), 0);
        assert!(d.write_at(b"x", 0).is_err());
    }
}
