//! compsize-like usage: per (algorithm, level), bytes on disk, uncompressed and referenced.
//!
//! A record shared by `n` extent rows (copies, store/refcounts.rs) counts `1/n` of its
//! disk and uncompressed bytes in each file (rounded down), so the rows of every file of a
//! pool added up count each stored record once; its referenced bytes count whole in each
//! file, as compsize's "referenced" does.

use crate::base::error::Result;
use crate::base::units::extent_footprint;
use crate::engine::inner::Inner;
use squeezefs_codec::Algorithm;
use squeezefs_meta::{keys, tables, ExtentPtr, Ino, StoredRecord};
use std::collections::BTreeMap;

/// One row of `squeezefs stats` (compsize columns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    pub alg: squeezefs_codec::Algorithm,
    pub level: i32,
    /// bytes on disk
    pub disk_bytes: u64,
    /// bytes before compression
    pub uncompressed_bytes: u64,
    /// logical bytes referenced by files
    pub referenced_bytes: u64,
}

pub fn usage(inner: &Inner, ino: Ino) -> Result<Vec<UsageRow>> {
    inner.inode_record(ino)?;
    let rx = inner.db.begin_read()?;
    let t = rx.open_table(tables::EXTENTS)?;
    let a = keys::pair(ino, 0);
    let b = keys::pair(ino, u64::MAX);
    let shared_on = inner.shared_on.load(std::sync::atomic::Ordering::Acquire);
    let mut rows: BTreeMap<(u8, i32), (u64, u64, u64)> = BTreeMap::new();
    for row in t.range(&a[..]..=&b[..])? {
        let (_, v) = row?;
        let e = ExtentPtr::decode(v.value())?;
        let refs = match e.stored {
            StoredRecord::Device(d) if shared_on => crate::store::refcounts::references(&rx, d.dev, d.offset)?.max(1),
            _ => 1,
        };
        let r = rows.entry((e.alg, e.level)).or_default();
        r.0 += extent_footprint(&e, inner.granule) / refs;
        r.1 += u64::from(e.logical) / refs;
        r.2 += u64::from(e.logical);
    }
    Ok(rows
        .into_iter()
        .map(|((alg, level), (disk, logical, referenced))| UsageRow {
            alg: Algorithm::from_id(alg).unwrap_or(Algorithm::None),
            level,
            disk_bytes: disk,
            uncompressed_bytes: logical,
            referenced_bytes: referenced,
        })
        .collect())
}
