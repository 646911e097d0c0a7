//! Bundles: the short last records of several files (small files, tails of larger ones)
//! compressed together and stored as one record, each file's extent pointing at its slice
//! of the decoded bundle (docs/format.md, `bundles`). One codec call over many small
//! records finds the redundancy between them (the headers of a source tree share most of
//! their words) that per-record compression cannot, and one row per bundle replaces the
//! inline rows and per-record padding of small files.
//!
//! Life of a bundle (the stages are sync/stages.rs `STAGES`):
//!   PLANNED     `select` (stage `bundle`) chose its members among the txg's records and
//!               copied their bytes back to back into one buffer;
//!   COMPRESSING one compress job on the workers, with the sync stage's own jobs (stage
//!               `compress`);
//!   PLACED      `place` (stage `place`) put it on a device like any record and queued its
//!               write; each member got an extent pointer to its slice;
//!   LIVE        the txg's commit (commit.rs) wrote the bundle row (member count = its
//!               members) in the same transaction as the members' extent rows;
//!   FREED       every commit that removes member extent rows (a record rewritten, cut by a
//!               truncation, punched, its file deleted) decrements the count in the same
//!               transaction (`apply_drops`); the one that reaches 0 deletes the row and
//!               frees the bundle's range like any freed record (reused only after that
//!               commit is durable).
//! A bundle is never changed in place: a member that changes is written anew by its txg
//! (copy on write; read-modify-write of a partial change reads the old slice through the
//! bundle, read/path.rs `load_bundled`), and the bundle keeps its space until its last member
//! is gone.
//! A txg that fails before its commit gives the bundle's placement back as any record's.
//!
//! Which records: in a pool with `INCOMPAT_BUNDLES`, on an engine opened with
//! `OpenOptions::bundle_small_records`, a record shorter than its file's own record size
//! (`Layer::rs`: only a file's last record can be) and shorter than the pool's record size,
//! that is held raw, was not compressed early, is not all zeros (those become holes) and
//! whose policy compresses. They are grouped in the txg's order (inode number, then record
//! index), per policy, into bundles of at most the pool's **bundle size** (superblock,
//! docs/format.md §2: a power of two from the record size to 4 MiB, by default twice the
//! record size; the record size itself in pools made before the field); a group of fewer
//! than `MIN_MEMBERS` is stored the ordinary way. A member is shorter than the pool's
//! record size and a bundle holds at least one record size, so every bundle has room for
//! a second member.
//!
//! Files with a record size of their own (docs/format.md `recordsizes`) take part like the
//! others: a member's slice is its last record, cut at its own record size by the dirty
//! cache, so reading it back maps file offsets with that size (read/path.rs `load_bundled`);
//! the bundle around it is a unit of storage only and never bigger than the pool's bundle
//! size, whatever its members' files use. Full records are never bundled: a file with
//! 16 KiB records keeps them each on its own (records that small are chosen to be read and
//! rewritten one at a time, which a bundle would undo), and the tail of a 1 MiB-record file
//! joins a bundle only when it is shorter than the pool's record size.
//!
//! The bundle size bounds what reading one small file costs (the whole bundle is read and
//! decoded, then cached, read/path.rs `load_bundled`) and what compressing one bundle needs
//! (the context class of its length, compress/queue.rs `CONTEXT_BLOCKS`); every read, cache and
//! check path bounds bundles by it (read/path.rs, scrub.rs `read_bundle`, fsck.rs
//! `check_bundles`), never by the record size.
//!
//! Tunables: `MIN_MEMBERS`; the bundle size is the pool's (mkfs `--bundle-size`).

use crate::base::error::{Corruption, Result};
use crate::base::units::granule_bytes;
use crate::compress::policy::{Compressed, Policy};
use crate::space::devq::Payload;
use crate::txg::dirty::{Layer, Rec};
use redb::ReadableTable;
use squeezefs_codec::heuristic::is_zeros;
use squeezefs_meta::bundle::member_share;
use squeezefs_meta::{tables, Bundle, BundleSlice, DeviceExtent, ExtentPtr, Ino, StoredRecord};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// Fewest members worth a bundle: one member alone gains nothing from it.
pub const MIN_MEMBERS: usize = 2;

/// The engine's bundle state: whether it bundles (fixed at open), and the next bundle id.
pub struct Bundles {
    enabled: bool,
    next_id: AtomicU64,
}

impl Bundles {
    /// Bundling on or off, and the first id to hand out (the largest id in the store + 1,
    /// `next_id`; ids of freed bundles may come back after a reopen, when nothing refers to
    /// them any more).
    pub fn new(enabled: bool, next_id: u64) -> Bundles {
        Bundles { enabled, next_id: AtomicU64::new(next_id.max(1)) }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn alloc_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Stage `bundle` (after `cut`): take the records that go into bundles out of `jobs`
    /// (which stay in job order) and group them (`recordsize`: the pool's, which a member
    /// is shorter than; `bundle_size`: the pool's, the bundles' bound, at least
    /// `recordsize`; each layer's own `rs` says which of its records is short; `global`:
    /// the pool's policy, for layers without their own). `jobs` must be in job order.
    pub fn select(
        &self,
        recordsize: u64,
        bundle_size: u64,
        global: Policy,
        frozen: &[(Ino, Arc<Layer>)],
        jobs: Vec<Job>,
    ) -> (Vec<Job>, Vec<Plan>) {
        if !self.enabled {
            return (jobs, Vec::new());
        }
        let member_max = recordsize as usize;
        let cap = bundle_size.max(recordsize) as usize;
        let mut keep = Vec::with_capacity(jobs.len());
        // per policy: the group being filled
        let mut open: Vec<Group> = Vec::new();
        // (policy, members, their bytes)
        let mut groups: Vec<(Policy, Vec<Job>, usize)> = Vec::new();
        for (li, idx) in jobs {
            let layer = &frozen[li].1;
            let policy = layer.policy.unwrap_or(global);
            let len = match layer.recs.get(&idx) {
                Some(Rec::Data(d))
                    if !policy.stores_raw()
                        && d.early().is_none()
                        && d.raw().is_some_and(|b| is_member(b, layer.rs as usize, member_max)) =>
                {
                    d.len()
                }
                _ => {
                    keep.push((li, idx));
                    continue;
                }
            };
            let g = match open.iter().position(|g| g.policy == policy) {
                Some(g) => g,
                None => {
                    open.push(Group { policy, jobs: Vec::new(), bytes: 0 });
                    open.len() - 1
                }
            };
            let group = &mut open[g];
            if group.bytes + len > cap {
                groups.push((policy, std::mem::take(&mut group.jobs), group.bytes));
                group.bytes = 0;
            }
            group.jobs.push((li, idx));
            group.bytes += len;
        }
        groups.extend(open.into_iter().map(|g| (g.policy, g.jobs, g.bytes)));
        let mut plans = Vec::new();
        for (policy, members, bytes) in groups {
            if members.len() < MIN_MEMBERS {
                keep.extend(members);
                continue;
            }
            let mut buf = Vec::with_capacity(bytes);
            let mut ms = Vec::with_capacity(members.len());
            for (li, idx) in members {
                let Some(Rec::Data(d)) = frozen[li].1.recs.get(&idx) else { unreachable!("selected above") };
                let bytes = d.raw().expect("selected raw records only");
                ms.push(Member {
                    layer: li,
                    idx,
                    offset: buf.len() as u32,
                    len: bytes.len() as u32,
                    hash: xxh3_64(bytes),
                });
                buf.extend_from_slice(bytes);
            }
            plans.push(Plan { policy, ino: frozen[ms[0].layer].0, members: ms, buf: Arc::new(buf) });
        }
        keep.sort_unstable();
        (keep, plans)
    }

    /// Stage `place`: the bundle's stored bytes, from its compression result, and its
    /// members' extent pointers once `put` placed and queued those bytes (returning where);
    /// `granule`: the pool's packing unit.
    pub fn place(
        &self,
        txg: u64,
        granule: u64,
        plan: &Plan,
        c: Compressed,
        put: impl FnOnce(Payload) -> Result<DeviceExtent>,
    ) -> Result<(Vec<MemberPtr>, Option<NewBundle>)> {
        let (alg, level, hash, payload) = match c {
            // members are never all zeros (`select`), so neither is the bundle; should it
            // be, every member reads as zeros, which is what a hole is
            Compressed::Zeros => return Ok((plan.members.iter().map(|m| (m.layer, m.idx, None)).collect(), None)),
            Compressed::Raw { hash } => (0u8, 0, hash, Payload::Raw(plan.buf.clone())),
            Compressed::Packed { codec, bytes, hash } => (codec.alg.id(), codec.level, hash, Payload::Owned(bytes)),
        };
        let ext = put(payload)?;
        let id = self.alloc_id();
        let logical = plan.buf.len() as u32;
        let footprint = granule_bytes(u64::from(ext.psize), granule);
        let members = plan
            .members
            .iter()
            .map(|m| {
                let e = ExtentPtr {
                    logical: m.len,
                    alg,
                    level,
                    hash: m.hash,
                    birth: txg,
                    stored: StoredRecord::Bundled(BundleSlice {
                        bundle: id,
                        offset: m.offset,
                        share: member_share(m.len, logical, footprint),
                    }),
                };
                (m.layer, m.idx, Some(e))
            })
            .collect();
        let row = Bundle { alg, level, logical, hash, birth: txg, ext, members: plan.members.len() as u32 };
        Ok((members, Some(NewBundle { id, row })))
    }
}

/// Whether a record of `b` in a file of `file_rs`-byte records may join a bundle in a pool
/// of `pool_rs`-byte records: it is the file's short last record (shorter than its own
/// record size; a full record never is a member), shorter than the pool's record size (so
/// a bundle, at least that long, has room for another member), and holds something other
/// than zeros (those become holes).
fn is_member(b: &[u8], file_rs: usize, pool_rs: usize) -> bool {
    !b.is_empty() && b.len() < file_rs && b.len() < pool_rs && !is_zeros(b)
}

/// One member of a planned bundle.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    /// index of the file's layer in the txg's frozen list, and the record's index
    pub layer: usize,
    pub idx: u64,
    /// first byte in the bundle, length
    pub offset: u32,
    pub len: u32,
    /// xxh3-64 of the record's bytes
    pub hash: u64,
}

/// A bundle planned by `select`.
pub struct Plan {
    pub policy: Policy,
    /// the file of the first member (what the level decision and its trace see)
    pub ino: Ino,
    pub members: Vec<Member>,
    /// the members' bytes, back to back
    pub buf: Arc<Vec<u8>>,
}

/// A record of the txg: (index of its file's layer in the frozen list, record index).
pub type Job = (usize, u64);

/// What `place` gives each member: its job and its extent pointer (`None`: a hole).
pub type MemberPtr = (usize, u64, Option<ExtentPtr>);

/// Records of one policy being gathered into a bundle, and their bytes.
struct Group {
    policy: Policy,
    jobs: Vec<Job>,
    bytes: usize,
}

/// A bundle placed by this txg, for its commit.
pub struct NewBundle {
    pub id: u64,
    pub row: Bundle,
}

/// Commit: the rows of the bundles this txg placed.
pub fn insert_new(tx: &redb::WriteTransaction, new: &[NewBundle]) -> Result<()> {
    if new.is_empty() {
        return Ok(());
    }
    let mut t = tx.open_table(tables::BUNDLES)?;
    for b in new {
        if t.insert(b.id, &b.row.encode()[..])?.is_some() {
            return Err(Corruption::BundleIdInUse { id: b.id }.into());
        }
    }
    Ok(())
}

/// Commit: one member gone per entry of `drops` (a bundle id). A bundle left without
/// members is deleted and its range goes to `frees` (device, offset, footprint). A drop
/// naming a missing bundle, or more drops than members, means a damaged store: the commit
/// fails (the pool suspends) rather than free space something may still point to.
pub fn apply_drops(
    tx: &redb::WriteTransaction,
    drops: &[u64],
    granule: u64,
    frees: &mut Vec<(u32, u64, u64)>,
) -> Result<()> {
    if drops.is_empty() {
        return Ok(());
    }
    let mut counts: BTreeMap<u64, u32> = BTreeMap::new();
    for &id in drops {
        *counts.entry(id).or_default() += 1;
    }
    let mut t = tx.open_table(tables::BUNDLES)?;
    for (id, n) in counts {
        let mut b = match t.get(id)? {
            Some(v) => Bundle::decode(v.value())?,
            None => return Err(Corruption::DropFromMissingBundle { id }.into()),
        };
        if n > b.members {
            return Err(Corruption::BundleOverdrawn { id, removed: n, members: b.members }.into());
        }
        b.members -= n;
        if b.members == 0 {
            t.remove(id)?;
            frees.push((b.ext.dev, b.ext.offset, granule_bytes(u64::from(b.ext.psize), granule)));
        } else {
            t.insert(id, &b.encode()[..])?;
        }
    }
    Ok(())
}

/// The largest bundle id in the store + 1 (1 for none).
pub fn next_id(rx: &redb::ReadTransaction) -> Result<u64> {
    match rx.open_table(tables::BUNDLES) {
        Ok(t) => Ok(t.last()?.map_or(1, |(k, _)| k.value().saturating_add(1))),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(1),
        Err(e) => Err(e.into()),
    }
}

/// A bundle row, `None` when there is no such bundle (or no bundles table).
pub fn row(rx: &redb::ReadTransaction, id: u64) -> Result<Option<Bundle>> {
    let t = match rx.open_table(tables::BUNDLES) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(t.get(id)?.map(|v| Bundle::decode(v.value())).transpose()?)
}

/// Every bundle row (fsck, scrub, tests), by id.
pub fn all(rx: &redb::ReadTransaction) -> Result<BTreeMap<u64, std::result::Result<Bundle, String>>> {
    let t = match rx.open_table(tables::BUNDLES) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = BTreeMap::new();
    for row in t.iter()? {
        let (k, v) = row?;
        out.insert(k.value(), Bundle::decode(v.value()).map_err(|e| e.to_string()));
    }
    Ok(out)
}

/// The extent pointer a bundle would have as a record of its own: reads, caching and
/// verification of the stored bytes go through the ordinary record path with it.
pub fn as_record(b: &Bundle) -> ExtentPtr {
    ExtentPtr {
        logical: b.logical,
        alg: b.alg,
        level: b.level,
        hash: b.hash,
        birth: b.birth,
        stored: StoredRecord::Device(b.ext),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::options::{MAX_RECORDSIZE, MIN_RECORDSIZE};

    /// Every pair of a file's record size and the pool's (each a supported size), around
    /// every boundary: a member is shorter than both, and a full record of the file is
    /// never one, however small.
    #[test]
    fn a_member_is_shorter_than_its_files_record_size_and_the_pools() {
        let sizes: Vec<usize> =
            (0..32).map(|s| 1usize << s).filter(|&b| (MIN_RECORDSIZE..=MAX_RECORDSIZE).contains(&(b as u32))).collect();
        let text = vec![b'x'; MAX_RECORDSIZE as usize + 1];
        for &file_rs in &sizes {
            for &cap in &sizes {
                for len in [1, file_rs.min(cap) - 1, file_rs.min(cap), file_rs - 1, file_rs, cap - 1, cap, cap + 1] {
                    let want = len < file_rs && len < cap;
                    assert_eq!(is_member(&text[..len], file_rs, cap), want, "{len} bytes, file {file_rs}, pool {cap}");
                }
            }
        }
        assert!(!is_member(&[], 4096, 4096), "an empty record");
        assert!(!is_member(&[0u8; 100], 16384, 131072), "zeros become a hole");
    }
}
