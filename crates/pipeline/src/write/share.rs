//! Copies that share stored records (`copy_file_range`; docs/design.md §6.2).
//!
//! `share_range` copies bytes `[src_off, src_off + len)` of one file to `dst_off` of another
//! (or of the same file, the ranges apart). Every whole record of the source the range
//! covers whose start lines up with a record start of the target (same record size,
//! offsets equal modulo it) and whose committed form is a full-length device record is
//! *shared*: the target's open layer gets `Rec::Shared(extent)`, and its txg's commit
//! points the target's extent row at the same stored bytes and counts a reference
//! (store/refcounts.rs). A committed hole is copied as a hole. Everything else — the
//! partial records at the edges, records the source holds dirty, inline or bundled
//! records, ranges that do not line up — is copied as data through the ordinary write path.
//!
//! Why the shared extent stays allocated until the target's commit counts it: the source
//! record is looked up and shared while `quiesce_gate` is held for reading, so no quiesce
//! runs in between and both files' open layers belong to the same open txg N. The source's
//! record is clean (neither of its layers holds it), so only a change made from now on can
//! drop the source's reference, and that change lands in txg N or later: N's commit then
//! sums its drop with the target's add (never freeing the record), a later commit drops a
//! reference the table already counts. A source record the syncing txg changes is dirty,
//! hence copied, never shared.

use crate::base::error::{InvalidArg, Result};
use crate::base::units::{checked_end, record_start_byte, whole_records_within};
use crate::compress::policy::Stated;
use crate::engine::inner::Inner;
use crate::read::path as read;
use crate::txg::dirty::{LayerView, Rec};
use squeezefs_meta::{ExtentPtr, Ino, StoredRecord};
use std::sync::atomic::Ordering;

/// What one `share_range` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareOutcome {
    /// bytes copied (the range, cut at the source's end)
    pub bytes: u64,
    /// records shared and the logical bytes they hold
    pub shared_records: u64,
    pub shared_bytes: u64,
    /// bytes copied as data (edges, dirty or unshareable records)
    pub copied_bytes: u64,
}

/// Records looked up and shared per hold of the quiesce gate: a quiesce waits at most this
/// many lookups.
const BATCH: u64 = 256;

/// Records one txg takes shared at most: a shared record holds no dirty bytes, so without
/// this bound a copy of a huge file would put millions of them (about 100 bytes of memory
/// each, and an extent row and a count in one commit) into one open txg before its timeout.
/// Past it, the copy commits before sharing more (65536 records of 128 KiB are 8 GiB).
const MAX_SHARED_PER_TXG: u64 = 65536;

/// Bytes read and written per step of a data copy.
const COPY_CHUNK: usize = 1 << 20;

/// What one source record becomes in the target.
enum Plan {
    Share(ExtentPtr),
    Hole,
    Copy,
}

pub fn share_range(inner: &Inner, src: Ino, src_off: u64, dst: Ino, dst_off: u64, len: u64) -> Result<ShareOutcome> {
    inner.check_writable()?;
    let src_size = inner.file_ref(src)?.lock().size;
    let len = len.min(src_size.saturating_sub(src_off));
    if len == 0 {
        return Ok(ShareOutcome::default());
    }
    let src_end = checked_end(src_off, len).ok_or(InvalidArg::RangeTooLarge { offset: src_off, len })?;
    let dst_end = checked_end(dst_off, len).ok_or(InvalidArg::RangeTooLarge { offset: dst_off, len })?;
    if src == dst && src_off < dst_end && dst_off < src_end {
        return Err(InvalidArg::OverlappingCopy { ino: src, src: src_off, dst: dst_off, len }.into());
    }
    let mut out = ShareOutcome { bytes: len, ..Default::default() };
    let rs = inner.file_ref(src)?.lock().rs;
    let dst_rs = inner.file_ref(dst)?.lock().rs;
    let (first, past) = whole_records_within(src_off, src_end, rs);
    if dst_rs != rs || src_off % rs != dst_off % rs || first >= past {
        copy_data(inner, src, src_off, dst, dst_off, len)?;
        out.copied_bytes = len;
        return Ok(out);
    }
    // the target covers the range before records are shared into it (its old last record
    // grows like any file's, write/data.rs `grow`)
    if inner.file_ref(dst)?.lock().size < dst_end {
        crate::write::data::set_size(inner, dst, dst_end)?;
    }
    // the source's records written and not committed yet are committed first, so that they
    // can be shared (a copy right after writing is the common case)
    if holds_dirty(inner, src, first, past)? {
        inner.txg.sync_and_wait(&inner.dirty)?;
    }
    // the target's record where source record `i` goes (`i` starts at or after `src_off`)
    let shift = |i: u64| (dst_off + (record_start_byte(i, rs) - src_off)) / rs;
    let mut copies = Vec::new();
    let mut at = first;
    while at < past {
        let stop = (at + BATCH).min(past);
        if inner.shared_in_txg.load(Ordering::Relaxed) >= MAX_SHARED_PER_TXG {
            inner.txg.sync_and_wait(&inner.dirty)?;
        }
        let _gate = inner.quiesce_gate.read();
        let plans = plan_records(inner, src, at, stop, rs)?;
        let dst_f = inner.file_ref(dst)?;
        let mut fd = dst_f.lock();
        if fd.retired {
            // records put there would reach no reader and no txg: look the file up again
            continue;
        }
        let mut freed = 0u64;
        let mut changed = false;
        for (i, plan) in (at..stop).zip(plans) {
            let j = shift(i);
            // a full record only where the target still has one (a truncation meanwhile)
            // and at the record size it was planned for
            let plan = if fd.rs != rs || record_start_byte(j + 1, rs) > fd.size { Plan::Copy } else { plan };
            let rec = match plan {
                Plan::Share(e) => {
                    out.shared_records += 1;
                    out.shared_bytes += rs;
                    Rec::Shared(e)
                }
                // nothing below the truncation floor shows through: the hole is there
                Plan::Hole if fd.open.trunc_floor.is_some_and(|fl| j >= fl) => {
                    if let Some(Rec::Data(d)) = fd.open.recs.remove(&j) {
                        freed += d.len() as u64;
                    }
                    changed = true;
                    continue;
                }
                Plan::Hole => Rec::Hole,
                Plan::Copy => {
                    copies.push(i);
                    continue;
                }
            };
            if let Some(Rec::Data(d)) = fd.open.recs.insert(j, rec) {
                freed += d.len() as u64;
                if let Some(v) = d.into_vec() {
                    inner.dirty.bufs.give(v);
                }
            }
            changed = true;
        }
        if changed {
            inner.shared_in_txg.fetch_add(stop - at, Ordering::Relaxed);
            inner.acct.resize_layer(&mut fd.open.bytes, 0, freed);
            // a write that loaded one of these records before is stale (write/data.rs)
            fd.gen += 1;
            fd.open_dirty = true;
            inner.dirty.mark_changed(dst);
        }
        drop(fd);
        at = stop;
    }
    // the edges and the records that could not be shared, as data
    let mut pieces: Vec<(u64, u64)> = Vec::new();
    let lo = record_start_byte(first, rs);
    if src_off < lo {
        pieces.push((src_off, lo - src_off));
    }
    pieces.extend(copies.iter().map(|&i| (record_start_byte(i, rs), rs)));
    let hi = record_start_byte(past, rs);
    if hi < src_end {
        pieces.push((hi, src_end - hi));
    }
    for (off, n) in pieces {
        copy_data(inner, src, off, dst, dst_off + (off - src_off), n)?;
        out.copied_bytes += n;
    }
    Ok(out)
}

/// The source holds records of `[first, past)` that are not committed (open or syncing
/// layer, or a truncation not committed yet).
fn holds_dirty(inner: &Inner, src: Ino, first: u64, past: u64) -> Result<bool> {
    let f = inner.file_ref(src)?;
    let fd = f.lock();
    let layer_dirty = |l: &crate::txg::dirty::Layer| {
        l.recs.range(first..past).next().is_some() || l.trunc_floor.is_some_and(|fl| fl < past)
    };
    Ok(layer_dirty(&fd.open) || fd.syncing.as_deref().is_some_and(layer_dirty))
}

/// What each source record of `[at, stop)` becomes, decided under the source's file lock
/// (the caller holds the quiesce gate): clean and committed as a full device record →
/// shared; clean and a committed hole → a hole; anything else → copied as data.
fn plan_records(inner: &Inner, src: Ino, at: u64, stop: u64, rs: u64) -> Result<Vec<Plan>> {
    let f = inner.file_ref(src)?;
    let fd = f.lock();
    let mut plans = Vec::with_capacity((stop - at) as usize);
    for i in at..stop {
        let clean = matches!(fd.open.view(i), LayerView::Below)
            && fd.syncing.as_ref().is_none_or(|s| matches!(s.view(i), LayerView::Below));
        if !clean {
            plans.push(Plan::Copy);
            continue;
        }
        plans.push(match read::extent(inner, src, i)? {
            None => Plan::Hole,
            Some(e) if matches!(e.stored, StoredRecord::Device(_)) && u64::from(e.logical) == rs => Plan::Share(e),
            Some(_) => Plan::Copy,
        });
    }
    Ok(plans)
}

/// Copy `[off, off + len)` of `src` to `dst_off` of `dst` as data (read, then the write
/// path with the target's own compression).
fn copy_data(inner: &Inner, src: Ino, off: u64, dst: Ino, dst_off: u64, len: u64) -> Result<()> {
    let mut buf = vec![0u8; COPY_CHUNK.min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let n = ((len - done) as usize).min(buf.len());
        let got = read::read(inner, src, off + done, &mut buf[..n])?;
        // the source was cut meanwhile: the rest reads as zeros, like a hole
        buf[got..n].fill(0);
        crate::write::data::write(inner, dst, dst_off + done, &buf[..n], Stated::Keep)?;
        done += n as u64;
    }
    Ok(())
}
