//! The metadata store as the engine holds it: read-write, or read-only without writing a
//! byte of `meta.redb`.
//!
//! A read-only open (fsck, scrub, `-o ro`, a pool with unknown read-only-compatible features)
//! must not write the store: opened read-write, redb marks the file on open and writes its
//! clean-shutdown state on close, and on a pool that was not closed cleanly it runs its repair
//! and commits. So a read-only open uses redb's `ReadOnlyDatabase`. That one refuses a store
//! that needs repair, so such a store is read into memory and repaired there: the checks see
//! the committed state and the file stays as the crash left it, to be repaired by the next
//! read-write open.

use crate::base::error::{EngineError, Result};
use redb::ReadableDatabase;
use std::path::Path;

pub enum MetaDb {
    /// the file, read-write
    Rw(redb::Database),
    /// the file, read-only
    Ro(redb::ReadOnlyDatabase),
    /// a copy in memory of a store that needed repair, opened for reading only
    RepairedCopy(redb::Database),
    /// a sealed store loaded into memory (meta_seal.rs), for reading only
    Sealed(redb::Database),
}

impl MetaDb {
    /// Open `path` read-write, or read-only leaving the file untouched.
    pub fn open(path: &Path, read_only: bool) -> std::result::Result<MetaDb, redb::DatabaseError> {
        if !read_only {
            return redb::Database::open(path).map(MetaDb::Rw);
        }
        match redb::ReadOnlyDatabase::open(path) {
            Ok(db) => Ok(MetaDb::Ro(db)),
            Err(redb::DatabaseError::RepairAborted) => {
                log::warn!(
                    "{} was not closed cleanly: checking a copy repaired in memory (the file is left as it is)",
                    path.display()
                );
                Self::repaired_copy(path)
            }
            Err(e) => Err(e),
        }
    }

    fn repaired_copy(path: &Path) -> std::result::Result<MetaDb, redb::DatabaseError> {
        use redb::StorageBackend;
        let bytes = std::fs::read(path).map_err(|e| redb::DatabaseError::Storage(e.into()))?;
        let mem = redb::backends::InMemoryBackend::new();
        mem.set_len(bytes.len() as u64).map_err(|e| redb::DatabaseError::Storage(e.into()))?;
        mem.write(0, &bytes).map_err(|e| redb::DatabaseError::Storage(e.into()))?;
        redb::Builder::new().create_with_backend(mem).map(MetaDb::RepairedCopy)
    }

    pub fn begin_read(&self) -> std::result::Result<redb::ReadTransaction, redb::TransactionError> {
        match self {
            MetaDb::Rw(db) | MetaDb::RepairedCopy(db) | MetaDb::Sealed(db) => db.begin_read(),
            MetaDb::Ro(db) => db.begin_read(),
        }
    }

    /// A write transaction on the file; `ReadOnly` when the store was opened read-only.
    pub fn begin_write(&self) -> Result<redb::WriteTransaction> {
        match self {
            MetaDb::Rw(db) => Ok(db.begin_write()?),
            MetaDb::Ro(_) | MetaDb::RepairedCopy(_) | MetaDb::Sealed(_) => Err(EngineError::ReadOnly),
        }
    }
}
