//! Namespace and attribute reads: each merges the namespace delta over the committed store
//! (store/nsdelta.rs, store/snapshot.rs), so a read sees every change published before it.

use crate::base::error::{EngineError, Result};
use crate::engine::inner::Inner;
use crate::{base, engine, store};
use redb::ReadableTable;
use squeezefs_meta::{encode::decode_inode, keys, tables, BgCursor, ExtentPtr, FileKind, Ino, InodeAttr};
use std::collections::HashMap;

/// The work of `Engine::record_size`, whose doc states the contract.
pub(crate) fn record_size(inner: &Inner, ino: Ino) -> Result<u32> {
    inner.check_open()?;
    if let Some(f) = inner.dirty.files.get(ino) {
        let fd = f.lock();
        if !fd.retired {
            return Ok(fd.rs as u32);
        }
    }
    inner.inode_record(ino)?;
    Ok(inner.record_size(ino)? as u32)
}

/// The work of `Engine::getattr`, whose doc states the contract.
pub(crate) fn getattr(inner: &Inner, ino: Ino) -> Result<InodeAttr> {
    inner.check_open()?;
    let live = inner.live_sizes(ino);
    if live.is_some() {
        // sizes known: redb is needed only for an inode no delta holds
        if let Some(row) = inner.ns.find(|d| d.inodes.get(&ino).cloned()) {
            let a = row.ok_or(EngineError::NoInode(ino))?;
            return Ok(engine::inner::with_live_sizes(a, live));
        }
    }
    Ok(engine::inner::with_live_sizes(inner.inode_record(ino)?, live))
}

/// The work of `Engine::lookup`, whose doc states the contract.
pub(crate) fn lookup(inner: &Inner, dir: Ino, name: &[u8]) -> Result<Option<(Ino, FileKind)>> {
    inner.check_open()?;
    let k = keys::dir_name(dir, name);
    match inner.row(|d| &d.dirents, tables::DIRENTS, &k)? {
        Some(v) => {
            let (ino, kind, _) = squeezefs_meta::encode::decode_dirent(&v)?;
            Ok(Some((ino, kind)))
        }
        None => Ok(None),
    }
}

/// The work of `Engine::get_xattr`, whose doc states the contract.
pub(crate) fn get_xattr(inner: &Inner, ino: Ino, name: &[u8]) -> Result<Option<Vec<u8>>> {
    inner.check_open()?;
    let k = keys::dir_name(ino, name);
    inner.row(|d| &d.xattrs, tables::XATTRS, &k)
}

/// The work of `Engine::list_xattr`, whose doc states the contract.
pub(crate) fn list_xattr(inner: &Inner, ino: Ino) -> Result<Vec<Vec<u8>>> {
    inner.check_open()?;
    let lo = keys::ino_prefix(ino);
    let hi = keys::ino_prefix_end(ino);
    let r = store::nsdelta::KeyRange {
        lo: &lo,
        hi: hi.as_ref().map_or(std::ops::Bound::Unbounded, |h| std::ops::Bound::Excluded(&h[..])),
    };
    let mut out = Vec::new();
    inner.ns.merged_rows(
        &inner.db,
        None,
        |d| &d.xattrs,
        tables::XATTRS,
        r,
        |k, _| {
            if let Some((_, name)) = keys::split_ino_name(&k) {
                out.push(name.to_vec());
            }
            Ok(true)
        },
    )?;
    Ok(out)
}

/// The work of `Engine::read_link`, whose doc states the contract.
pub(crate) fn read_link(inner: &Inner, ino: Ino) -> Result<Vec<u8>> {
    inner.check_open()?;
    if let Some(row) = inner.ns.find(|d| d.symlinks.get(&ino).cloned()) {
        return row.ok_or(EngineError::NoInode(ino));
    }
    let s = inner.ns.snap.get(&inner.db)?;
    let v = s.symlinks.get(ino)?.ok_or(EngineError::NoInode(ino))?.value().to_vec();
    Ok(v)
}

/// The work of `Engine::orphans`, whose doc states the contract.
pub(crate) fn orphans(inner: &Inner) -> Result<Vec<Ino>> {
    inner.check_open()?;
    let mut delta: HashMap<Ino, bool> = HashMap::new();
    inner.ns.with_layers(|ls| {
        for l in ls.iter().rev() {
            delta.extend(l.orphans.iter().map(|(&i, &p)| (i, p)));
        }
    });
    let rx = inner.db.begin_read()?;
    let t = rx.open_table(tables::ORPHANS)?;
    let mut v = Vec::new();
    for row in t.iter()? {
        let ino = row?.0.value();
        if delta.get(&ino) != Some(&false) {
            v.push(ino);
        }
    }
    v.extend(delta.into_iter().filter(|&(_, p)| p).map(|(i, _)| i));
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// The work of `Engine::extents`, whose doc states the contract.
pub(crate) fn extents(inner: &Inner, ino: Ino) -> Result<Vec<(u64, ExtentPtr)>> {
    inner.check_open()?;
    let rs = inner.record_size(ino)?;
    let rx = inner.db.begin_read()?;
    let t = rx.open_table(tables::EXTENTS)?;
    let a = keys::pair(ino, 0);
    let b = keys::pair(ino, u64::MAX);
    let mut out = Vec::new();
    for row in t.range(&a[..]..=&b[..])? {
        let (k, v) = row?;
        if let Some((_, idx)) = keys::unpair(k.value()) {
            out.push((base::units::record_start_byte(idx, rs), ExtentPtr::decode(v.value())?));
        }
    }
    Ok(out)
}

/// The work of `Engine::background_cursor`, whose doc states the contract.
pub(crate) fn background_cursor(inner: &Inner) -> Result<Option<BgCursor>> {
    inner.check_open()?;
    if let Some(c) = inner.bg.pending() {
        return Ok(Some(c));
    }
    let rx = inner.db.begin_read()?;
    let t = match rx.open_table(tables::BACKGROUND) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let v = t.get(0u8)?;
    Ok(match v {
        Some(v) => Some(BgCursor::decode(v.value())?),
        None => None,
    })
}

/// The work of `Engine::committed_attr`, whose doc states the contract.
pub(crate) fn committed_attr(inner: &Inner, ino: Ino) -> Result<InodeAttr> {
    let rx = inner.db.begin_read()?;
    let t = rx.open_table(tables::INODES)?;
    let v = t.get(ino)?.ok_or(EngineError::NoInode(ino))?;
    Ok(decode_inode(ino, v.value())?)
}
