//! The commit stage of a txg (sync/stages.rs stage 7): one durable redb transaction holding the
//! txg's extent pointers, file sizes and physical bytes, the space it freed and took, every
//! namespace change made before it, and the txg number. Its parts, in order:
//!
//! 1. `take_placed` — the durable image takes exactly the ranges the txg points to,
//!    wherever the live image placed them (early or in the place stage), its new bundles'
//!    included; a range the durable image holds allocated already is refused (corrupt: it
//!    would be a double allocation).
//! 2. `take_namespace` — the namespace delta's open changes (nsdelta.rs) and their
//!    metadata charges (meta_space.rs); writers go on into a fresh delta.
//! 3. `nsdelta::apply` — those changes, first, so the layers below see which inodes exist;
//!    then the rows of the txg's new bundles (bundle.rs `insert_new`).
//! 4. `FileCommit::write` per frozen layer — truncations, holes and new extents; the
//!    replaced extents are freed (a bundled one drops its bundle's member count); a file
//!    deleted meanwhile keeps nothing (its new records are freed or dropped).
//! 5. `bundle::apply_drops` — the bundles that lost members count them; one left without
//!    any is deleted and its range freed. Then the reference counts (store/refcounts.rs):
//!    every shared record stored adds a reference, every device extent replaced or removed
//!    drops one, and only a record left with none is freed.
//! 6. `write_superblock` — txg number and inode counter (and `INCOMPAT_RECORDSIZES` with the
//!    pool's first `recordsizes` row, `INCOMPAT_SHARED_RECORDS` with its first `refcounts`
//!    row).
//! 7. `free_durable` and `write_space_map` — the frees go into the durable image and the
//!    changed free-space rows and allocation ends into the store; `write_background` —
//!    background compression's cursor, if one was saved since the last commit; and
//!    `store::auto_start::write` — the rung each auto range's controller sits at, for the
//!    ranges where it differs from the stored one (with `COMPAT_AUTO_START`).
//! 8. commit (fdatasync of the store), then `after_commit`: early placements kept become
//!    COMMITTED, the snapshot cache and the delta move on, and the freed ranges go back to
//!    the live image and the devices (space/placement.rs `give_back`).
//!
//! Rows are written in the pool's encoding: compact inode and extent rows in pools with
//! `INCOMPAT_COMPACT_ROWS` (docs/format.md).
//!
//! Crash safety: the extents point only to data fdatasync'ed by the flush stage before this
//! transaction; freed space reaches the live image (and can be written again) only after
//! this transaction is durable; a bundle's row and its members' extent rows change in the
//! same transaction, so its member count always equals the rows pointing into it.

use crate::base::error::{Corruption, EngineError, Result};
use crate::base::units::{extent_footprint, granule_bytes};
use crate::engine::inner::Inner;
use crate::space::alloc::DevSpace;
use crate::txg::bundle::NewBundle;
use crate::txg::dirty::{Layer, PackedRec, Rec};
use redb::ReadableTable;
use squeezefs_meta::{keys, tables, DeviceExtent, ExtentPtr, Ino, StoredRecord, Superblock};
use std::collections::HashMap;
use std::sync::Arc;

/// What the txg does to one record.
pub enum Outcome {
    Hole,
    /// a record this txg stored (placed by it, inline or bundled)
    Extent(ExtentPtr),
    /// a committed device record another extent row points to as well (write/share.rs): the
    /// row points to the same stored bytes and the record gains a reference
    Shared(ExtentPtr),
}

/// One record's outcome: layer index (into the txg's frozen layers), record index.
pub struct Placed {
    pub layer: usize,
    pub idx: u64,
    pub outcome: Outcome,
}

/// Device ranges (device, offset, footprint) the commit frees, and the bundles it takes
/// members from.
#[derive(Default)]
struct Frees {
    /// extents replaced or removed (truncation, holes, deleted inodes), and bundles left
    /// without members: each drops a reference, and is freed once no reference is left
    /// (`resolve_references`)
    replaced: Vec<(u32, u64, u64)>,
    /// shared records stored by this txg: each gains a reference
    shares: Vec<(u32, u64, u64)>,
    /// records this txg wrote for files deleted while it synced
    unreferenced: Vec<(u32, u64, u64)>,
    /// one bundle id per bundled extent removed (bundle.rs `apply_drops`)
    drops: Vec<u64>,
}

impl Frees {
    fn all(&self) -> impl Iterator<Item = &(u32, u64, u64)> {
        self.replaced.iter().chain(self.unreferenced.iter())
    }

    /// `e` was replaced or removed: its device range is freed, its bundle loses a member.
    fn replace(&mut self, e: &ExtentPtr, granule: u64) {
        match e.stored {
            StoredRecord::Device(d) => self.replaced.push(range_of(d, granule)),
            StoredRecord::Bundled(b) => self.drops.push(b.bundle),
            StoredRecord::Inline(_) => {}
        }
    }

    /// A shared record `e` got another extent row.
    fn share(&mut self, e: &ExtentPtr, granule: u64) {
        if let StoredRecord::Device(d) = e.stored {
            self.shares.push(range_of(d, granule));
        }
    }

    /// The references this commit adds and drops, summed per record, applied to the
    /// `refcounts` table: `replaced` keeps only the records left without a reference. A
    /// pool that never shared a record (`shared_on` false) and a commit that shares none
    /// leave `replaced` as it is (every record there had its one reference).
    fn resolve_references(&mut self, tx: &redb::WriteTransaction, shared_on: bool) -> Result<()> {
        if self.shares.is_empty() && !shared_on {
            return Ok(());
        }
        let mut changes = crate::store::refcounts::RefChanges::default();
        for &(dev, off, len) in &self.shares {
            changes.add(dev, off, len);
        }
        for &(dev, off, len) in &self.replaced {
            changes.drop_ref(dev, off, len);
        }
        self.replaced = changes.apply(tx, shared_on)?;
        Ok(())
    }

    /// `e` was written for a file deleted while the txg synced: nothing refers to it.
    fn unreference(&mut self, e: &ExtentPtr, granule: u64) {
        match e.stored {
            StoredRecord::Device(d) => self.unreferenced.push(range_of(d, granule)),
            StoredRecord::Bundled(b) => self.drops.push(b.bundle),
            StoredRecord::Inline(_) => {}
        }
    }
}

/// The device range (device, offset, footprint) a stored extent occupies.
fn range_of(d: DeviceExtent, granule: u64) -> (u32, u64, u64) {
    (d.dev, d.offset, granule_bytes(u64::from(d.psize), granule))
}

/// Stage 7: one durable metadata transaction holding the records `placed` and the new
/// `bundles`. Returns the new committed blocks per inode.
pub fn commit(
    inner: &Inner,
    txg: u64,
    frozen: &[(Ino, Arc<Layer>)],
    placed: Vec<Placed>,
    bundles: &[NewBundle],
    early_used: &[Arc<PackedRec>],
) -> Result<HashMap<Ino, u64>> {
    let granule = inner.granule;
    let compact = inner.compact_rows;
    let mut durable = inner.space.durable();
    take_placed(&mut durable, txg, &placed, granule)?;
    take_bundles(&mut durable, txg, bundles, granule)?;
    let delta = take_namespace(inner);
    let mut frees = Frees::default();
    let tx = inner.db.begin_write()?;
    let recordsizes_on = inner.recordsizes_on.load(std::sync::atomic::Ordering::Acquire);
    let mut wrote_recordsize = false;
    if let Some(d) = &delta {
        wrote_recordsize = crate::store::nsdelta::apply(
            &tx,
            d,
            granule,
            compact,
            &mut frees.replaced,
            &mut frees.drops,
            recordsizes_on,
        )?;
    }
    crate::txg::bundle::insert_new(&tx, bundles)?;
    let mut by_layer: Vec<Vec<Placed>> = (0..frozen.len()).map(|_| Vec::new()).collect();
    for p in placed {
        by_layer[p.layer].push(p);
    }
    let mut blocks = HashMap::new();
    {
        let mut inodes = tx.open_table(tables::INODES)?;
        let mut extents = tx.open_table(tables::EXTENTS)?;
        for ((ino, layer), placed) in frozen.iter().zip(&by_layer) {
            let file = FileCommit { ino: *ino, layer, placed, granule, compact };
            if let Some(b) = file.write(&mut inodes, &mut extents, &mut frees)? {
                blocks.insert(*ino, b);
            }
        }
    }
    crate::txg::bundle::apply_drops(&tx, &frees.drops, granule, &mut frees.replaced)?;
    let shared_on = inner.shared_on.load(std::sync::atomic::Ordering::Acquire);
    let first_share = !shared_on && !frees.shares.is_empty();
    frees.resolve_references(&tx, shared_on)?;
    write_superblock(&tx, txg, inner.ns.next_ino(), wrote_recordsize, first_share)?;
    free_durable(&mut durable, &frees)?;
    write_space_map(&tx, &mut durable)?;
    let bg = inner.bg.take();
    let r = match &bg {
        Some(c) => write_background(&tx, c),
        None => Ok(()),
    };
    let starts = inner.compress.levels.resume_changes();
    let r = r.and_then(|()| crate::store::auto_start::write(&tx, &starts));
    let r = r.and_then(|()| tx.commit().map_err(EngineError::from));
    if let Err(e) = r {
        if let Some(c) = bg {
            inner.bg.put_back(c);
        }
        return Err(e);
    }
    drop(durable);
    inner.compress.levels.resume_written(&starts);
    if wrote_recordsize && !recordsizes_on {
        inner.recordsizes_on.store(true, std::sync::atomic::Ordering::Release);
    }
    if first_share {
        inner.shared_on.store(true, std::sync::atomic::Ordering::Release);
    }
    after_commit(inner, early_used, delta.is_some(), frees);
    Ok(blocks)
}

/// Part 1: the durable image takes exactly the device ranges the txg points to.
fn take_placed(durable: &mut [DevSpace], txg: u64, placed: &[Placed], granule: u64) -> Result<()> {
    for p in placed {
        if let Outcome::Extent(ExtentPtr { stored: StoredRecord::Device(d), .. }) = &p.outcome {
            let len = granule_bytes(u64::from(d.psize), granule);
            if !durable[d.dev as usize].alloc_exact(d.offset, len) {
                return Err(Corruption::PlacedOverAllocated { txg, dev: d.dev, offset: d.offset, len }.into());
            }
        }
    }
    Ok(())
}

/// Part 1, for the txg's new bundles.
fn take_bundles(durable: &mut [DevSpace], txg: u64, bundles: &[NewBundle], granule: u64) -> Result<()> {
    for b in bundles {
        let d = b.row.ext;
        let len = granule_bytes(u64::from(d.psize), granule);
        if !durable[d.dev as usize].alloc_exact(d.offset, len) {
            return Err(
                Corruption::BundlePlacedOverAllocated { txg, bundle: b.id, dev: d.dev, offset: d.offset, len }.into()
            );
        }
    }
    Ok(())
}

/// Part 2: every metadata change made so far (nsdelta.rs), with their charges.
fn take_namespace(inner: &Inner) -> Option<Arc<crate::store::nsdelta::Delta>> {
    let _writers = inner.ns.meta_lock.lock();
    // the charges of what this commit carries (data written during this txg's sync, charged
    // too, are counted with it: the reserve covers that small excess)
    inner.meta_space.take();
    inner.ns.take_for_commit()
}

/// Part 4: one file's frozen layer and the outcomes of its records.
struct FileCommit<'a> {
    ino: Ino,
    layer: &'a Layer,
    placed: &'a [Placed],
    granule: u64,
    /// rows in their compact encodings (`INCOMPAT_COMPACT_ROWS`)
    compact: bool,
}

type Inodes<'t> = redb::Table<'t, u64, &'static [u8]>;
type Extents<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;

impl FileCommit<'_> {
    /// Write the layer's changes; the file's new committed bytes, or `None` when it was
    /// deleted while the txg synced (then nothing references what the txg wrote for it).
    fn write(&self, inodes: &mut Inodes<'_>, extents: &mut Extents<'_>, frees: &mut Frees) -> Result<Option<u64>> {
        let ino = self.ino;
        let attr = match inodes.get(ino)? {
            Some(v) => Some(squeezefs_meta::encode::decode_inode(ino, v.value())?),
            None => None,
        };
        let Some(mut attr) = attr else {
            for p in self.placed {
                if let Outcome::Extent(e) = &p.outcome {
                    frees.unreference(e, self.granule);
                }
            }
            return Ok(None);
        };
        let mut blocks = attr.blocks_bytes as i64;
        blocks -= self.truncate(extents, frees)? as i64;
        blocks -= self.punch_holes(extents, frees)? as i64;
        blocks += self.store_records(extents, frees)?;
        attr.size = self.layer.size;
        attr.blocks_bytes = blocks.max(0) as u64;
        inodes.insert(ino, &squeezefs_meta::encode::encode_inode_for(&attr, self.compact)[..])?;
        Ok(Some(attr.blocks_bytes))
    }

    /// A truncation removes the extents at and past the layer's floor; returns their bytes.
    fn truncate(&self, extents: &mut Extents<'_>, frees: &mut Frees) -> Result<u64> {
        let Some(floor) = self.layer.trunc_floor else { return Ok(0) };
        let lo = keys::pair(self.ino, floor);
        let hi = keys::pair(self.ino, u64::MAX);
        let mut gone = Vec::new();
        for row in extents.range(&lo[..]..=&hi[..])? {
            let (k, v) = row?;
            gone.push((k.value().to_vec(), ExtentPtr::decode(v.value())?));
        }
        let mut bytes = 0;
        for (k, e) in gone {
            extents.remove(&k[..])?;
            bytes += extent_footprint(&e, self.granule);
            frees.replace(&e, self.granule);
        }
        Ok(bytes)
    }

    /// Punched records lose their extents; returns their bytes.
    fn punch_holes(&self, extents: &mut Extents<'_>, frees: &mut Frees) -> Result<u64> {
        let mut bytes = 0;
        for (&idx, rec) in &self.layer.recs {
            if matches!(rec, Rec::Hole) {
                let k = keys::pair(self.ino, idx);
                if let Some(old) = extents.remove(&k[..])? {
                    let e = ExtentPtr::decode(old.value())?;
                    bytes += extent_footprint(&e, self.granule);
                    frees.replace(&e, self.granule);
                }
            }
        }
        Ok(bytes)
    }

    /// Each record's outcome replaces its old extent; returns the change of the file's bytes.
    fn store_records(&self, extents: &mut Extents<'_>, frees: &mut Frees) -> Result<i64> {
        let mut delta = 0i64;
        for p in self.placed {
            let k = keys::pair(self.ino, p.idx);
            let old = extents.remove(&k[..])?.map(|v| ExtentPtr::decode(v.value())).transpose()?;
            if let Some(e) = old {
                delta -= extent_footprint(&e, self.granule) as i64;
                frees.replace(&e, self.granule);
            }
            match &p.outcome {
                Outcome::Extent(e) => {
                    extents.insert(&k[..], &e.encode_for(self.compact)[..])?;
                    delta += extent_footprint(e, self.granule) as i64;
                }
                Outcome::Shared(e) => {
                    // the file counts the bytes it references (compsize "referenced")
                    extents.insert(&k[..], &e.encode_for(self.compact)[..])?;
                    delta += extent_footprint(e, self.granule) as i64;
                    frees.share(e, self.granule);
                }
                Outcome::Hole => {}
            }
        }
        Ok(delta)
    }
}

/// Part 6: the txg number and the inode counter; `recordsizes`: this commit writes a
/// `recordsizes` row, so the superblock has `INCOMPAT_RECORDSIZES` from this transaction on
/// (set by the pool's first row; a build that does not know per-file record sizes must
/// refuse the pool, or it would read such a file's records at the wrong offsets);
/// `shares`: this commit is the pool's first to share a record, so the superblock has
/// `INCOMPAT_SHARED_RECORDS` from this transaction on (a build that does not know reference
/// counts would free a record another file still points to).
fn write_superblock(
    tx: &redb::WriteTransaction,
    txg: u64,
    next_ino: u64,
    recordsizes: bool,
    shares: bool,
) -> Result<()> {
    let mut sbt = tx.open_table(tables::SUPERBLOCK)?;
    let mut sb = {
        let v = sbt.get(0u8)?.ok_or(Corruption::SuperblockMissing)?;
        Superblock::decode(v.value())?
    };
    sb.txg = txg;
    sb.next_ino = sb.next_ino.max(next_ino);
    if recordsizes {
        sb.features.incompat |= squeezefs_meta::Features::INCOMPAT_RECORDSIZES;
    }
    if shares {
        sb.features.incompat |= squeezefs_meta::Features::INCOMPAT_SHARED_RECORDS;
    }
    sbt.insert(0u8, &sb.encode()[..])?;
    Ok(())
}

/// Part 7c: background compression's cursor (bgstate.rs), with the compat feature that
/// says the table may exist.
fn write_background(tx: &redb::WriteTransaction, c: &squeezefs_meta::BgCursor) -> Result<()> {
    tx.open_table(tables::BACKGROUND)?.insert(0u8, &c.encode()[..])?;
    let mut sbt = tx.open_table(tables::SUPERBLOCK)?;
    let mut sb = {
        let v = sbt.get(0u8)?.ok_or(Corruption::SuperblockMissing)?;
        Superblock::decode(v.value())?
    };
    if sb.features.compat & squeezefs_meta::Features::COMPAT_BACKGROUND == 0 {
        sb.features.compat |= squeezefs_meta::Features::COMPAT_BACKGROUND;
        sbt.insert(0u8, &sb.encode()[..])?;
    }
    Ok(())
}

/// Part 7a: the frees go into the durable image now, into the live one (where they can be
/// placed again) only after this commit is durable. An extent read back from the store
/// names its range: a damaged one fails the commit (the pool suspends, waiters get an
/// error) instead of the txg thread.
fn free_durable(durable: &mut [DevSpace], frees: &Frees) -> Result<()> {
    for &(dev, off, len) in frees.all() {
        let space = durable
            .get_mut(dev as usize)
            .filter(|s| len == 0 || s.holds_range(off, len))
            .ok_or_else(|| EngineError::from(Corruption::FreedRangeOutsidePool { dev, offset: off, len }))?;
        space.free(off, len);
    }
    Ok(())
}

/// Part 7b: the free-space rows and allocation ends the durable image changed.
fn write_space_map(tx: &redb::WriteTransaction, durable: &mut [DevSpace]) -> Result<()> {
    let mut ft = tx.open_table(tables::FREE_SPACE)?;
    let mut dt = tx.open_table(tables::DEVICES)?;
    for (i, s) in durable.iter_mut().enumerate() {
        let (changes, end_changed) = s.take_changes();
        for (start, len) in changes {
            let k = keys::dev_offset(i as u32, start);
            match len {
                Some(l) => {
                    ft.insert(&k[..], l)?;
                }
                None => {
                    ft.remove(&k[..])?;
                }
            }
        }
        if end_changed {
            let mut rec = {
                let v = dt.get(i as u32)?.ok_or(Corruption::DeviceRecordMissing { dev: i as u32 })?;
                squeezefs_meta::DeviceRecord::decode(v.value())?
            };
            rec.alloc_end = s.end;
            dt.insert(i as u32, &rec.encode()[..])?;
        }
    }
    Ok(())
}

/// Part 8: the transaction is durable.
fn after_commit(inner: &Inner, early_used: &[Arc<PackedRec>], had_delta: bool, frees: Frees) {
    for p in early_used {
        if let Some(e) = p.place.get() {
            e.set_committed();
        }
    }
    // before anything this commit wrote leaves the delta or the dirty cache (snapshot.rs)
    inner.ns.snap.committed(&inner.db);
    if had_delta {
        inner.ns.committed();
    }
    let Frees { mut replaced, mut unreferenced, .. } = frees;
    replaced.append(&mut unreferenced);
    inner.space.give_back(&replaced);
}
