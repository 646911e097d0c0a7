//! Storage devices: one small trait (read_at, write_at, sync, len), a file/block-device
//! implementation and test doubles (in-memory, crash image, fail-after-N, throttled).
//!
//! CONTRACT: the engine talks to storage only through [`Device`]. Offsets are byte offsets
//! from the start of the device (the device header occupies the first bytes; the engine
//! never writes there except through the header functions).

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
    #[error("{0}")]
    Other(String),
}

pub trait Device: Send + Sync {
    /// Fill `buf` from `offset`; reading past the end is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError>;
    /// Write all of `data` at `offset`; a growable device grows, a fixed one returns `Full`.
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError>;
    /// Make every completed write durable (fdatasync).
    fn sync(&self) -> Result<(), DeviceError>;
    /// Current length in bytes.
    fn len(&self) -> u64;
    /// Fixed capacity in bytes, or `None` for a growable device file.
    fn capacity(&self) -> Option<u64>;
    /// Human-readable name (path) for messages.
    fn name(&self) -> &str;
}
