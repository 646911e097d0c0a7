//! squeezefs engine: the pool, transaction groups, the write pipeline and the read path.
//!
//! CONTRACT used by the fs core (crates/fs). Semantics:
//! * Namespace and attribute changes go through [`Engine::meta_write`]: one atomic metadata
//!   transaction, visible at once, durable at the next txg commit (or `fsync`/`sync`).
//! * Data goes through `read`/`write`/`set_size`/`punch_hole`/`allocate`: visible at once,
//!   durable at the next txg commit; `fsync(ino)` returns only after a commit covering it.
//! * The engine knows nothing of POSIX permissions; the fs core checks them.

pub use squeezefs_meta::{DirEntry, FileKind, Ino, InodeAttr, Timestamp, ROOT_INO};
use std::path::Path;
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
    #[error("pool is read-only")]
    ReadOnly,
    #[error("checksum mismatch in inode {ino} at offset {offset}")]
    Checksum { ino: Ino, offset: u64 },
    #[error("{0}")]
    Other(String),
}

pub type Result<T> = std::result::Result<T, EngineError>;

pub struct MkfsOptions {}
pub struct OpenOptions {}
pub struct Engine {}
/// An open metadata write transaction (wraps one redb write transaction).
pub struct MetaTx<'a> {
    _p: std::marker::PhantomData<&'a ()>,
}

pub struct StatFs {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub sector: u32,
    pub inodes: u64,
}

/// One row of `squeezefs stats` (compsize columns).
pub struct UsageRow {
    pub alg: squeezefs_codec::Algorithm,
    pub level: i32,
    /// bytes on disk
    pub disk_bytes: u64,
    /// bytes before compression
    pub uncompressed_bytes: u64,
    /// logical bytes referenced by files
    pub referenced_bytes: u64,
}

impl Engine {
    pub fn mkfs(_pool: &Path, _opts: &MkfsOptions) -> Result<()> {
        todo!()
    }
    pub fn open(_pool: &Path, _opts: &OpenOptions) -> Result<Arc<Engine>> {
        todo!()
    }
    /// Flush everything and commit; the engine refuses work afterwards.
    pub fn close(&self) -> Result<()> {
        todo!()
    }
    pub fn read_only(&self) -> bool {
        todo!()
    }
    /// Run `f` in one atomic metadata transaction (committed non-durably; durable at txg).
    pub fn meta_write<T>(&self, _f: impl FnOnce(&mut MetaTx<'_>) -> Result<T>) -> Result<T> {
        todo!()
    }
    /// Current attributes, including the in-memory size of dirty data.
    pub fn getattr(&self, _ino: Ino) -> Result<InodeAttr> {
        todo!()
    }
    pub fn lookup(&self, _dir: Ino, _name: &[u8]) -> Result<Option<(Ino, FileKind)>> {
        todo!()
    }
    /// Entries of `dir` with cookie > `after`, at most `limit`.
    pub fn dir_list(&self, _dir: Ino, _after: u64, _limit: usize) -> Result<Vec<DirEntry>> {
        todo!()
    }
    pub fn get_xattr(&self, _ino: Ino, _name: &[u8]) -> Result<Option<Vec<u8>>> {
        todo!()
    }
    pub fn list_xattr(&self, _ino: Ino) -> Result<Vec<Vec<u8>>> {
        todo!()
    }
    /// Symlink target (stored with the inode).
    pub fn read_link(&self, _ino: Ino) -> Result<Vec<u8>> {
        todo!()
    }
    /// Read up to `buf.len()` bytes at `offset`; short at EOF; holes read as zeros.
    pub fn read(&self, _ino: Ino, _offset: u64, _buf: &mut [u8]) -> Result<usize> {
        todo!()
    }
    /// Write `data` at `offset`, extending the size; may delay (throttle), never fails for load.
    pub fn write(&self, _ino: Ino, _offset: u64, _data: &[u8]) -> Result<()> {
        todo!()
    }
    /// Truncate up or down.
    pub fn set_size(&self, _ino: Ino, _size: u64) -> Result<()> {
        todo!()
    }
    pub fn punch_hole(&self, _ino: Ino, _offset: u64, _len: u64) -> Result<()> {
        todo!()
    }
    /// fallocate mode 0 / KEEP_SIZE: ensure space is available (ENOSPC otherwise) and, unless
    /// `keep_size`, extend the size to offset+len.
    pub fn allocate(&self, _ino: Ino, _offset: u64, _len: u64, _keep_size: bool) -> Result<()> {
        todo!()
    }
    /// SEEK_DATA / SEEK_HOLE: `None` means ENXIO.
    pub fn seek_data(&self, _ino: Ino, _offset: u64) -> Result<Option<u64>> {
        todo!()
    }
    pub fn seek_hole(&self, _ino: Ino, _offset: u64) -> Result<Option<u64>> {
        todo!()
    }
    /// Durable when it returns.
    pub fn fsync(&self, _ino: Ino) -> Result<()> {
        todo!()
    }
    pub fn sync(&self) -> Result<()> {
        todo!()
    }
    pub fn statfs(&self) -> Result<StatFs> {
        todo!()
    }
    /// compsize-like usage of one inode's data.
    pub fn usage(&self, _ino: Ino) -> Result<Vec<UsageRow>> {
        todo!()
    }
    /// Mount-wide compression for data written from now on (mount option / remount).
    pub fn set_compression(&self, _spec: squeezefs_codec::Spec, _force: bool) {
        todo!()
    }
    /// Inodes whose link count reached 0 while open, left over from a crash: the fs core
    /// frees them at mount.
    pub fn orphans(&self) -> Result<Vec<Ino>> {
        todo!()
    }
}

impl MetaTx<'_> {
    pub fn alloc_ino(&mut self) -> Result<Ino> {
        todo!()
    }
    pub fn get_inode(&mut self, _ino: Ino) -> Result<InodeAttr> {
        todo!()
    }
    /// Insert or update; `size`/`blocks_bytes` are ignored (data path owns them).
    pub fn put_inode(&mut self, _attr: &InodeAttr) -> Result<()> {
        todo!()
    }
    /// Remove the inode, its xattrs, symlink target and data (space freed after commit).
    pub fn delete_inode(&mut self, _ino: Ino) -> Result<()> {
        todo!()
    }
    pub fn set_symlink_target(&mut self, _ino: Ino, _target: &[u8]) -> Result<()> {
        todo!()
    }
    pub fn dir_get(&mut self, _dir: Ino, _name: &[u8]) -> Result<Option<(Ino, FileKind)>> {
        todo!()
    }
    /// `Err(Exists)` if the name is taken.
    pub fn dir_insert(&mut self, _dir: Ino, _name: &[u8], _ino: Ino, _kind: FileKind) -> Result<()> {
        todo!()
    }
    /// `Err(NoEntry)` if absent; returns what it removed.
    pub fn dir_remove(&mut self, _dir: Ino, _name: &[u8]) -> Result<(Ino, FileKind)> {
        todo!()
    }
    pub fn dir_is_empty(&mut self, _dir: Ino) -> Result<bool> {
        todo!()
    }
    pub fn set_xattr(&mut self, _ino: Ino, _name: &[u8], _value: &[u8]) -> Result<()> {
        todo!()
    }
    /// `Err(NoEntry)` if absent.
    pub fn remove_xattr(&mut self, _ino: Ino, _name: &[u8]) -> Result<()> {
        todo!()
    }
    pub fn get_xattr(&mut self, _ino: Ino, _name: &[u8]) -> Result<Option<Vec<u8>>> {
        todo!()
    }
    pub fn add_orphan(&mut self, _ino: Ino) -> Result<()> {
        todo!()
    }
    pub fn remove_orphan(&mut self, _ino: Ino) -> Result<()> {
        todo!()
    }
}
