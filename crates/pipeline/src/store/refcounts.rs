//! Reference counts of stored records shared between extent rows (docs/format.md
//! `refcounts`, docs/design.md §6.2).
//!
//! A device record has one reference unless the `refcounts` table holds a row for its
//! address (device, offset): then the row is the number of extent rows pointing to it (at
//! least 2). So pools that never shared a record have no table and need no rewrite, and a
//! record's row exists exactly while more than one file (or record of one file) points to it.
//!
//! The commit stage (sync/commit.rs) is the only writer: in the transaction that adds and
//! removes extent rows it adds one reference per shared record stored and drops one per
//! device extent replaced or removed, and frees a record's range only when its count reaches
//! zero. Adds and drops of one commit are summed per address before any count is read, so a
//! record shared and dropped by its original owner in the same txg is never freed.

use crate::base::error::Result;
use redb::ReadableTable;
use squeezefs_meta::{keys, tables};
use std::collections::HashMap;

/// One commit's changes of reference counts: per address (device, offset), the footprint
/// of the record there and the net change.
#[derive(Default)]
pub struct RefChanges {
    by_addr: HashMap<(u32, u64), (u64, i64)>,
    /// some change adds a reference (the commit writes the table)
    adds: bool,
}

impl RefChanges {
    /// A shared record of `len` footprint bytes at `(dev, off)` gained an extent row.
    pub fn add(&mut self, dev: u32, off: u64, len: u64) {
        self.by_addr.entry((dev, off)).or_insert((len, 0)).1 += 1;
        self.adds = true;
    }

    /// An extent row pointing to the record at `(dev, off)` (footprint `len`) went.
    pub fn drop_ref(&mut self, dev: u32, off: u64, len: u64) {
        self.by_addr.entry((dev, off)).or_insert((len, 0)).1 -= 1;
    }

    /// Apply the changes in `tx`: counts above 1 are written, a count back at 1 loses its
    /// row, and every record whose count reaches 0 is returned (device, offset, footprint)
    /// to be freed, once. `table_exists`: the pool has `INCOMPAT_SHARED_RECORDS` (else no
    /// record has a row and only this commit's adds can make one, so a record only dropped
    /// has one reference and is freed without a lookup, and the table is not created for
    /// nothing).
    pub fn apply(self, tx: &redb::WriteTransaction, table_exists: bool) -> Result<Vec<(u32, u64, u64)>> {
        let mut freed = Vec::new();
        if !table_exists && !self.adds {
            freed.extend(
                self.by_addr.into_iter().filter(|(_, (_, d))| *d < 0).map(|((dev, off), (len, _))| (dev, off, len)),
            );
            return Ok(freed);
        }
        let mut t = tx.open_table(tables::REFCOUNTS)?;
        let mut addrs: Vec<_> = self.by_addr.into_iter().collect();
        // in address order: the rows are written in key order, and the frees come out in
        // the order the space map merges them fastest
        addrs.sort_unstable_by_key(|(a, _)| *a);
        for ((dev, off), (len, delta)) in addrs {
            if delta == 0 {
                continue;
            }
            let k = keys::dev_offset(dev, off);
            let old = match t.get(&k[..])? {
                Some(v) => v.value() as i64,
                None => 1,
            };
            let new = old + delta;
            if new >= 2 {
                t.insert(&k[..], new as u64)?;
            } else {
                if old >= 2 {
                    t.remove(&k[..])?;
                }
                if new <= 0 {
                    freed.push((dev, off, len));
                }
            }
        }
        Ok(freed)
    }
}

/// The references the table counts for the record at `(dev, off)` (1 without a row), in a
/// read transaction; a pool without the table counts 1 for every record.
pub fn references(rx: &redb::ReadTransaction, dev: u32, off: u64) -> Result<u64> {
    let t = match rx.open_table(tables::REFCOUNTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(1),
        Err(e) => return Err(e.into()),
    };
    let k = keys::dev_offset(dev, off);
    Ok(t.get(&k[..])?.map_or(1, |v| v.value()))
}

/// Every row of the table: (device, offset) → references; empty without the table.
pub fn all(rx: &redb::ReadTransaction) -> Result<Vec<((u32, u64), u64)>> {
    let t = match rx.open_table(tables::REFCOUNTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for row in t.iter()? {
        let (k, v) = row?;
        if let Some(a) = keys::split_dev_offset(k.value()) {
            out.push((a, v.value()));
        }
    }
    Ok(out)
}
