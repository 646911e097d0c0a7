//! Data changes into the open txg: write, truncate, punch hole, allocate.
//!
//! A record that a change covers only partly is first loaded from the layers below (syncing
//! layer or committed extent) *outside* the file lock; the file's `gen` tells whether a
//! truncation or punch raced with the load, in which case the load is redone.

use crate::dirty::{DataRec, FileRef, LayerView, Rec};
use crate::early::{self, CallerResult, CompressQueue, Home, Slot};
use crate::error::{EngineError, Result};
use crate::inner::Inner;
use crate::meta_space::{self, Decision};
use crate::policy::Stated;
use crate::read;
use crate::throttle;
use crate::units::{checked_end, record_len_in_file, record_start_byte, records_for_size, MAX_FILE_SIZE};
use squeezefs_meta::{keys, tables, Ino};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

/// The file's dirty state, created from the committed inode if needed.
pub fn file_ref(inner: &Inner, ino: Ino) -> Result<FileRef> {
    loop {
        let f = inner.files.get_or_create(ino, || {
            let a = inner.inode_record(ino)?;
            Ok::<_, EngineError>((a.size, a.blocks_bytes))
        })?;
        if !f.lock().retired {
            return Ok(f);
        }
    }
}

/// Content of record `idx` below the open layer (syncing layer, else committed), as an
/// owned buffer; `None` = hole. The open layer's truncation floor short-cuts truncated
/// records, and a file with no committed extent skips the extent lookup: `committed_blocks`
/// is the sum of its committed extents' footprints, each at least one byte (fsck checks
/// it), and the txg being synced can only add extents for records its layer holds, which
/// `syncing.view` answers first. (Every file a `tar xf` creates starts with one of these
/// lookups, for nothing.)
fn lower_record(inner: &Inner, ino: Ino, f: &FileRef, idx: u64) -> Result<Option<Vec<u8>>> {
    let (syncing, nothing_committed) = {
        let fd = f.lock();
        if fd.open.trunc_floor.is_some_and(|fl| idx >= fl) {
            return Ok(None);
        }
        (fd.syncing.clone(), fd.committed_blocks == 0)
    };
    if let Some(s) = syncing {
        match s.view(idx) {
            LayerView::Data(d) => return Ok(Some(d.to_vec())),
            LayerView::Packed(p) => return p.decode(inner.workspaces()).map(Some),
            LayerView::Hole => return Ok(None),
            LayerView::Below => {}
        }
    }
    if nothing_committed {
        return Ok(None);
    }
    match read::committed_record(inner, ino, idx)? {
        Some(r) => Ok(Some(r.to_vec())),
        None => Ok(None),
    }
}

/// What to put into a byte range.
#[derive(Clone, Copy)]
enum Fill<'a> {
    /// these bytes, and what their write says about the file's compression
    Data(&'a [u8], Stated),
    Zeros,
}

/// Apply `fill` to `[off, end)`. `Data` extends the size; `Zeros` (hole punching) never
/// creates a buffer for a record that has no data. `packed`: whole records of `Data` the
/// caller compressed already (caller-runs); they replace the record as they are.
/// `charged`: the bytes the caller's admission (`reserve`) counted for the change itself;
/// `None` when the caller admitted the records this change may copy, too.
fn apply(
    inner: &Inner,
    ino: Ino,
    off: u64,
    end: u64,
    fill: Fill<'_>,
    mut packed: BTreeMap<u64, CallerResult>,
    charged: Option<u64>,
) -> Result<()> {
    let rs = inner.recordsize;
    let first = off / rs;
    let last = (end - 1) / rs;
    let covers = |idx: u64| {
        let s = record_start_byte(idx, rs);
        off <= s && end >= s + rs
    };
    let mut f = file_ref(inner, ino)?;
    loop {
        let (gen, need) = {
            let fd = f.lock();
            if fd.retired {
                drop(fd);
                f = file_ref(inner, ino)?;
                continue;
            }
            let need: Vec<u64> = (first..=last).filter(|&i| !fd.open.recs.contains_key(&i) && !covers(i)).collect();
            (fd.gen, need)
        };
        let mut loaded: HashMap<u64, Option<Vec<u8>>> = HashMap::new();
        for idx in need {
            loaded.insert(idx, lower_record(inner, ino, &f, idx)?);
        }
        // a record changed in part is copied into the open txg whole and stored anew (the
        // old copy is freed only by the commit): admission counts the copies too. Uncounted,
        // punches (charged nothing) across a full pool were accepted and failed the txg in
        // placement, suspending the pool
        // (tests/enospc.rs::partial_hole_punches_of_committed_records_are_charged_the_records_they_copy),
        // and a write's copy was seen only by the next write's admission
        let copied: u64 = loaded.values().flatten().map(|b| b.len() as u64).sum();
        if let Some(charged) = charged.filter(|_| copied > 0) {
            reserve(inner, charged.saturating_add(copied))?;
        }
        let mut fd = f.lock();
        if fd.retired || fd.gen != gen {
            drop(fd);
            f = file_ref(inner, ino)?;
            continue;
        }
        // records held packed that this change modifies in part: decoded before anything
        // changes, so a failed decode leaves the file as it was (decoding alone changes no
        // byte and no accounting)
        for idx in first..=last {
            if matches!(packed.get(&idx), Some(CallerResult::Packed(_))) {
                continue; // replaced whole below
            }
            if let Some(Rec::Data(d)) = fd.open.recs.get_mut(&idx) {
                if d.packed_rec().is_some() {
                    d.buf_mut(inner.workspaces())?;
                }
            }
        }
        if let Fill::Data(_, Stated::Is(p)) = fill {
            fd.policy = p;
        }
        let early_policy = fd.policy.unwrap_or_else(|| *inner.policy.read());
        let mut grown: u64 = 0;
        let mut freed: u64 = 0;
        let mut early: Vec<std::sync::Arc<Slot>> = Vec::new();
        let fd_streak = fd.streak.clone();
        let mut any_packed = false;
        for idx in first..=last {
            let rstart = record_start_byte(idx, rs);
            let a = (off.max(rstart) - rstart) as usize;
            let b = (end.min(rstart + rs) - rstart) as usize;
            let mut finished = None;
            match packed.remove(&idx) {
                Some(CallerResult::Finished(slot)) => finished = Some(slot),
                Some(CallerResult::Packed(p)) => {
                    // the whole record, compressed by the caller: replaces what was there
                    any_packed = true;
                    grown += p.logical as u64;
                    let old = fd.open.recs.insert(idx, Rec::Data(DataRec::packed(p)));
                    if let Some(Rec::Data(d)) = old {
                        freed += d.len() as u64;
                        if let Some(v) = d.into_vec() {
                            inner.bufs.give(v);
                        }
                    }
                    continue;
                }
                None => {}
            }
            let entry = match fd.open.recs.get_mut(&idx) {
                Some(e) => e,
                None => {
                    let base = loaded.remove(&idx).flatten();
                    if base.is_none() && matches!(fill, Fill::Zeros) {
                        continue; // already a hole
                    }
                    // a write filling most of a fresh record gets a pooled full buffer
                    let base =
                        base.unwrap_or_else(|| if (b - a) as u64 * 2 >= rs { inner.bufs.take() } else { Vec::new() });
                    grown += base.len() as u64;
                    fd.open.recs.insert(idx, Rec::Data(DataRec::new(base)));
                    fd.open.recs.get_mut(&idx).expect("just inserted")
                }
            };
            if matches!(entry, Rec::Hole) {
                if matches!(fill, Fill::Zeros) {
                    continue;
                }
                *entry = Rec::Data(DataRec::default());
            }
            let Rec::Data(rec) = entry else { unreachable!() };
            match fill {
                Fill::Data(d, _) => {
                    let was = rec.len();
                    let buf = rec.buf_mut(inner.workspaces())?;
                    let src = &d[(rstart + a as u64 - off) as usize..(rstart + b as u64 - off) as usize];
                    if buf.len() <= a {
                        // appending (the common case): one copy, no zero fill first
                        grown += (b - buf.len()) as u64;
                        buf.reserve(b - buf.len());
                        buf.resize(a, 0);
                        buf.extend_from_slice(src);
                    } else {
                        if buf.len() < b {
                            grown += (b - buf.len()) as u64;
                            buf.resize(b, 0);
                        }
                        buf[a..b].copy_from_slice(src);
                    }
                    if let Some(slot) = finished {
                        // the caller compressed exactly these bytes (the write covers the
                        // whole record): keep its result
                        rec.set_early(slot);
                    } else if was < rs as usize && buf.len() == rs as usize {
                        // this write filled the record: compress it now (early.rs)
                        let home = Home { file: std::sync::Arc::downgrade(&f), idx };
                        let shared = rec.shared().expect("buf_mut above made the record raw");
                        let slot = Slot::new(shared, early_policy, fd_streak.clone(), Some(home), inner);
                        rec.set_early(slot.clone());
                        early.push(slot);
                    }
                }
                Fill::Zeros => {
                    let hi = b.min(rec.len());
                    if a < hi {
                        rec.buf_mut(inner.workspaces())?[a..hi].fill(0);
                    }
                }
            }
        }
        if matches!(fill, Fill::Data(..)) {
            // records end at their logical length now, not at the quiesce (`normalize`), so
            // the dirty bytes write admission compares with free space are the bytes the txg
            // stores: the write's first and last records (a write into a hole or into a
            // short committed record ends inside them) and the file's old last record
            // when the write leaves a gap after it
            let new_size = fd.size.max(end);
            let old_last = (end > fd.size && fd.size > 0).then(|| (fd.size - 1) / rs);
            let mut touched = vec![first, last];
            touched.extend(old_last);
            touched.dedup();
            for idx in touched {
                grown += pad_to_logical(inner, &mut fd.open, idx, new_size)?;
            }
        }
        fd.open.bytes = fd.open.bytes + grown - freed;
        inner.dirty_bytes.fetch_add(grown, Ordering::Relaxed);
        if freed > 0 {
            let _ =
                inner.dirty_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| Some(d.saturating_sub(freed)));
        }
        if matches!(fill, Fill::Data(..)) {
            fd.size = fd.size.max(end);
        }
        fd.open_dirty = true;
        inner.dirty_set.lock().insert(ino);
        if any_packed {
            crate::early_place::place_in_order(inner, &mut fd.open);
        }
        drop(fd);
        if !early.is_empty() {
            let me = inner.self_arc();
            for s in early {
                CompressQueue::push(&me, s, false);
            }
        }
        return Ok(());
    }
}

/// Zeros appended to open record `idx` up to its logical length in a file of `size` bytes
/// (what the quiesce would append, txg.rs `normalize`); returns how many. Records held
/// packed are whole records and never short.
fn pad_to_logical(inner: &Inner, layer: &mut crate::dirty::Layer, idx: u64, size: u64) -> Result<u64> {
    let want = record_len_in_file(idx, size, inner.recordsize) as usize;
    match layer.recs.get_mut(&idx) {
        Some(Rec::Data(d)) if d.packed_rec().is_none() && d.len() < want => {
            let buf = d.buf_mut(inner.workspaces())?;
            let pad = want - buf.len();
            buf.resize(want, 0);
            Ok(pad as u64)
        }
        _ => Ok(0),
    }
}

/// The most zeros a write of `[off, end)` can add in a file of `size` bytes besides its
/// data: before it in its first record (a hole or a short record there; `first_len` is that
/// record's length if the open txg holds it), after it up to the logical length of its last
/// record when the file goes on past it, and the rest of the file's old last record when
/// the write leaves a gap after it (`pad_to_logical`). Charged at admission on top of the
/// data itself.
fn padding_bound(off: u64, end: u64, size: u64, rs: u64, first_len: Option<u64>) -> u64 {
    let mut pad = (off % rs).saturating_sub(first_len.unwrap_or(0));
    if !end.is_multiple_of(rs) && end < size {
        pad += rs - end % rs;
    }
    if off > size && !size.is_multiple_of(rs) && off / rs > size / rs {
        pad += rs - size % rs;
    }
    pad
}

/// Write `data` at `off`; `stated` is what the write says about the file's compression.
pub fn write(inner: &Inner, ino: Ino, off: u64, data: &[u8], stated: Stated) -> Result<()> {
    inner.check_writable()?;
    if data.is_empty() {
        return Ok(());
    }
    let end = checked_end(off, data.len() as u64).ok_or_else(|| too_big(off, data.len() as u64))?;
    throttle::delay(inner)?;
    // the file now; a change meanwhile by another writer of the same file changes the
    // padding by at most a record, which the per-range record `placeable_bytes` keeps back
    let pad = {
        let f = file_ref(inner, ino)?;
        let fd = f.lock();
        let first_len = match fd.open.recs.get(&(off / inner.recordsize)) {
            Some(Rec::Data(d)) => Some(d.len() as u64),
            _ => None,
        };
        padding_bound(off, end, fd.size, inner.recordsize, first_len)
    };
    let len = (data.len() as u64).saturating_add(pad);
    if meta_decision(inner, len) == Decision::CommitFirst {
        // estimates of the open txg's metadata are in the way: its commit measures them
        inner.txg.sync_and_wait(inner)?;
    }
    reserve(inner, len)?;
    let packed = caller_runs(inner, ino, off, data, stated)?;
    CompressQueue::wait_backlog(inner);
    apply(inner, ino, off, end, Fill::Data(data, stated), packed, Some(data.len() as u64))?;
    throttle::maybe_kick(inner);
    Ok(())
}

/// Caller-runs (early.rs): while the compress queue is long, the whole records `data`
/// covers are compressed here, from `data` itself, and go into the open layer packed.
fn caller_runs(inner: &Inner, ino: Ino, off: u64, data: &[u8], stated: Stated) -> Result<BTreeMap<u64, CallerResult>> {
    let mut out = BTreeMap::new();
    let rs = inner.recordsize;
    let (first, end) = (off.div_ceil(rs), (off + data.len() as u64) / rs);
    if first >= end || !early::caller_should_run(inner) {
        return Ok(out);
    }
    let (streak, own) = {
        let f = file_ref(inner, ino)?;
        let fd = f.lock();
        (fd.streak.clone(), fd.policy)
    };
    let own = match stated {
        Stated::Is(p) => p,
        Stated::Keep => own,
    };
    let policy = own.unwrap_or_else(|| *inner.policy.read());
    if policy.codec().is_none() {
        return Ok(out);
    }
    for idx in first..end {
        if !early::caller_should_run(inner) {
            break;
        }
        let at = (record_start_byte(idx, rs) - off) as usize;
        out.insert(idx, early::compress_in_caller(inner, &data[at..at + rs as usize], policy, &streak));
    }
    Ok(out)
}

fn too_big(off: u64, len: u64) -> EngineError {
    EngineError::Invalid(format!("range {off}+{len} exceeds the largest file size ({MAX_FILE_SIZE} bytes)"))
}

/// ENOSPC before accepting data: the space records are sure to find (`placeable_bytes`)
/// must cover every dirty byte stored raw, plus the partial sector where each of the two txgs
/// in flight may end its run, plus the rounding of short records. Records are packed at the
/// granule, which in pools made before PACKED_BYTES is the sector: there a record of 513
/// bytes takes 1024. Only a file's last record is short (the others hold `recordsize`, a
/// whole number of sectors), so the rounding is at most granule − 1 per file in the open
/// txg and again per file in the syncing one; uncounted, it let twice the room be accepted
/// (tests/enospc.rs::old_pool_write_admission_counts_sector_footprints).
fn reserve(inner: &Inner, len: u64) -> Result<()> {
    // the syncing txg's records already placed are in both `dirty_bytes` and the devices'
    // used space: counted twice, a pool with room for the data refused writes while a
    // large txg synced (found with examples/fragmented_writes.rs). Dirty first: see
    // `Inner::placed_stored` for why that order never counts too little.
    let dirty = inner.dirty_bytes.load(Ordering::SeqCst);
    let dirty = dirty.saturating_sub(inner.placed_stored.load(Ordering::SeqCst));
    let slack = inner.sector * 2;
    let rounding = if inner.granule > 1 {
        let files = inner.dirty_set.lock().len() as u64 + inner.syncing_files.load(Ordering::Relaxed) + 1;
        files.saturating_mul(inner.granule - 1)
    } else {
        0
    };
    let need = dirty.saturating_add(len).saturating_add(slack).saturating_add(rounding);
    if inner.placeable_bytes() < need {
        return Err(EngineError::NoSpace);
    }
    if meta_decision(inner, len) != Decision::Admit {
        // before refusing, a fresh figure: another program may have freed space
        inner.meta_space.measured(crate::inner::host_fs_of(&inner.pool_dir));
        if meta_decision(inner, len) != Decision::Admit {
            return Err(inner.meta_space.refusal(&inner.pool_dir));
        }
    }
    Ok(())
}

/// Whether the metadata store's filesystem has room for the commit of the data in flight
/// and `len` more bytes: their extent rows and inline bytes, and on a growable device
/// sharing that filesystem the bytes themselves. A store full at the commit suspends the
/// pool.
fn meta_decision(inner: &Inner, len: u64) -> Decision {
    match inner.meta_room(len) {
        Some(room) => meta_space::decide(room, 0, meta_space::Kind::Grows),
        None => Decision::Admit,
    }
}

pub fn set_size(inner: &Inner, ino: Ino, size: u64) -> Result<()> {
    inner.check_writable()?;
    if size > MAX_FILE_SIZE {
        return Err(too_big(0, size));
    }
    let rs = inner.recordsize;
    let mut f = file_ref(inner, ino)?;
    loop {
        let (gen, old) = {
            let mut fd = f.lock();
            if fd.retired {
                drop(fd);
                f = file_ref(inner, ino)?;
                continue;
            }
            if size >= fd.size {
                if size > fd.size {
                    // the old last record is a whole record (or longer) now: padded at once,
                    // and charged, like a write's (`pad_to_logical`)
                    if fd.size > 0 {
                        let idx = (fd.size - 1) / rs;
                        let want = record_len_in_file(idx, size, rs);
                        if let Some(Rec::Data(d)) = fd.open.recs.get(&idx) {
                            if d.packed_rec().is_none() && (d.len() as u64) < want {
                                reserve(inner, want - d.len() as u64)?;
                            }
                        }
                        let grown = pad_to_logical(inner, &mut fd.open, idx, size)?;
                        fd.open.bytes += grown;
                        inner.dirty_bytes.fetch_add(grown, Ordering::Relaxed);
                    }
                    fd.size = size;
                    fd.open_dirty = true;
                    inner.dirty_set.lock().insert(ino);
                }
                return Ok(());
            }
            (fd.gen, fd.size)
        };
        let _ = old;
        let partial = (!size.is_multiple_of(rs)).then_some(size / rs);
        let loaded = match partial {
            Some(p) if !f.lock().open.recs.contains_key(&p) => lower_record(inner, ino, &f, p)?,
            _ => None,
        };
        // the record cut in part is stored anew: charged like a partial write's copy (`apply`)
        if let Some(b) = &loaded {
            reserve(inner, b.len() as u64)?;
        }
        let mut fd = f.lock();
        if fd.retired || fd.gen != gen {
            drop(fd);
            f = file_ref(inner, ino)?;
            continue;
        }
        // the record cut in part is decoded first if held packed (see `apply`)
        if let Some(Rec::Data(d)) = partial.and_then(|p| fd.open.recs.get_mut(&p)) {
            if d.packed_rec().is_some() {
                d.buf_mut(inner.workspaces())?;
            }
        }
        let floor = records_for_size(size, rs);
        let dropped: Vec<u64> = fd.open.recs.range(floor..).map(|(k, _)| *k).collect();
        let mut freed = 0u64;
        for k in dropped {
            if let Some(Rec::Data(b)) = fd.open.recs.remove(&k) {
                freed += b.len() as u64;
            }
        }
        let mut grown = 0u64;
        if let Some(p) = partial {
            let keep = (size - record_start_byte(p, rs)) as usize;
            if let (std::collections::btree_map::Entry::Vacant(v), Some(b)) = (fd.open.recs.entry(p), loaded) {
                grown += b.len() as u64;
                v.insert(Rec::Data(DataRec::new(b)));
            }
            if let Some(Rec::Data(b)) = fd.open.recs.get_mut(&p) {
                if b.len() > keep {
                    freed += (b.len() - keep) as u64;
                    b.buf_mut(inner.workspaces())?.truncate(keep);
                }
            }
        }
        fd.open.trunc_floor = Some(fd.open.trunc_floor.map_or(floor, |f| f.min(floor)));
        fd.open.bytes = fd.open.bytes + grown - freed;
        inner.dirty_bytes.fetch_add(grown, Ordering::Relaxed);
        let _ = inner.dirty_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| Some(d.saturating_sub(freed)));
        fd.size = size;
        fd.gen += 1;
        fd.open_dirty = true;
        inner.dirty_set.lock().insert(ino);
        return Ok(());
    }
}

pub fn punch_hole(inner: &Inner, ino: Ino, off: u64, len: u64) -> Result<()> {
    inner.check_writable()?;
    if len == 0 {
        return Ok(());
    }
    let end = checked_end(off, len).unwrap_or(MAX_FILE_SIZE);
    let rs = inner.recordsize;
    let f = file_ref(inner, ino)?;
    let size = f.lock().size;
    let end = end.min(size);
    if off >= end {
        return Ok(());
    }
    // whole records: from the first record starting at or after `off` up to the last one
    // ending at or before `end` (the short last record counts when `end` is the size)
    let full_lo = off.div_ceil(rs);
    let full_hi = if end >= size { records_for_size(size, rs) } else { end / rs };
    // edges: zero inside records that are only partly covered
    let lo_edge_end = record_start_byte(full_lo, rs).min(end);
    let hi_edge_start = record_start_byte(full_hi, rs).max(off);
    // both edges are admitted here, before either changes, so a refused punch changes
    // nothing: each edge record not in the open txg yet may be copied whole (`apply`)
    let mut edges: Vec<u64> = Vec::new();
    if off < lo_edge_end {
        edges.push(off / rs);
    }
    if full_hi >= full_lo && hi_edge_start < end {
        edges.push(hi_edge_start / rs);
    }
    edges.dedup();
    let uncopied = {
        let fd = f.lock();
        edges.iter().filter(|i| !fd.open.recs.contains_key(i)).count() as u64
    };
    if uncopied > 0 {
        reserve(inner, uncopied * rs)?;
    }
    if off < lo_edge_end {
        apply(inner, ino, off, lo_edge_end, Fill::Zeros, BTreeMap::new(), None)?;
    }
    if full_hi >= full_lo && hi_edge_start < end {
        apply(inner, ino, hi_edge_start, end, Fill::Zeros, BTreeMap::new(), None)?;
    }
    if full_hi > full_lo {
        loop {
            // records that hold data below the open layer get a Hole marker; a commit between
            // the scan and the lock (it bumps the extent-cache generation) means a rescan, and
            // so does a record retired between `file_ref` and the lock (a seek or a commit's
            // release retires clean records): markers put there would reach no reader and no
            // txg (tests/races.rs::punch_hole_racing_seek_is_not_lost)
            let seen = inner.ext_cache.gen();
            let mut lower: Vec<u64> = committed_indices(inner, ino, full_lo, full_hi)?;
            let f = file_ref(inner, ino)?;
            let mut fd = f.lock();
            if fd.retired || inner.ext_cache.gen() != seen {
                continue;
            }
            if let Some(s) = &fd.syncing {
                lower.extend(s.recs.range(full_lo..full_hi).map(|(k, _)| *k));
            }
            let open_keys: Vec<u64> = fd.open.recs.range(full_lo..full_hi).map(|(k, _)| *k).collect();
            let mut freed = 0u64;
            for k in open_keys {
                if let Some(Rec::Data(b)) = fd.open.recs.remove(&k) {
                    freed += b.len() as u64;
                }
                lower.push(k);
            }
            for k in lower {
                if fd.open.trunc_floor.is_some_and(|fl| k >= fl) {
                    continue;
                }
                fd.open.recs.insert(k, Rec::Hole);
            }
            fd.open.bytes -= freed;
            let _ =
                inner.dirty_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| Some(d.saturating_sub(freed)));
            fd.gen += 1;
            fd.open_dirty = true;
            inner.dirty_set.lock().insert(ino);
            break;
        }
    }
    Ok(())
}

/// Committed record indices of `ino` in `[lo, hi)`.
fn committed_indices(inner: &Inner, ino: Ino, lo: u64, hi: u64) -> Result<Vec<u64>> {
    let rx = inner.db.begin_read()?;
    let t = rx.open_table(tables::EXTENTS)?;
    let a = keys::pair(ino, lo);
    let b = keys::pair(ino, hi);
    let mut v = Vec::new();
    for row in t.range(&a[..]..&b[..])? {
        let (k, _) = row?;
        if let Some((_, idx)) = keys::unpair(k.value()) {
            v.push(idx);
        }
    }
    Ok(v)
}

pub fn allocate(inner: &Inner, ino: Ino, off: u64, len: u64, keep_size: bool) -> Result<()> {
    inner.check_writable()?;
    let end = checked_end(off, len).ok_or_else(|| too_big(off, len))?;
    reserve(inner, len)?;
    if !keep_size {
        let f = file_ref(inner, ino)?;
        let size = f.lock().size;
        if end > size {
            set_size(inner, ino, end)?;
        }
    } else {
        inner.inode_record(ino).map(|_| ())?;
    }
    Ok(())
}
