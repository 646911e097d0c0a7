//! A shared redb read snapshot for the namespace's point reads (lookup, getattr, getxattr,
//! readlink, listings).
//!
//! Why: a tar extract sends ~11 FUSE requests per file and several of them end in redb
//! (a negative LOOKUP, two GETXATTR security.capability, the attribute sizes). Opening a
//! read transaction and its table per request (`begin_read`, `open_table`: a tracker lock,
//! an allocation, a walk of the table tree) was most of redb's 2.4% of the samples of a full
//! extract; the lookups themselves are cheap.
//!
//! States (one `SnapshotCache` per pool):
//!   EMPTY   no snapshot (before the first read, or the commit could not open one); the
//!           next reader opens one (`begin_read` + the four tables) and caches it with the
//!           commit generation it loaded before opening;
//!   CACHED  (generation g, snapshot opened after commit g); readers that load g, or an
//!           older generation, share it.
//! Transitions: a txg commit, right after its redb write transaction committed and before
//! anything it wrote leaves the namespace delta or the dirty cache, calls `committed`: it
//! opens the snapshot of generation g + 1 itself, installs it, then bumps the generation.
//! Opening it there keeps `begin_read` off the FUSE request threads: redb registers a reader
//! under the header lock that a commit in progress holds, so a request that opened the first
//! snapshot after a commit could wait for the next commit's fdatasync (772 such waits in a
//! Linux tarball extract, each in the middle of a CREATE). Holding the newest snapshot pins
//! no page a later commit frees: it is replaced right after that commit.
//!
//! Invariant (why a shared snapshot reads what a fresh `begin_read` would): callers look in
//! the namespace delta (or the dirty cache) first and only then call `get`. A row leaves
//! the delta only after `committed` bumped the generation, so a reader that missed a row in
//! the delta loads the new generation and gets a snapshot opened after that commit. Commits
//! that happened before the reader's call bumped the generation before it loaded it, for
//! the same reason. The only writer of redb while the pool is open is the txg commit
//! (commit.rs); a commit whose bump a reader has not seen yet still has its rows in the delta.

use crate::base::error::Result;
use crate::base::locks::Mutex;
#[allow(unused_imports)]
use redb::ReadableDatabase;
use squeezefs_meta::tables;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One read transaction with the namespace tables the point reads use, opened once.
pub struct Snapshot {
    pub inodes: redb::ReadOnlyTable<u64, &'static [u8]>,
    pub dirents: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub xattrs: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub symlinks: redb::ReadOnlyTable<u64, &'static [u8]>,
    /// files' own record sizes; `None` in a pool made before the table existed
    pub recordsizes: Option<redb::ReadOnlyTable<u64, u32>>,
    /// for the other tables (range reads of listings)
    pub rx: redb::ReadTransaction,
}

impl Snapshot {
    fn open(db: &crate::store::metadb::MetaDb) -> Result<Snapshot> {
        let rx = db.begin_read()?;
        Ok(Snapshot {
            inodes: rx.open_table(tables::INODES)?,
            dirents: rx.open_table(tables::DIRENTS)?,
            xattrs: rx.open_table(tables::XATTRS)?,
            symlinks: rx.open_table(tables::SYMLINKS)?,
            recordsizes: open_if_present(&rx, tables::RECORDSIZES)?,
            rx,
        })
    }

    /// The snapshot's table for one of the byte-keyed namespace tables, by name.
    pub fn byte_table(
        &self,
        def: redb::TableDefinition<&'static [u8], &'static [u8]>,
    ) -> Option<&redb::ReadOnlyTable<&'static [u8], &'static [u8]>> {
        use redb::TableHandle;
        match def.name() {
            n if n == tables::DIRENTS.name() => Some(&self.dirents),
            n if n == tables::XATTRS.name() => Some(&self.xattrs),
            _ => None,
        }
    }
}

/// `def` in `rx`, or `None` when the store has no such table (made before it existed).
pub fn open_if_present<K: redb::Key + 'static, V: redb::Value + 'static>(
    rx: &redb::ReadTransaction,
    def: redb::TableDefinition<K, V>,
) -> Result<Option<redb::ReadOnlyTable<K, V>>> {
    match rx.open_table(def) {
        Ok(t) => Ok(Some(t)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// See the block comment.
#[derive(Default)]
pub struct SnapshotCache {
    generation: AtomicU64,
    cached: Mutex<Option<(u64, Arc<Snapshot>)>>,
}

impl SnapshotCache {
    /// A snapshot at least as new as every commit that finished `committed` before this
    /// call. Call only after looking in the namespace delta (block comment).
    pub fn get(&self, db: &crate::store::metadb::MetaDb) -> Result<Arc<Snapshot>> {
        let g = self.generation.load(Ordering::Acquire);
        if let Some((cg, s)) = self.cached.lock().as_ref() {
            // a newer snapshot than the generation loaded reads the same: rows it holds
            // that the reader's generation did not are still in the delta, seen first
            if *cg >= g {
                return Ok(s.clone());
            }
        }
        // opened outside the lock: other readers keep going meanwhile
        let s = Arc::new(Snapshot::open(db)?);
        let mut c = self.cached.lock();
        // a newer generation's snapshot may have been installed meanwhile: keep the newest
        if c.as_ref().is_none_or(|(cg, _)| *cg <= g) {
            *c = Some((g, s.clone()));
        }
        Ok(s)
    }

    /// The txg commit's redb transaction committed (block comment). Called by the only
    /// committer, so the generation cannot move in between.
    pub fn committed(&self, db: &crate::store::metadb::MetaDb) {
        let next = self.generation.load(Ordering::Acquire) + 1;
        // the old snapshot goes first: it must not outlive the commit by a reader's choice
        // (if opening fails, readers open their own, as before the first commit)
        let fresh = {
            *self.cached.lock() = None;
            Snapshot::open(db).ok().map(Arc::new)
        };
        *self.cached.lock() = fresh.map(|s| (next, s));
        self.generation.store(next, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db_with(dir: &std::path::Path, ino: u64, v: &[u8]) -> crate::store::metadb::MetaDb {
        let db = crate::store::metadb::MetaDb::Rw(redb::Database::create(dir.join("t.redb")).unwrap());
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(tables::INODES).unwrap();
            t.insert(ino, v).unwrap();
            tx.open_table(tables::DIRENTS).unwrap();
            tx.open_table(tables::XATTRS).unwrap();
            tx.open_table(tables::SYMLINKS).unwrap();
        }
        tx.commit().unwrap();
        db
    }

    fn put(db: &crate::store::metadb::MetaDb, ino: u64, v: &[u8]) {
        let tx = db.begin_write().unwrap();
        tx.open_table(tables::INODES).unwrap().insert(ino, v).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn readers_share_one_snapshot_until_a_commit() {
        let d = tempfile::tempdir().unwrap();
        let db = db_with(d.path(), 1, b"a");
        let c = SnapshotCache::default();
        let s1 = c.get(&db).unwrap();
        let s2 = c.get(&db).unwrap();
        assert!(Arc::ptr_eq(&s1, &s2));
        put(&db, 1, b"b");
        // not announced yet: the shared snapshot still answers (the delta holds the row)
        assert_eq!(c.get(&db).unwrap().inodes.get(1).unwrap().unwrap().value(), b"a");
        c.committed(&db);
        let s3 = c.get(&db).unwrap();
        assert!(!Arc::ptr_eq(&s1, &s3));
        assert_eq!(s3.inodes.get(1).unwrap().unwrap().value(), b"b");
    }

    #[test]
    fn a_commit_replaces_the_cached_snapshot_with_its_own() {
        let d = tempfile::tempdir().unwrap();
        let db = db_with(d.path(), 1, b"a");
        let c = SnapshotCache::default();
        let s = c.get(&db).unwrap();
        put(&db, 1, b"b");
        c.committed(&db);
        assert_eq!(Arc::strong_count(&s), 1, "only this test holds the old snapshot");
        let (g, cached) = c.cached.lock().clone().expect("the commit opened the next snapshot");
        assert_eq!(g, 1);
        assert_eq!(cached.inodes.get(1).unwrap().unwrap().value(), b"b");
        // readers share it without opening their own
        assert!(Arc::ptr_eq(&c.get(&db).unwrap(), &cached));
    }
}
