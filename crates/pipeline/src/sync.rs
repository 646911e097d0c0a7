//! The SYNCING stages of one txg, run in order by the txg driver (txg.rs):
//!
//! 1. `cut` — list the data records of every frozen layer (records are already cut to
//!    `recordsize` by the dirty cache; the last one is short).
//! 2. `compress` — workers (one per core): zero test, heuristic, compression with early
//!    abort, xxh3 of the stored bytes; results stream back as they finish.
//!    Records compressed early are not compressed again: those held PACKED
//!    (dirty.rs) are sent as they are, the others' slots forward their result.
//! 3. `place` — as results arrive: small files inline; records placed while their layer
//!    was open (early_place.rs) keep that place; other records get a device
//!    (smallest expected completion, crates/control) and space packed into
//!    the txg's run on that device (alloc.rs, live image),
//!    and go to that device's write queue at once (compression and device
//!    writes overlap).
//! 4. `issue`/wait — device writers drain their queues in large sequential batches;
//!    the driver waits for every write of the txg, early writes included.
//! 5. `flush` — fdatasync every device written.
//! 6. `commit` — one durable redb transaction: extent pointers, sizes, blocks, freed
//!    space (replaced records and inode deletions), allocation state (the
//!    durable image: this txg's extents taken exactly, its frees given back),
//!    txg; then the freed ranges go back to the live image and are discarded
//!    on the devices (holes in files).
//! 7. `release` — invalidate extent caches, drop the syncing layers, return dirty bytes,
//!    wake throttled writers.
//!
//! No lock is held across compression or I/O: the stages work on frozen `Arc<Layer>`s.

use crate::devq::{Completion, Payload, WriteReq};
use crate::dirty::{Layer, PackedRec, Rec};
use crate::early::{Claim, CompressQueue, CompressResult, Slot};
use crate::error::{EngineError, Result};
use crate::inner::Inner;
use crate::policy::Compressed;
use crate::units::granule_bytes;
use redb::ReadableTable;
use squeezefs_control::{choose_device, DeviceView};
use squeezefs_meta::{keys, tables, DeviceExtent, ExtentPtr, Ino, StoredRecord, Superblock};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// What the txg does to one record.
enum Outcome {
    Hole,
    Extent(ExtentPtr),
}

struct Placed {
    layer: usize,
    idx: u64,
    outcome: Outcome,
}

/// Why a txg failed, and whether trying it again later is safe: a txg that found no room
/// before its commit stage wrote nothing any pointer refers to (its placements were given
/// back), so its frozen layers can be synced again once there is room (txg.rs).
pub struct SyncFailure {
    pub error: EngineError,
    /// the frozen layers, handed back when the txg may be tried again
    pub retry: Option<Vec<(Ino, Arc<Layer>)>>,
}

pub fn sync_txg(inner: &Arc<Inner>, txg: u64, frozen: Vec<(Ino, Arc<Layer>)>) -> std::result::Result<(), SyncFailure> {
    let t0 = std::time::Instant::now();
    inner.refresh_host_free();
    crate::early_place::reclaim(inner, false);
    crate::early_place::refresh_room(inner, false);
    let jobs = cut(&frozen);
    let (jobs, bundles) = crate::bundle::select(inner, &frozen, jobs);
    // bundle b is job (frozen.len() + b, 0): after every record's job, in job order
    let all_jobs: Vec<(usize, u64)> =
        jobs.iter().copied().chain((0..bundles.len()).map(|b| (frozen.len() + b, 0))).collect();
    let nfiles = frozen.len();
    let mut t_placed = t0;
    let mut t_written = t0;
    let mut t_flushed = t0;
    let mut allocated: Vec<DeviceExtent> = Vec::new();
    // placements made while the layers were open that this txg keeps
    let mut early_used: Vec<Arc<PackedRec>> = Vec::new();
    let mut new_bundles: Vec<crate::bundle::NewBundle> = Vec::new();
    // set once the commit stage starts: from then on it has applied frees to the space map
    // (records of files deleted meanwhile included), and the error path must not free again
    let mut committing = false;
    let result = (|| {
        let results = compress(inner, &frozen, &jobs, &bundles);
        let completion = Arc::new(Completion::default());
        let mut written = vec![false; inner.devs.len()];
        // host filesystems under growable devices as the txg starts, and what it placed on
        // each device so far: a growable device has room only within its own filesystem
        let mut host = HostRoom { free: inner.host_space.lock().clone(), used: vec![0; inner.devs.len()] };
        let mut placed = Vec::with_capacity(all_jobs.len());
        let mut first_err = None;
        // results arrive in completion order; they are placed in job order (file by file,
        // record by record), so a file's records of one txg lie on the device in file order
        // for sequential reads, whichever worker finished first
        let mut waiting: BTreeMap<usize, Compressed> = BTreeMap::new();
        let mut next = 0usize;
        for _ in 0..all_jobs.len() {
            // every job sends its result, except one that panicked (fault.rs): its sender
            // is dropped unused, and once the others have sent, the channel ends
            let Ok((li, idx, c)) = results.recv() else {
                first_err.get_or_insert(EngineError::Other("a compression job ended without its result".into()));
                break;
            };
            if first_err.is_some() {
                continue; // drain the remaining results
            }
            let pos = all_jobs.binary_search(&(li, idx)).expect("a result for a job of this txg");
            waiting.insert(pos, c);
            while let Some(c) = waiting.remove(&next) {
                let (li, idx) = all_jobs[next];
                next += 1;
                let mut at = PlaceAt {
                    completion: &completion,
                    allocated: &mut allocated,
                    written: &mut written,
                    host: &mut host,
                    early_used: &mut early_used,
                };
                if let Some(plan) = li.checked_sub(frozen.len()).map(|b| &bundles[b]) {
                    let r = crate::bundle::place(inner, txg, plan, c, |payload| put_new(inner, &mut at, payload));
                    match r {
                        Ok((members, nb)) => {
                            placed.extend(members.into_iter().map(|(layer, idx, e)| Placed {
                                layer,
                                idx,
                                outcome: e.map_or(Outcome::Hole, Outcome::Extent),
                            }));
                            new_bundles.extend(nb);
                        }
                        Err(e) => {
                            first_err = Some(e);
                            break;
                        }
                    }
                    continue;
                }
                match place(inner, txg, &frozen[li].1, idx, c, &mut at) {
                    Ok(outcome) => placed.push(Placed { layer: li, idx, outcome }),
                    Err(e) => {
                        first_err = Some(e);
                        break;
                    }
                }
            }
        }
        // the runs' unused ends go back to the free map (also after a failure: the error path
        // then frees the placed records themselves)
        {
            let mut space = inner.space.lock();
            for s in space.iter_mut() {
                s.close_run();
            }
            for (_, layer) in &frozen {
                if let Some(r) = layer.early_run.lock().take() {
                    r.close(&mut space);
                }
            }
        }
        t_placed = std::time::Instant::now();
        let mut write_err = completion.wait();
        // the early writes of the placements this txg keeps
        for p in &early_used {
            if let Some(err) = p.place.get().and_then(|e| e.done().wait()) {
                write_err.get_or_insert(err);
            }
        }
        t_written = std::time::Instant::now();
        if let Some(e) = first_err {
            return Err(e);
        }
        if let Some(e) = write_err {
            return Err(if e == "no space" { EngineError::NoSpace } else { EngineError::Io(e) });
        }
        flush(inner, &written)?;
        t_flushed = std::time::Instant::now();
        // suspended meanwhile (a panic elsewhere, fault.rs): nothing more becomes durable
        if let Some(e) = inner.txg.suspension() {
            return Err(e);
        }
        committing = true;
        commit(inner, txg, &frozen, placed, &early_used, &new_bundles)
    })();
    let placed_now: u64 = allocated.iter().map(|d| u64::from(d.psize)).sum();
    match result {
        Ok(blocks) => {
            let t_committed = std::time::Instant::now();
            // the host space this txg took, before `release` stops counting its bytes as
            // dirty: otherwise admission would, in between, see both the old host figure
            // and the lower dirty count, and accept data the host has no room for
            // (tests/enospc.rs::growable_pool_admission_sees_the_host_space_the_last_txg_took)
            inner.refresh_host_free();
            // the measurement holds what the commit took in the metadata store
            inner.meta_space.counted();
            let kept: u64 = early_used.iter().filter_map(|p| p.place.get()).map(|e| u64::from(e.ext.psize)).sum();
            sub_placed(inner, placed_now + kept);
            drop(early_used);
            // early placements this txg did not keep (the record went inline, or was placed
            // again): given up now, not when the last reader drops the layer, so admission
            // does not count them as placed after `release` stopped counting them as dirty
            for (_, layer) in &frozen {
                for rec in layer.recs.values() {
                    if let Rec::Data(d) = rec {
                        if let Some(e) = d.packed_rec().and_then(|p| p.place.get()) {
                            e.abandon();
                        }
                    }
                }
            }
            release(inner, &frozen, &blocks);
            for (_, layer) in frozen {
                // the last reference (device writes and compress jobs are done): recycle
                if let Ok(l) = Arc::try_unwrap(layer) {
                    inner.bufs.give_layer(l);
                }
            }
            // what was given up during this txg and has been written by now (the ranges
            // whose write is still in flight wait for the next txg)
            crate::early_place::reclaim(inner, false);
            log::debug!(
                "txg {txg}: {} records of {nfiles} files, {} bundles; compress+place {:?}, write wait {:?}, flush {:?}, commit {:?}, release {:?}",
                jobs.len(),
                new_bundles.len(),
                t_placed - t0,
                t_written - t_placed,
                t_flushed - t_written,
                t_committed - t_flushed,
                t_committed.elapsed()
            );
            Ok(())
        }
        Err(e) => {
            // nothing of this txg is referenced: give its space back (in memory only). A
            // failed commit leaves the map as it was partly changed; the pool is suspended
            // after any failed txg (txg.rs) and the next open reads the durable state.
            if !committing {
                let mut space = inner.space.lock();
                for d in &allocated {
                    space[d.dev as usize].free(d.offset, granule_bytes(u64::from(d.psize), inner.granule));
                }
            }
            // the early placements stay placed (a retry keeps them), and counted
            sub_placed(inner, placed_now);
            drop(early_used);
            crate::early_place::refresh_room(inner, true);
            let retryable = !committing && matches!(e, EngineError::NoSpace);
            Err(SyncFailure { error: e, retry: retryable.then_some(frozen) })
        }
    }
}

/// Stage 1: (layer, record) pairs holding data.
fn cut(frozen: &[(Ino, Arc<Layer>)]) -> Vec<(usize, u64)> {
    let mut jobs = Vec::new();
    for (li, (_, layer)) in frozen.iter().enumerate() {
        for (&idx, rec) in &layer.recs {
            if matches!(rec, Rec::Data(_)) {
                jobs.push((li, idx));
            }
        }
    }
    jobs
}

/// Stage 2: every record's compression result, in completion order. A record whose
/// early compression (early.rs) was started on its current bytes reuses it (done: at once; running or queued: the job forwards its result here); the
/// others are queued as urgent tasks, ahead of the next txg's early compression.
fn compress(
    inner: &Arc<Inner>,
    frozen: &[(Ino, Arc<Layer>)],
    jobs: &[(usize, u64)],
    bundles: &[crate::bundle::Plan],
) -> crossbeam_channel::Receiver<CompressResult> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let global = *inner.policy.read();
    // per file: how many records in a row compressed (see policy::TRUST_AFTER)
    let streaks: Vec<Arc<AtomicU32>> = frozen.iter().map(|_| Arc::new(AtomicU32::new(0))).collect();
    let (mut reused, mut fresh, mut packed) = (0usize, 0usize, 0usize);
    let mut new_slots = Vec::new();
    for &(li, idx) in jobs {
        let policy = frozen[li].1.policy.unwrap_or(global);
        let Some(Rec::Data(rec)) = frozen[li].1.recs.get(&idx) else { unreachable!("cut lists data records only") };
        // held packed: compressed already, under the policy of the time it was written
        // (a policy applies to data written from its change on)
        if let Some(p) = rec.packed_rec() {
            p.ready.release();
            packed += 1;
            let c = Compressed::Packed { codec: p.codec, bytes: p.bytes.clone(), hash: p.hash };
            let _ = tx.send((li, idx, c));
            continue;
        }
        // started early on the record's current bytes with the policy of the write that
        // filled it, which is the record's policy (a later write's is not)
        if let Some(slot) = rec.early() {
            match slot.claim(&tx, li, idx) {
                Claim::Sent | Claim::Running => {
                    reused += 1;
                    continue;
                }
                Claim::Queued => {
                    reused += 1;
                    CompressQueue::push(inner, slot.clone(), true);
                    continue;
                }
                Claim::Unusable => {}
            }
        }
        fresh += 1;
        let Some(buf) = rec.shared() else { unreachable!("packed records were sent above") };
        new_slots.push(Slot::new(buf, policy, streaks[li].clone(), None, inner).forward_to(tx.clone(), li, idx));
    }
    new_slots.extend(crate::bundle::compress_jobs(inner, bundles, frozen.len(), &tx));
    CompressQueue::push_urgent_many(inner, new_slots);
    log::trace!(
        "compress: {packed} records held packed, {reused} compressed early, {fresh} now, {} bundles",
        bundles.len()
    );
    rx
}

/// Room on the host filesystems under growable devices during one txg's place stage.
struct HostRoom {
    /// per device: its host filesystem at the start of the txg (`None`: fixed device)
    free: Vec<Option<crate::inner::HostSpace>>,
    /// per device: footprint bytes placed on it by this txg
    used: Vec<u64>,
}

impl HostRoom {
    /// Bytes device `dev` (growable) can still take: its filesystem's free space less what
    /// this txg placed on every device on that filesystem.
    fn room(&self, dev: usize) -> u64 {
        let Some(Some(h)) = self.free.get(dev) else { return u64::MAX };
        let used: u64 =
            self.free.iter().zip(&self.used).filter(|(o, _)| o.is_some_and(|o| o.fs == h.fs)).map(|(_, u)| *u).sum();
        h.free.saturating_sub(used)
    }
}

/// The place stage's state over one txg.
struct PlaceAt<'a> {
    completion: &'a Arc<Completion>,
    /// placed by this stage (given back if the txg fails before its commit)
    allocated: &'a mut Vec<DeviceExtent>,
    /// devices to flush
    written: &'a mut [bool],
    host: &'a mut HostRoom,
    /// records whose early placement this txg keeps
    early_used: &'a mut Vec<Arc<PackedRec>>,
}

/// Take `n` stored bytes out of `Inner::placed_stored`.
fn sub_placed(inner: &Inner, n: u64) {
    let prev = inner.placed_stored.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| Some(p.saturating_sub(n)));
    debug_assert!(prev.is_ok_and(|p| p >= n), "placed_stored {prev:?} < {n}: a placement subtracted twice");
}

/// Stage 3: inline, an early placement kept, or device choice + packed allocation +
/// queueing.
fn place(
    inner: &Inner,
    txg: u64,
    layer: &Arc<Layer>,
    idx: u64,
    c: Compressed,
    at: &mut PlaceAt<'_>,
) -> Result<Outcome> {
    let rec = match layer.recs.get(&idx) {
        Some(Rec::Data(d)) => Some(d),
        _ => None,
    };
    let logical = rec.map_or(0, |d| d.len()) as u32;
    let was_packed = matches!(c, Compressed::Packed { .. });
    let (alg, level, hash, payload) = match c {
        Compressed::Zeros => return Ok(Outcome::Hole),
        Compressed::Raw { hash } => {
            // the device writes the record's raw bytes from the layer: a record held packed
            // has none (compress() never makes a raw result for one)
            if rec.and_then(|d| d.raw()).is_none() {
                return Err(EngineError::Other(format!(
                    "internal error: raw result for record {idx} that holds no raw bytes"
                )));
            }
            (0u8, 0, hash, Payload::LayerRec { layer: layer.clone(), idx })
        }
        Compressed::Packed { codec, bytes, hash } => (codec.alg.id(), codec.level, hash, Payload::Owned(bytes)),
    };
    let stored_len = payload.bytes().len() as u64;
    if idx == 0 && layer.size <= inner.recordsize && stored_len <= inner.max_inline {
        let bytes = payload.bytes().to_vec();
        return Ok(Outcome::Extent(ExtentPtr {
            logical,
            alg,
            level,
            hash,
            birth: txg,
            stored: StoredRecord::Inline(bytes),
        }));
    }
    if let Some(p) = rec.and_then(|d| d.packed_rec()).filter(|_| was_packed) {
        if let Some(e) = p.place.get().filter(|e| e.usable() && u64::from(e.ext.psize) == stored_len) {
            let ext = e.ext;
            at.written[ext.dev as usize] = true;
            at.host.used[ext.dev as usize] += granule_bytes(stored_len, inner.granule);
            at.early_used.push(p.clone());
            return Ok(Outcome::Extent(ExtentPtr {
                logical,
                alg,
                level,
                hash,
                birth: txg,
                stored: StoredRecord::Device(ext),
            }));
        }
    }
    // after the layer's records placed early, in the same run (while early placement is
    // on, so the room it was started with is still there)
    let in_run = if inner.early_room.load(Ordering::Relaxed) {
        let mut space = inner.space.lock();
        let need = granule_bytes(stored_len, inner.granule);
        let mut run = layer.early_run.lock();
        run.as_mut().filter(|r| at.host.room(r.dev()) >= need).and_then(|r| r.alloc(&mut space, stored_len))
    } else {
        None
    };
    let ext = match in_run {
        Some((dev, offset)) => queue_write(inner, at, dev, offset, payload),
        None => put_new(inner, at, payload)?,
    };
    Ok(Outcome::Extent(ExtentPtr { logical, alg, level, hash, birth: txg, stored: StoredRecord::Device(ext) }))
}

/// Place `payload` on the best device that can hold it (device choice, packed allocation
/// in the txg's run there) and queue its write.
fn put_new(inner: &Inner, at: &mut PlaceAt<'_>, payload: Payload) -> Result<DeviceExtent> {
    let stored_len = payload.bytes().len() as u64;
    let (dev, offset) = {
        let mut space = inner.space.lock();
        // at least 1, so a device passed over below (room 0) is never chosen again
        let need = granule_bytes(stored_len, inner.granule).max(1);
        let host = &*at.host;
        let mut views = device_views(inner, &space, |i| host.room(i));
        place_on_a_device(&mut space, &mut views, stored_len, need).ok_or(EngineError::NoSpace)?
    };
    Ok(queue_write(inner, at, dev, offset, payload))
}

/// Account for `payload` placed at `offset` of device `dev` and queue its write.
fn queue_write(inner: &Inner, at: &mut PlaceAt<'_>, dev: usize, offset: u64, payload: Payload) -> DeviceExtent {
    let stored_len = payload.bytes().len() as u64;
    at.host.used[dev] += granule_bytes(stored_len, inner.granule);
    inner.placed_stored.fetch_add(stored_len, Ordering::SeqCst);
    let ext = DeviceExtent { dev: dev as u32, offset, psize: stored_len as u32 };
    at.allocated.push(ext);
    at.written[dev] = true;
    at.completion.add(1);
    inner.devs[dev].queue.submit(WriteReq { offset, payload, done: at.completion.clone() });
    ext
}

/// What device choice (crates/control) sees of each device: its queue and throughput, and
/// its room = whole free sectors + what is left in its open run, or for a growable device
/// `growable_room(index)` (the room of its host filesystem).
pub fn device_views(
    inner: &Inner,
    space: &[crate::alloc::DevSpace],
    growable_room: impl Fn(usize) -> u64,
) -> Vec<DeviceView> {
    inner
        .devs
        .iter()
        .zip(space.iter())
        .enumerate()
        .map(|(i, (d, s))| {
            let st = d.queue.stats.snapshot();
            DeviceView {
                queued_bytes: st.queued_bytes,
                throughput_bps: st.throughput_bps,
                free_bytes: s.free_bytes().map_or_else(|| growable_room(i), |f| f.saturating_add(s.run_room())),
            }
        })
        .collect()
}

/// The device and offset for a record of `stored` bytes (footprint `need` ≥ 1): the best
/// device by `choose_device` that can place it. The room in `views` is an estimate (free
/// sectors need not be contiguous), so a device that cannot place the record after all is
/// passed over for the next best one (its room set to 0).
fn place_on_a_device(
    space: &mut [crate::alloc::DevSpace],
    views: &mut [DeviceView],
    stored: u64,
    need: u64,
) -> Option<(usize, u64)> {
    loop {
        let dev = choose_device(views, need)?;
        match space[dev].alloc_packed(stored) {
            Some(off) => return Some((dev, off)),
            None => views[dev].free_bytes = 0,
        }
    }
}

/// Stage 5: make the txg's data durable before any pointer to it is.
fn flush(inner: &Inner, written: &[bool]) -> Result<()> {
    for (i, w) in written.iter().enumerate() {
        if *w {
            inner.devs[i].dev.sync()?;
        }
    }
    Ok(())
}

/// Physical bytes an extent occupies (for `blocks_bytes`, frees and fsck), in a pool whose
/// records are packed at `granule` bytes (`Inner::granule`).
pub fn extent_footprint(e: &ExtentPtr, granule: u64) -> u64 {
    match &e.stored {
        StoredRecord::Device(d) => granule_bytes(u64::from(d.psize), granule),
        StoredRecord::Inline(v) => v.len() as u64,
        // its share of the bundle (bundle.rs): the bundle's own range is freed with its
        // last member
        StoredRecord::Bundled(b) => u64::from(b.share),
    }
}

/// Stage 6: one durable metadata transaction. Returns the new committed blocks per inode.
fn commit(
    inner: &Inner,
    txg: u64,
    frozen: &[(Ino, Arc<Layer>)],
    placed: Vec<Placed>,
    early_used: &[Arc<PackedRec>],
    new_bundles: &[crate::bundle::NewBundle],
) -> Result<HashMap<Ino, u64>> {
    let mut frees: Vec<(u32, u64, u64)> = Vec::new();
    let mut unreferenced: Vec<(u32, u64, u64)> = Vec::new();
    // one bundle id per bundled extent row this commit removes (bundle.rs `apply_drops`)
    let mut drops: Vec<u64> = Vec::new();
    let granule = inner.granule;
    let compact = inner.compact_rows.load(Ordering::Relaxed);
    // the durable image takes exactly the ranges this commit points to, wherever the live
    // image placed them (early or in this txg's place stage)
    let mut durable = inner.durable.lock();
    for p in &placed {
        if let Outcome::Extent(ExtentPtr { stored: StoredRecord::Device(d), .. }) = &p.outcome {
            let len = granule_bytes(u64::from(d.psize), granule);
            if !durable[d.dev as usize].alloc_exact(d.offset, len) {
                return Err(EngineError::Corrupt(format!(
                    "txg {txg}: a record placed at {}+{len} on device {} overlaps space the pool holds allocated",
                    d.offset, d.dev
                )));
            }
        }
    }
    for b in new_bundles {
        let d = b.row.ext;
        let len = granule_bytes(u64::from(d.psize), granule);
        if !durable[d.dev as usize].alloc_exact(d.offset, len) {
            return Err(EngineError::Corrupt(format!(
                "txg {txg}: bundle {} placed at {}+{len} on device {} overlaps space the pool holds allocated",
                b.id, d.offset, d.dev
            )));
        }
    }
    let mut by_layer: Vec<Vec<Placed>> = (0..frozen.len()).map(|_| Vec::new()).collect();
    for p in placed {
        by_layer[p.layer].push(p);
    }
    let mut blocks_out = HashMap::new();
    // every metadata change made so far (nsdelta.rs); writers go on into a fresh delta
    let delta = {
        let _writers = inner.ns.meta_lock.lock();
        // the charges of what this commit carries (data written during this txg's sync,
        // charged too, are counted with it: the reserve covers that small excess)
        inner.meta_space.take();
        inner.ns.take_for_commit()
    };
    let tx = inner.db.begin_write()?;
    if let Some(d) = &delta {
        // first: the layers below see which inodes still exist
        crate::nsdelta::apply(&tx, d, granule, compact, &mut frees, &mut drops)?;
    }
    crate::bundle::insert_new(&tx, new_bundles)?;
    {
        let mut inodes = tx.open_table(tables::INODES)?;
        let mut extents = tx.open_table(tables::EXTENTS)?;
        let free_of = |e: &ExtentPtr, frees: &mut Vec<(u32, u64, u64)>, drops: &mut Vec<u64>| match e.stored {
            StoredRecord::Device(d) => frees.push((d.dev, d.offset, granule_bytes(u64::from(d.psize), granule))),
            StoredRecord::Bundled(b) => drops.push(b.bundle),
            StoredRecord::Inline(_) => {}
        };
        for (li, (ino, layer)) in frozen.iter().enumerate() {
            let attr = match inodes.get(*ino)? {
                Some(v) => Some(squeezefs_meta::encode::decode_inode(*ino, v.value())?),
                None => None,
            };
            let Some(mut attr) = attr else {
                // deleted while syncing: nothing references what we just wrote
                for p in &by_layer[li] {
                    if let Outcome::Extent(e) = &p.outcome {
                        free_of(e, &mut unreferenced, &mut drops);
                    }
                }
                continue;
            };
            let mut blocks = attr.blocks_bytes as i64;
            if let Some(floor) = layer.trunc_floor {
                let lo = keys::pair(*ino, floor);
                let hi = keys::pair(*ino, u64::MAX);
                let mut gone = Vec::new();
                for row in extents.range(&lo[..]..=&hi[..])? {
                    let (k, v) = row?;
                    gone.push((k.value().to_vec(), ExtentPtr::decode(v.value())?));
                }
                for (k, e) in gone {
                    extents.remove(&k[..])?;
                    blocks -= extent_footprint(&e, granule) as i64;
                    free_of(&e, &mut frees, &mut drops);
                }
            }
            for (&idx, rec) in &layer.recs {
                if matches!(rec, Rec::Hole) {
                    let k = keys::pair(*ino, idx);
                    if let Some(old) = extents.remove(&k[..])? {
                        let e = ExtentPtr::decode(old.value())?;
                        blocks -= extent_footprint(&e, granule) as i64;
                        free_of(&e, &mut frees, &mut drops);
                    }
                }
            }
            for p in &by_layer[li] {
                let k = keys::pair(*ino, p.idx);
                let old = extents.remove(&k[..])?.map(|v| ExtentPtr::decode(v.value())).transpose()?;
                if let Some(e) = old {
                    blocks -= extent_footprint(&e, granule) as i64;
                    free_of(&e, &mut frees, &mut drops);
                }
                if let Outcome::Extent(e) = &p.outcome {
                    extents.insert(&k[..], &e.encode_for(compact)[..])?;
                    blocks += extent_footprint(e, granule) as i64;
                }
            }
            attr.size = layer.size;
            attr.blocks_bytes = blocks.max(0) as u64;
            inodes.insert(*ino, &squeezefs_meta::encode::encode_inode_for(&attr, compact)[..])?;
            blocks_out.insert(*ino, attr.blocks_bytes);
        }
        let mut sbt = tx.open_table(tables::SUPERBLOCK)?;
        let mut sb = {
            let v = sbt.get(0u8)?.ok_or_else(|| EngineError::Corrupt("superblock missing".into()))?;
            Superblock::decode(v.value())?
        };
        // the bundles that lost members; the ranges of those left without any are freed below
        crate::bundle::apply_drops(&tx, &drops, granule, &mut frees)?;
        sb.txg = txg;
        sb.next_ino = sb.next_ino.max(inner.next_ino.load(Ordering::Relaxed));
        sbt.insert(0u8, &sb.encode()[..])?;
        // space: the frees go into the durable image now, into the live one (where they
        // can be placed again) only after this commit is durable
        for (dev, off, len) in frees.iter().chain(unreferenced.iter()) {
            // an extent read back from the store names its range: a damaged one fails the
            // commit (the pool suspends, waiters get an error) instead of the txg thread
            let space = durable.get_mut(*dev as usize).filter(|s| *len == 0 || s.holds_range(*off, *len)).ok_or_else(|| {
                EngineError::Corrupt(format!(
                    "an extent being freed names device {dev}, offset {off}, {len} bytes: not a range of this pool (the metadata store is damaged)"
                ))
            })?;
            space.free(*off, *len);
        }
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
                    let v =
                        dt.get(i as u32)?.ok_or_else(|| EngineError::Corrupt(format!("device {i} record missing")))?;
                    squeezefs_meta::DeviceRecord::decode(v.value())?
                };
                rec.alloc_end = s.end;
                dt.insert(i as u32, &rec.encode()[..])?;
            }
        }
    }
    tx.commit()?;
    drop(durable);
    for p in early_used {
        if let Some(e) = p.place.get() {
            e.set_committed();
        }
    }
    // before anything this commit wrote leaves the delta or the dirty cache (snapshot.rs)
    inner.snap.committed(&inner.db);
    if delta.is_some() {
        inner.ns.committed();
    }
    frees.append(&mut unreferenced);
    free_live(inner, &frees);
    Ok(blocks_out)
}

/// Stage 6b: give space back to the live image (a commit's frees, once it is durable:
/// before, the last committed txg may still point into them; or early placements given
/// up, once their writes finished) and to the devices (holes in device files, so deleting
/// data returns host disk space). The live lock is held until the discards are done: a
/// range free in the live image may be placed early at any moment, and a discard after a
/// write into it would punch that write away.
pub fn free_live(inner: &Inner, ranges: &[(u32, u64, u64)]) {
    // the ranges themselves first, without the lock: they are still allocated in the live
    // image, so nothing is placed in them meanwhile (a large fragmented delete is thousands
    // of punches, which must not stall placement and admission)
    discard(inner, ranges);
    let mut space = inner.space.lock();
    // then, under the lock, the edge pages a range shares with free neighbours: wholly free
    // only now (a page or two per range)
    let mut edges = Vec::new();
    for &(dev, off, len) in ranges {
        let (s, l) = space[dev as usize].free(off, len);
        edges.extend(edge_pages(off, len, s, l).into_iter().flatten().map(|p| (dev, p, PUNCH_PAGE)));
    }
    discard(inner, &edges);
    drop(space);
}

/// The host page a device file gives back whole (`Device::discard` punches whole pages).
const PUNCH_PAGE: u64 = 4096;

/// Start offsets of the host pages that the freed range `[off, off+len)` only partly covers
/// (its first and last page) and that lie wholly inside `[s, s+l)`, the merged free range
/// holding it: free as a whole only now. A page with bytes outside `[s, s+l)` may hold a
/// live record's bytes and is never returned.
fn edge_pages(off: u64, len: u64, s: u64, l: u64) -> [Option<u64>; 2] {
    let whole_in = |page: u64, a: u64, b: u64| page >= a && page + PUNCH_PAGE <= b;
    let edge = |page: u64| !whole_in(page, off, off + len) && whole_in(page, s, s + l);
    let first = off / PUNCH_PAGE * PUNCH_PAGE;
    let last = (off + len).div_ceil(PUNCH_PAGE) * PUNCH_PAGE - PUNCH_PAGE;
    [edge(first).then_some(first), (last != first && edge(last)).then_some(last)]
}

fn discard(inner: &Inner, ranges: &[(u32, u64, u64)]) {
    for &(dev, off, len) in ranges {
        if let Err(e) = inner.devs[dev as usize].dev.discard(off, len) {
            log::warn!("discarding {len} freed bytes at {off} on device {dev}: {e}");
        }
    }
}

/// Stage 7.
fn release(inner: &Inner, frozen: &[(Ino, Arc<Layer>)], blocks: &HashMap<Ino, u64>) {
    let mut bytes = 0u64;
    for (ino, layer) in frozen {
        bytes += layer.bytes;
        // before the syncing layer disappears, so no reader sees a stale cached pointer
        inner.ext_cache.invalidate(*ino, None);
        if let Some(f) = inner.files.get(*ino) {
            let mut fd = f.lock();
            if fd.syncing.as_ref().is_some_and(|s| Arc::ptr_eq(s, layer)) {
                fd.syncing = None;
                if let Some(b) = blocks.get(ino) {
                    fd.committed_blocks = *b;
                }
            }
        }
        inner.files.retire_if_clean(*ino);
    }
    let _ = inner.dirty_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| Some(d.saturating_sub(bytes)));
    inner.throttle_cv.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::DevSpace;
    use std::collections::BTreeMap;

    /// Over every freed range and merged free range of up to four pages on a 256-byte grid:
    /// an edge page lies wholly inside the merged range (punching it cannot touch a live
    /// byte), and every page the freed range touches that lies wholly inside the merged
    /// range is punched, by the first pass (wholly inside the freed range) or as an edge.
    #[test]
    fn edge_pages_lie_inside_the_free_range_and_cover_what_became_free() {
        let step = 256;
        let span = 4 * PUNCH_PAGE;
        for s in (0..span).step_by(step) {
            for l in (step as u64..=span - s).step_by(step) {
                for off in (s..s + l).step_by(step) {
                    for len in (step as u64..=s + l - off).step_by(step) {
                        let edges: Vec<u64> = edge_pages(off, len, s, l).into_iter().flatten().collect();
                        for &p in &edges {
                            assert!(p >= s && p + PUNCH_PAGE <= s + l, "page {p} outside [{s}, {})", s + l);
                        }
                        let mut page = off / PUNCH_PAGE * PUNCH_PAGE;
                        while page < off + len {
                            let in_free = page >= s && page + PUNCH_PAGE <= s + l;
                            let in_range = page >= off && page + PUNCH_PAGE <= off + len;
                            if in_free && !in_range {
                                assert!(
                                    edges.contains(&page),
                                    "page {page} of [{off}, {}) in [{s}, {}) not punched",
                                    off + len,
                                    s + l
                                );
                            }
                            page += PUNCH_PAGE;
                        }
                        assert!(edges.len() < 2 || edges[0] != edges[1], "one page twice");
                    }
                }
            }
        }
    }

    fn view(free_bytes: u64, throughput_bps: f64) -> DeviceView {
        DeviceView { queued_bytes: 0, throughput_bps, free_bytes }
    }

    #[test]
    fn a_device_whose_free_sectors_are_scattered_is_passed_over() {
        // device 0 (faster, so chosen first) has 4 whole free sectors, none of them adjacent;
        // device 1 has room. A record of 3 sectors goes to device 1.
        let free: BTreeMap<u64, u64> = (0..4).map(|i| (4096 + i * 1024, 512)).collect();
        let mut space = vec![
            DevSpace::new(4096, 4096 + 8 * 1024, Some(4096 + 8 * 1024), free, 512, 1),
            DevSpace::new(4096, 4096, Some(1 << 20), BTreeMap::new(), 512, 1),
        ];
        let mut views = vec![view(space[0].free_bytes().unwrap(), 2e9), view(space[1].free_bytes().unwrap(), 1e9)];
        assert_eq!(views[0].free_bytes, 2048);
        assert_eq!(choose_device(&views, 1500), Some(0), "device 0 looks best");
        assert_eq!(place_on_a_device(&mut space, &mut views, 1500, 1500), Some((1, 4096)));
        // a record that fits one of device 0's sectors stays there
        let mut views = vec![view(2048, 2e9), view(1 << 20, 1e9)];
        assert_eq!(place_on_a_device(&mut space, &mut views, 300, 300), Some((0, 4096)));
        // no device can place it: None (NoSpace), not a loop
        let mut views = vec![view(2048, 2e9), view(0, 1e9)];
        assert_eq!(place_on_a_device(&mut space, &mut views, 1500, 1500), None);
    }
}
