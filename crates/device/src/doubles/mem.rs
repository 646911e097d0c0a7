//! `MemDevice`: a device in memory, growable or fixed, for unit tests.

use crate::{end_offset, Device, DeviceError};
use std::sync::Mutex;

pub struct MemDevice {
    name: String,
    capacity: Option<u64>,
    data: Mutex<Vec<u8>>,
}

impl MemDevice {
    pub fn new(name: &str) -> Self {
        Self::from_bytes(name, Vec::new(), None)
    }

    pub fn with_capacity(name: &str, capacity: u64) -> Self {
        Self::from_bytes(name, Vec::new(), Some(capacity))
    }

    /// A device holding `bytes` (e.g. a crash image).
    pub fn from_bytes(name: &str, bytes: Vec<u8>, capacity: Option<u64>) -> Self {
        Self { name: name.to_string(), capacity, data: Mutex::new(bytes) }
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // A panic in another test thread must not hide this device's contents.
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Shared by the in-memory doubles: bounds of a read.
pub(crate) fn check_read(name: &str, len: u64, offset: u64, buf_len: usize) -> Result<(usize, usize), DeviceError> {
    match end_offset(offset, buf_len) {
        Some(end) if end <= len => Ok((offset as usize, end as usize)),
        _ => Err(DeviceError::OutOfRange { path: name.to_string(), offset, len: buf_len as u64, device_len: len }),
    }
}

/// Shared by the in-memory doubles: bounds of a write against an optional capacity.
pub(crate) fn check_write(
    name: &str,
    capacity: Option<u64>,
    offset: u64,
    data_len: usize,
) -> Result<(usize, usize), DeviceError> {
    let full = || DeviceError::Full { path: name.to_string(), capacity: capacity.unwrap_or(u64::MAX) };
    let end = end_offset(offset, data_len).ok_or_else(full)?;
    if capacity.is_some_and(|c| end > c) {
        return Err(full());
    }
    let end = usize::try_from(end).map_err(|_| full())?;
    Ok((offset as usize, end))
}

/// Apply a write to an in-memory image, growing it with zeros.
pub(crate) fn apply(image: &mut Vec<u8>, start: usize, data: &[u8]) {
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

impl Device for MemDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let d = self.lock();
        let (s, e) = check_read(&self.name, d.len() as u64, offset, buf.len())?;
        buf.copy_from_slice(&d[s..e]);
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        let (s, _) = check_write(&self.name, self.capacity, offset, data.len())?;
        apply(&mut self.lock(), s, data);
        Ok(())
    }

    fn sync(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.lock().len() as u64
    }

    fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_reads_back_and_refuses_out_of_range() {
        let d = MemDevice::new("m");
        d.write_at(b"abc", 10).unwrap();
        assert_eq!(d.len(), 13);
        let mut b = [9u8; 13];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b[..10], &[0u8; 10]);
        assert_eq!(&b[10..], b"abc");
        assert!(matches!(d.read_at(&mut b, 1), Err(DeviceError::OutOfRange { .. })));
        assert!(matches!(d.read_at(&mut b, u64::MAX), Err(DeviceError::OutOfRange { .. })));
        d.sync().unwrap();
        assert_eq!(d.snapshot().len(), 13);
    }

    #[test]
    fn fixed_capacity() {
        let d = MemDevice::with_capacity("m", 100);
        d.write_at(&[1; 100], 0).unwrap();
        assert!(matches!(d.write_at(&[1], 100), Err(DeviceError::Full { capacity: 100, .. })));
        assert!(matches!(d.write_at(&[1], u64::MAX), Err(DeviceError::Full { .. })));
        assert_eq!(d.capacity(), Some(100));
    }
}
