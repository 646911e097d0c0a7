//! Storage devices: one small trait (read_at, write_at, sync, len), a file/block-device
//! implementation and test doubles (in-memory, crash image, fail-after-N, throttled).
//!
//! CONTRACT: the engine talks to storage only through [`Device`]. Offsets are byte offsets
//! from the start of the device (the device header occupies the first bytes; the engine
//! never writes there except through the header functions).
//!
//! Layout of a device: bytes `0..HEADER_RESERVED` hold the [`DeviceHeader`] (see
//! `header.rs`); data starts at [`DATA_START`], which is aligned for both 512 B and 4 KiB
//! sectors.

mod direct;
pub mod doubles;
mod file;
mod header;
mod pool_id;
pub mod power_loss;
mod stats;

pub use file::{FileDevice, FileDeviceOptions};
pub use header::{
    is_nonempty, read_header, write_header, DeviceHeader, HeaderError, DATA_START, FORMAT_VERSION, HEADER_RESERVED,
    MAGIC, NONEMPTY_PROBE_BYTES,
};
pub use pool_id::PoolId;
pub use stats::{DeviceStats, DeviceStatsSnapshot, THROUGHPUT_WINDOW_BYTES};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("device {path} is full: {capacity} bytes")]
    Full { path: String, capacity: u64 },
    #[error("{path} is neither a regular file nor a block device; a device must be one of those")]
    NotFileOrBlockDevice { path: String },
    #[error("{path} holds {len} bytes, more than its fixed capacity of {capacity} bytes")]
    LargerThanCapacity { path: String, len: u64, capacity: u64 },
    #[error("read of {len} bytes at offset {offset} is past the end of {path} ({device_len} bytes)")]
    OutOfRange { path: String, offset: u64, len: u64, device_len: u64 },
}

pub trait Device: Send + Sync {
    /// Fill `buf` from `offset`; reading past the end is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError>;
    /// Write all of `data` at `offset`; a growable device grows, a fixed one returns `Full`.
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError>;
    /// Write the concatenation of `bufs` at `offset`, as one write (same contract as
    /// [`Device::write_at`]). The default copies into one buffer and calls `write_at`, so a
    /// test double sees exactly one write; [`FileDevice`] gathers the slices with `pwritev`
    /// instead (the device queue coalesces small records this way without copying them).
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), DeviceError> {
        if let [one] = bufs {
            return self.write_at(one, offset);
        }
        self.write_at(&bufs.concat(), offset)
    }
    /// Make every completed write durable (fdatasync).
    fn sync(&self) -> Result<(), DeviceError>;
    /// Current length in bytes.
    fn len(&self) -> u64;
    /// Fixed capacity in bytes, or `None` for a growable device file.
    fn capacity(&self) -> Option<u64>;
    /// Human-readable name (path) for messages.
    fn name(&self) -> &str;
    /// `[offset, offset+len)` holds nothing anyone will read again (space freed by a durable
    /// commit): the device may give it back (a hole in a device file, so the host gets the
    /// space). Reads of it may return zeros afterwards. Best effort: the default does
    /// nothing, and callers ignore failures beyond logging them.
    /// Stop work the device does on its own (an object device's repack), wait for what is
    /// under way and make it durable: called once at close, before the pool's last txg.
    /// The default has nothing to stop.
    fn stop_background(&self) {}
    fn discard(&self, _offset: u64, _len: u64) -> Result<(), DeviceError> {
        Ok(())
    }
    /// Nothing written yet (length 0).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Measure the rate at which the device itself takes data — not the speed of handing
    /// writes to a cache in front of it — into `stats` (`DeviceStats::record_drain`), from
    /// now on; whether this device does. The default does not, and the caller's timing of
    /// each write stays the measurement. [`FileDevice`] does (its writeback watcher).
    fn measure_drain(&self, _stats: std::sync::Arc<DeviceStats>) -> bool {
        false
    }
}

/// Shared devices: the engine holds `Arc<dyn Device>`, tests keep a clone of an
/// `Arc<CrashDevice>` to take crash images while the engine writes through it.
impl<T: Device + ?Sized> Device for std::sync::Arc<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        (**self).write_at(data, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), DeviceError> {
        (**self).write_vectored_at(bufs, offset)
    }
    fn sync(&self) -> Result<(), DeviceError> {
        (**self).sync()
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn capacity(&self) -> Option<u64> {
        (**self).capacity()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn stop_background(&self) {
        (**self).stop_background()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        (**self).discard(offset, len)
    }
    fn measure_drain(&self, stats: std::sync::Arc<DeviceStats>) -> bool {
        (**self).measure_drain(stats)
    }
}

impl<T: Device + ?Sized> Device for Box<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        (**self).write_at(data, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), DeviceError> {
        (**self).write_vectored_at(bufs, offset)
    }
    fn sync(&self) -> Result<(), DeviceError> {
        (**self).sync()
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn capacity(&self) -> Option<u64> {
        (**self).capacity()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        (**self).discard(offset, len)
    }
    fn measure_drain(&self, stats: std::sync::Arc<DeviceStats>) -> bool {
        (**self).measure_drain(stats)
    }
}

/// Byte offset one past the end of a write of `len` bytes at `offset`, or `None` if that
/// overflows u64 (such a write can never fit any device).
pub fn end_offset(offset: u64, len: usize) -> Option<u64> {
    offset.checked_add(u64::try_from(len).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offset_over_whole_range() {
        assert_eq!(end_offset(0, 0), Some(0));
        assert_eq!(end_offset(10, 5), Some(15));
        assert_eq!(end_offset(u64::MAX, 0), Some(u64::MAX));
        assert_eq!(end_offset(u64::MAX, 1), None);
        assert_eq!(end_offset(u64::MAX - 4, 4), Some(u64::MAX));
        for shift in 0..64 {
            let off = 1u64 << shift;
            assert_eq!(end_offset(off, 7), off.checked_add(7));
        }
    }
}
