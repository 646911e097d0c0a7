//! Namespace transactions: [`MetaTx`] wraps one redb write transaction, committed
//! non-durably by `Engine::meta_write` (durable at the next txg commit).
//!
//! Side effects on in-memory state (dropping a deleted inode's dirty data, freeing its
//! space) are collected here and applied by `meta_write` only after the commit succeeded.

#[allow(unused_imports)]
use redb::{ReadableDatabase, ReadableTable};
use crate::error::{EngineError, Result};
use crate::inner::Inner;
use crate::sync::extent_footprint;
use squeezefs_meta::encode::{
    decode_cookie_entry, decode_dirent, decode_inode, encode_cookie_entry, encode_dirent, encode_inode,
};
use squeezefs_meta::{keys, tables, ExtentPtr, FileKind, InodeAttr, Ino, StoredRecord};

/// An open metadata write transaction (wraps one redb write transaction).
pub struct MetaTx<'a> {
    pub(crate) tx: redb::WriteTransaction,
    pub(crate) inner: &'a Inner,
    pub(crate) deleted: Vec<Ino>,
    pub(crate) frees: Vec<(u32, u64, u64)>,
    /// inodes this transaction wrote: their redb record is current (attrs.rs)
    pub(crate) written: Vec<Ino>,
}

impl<'a> MetaTx<'a> {
    pub(crate) fn new(inner: &'a Inner, tx: redb::WriteTransaction) -> MetaTx<'a> {
        MetaTx { tx, inner, deleted: Vec::new(), frees: Vec::new(), written: Vec::new() }
    }

    /// A fresh inode number (never handed out before in this pool's durable history; a
    /// transaction that aborts just skips its number).
    pub fn alloc_ino(&mut self) -> Result<Ino> {
        let ino = self.inner.next_ino.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if ino == u64::MAX {
            return Err(EngineError::Other("inode numbers exhausted".into()));
        }
        Ok(ino)
    }

    pub fn get_inode(&mut self, ino: Ino) -> Result<InodeAttr> {
        let t = self.tx.open_table(tables::INODES)?;
        let v = t.get(ino)?.ok_or(EngineError::NoInode(ino))?;
        let mut a = decode_inode(ino, v.value())?;
        if !self.written.contains(&ino) {
            if let Some(o) = self.inner.attrs.get(ino) {
                a = crate::attrs::with_sizes_of(o, &a);
            }
        }
        if let Some(f) = self.inner.files.get(ino) {
            let fd = f.lock();
            if !fd.retired {
                a.size = fd.size;
                a.blocks_bytes = fd.blocks_bytes();
            }
        }
        Ok(a)
    }

    /// Insert or update; `size`/`blocks_bytes` are ignored (data path owns them).
    pub fn put_inode(&mut self, attr: &InodeAttr) -> Result<()> {
        if attr.ino == 0 {
            return Err(EngineError::Invalid("inode number 0 is never used".into()));
        }
        let mut t = self.tx.open_table(tables::INODES)?;
        let (size, blocks) = match t.get(attr.ino)? {
            Some(v) => {
                let old = decode_inode(attr.ino, v.value())?;
                (old.size, old.blocks_bytes)
            }
            None => (0, 0),
        };
        let mut a = attr.clone();
        a.size = size;
        a.blocks_bytes = blocks;
        t.insert(attr.ino, &encode_inode(&a)[..])?;
        self.written.push(attr.ino);
        Ok(())
    }

    /// Remove the inode, its xattrs, symlink target and data (space freed after commit).
    pub fn delete_inode(&mut self, ino: Ino) -> Result<()> {
        {
            let mut t = self.tx.open_table(tables::INODES)?;
            if t.remove(ino)?.is_none() {
                return Err(EngineError::NoInode(ino));
            }
        }
        let lo = keys::ino_prefix(ino);
        let hi = keys::ino_prefix_end(ino);
        {
            let mut x = self.tx.open_table(tables::XATTRS)?;
            remove_prefix(&mut x, &lo, hi.as_ref().map(|h| &h[..]))?;
        }
        self.tx.open_table(tables::SYMLINKS)?.remove(ino)?;
        self.tx.open_table(tables::ORPHANS)?.remove(ino)?;
        self.tx.open_table(tables::DIR_NEXT_COOKIE)?.remove(ino)?;
        {
            let mut e = self.tx.open_table(tables::EXTENTS)?;
            let a = keys::pair(ino, 0);
            let b = keys::pair(ino, u64::MAX);
            let mut gone = Vec::new();
            for row in e.range(&a[..]..=&b[..])? {
                let (k, v) = row?;
                gone.push((k.value().to_vec(), ExtentPtr::decode(v.value())?));
            }
            for (k, ext) in gone {
                e.remove(&k[..])?;
                if let StoredRecord::Device(d) = ext.stored {
                    self.frees.push((d.dev, d.offset, extent_footprint(&ext, self.inner.sector)));
                }
            }
        }
        self.deleted.push(ino);
        Ok(())
    }

    pub fn set_symlink_target(&mut self, ino: Ino, target: &[u8]) -> Result<()> {
        self.tx.open_table(tables::SYMLINKS)?.insert(ino, target)?;
        Ok(())
    }

    pub fn dir_get(&mut self, dir: Ino, name: &[u8]) -> Result<Option<(Ino, FileKind)>> {
        let t = self.tx.open_table(tables::DIRENTS)?;
        let k = keys::dir_name(dir, name);
        let r = match t.get(&k[..])? {
            Some(v) => {
                let (ino, kind, _) = decode_dirent(v.value())?;
                Some((ino, kind))
            }
            None => None,
        };
        Ok(r)
    }

    /// `Err(Exists)` if the name is taken.
    pub fn dir_insert(&mut self, dir: Ino, name: &[u8], ino: Ino, kind: FileKind) -> Result<()> {
        let k = keys::dir_name(dir, name);
        let mut t = self.tx.open_table(tables::DIRENTS)?;
        if t.get(&k[..])?.is_some() {
            return Err(EngineError::Exists);
        }
        let cookie = {
            let mut c = self.tx.open_table(tables::DIR_NEXT_COOKIE)?;
            // cookies start at 3: 1 and 2 are left for "." and ".." of readdir
            let next = c.get(dir)?.map(|v| v.value()).unwrap_or(3);
            c.insert(dir, next + 1)?;
            next
        };
        t.insert(&k[..], &encode_dirent(ino, kind, cookie)[..])?;
        let mut ct = self.tx.open_table(tables::DIR_COOKIES)?;
        let ck = keys::pair(dir, cookie);
        ct.insert(&ck[..], &encode_cookie_entry(ino, kind, name)[..])?;
        Ok(())
    }

    /// `Err(NoEntry)` if absent; returns what it removed.
    pub fn dir_remove(&mut self, dir: Ino, name: &[u8]) -> Result<(Ino, FileKind)> {
        let k = keys::dir_name(dir, name);
        let mut t = self.tx.open_table(tables::DIRENTS)?;
        let (ino, kind, cookie) = match t.remove(&k[..])? {
            Some(v) => decode_dirent(v.value())?,
            None => return Err(EngineError::NoEntry),
        };
        let mut ct = self.tx.open_table(tables::DIR_COOKIES)?;
        ct.remove(&keys::pair(dir, cookie)[..])?;
        Ok((ino, kind))
    }

    pub fn dir_is_empty(&mut self, dir: Ino) -> Result<bool> {
        let ct = self.tx.open_table(tables::DIR_COOKIES)?;
        let a = keys::pair(dir, 0);
        let b = keys::pair(dir, u64::MAX);
        let empty = ct.range(&a[..]..=&b[..])?.next().is_none();
        Ok(empty)
    }

    /// Entries of `dir` with cookie > `after`, at most `limit` (inside the transaction).
    pub fn dir_list(&mut self, dir: Ino, after: u64, limit: usize) -> Result<Vec<squeezefs_meta::DirEntry>> {
        let ct = self.tx.open_table(tables::DIR_COOKIES)?;
        list_cookies(&ct, dir, after, limit)
    }

    pub fn set_xattr(&mut self, ino: Ino, name: &[u8], value: &[u8]) -> Result<()> {
        let k = keys::dir_name(ino, name);
        self.tx.open_table(tables::XATTRS)?.insert(&k[..], value)?;
        Ok(())
    }

    /// `Err(NoEntry)` if absent.
    pub fn remove_xattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> {
        let k = keys::dir_name(ino, name);
        match self.tx.open_table(tables::XATTRS)?.remove(&k[..])? {
            Some(_) => Ok(()),
            None => Err(EngineError::NoEntry),
        }
    }

    pub fn get_xattr(&mut self, ino: Ino, name: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = keys::dir_name(ino, name);
        let t = self.tx.open_table(tables::XATTRS)?;
        let v = t.get(&k[..])?.map(|v| v.value().to_vec());
        Ok(v)
    }

    pub fn add_orphan(&mut self, ino: Ino) -> Result<()> {
        self.tx.open_table(tables::ORPHANS)?.insert(ino, ())?;
        Ok(())
    }

    pub fn remove_orphan(&mut self, ino: Ino) -> Result<()> {
        self.tx.open_table(tables::ORPHANS)?.remove(ino)?;
        Ok(())
    }
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

/// Listing in cookie order from any table handle (read or write transaction).
pub(crate) fn list_cookies(
    ct: &impl redb::ReadableTable<&'static [u8], &'static [u8]>,
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
    for row in ct.range(&a[..]..=&b[..])? {
        let (k, v) = row?;
        let Some((_, cookie)) = keys::unpair(k.value()) else { continue };
        let (ino, kind, name) = decode_cookie_entry(v.value())?;
        out.push(squeezefs_meta::DirEntry { cookie, name, ino, kind });
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}
