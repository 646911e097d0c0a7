//! Errors of the engine layer.

use squeezefs_meta::{Ino, MetaError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("inode {0} not found")]
    NoInode(Ino),
    #[error("entry already exists")]
    Exists,
    #[error("no entry with that name")]
    NoEntry,
    #[error("no space left on the pool's devices")]
    NoSpace,
    /// The filesystem holding the metadata store has no room for the commit of this change
    /// beyond the reserve kept for deletions (meta_space.rs).
    #[error(
        "no space left for the metadata store on the filesystem of {}: {reserve} bytes are \
         kept free there so files can still be deleted; free space on that filesystem or \
         delete files",
        dir.display()
    )]
    NoMetaSpace { dir: std::path::PathBuf, reserve: u64 },
    #[error("pool is read-only")]
    ReadOnly,
    #[error("checksum mismatch in inode {ino} at offset {offset}")]
    Checksum { ino: Ino, offset: u64 },
    /// The pool could not be opened or created: names the problem and what is accepted.
    #[error("{0}")]
    Pool(String),
    /// Another process has the pool open and is not closing it (a live mount, a command).
    #[error("pool {} is already open ({}: mounted or in use by another command)", pool.display(), holder.describe())]
    PoolInUse { pool: std::path::PathBuf, holder: crate::pool_lock::Holder },
    /// The process that had the pool open is closing it (a daemon flushing after its
    /// unmount): opening it again succeeds once that process is done (pool_lock.rs).
    #[error("pool {} is still open by {}, which is closing it (flushing after its unmount)", pool.display(), holder.describe())]
    PoolClosing { pool: std::path::PathBuf, holder: crate::pool_lock::Holder },
    /// An I/O error of a device.
    #[error("device I/O: {0}")]
    Io(String),
    /// Stored data does not decode although its checksum matched (a codec bug or a format
    /// mismatch), or metadata is inconsistent.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The engine stopped syncing after an error (the pool stays at its last committed
    /// transaction group); names the original error.
    #[error("pool suspended after a failed transaction group: {0}")]
    Suspended(String),
    /// `close` was called.
    #[error("pool is closed")]
    Closed,
    /// Invalid argument (offset/size beyond the supported range, bad option).
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("{0}")]
    Other(String),
}

pub type Result<T> = std::result::Result<T, EngineError>;

impl From<MetaError> for EngineError {
    fn from(e: MetaError) -> Self {
        match e {
            MetaError::Store(e) => EngineError::Other(format!("metadata store: {e}")),
            other => EngineError::Corrupt(other.to_string()),
        }
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for EngineError {
            fn from(e: $t) -> Self {
                EngineError::from(MetaError::from(e))
            }
        }
    )*};
}
from_redb!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError
);

impl From<squeezefs_device::DeviceError> for EngineError {
    fn from(e: squeezefs_device::DeviceError) -> Self {
        match e {
            squeezefs_device::DeviceError::Full { .. } => EngineError::NoSpace,
            other => EngineError::Io(other.to_string()),
        }
    }
}
