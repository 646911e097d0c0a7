//! The read path: layered lookup (open layer → syncing layer → committed extent), extent
//! cache, verified device reads, decompression into the bounded record cache, parallel
//! decoding of multi-record reads and prefetch of sequential streams.

use crate::base::error::{Corruption, EngineError, Internal, PanicSite, Result};
use crate::base::units::{record_of_byte, record_start_byte, records_for_size, records_of_range};
use crate::engine::caches::RecordKey;
use crate::engine::inner::Inner;
use crate::txg::dirty::{Layer, LayerView};
use squeezefs_codec::Algorithm;
use squeezefs_meta::{keys, tables, BundleSlice, ExtentPtr, Ino, StoredRecord};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// Records read ahead of a sequential reader at the default record size (16 × 128 KiB =
/// 2 MiB): two FUSE reads of 1 MiB, so the next read finds its records decoded while the one
/// after it decodes.
pub const PREFETCH_RECORDS: u64 = 16;

/// Records read ahead in a file of `rs`-byte records: the same 2 MiB, at least two records
/// (1 MiB records) and at most 64 (small records: a job per record costs more than the
/// bytes are worth past that).
pub fn prefetch_records(rs: u64) -> u64 {
    (PREFETCH_RECORDS * u64::from(crate::base::options::DEFAULT_RECORDSIZE) / rs.max(1)).clamp(2, 64)
}

/// Extent pointer of a committed record (cached).
pub fn extent(inner: &Inner, ino: Ino, idx: u64) -> Result<Option<ExtentPtr>> {
    if let Some(e) = inner.cache.extents.get(ino, idx) {
        return Ok(e);
    }
    let gen = inner.cache.extents.gen();
    let rx = inner.db.begin_read()?;
    let t = rx.open_table(tables::EXTENTS)?;
    let k = keys::pair(ino, idx);
    let e = match t.get(&k[..])? {
        Some(v) => Some(ExtentPtr::decode(v.value())?),
        None => None,
    };
    inner.cache.extents.insert(ino, idx, e.clone(), gen);
    Ok(e)
}

/// Extent pointers of several records of one file: cached ones from the cache, the others
/// from one read transaction.
pub fn extents_of(inner: &Inner, ino: Ino, idxs: &[u64]) -> Result<Vec<Option<ExtentPtr>>> {
    let mut out: Vec<Option<Option<ExtentPtr>>> = idxs.iter().map(|&i| inner.cache.extents.get(ino, i)).collect();
    if out.iter().all(Option::is_some) {
        return Ok(out.into_iter().map(Option::unwrap).collect());
    }
    let gen = inner.cache.extents.gen();
    let rx = inner.db.begin_read()?;
    let t = rx.open_table(tables::EXTENTS)?;
    for (slot, &idx) in out.iter_mut().zip(idxs) {
        if slot.is_none() {
            let k = keys::pair(ino, idx);
            let e = match t.get(&k[..])? {
                Some(v) => Some(ExtentPtr::decode(v.value())?),
                None => None,
            };
            inner.cache.extents.insert(ino, idx, e.clone(), gen);
            *slot = Some(e);
        }
    }
    Ok(out.into_iter().map(Option::unwrap).collect())
}

/// Decoded bytes of committed record `idx` of a file of `rs`-byte records; `None` = hole.
pub fn committed_record(inner: &Inner, ino: Ino, idx: u64, rs: u64) -> Result<Option<Arc<Vec<u8>>>> {
    match extent(inner, ino, idx)? {
        None => Ok(None),
        Some(e) => load(inner, ino, idx, rs, &e).map(Some),
    }
}

fn record_key(e: &ExtentPtr) -> Option<RecordKey> {
    match e.stored {
        StoredRecord::Device(d) => Some((d.dev, d.offset, e.hash)),
        // cached as its whole bundle (`load_bundled`)
        StoredRecord::Inline(_) | StoredRecord::Bundled(_) => None,
    }
}

/// Read, verify and decode the record an extent points to (record `idx` of `ino`, whose
/// records are `rs` bytes).
pub fn load(inner: &Inner, ino: Ino, idx: u64, rs: u64, e: &ExtentPtr) -> Result<Arc<Vec<u8>>> {
    if let StoredRecord::Bundled(s) = e.stored {
        return load_bundled(inner, ino, idx, rs, e, s);
    }
    let key = record_key(e);
    if let Some(k) = &key {
        if let Some(v) = inner.cache.records.get(k) {
            return Ok(v);
        }
        // a prefetch is decoding this record right now: wait for it instead of decoding it
        // twice
        inner.cache.wait_prefetch(k);
        if let Some(v) = inner.cache.records.get(k) {
            return Ok(v);
        }
    }
    load_uncached(inner, ino, idx, rs, e, key)
}

/// Read, verify and decode the record an extent points to for a rewrite (rewrite/record.rs): a
/// record in the cache is taken from there, one that is not is decoded without being
/// cached, so rewriting a tree does not push the readers' records out of the cache for
/// records that are about to be replaced.
pub fn load_uncached_unless_cached(inner: &Inner, ino: Ino, idx: u64, rs: u64, e: &ExtentPtr) -> Result<Arc<Vec<u8>>> {
    if let Some(v) = record_key(e).and_then(|k| inner.cache.records.get(&k)) {
        return Ok(v);
    }
    load_uncached(inner, ino, idx, rs, e, None)
}

fn load_uncached(
    inner: &Inner,
    ino: Ino,
    idx: u64,
    rs: u64,
    e: &ExtentPtr,
    key: Option<RecordKey>,
) -> Result<Arc<Vec<u8>>> {
    let offset_in_file = record_start_byte(idx, rs);
    if u64::from(e.logical) > rs || e.psize() > rs {
        return Err(
            Corruption::ExtentTooLarge { ino, offset: offset_in_file, stored: e.psize(), logical: e.logical }.into()
        );
    }
    let out = match &e.stored {
        StoredRecord::Inline(v) => {
            verify(e, v, ino, offset_in_file, "inline")?;
            Arc::new(decode(inner, e, v, ino, offset_in_file)?)
        }
        StoredRecord::Bundled(s) => return load_bundled(inner, ino, idx, rs, e, *s),
        StoredRecord::Device(d) => {
            let dev = inner.space.devs().get(d.dev as usize).ok_or_else(|| {
                EngineError::from(Corruption::NoSuchDevice { ino, idx, dev: d.dev, devices: inner.space.devs().len() })
            })?;
            // read into a recycled buffer (read_exact_at fills all of it): a raw record is
            // then the decoded record itself, without a second buffer and copy
            let mut buf = inner.cache.records.take_buffer(d.psize as usize);
            dev.dev.read_at(&mut buf, d.offset).map_err(|err| {
                log::error!("read of inode {ino} at offset {offset_in_file} failed: {err}");
                EngineError::from(err)
            })?;
            verify(e, &buf, ino, offset_in_file, &format!("device {} offset {}", d.dev, d.offset))?;
            if e.alg == Algorithm::None.id() && buf.len() == e.logical as usize {
                Arc::new(buf)
            } else {
                let out = decode(inner, e, &buf, ino, offset_in_file);
                inner.cache.records.give_buffer(buf);
                Arc::new(out?)
            }
        }
    };
    if let Some(k) = key {
        inner.cache.records.insert(k, out.clone());
    }
    Ok(out)
}

/// The slice `s` of its bundle (bundle.rs), checked against the record's own checksum: `load`
/// of a bundled record (record `idx` of `ino`, whose records are `rs` bytes). The decoded
/// bundle goes into the record cache as a record of its own, so the next members (the next
/// small files of a directory) cost neither a device read nor a decode. A bundle is at most
/// the pool's bundle size whatever its members' files use (bundle.rs `select`).
fn load_bundled(inner: &Inner, ino: Ino, idx: u64, rs: u64, e: &ExtentPtr, s: BundleSlice) -> Result<Arc<Vec<u8>>> {
    let off = record_start_byte(idx, rs);
    if u64::from(e.logical) > rs {
        return Err(Corruption::ExtentTooLarge { ino, offset: off, stored: e.psize(), logical: e.logical }.into());
    }
    let b = {
        let rx = inner.db.begin_read()?;
        crate::txg::bundle::row(&rx, s.bundle)?
    };
    let Some(b) = b else {
        // a pointer looked up before the commit that removed it and the bundle's last
        // member: look it up again once
        inner.cache.extents.invalidate(ino, Some(idx));
        return match extent(inner, ino, idx)? {
            Some(e2) if e2 != *e => load(inner, ino, idx, rs, &e2),
            _ => Err(Corruption::NoSuchBundle { ino, offset: off, bundle: s.bundle }.into()),
        };
    };
    let end = u64::from(s.offset) + u64::from(e.logical);
    if end > u64::from(b.logical) || u64::from(b.logical) > inner.bundle_size {
        return Err(Corruption::BundleSliceOutside {
            ino,
            offset: off,
            start: s.offset,
            len: e.logical,
            bundle: s.bundle,
            logical: b.logical,
            bundle_size: inner.bundle_size,
        }
        .into());
    }
    // the bundle as a record of the bundle size: `load` bounds its stored and decoded bytes
    // by that
    let whole = load(inner, ino, idx, inner.bundle_size, &crate::txg::bundle::as_record(&b))?;
    let part = &whole[s.offset as usize..end as usize];
    let h = xxh3_64(part);
    if h != e.hash {
        log::error!(
            "checksum mismatch: inode {ino} file offset {off} (bytes {}..{end} of bundle {}): stored xxh3 {:016x}, computed {h:016x}",
            s.offset,
            s.bundle,
            e.hash
        );
        return Err(EngineError::Checksum { ino, offset: off });
    }
    let mut out = inner.cache.records.take_buffer(part.len());
    out.copy_from_slice(part);
    Ok(Arc::new(out))
}

/// The stored bytes match the extent's xxh3-64; a mismatch is logged with where the record
/// lies (`place`) and is `EngineError::Checksum`, never garbage handed on.
fn verify(e: &ExtentPtr, stored: &[u8], ino: Ino, off: u64, place: &str) -> Result<()> {
    let h = xxh3_64(stored);
    if h != e.hash {
        log::error!(
            "checksum mismatch: inode {ino} file offset {off} ({place}, {} bytes): stored xxh3 {:016x}, computed {h:016x}",
            stored.len(),
            e.hash
        );
        return Err(EngineError::Checksum { ino, offset: off });
    }
    Ok(())
}

fn decode(inner: &Inner, e: &ExtentPtr, stored: &[u8], ino: Ino, off: u64) -> Result<Vec<u8>> {
    let logical = e.logical as usize;
    let alg = Algorithm::from_id(e.alg).ok_or(Corruption::UnknownAlgorithm { ino, offset: off, id: e.alg })?;
    if alg == Algorithm::None {
        if stored.len() != logical {
            return Err(Corruption::RawLength { ino, offset: off, got: stored.len(), want: logical }.into());
        }
        let mut out = inner.cache.records.take_buffer(logical);
        out.copy_from_slice(stored);
        return Ok(out);
    }
    // every byte is overwritten: a short decode is an error below, and `out` is dropped
    let mut out = inner.cache.records.take_buffer(logical);
    let n = inner.workspaces().decompress(alg, stored, &mut out).map_err(|source| Corruption::Undecodable {
        ino,
        offset: off,
        source,
    })?;
    if n != logical {
        return Err(Corruption::DecodedLength { ino, offset: off, got: n, want: logical }.into());
    }
    Ok(out)
}

/// Where the bytes of one record come from, decided under the file lock.
enum Source {
    /// copied already (open layer)
    Done,
    /// a hole in the open or syncing layer
    Zero,
    /// a dirty record held compressed: decoded after the file lock is released
    Packed(Arc<crate::txg::dirty::PackedRec>),
    Layer(Arc<Layer>),
    /// a committed record shared into the open or syncing layer (write/share.rs): read
    /// through its extent, which stays allocated while a layer holds it
    Shared(ExtentPtr),
    Committed,
}

pub fn read(inner: &Inner, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
    inner.check_open()?;
    let f = inner.dirty.files.get(ino);
    // the record size read with the size: a file's record size changes only while it is
    // empty, and an empty file reads nothing
    let (size, rs) = match &f {
        Some(f) => {
            let fd = f.lock();
            (fd.size, fd.rs)
        }
        None => (inner.inode_record(ino)?.size, inner.record_size(ino)?),
    };
    if off >= size || buf.is_empty() {
        return Ok(0);
    }
    let n = (size - off).min(buf.len() as u64) as usize;
    let buf = &mut buf[..n];
    let end = off + n as u64;
    let (first, last) = records_of_range(off, end, rs);
    // every record's span of `buf` is written exactly once below (data, or zeros for holes
    // and bytes past a record's end): callers may pass a buffer with stale contents, so a
    // reused reply buffer needs no zeroing pass
    // slice of `buf` and of the record for record idx
    let span = |idx: u64| {
        let rstart = record_start_byte(idx, rs);
        let a = off.max(rstart);
        let b = end.min(rstart + rs);
        ((a - off) as usize..(b - off) as usize, (a - rstart) as usize..(b - rstart) as usize)
    };
    let mut sources: Vec<(u64, Source)> = Vec::with_capacity((last - first + 1) as usize);
    if let Some(f) = &f {
        let fd = f.lock();
        for idx in first..=last {
            let (bs, rsl) = span(idx);
            let src = match fd.open.view(idx) {
                LayerView::Data(d) => {
                    copy_part(&mut buf[bs], d, rsl);
                    Source::Done
                }
                LayerView::Packed(p) => Source::Packed(p.clone()),
                LayerView::Shared(e) => Source::Shared(e.clone()),
                LayerView::Hole => Source::Zero,
                LayerView::Below => match &fd.syncing {
                    Some(s) => match s.view(idx) {
                        LayerView::Data(_) | LayerView::Packed(_) => Source::Layer(s.clone()),
                        LayerView::Shared(e) => Source::Shared(e.clone()),
                        LayerView::Hole => Source::Zero,
                        LayerView::Below => Source::Committed,
                    },
                    None => Source::Committed,
                },
            };
            sources.push((idx, src));
        }
    } else {
        sources.extend((first..=last).map(|i| (i, Source::Committed)));
    }
    let mut committed = Vec::new();
    for (idx, src) in sources {
        match src {
            Source::Done => {}
            Source::Zero => buf[span(idx).0].fill(0),
            Source::Packed(p) => {
                let (bs, rsl) = span(idx);
                copy_part(&mut buf[bs], &p.decode(inner.workspaces())?, rsl);
            }
            Source::Layer(l) => {
                let (bs, rsl) = span(idx);
                match l.view(idx) {
                    LayerView::Data(d) => copy_part(&mut buf[bs], d, rsl),
                    LayerView::Packed(p) => copy_part(&mut buf[bs], &p.decode(inner.workspaces())?, rsl),
                    _ => buf[bs].fill(0),
                }
            }
            Source::Shared(e) => {
                let (bs, rsl) = span(idx);
                copy_part(&mut buf[bs], &load(inner, ino, idx, rs, &e)?, rsl);
            }
            Source::Committed => committed.push(idx),
        }
    }
    let (records, keys) = fetch_committed(inner, ino, rs, &committed)?;
    // records this read finished (it reached their end)
    let mut finished = Vec::new();
    for ((idx, rec), key) in committed.iter().zip(records).zip(keys) {
        let (bs, rsl) = span(*idx);
        match rec {
            Some(r) => {
                if rsl.end >= r.len() {
                    finished.extend(key);
                }
                copy_part(&mut buf[bs], &r, rsl);
            }
            None => buf[bs].fill(0),
        }
    }
    let sequential = readahead(inner, ino, rs, (off, end), size, f.is_none());
    if sequential {
        // drop-behind: a sequential reader will not come back for these (the kernel's page
        // cache holds what it read), so their buffers go to the next decode rather than
        // pushing records still ahead of the reader out of the cache
        for k in finished {
            inner.cache.records.release(&k);
        }
    }
    Ok(n)
}

/// Copy `rec[rsl]` into `dst` (`dst.len() == rsl.len()`); bytes past the record's end
/// (a short last record) are zeroed.
fn copy_part(dst: &mut [u8], rec: &[u8], rsl: std::ops::Range<usize>) {
    let hi = rsl.end.min(rec.len());
    let n = hi.saturating_sub(rsl.start);
    if n > 0 {
        dst[..n].copy_from_slice(&rec[rsl.start..hi]);
    }
    dst[n..].fill(0);
}

/// Decoded records (`None`: a hole) and their cache keys (`None`: inline or a hole).
type Fetched = (Vec<Option<Arc<Vec<u8>>>>, Vec<Option<RecordKey>>);

/// Decode several committed records of a file of `rs`-byte records, in parallel on the
/// workers when more than one must be read from a device.
fn fetch_committed(inner: &Inner, ino: Ino, rs: u64, idxs: &[u64]) -> Result<Fetched> {
    let exts = extents_of(inner, ino, idxs)?;
    let keys: Vec<Option<RecordKey>> = exts.iter().map(|e| e.as_ref().and_then(record_key)).collect();
    let misses = exts
        .iter()
        .filter(|e| e.as_ref().and_then(record_key).is_some_and(|k| !inner.cache.records.contains(&k)))
        .count();
    if misses < 2 || inner.workers.threads() < 2 {
        let recs = idxs
            .iter()
            .zip(exts)
            .map(|(&i, e)| e.map(|e| load_retrying(inner, ino, i, rs, e)).transpose())
            .collect::<Result<_>>()?;
        return Ok((recs, keys));
    }
    // parallel: the workers need 'static data, so they get owned pointers and a sender
    let (tx, rx) = crossbeam_channel::unbounded();
    let me = inner.self_arc();
    let expected = idxs.len();
    for (pos, (&i, e)) in idxs.iter().zip(exts).enumerate() {
        let Some(e) = e else {
            let _ = tx.send((pos, Ok(None)));
            continue;
        };
        let tx = tx.clone();
        let me = me.clone();
        inner.workers.execute(move || {
            let r = me.catch(PanicSite::DecodeJob, || {
                me.faults.hit(crate::base::fault::Site::DecodeJob);
                load_retrying(&me, ino, i, rs, e)
            });
            let _ = tx.send((pos, r.and_then(|r| r).map(Some)));
        });
    }
    drop(tx);
    let mut out: Vec<Option<Arc<Vec<u8>>>> = vec![None; idxs.len()];
    let mut err = None;
    let mut received = 0;
    for (pos, r) in rx.iter() {
        received += 1;
        match r {
            Ok(v) => out[pos] = v,
            Err(e) => {
                err.get_or_insert(e);
            }
        }
    }
    // a record without its result must not read as a hole
    if received < expected && err.is_none() {
        err = Some(EngineError::Internal(Internal::DecodeResultsLost { missing: expected - received, expected }));
    }
    match err {
        Some(e) => Err(e),
        None => Ok((out, keys)),
    }
}

/// A checksum mismatch right after a commit may come from a pointer looked up before the
/// commit freed and the next txg reused its space: look the pointer up again once.
fn load_retrying(inner: &Inner, ino: Ino, idx: u64, rs: u64, e: ExtentPtr) -> Result<Arc<Vec<u8>>> {
    match load(inner, ino, idx, rs, &e) {
        Err(EngineError::Checksum { .. }) => {
            inner.cache.extents.invalidate(ino, Some(idx));
            match extent(inner, ino, idx)? {
                Some(e2) if e2 != e => load(inner, ino, idx, rs, &e2),
                _ => load(inner, ino, idx, rs, &e),
            }
        }
        r => r,
    }
}

/// Sequential readers get the next records decoded in the background; returns whether this
/// read (of `[off, end)` in a file of `size` bytes and `rs`-byte records) was sequential.
fn readahead(inner: &Inner, ino: Ino, rs: u64, (off, end): (u64, u64), size: u64, clean: bool) -> bool {
    let sequential = inner.cache.note_read(ino, off, end);
    if !sequential || !clean {
        return sequential;
    }
    let next = records_for_size(end, rs);
    let stop = (next + prefetch_records(rs)).min(records_for_size(size, rs));
    let me = inner.self_arc();
    let idxs: Vec<u64> = (next..stop).collect();
    let Ok(exts) = extents_of(inner, ino, &idxs) else { return true };
    for (idx, e) in idxs.into_iter().zip(exts) {
        let Some(e) = e else { continue };
        let Some(k) = record_key(&e) else { continue };
        if inner.cache.records.contains(&k) || inner.cache.is_prefetching(&k) {
            continue;
        }
        let me = me.clone();
        inner.workers.execute(move || {
            // claim the record only once running: `load` waits for claimed records, and a
            // claim made at queue time let readers on the workers wait for a job queued
            // behind them (deadlock of every reader of the file, and of unmount)
            if me.cache.records.contains(&k) || !me.cache.claim_prefetch(k) {
                return;
            }
            let _claim = PrefetchClaim { inner: &me, key: k };
            // the reader got past this record while the job waited (it decoded the record
            // itself and dropped it behind): decoding it now would only refill the cache
            let passed = me.cache.read_past(ino, record_start_byte(idx + 1, rs));
            if !passed {
                // no reader waits for this result; a panic still suspends the pool
                let _ = me.catch(PanicSite::PrefetchJob, || load_uncached(&me, ino, idx, rs, &e, Some(k)));
            }
        });
    }
    true
}

/// Releases a prefetch claim on every path out of the decode (error or panic included), so
/// no reader waits for a record nobody decodes.
struct PrefetchClaim<'a> {
    inner: &'a Inner,
    key: RecordKey,
}

impl Drop for PrefetchClaim<'_> {
    fn drop(&mut self) {
        self.inner.cache.end_prefetch(&self.key);
    }
}

/// State of a record for SEEK_DATA / SEEK_HOLE.
fn has_data(inner: &Inner, ino: Ino, idx: u64, open: Option<&Layer>, syncing: Option<&Layer>) -> Result<bool> {
    for l in [open, syncing].into_iter().flatten() {
        match l.view(idx) {
            LayerView::Data(_) | LayerView::Packed(_) | LayerView::Shared(_) => return Ok(true),
            LayerView::Hole => return Ok(false),
            LayerView::Below => {}
        }
    }
    Ok(extent(inner, ino, idx)?.is_some())
}

/// SEEK_DATA (`want_data`) or SEEK_HOLE: the first offset at or after `off` in data / in a
/// hole. `None` = ENXIO (at or past EOF; for SEEK_DATA also "no data after off").
pub fn seek(inner: &Inner, ino: Ino, off: u64, want_data: bool) -> Result<Option<u64>> {
    inner.check_open()?;
    let f = inner.file_ref(ino)?;
    // snapshot the layers (the open layer is copied as a set of indices only)
    let (size, rs, open, syncing) = {
        let fd = f.lock();
        let open = Layer {
            recs: fd
                .open
                .recs
                .iter()
                .map(|(k, v)| {
                    (
                        *k,
                        match v {
                            crate::txg::dirty::Rec::Data(_) => crate::txg::dirty::Rec::Data(Default::default()),
                            crate::txg::dirty::Rec::Hole => crate::txg::dirty::Rec::Hole,
                            crate::txg::dirty::Rec::Shared(e) => crate::txg::dirty::Rec::Shared(e.clone()),
                        },
                    )
                })
                .collect(),
            trunc_floor: fd.open.trunc_floor,
            size: fd.size,
            ..Default::default()
        };
        (fd.size, fd.rs, open, fd.syncing.clone())
    };
    drop(f);
    inner.dirty.files.retire_if_clean(ino);
    if off >= size {
        return Ok(None);
    }
    let nrec = records_for_size(size, rs);
    let mut idx = record_of_byte(off, rs);
    // candidate indices with data, to jump over long holes
    let next_candidate = |from: u64| -> Result<Option<u64>> {
        let mut best: Option<u64> = None;
        let mut consider = |c: u64| {
            if best.is_none_or(|b| c < b) {
                best = Some(c);
            }
        };
        for l in [Some(&open), syncing.as_deref()].into_iter().flatten() {
            if let Some((&k, _)) = l
                .recs
                .range(from..)
                .find(|(_, r)| matches!(r, crate::txg::dirty::Rec::Data(_) | crate::txg::dirty::Rec::Shared(_)))
            {
                consider(k);
            }
        }
        let rx = inner.db.begin_read()?;
        let t = rx.open_table(tables::EXTENTS)?;
        let a = keys::pair(ino, from);
        let b = keys::pair(ino, u64::MAX);
        if let Some(row) = t.range(&a[..]..=&b[..])?.next() {
            let (k, _) = row?;
            if let Some((_, i)) = keys::unpair(k.value()) {
                consider(i);
            }
        }
        Ok(best)
    };
    while idx < nrec {
        let data = has_data(inner, ino, idx, Some(&open), syncing.as_deref())?;
        if data == want_data {
            return Ok(Some(record_start_byte(idx, rs).max(off)));
        }
        if want_data {
            match next_candidate(idx + 1)? {
                Some(c) if c < nrec => idx = c,
                _ => return Ok(None),
            }
        } else {
            idx += 1;
        }
    }
    // past the last record: SEEK_HOLE finds the implicit hole at EOF
    Ok(if want_data { None } else { Some(size) })
}
