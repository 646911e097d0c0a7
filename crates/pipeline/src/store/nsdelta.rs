//! The namespace delta: every metadata change (namespace transactions of `meta_write`,
//! attribute changes of `update_attr`) kept in memory and written to redb by the next txg
//! commit, inside its one durable redb transaction. A tar extract creates one inode per
//! entry; a redb write transaction per create (even committed non-durably) cost ~40 µs,
//! most of it redb's commit; an insert into this delta costs a few µs.
//!
//! The delta mirrors the namespace tables row by row: for each key it holds the new value
//! or a tombstone (removed). Inode rows hold whole attribute records whose `size` and
//! `blocks_bytes` mean nothing: the data path owns those (redb's committed values, or the
//! dirty state in `files`), so a delta row never goes stale when a txg commits new sizes.
//! An inode's remaining rows (extents, xattrs) are removed by the commit that applies its
//! deletion (`Delta::deleted`).
//!
//! Generations (one `NsDelta` per pool):
//!   OPEN        `open` takes every change; `meta_write` builds its changes in a private
//!               delta (so an `Err` from its closure changes nothing) and merges it into
//!               `open` in one step under the rows lock, so readers see all of it or none.
//!   COMMITTING  the txg commit takes `open` (under `meta_lock`, so no writer is half way)
//!               and makes it `committing`; a fresh `open` starts at once, so writers never
//!               wait for the commit's fdatasync.
//!   APPLIED     the commit wrote `committing` into its durable redb transaction; then it
//!               drops `committing` (and bumps `generation`). A failed commit leaves it in
//!               place: the pool is suspended and readers keep seeing the changes.
//! Readers look up `open`, then `committing`, then redb — in that order, and they start
//! their redb read only after looking at the delta: a row leaves the delta only after redb
//! holds the same value, so a reader sees each row either from the delta or from a redb
//! state that already holds it. (A redb read started before the lookup could miss a row that
//! left `committing` in between; `MetaTx` therefore re-opens its read transaction when
//! `generation` moved.)
//! Locks: `meta_lock` serializes writers (taken first); `rows` guards the generations.
//! Durability: a change is durable when the txg commit holding it is; `fsync`/`sync` wait
//! for that commit (writers mark the txg dirty), as for data.
//! Tunable: `OpenOptions::max_delta_rows` (default `options::DEFAULT_MAX_DELTA_ROWS`) — past it the txg driver is woken to commit early; past four
//! times it writers wait for a commit (`Engine::bound_delta`), bounding the delta's memory
//! (~200 B a row) when writers outrun the commits.

use crate::base::error::{EngineError, Result};
use crate::base::locks::{Mutex, Rank, RwLock};
use crate::base::units::extent_footprint;
use crate::store::metadb::MetaDb;
use crate::store::snapshot::SnapshotCache;
use redb::ReadableTable;
use rustc_hash::FxHashMap;
use squeezefs_meta::encode::{decode_inode, encode_inode_for};
use squeezefs_meta::{keys, tables, ExtentPtr, Ino, InodeAttr, StoredRecord};
use std::collections::BTreeMap;
use std::iter::Peekable;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A byte-keyed table's changes: value, or `None` for removed.
pub type ByteRows = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Changes to the namespace tables (see the block comment); `None` values are tombstones.
#[derive(Default, Debug, Clone)]
pub struct Delta {
    pub inodes: FxHashMap<Ino, Option<InodeAttr>>,
    pub dirents: ByteRows,
    pub cookies: ByteRows,
    pub next_cookie: FxHashMap<Ino, Option<u64>>,
    pub symlinks: FxHashMap<Ino, Option<Vec<u8>>>,
    pub xattrs: ByteRows,
    pub orphans: FxHashMap<Ino, bool>,
    /// files' own record sizes (`recordsizes`): bytes, or a tombstone for a file that uses
    /// the pool's again or is deleted
    pub recordsizes: FxHashMap<Ino, Option<u32>>,
    /// inodes deleted: their extents and xattr rows go at the commit
    pub deleted: Vec<Ino>,
    /// inodes created minus deleted (statfs counts them before the commit)
    pub inode_count: i64,
    /// rows written (bounds memory; see `OpenOptions::max_delta_rows`)
    pub rows: usize,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.rows == 0 && self.deleted.is_empty()
    }

    /// Whether committing this change can make the store larger: it creates inodes, adds
    /// more names than it removes, or stores xattrs or symlink targets. Deletions, renames
    /// and attribute updates do not (they may use the metadata reserve, meta_space.rs).
    pub fn grows(&self) -> bool {
        let added = |rows: &ByteRows| rows.values().filter(|v| v.is_some()).count();
        let removed = |rows: &ByteRows| rows.values().filter(|v| v.is_none()).count();
        self.inode_count > 0
            || added(&self.dirents) > removed(&self.dirents)
            || self.xattrs.values().any(Option::is_some)
            || self.symlinks.values().any(Option::is_some)
            || self.recordsizes.values().any(Option::is_some)
    }

    /// What committing this change may take in the store (meta_space.rs `charge_rows`).
    pub fn charge(&self) -> u64 {
        let bytes = |rows: &ByteRows| -> u64 {
            rows.iter().map(|(k, v)| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64).sum()
        };
        let links: u64 = self.symlinks.values().flatten().map(|t| t.len() as u64).sum();
        let value_bytes = bytes(&self.dirents) + bytes(&self.xattrs) + bytes(&self.cookies) + links;
        crate::store::meta_space::charge_rows(self.rows as u64, value_bytes)
    }

    /// Apply `later` on top of `self` (later rows win).
    pub fn merge(&mut self, later: Delta) {
        self.inodes.extend(later.inodes);
        self.dirents.extend(later.dirents);
        self.cookies.extend(later.cookies);
        self.next_cookie.extend(later.next_cookie);
        self.symlinks.extend(later.symlinks);
        self.xattrs.extend(later.xattrs);
        self.orphans.extend(later.orphans);
        self.recordsizes.extend(later.recordsizes);
        self.deleted.extend(later.deleted);
        self.inode_count += later.inode_count;
        self.rows += later.rows;
    }
}

struct Generations {
    open: Delta,
    committing: Option<Arc<Delta>>,
    /// bumped whenever `committing` is dropped (its rows are in redb from then on)
    generation: u64,
    /// inodes redb holds as of the last `committed` (set at open)
    committed_inodes: i64,
}

pub struct NsDelta {
    /// redb snapshot shared by the namespace's point reads until the next commit
    /// (snapshot.rs); readers look at the delta before they take it (block comment)
    pub snap: SnapshotCache,
    /// Serializes metadata writers (`meta_write`, `update_attr`) and the commit's take of
    /// `open`; taken before `rows`.
    pub meta_lock: Mutex<()>,
    rows: RwLock<Generations>,
    /// next inode number; persisted in the superblock at every txg commit (at open, the
    /// largest inode number in the store + 1 wins over a stale superblock value)
    next_ino: AtomicU64,
}

impl Default for NsDelta {
    fn default() -> Self {
        NsDelta {
            snap: SnapshotCache::default(),
            next_ino: AtomicU64::new(squeezefs_meta::ROOT_INO + 1),
            meta_lock: Mutex::new(Rank::MetaWriters, ()),
            rows: RwLock::new(
                Rank::NsRows,
                Generations { open: Delta::default(), committing: None, generation: 0, committed_inodes: 0 },
            ),
        }
    }
}

impl NsDelta {
    /// Look rows up in `open` then `committing`: `f` returns `Some` when a generation holds
    /// the row (value or tombstone).
    pub fn find<T>(&self, f: impl Fn(&Delta) -> Option<T>) -> Option<T> {
        let g = self.rows.read();
        f(&g.open).or_else(|| g.committing.as_deref().and_then(&f))
    }

    /// Run `f` over the generations, newest first (for range merges), holding the rows lock.
    pub fn with_layers<T>(&self, f: impl FnOnce(&[&Delta]) -> T) -> T {
        let g = self.rows.read();
        match g.committing.as_deref() {
            Some(c) => f(&[&g.open, c]),
            None => f(&[&g.open]),
        }
    }

    pub fn generation(&self) -> u64 {
        self.rows.read().generation
    }

    /// Caller holds `meta_lock`. Returns the rows now in `open`.
    pub fn publish(&self, d: Delta) -> usize {
        let mut g = self.rows.write();
        g.open.merge(d);
        g.open.rows
    }

    /// `publish`, if `check` (run while no reader can look at the generations) agrees;
    /// otherwise nothing is published and its error is returned. Caller holds `meta_lock`.
    pub fn publish_checked(&self, d: Delta, check: impl FnOnce() -> Result<()>) -> Result<usize> {
        let mut g = self.rows.write();
        check()?;
        g.open.merge(d);
        Ok(g.open.rows)
    }

    /// Caller holds `meta_lock`: `open` becomes `committing` (empty → `None`, nothing to do).
    /// A previous failed commit's rows are kept underneath.
    pub fn take_for_commit(&self) -> Option<Arc<Delta>> {
        let mut g = self.rows.write();
        if g.open.is_empty() && g.committing.is_none() {
            return None;
        }
        let open = std::mem::take(&mut g.open);
        let all = match g.committing.take() {
            Some(prev) => {
                let mut d = Arc::unwrap_or_clone(prev);
                d.merge(open);
                d
            }
            None => open,
        };
        let a = Arc::new(all);
        g.committing = Some(a.clone());
        Some(a)
    }

    /// redb durably holds `committing`'s rows.
    pub fn committed(&self) {
        let mut g = self.rows.write();
        let n = g.committing.take().map_or(0, |c| c.inode_count);
        g.committed_inodes += n;
        g.generation += 1;
    }

    /// Inodes created minus deleted in the delta.
    pub fn inode_count(&self) -> i64 {
        let g = self.rows.read();
        g.open.inode_count + g.committing.as_ref().map_or(0, |c| c.inode_count)
    }

    /// Inodes that exist: redb's count (as of the last `committed`) plus the delta's, in one
    /// read of the generations, so a commit in progress is counted exactly once.
    pub fn total_inodes(&self) -> i64 {
        let g = self.rows.read();
        g.committed_inodes + g.open.inode_count + g.committing.as_ref().map_or(0, |c| c.inode_count)
    }

    /// At open: the inodes redb holds and the next inode number.
    pub fn set_committed_inodes(&self, n: i64, next_ino: Ino) {
        self.rows.write().committed_inodes = n;
        self.next_ino.store(next_ino, Ordering::Relaxed);
    }

    /// A fresh inode number, never handed out before in this pool's durable history;
    /// `None` when they are exhausted. The counter stops at u64::MAX instead of wrapping:
    /// a wrapped counter would hand out 0, 1 (the root) and then the numbers of live inodes.
    pub fn alloc_ino(&self) -> Option<Ino> {
        self.next_ino.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < u64::MAX).then(|| n + 1)).ok()
    }

    /// The next inode number (the commit persists it).
    pub fn next_ino(&self) -> Ino {
        self.next_ino.load(Ordering::Relaxed)
    }

    /// Rows of the byte-keyed `table` in `r`: `local` (a transaction's own changes, if any),
    /// then the delta's generations, then redb, merged; `f` returns false to stop. The redb read
    /// starts under the delta's rows lock, after the delta was looked at (block comment).
    pub fn merged_rows(
        &self,
        db: &MetaDb,
        local: Option<&Delta>,
        sel: fn(&Delta) -> &ByteRows,
        table: redb::TableDefinition<&'static [u8], &'static [u8]>,
        r: KeyRange<'_>,
        mut f: impl FnMut(Vec<u8>, Vec<u8>) -> Result<bool>,
    ) -> Result<()> {
        self.with_layers(|layers| {
            let mut its: Vec<Box<dyn Iterator<Item = Row> + '_>> = Vec::new();
            if let Some(l) = local {
                its.push(layer_range(sel(l), r));
            }
            for l in layers {
                its.push(layer_range(sel(l), r));
            }
            let s = self.snap.get(db)?;
            let opened;
            let t = match s.byte_table(table) {
                Some(t) => t,
                None => {
                    opened = s.rx.open_table(table)?;
                    &opened
                }
            };
            for row in Merged::new(its, base_range(t, r)?) {
                let (k, v) = row?;
                if !f(k, v)? {
                    break;
                }
            }
            Ok(())
        })
    }
}

/// `overlay`'s attributes with the size and physical bytes of `base` (which knows them).
pub fn with_sizes_of(mut overlay: InodeAttr, base: Option<&InodeAttr>) -> InodeAttr {
    overlay.size = base.map_or(0, |b| b.size);
    overlay.blocks_bytes = base.map_or(0, |b| b.blocks_bytes);
    overlay
}

/// Keys from `lo` (included) to `hi`.
#[derive(Clone, Copy)]
pub struct KeyRange<'k> {
    pub lo: &'k [u8],
    pub hi: Bound<&'k [u8]>,
}

/// The rows of one delta table in `r`, as owned pairs.
pub fn layer_range<'a>(rows: &'a ByteRows, r: KeyRange<'_>) -> Box<dyn Iterator<Item = Row> + 'a> {
    let it = rows.range::<[u8], _>((Bound::Included(r.lo), r.hi));
    Box::new(it.map(|(k, v)| (k.clone(), v.clone())))
}

pub type Row = (Vec<u8>, Option<Vec<u8>>);

/// Rows of one table in key order: delta layers (newest first) over the base rows (redb).
/// A key takes its value from the first source holding it; tombstones hide it.
pub struct Merged<'a, B: Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>> {
    layers: Vec<Peekable<Box<dyn Iterator<Item = Row> + 'a>>>,
    base: Peekable<B>,
}

impl<'a, B: Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>> Merged<'a, B> {
    pub fn new(layers: Vec<Box<dyn Iterator<Item = Row> + 'a>>, base: B) -> Self {
        Merged { layers: layers.into_iter().map(Iterator::peekable).collect(), base: base.peekable() }
    }
}

impl<B: Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>> Iterator for Merged<'_, B> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            // smallest key among all heads
            let mut min: Option<Vec<u8>> = None;
            for l in &mut self.layers {
                if let Some((k, _)) = l.peek() {
                    if min.as_ref().is_none_or(|m| k < m) {
                        min = Some(k.clone());
                    }
                }
            }
            match self.base.peek() {
                Some(Err(_)) => return self.base.next(),
                Some(Ok((k, _))) if min.as_ref().is_none_or(|m| k < m) => min = Some(k.clone()),
                _ => {}
            }
            let key = min?;
            // the first (newest) source holding the key decides; all sources move past it
            let mut value: Option<Option<Vec<u8>>> = None;
            for l in &mut self.layers {
                if l.peek().is_some_and(|(k, _)| *k == key) {
                    let (_, v) = l.next().expect("peeked");
                    value.get_or_insert(v);
                }
            }
            if matches!(self.base.peek(), Some(Ok((k, _))) if *k == key) {
                let Some(Ok((_, v))) = self.base.next() else { unreachable!("peeked") };
                value.get_or_insert(Some(v));
            }
            if let Some(Some(v)) = value {
                return Some(Ok((key, v)));
            }
        }
    }
}

/// Base rows of a redb byte-keyed table in `r` as owned pairs.
pub fn base_range<'t>(
    t: &'t impl redb::ReadableTable<&'static [u8], &'static [u8]>,
    r: KeyRange<'_>,
) -> Result<impl Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + 't> {
    let it = t.range::<&[u8]>((Bound::Included(r.lo), r.hi))?;
    Ok(it.map(|r| r.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())).map_err(Into::into)))
}

/// An inode's record from a delta `row` (`None`: no generation holds it) over redb's
/// `base`: the row's attributes with redb's sizes (0 for an inode redb does not hold yet).
pub fn resolve_inode(ino: Ino, row: Option<Option<InodeAttr>>, base: Option<InodeAttr>) -> Result<InodeAttr> {
    match row {
        Some(Some(a)) => Ok(with_sizes_of(a, base.as_ref())),
        Some(None) => Err(EngineError::NoInode(ino)),
        None => base.ok_or(EngineError::NoInode(ino)),
    }
}

/// Write `d` into the txg commit's transaction `tx`. Space of deleted inodes' extents goes to
/// `frees`, and one bundle id per bundled record of theirs to `drops` (bundle.rs
/// `apply_drops`). Inode rows keep the sizes redb holds (the commit's layers set new ones
/// after); they are written in the compact encoding when `compact` (the pool has
/// `INCOMPAT_COMPACT_ROWS`). `recordsizes_on`: the pool has `INCOMPAT_RECORDSIZES` (without
/// it no `recordsizes` row exists, so tombstones have nothing to remove). Returns whether a
/// `recordsizes` row was written (the commit then sets the feature).
pub fn apply(
    tx: &redb::WriteTransaction,
    d: &Delta,
    granule: u64,
    compact: bool,
    frees: &mut Vec<(u32, u64, u64)>,
    drops: &mut Vec<u64>,
    recordsizes_on: bool,
) -> Result<bool> {
    {
        let mut t = tx.open_table(tables::INODES)?;
        for (&ino, row) in &d.inodes {
            match row {
                Some(a) => {
                    let cur = match t.get(ino)? {
                        Some(v) => Some(decode_inode(ino, v.value())?),
                        None => None,
                    };
                    let a = with_sizes_of(a.clone(), cur.as_ref());
                    t.insert(ino, &encode_inode_for(&a, compact)[..])?;
                }
                None => {
                    t.remove(ino)?;
                }
            }
        }
    }
    for (table, rows) in [(tables::DIRENTS, &d.dirents), (tables::DIR_COOKIES, &d.cookies), (tables::XATTRS, &d.xattrs)]
    {
        let mut t = tx.open_table(table)?;
        for (k, v) in rows {
            match v {
                Some(v) => {
                    t.insert(&k[..], &v[..])?;
                }
                None => {
                    t.remove(&k[..])?;
                }
            }
        }
    }
    {
        let mut t = tx.open_table(tables::DIR_NEXT_COOKIE)?;
        for (&dir, v) in &d.next_cookie {
            match v {
                Some(c) => {
                    t.insert(dir, *c)?;
                }
                None => {
                    t.remove(dir)?;
                }
            }
        }
    }
    {
        let mut t = tx.open_table(tables::SYMLINKS)?;
        for (&ino, v) in &d.symlinks {
            match v {
                Some(target) => {
                    t.insert(ino, &target[..])?;
                }
                None => {
                    t.remove(ino)?;
                }
            }
        }
    }
    {
        let mut t = tx.open_table(tables::ORPHANS)?;
        for (&ino, &present) in &d.orphans {
            if present {
                t.insert(ino, ())?;
            } else {
                t.remove(ino)?;
            }
        }
    }
    let wrote_recordsize = d.recordsizes.values().any(Option::is_some);
    if wrote_recordsize || (recordsizes_on && !d.recordsizes.is_empty()) {
        let mut t = tx.open_table(tables::RECORDSIZES)?;
        for (&ino, v) in &d.recordsizes {
            match v {
                Some(bytes) => {
                    t.insert(ino, *bytes)?;
                }
                None => {
                    t.remove(ino)?;
                }
            }
        }
    }
    // what deleted inodes leave in tables the delta does not mirror row by row
    let mut x = tx.open_table(tables::XATTRS)?;
    let mut e = tx.open_table(tables::EXTENTS)?;
    for &ino in &d.deleted {
        let lo = keys::ino_prefix(ino);
        let hi = keys::ino_prefix_end(ino);
        remove_prefix(&mut x, &lo, hi.as_ref().map(|h| &h[..]))?;
        let a = keys::pair(ino, 0);
        let b = keys::pair(ino, u64::MAX);
        let mut gone = Vec::new();
        for row in e.range(&a[..]..=&b[..])? {
            let (k, v) = row?;
            gone.push((k.value().to_vec(), ExtentPtr::decode(v.value())?));
        }
        for (k, ext) in gone {
            e.remove(&k[..])?;
            match ext.stored {
                StoredRecord::Device(dx) => frees.push((dx.dev, dx.offset, extent_footprint(&ext, granule))),
                StoredRecord::Bundled(b) => drops.push(b.bundle),
                StoredRecord::Inline(_) => {}
            }
        }
    }
    Ok(wrote_recordsize)
}

fn remove_prefix(t: &mut redb::Table<&[u8], &[u8]>, lo: &[u8], hi: Option<&[u8]>) -> Result<()> {
    let mut ks = Vec::new();
    {
        let it = match hi {
            Some(h) => t.range(lo..h)?,
            None => t.range(lo..)?,
        };
        for row in it {
            ks.push(row?.0.value().to_vec());
        }
    }
    for k in ks {
        t.remove(&k[..])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pairs: &[(&str, Option<&str>)]) -> ByteRows {
        pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))).collect()
    }

    fn merged(layers: &[ByteRows], base: &[(&str, &str)]) -> Vec<(String, String)> {
        let ls: Vec<Box<dyn Iterator<Item = Row> + '_>> = layers
            .iter()
            .map(|l| Box::new(l.iter().map(|(k, v)| (k.clone(), v.clone()))) as Box<dyn Iterator<Item = Row>>)
            .collect();
        let b = base.iter().map(|(k, v)| Ok((k.as_bytes().to_vec(), v.as_bytes().to_vec())));
        Merged::new(ls, b)
            .map(|r| {
                let (k, v) = r.unwrap();
                (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap())
            })
            .collect()
    }

    #[test]
    fn newest_layer_wins_and_tombstones_hide_base_rows() {
        let open = rows(&[("b", None), ("d", Some("d-open")), ("f", Some("f-open"))]);
        let committing = rows(&[("a", Some("a-com")), ("d", Some("d-com")), ("e", None)]);
        let base = [("a", "a-base"), ("b", "b-base"), ("c", "c-base"), ("e", "e-base"), ("g", "g-base")];
        let got = merged(&[open, committing], &base);
        let want = [("a", "a-com"), ("c", "c-base"), ("d", "d-open"), ("f", "f-open"), ("g", "g-base")];
        assert_eq!(got, want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>());
    }

    #[test]
    fn merge_of_only_tombstones_or_only_base_rows() {
        assert!(merged(&[rows(&[("a", None), ("b", None)])], &[("a", "1"), ("b", "2")]).is_empty());
        assert_eq!(merged(&[], &[("x", "1")]), vec![("x".to_string(), "1".to_string())]);
        assert_eq!(merged(&[rows(&[("x", Some("2"))])], &[]), vec![("x".to_string(), "2".to_string())]);
    }

    #[test]
    fn take_for_commit_moves_open_and_keeps_a_failed_commits_rows() {
        let ns = NsDelta::default();
        assert!(ns.take_for_commit().is_none(), "nothing changed: nothing to commit");
        let mut d = Delta::default();
        d.dirents.insert(b"a".to_vec(), Some(b"1".to_vec()));
        d.rows = 1;
        let _g = ns.meta_lock.lock();
        ns.publish(d);
        let c = ns.take_for_commit().expect("rows to commit");
        assert_eq!(c.dirents.len(), 1);
        // still visible while committing
        assert!(ns.find(|d| d.dirents.get(&b"a"[..]).cloned()).is_some());
        // the commit failed (no `committed`): the next take carries these rows too
        let mut d2 = Delta::default();
        d2.dirents.insert(b"b".to_vec(), Some(b"2".to_vec()));
        d2.rows = 1;
        ns.publish(d2);
        let c2 = ns.take_for_commit().unwrap();
        assert_eq!(c2.dirents.len(), 2);
        let gen = ns.generation();
        ns.committed();
        assert_eq!(ns.generation(), gen + 1);
        assert!(ns.find(|d| d.dirents.get(&b"a"[..]).cloned()).is_none());
    }
}
