//! Namespace transactions: [`MetaTx`] collects one `Engine::meta_write`'s changes in a
//! private [`Delta`]; `meta_write` publishes them into the namespace delta (nsdelta.rs) in
//! one step when the closure succeeds, and drops them when it fails. Reads see the
//! transaction's own changes, then the namespace delta, then redb.

use crate::base::error::{Corruption, EngineError, InvalidArg, Result};
use crate::engine::inner::Inner;
use crate::store::nsdelta::{ByteRows, Delta, KeyRange};
use squeezefs_meta::encode::{decode_cookie_entry, decode_dirent, encode_cookie_entry_for, encode_dirent_for};
use squeezefs_meta::{keys, tables, FileKind, Ino, InodeAttr};
use std::ops::Bound;

/// An open metadata transaction (see the module comment).
pub struct MetaTx<'a> {
    pub(crate) inner: &'a Inner,
    /// this transaction's changes
    pub(crate) d: Delta,
    /// numbers `alloc_ino` handed out: their first `put_inode` creates an inode
    fresh: Vec<Ino>,
    /// inodes this transaction created (their record size is set without checks: nothing
    /// else can have seen them)
    created: Vec<Ino>,
    /// the existing file whose record size this transaction changes, and to what: checked
    /// again, under the file's lock, when the transaction is published (`Engine::meta_write`)
    pub(crate) rs_change: Option<(Ino, u64)>,
    /// the shared redb snapshot for point reads (snapshot.rs), with the delta generation
    /// it was taken at
    rx: Option<(u64, std::sync::Arc<crate::store::snapshot::Snapshot>)>,
}

fn dirents(d: &Delta) -> &ByteRows {
    &d.dirents
}
fn cookies(d: &Delta) -> &ByteRows {
    &d.cookies
}
fn xattrs(d: &Delta) -> &ByteRows {
    &d.xattrs
}

impl<'a> MetaTx<'a> {
    pub(crate) fn new(inner: &'a Inner) -> MetaTx<'a> {
        MetaTx { inner, d: Delta::default(), fresh: Vec::new(), created: Vec::new(), rs_change: None, rx: None }
    }

    /// A redb read transaction that sees every row that has left the delta (nsdelta.rs):
    /// taken again when the delta's generation moved since. It is the pool's shared
    /// snapshot, not a `begin_read` of our own: the txg commit opens that one, so a
    /// namespace change never waits on redb's reader registration behind a commit.
    fn rx(&mut self) -> Result<&redb::ReadTransaction> {
        let gen = self.inner.ns.generation();
        if self.rx.as_ref().is_none_or(|(g, _)| *g != gen) {
            self.rx = Some((gen, self.inner.ns.snap.get(&self.inner.db)?));
        }
        Ok(&self.rx.as_ref().expect("just set").1.rx)
    }

    /// A row of a byte-keyed table: this transaction's, the delta's, else redb's.
    fn row(
        &mut self,
        sel: fn(&Delta) -> &ByteRows,
        table: redb::TableDefinition<&'static [u8], &'static [u8]>,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if let Some(v) = sel(&self.d).get(key) {
            return Ok(v.clone());
        }
        if let Some(v) = self.inner.ns.find(|d| sel(d).get(key).cloned()) {
            return Ok(v);
        }
        let t = self.rx()?.open_table(table)?;
        let v = t.get(key)?.map(|v| v.value().to_vec());
        Ok(v)
    }

    fn put_row(&mut self, sel: fn(&mut Delta) -> &mut ByteRows, key: Vec<u8>, value: Option<Vec<u8>>) {
        sel(&mut self.d).insert(key, value);
        self.d.rows += 1;
    }

    /// A fresh inode number (never handed out before in this pool's durable history; a
    /// transaction that aborts just skips its number).
    pub fn alloc_ino(&mut self) -> Result<Ino> {
        let ino = self.inner.ns.alloc_ino().ok_or(EngineError::InodesExhausted)?;
        self.fresh.push(ino);
        Ok(ino)
    }

    /// Current attributes (sizes from the data path).
    pub fn get_inode(&mut self, ino: Ino) -> Result<InodeAttr> {
        let row = match self.d.inodes.get(&ino) {
            Some(r) => Some(r.clone()),
            None => self.inner.ns.find(|d| d.inodes.get(&ino).cloned()),
        };
        let inner = self.inner;
        let live = inner.live_sizes(ino);
        let a = match row {
            Some(None) => return Err(EngineError::NoInode(ino)),
            Some(Some(a)) if live.is_some() => a,
            row => {
                let rx = self.rx()?;
                crate::store::nsdelta::resolve_inode(ino, row, crate::engine::inner::base_inode(rx, ino)?)?
            }
        };
        Ok(crate::engine::inner::with_live_sizes(a, live))
    }

    /// Insert or update; `size`/`blocks_bytes` are ignored (data path owns them).
    pub fn put_inode(&mut self, attr: &InodeAttr) -> Result<()> {
        if attr.ino == 0 {
            return Err(InvalidArg::InodeZero.into());
        }
        if let Some(i) = self.fresh.iter().position(|&f| f == attr.ino) {
            self.fresh.swap_remove(i);
            self.created.push(attr.ino);
            self.d.inode_count += 1;
        }
        self.d.inodes.insert(attr.ino, Some(attr.clone()));
        self.d.rows += 1;
        Ok(())
    }

    /// Remove the inode, its xattrs, symlink target and data (space freed by the commit that
    /// makes the removal durable).
    pub fn delete_inode(&mut self, ino: Ino) -> Result<()> {
        self.get_inode(ino)?;
        self.d.inodes.insert(ino, None);
        self.d.symlinks.insert(ino, None);
        self.d.orphans.insert(ino, false);
        self.d.next_cookie.insert(ino, None);
        self.d.recordsizes.insert(ino, None);
        // xattr rows in the delta: tombstoned now; redb's go at the commit
        let lo = keys::ino_prefix(ino);
        let hi = keys::ino_prefix_end(ino);
        let r = KeyRange { lo: &lo, hi: hi.as_ref().map_or(Bound::Unbounded, |h| Bound::Excluded(&h[..])) };
        let mut names: Vec<Vec<u8>> = crate::store::nsdelta::layer_range(&self.d.xattrs, r).map(|(k, _)| k).collect();
        self.inner.ns.with_layers(|ls| {
            for l in ls {
                names.extend(crate::store::nsdelta::layer_range(&l.xattrs, r).map(|(k, _)| k));
            }
        });
        for k in names {
            self.d.xattrs.insert(k, None);
        }
        self.d.deleted.push(ino);
        self.d.inode_count -= 1;
        self.d.rows += 6;
        Ok(())
    }

    /// The record size of file `ino` in bytes (its own, else the pool's), as this
    /// transaction would leave it.
    pub fn record_size(&mut self, ino: Ino) -> Result<u64> {
        match self.d.recordsizes.get(&ino) {
            Some(Some(b)) => Ok(u64::from(*b)),
            Some(None) => Ok(self.inner.recordsize),
            None => match self.inner.dirty.files.get(ino) {
                Some(f) => Ok(f.lock().rs),
                None => self.inner.record_size(ino),
            },
        }
    }

    /// Make regular file `ino`'s records `bytes` long (a power of two from 4 KiB to 1 MiB;
    /// the pool's record size drops its own). A file created by this transaction takes it
    /// as it is; an existing one only while it is empty (`RecordSizeOfFileWithData`
    /// otherwise), and once its old records are freed durably (`RecordSizeBusy` until the
    /// commit that frees them). The record size is stored only when it differs from the
    /// pool's (`recordsizes` table; the commit of the pool's first row sets
    /// `INCOMPAT_RECORDSIZES`).
    pub fn set_record_size(&mut self, ino: Ino, bytes: u64) -> Result<()> {
        if !crate::base::options::recordsize_supported(bytes) {
            return Err(InvalidArg::RecordSizeUnsupported { bytes }.into());
        }
        let row = (bytes != self.inner.recordsize).then_some(bytes as u32);
        if self.created.contains(&ino) || self.fresh.contains(&ino) {
            // nothing else has seen the inode: no data, no FileData, no row to drop
            if row.is_some() {
                self.d.recordsizes.insert(ino, row);
                self.d.rows += 1;
            } else {
                self.d.recordsizes.remove(&ino);
            }
            return Ok(());
        }
        let a = self.get_inode(ino)?;
        if a.kind != FileKind::File {
            return Err(InvalidArg::RecordSizeNotAFile { ino }.into());
        }
        let now = self.record_size(ino)?;
        if now == bytes {
            return Ok(());
        }
        if a.size > 0 {
            return Err(InvalidArg::RecordSizeOfFileWithData { ino, size: a.size, recordsize: now }.into());
        }
        if self.rs_change.is_some_and(|(i, _)| i != ino) {
            return Err(InvalidArg::RecordSizeManyFiles.into());
        }
        self.rs_change = Some((ino, bytes));
        self.d.recordsizes.insert(ino, row);
        self.d.rows += 1;
        Ok(())
    }

    pub fn set_symlink_target(&mut self, ino: Ino, target: &[u8]) -> Result<()> {
        self.d.symlinks.insert(ino, Some(target.to_vec()));
        self.d.rows += 1;
        Ok(())
    }

    pub fn dir_get(&mut self, dir: Ino, name: &[u8]) -> Result<Option<(Ino, FileKind)>> {
        let k = keys::dir_name(dir, name);
        match self.row(dirents, tables::DIRENTS, &k)? {
            Some(v) => {
                let (ino, kind, _) = decode_dirent(&v)?;
                Ok(Some((ino, kind)))
            }
            None => Ok(None),
        }
    }

    /// `Err(Exists)` if the name is taken.
    pub fn dir_insert(&mut self, dir: Ino, name: &[u8], ino: Ino, kind: FileKind) -> Result<()> {
        let k = keys::dir_name(dir, name);
        if self.row(dirents, tables::DIRENTS, &k)?.is_some() {
            return Err(EngineError::Exists);
        }
        // cookies start at 3: 1 and 2 are left for "." and ".." of readdir
        let cookie = match self.d.next_cookie.get(&dir).copied() {
            Some(c) => c,
            None => match self.inner.ns.find(|d| d.next_cookie.get(&dir).copied()) {
                Some(c) => c,
                None => self.rx()?.open_table(tables::DIR_NEXT_COOKIE)?.get(dir)?.map(|v| v.value()),
            },
        }
        .unwrap_or(3);
        let next = cookie.checked_add(1).ok_or_else(|| EngineError::from(Corruption::CookiesExhausted { dir }))?;
        self.d.next_cookie.insert(dir, Some(next));
        let compact = self.inner.compact_rows;
        self.put_row(|d| &mut d.dirents, k, Some(encode_dirent_for(ino, kind, cookie, compact)));
        let entry = encode_cookie_entry_for(ino, kind, name, compact);
        self.put_row(|d| &mut d.cookies, keys::pair(dir, cookie).to_vec(), Some(entry));
        Ok(())
    }

    /// `Err(NoEntry)` if absent; returns what it removed.
    pub fn dir_remove(&mut self, dir: Ino, name: &[u8]) -> Result<(Ino, FileKind)> {
        let k = keys::dir_name(dir, name);
        let Some(v) = self.row(dirents, tables::DIRENTS, &k)? else {
            return Err(EngineError::NoEntry);
        };
        let (ino, kind, cookie) = decode_dirent(&v)?;
        self.put_row(|d| &mut d.dirents, k, None);
        self.put_row(|d| &mut d.cookies, keys::pair(dir, cookie).to_vec(), None);
        Ok((ino, kind))
    }

    pub fn dir_is_empty(&mut self, dir: Ino) -> Result<bool> {
        Ok(self.dir_list(dir, 0, 1)?.is_empty())
    }

    /// Entries of `dir` with cookie > `after`, at most `limit` (inside the transaction).
    pub fn dir_list(&mut self, dir: Ino, after: u64, limit: usize) -> Result<Vec<squeezefs_meta::DirEntry>> {
        list_cookies(self.inner, Some(&self.d), dir, after, limit)
    }

    pub fn set_xattr(&mut self, ino: Ino, name: &[u8], value: &[u8]) -> Result<()> {
        self.put_row(|d| &mut d.xattrs, keys::dir_name(ino, name), Some(value.to_vec()));
        Ok(())
    }

    /// `Err(NoEntry)` if absent.
    pub fn remove_xattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> {
        let k = keys::dir_name(ino, name);
        if self.row(xattrs, tables::XATTRS, &k)?.is_none() {
            return Err(EngineError::NoEntry);
        }
        self.put_row(|d| &mut d.xattrs, k, None);
        Ok(())
    }

    pub fn get_xattr(&mut self, ino: Ino, name: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = keys::dir_name(ino, name);
        self.row(xattrs, tables::XATTRS, &k)
    }

    pub fn add_orphan(&mut self, ino: Ino) -> Result<()> {
        self.d.orphans.insert(ino, true);
        self.d.rows += 1;
        Ok(())
    }

    pub fn remove_orphan(&mut self, ino: Ino) -> Result<()> {
        self.d.orphans.insert(ino, false);
        self.d.rows += 1;
        Ok(())
    }
}

/// Listing of `dir` in cookie order: `local` (a transaction's changes), the namespace
/// delta and redb merged.
pub(crate) fn list_cookies(
    inner: &Inner,
    local: Option<&Delta>,
    dir: Ino,
    after: u64,
    limit: usize,
) -> Result<Vec<squeezefs_meta::DirEntry>> {
    let mut out = Vec::new();
    if limit == 0 || after == u64::MAX {
        return Ok(out);
    }
    let a = keys::pair(dir, after + 1);
    let b = keys::pair(dir, u64::MAX);
    inner.ns.merged_rows(
        &inner.db,
        local,
        cookies,
        tables::DIR_COOKIES,
        KeyRange { lo: &a, hi: Bound::Included(&b) },
        |k, v| {
            let Some((_, cookie)) = keys::unpair(&k) else { return Ok(true) };
            let (ino, kind, name) = decode_cookie_entry(&v)?;
            out.push(squeezefs_meta::DirEntry { cookie, name, ino, kind });
            Ok(out.len() < limit)
        },
    )?;
    Ok(out)
}
