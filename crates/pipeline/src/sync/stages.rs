//! The SYNCING state of one txg: its stages, run in order by `sync_txg` from the table
//! [`STAGES`] (each stage a method of [`TxgSync`], the txg's state while it syncs):
//!
//! 1. `cut` — list the data records of every frozen layer (records are already cut to
//!    their file's record size by the dirty cache; the last one is short).
//! 2. `bundle` — in pools that bundle (bundle.rs), take the short last records of files
//!    out of the list and group them into bundles, each one buffer of their bytes.
//! 3. `compress` — queue every record's and every bundle's compression on the workers
//!    (compress/queue.rs): zero test, heuristic, compression with early abort, xxh3 of the
//!    stored bytes; results stream back as they finish. Records compressed early are not
//!    compressed again: those held PACKED (dirty.rs) are sent as they are, the others'
//!    slots forward their result.
//! 4. `place` — as results arrive, in file order (bundles after every record): small files
//!    inline; records placed while their layer was open (early_place.rs) keep that place;
//!    other records and bundles get a device (smallest expected completion, crates/control)
//!    and space packed into the txg's run on that device (alloc.rs, live image), and go to
//!    that device's write queue at once (compression and device writes overlap); a
//!    bundle's members get pointers to their slices.
//! 5. `write` — device writers drain their queues in large sequential batches; the stage
//!    waits for every write of the txg, early writes included.
//! 6. `flush` — fdatasync every device written.
//! 7. `commit` — one durable redb transaction (commit.rs): extent pointers, sizes, blocks,
//!    new bundles and the member counts of old ones, freed space (replaced records, inode
//!    deletions, bundles left without members), allocation state (the durable image: this
//!    txg's extents taken exactly, its frees given back), txg; then the freed ranges go
//!    back to the live image and are discarded on the devices (holes in files).
//! 8. `release` — stop counting what the txg placed, invalidate extent caches, drop the
//!    syncing layers, return dirty bytes, wake throttled writers.
//!
//! A stage that fails ends the txg (`fail`): before the commit stage nothing of the txg
//! is referenced, so its placements go back to the live image and, when the failure was
//! no room or an object store that stayed away past its timeout, the frozen layers are
//! handed back for another try (txg/state.rs STALLED); from the commit stage on the pool is
//! suspended.
//!
//! No lock is held across compression or I/O: the stages work on frozen `Arc<Layer>`s.

use crate::base::accounting::{Charge, Counter};
use crate::base::error::{EngineError, Internal, IoError, Result};
use crate::base::units::granule_bytes;
use crate::compress::policy::Compressed;
use crate::compress::queue::{Claim, CompressResult, Slot};
use crate::engine::inner::Inner;
use crate::space::devq::{Completion, Payload, WriteReq};
use crate::space::placement::place_on_a_device;
use crate::sync::commit::{Outcome, Placed};
use crate::txg::bundle::{NewBundle, Plan};
use crate::txg::dirty::{Layer, PackedRec, Rec};
use crate::txg::state::{Frozen, SyncFailure};
use crate::write::early;
use squeezefs_meta::{DeviceExtent, ExtentPtr, Ino, StoredRecord};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One stage of the SYNCING state.
type Stage = fn(&mut TxgSync<'_>) -> Result<()>;

/// The stages of a txg, in order (see the block comment).
pub const STAGES: [(&str, Stage); 8] = [
    ("cut", |s| s.cut()),
    ("bundle", |s| s.bundle()),
    ("compress", |s| s.compress()),
    ("place", |s| s.place()),
    ("write", |s| s.write()),
    ("flush", |s| s.flush()),
    ("commit", |s| s.commit()),
    ("release", |s| s.release()),
];

/// Sync txg `txg` made of the `frozen` layers: run the stages; on failure, what the txg
/// may do next (txg/state.rs).
pub fn sync_txg(inner: &Arc<Inner>, txg: u64, frozen: Frozen) -> std::result::Result<(), SyncFailure> {
    let mut s = TxgSync::new(inner, txg, frozen);
    let mut times = Vec::with_capacity(STAGES.len());
    for (name, stage) in STAGES {
        let t0 = Instant::now();
        if let Err(e) = stage(&mut s) {
            return Err(s.fail(e));
        }
        times.push((name, t0.elapsed()));
    }
    log::debug!(
        "txg {txg}: {} records of {} files, {} bundles; {}",
        s.jobs.len(),
        s.frozen.len(),
        s.new_bundles.len(),
        timings(&times)
    );
    Ok(())
}

fn timings(times: &[(&str, Duration)]) -> String {
    times.iter().map(|(n, d)| format!("{n} {d:?}")).collect::<Vec<_>>().join(", ")
}

/// A txg's state while it syncs: what each stage leaves for the next.
pub struct TxgSync<'a> {
    inner: &'a Arc<Inner>,
    txg: u64,
    frozen: Frozen,
    /// (layer index, record index) of every data record, in file order (`cut`), then of
    /// every bundle: bundle `b` is `(frozen.len() + b, 0)` (`bundle`)
    jobs: Vec<(usize, u64)>,
    /// the bundles planned (`bundle`)
    bundles: Vec<Plan>,
    /// the bundles placed, for the commit (`place`)
    new_bundles: Vec<NewBundle>,
    /// compression results, in completion order (`compress`)
    results: Option<crossbeam_channel::Receiver<CompressResult>>,
    /// what the txg does to each record (`place`)
    placed: Vec<Placed>,
    /// a placement that failed: reported by `write`, once the writes queued before it
    /// have finished (their space is then given back safely)
    place_error: Option<EngineError>,
    /// the writes queued by `place`
    completion: Arc<Completion>,
    /// device extents placed by this txg (given back if it fails before its commit)
    allocated: Vec<DeviceExtent>,
    /// the stored bytes this txg placed, counted as placed until just before its release
    placed_charge: Charge,
    /// records whose early placement this txg keeps
    early_used: Vec<Arc<PackedRec>>,
    /// devices to flush
    written: Vec<bool>,
    /// host filesystems under growable devices as the txg starts, and what it placed on
    /// each device so far: a growable device has room only within its own filesystem
    host: HostRoom,
    /// the commit stage has started: from then on it has applied frees to the space map
    /// (records of files deleted meanwhile included), and a failure must not free again
    committing: bool,
    /// committed physical bytes per inode (`commit`)
    blocks: HashMap<Ino, u64>,
}

impl<'a> TxgSync<'a> {
    fn new(inner: &'a Arc<Inner>, txg: u64, frozen: Frozen) -> TxgSync<'a> {
        inner.space.refresh_host(&inner.meta_space);
        inner.early.reclaim(&inner.space, false);
        inner.refresh_early_room(false);
        let devices = inner.space.devs().len();
        TxgSync {
            inner,
            txg,
            frozen,
            jobs: Vec::new(),
            bundles: Vec::new(),
            new_bundles: Vec::new(),
            results: None,
            placed: Vec::new(),
            place_error: None,
            completion: Arc::new(Completion::default()),
            allocated: Vec::new(),
            placed_charge: inner.acct.charge(Counter::Placed, 0),
            early_used: Vec::new(),
            written: vec![false; devices],
            host: HostRoom { free: inner.space.host_rooms(), used: vec![0; devices] },
            committing: false,
            blocks: HashMap::new(),
        }
    }

    /// Stage 1: (layer, record) pairs holding data; shared records are stored already and
    /// go straight to the commit.
    fn cut(&mut self) -> Result<()> {
        for (li, (_, layer)) in self.frozen.iter().enumerate() {
            for (&idx, rec) in &layer.recs {
                match rec {
                    Rec::Data(_) => self.jobs.push((li, idx)),
                    Rec::Shared(e) => self.placed.push(Placed { layer: li, idx, outcome: Outcome::Shared(e.clone()) }),
                    Rec::Hole => {}
                }
            }
        }
        Ok(())
    }

    /// Stage 2: the records that go into bundles leave the job list; each bundle is one
    /// job after every record's (bundle.rs `select`).
    fn bundle(&mut self) -> Result<()> {
        let inner = self.inner;
        let jobs = std::mem::take(&mut self.jobs);
        let (jobs, bundles) =
            inner.bundles.select(inner.recordsize, inner.bundle_size, inner.compress.pool_policy(), &self.frozen, jobs);
        let first = self.frozen.len();
        self.jobs = jobs;
        self.jobs.extend((0..bundles.len()).map(|b| (first + b, 0)));
        self.bundles = bundles;
        Ok(())
    }

    /// Stage 3 (see `compress_records`).
    fn compress(&mut self) -> Result<()> {
        self.results = Some(compress_records(self.inner, &self.frozen, &self.jobs, &self.bundles));
        Ok(())
    }

    /// Stage 4: results arrive in completion order; they are placed in job order (file by
    /// file, record by record, then the bundles), so a file's records of one txg lie on the
    /// device in file order for sequential reads, whichever worker finished first. After a
    /// placement fails, the remaining results are received and dropped.
    fn place(&mut self) -> Result<()> {
        let results = self.results.take().expect("the compress stage ran");
        // the plans are not needed past this stage (a raw bundle's write holds its bytes)
        let bundles = std::mem::take(&mut self.bundles);
        let mut waiting: BTreeMap<usize, Compressed> = BTreeMap::new();
        let mut next = 0usize;
        for _ in 0..self.jobs.len() {
            // every job sends its result, except one that panicked (fault.rs): its sender
            // is dropped unused, and once the others have sent, the channel ends
            let Ok((li, idx, c)) = results.recv() else {
                self.place_error.get_or_insert(EngineError::Internal(Internal::CompressResultLost));
                break;
            };
            if self.place_error.is_some() {
                continue;
            }
            let pos = self.jobs.binary_search(&(li, idx)).expect("a result for a job of this txg");
            waiting.insert(pos, c);
            while let Some(c) = waiting.remove(&next) {
                let (li, idx) = self.jobs[next];
                next += 1;
                let placed = match li.checked_sub(self.frozen.len()) {
                    Some(b) => self.place_bundle(&bundles[b], c),
                    None => self
                        .place_record(li, idx, c)
                        .map(|outcome| self.placed.push(Placed { layer: li, idx, outcome })),
                };
                if let Err(e) = placed {
                    self.place_error = Some(e);
                    break;
                }
            }
        }
        self.close_runs();
        Ok(())
    }

    /// The runs' unused ends go back to the live image (also after a failure, which then
    /// gives back the placed records themselves).
    fn close_runs(&self) {
        let mut live = self.inner.space.live();
        for s in live.iter_mut() {
            s.close_run();
        }
        for (_, layer) in &self.frozen {
            if let Some(r) = layer.early_run.lock().take() {
                r.close(&mut live);
            }
        }
    }

    /// Stage 5: every write of the txg has finished, the early writes of the placements
    /// it keeps included; then a failed placement or write fails the txg.
    fn write(&mut self) -> Result<()> {
        let mut write_err: Option<IoError> = self.completion.wait();
        for p in &self.early_used {
            if let Some(err) = p.place.get().and_then(|e| e.done().wait()) {
                write_err.get_or_insert(err);
            }
        }
        if let Some(e) = self.place_error.take() {
            return Err(e);
        }
        match write_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Stage 6: make the txg's data durable before any pointer to it is.
    fn flush(&mut self) -> Result<()> {
        self.inner.space.flush(&self.written)
    }

    /// Stage 7 (commit.rs), unless the pool was suspended meanwhile (a panic elsewhere,
    /// fault.rs): then nothing more becomes durable.
    fn commit(&mut self) -> Result<()> {
        if let Some(e) = self.inner.txg.suspension() {
            return Err(e);
        }
        self.committing = true;
        let placed = std::mem::take(&mut self.placed);
        let bundles = std::mem::take(&mut self.new_bundles);
        self.blocks =
            crate::sync::commit::commit(self.inner, self.txg, &self.frozen, placed, &bundles, &self.early_used)?;
        if !self.frozen.is_empty() {
            self.inner.bg.data_committed(self.txg);
        }
        Ok(())
    }

    /// Stage 8: the txg is durable; its memory goes.
    fn release(&mut self) -> Result<()> {
        let inner = self.inner;
        // the host space this txg took, before `release_layers` stops counting its bytes as
        // dirty: otherwise admission would, in between, see both the old host figure and
        // the lower dirty count, and accept data the host has no room for
        inner.space.refresh_host(&inner.meta_space);
        // the measurement holds what the commit took in the metadata store
        inner.meta_space.counted();
        self.uncount_placed();
        self.abandon_unkept_placements();
        release_layers(inner, &self.frozen, &self.blocks);
        for (_, layer) in std::mem::take(&mut self.frozen) {
            // the last reference (device writes and compress jobs are done): recycle
            if let Ok(l) = Arc::try_unwrap(layer) {
                inner.dirty.bufs.give_layer(l);
            }
        }
        // what was given up during this txg and has been written by now (the ranges whose
        // write is still in flight wait for the next txg)
        inner.early.reclaim(&inner.space, false);
        if inner.acct.dirty() == 0 && inner.compress.queue.is_empty() {
            // nothing compressed waits for a device: the level decisions' count of pending
            // bytes starts again from here (levels.rs)
            inner.compress.levels.rebase();
        }
        Ok(())
    }

    /// What this txg placed stops counting as placed (accounting.rs: before the release).
    fn uncount_placed(&mut self) {
        for e in self.early_used.iter().filter_map(|p| p.place.get()) {
            e.uncount();
        }
        self.placed_charge.take();
        self.early_used.clear();
    }

    /// Early placements this txg did not keep (the record went inline, or was placed
    /// again): given up now, not when the last reader drops the layer, so admission does
    /// not count them as placed after the release stopped counting them as dirty.
    fn abandon_unkept_placements(&self) {
        for (_, layer) in &self.frozen {
            for rec in layer.recs.values() {
                if let Rec::Data(d) = rec {
                    if let Some(e) = d.packed_rec().and_then(|p| p.place.get()) {
                        e.abandon();
                    }
                }
            }
        }
    }

    /// The txg failed with `e` (see the block comment).
    fn fail(mut self, e: EngineError) -> SyncFailure {
        let inner = self.inner;
        // nothing of this txg is referenced: give its space back (in memory only). A failed
        // commit leaves the map as it was partly changed; the pool is suspended after any
        // failed txg (txg/state.rs) and the next open reads the durable state.
        if !self.committing {
            let mut live = inner.space.live();
            for d in &self.allocated {
                live[d.dev as usize].free(d.offset, granule_bytes(u64::from(d.psize), inner.granule));
            }
        }
        // the early placements stay placed (a retry keeps them), and counted
        self.placed_charge.take();
        self.early_used.clear();
        inner.refresh_early_room(true);
        let retryable = !self.committing
            && (matches!(e, EngineError::NoSpace) || matches!(&e, EngineError::Io(io) if io.is_store_stall()));
        SyncFailure { error: e, retry: retryable.then(|| std::mem::take(&mut self.frozen)) }
    }
}

/// Every record's and bundle's compression result, in completion order. A record whose
/// early compression (early.rs) was started on its current bytes reuses it (done: at once;
/// running or queued: the job forwards its result here); the others, and the bundles (job
/// `(frozen.len() + b, 0)` for bundle `b`), are queued as urgent tasks, ahead of the next
/// txg's early compression.
fn compress_records(
    inner: &Arc<Inner>,
    frozen: &[(Ino, Arc<Layer>)],
    jobs: &[(usize, u64)],
    bundles: &[Plan],
) -> crossbeam_channel::Receiver<CompressResult> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let global = inner.compress.pool_policy();
    // per file: how many records in a row compressed (see policy::TRUST_AFTER)
    let streaks: Vec<Arc<AtomicU32>> = frozen.iter().map(|_| Arc::new(AtomicU32::new(0))).collect();
    let (mut reused, mut fresh, mut packed) = (0usize, 0usize, 0usize);
    let mut new_slots = Vec::new();
    for &(li, idx) in jobs.iter().filter(|(li, _)| *li < frozen.len()) {
        let policy = frozen[li].1.policy.unwrap_or(global);
        let Some(Rec::Data(rec)) = frozen[li].1.recs.get(&idx) else { unreachable!("cut lists data records only") };
        // held packed: compressed already, under the policy of the time it was written
        // (a policy applies to data written from its change on)
        if let Some(p) = rec.packed_rec() {
            p.ready.take();
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
                    early::queue_urgent(inner, slot.clone());
                    continue;
                }
                Claim::Unusable => {}
            }
        }
        fresh += 1;
        let Some(buf) = rec.shared() else { unreachable!("packed records were sent above") };
        new_slots.push(Slot::new(buf, policy, frozen[li].0, streaks[li].clone(), &inner.acct).forward_to(
            tx.clone(),
            li,
            idx,
        ));
    }
    for (b, plan) in bundles.iter().enumerate() {
        let slot = Slot::bundle(plan.buf.clone(), plan.policy, plan.ino, &inner.acct);
        new_slots.push(slot.forward_to(tx.clone(), frozen.len() + b, 0));
    }
    early::queue_urgent_many(inner, new_slots);
    log::trace!(
        "compress: {packed} records held packed, {reused} compressed early, {fresh} now, {} bundles",
        bundles.len()
    );
    rx
}

/// Room on the host filesystems under growable devices during one txg's place stage.
struct HostRoom {
    /// per device: its host filesystem at the start of the txg (`None`: fixed device)
    free: Vec<Option<crate::space::placement::HostSpace>>,
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

impl TxgSync<'_> {
    /// One record's placement: inline, an early placement kept, or device choice + packed
    /// allocation + queueing of its write.
    fn place_record(&mut self, li: usize, idx: u64, c: Compressed) -> Result<Outcome> {
        let inner = self.inner;
        let txg = self.txg;
        let layer = &self.frozen[li].1;
        let rec = match layer.recs.get(&idx) {
            Some(Rec::Data(d)) => Some(d),
            _ => None,
        };
        let logical = rec.map_or(0, |d| d.len()) as u32;
        let was_packed = matches!(c, Compressed::Packed { .. });
        let (alg, level, hash, payload) = match c {
            Compressed::Zeros => return Ok(Outcome::Hole),
            Compressed::Raw { hash } => {
                // the device writes the record's raw bytes from the layer: a record held
                // packed has none (the compress stage never makes a raw result for one)
                let Some(raw) = rec.and_then(|d| d.shared()) else {
                    return Err(EngineError::Internal(Internal::RawResultWithoutBytes { idx }));
                };
                (0u8, 0, hash, Payload::Raw(raw))
            }
            Compressed::Packed { codec, bytes, hash } => (codec.alg.id(), codec.level, hash, Payload::Owned(bytes)),
        };
        let stored_len = payload.bytes().len() as u64;
        let extent = |stored| ExtentPtr { logical, alg, level, hash, birth: txg, stored };
        if idx == 0 && layer.size <= layer.rs && stored_len <= inner.max_inline {
            return Ok(Outcome::Extent(extent(StoredRecord::Inline(payload.bytes().to_vec()))));
        }
        if let Some(p) = rec.and_then(|d| d.packed_rec()).filter(|_| was_packed) {
            if let Some(e) = p.place.get().filter(|e| e.usable() && u64::from(e.ext.psize) == stored_len) {
                let ext = e.ext;
                self.written[ext.dev as usize] = true;
                self.host.used[ext.dev as usize] += granule_bytes(stored_len, inner.granule);
                self.early_used.push(p.clone());
                return Ok(Outcome::Extent(extent(StoredRecord::Device(ext))));
            }
        }
        let at = self.alloc(Some(li), stored_len)?;
        let ext = self.put(at, payload);
        Ok(Outcome::Extent(extent(StoredRecord::Device(ext))))
    }

    /// A bundle's placement (bundle.rs `place`): device choice + packed allocation +
    /// queueing of its write, like a record's; its members' outcomes point into it.
    fn place_bundle(&mut self, plan: &Plan, c: Compressed) -> Result<()> {
        let (inner, txg) = (self.inner, self.txg);
        let mut put = |payload: Payload| {
            let at = self.alloc(None, payload.bytes().len() as u64)?;
            Ok(self.put(at, payload))
        };
        let (members, new) = inner.bundles.place(txg, inner.granule, plan, c, &mut put)?;
        self.placed.extend(members.into_iter().map(|(layer, idx, e)| Placed {
            layer,
            idx,
            outcome: e.map_or(Outcome::Hole, Outcome::Extent),
        }));
        self.new_bundles.extend(new);
        Ok(())
    }

    /// Count `payload`, placed at `at` (device, offset), as this txg's and queue its write.
    fn put(&mut self, (dev, offset): (usize, u64), payload: Payload) -> DeviceExtent {
        let inner = self.inner;
        let stored_len = payload.bytes().len() as u64;
        self.host.used[dev] += granule_bytes(stored_len, inner.granule);
        self.placed_charge.add(stored_len);
        let ext = DeviceExtent { dev: dev as u32, offset, psize: stored_len as u32 };
        self.allocated.push(ext);
        self.written[dev] = true;
        self.completion.add(1);
        inner.space.submit(dev, WriteReq { offset, payload, done: self.completion.clone() });
        ext
    }

    /// Space for `stored` bytes of layer `li`'s record (`None`: a bundle's): after the
    /// layer's records placed early, in the same run (while early placement is on, so the
    /// room it was started with is still there), else on the device `place_on_a_device`
    /// picks; NoSpace when no device has room.
    fn alloc(&self, li: Option<usize>, stored: u64) -> Result<(usize, u64)> {
        let inner = self.inner;
        let mut live = inner.space.live();
        if let Some(li) = li.filter(|_| inner.early.allowed()) {
            let need = granule_bytes(stored, inner.granule);
            let mut run = self.frozen[li].1.early_run.lock();
            if let Some(at) =
                run.as_mut().filter(|r| self.host.room(r.dev()) >= need).and_then(|r| r.alloc(&mut live, stored))
            {
                return Ok(at);
            }
        }
        // at least 1, so a device passed over below (room 0) is never chosen again
        let need = granule_bytes(stored, inner.granule).max(1);
        let mut views = inner.space.device_views(&live, |i| self.host.room(i));
        place_on_a_device(&mut live, &mut views, stored, need).ok_or(EngineError::NoSpace)
    }
}

/// Detach the frozen layers from their files (each file's committed bytes updated) and
/// return their dirty bytes; wake writers waiting for dirty memory.
fn release_layers(inner: &Inner, frozen: &[(Ino, Arc<Layer>)], blocks: &HashMap<Ino, u64>) {
    for (ino, layer) in frozen {
        // before the syncing layer disappears, so no reader sees a stale cached pointer
        inner.cache.extents.invalidate(*ino, None);
        if let Some(f) = inner.dirty.files.get(*ino) {
            let mut fd = f.lock();
            if fd.syncing.as_ref().is_some_and(|s| Arc::ptr_eq(s, layer)) {
                fd.syncing = None;
                fd.commits += 1;
                if let Some(b) = blocks.get(ino) {
                    fd.committed_blocks = *b;
                }
            }
        }
        inner.dirty.files.retire_if_clean(*ino);
    }
    for (_, layer) in frozen {
        inner.acct.release_layer(&layer.bytes);
    }
    inner.throttle.wake_all();
}
