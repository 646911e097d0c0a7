//! Changing and checking the metadata store of a closed pool as a whole: `squeezefs
//! meta-copies POOL 1|2` (a plain store becomes checked; a checked one gains or drops its
//! second copy), and the full check of every block of every copy that scrub (repairing)
//! and fsck (reporting) run before they open the pool. The holder lock is taken for
//! writing while files are written: refused while the pool is open.

use crate::base::error::{PoolError, Result};
use crate::base::pool_lock::{PoolLock, Refusal};
use crate::store::meta_files::{self, Form};
use crate::store::meta_mirror::StoreCheck;
use redb::ReadableTable;
use squeezefs_meta::{tables, Features, Superblock};
use std::path::Path;

fn lock(pool: &Path, read_only: bool) -> Result<PoolLock> {
    PoolLock::acquire(pool, read_only).map_err(|r| {
        match r {
            Refusal::InUse(holder) => PoolError::InUse { pool: pool.to_path_buf(), holder },
            Refusal::Closing(holder) => PoolError::Closing { pool: pool.to_path_buf(), holder },
        }
        .into()
    })
}

/// What a conversion did: the copies before (0: a plain store) and after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Converted {
    pub before: u8,
    pub after: u8,
}

/// Give the store of the closed pool in `pool` `copies` checked copies (1 or 2).
pub fn set_meta_copies(pool: &Path, copies: u8) -> Result<Converted> {
    if !(1..=2).contains(&copies) {
        return Err(PoolError::MetaCopiesUnsupported { copies }.into());
    }
    if crate::store::meta_seal::is_sealed(pool) {
        return Err(PoolError::Sealed { pool: pool.to_path_buf() }.into());
    }
    let _lock = lock(pool, false)?;
    meta_files::settle(pool)?;
    let before = match meta_files::form(pool) {
        Some(Form::Plain) => 0,
        Some(Form::Checked { copies }) => copies,
        None => return Err(PoolError::NotAPool { path: pool.to_path_buf() }.into()),
    };
    if before != copies {
        // the source read through its own checks: a block lost in every copy stops the
        // conversion with its name instead of being copied
        let (src, _) = meta_files::backend(pool, false)?;
        meta_files::install(pool, &src, copies)?;
        drop(src);
    }
    // the superblock says what the files are (docs/format.md §2)
    let db = meta_files::open_rw(pool)?;
    let tx = db.begin_write()?;
    {
        let mut t = tx.open_table(tables::SUPERBLOCK)?;
        let mut sb = {
            let v = t.get(0u8)?.ok_or(PoolError::NoSuperblock)?;
            Superblock::decode(v.value())?
        };
        sb.features.incompat |= Features::INCOMPAT_META_COPIES;
        sb.meta_copies = Some(copies);
        t.insert(0u8, &sb.encode()[..])?;
    }
    tx.commit()?;
    drop(db);
    Ok(Converted { before, after: copies })
}

/// Check every block of every copy of the closed pool's store; `repair`: rewrite the bad
/// ones from intact copies (module comment). `None`: a plain store, with nothing to check
/// its blocks by.
pub fn check_meta(pool: &Path, repair: bool) -> Result<Option<StoreCheck>> {
    let _lock = lock(pool, !repair)?;
    if repair {
        meta_files::settle(pool)?;
    }
    meta_files::check(pool, repair)
}
