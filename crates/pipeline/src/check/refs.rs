//! fsck of shared records: every extent row pointing to a device record counts as one
//! reference, and the references of each record must equal what the `refcounts` table says
//! (store/refcounts.rs: its row, else 1). A record with more rows than counted would be
//! freed while a file still points to it (over-referenced); one with fewer is never freed
//! (a leaked reference); a row naming no record is a leak of the row. The pool must have
//! `INCOMPAT_SHARED_RECORDS` when it has rows or a record referenced twice. The device
//! extents are then left with one entry per record, so the space checks count each stored
//! record once however many files point to it.

use squeezefs_meta::{Features, Ino};
use std::collections::BTreeMap;

/// One device extent as fsck collects it: (offset, footprint, owning inode, birth txg).
pub type Ref = (u64, u64, Ino, u64);

/// What the reference check found, for the report.
#[derive(Default)]
pub struct RefTotals {
    /// records referenced more than once
    pub shared_records: u64,
    /// footprint bytes of those records (each counted once)
    pub shared_bytes: u64,
}

/// Check the references of every device (`per_dev[dev]`: its extents' references, any
/// order) against `rows` (the table's rows: (device, offset) → references); `problems`
/// gets what is wrong. Returns each device's records, one entry per address, and the
/// totals.
pub fn check(
    per_dev: Vec<Vec<Ref>>,
    rows: Vec<((u32, u64), u64)>,
    incompat: u64,
    problems: &mut Vec<String>,
) -> (Vec<Vec<Ref>>, RefTotals) {
    let mut counted: BTreeMap<(u32, u64), u64> = rows.into_iter().collect();
    let mut totals = RefTotals::default();
    let flagged = incompat & Features::INCOMPAT_SHARED_RECORDS != 0;
    if !flagged && !counted.is_empty() {
        problems.push(format!(
            "{} records have a reference count but the superblock lacks the SHARED_RECORDS feature",
            counted.len()
        ));
    }
    let mut out = Vec::with_capacity(per_dev.len());
    for (dev, mut refs) in per_dev.into_iter().enumerate() {
        let dev = dev as u32;
        refs.sort_unstable();
        let mut unique: Vec<Ref> = Vec::with_capacity(refs.len());
        let mut i = 0;
        while i < refs.len() {
            let (off, len, _, _) = refs[i];
            let mut j = i + 1;
            while j < refs.len() && refs[j].0 == off {
                j += 1;
            }
            let group = &refs[i..j];
            let n = group.len() as u64;
            let want = counted.remove(&(dev, off));
            if let Some(w) = want.filter(|&w| w < 2) {
                problems.push(format!(
                    "device {dev} offset {off}: reference count row holds {w} (rows are kept only for 2 or more)"
                ));
            }
            let want = want.unwrap_or(1);
            if n != want {
                let inodes: Vec<String> = group.iter().map(|r| r.2.to_string()).collect();
                let what = if n > want {
                    "over-referenced: it would be freed while a file still points to it"
                } else {
                    "a leaked reference: it would never be freed"
                };
                problems.push(format!(
                    "device {dev} offset {off}: {n} extent rows point to the record (inodes {}) but its reference count is {want} ({what})",
                    inodes.join(", ")
                ));
            }
            if group.iter().any(|r| r.1 != len) {
                problems.push(format!("device {dev} offset {off}: extents pointing to one record differ in length"));
            }
            if n > 1 {
                totals.shared_records += 1;
                totals.shared_bytes += len;
                if !flagged {
                    problems.push(format!(
                        "device {dev} offset {off}: {n} extent rows point to one record but the superblock lacks the SHARED_RECORDS feature"
                    ));
                }
            }
            unique.push(refs[i]);
            i = j;
        }
        out.push(unique);
    }
    for ((dev, off), n) in counted {
        problems.push(format!(
            "device {dev} offset {off}: the reference count says {n} but no extent points there (leaked row)"
        ));
    }
    (out, totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_must_match_the_rows() {
        let flag = Features::INCOMPAT_SHARED_RECORDS;
        // two files share the record at 4096; 8192 has one reference
        let refs = vec![vec![(4096, 100, 5, 1), (8192, 50, 5, 1), (4096, 100, 6, 1)]];
        let mut p = Vec::new();
        let (u, t) = check(refs.clone(), vec![((0, 4096), 2)], flag, &mut p);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(u[0].len(), 2);
        assert_eq!((t.shared_records, t.shared_bytes), (1, 100));
        // no row: over-referenced
        let mut p = Vec::new();
        check(refs.clone(), vec![], flag, &mut p);
        assert!(p.iter().any(|m| m.contains("over-referenced") && m.contains("inodes 5, 6")), "{p:?}");
        // a row too many: a leaked reference and a leaked row
        let mut p = Vec::new();
        check(refs.clone(), vec![((0, 4096), 3), ((0, 9999), 2)], flag, &mut p);
        assert!(p.iter().any(|m| m.contains("leaked reference")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("9999") && m.contains("leaked row")), "{p:?}");
        // no feature flag
        let mut p = Vec::new();
        check(refs, vec![((0, 4096), 2)], 0, &mut p);
        assert!(p.iter().any(|m| m.contains("SHARED_RECORDS")), "{p:?}");
    }
}
