//! Compacting the metadata store of a closed pool (`Engine::compact_meta`; `mkfs --rootdir`
//! runs it at the end). Each txg commit writes the B-tree pages it changes to free pages of
//! `meta.redb`, and rows inserted in key order, or grown in place, leave leaves about half
//! full; a pool filled by many commits holds both kinds of waste, which redb reuses for
//! later commits but never gives back.
//!
//! The rebuild copies every table in key order, in one transaction, into a new store
//! (`meta.redb.rebuild`), makes it durable and renames it over `meta.redb`: a crash before
//! the rename leaves the old store (and a stray file the next rebuild replaces), one after
//! it the new one. A store holding a table this build does not know is compacted in place
//! instead (redb `Database::compact`: free pages cut off, leaves as they are). The pool's
//! holder lock (pool_lock.rs) is taken for the whole run: refused while the pool is open.

use crate::error::{PoolError, Result};
use crate::options::META_FILE;
use crate::pool_lock::{PoolLock, Refusal};
use redb::ReadableTable;
use squeezefs_meta::tables;
use std::path::Path;

/// The file a rebuild of the metadata store writes before it replaces `meta.redb`.
const REBUILD_FILE: &str = "meta.redb.rebuild";

/// Rewrite the metadata store of the closed pool in `pool` compactly (block comment);
/// returns the file's length before and after.
pub fn compact_meta(pool: &Path) -> Result<(u64, u64)> {
    let meta = pool.join(META_FILE);
    if !meta.exists() {
        return Err(PoolError::NotAPool { path: pool.to_path_buf() }.into());
    }
    let _lock = PoolLock::acquire(pool, false).map_err(|r| match r {
        Refusal::InUse(holder) => PoolError::InUse { pool: pool.to_path_buf(), holder },
        Refusal::Closing(holder) => PoolError::Closing { pool: pool.to_path_buf(), holder },
    })?;
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let before = len(&meta);
    let mut db = redb::Database::open(&meta).map_err(|source| PoolError::OpenStore { path: meta.clone(), source })?;
    let rebuilt = pool.join(REBUILD_FILE);
    let copied = rebuild(&db, &rebuilt).map_err(|source| PoolError::Rebuild {
        path: meta.clone(),
        into: rebuilt.clone(),
        source: Box::new(source),
    })?;
    if !copied {
        compact_in_place(&mut db, &meta)?;
        drop(db);
        return Ok((before, len(&meta)));
    }
    drop(db);
    std::fs::rename(&rebuilt, &meta).map_err(|source| PoolError::Replace {
        path: meta.clone(),
        from: rebuilt.clone(),
        source,
    })?;
    std::fs::File::open(pool)
        .and_then(|d| d.sync_all())
        .map_err(|source| PoolError::SyncDir { path: pool.to_path_buf(), source })?;
    Ok((before, len(&meta)))
}

/// redb's own compaction, repeated while it finds pages to move.
fn compact_in_place(db: &mut redb::Database, path: &Path) -> Result<()> {
    while db.compact().map_err(|source| PoolError::Compact { path: path.to_path_buf(), source })? {}
    Ok(())
}

/// Copy every table of `db` into a new store at `to`, durably; `false` (and nothing
/// written) when `db` holds a table this build does not know.
fn rebuild(db: &redb::Database, to: &Path) -> std::result::Result<bool, redb::Error> {
    use redb::{ReadableDatabase, TableHandle};
    let known = [
        tables::SUPERBLOCK.name(),
        tables::DEVICES.name(),
        tables::INODES.name(),
        tables::DIRENTS.name(),
        tables::DIR_COOKIES.name(),
        tables::DIR_NEXT_COOKIE.name(),
        tables::XATTRS.name(),
        tables::SYMLINKS.name(),
        tables::ORPHANS.name(),
        tables::EXTENTS.name(),
        tables::FREE_SPACE.name(),
        tables::BUNDLES.name(),
    ];
    let rx = db.begin_read()?;
    let present: Vec<String> = rx.list_tables()?.map(|t| t.name().to_string()).collect();
    if present.iter().any(|n| !known.contains(&n.as_str())) || rx.list_multimap_tables()?.next().is_some() {
        return Ok(false);
    }
    if to.exists() {
        std::fs::remove_file(to)?;
    }
    let out = redb::Database::create(to)?;
    let tx = out.begin_write()?;
    macro_rules! copy {
        ($def:expr) => {
            if present.iter().any(|n| n == $def.name()) {
                let from = rx.open_table($def)?;
                let mut into = tx.open_table($def)?;
                for row in from.iter()? {
                    let (k, v) = row?;
                    into.insert(k.value(), v.value())?;
                }
            }
        };
    }
    copy!(tables::SUPERBLOCK);
    copy!(tables::DEVICES);
    copy!(tables::INODES);
    copy!(tables::DIRENTS);
    copy!(tables::DIR_COOKIES);
    copy!(tables::DIR_NEXT_COOKIE);
    copy!(tables::XATTRS);
    copy!(tables::SYMLINKS);
    copy!(tables::ORPHANS);
    copy!(tables::EXTENTS);
    copy!(tables::FREE_SPACE);
    copy!(tables::BUNDLES);
    tx.commit()?;
    drop(rx);
    // the copy's own transaction leaves some pages free behind it
    let mut out = out;
    while out.compact()? {}
    Ok(true)
}
