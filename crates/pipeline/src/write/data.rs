//! Data changes into the open txg: write, truncate, punch hole, allocate.
//!
//! A record that a change covers only partly is first loaded from the layers below (syncing
//! layer or committed extent) *outside* the file lock; the file's `gen` tells whether a
//! truncation or punch raced with the load, in which case the load is redone.

use crate::base::error::{EngineError, InvalidArg, Result};
use crate::base::units::{
    byte_in_record, bytes_to_record_end, checked_end, record_len_in_file, record_of_byte, record_start_byte,
    records_for_size, records_of_range, whole_records_within, MAX_FILE_SIZE,
};
use crate::compress::policy::Stated;
use crate::compress::queue::Slot;
use crate::engine::inner::Inner;
use crate::read::path as read;
use crate::store::meta_space::{self, Decision};
use crate::txg::dirty::RecordHome;
use crate::txg::dirty::{DataRec, FileRef, Layer, LayerView, Rec};
use crate::write::early::{self, CallerResult};
use squeezefs_meta::{keys, tables, Ino};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Content of record `idx` below the open layer (syncing layer, else committed), as an
/// owned buffer; `None` = hole. The open layer's truncation floor short-cuts truncated
/// records, and a file with no committed extent skips the extent lookup: `committed_blocks`
/// is the sum of its committed extents' footprints, each at least one byte (fsck checks
/// it), and the txg being synced can only add extents for records its layer holds, which
/// `syncing.view` answers first. (Every file a `tar xf` creates starts with one of these
/// lookups, for nothing.)
fn lower_record(inner: &Inner, ino: Ino, f: &FileRef, idx: u64) -> Result<Option<Vec<u8>>> {
    let (syncing, nothing_committed, rs, open_shared) = {
        let fd = f.lock();
        // a record shared into the open layer holds no bytes of its own: its extent's. It
        // is looked at before the truncation floor, which it may lie above (a copy into a
        // file truncated in the same txg): only records the layer does not hold are
        // truncated by the floor
        let open_shared = match fd.open.recs.get(&idx) {
            Some(Rec::Shared(e)) => Some(e.clone()),
            _ => None,
        };
        if open_shared.is_none() && fd.open.trunc_floor.is_some_and(|fl| idx >= fl) {
            return Ok(None);
        }
        (fd.syncing.clone(), fd.committed_blocks == 0, fd.rs, open_shared)
    };
    if let Some(e) = open_shared {
        return read::load(inner, ino, idx, rs, &e).map(|r| Some(r.to_vec()));
    }
    if let Some(s) = syncing {
        match s.view(idx) {
            LayerView::Data(d) => return Ok(Some(d.to_vec())),
            LayerView::Packed(p) => return p.decode(inner.workspaces()).map(Some),
            LayerView::Shared(e) => return read::load(inner, ino, idx, rs, e).map(|r| Some(r.to_vec())),
            LayerView::Hole => return Ok(None),
            LayerView::Below => {}
        }
    }
    if nothing_committed {
        return Ok(None);
    }
    match read::committed_record(inner, ino, idx, rs)? {
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

/// A change of the byte range `[off, end)`: which records it touches and what goes in.
struct Change<'a> {
    off: u64,
    end: u64,
    rs: u64,
    first: u64,
    last: u64,
    fill: Fill<'a>,
}

impl<'a> Change<'a> {
    fn new(off: u64, end: u64, rs: u64, fill: Fill<'a>) -> Change<'a> {
        let (first, last) = records_of_range(off, end, rs);
        Change { off, end, rs, first, last, fill }
    }

    /// The change covers record `idx` whole (its old bytes are not needed).
    fn covers(&self, idx: u64) -> bool {
        let s = record_start_byte(idx, self.rs);
        self.off <= s && self.end >= s + self.rs
    }

    /// The bytes `[a, b)` of record `idx` the change writes.
    fn span(&self, idx: u64) -> (usize, usize) {
        let rstart = record_start_byte(idx, self.rs);
        ((self.off.max(rstart) - rstart) as usize, (self.end.min(rstart + self.rs) - rstart) as usize)
    }

    fn is_data(&self) -> bool {
        matches!(self.fill, Fill::Data(..))
    }
}

/// Records below the open layer that a change starts from (`None`: a hole), loaded at
/// file generation `gen`.
struct Loads {
    gen: u64,
    records: HashMap<u64, Option<Vec<u8>>>,
}

/// Load, outside the file lock, the records the change modifies in part that the open
/// layer does not hold, and admit their copies; `None` if the file was retired meanwhile.
fn load_below(inner: &Inner, ino: Ino, f: &FileRef, ch: &Change<'_>, charged: Option<u64>) -> Result<Option<Loads>> {
    let (gen, need) = {
        let fd = f.lock();
        if fd.retired {
            return Ok(None);
        }
        let need: Vec<u64> = (ch.first..=ch.last).filter(|&i| !fd.open.holds_in_place(i) && !ch.covers(i)).collect();
        (fd.gen, need)
    };
    let mut records = HashMap::new();
    for idx in need {
        records.insert(idx, lower_record(inner, ino, f, idx)?);
    }
    // a record changed in part is copied into the open txg whole and stored anew (the old
    // copy is freed only by the commit): admission counts the copies too, or partial
    // punches (charged nothing) across a full pool would be accepted and fail the txg in
    // placement
    let copied: u64 = records.values().flatten().map(|b| b.len() as u64).sum();
    if let Some(charged) = charged.filter(|_| copied > 0) {
        reserve(inner, charged.saturating_add(copied))?;
    }
    Ok(Some(Loads { gen, records }))
}

/// Whole records a writer compressed itself (caller-runs), by record index, and the record
/// size they were cut at.
#[derive(Default)]
struct CallerRecords {
    rs: u64,
    records: BTreeMap<u64, CallerResult>,
}

/// What applying a change did: the open layer's buffers grew and shrank by these bytes;
/// records it filled go to early compression; records the caller compressed went in packed.
#[derive(Default)]
struct Applied {
    grown: u64,
    freed: u64,
    early: Vec<(Arc<Slot>, RecordHome)>,
    any_packed: bool,
}

/// The engine, and how records a change fills start their early compression.
struct ApplyCtx<'i> {
    inner: &'i Inner,
    ino: Ino,
    policy: crate::compress::policy::Policy,
    streak: Arc<std::sync::atomic::AtomicU32>,
    file: std::sync::Weak<crate::base::locks::Mutex<crate::txg::dirty::FileData>>,
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
    mut packed: CallerRecords,
    charged: Option<u64>,
) -> Result<()> {
    let mut f = inner.file_ref(ino)?;
    let mut ch = Change::new(off, end, f.lock().rs, fill);
    let mut loads = load_below(inner, ino, &f, &ch, charged)?;
    let mut fd = f.lock();
    // a truncation, punch, freeze or record size change since the loads (the file's `gen`
    // moved), or the file's retirement, makes them stale: look the file up and load again
    while fd.retired || loads.as_ref().is_none_or(|l| l.gen != fd.gen) {
        drop(fd);
        f = inner.file_ref(ino)?;
        ch = Change::new(off, end, f.lock().rs, fill);
        loads = load_below(inner, ino, &f, &ch, charged)?;
        fd = f.lock();
    }
    // the loads were made at this generation, so `ch` has the file's record size; records
    // the caller compressed at another size (it changed meanwhile) go in as plain bytes
    if packed.rs != ch.rs {
        packed.records.clear();
    }
    let mut packed = packed.records;
    let mut loaded = loads.map(|l| l.records).unwrap_or_default();
    decode_packed_in_part(inner, &mut fd.open, &ch, &packed)?;
    if let Fill::Data(_, Stated::Is(p)) = ch.fill {
        fd.policy = p;
    }
    let ctx = ApplyCtx {
        inner,
        ino,
        policy: fd.policy.unwrap_or_else(|| inner.compress.pool_policy()),
        streak: fd.streak.clone(),
        file: Arc::downgrade(&f),
    };
    let mut applied = Applied::default();
    for idx in ch.first..=ch.last {
        let below = loaded.remove(&idx).flatten();
        fill_record(&ctx, &mut fd.open, &ch, idx, packed.remove(&idx), below, &mut applied)?;
    }
    if ch.is_data() {
        applied.grown += pad_touched(inner, &mut fd, &ch)?;
    }
    inner.acct.resize_layer(&mut fd.open.bytes, applied.grown, applied.freed);
    if ch.is_data() {
        fd.size = fd.size.max(end);
    }
    fd.open_dirty = true;
    inner.dirty.mark_changed(ino);
    if applied.any_packed {
        fd.open.place_early(&inner.early, &inner.space, &inner.acct, inner.max_inline);
    }
    drop(fd);
    if !applied.early.is_empty() {
        let rs = ch.rs;
        let me = inner.self_arc();
        for (s, home) in applied.early {
            early::queue_background(&me, s, home, rs);
        }
    }
    Ok(())
}

/// Records held packed that the change modifies in part: decoded before anything changes,
/// so a failed decode leaves the file as it was (decoding alone changes no byte and no
/// accounting). Records the caller compressed whole are replaced, not decoded.
fn decode_packed_in_part(
    inner: &Inner,
    open: &mut Layer,
    ch: &Change<'_>,
    packed: &BTreeMap<u64, CallerResult>,
) -> Result<()> {
    for idx in ch.first..=ch.last {
        if matches!(packed.get(&idx), Some(CallerResult::Packed(_))) {
            continue;
        }
        if let Some(Rec::Data(d)) = open.recs.get_mut(&idx) {
            if d.packed_rec().is_some() {
                d.buf_mut(inner.workspaces())?;
            }
        }
    }
    Ok(())
}

/// Apply the change to record `idx` of the open layer: `caller` is what caller-runs made
/// of it (the whole record), `below` its content below the open layer if loaded.
fn fill_record(
    ctx: &ApplyCtx<'_>,
    open: &mut Layer,
    ch: &Change<'_>,
    idx: u64,
    caller: Option<CallerResult>,
    below: Option<Vec<u8>>,
    applied: &mut Applied,
) -> Result<()> {
    let inner = ctx.inner;
    let (a, b) = ch.span(idx);
    let finished = match caller {
        Some(CallerResult::Packed(p)) => {
            // the whole record, compressed by the caller: replaces what was there
            applied.any_packed = true;
            applied.grown += p.logical as u64;
            if let Some(Rec::Data(d)) = open.recs.insert(idx, Rec::Data(DataRec::packed(p))) {
                applied.freed += d.len() as u64;
                if let Some(v) = d.into_vec() {
                    inner.dirty.bufs.give(v);
                }
            }
            return Ok(());
        }
        Some(CallerResult::Finished(slot)) => Some(slot),
        None => None,
    };
    let zeros = matches!(ch.fill, Fill::Zeros);
    let entry = match open.recs.entry(idx) {
        std::collections::btree_map::Entry::Occupied(e) => {
            let e = e.into_mut();
            if matches!(e, Rec::Shared(_)) {
                // a shared record becomes this file's own: its bytes were loaded below
                // (`load_below`) unless the change covers it whole
                let base = below.unwrap_or_default();
                applied.grown += base.len() as u64;
                *e = Rec::Data(DataRec::new(base));
            }
            e
        }
        // nothing there and nothing below: punching leaves the hole as it is
        std::collections::btree_map::Entry::Vacant(_) if below.is_none() && zeros => return Ok(()),
        std::collections::btree_map::Entry::Vacant(v) => {
            // a write filling most of a fresh record gets a pooled full buffer
            let base = below.unwrap_or_else(|| {
                if (b - a) as u64 * 2 >= ch.rs {
                    inner.dirty.bufs.take(ch.rs as usize)
                } else {
                    Vec::new()
                }
            });
            applied.grown += base.len() as u64;
            v.insert(Rec::Data(DataRec::new(base)))
        }
    };
    if matches!(entry, Rec::Hole) {
        if zeros {
            return Ok(());
        }
        *entry = Rec::Data(DataRec::default());
    }
    let Rec::Data(rec) = entry else { unreachable!("a hole became data above") };
    match ch.fill {
        Fill::Data(d, _) => {
            let was = rec.len();
            let rstart = record_start_byte(idx, ch.rs);
            let src = &d[(rstart + a as u64 - ch.off) as usize..(rstart + b as u64 - ch.off) as usize];
            let buf = rec.buf_mut(inner.workspaces())?;
            applied.grown += copy_into(buf, a, src) as u64;
            let full = buf.len() == ch.rs as usize;
            if let Some(slot) = finished {
                // the caller compressed exactly these bytes (the write covers the whole
                // record): keep its result
                rec.set_early(slot);
            } else if was < ch.rs as usize && full {
                // this write filled the record: compress it now (early.rs)
                let shared = rec.shared().expect("buf_mut above made the record raw");
                let slot = Slot::new(shared, ctx.policy, ctx.ino, ctx.streak.clone(), &inner.acct);
                rec.set_early(slot.clone());
                applied.early.push((slot, RecordHome { file: ctx.file.clone(), idx }));
            }
        }
        Fill::Zeros => {
            let hi = b.min(rec.len());
            if a < hi {
                rec.buf_mut(inner.workspaces())?[a..hi].fill(0);
            }
        }
    }
    Ok(())
}

/// Copy `src` into `buf` at `a`, zero-filling any gap before it; returns how many bytes
/// `buf` grew.
fn copy_into(buf: &mut Vec<u8>, a: usize, src: &[u8]) -> usize {
    let b = a + src.len();
    let was = buf.len();
    if was <= a {
        // appending (the common case): one copy, no zero fill first
        buf.reserve(b - was);
        buf.resize(a, 0);
        buf.extend_from_slice(src);
    } else {
        if was < b {
            buf.resize(b, 0);
        }
        buf[a..b].copy_from_slice(src);
    }
    buf.len() - was
}

/// Records end at their logical length now, not at the quiesce (`normalize`), so the dirty
/// bytes write admission compares with free space are the bytes the txg stores: the
/// write's first and last records (a write into a hole or into a short committed record
/// ends inside them) and the file's old last record when the write leaves a gap after it.
/// Returns the zeros added.
fn pad_touched(inner: &Inner, fd: &mut crate::txg::dirty::FileData, ch: &Change<'_>) -> Result<u64> {
    let new_size = fd.size.max(ch.end);
    let old_last = (ch.end > fd.size && fd.size > 0).then(|| record_of_byte(fd.size - 1, ch.rs));
    let mut touched = vec![ch.first, ch.last];
    touched.extend(old_last);
    touched.dedup();
    let mut grown = 0;
    for idx in touched {
        grown += pad_to_logical(inner, &mut fd.open, idx, new_size, ch.rs)?;
    }
    Ok(grown)
}

/// Zeros appended to open record `idx` up to its logical length in a file of `size` bytes
/// with records of `rs` bytes (what the quiesce would append, txg/state.rs `normalize`); returns
/// how many. Records held packed are whole records and never short.
fn pad_to_logical(inner: &Inner, layer: &mut crate::txg::dirty::Layer, idx: u64, size: u64, rs: u64) -> Result<u64> {
    let want = record_len_in_file(idx, size, rs) as usize;
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
    let mut pad = byte_in_record(off, rs).saturating_sub(first_len.unwrap_or(0));
    if end < size {
        pad += bytes_to_record_end(end, rs);
    }
    if off > size && record_of_byte(off, rs) > record_of_byte(size, rs) {
        pad += bytes_to_record_end(size, rs);
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
    inner.throttle.delay(&inner.acct, &inner.txg)?;
    // the file now; a change meanwhile by another writer of the same file changes the
    // padding by at most a record, which the per-range record `placeable_bytes` keeps back
    let (pad, rs) = {
        let f = inner.file_ref(ino)?;
        let fd = f.lock();
        let first_len = match fd.open.recs.get(&record_of_byte(off, fd.rs)) {
            Some(Rec::Data(d)) => Some(d.len() as u64),
            _ => None,
        };
        (padding_bound(off, end, fd.size, fd.rs, first_len), fd.rs)
    };
    let len = (data.len() as u64).saturating_add(pad);
    if meta_decision(inner, len) == Decision::CommitFirst {
        // estimates of the open txg's metadata are in the way: its commit measures them
        inner.txg.sync_and_wait(&inner.dirty)?;
    }
    reserve(inner, len)?;
    let packed = caller_runs(inner, ino, off, data, stated, rs)?;
    early::wait_backlog(inner, stated_tree(inner, ino, stated)?, rs);
    apply(inner, ino, off, end, Fill::Data(data, stated), packed, Some(data.len() as u64))?;
    inner.throttle.maybe_kick(&inner.acct, &inner.txg);
    Ok(())
}

/// Caller-runs (early.rs): while the compress queue is long, the whole records `data`
/// covers are compressed here, from `data` itself, and go into the open layer packed. `rs`
/// is the file's record size as the writer saw it (`apply` drops the results if it changed).
fn caller_runs(inner: &Inner, ino: Ino, off: u64, data: &[u8], stated: Stated, rs: u64) -> Result<CallerRecords> {
    let mut out = CallerRecords { rs, records: BTreeMap::new() };
    let (first, end) = whole_records_within(off, off + data.len() as u64, rs);
    if first >= end || !early::caller_should_run(inner, rs) {
        return Ok(out);
    }
    let (streak, own) = {
        let f = inner.file_ref(ino)?;
        let fd = f.lock();
        (fd.streak.clone(), fd.policy)
    };
    let own = match stated {
        Stated::Is(p) => p,
        Stated::Keep => own,
    };
    let policy = own.unwrap_or_else(|| inner.compress.pool_policy());
    // a QoS tree's records go through the compress queue, which schedules them by their
    // tree's deadlines at its plan's levels (qos.rs); a writer stalled compressing them
    // would also stall whatever else its thread serves
    if policy.stores_raw() || policy.tree != squeezefs_control::qos::NO_TREE {
        return Ok(out);
    }
    for idx in first..end {
        if !early::caller_should_run(inner, rs) {
            break;
        }
        let at = (record_start_byte(idx, rs) - off) as usize;
        out.records.insert(idx, early::compress_in_caller(inner, ino, &data[at..at + rs as usize], policy, &streak));
    }
    Ok(out)
}

/// The QoS tree of a write's data: the one it states, else the file's.
fn stated_tree(inner: &Inner, ino: Ino, stated: Stated) -> Result<u64> {
    Ok(match stated {
        Stated::Is(p) => p.map_or(0, |p| p.tree),
        Stated::Keep => inner.file_ref(ino)?.lock().policy.map_or(0, |p| p.tree),
    })
}

fn too_big(off: u64, len: u64) -> EngineError {
    InvalidArg::RangeTooLarge { offset: off, len }.into()
}

/// ENOSPC before accepting data: the space records are sure to find (`placeable_bytes`)
/// must cover every dirty byte stored raw, plus the partial sector where each of the two txgs
/// in flight may end its run, plus the rounding of short records. Records are packed at the
/// granule, which in pools made before PACKED_BYTES is the sector: there a record of 513
/// bytes takes 1024. Only a file's last record is short (the others hold `recordsize`, a
/// whole number of sectors), so the rounding is at most granule − 1 per file in the open
/// txg and again per file in the syncing one; uncounted, it would let twice the room be
/// accepted.
pub fn reserve(inner: &Inner, len: u64) -> Result<()> {
    // the syncing txg's records already placed are in both the dirty bytes and the devices'
    // used space: counted once (accounting.rs `dirty_unplaced`)
    let dirty = inner.acct.dirty_unplaced();
    let slack = inner.sector * 2;
    let rounding = if inner.granule > 1 {
        let files = inner.dirty.files_in_flight();
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
        inner.meta_space.measured(crate::space::placement::host_fs_of(&inner.pool_dir));
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

/// What `set_size` found under the file lock: the size grew (done), or it shrinks and the
/// record the new size cuts in part was loaded from below at file generation `gen`, or
/// the file was retired meanwhile.
enum Resize {
    Grown,
    Shrink { gen: u64, loaded: Option<Vec<u8>> },
    Retired,
}

impl Resize {
    /// Still valid now that the file is locked again: the loads were made at its current
    /// generation (a truncation, punch or freeze meanwhile makes them stale).
    fn current(&self, fd: &crate::txg::dirty::FileData) -> bool {
        match self {
            Resize::Grown => true,
            Resize::Shrink { gen, .. } => !fd.retired && fd.gen == *gen,
            Resize::Retired => false,
        }
    }
}

pub fn set_size(inner: &Inner, ino: Ino, size: u64) -> Result<()> {
    inner.check_writable()?;
    if size > MAX_FILE_SIZE {
        return Err(too_big(0, size));
    }
    let mut f = inner.file_ref(ino)?;
    let mut step = grow_or_load(inner, ino, &f, size)?;
    let mut fd = f.lock();
    while !step.current(&fd) {
        drop(fd);
        f = inner.file_ref(ino)?;
        step = grow_or_load(inner, ino, &f, size)?;
        fd = f.lock();
    }
    match step {
        Resize::Shrink { loaded, .. } => shrink(inner, ino, &mut fd, size, loaded),
        _ => Ok(()),
    }
}

/// Grow the file to `size` (done under the file lock), or, when it shrinks, load the
/// record the new size cuts in part from below (outside the file lock) and admit its copy.
fn grow_or_load(inner: &Inner, ino: Ino, f: &FileRef, size: u64) -> Result<Resize> {
    let (gen, rs) = {
        let mut fd = f.lock();
        if fd.retired {
            return Ok(Resize::Retired);
        }
        if size >= fd.size {
            if size > fd.size {
                grow(inner, ino, &mut fd, size)?;
            }
            return Ok(Resize::Grown);
        }
        (fd.gen, fd.rs)
    };
    let loaded = match partial_record(size, rs) {
        Some(p) if !f.lock().open.holds_in_place(p) => lower_record(inner, ino, f, p)?,
        _ => None,
    };
    // the record cut in part is stored anew: charged like a partial write's copy (`apply`)
    if let Some(b) = &loaded {
        reserve(inner, b.len() as u64)?;
    }
    Ok(Resize::Shrink { gen, loaded })
}

/// The record a file of `size` bytes ends inside (`None`: it ends on a record boundary).
fn partial_record(size: u64, rs: u64) -> Option<u64> {
    (byte_in_record(size, rs) != 0).then(|| record_of_byte(size, rs))
}

/// Grow the file to `size`: the old last record is a whole record (or longer) now, padded
/// at once and charged, like a write's (`pad_to_logical`).
fn grow(inner: &Inner, ino: Ino, fd: &mut crate::txg::dirty::FileData, size: u64) -> Result<()> {
    let rs = fd.rs;
    if fd.size > 0 {
        let idx = record_of_byte(fd.size - 1, rs);
        let want = record_len_in_file(idx, size, rs);
        if let Some(Rec::Data(d)) = fd.open.recs.get(&idx) {
            if d.packed_rec().is_none() && (d.len() as u64) < want {
                reserve(inner, want - d.len() as u64)?;
            }
        }
        let grown = pad_to_logical(inner, &mut fd.open, idx, size, rs)?;
        inner.acct.resize_layer(&mut fd.open.bytes, grown, 0);
    }
    fd.size = size;
    fd.open_dirty = true;
    inner.dirty.mark_changed(ino);
    Ok(())
}

/// Shrink the file to `size`: records past it go (the truncation floor hides the layers
/// below), the record it ends inside is cut (`loaded`: that record from below, when the open
/// layer does not hold it).
fn shrink(
    inner: &Inner,
    ino: Ino,
    fd: &mut crate::txg::dirty::FileData,
    size: u64,
    loaded: Option<Vec<u8>>,
) -> Result<()> {
    let rs = fd.rs;
    let partial = partial_record(size, rs);
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
        // a shared record the new size cuts becomes the file's own: `loaded` holds its bytes
        if matches!(fd.open.recs.get(&p), Some(Rec::Shared(_))) {
            fd.open.recs.remove(&p);
        }
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
    inner.acct.resize_layer(&mut fd.open.bytes, grown, freed);
    fd.size = size;
    fd.gen += 1;
    fd.open_dirty = true;
    inner.dirty.mark_changed(ino);
    Ok(())
}

pub fn punch_hole(inner: &Inner, ino: Ino, off: u64, len: u64) -> Result<()> {
    inner.check_writable()?;
    if len == 0 {
        return Ok(());
    }
    let end = checked_end(off, len).unwrap_or(MAX_FILE_SIZE);
    let f = inner.file_ref(ino)?;
    // a file's record size changes only while it is empty, and then this returns below
    let (size, rs) = {
        let fd = f.lock();
        (fd.size, fd.rs)
    };
    let end = end.min(size);
    if off >= end {
        return Ok(());
    }
    // whole records: from the first record starting at or after `off` up to the last one
    // ending at or before `end` (the short last record counts when `end` is the size)
    let (full_lo, whole_past) = whole_records_within(off, end, rs);
    let full_hi = if end >= size { records_for_size(size, rs) } else { whole_past };
    // edges: zero inside records that are only partly covered
    let lo_edge_end = record_start_byte(full_lo, rs).min(end);
    let hi_edge_start = record_start_byte(full_hi, rs).max(off);
    // both edges are admitted here, before either changes, so a refused punch changes
    // nothing: each edge record not in the open txg yet may be copied whole (`apply`)
    let mut edges: Vec<u64> = Vec::new();
    if off < lo_edge_end {
        edges.push(record_of_byte(off, rs));
    }
    if full_hi >= full_lo && hi_edge_start < end {
        edges.push(record_of_byte(hi_edge_start, rs));
    }
    edges.dedup();
    let uncopied = {
        let fd = f.lock();
        edges.iter().filter(|&&i| !fd.open.holds_in_place(i)).count() as u64
    };
    if uncopied > 0 {
        reserve(inner, uncopied * rs)?;
    }
    if off < lo_edge_end {
        apply(inner, ino, off, lo_edge_end, Fill::Zeros, CallerRecords::default(), None)?;
    }
    if full_hi >= full_lo && hi_edge_start < end {
        apply(inner, ino, hi_edge_start, end, Fill::Zeros, CallerRecords::default(), None)?;
    }
    if full_hi > full_lo {
        loop {
            // records that hold data below the open layer get a Hole marker; a commit between
            // the scan and the lock (it bumps the extent-cache generation) means a rescan, and
            // so does a record retired between `file_ref` and the lock (a seek or a commit's
            // release retires clean records): markers put there would reach no reader and no
            // txg
            let seen = inner.cache.extents.gen();
            let mut lower: Vec<u64> = committed_indices(inner, ino, full_lo, full_hi)?;
            let f = inner.file_ref(ino)?;
            let mut fd = f.lock();
            if fd.retired || inner.cache.extents.gen() != seen {
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
            inner.acct.resize_layer(&mut fd.open.bytes, 0, freed);
            fd.gen += 1;
            fd.open_dirty = true;
            inner.dirty.mark_changed(ino);
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
        let f = inner.file_ref(ino)?;
        let size = f.lock().size;
        if end > size {
            set_size(inner, ino, end)?;
        }
    } else {
        inner.inode_record(ino).map(|_| ())?;
    }
    Ok(())
}
