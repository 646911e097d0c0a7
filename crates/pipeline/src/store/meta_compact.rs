//! Compacting the metadata store of a closed pool (`Engine::compact_meta`; `mkfs --rootdir`
//! runs it at the end). Each txg commit writes the B-tree pages it changes to free pages of
//! `meta.redb`, and rows inserted in key order, or grown in place, leave leaves about half
//! full; a pool filled by many commits holds both kinds of waste, which redb reuses for
//! later commits but never gives back.
//!
//! The rebuild copies every table in key order, in one transaction, into a new store
//! (`meta.redb.rebuild`), makes it durable and renames it over `meta.redb`: a crash before
//! the rename leaves the old store (and a stray file the next rebuild replaces), one after
//! it the new one. A checked store (meta_files.rs) gets the rebuilt file installed as its
//! copies instead, by the same rule: the old store until copy 0 is renamed, then the new
//! one. A store holding a table this build does not know is compacted in place
//! instead (redb `Database::compact`: free pages cut off, leaves as they are). The pool's
//! holder lock (pool_lock.rs) is taken for the whole run: refused while the pool is open.

use crate::base::error::{PoolError, Result};
use crate::base::pool_lock::{PoolLock, Refusal};
use redb::ReadableTable;
use squeezefs_meta::tables;
use std::path::Path;

/// The file a rebuild of the metadata store writes before it replaces `meta.redb`.
const REBUILD_FILE: &str = "meta.redb.rebuild";

/// Rewrite the metadata store of the closed pool in `pool` compactly (block comment);
/// returns the file's length before and after.
pub fn compact_meta(pool: &Path) -> Result<(u64, u64)> {
    use crate::store::meta_files::{self, Form};
    if crate::store::meta_seal::is_sealed(pool) {
        return Err(PoolError::Sealed { pool: pool.to_path_buf() }.into());
    }
    let Some(form) = meta_files::form(pool) else {
        return Err(PoolError::NotAPool { path: pool.to_path_buf() }.into());
    };
    let _lock = PoolLock::acquire(pool, false).map_err(|r| match r {
        Refusal::InUse(holder) => PoolError::InUse { pool: pool.to_path_buf(), holder },
        Refusal::Closing(holder) => PoolError::Closing { pool: pool.to_path_buf(), holder },
    })?;
    meta_files::settle(pool)?;
    let meta = meta_files::store_file(pool);
    let before = meta_files::store_len(pool);
    let mut db = meta_files::open_rw(pool)?;
    let rebuilt = pool.join(REBUILD_FILE);
    let copied = rebuild(&db, &rebuilt).map_err(|source| PoolError::Rebuild {
        path: meta.clone(),
        into: rebuilt.clone(),
        source: Box::new(source),
    })?;
    if !copied {
        compact_in_place(&mut db, &meta)?;
        drop(db);
        return Ok((before, meta_files::store_len(pool)));
    }
    drop(db);
    if let Form::Checked { copies } = form {
        meta_files::install_file(pool, &rebuilt, copies)?;
        return Ok((before, meta_files::store_len(pool)));
    }
    std::fs::rename(&rebuilt, &meta).map_err(|source| PoolError::Replace {
        path: meta.clone(),
        from: rebuilt.clone(),
        source,
    })?;
    std::fs::File::open(pool)
        .and_then(|d| d.sync_all())
        .map_err(|source| PoolError::SyncDir { path: pool.to_path_buf(), source })?;
    Ok((before, meta_files::store_len(pool)))
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
        tables::RECORDSIZES.name(),
        tables::BACKGROUND.name(),
        tables::REFCOUNTS.name(),
        tables::AUTO_START.name(),
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
    copy!(tables::RECORDSIZES);
    copy!(tables::BACKGROUND);
    copy!(tables::REFCOUNTS);
    copy!(tables::AUTO_START);
    tx.commit()?;
    drop(rx);
    // the copy's own transaction leaves some pages free behind it
    let mut out = out;
    while out.compact()? {}
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::{ReadableDatabase, TableHandle};

    /// A store holding a row in every table this build knows is rebuilt (not compacted in
    /// place) and the copy holds every row.
    #[test]
    fn rebuild_copies_every_table_this_build_knows() {
        let d = tempfile::tempdir().unwrap();
        let db = redb::Database::create(d.path().join("meta.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(tables::SUPERBLOCK).unwrap().insert(0u8, &b"sb"[..]).unwrap();
        tx.open_table(tables::DEVICES).unwrap().insert(0u32, &b"dev"[..]).unwrap();
        tx.open_table(tables::INODES).unwrap().insert(1u64, &b"inode"[..]).unwrap();
        tx.open_table(tables::DIRENTS).unwrap().insert(&b"d"[..], &b"dirent"[..]).unwrap();
        tx.open_table(tables::DIR_COOKIES).unwrap().insert(&b"c"[..], &b"cookie"[..]).unwrap();
        tx.open_table(tables::DIR_NEXT_COOKIE).unwrap().insert(1u64, 3u64).unwrap();
        tx.open_table(tables::XATTRS).unwrap().insert(&b"x"[..], &b"xattr"[..]).unwrap();
        tx.open_table(tables::SYMLINKS).unwrap().insert(2u64, &b"target"[..]).unwrap();
        tx.open_table(tables::ORPHANS).unwrap().insert(3u64, ()).unwrap();
        tx.open_table(tables::EXTENTS).unwrap().insert(&b"e"[..], &b"extent"[..]).unwrap();
        tx.open_table(tables::FREE_SPACE).unwrap().insert(&b"f"[..], 9u64).unwrap();
        tx.open_table(tables::BUNDLES).unwrap().insert(4u64, &b"bundle"[..]).unwrap();
        tx.open_table(tables::RECORDSIZES).unwrap().insert(5u64, 16384u32).unwrap();
        tx.open_table(tables::BACKGROUND).unwrap().insert(0u8, &b"cursor"[..]).unwrap();
        tx.open_table(tables::AUTO_START).unwrap().insert(&b"auto"[..], &b"start"[..]).unwrap();
        tx.commit().unwrap();
        let to = d.path().join(REBUILD_FILE);
        assert!(rebuild(&db, &to).unwrap(), "compacted in place instead");
        drop(db);
        let out = redb::Database::open(&to).unwrap();
        let rx = out.begin_read().unwrap();
        let mut names: Vec<String> = rx.list_tables().unwrap().map(|t| t.name().to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "auto_start",
                "background",
                "bundles",
                "devices",
                "dir_cookies",
                "dir_next_cookie",
                "dirents",
                "extents",
                "free_space",
                "inodes",
                "orphans",
                "recordsizes",
                "superblock",
                "symlinks",
                "xattrs"
            ]
        );
        assert_eq!(rx.open_table(tables::RECORDSIZES).unwrap().get(5u64).unwrap().unwrap().value(), 16384);
        assert_eq!(rx.open_table(tables::BACKGROUND).unwrap().get(0u8).unwrap().unwrap().value(), b"cursor");
        assert_eq!(rx.open_table(tables::AUTO_START).unwrap().get(&b"auto"[..]).unwrap().unwrap().value(), b"start");
        assert_eq!(rx.open_table(tables::BUNDLES).unwrap().get(4u64).unwrap().unwrap().value(), b"bundle");
    }
}
