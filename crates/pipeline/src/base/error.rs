//! Errors of the engine layer: one typed variant per kind of failure, never a message
//! string built on the way up. Lower layers' errors (devices, the metadata store, codecs)
//! are kept as they are, as the `source` of the engine error that carries them; messages
//! name the problem and, for bad input, what is accepted.

use squeezefs_device::{DeviceError, HeaderError};
use squeezefs_meta::{Ino, MetaError};
use std::path::PathBuf;
use std::sync::Arc;

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
    NoMetaSpace { dir: PathBuf, reserve: u64 },
    #[error("pool is read-only")]
    ReadOnly,
    #[error("checksum mismatch in inode {ino} at offset {offset}")]
    Checksum { ino: Ino, offset: u64 },
    /// The pool could not be opened or created: names the problem and what is accepted.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A device failed a read, a write or a flush.
    #[error("device I/O: {0}")]
    Io(#[source] IoError),
    /// The metadata store (redb) failed.
    #[error("metadata store: {0}")]
    Store(#[source] redb::Error),
    /// Stored data does not decode although its checksum matched (a codec bug or a format
    /// mismatch), or metadata is inconsistent.
    #[error("corrupt data: {0}")]
    Corrupt(#[source] Corruption),
    /// The engine stopped syncing after an error (the pool stays at its last committed
    /// transaction group); carries the error that failed the txg.
    #[error("pool suspended after a failed transaction group: {0}")]
    Suspended(#[source] Arc<EngineError>),
    /// `close` was called.
    #[error("pool is closed")]
    Closed,
    /// Invalid argument (offset/size beyond the supported range, bad option).
    #[error("invalid argument: {0}")]
    Invalid(InvalidArg),
    /// Every inode number has been handed out.
    #[error("inode numbers exhausted")]
    InodesExhausted,
    /// The caller's closure refused a `meta_write` (the fs core's own checks): nothing
    /// was changed.
    #[error("transaction aborted by the caller")]
    Aborted,
    /// A file's record size was asked to change while records of its old data are still
    /// to be freed by a commit (it was emptied in the open txg): once a `sync` has made
    /// the emptying durable, the change is accepted.
    #[error("inode {ino} was emptied but its old records are freed only by the next commit: sync, then try again")]
    RecordSizeBusy { ino: Ino },
    /// The txg driver thread could not be started.
    #[error("cannot start the txg driver: {0}")]
    Spawn(#[source] std::io::Error),
    /// A panic (a bug) was caught at an engine boundary (fault.rs); the pool is suspended.
    /// `message` is what the panic said, the one text an error carries as it came.
    #[error("panic in {site}: {message}")]
    Panicked { site: PanicSite, message: Arc<str> },
    /// An engine invariant does not hold (a bug): the operation fails instead of storing
    /// something wrong.
    #[error("internal error: {0}")]
    Internal(Internal),
}

pub type Result<T> = std::result::Result<T, EngineError>;

/// Why a device operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The device reported the error.
    #[error(transparent)]
    Device(Arc<DeviceError>),
    /// The device's writer thread is gone, so the write was never made.
    #[error("the device writer stopped")]
    WriterStopped,
    /// The device's writer panicked while it held the write (fault.rs).
    #[error("the device writer panicked")]
    WriterPanicked,
}

impl IoError {
    /// The device is full (a fixed device, or a growable one whose host filesystem is).
    pub fn is_full(&self) -> bool {
        matches!(self, IoError::Device(d) if matches!(**d, DeviceError::Full { .. }))
    }

    /// An object device's store did not take the data for its stall timeout (`s3-timeout=`):
    /// the device still holds it and a later sync may succeed, so the txg can be tried again.
    pub fn is_store_stall(&self) -> bool {
        matches!(self, IoError::Device(d) if squeezefs_object::ObjectError::is_stall(d))
    }
}

/// What is inconsistent in stored data or metadata.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Corruption {
    /// A record of the metadata store does not decode.
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("a dirty record held compressed does not decode: {0}")]
    DirtyRecordUndecodable(#[source] squeezefs_codec::CodecError),
    #[error("a dirty record held compressed decodes to {got} bytes, {want} expected")]
    DirtyRecordLength { got: usize, want: usize },
    #[error(
        "inode {ino} offset {offset}: extent of {stored} stored / {logical} logical bytes exceeds the record size"
    )]
    ExtentTooLarge { ino: Ino, offset: u64, stored: u64, logical: u32 },
    #[error("inode {ino} record {idx} points to device {dev} of {devices}")]
    NoSuchDevice { ino: Ino, idx: u64, dev: u32, devices: usize },
    #[error("inode {ino} offset {offset}: unknown algorithm id {id}")]
    UnknownAlgorithm { ino: Ino, offset: u64, id: u8 },
    #[error("inode {ino} offset {offset}: raw record of {got} bytes, {want} expected")]
    RawLength { ino: Ino, offset: u64, got: usize, want: usize },
    #[error("inode {ino} offset {offset}: {source}")]
    Undecodable {
        ino: Ino,
        offset: u64,
        #[source]
        source: squeezefs_codec::CodecError,
    },
    #[error("inode {ino} offset {offset}: decoded {got} bytes, {want} expected")]
    DecodedLength { ino: Ino, offset: u64, got: usize, want: usize },
    #[error("directory {dir} has no readdir cookies left: the metadata store is damaged")]
    CookiesExhausted { dir: Ino },
    #[error("superblock missing")]
    SuperblockMissing,
    #[error("device {dev} record missing")]
    DeviceRecordMissing { dev: u32 },
    #[error("txg {txg}: a record placed at {offset}+{len} on device {dev} overlaps space the pool holds allocated")]
    PlacedOverAllocated { txg: u64, dev: u32, offset: u64, len: u64 },
    #[error(
        "an extent being freed names device {dev}, offset {offset}, {len} bytes: not a range of this pool (the metadata store is damaged)"
    )]
    FreedRangeOutsidePool { dev: u32, offset: u64, len: u64 },
    #[error(
        "inode {ino} has record size {bytes} in the recordsizes table, which is not a power of two from 4096 to 1048576 (the metadata store is damaged)"
    )]
    BadRecordSize { ino: Ino, bytes: u64 },
    #[error(
        "txg {txg}: bundle {bundle} placed at {offset}+{len} on device {dev} overlaps space the pool holds allocated"
    )]
    BundlePlacedOverAllocated { txg: u64, bundle: u64, dev: u32, offset: u64, len: u64 },
    #[error("bundle id {id} is in use already (the metadata store is damaged)")]
    BundleIdInUse { id: u64 },
    #[error("a removed record lies in bundle {id}, which does not exist (the metadata store is damaged)")]
    DropFromMissingBundle { id: u64 },
    #[error("{removed} records of bundle {id} removed, but it counts {members} (the metadata store is damaged)")]
    BundleOverdrawn { id: u64, removed: u32, members: u32 },
    #[error("inode {ino} offset {offset}: its record lies in bundle {bundle}, which does not exist")]
    NoSuchBundle { ino: Ino, offset: u64, bundle: u64 },
    #[error(
        "inode {ino} offset {offset}: slice {start}+{len} of bundle {bundle} ({logical} bytes; the pool's bundles are at most {bundle_size})"
    )]
    BundleSliceOutside { ino: Ino, offset: u64, start: u32, len: u32, bundle: u64, logical: u32, bundle_size: u64 },
}

/// An argument outside what the engine accepts.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidArg {
    #[error("range {offset}+{len} exceeds the largest file size ({max} bytes)", max = crate::base::units::MAX_FILE_SIZE)]
    RangeTooLarge { offset: u64, len: u64 },
    #[error("inode number 0 is never used")]
    InodeZero,
    #[error("mkfs_with_devices needs at least one device")]
    NoDevices,
    #[error("no such panic site (sites: {sites})")]
    UnknownPanicSite { sites: &'static str },
    #[error(
        "record size {bytes} is not supported (accepted: a power of two from {min} to {max} bytes)",
        min = crate::base::options::MIN_RECORDSIZE,
        max = crate::base::options::MAX_RECORDSIZE
    )]
    RecordSizeUnsupported { bytes: u64 },
    #[error("inode {ino} is not a regular file: only regular files have a record size")]
    RecordSizeNotAFile { ino: Ino },
    #[error(
        "inode {ino} holds data ({size} bytes in records of {recordsize} bytes): a file's record size can change only while it is empty"
    )]
    RecordSizeOfFileWithData { ino: Ino, size: u64, recordsize: u64 },
    #[error("one transaction changes the record size of at most one existing file")]
    RecordSizeManyFiles,
    #[error("copy within inode {ino}: bytes {src}+{len} and {dst}+{len} overlap")]
    OverlappingCopy { ino: Ino, src: u64, dst: u64, len: u64 },
}

/// An engine invariant that did not hold.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Internal {
    #[error("raw result for record {idx} that holds no raw bytes")]
    RawResultWithoutBytes { idx: u64 },
    /// A compression job of the syncing txg ended without its result (it panicked).
    #[error("a compression job ended without its result")]
    CompressResultLost,
    /// Decode jobs of a read ended without their result (they panicked).
    #[error("{missing} of {expected} decode jobs ended without a result")]
    DecodeResultsLost { missing: usize, expected: usize },
}

/// Where a panic was caught (fault.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PanicSite {
    TxgDriver,
    CompressJob,
    DecodeJob,
    PrefetchJob,
    /// a FUSE request handler, for node `node` (crates/fuse)
    Request {
        node: u64,
    },
}

impl std::fmt::Display for PanicSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PanicSite::TxgDriver => write!(f, "the txg driver"),
            PanicSite::CompressJob => write!(f, "a compression job"),
            PanicSite::DecodeJob => write!(f, "a decode job"),
            PanicSite::PrefetchJob => write!(f, "a prefetch job"),
            PanicSite::Request { node } => write!(f, "the FUSE request handler (node {node})"),
        }
    }
}

/// Why a pool could not be created or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    #[error("sector size {sector} is not supported (accepted: 512 or 4096)")]
    SectorUnsupported { sector: u32 },
    #[error(
        "record size {recordsize} is not supported (accepted: a power of two from {min} to {max} bytes, e.g. 128K)",
        min = crate::base::options::MIN_RECORDSIZE,
        max = crate::base::options::MAX_RECORDSIZE
    )]
    RecordSizeUnsupported { recordsize: u32 },
    #[error(
        "bundle size {bundle_size} is not supported with record size {recordsize} (accepted: a power of two from the record size to {max} bytes, e.g. {double} for twice the record size)",
        max = crate::base::options::MAX_BUNDLE_SIZE,
        double = u64::from(*recordsize) * 2
    )]
    BundleSizeUnsupported { bundle_size: u32, recordsize: u32 },
    #[error("max_inline {max_inline} exceeds half the record size ({limit} bytes)")]
    MaxInlineTooLarge { max_inline: u32, limit: u32 },
    #[error("{} exists and is not a directory; a pool is a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("{} already holds a squeezefs pool; use --force to overwrite it", path.display())]
    AlreadyAPool { path: PathBuf },
    #[error("{} is not a squeezefs pool (no {file}); create one with `squeezefs mkfs`", path.display(), file = crate::base::options::META_FILE)]
    NotAPool { path: PathBuf },
    #[error("pool {} is already open (mounted or in use by another command)", path.display())]
    AlreadyOpen { path: PathBuf },
    /// Another process has the pool open and is not closing it (a live mount, a command).
    #[error("pool {} is already open ({}: mounted or in use by another command)", pool.display(), holder.describe())]
    InUse { pool: PathBuf, holder: crate::base::pool_lock::Holder },
    /// The process that had the pool open is closing it (a daemon flushing after its
    /// unmount): opening it again succeeds once that process is done (pool_lock.rs).
    #[error("pool {} is still open by {}, which is closing it (flushing after its unmount)", pool.display(), holder.describe())]
    Closing { pool: PathBuf, holder: crate::base::pool_lock::Holder },
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot sync directory {}: {source}", path.display())]
    SyncDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} exists; use --force to overwrite it", path.display())]
    FileExists { path: PathBuf },
    /// The trace file (`OpenOptions::trace`, mount option `trace=FILE`) cannot be created.
    #[error("cannot create the trace file {}: {source}", path.display())]
    Trace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("device {} is not empty; use --force to overwrite it", path.display())]
    DeviceNotEmpty { path: PathBuf },
    #[error(
        "device {} is not empty (it may hold a filesystem or another pool); use --force to overwrite it",
        path.display()
    )]
    DeviceInUse { path: PathBuf },
    #[error(transparent)]
    ObjectSpec(Box<squeezefs_object::SpecError>),
    #[error(transparent)]
    ObjectConfig(Box<squeezefs_object::ConfigError>),
    #[error(transparent)]
    Object { source: Box<squeezefs_object::ObjectError> },
    #[error("the pool has no object device to back its metadata up to")]
    NoBackupDevice,
    #[error("sealing the metadata store for a backup: {source}")]
    BackupSeal {
        #[source]
        source: Box<squeezefs_meta::SealError>,
    },
    #[error("cannot restore into {}: it {detail}", path.display())]
    RestoreTarget { path: PathBuf, detail: String },
    #[error("the newest backup on {spec} cannot be restored: {detail}")]
    RestoreBackup { spec: String, detail: String },
    #[error("device #{index} is recorded as an object device but its name {} is not s3://BUCKET[/PREFIX]", path.display())]
    ObjectRecord { index: u32, path: PathBuf },
    #[error("cannot open device {}: {source}", path.display())]
    OpenDevice {
        path: PathBuf,
        #[source]
        source: DeviceError,
    },
    #[error("device #{index} of pool {}: {source}", pool.display())]
    OpenPoolDevice {
        index: u32,
        pool: PathBuf,
        #[source]
        source: DeviceError,
    },
    /// Probing or writing a device at mkfs failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A device header is missing, damaged, or belongs to another pool or position.
    #[error(transparent)]
    Header(#[from] HeaderError),
    #[error("cannot open the metadata store {}: {source}", path.display())]
    OpenStore {
        path: PathBuf,
        #[source]
        source: redb::DatabaseError,
    },
    #[error("metadata store copy {}: {source}", path.display())]
    MetaCopy {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata copies must be 1 or 2, not {copies}")]
    MetaCopiesUnsupported { copies: u8 },
    #[error("the metadata store of {} is damaged in every copy: {blocks}", pool.display())]
    MetaLost { pool: PathBuf, blocks: String },
    #[error("the pool has no superblock")]
    NoSuperblock,
    #[error(
        "the superblock of {} is corrupt: sector {sector}, record size {recordsize}, bundle size {bundle_size}, max_inline {max_inline}, {devices} devices",
        path.display()
    )]
    CorruptSuperblock { path: PathBuf, sector: u32, recordsize: u32, bundle_size: u32, max_inline: u32, devices: u32 },
    #[error("pool {} uses features this build does not support (incompat flags {flags:#x}); upgrade squeezefs", path.display())]
    UnknownFeatures { path: PathBuf, flags: u64 },
    #[error("device record {index} missing")]
    DeviceRecordMissing { index: u32 },
    #[error("{} has sector size {device} but the pool uses {pool}", path.display())]
    SectorMismatch { path: PathBuf, device: u32, pool: u32 },
    #[error(
        "{} is {len} bytes but the pool keeps data on it up to byte {alloc_end}: the device shrank, or it is not the device the pool was made with",
        path.display()
    )]
    DeviceShrank { path: PathBuf, len: u64, alloc_end: u64 },
    #[error("cannot compact the metadata store {}: {source}", path.display())]
    Compact {
        path: PathBuf,
        #[source]
        source: redb::CompactionError,
    },
    #[error("cannot rebuild the metadata store {} into {}: {source}", path.display(), into.display())]
    Rebuild {
        path: PathBuf,
        into: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    /// `meta.seal` (or its temporary copy) is damaged, truncated, or of a newer format.
    #[error("sealed metadata store {}: {source}", path.display())]
    Seal {
        path: PathBuf,
        #[source]
        source: Box<squeezefs_meta::SealError>,
    },
    #[error("{op} {}: {source}", path.display())]
    SealIo {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An operation on `meta.redb` asked of a pool whose store is sealed.
    #[error("pool {} is sealed (its metadata store is {file}); unseal it first with `squeezefs unseal`", pool.display(), file = crate::base::options::SEAL_FILE)]
    Sealed { pool: PathBuf },
    #[error("cannot replace {} with its rebuilt copy {}: {source}", path.display(), from.display())]
    Replace {
        path: PathBuf,
        from: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<MetaError> for EngineError {
    fn from(e: MetaError) -> Self {
        match e {
            MetaError::Store(e) => EngineError::Store(e),
            other => EngineError::Corrupt(Corruption::Meta(other)),
        }
    }
}

impl From<Corruption> for EngineError {
    fn from(c: Corruption) -> Self {
        EngineError::Corrupt(c)
    }
}

impl From<InvalidArg> for EngineError {
    fn from(a: InvalidArg) -> Self {
        EngineError::Invalid(a)
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

impl From<IoError> for EngineError {
    /// A full device is no room (the txg may be tried again), anything else an I/O error.
    fn from(e: IoError) -> Self {
        if e.is_full() {
            EngineError::NoSpace
        } else {
            EngineError::Io(e)
        }
    }
}

impl From<DeviceError> for EngineError {
    fn from(e: DeviceError) -> Self {
        EngineError::from(IoError::Device(Arc::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_device_is_no_space_and_other_device_errors_are_io() {
        let full = DeviceError::Full { path: "d".into(), capacity: 1 };
        assert!(matches!(EngineError::from(full), EngineError::NoSpace));
        let io = DeviceError::Io { path: "d".into(), source: std::io::Error::other("boom") };
        let e = EngineError::from(io);
        assert!(matches!(e, EngineError::Io(IoError::Device(_))), "{e:?}");
        assert_eq!(e.to_string(), "device I/O: I/O error on d: boom");
        assert!(std::error::Error::source(&e).is_some(), "the device error is kept as the source");
    }

    #[test]
    fn a_suspension_names_the_error_that_failed_the_txg() {
        let e = EngineError::Suspended(Arc::new(EngineError::NoSpace));
        assert_eq!(
            e.to_string(),
            "pool suspended after a failed transaction group: no space left on the pool's devices"
        );
    }
}
