//! The metadata store as the engine holds it: read-write, or read-only without writing a
//! byte of the store's files; over checked copies (meta_mirror.rs) or, in pools made before
//! them, one plain `meta.redb` (meta_files.rs).
//!
//! A read-only open (fsck, scrub, `-o ro`, a pool with unknown read-only-compatible features)
//! must not write the store: opened read-write, redb marks the file on open and writes its
//! clean-shutdown state on close, and on a pool that was not closed cleanly it runs its repair
//! and commits. So a read-only open uses redb's `ReadOnlyDatabase`. That one refuses a store
//! that needs repair, so such a store is read into memory and repaired there: the checks see
//! the committed state and the files stay as the crash left them, to be repaired by the next
//! read-write open.

use crate::base::error::{EngineError, PoolError, Result};
use crate::store::meta_mirror::Shared;
use redb::ReadableDatabase;
use std::path::Path;
use std::sync::Arc;

pub enum MetaDb {
    /// the store, read-write
    Rw(redb::Database),
    /// the store, read-only
    Ro(redb::ReadOnlyDatabase),
    /// a copy in memory of a store that needed repair, opened for reading only
    RepairedCopy(redb::Database),
    /// a sealed store loaded into memory (meta_seal.rs), for reading only
    Sealed(redb::Database),
    /// checked copies, read-write
    CheckedRw(redb::Database, Arc<Shared>),
    /// checked copies, read-only
    CheckedRo(redb::ReadOnlyDatabase, Arc<Shared>),
}

/// How redb's errors of an open are told apart from the store's own.
pub enum OpenError {
    Redb(redb::DatabaseError),
    Pool(EngineError),
}

impl From<redb::DatabaseError> for OpenError {
    fn from(e: redb::DatabaseError) -> Self {
        OpenError::Redb(e)
    }
}

impl From<EngineError> for OpenError {
    fn from(e: EngineError) -> Self {
        OpenError::Pool(e)
    }
}

impl MetaDb {
    /// Open the store of `pool` read-write, or read-only leaving its files untouched.
    pub fn open(pool: &Path, read_only: bool) -> std::result::Result<MetaDb, OpenError> {
        // checked copies are locked as redb locks its file: the same refusal for both forms
        let (backend, shared) = crate::store::meta_files::backend(pool, !read_only).map_err(|e| match e {
            EngineError::Pool(PoolError::AlreadyOpen { .. }) => {
                OpenError::Redb(redb::DatabaseError::DatabaseAlreadyOpen)
            }
            e => OpenError::Pool(e),
        })?;
        if !read_only {
            let db = redb::Builder::new().create_with_backend(backend)?;
            return Ok(match shared {
                Some(s) => MetaDb::CheckedRw(db, s),
                None => MetaDb::Rw(db),
            });
        }
        match redb::Builder::new().open_read_only_with_backend(backend) {
            Ok(db) => Ok(match shared {
                Some(s) => MetaDb::CheckedRo(db, s),
                None => MetaDb::Ro(db),
            }),
            Err(redb::DatabaseError::RepairAborted) => {
                log::warn!(
                    "the metadata store of {} was not closed cleanly: checking a copy repaired in memory (the files are left as they are)",
                    pool.display()
                );
                let (backend, _) = crate::store::meta_files::backend(pool, false)?;
                Ok(Self::repaired_copy(&backend)?)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn repaired_copy(from: &dyn redb::StorageBackend) -> std::result::Result<MetaDb, redb::DatabaseError> {
        use redb::StorageBackend;
        let st = |e: std::io::Error| redb::DatabaseError::Storage(e.into());
        let len = from.len().map_err(st)?;
        let mut bytes = vec![0u8; len as usize];
        from.read(0, &mut bytes).map_err(st)?;
        let mem = redb::backends::InMemoryBackend::new();
        mem.set_len(len).map_err(st)?;
        mem.write(0, &bytes).map_err(st)?;
        redb::Builder::new().create_with_backend(mem).map(MetaDb::RepairedCopy)
    }

    pub fn begin_read(&self) -> std::result::Result<redb::ReadTransaction, redb::TransactionError> {
        match self {
            MetaDb::Rw(db) | MetaDb::RepairedCopy(db) | MetaDb::Sealed(db) | MetaDb::CheckedRw(db, _) => {
                db.begin_read()
            }
            MetaDb::Ro(db) | MetaDb::CheckedRo(db, _) => db.begin_read(),
        }
    }

    /// A write transaction on the store; `ReadOnly` when the store was opened read-only.
    pub fn begin_write(&self) -> Result<redb::WriteTransaction> {
        match self {
            MetaDb::Rw(db) | MetaDb::CheckedRw(db, _) => Ok(db.begin_write()?),
            MetaDb::Ro(_) | MetaDb::RepairedCopy(_) | MetaDb::Sealed(_) | MetaDb::CheckedRo(..) => {
                Err(EngineError::ReadOnly)
            }
        }
    }

    /// The checked copies under the store, if it has them.
    pub fn checked(&self) -> Option<&Arc<Shared>> {
        match self {
            MetaDb::CheckedRw(_, s) | MetaDb::CheckedRo(_, s) => Some(s),
            _ => None,
        }
    }
}
