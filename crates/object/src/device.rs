//! [`ObjectDevice`]: the [`Device`] over a bucket prefix.
//!
//! States of a written byte: in the open segment (memory) → in a sealed segment being
//! uploaded (memory) → uploaded, not yet in the map (memory, object complete) → committed
//! (map durable; served by ranged GETs through the read cache). `sync` moves everything
//! written before it to committed, or fails and leaves it where it was, to be sent by the
//! next `sync`: nothing is dropped while the store is away.
//!
//! Locks: `sync_lock` serialises syncs (one commit at a time); `state` guards the view
//! and the in-memory segments and is never held across a request to the store.
//!
//! Tunables ([`ObjectOptions`]): segment size (default 32 MiB; a full open segment is
//! sealed and its upload started at once, at most `max_inflight` at a time), read cache
//! size and directory, and `stall_timeout`: how long a sync keeps retrying a store that
//! does not take the data before it fails with an I/O error (default 120 s).

use crate::backup::BACKUP_DIR;
use crate::backup_io::Protection;
use crate::cache::{CacheUse, ReadCache};
use crate::config::StoreConfig;
use crate::error::{ObjectError, StoreFault};
use crate::extents::{Extent, Extents, Op, Piece};
use crate::map::{Commit, MapStore};
use crate::readahead::{Prefetcher, ReadAhead};
use crate::segment::{parse_segment_name, segment_name, SegmentRow, BLOCK, SEGMENT_DIR};
use crate::spec::ObjectSpec;
use crate::store::{RequestLimits, Store};
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use squeezefs_device::{Device, DeviceError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct ObjectOptions {
    /// A segment is sealed and uploaded once it holds this many bytes.
    pub segment_bytes: u64,
    /// Sealed segments uploading at once; a writer past it waits.
    pub max_inflight: usize,
    pub cache_dir: PathBuf,
    /// 0: no read cache.
    pub cache_bytes: u64,
    /// How long a sync retries a store that does not take the data before it fails.
    pub stall_timeout: Duration,
    pub limits: RequestLimits,
    /// Refuse writes (a read-only mount).
    pub read_only: bool,
    /// Segments whose live bytes are below this fraction of their size are repacked.
    pub repack_below: f64,
    /// How often the background repack looks for such segments (`start_repack`).
    pub repack_every: Duration,
}

pub const DEFAULT_SEGMENT_BYTES: u64 = 32 << 20;
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Segment numbers a writable open skips past the map's next number and the highest one
/// listed. A dead process may still have a PUT land for any number it sealed; it held at
/// most its dirty data's worth of sealed segments (a sync that fails keeps them), far
/// fewer than this, and numbers are 64-bit: 2^44 opens before they run out.
pub const REUSE_GAP: u64 = 1 << 20;
/// After a GET found the store not answering, reads fail without asking it for this long.
pub const READ_BACKOFF: Duration = Duration::from_secs(1);

impl ObjectOptions {
    /// `limits` bounded by `stall_timeout`: no single call (retries included) outlasts it,
    /// so a sync gives up about `stall_timeout` after the store stopped answering, a read of
    /// data not cached fails in that time too, and neither waits for an answer that never
    /// comes.
    pub fn request_limits(&self) -> RequestLimits {
        let mut l = self.limits.clone();
        l.retry_timeout = l.retry_timeout.min(self.stall_timeout);
        l.deadline = Some(l.deadline.map_or(self.stall_timeout, |d| d.min(self.stall_timeout)));
        l
    }

    /// Defaults, with the read cache in `cache_dir`.
    pub fn new(cache_dir: PathBuf) -> ObjectOptions {
        ObjectOptions {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            max_inflight: 2,
            cache_dir,
            cache_bytes: DEFAULT_CACHE_BYTES,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            limits: RequestLimits::default(),
            read_only: false,
            repack_below: 0.5,
            repack_every: Duration::from_secs(10),
        }
    }
}

/// Counters of the device, for stats and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectUse {
    /// committed segments and their bytes, and the bytes of them still referenced
    pub segments: u64,
    pub segment_bytes: u64,
    pub live_bytes: u64,
    pub puts: u64,
    pub gets: u64,
    pub get_bytes: u64,
    /// GETs the read-ahead issued in the background (in `gets` too), and blocks readers
    /// took from one of them still in flight
    pub prefetches: u64,
    pub prefetch_waits: u64,
    /// bytes copied by repack, and segment objects deleted
    pub repacked_bytes: u64,
    pub deleted_segments: u64,
    pub cache: CacheUse,
}

/// What one repack pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepackReport {
    pub segments: u64,
    pub bytes: u64,
}

/// One sealed segment: complete, uploading or uploaded, not yet in the map.
struct Sealed {
    id: u64,
    data: Bytes,
    /// when its first upload began: a stall is counted from the first attempt that failed
    started: Instant,
    /// `None` while the upload runs, then its outcome
    done: Mutex<Option<Result<(), String>>>,
    cv: Condvar,
}

impl Sealed {
    fn wait(&self) -> Result<(), String> {
        let mut d = self.done.lock();
        while d.is_none() {
            self.cv.wait(&mut d);
        }
        d.clone().expect("set above")
    }

    /// An upload's outcome; a late failure of an attempt a retry has overtaken does not
    /// undo the retry's success.
    fn finish(&self, r: Result<(), String>) {
        let mut d = self.done.lock();
        if matches!(*d, Some(Ok(()))) {
            return;
        }
        *d = Some(r);
        drop(d);
        self.cv.notify_all();
    }
}

pub(crate) struct State {
    view: Extents,
    /// committed segments
    segments: BTreeMap<u64, Arc<SegmentRow>>,
    /// changes to the view since the last commit, in order
    ops: Vec<Op>,
    open: Vec<u8>,
    open_id: u64,
    sealed: Vec<Arc<Sealed>>,
    len: u64,
    committed_len: u64,
    /// segments whose objects are deleted, their rows to drop at the next commit
    deleted: Vec<u64>,
}

impl State {
    /// Whether segment `id` is one this device holds: committed, sealed or open.
    pub(crate) fn holds(&self, id: u64) -> bool {
        id >= self.open_id || self.segments.contains_key(&id) || self.sealed.iter().any(|s| s.id == id)
    }
}

pub struct ObjectDevice {
    name: String,
    pub(crate) store: Arc<Store>,
    pub(crate) map: MapStore,
    pub(crate) cache: Arc<ReadCache>,
    /// GETs of segment blocks: the readers' own and the read-ahead's (readahead.rs)
    pub(crate) io: Arc<Prefetcher>,
    pub(crate) state: Mutex<State>,
    pub(crate) sync_lock: Mutex<()>,
    /// segments that kept backups reference (backup_io.rs)
    pub(crate) protection: Mutex<Protection>,
    opts: ObjectOptions,
    /// when the store first failed to take data, while it keeps failing
    stalled_since: Mutex<Option<Instant>>,
    puts: std::sync::atomic::AtomicU64,
    repacked_bytes: std::sync::atomic::AtomicU64,
    pub(crate) deleted_segments: std::sync::atomic::AtomicU64,
    /// held shared by reads from the lookup of their pieces to the end of their GETs, and
    /// exclusively while segment objects are deleted: a read never GETs a deleted object
    pub(crate) gate: parking_lot::RwLock<()>,
    pub(crate) readahead: Mutex<ReadAhead>,
    /// When a GET last failed because the store did not answer: reads queued behind it
    /// fail at once for `READ_BACKOFF` instead of each waiting out its own timeout.
    read_failed_at: Mutex<Option<Instant>>,
    /// the background repack (`start_repack`): told to stop at close, and joined
    repack_stop: Arc<(Mutex<bool>, Condvar)>,
    repack_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A piece of a read whose bytes are in a committed segment.
struct Fetch {
    buf_off: usize,
    seg: u64,
    seg_off: u64,
    len: u64,
    row: Arc<SegmentRow>,
}

impl ObjectDevice {
    /// A new device on `spec` with an empty map at `map_path`. The prefix must hold no
    /// segments, unless `force` (they are deleted). Checks on the way that the store answers,
    /// the bucket exists and the credentials are accepted.
    pub fn create(
        spec: &ObjectSpec,
        cfg: &StoreConfig,
        map_path: &std::path::Path,
        opts: ObjectOptions,
        force: bool,
    ) -> Result<ObjectDevice, ObjectError> {
        let store = Store::connect(spec, cfg, &opts.request_limits())?;
        let mut existing = store.list(SEGMENT_DIR)?;
        // an old pool's backups too: a restore must never find them
        existing.extend(store.list(BACKUP_DIR)?);
        if !existing.is_empty() {
            if !force {
                return Err(ObjectError::PrefixInUse { spec: spec.to_string(), count: existing.len() });
            }
            for (name, _) in &existing {
                store.delete(name)?;
            }
        }
        let map = MapStore::create(map_path, &spec.to_string())?;
        let cache = ReadCache::open(&opts.cache_dir, opts.cache_bytes)?;
        cache.clear();
        let loaded = crate::map::Loaded { next_segment: 1, ..Default::default() };
        Ok(Self::assemble(store, map, cache, loaded, Protection::default(), opts))
    }

    /// The device on `spec` whose map is at `map_path`. Objects the map does not reference
    /// (uploads a crash cut off before their commit) are deleted, unless read-only.
    pub fn open(
        spec: &ObjectSpec,
        cfg: &StoreConfig,
        map_path: &std::path::Path,
        opts: ObjectOptions,
    ) -> Result<ObjectDevice, ObjectError> {
        let store = Store::connect(spec, cfg, &opts.request_limits())?;
        let (map, mut loaded) = MapStore::open(map_path, &spec.to_string())?;
        let listed = store.list(SEGMENT_DIR)?;
        let protection = Protection::load(&store)?;
        if !opts.read_only {
            for (name, _) in &listed {
                let Some(id) = parse_segment_name(name) else { continue };
                if !loaded.segments.contains_key(&id) && !protection.covers(id) {
                    log::info!("{spec}: deleting {name}, which no commit references (left by an interrupted sync)");
                    store.delete(name)?;
                }
            }
            // A process that died with uploads in flight used numbers from the map's next
            // one on; a PUT of one of them may still complete (the server had its body), so
            // none is handed out again: numbering goes on past every number listed and past
            // those that may still land, and that is durable before this process uploads.
            let listed_max = listed.iter().filter_map(|(name, _)| parse_segment_name(name)).max();
            let next = loaded.next_segment.max(listed_max.map_or(0, |m| m + 1)) + REUSE_GAP;
            map.commit(&Commit {
                ops: &[],
                new_segments: Vec::new(),
                dropped_segments: Vec::new(),
                next_segment: next,
                device_len: loaded.device_len,
            })?;
            loaded.next_segment = next;
        }
        let cache = ReadCache::open(&opts.cache_dir, opts.cache_bytes)?;
        Ok(Self::assemble(store, map, cache, loaded, protection, opts))
    }

    fn assemble(
        store: Store,
        map: MapStore,
        cache: ReadCache,
        l: crate::map::Loaded,
        protection: Protection,
        opts: ObjectOptions,
    ) -> ObjectDevice {
        let state = State {
            view: l.extents,
            segments: l.segments.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
            ops: Vec::new(),
            open: Vec::new(),
            open_id: l.next_segment,
            sealed: Vec::new(),
            len: l.device_len,
            committed_len: l.device_len,
            deleted: Vec::new(),
        };
        let (store, cache) = (Arc::new(store), Arc::new(cache));
        let io = Arc::new(Prefetcher::new(store.clone(), cache.clone(), store.spec().to_string()));
        ObjectDevice {
            name: store.spec().to_string(),
            store,
            map,
            cache,
            io,
            state: Mutex::new(state),
            sync_lock: Mutex::new(()),
            protection: Mutex::new(protection),
            opts,
            stalled_since: Mutex::new(None),
            puts: Default::default(),
            readahead: Default::default(),
            read_failed_at: Mutex::new(None),
            repack_stop: Default::default(),
            repack_thread: Mutex::new(None),
            repacked_bytes: Default::default(),
            deleted_segments: Default::default(),
            gate: parking_lot::RwLock::new(()),
        }
    }

    pub fn spec(&self) -> &ObjectSpec {
        self.store.spec()
    }

    pub fn usage(&self) -> ObjectUse {
        use std::sync::atomic::Ordering::Relaxed;
        let st = self.state.lock();
        ObjectUse {
            segments: st.segments.len() as u64,
            segment_bytes: st.segments.values().map(|r| r.size).sum(),
            live_bytes: st.segments.values().map(|r| r.live).sum(),
            puts: self.puts.load(Relaxed),
            gets: self.io.gets.load(Relaxed),
            get_bytes: self.io.get_bytes.load(Relaxed),
            prefetches: self.io.prefetches.load(Relaxed),
            prefetch_waits: self.io.waited.load(Relaxed),
            repacked_bytes: self.repacked_bytes.load(Relaxed),
            deleted_segments: self.deleted_segments.load(Relaxed),
            cache: self.cache.usage(),
        }
    }

    /// Empty the read cache (cold-read measurements, tests).
    pub fn clear_cache(&self) {
        self.cache.clear();
        *self.readahead.lock() = ReadAhead::default();
    }

    /// Tests: make every prefetch of the read-ahead fail as a GET would (reads must stay
    /// correct, fetching the blocks themselves).
    #[doc(hidden)]
    pub fn fail_prefetches(&self, fail: bool) {
        self.io.set_fail(fail);
    }

    /// Tests: hold every prefetch of the read-ahead before its GET (`true`), so that it
    /// stays in flight, until released (`false`).
    #[doc(hidden)]
    pub fn hold_prefetches(&self, hold: bool) {
        self.io.set_hold(hold);
    }

    /// Seal the open segment and start its upload. Called with the state lock held.
    fn seal(&self, st: &mut State) {
        if st.open.is_empty() {
            return;
        }
        let data = Bytes::from(std::mem::take(&mut st.open));
        let sealed = Arc::new(Sealed {
            id: st.open_id,
            data,
            started: Instant::now(),
            done: Mutex::new(None),
            cv: Condvar::new(),
        });
        st.open_id += 1;
        st.sealed.push(sealed.clone());
        let store = self.store.clone();
        self.puts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // the upload runs on its own thread of the runtime's blocking pool: `Store` calls
        // block, and a writer must not wait for it
        std::thread::Builder::new()
            .name("squeezefs-s3-put".into())
            .spawn(move || {
                let r = store.put(&segment_name(sealed.id), sealed.data.clone()).map_err(|e| e.to_string());
                sealed.finish(r);
            })
            .map(|_| ())
            .unwrap_or_else(|e| {
                // no thread: the sync uploads it itself
                log::warn!("cannot start an upload thread ({e}); the next sync uploads the segment");
            });
    }

    /// Wait until at most `max_inflight` sealed uploads are unfinished.
    fn bound_inflight(&self) {
        loop {
            let oldest = {
                let st = self.state.lock();
                let running: Vec<&Arc<Sealed>> = st.sealed.iter().filter(|s| s.done.lock().is_none()).collect();
                if running.len() <= self.opts.max_inflight {
                    return;
                }
                running[0].clone()
            };
            let _ = oldest.wait();
        }
    }

    /// Upload `s` again until it succeeds or the store has failed for `stall_timeout`
    /// (counted from the start of the first attempt that failed, across syncs, until an
    /// upload succeeds). Always
    /// tries at least once: the store may be back.
    fn retry_upload(&self, s: &Sealed, first: String) -> Result<(), ObjectError> {
        let mut last = first;
        let mut backoff = Duration::from_millis(200);
        loop {
            let since = *self.stalled_since.lock().get_or_insert_with(|| {
                log::warn!(
                    "{}: cannot upload segment {}: {last}; holding the data and retrying (writes and fsyncs fail \
                     with EIO after {} s of this)",
                    self.name,
                    s.id,
                    self.opts.stall_timeout.as_secs()
                );
                s.started
            });
            self.puts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match self.store.put(&segment_name(s.id), s.data.clone()) {
                Ok(()) => {
                    s.finish(Ok(()));
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
            if since.elapsed() >= self.opts.stall_timeout {
                return Err(ObjectError::Stalled { spec: self.name.clone(), secs: since.elapsed().as_secs(), last });
            }
            std::thread::sleep(backoff.min(self.opts.stall_timeout.saturating_sub(since.elapsed())));
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    fn do_sync(&self) -> Result<(), ObjectError> {
        let _g = self.sync_lock.lock();
        let (sealed, ops, len, next_segment) = {
            let mut st = self.state.lock();
            self.seal(&mut st);
            if st.sealed.is_empty() && st.ops.is_empty() && st.len == st.committed_len && st.deleted.is_empty() {
                return Ok(());
            }
            (st.sealed.clone(), st.ops.clone(), st.len, st.open_id)
        };
        let dropped: Vec<u64> = self.state.lock().deleted.clone();
        for s in &sealed {
            if let Err(e) = s.wait() {
                self.retry_upload(s, e)?;
            }
        }
        if let Some(since) = self.stalled_since.lock().take() {
            log::warn!("{}: the store takes data again after {:.1} s", self.name, since.elapsed().as_secs_f64());
        }
        let new_segments: Vec<(u64, SegmentRow)> = sealed.iter().map(|s| (s.id, SegmentRow::of(&s.data))).collect();
        let commit = Commit {
            ops: &ops,
            new_segments: new_segments.clone(),
            dropped_segments: dropped.clone(),
            next_segment,
            device_len: len,
        };
        let live = self.map.commit(&commit)?;
        // recent writes read back from the cache, not the store
        for s in &sealed {
            for (i, chunk) in s.data.chunks(BLOCK as usize).enumerate() {
                self.cache.put(s.id, i as u64, chunk);
            }
        }
        let mut st = self.state.lock();
        for (id, mut row) in new_segments {
            row.live = live.get(&id).copied().unwrap_or(0);
            st.segments.insert(id, Arc::new(row));
        }
        for (seg, v) in &live {
            if let Some(r) = st.segments.get_mut(seg) {
                if r.live != *v {
                    Arc::make_mut(r).live = *v;
                }
            }
        }
        let ids: Vec<u64> = sealed.iter().map(|s| s.id).collect();
        st.sealed.retain(|s| !ids.contains(&s.id));
        st.ops.drain(..ops.len());
        st.committed_len = len;
        st.deleted.retain(|id| !dropped.contains(id));
        drop(st);
        self.delete_dead();
        Ok(())
    }

    /// Delete the objects of committed segments nothing references any more. Safe once the
    /// map commit that left them without extents is durable: the engine reuses or discards
    /// a range only after its own commit that freed it is durable, so no committed state of
    /// the engine or of the map refers to their bytes. A segment a kept metadata backup
    /// references stays, its row too (live 0), until that backup is pruned (backup_io.rs).
    /// Rows of deleted segments go at the next commit; an object whose delete fails is left
    /// for the sweep at the next open. The one place that deletes segments of the map.
    pub(crate) fn delete_dead(&self) {
        let dead: Vec<u64> = {
            let st = self.state.lock();
            let p = self.protection.lock();
            st.segments
                .iter()
                .filter(|(id, r)| r.live == 0 && !st.deleted.contains(id) && !p.covers(**id))
                .map(|(id, _)| *id)
                .collect()
        };
        if dead.is_empty() {
            return;
        }
        let _excl = self.gate.write();
        for id in dead {
            if let Err(e) = self.store.delete(&segment_name(id)) {
                log::warn!("{}: cannot delete unreferenced segment {id} ({e}); the next open sweeps it", self.name);
            } else {
                self.deleted_segments.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.io.drop_segment(id);
            self.cache.drop_segment(id);
            self.readahead.lock().drop_segment(id);
            let mut st = self.state.lock();
            st.segments.remove(&id);
            st.deleted.push(id);
        }
    }

    /// Copy the live bytes of segments below `repack_below` live into the open segment (at
    /// most about `budget` bytes), so that their objects lose every reference; the next
    /// sync commits the copies and deletes the emptied objects. A range written meanwhile by
    /// the engine is left alone (it is newer than the copy).
    pub fn repack(&self, budget: u64) -> Result<RepackReport, ObjectError> {
        if self.opts.read_only {
            return Ok(RepackReport::default());
        }
        let (victims, extents) = {
            let st = self.state.lock();
            let mut v: Vec<(u64, Arc<SegmentRow>)> = st
                .segments
                .iter()
                .filter(|(_, r)| r.live > 0 && (r.live as f64) < self.opts.repack_below * r.size as f64)
                .map(|(id, r)| (*id, r.clone()))
                .collect();
            v.sort_by(|a, b| (a.1.live * b.1.size).cmp(&(b.1.live * a.1.size)));
            let mut take = Vec::new();
            let mut bytes = 0;
            for (id, r) in v {
                if bytes >= budget {
                    break;
                }
                bytes += r.live;
                take.push((id, r));
            }
            let ids: BTreeMap<u64, Arc<SegmentRow>> = take.into_iter().collect();
            let ext: Vec<(u64, Extent)> = st.view.iter().filter(|(_, e)| ids.contains_key(&e.seg)).collect();
            (ids, ext)
        };
        let mut report = RepackReport { segments: victims.len() as u64, bytes: 0 };
        for (dev_off, e) in extents {
            let row = victims[&e.seg].clone();
            let mut data = vec![0u8; e.len as usize];
            {
                let _shared = self.gate.read();
                self.fetch(&Fetch { buf_off: 0, seg: e.seg, seg_off: e.seg_off, len: e.len, row }, &mut data)?;
            }
            let mut st = self.state.lock();
            for p in st.view.lookup(dev_off, e.len) {
                let Piece::Mapped { dev_off: at, seg, seg_off, len } = p else { continue };
                if seg != e.seg || seg_off != e.seg_off + (at - dev_off) {
                    continue;
                }
                let s = (at - dev_off) as usize;
                self.append_locked(&mut st, &[&data[s..s + len as usize]], at);
                report.bytes += len;
            }
        }
        self.repacked_bytes.fetch_add(report.bytes, std::sync::atomic::Ordering::Relaxed);
        self.bound_inflight();
        Ok(report)
    }

    /// Repack in the background every `repack_every`, until `stop_repack` or the device is
    /// dropped. The thread holds the device only during a pass.
    pub fn start_repack(self: &Arc<Self>) {
        if self.opts.read_only {
            return;
        }
        let weak = Arc::downgrade(self);
        let every = self.opts.repack_every;
        let ctl = self.repack_stop.clone();
        let spawned = std::thread::Builder::new().name("squeezefs-s3-repack".into()).spawn(move || loop {
            {
                let (stop, wake) = &*ctl;
                let mut stop = stop.lock();
                if !*stop {
                    wake.wait_for(&mut stop, every);
                }
                if *stop {
                    return;
                }
            }
            let Some(d) = weak.upgrade() else { return };
            if let Err(e) = d.repack(4 * d.opts.segment_bytes) {
                log::warn!("{}: repack: {e}", d.name);
            }
        });
        match spawned {
            Ok(h) => *self.repack_thread.lock() = Some(h),
            Err(e) => log::warn!("{}: cannot start the background repack ({e}); segments are not repacked", self.name),
        }
    }

    /// Stop the background repack, waiting for a pass under way: its copies are then in
    /// the open segment, which the next sync commits. A clean close calls it before its
    /// last sync, so that no pass uploads a segment after the last commit (one the next
    /// open would sweep as a crash's leftover).
    pub fn stop_repack(&self) {
        let (stop, wake) = &*self.repack_stop;
        *stop.lock() = true;
        wake.notify_all();
        let h = self.repack_thread.lock().take();
        if let Some(h) = h {
            // the last reference to the device may be the pass's own
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// The bytes of a committed piece: cached blocks, blocks a prefetch has in flight
    /// (waited for), and one ranged GET per run of the others, each block checked against
    /// its checksum. Shows the read to the read-ahead, which may start prefetches past it.
    fn fetch(&self, f: &Fetch, buf: &mut [u8]) -> Result<(), ObjectError> {
        let first = f.seg_off / BLOCK;
        let last = (f.seg_off + f.len - 1) / BLOCK;
        let mut blocks: Vec<Option<Vec<u8>>> =
            (first..=last).map(|b| self.cache.get(f.seg, b, f.row.checksums[b as usize])).collect();
        // a store that did not answer a moment ago gets no prefetches, and a reader does not
        // wait for one in flight (it would hang until its deadline): the read fails at once
        // in get_blocks, as every read does while READ_BACKOFF lasts
        let store_down = self.read_failed_at.lock().is_some_and(|at| at.elapsed() < READ_BACKOFF);
        let waits: Vec<_> = (first..=last)
            .zip(&blocks)
            .map(|(b, got)| if got.is_none() && !store_down { self.io.in_flight(f.seg, b) } else { None })
            .collect();
        if self.cache.enabled() && !store_down {
            let missed = blocks.iter().zip(&waits).any(|(b, w)| b.is_none() && w.is_none());
            let ahead = self.readahead.lock().on_read(f.seg, first, last + 1, missed);
            if let Some(r) = ahead {
                self.io.issue(f.seg, &f.row, r);
            }
        }
        for (k, w) in waits.iter().enumerate() {
            if let Some(part) = w {
                // a failed or cancelled prefetch leaves the block to the GET below
                blocks[k] = part.wait_block(first + k as u64);
                if blocks[k].is_some() {
                    self.io.waited.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        let mut i = 0;
        while i < blocks.len() {
            if blocks[i].is_some() {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < blocks.len() && blocks[j].is_none() {
                j += 1;
            }
            let got = self.get_blocks(f, first + i as u64, first + j as u64)?;
            for (k, data) in got.into_iter().enumerate() {
                blocks[i + k] = Some(data);
            }
            i = j;
        }
        let mut at = 0usize;
        for (k, data) in blocks.iter().enumerate() {
            let data = data.as_ref().expect("filled above");
            let block_start = (first + k as u64) * BLOCK;
            let s = f.seg_off.max(block_start) - block_start;
            let e = (f.seg_off + f.len).min(block_start + data.len() as u64) - block_start;
            let n = (e - s) as usize;
            buf[f.buf_off + at..f.buf_off + at + n].copy_from_slice(&data[s as usize..e as usize]);
            at += n;
        }
        Ok(())
    }

    /// Blocks `b0..b1` of a segment, from the store, checked (one retry of a damaged GET).
    /// A store that did not answer a GET a moment ago fails this one at once, so that
    /// the reads queued behind a failed one (the kernel's read-ahead, its retry of the page)
    /// end in about one timeout together rather than one timeout each.
    fn get_blocks(&self, f: &Fetch, b0: u64, b1: u64) -> Result<Vec<Vec<u8>>, ObjectError> {
        let name = segment_name(f.seg);
        if let Some(at) = *self.read_failed_at.lock() {
            if at.elapsed() < READ_BACKOFF {
                return Err(ObjectError::Store {
                    spec: self.name.clone(),
                    what: "reading".into(),
                    key: self.store.spec().key(&name),
                    fault: StoreFault::Unreachable,
                    detail: format!("a GET failed {} ms ago; not asked again yet", at.elapsed().as_millis()),
                });
            }
        }
        let r = self.io.get_checked(f.seg, &f.row, b0, b1);
        match &r {
            Err(e) if e.fault() == Some(StoreFault::Unreachable) => *self.read_failed_at.lock() = Some(Instant::now()),
            Ok(_) => *self.read_failed_at.lock() = None,
            Err(_) => {}
        }
        r
    }

    fn write_parts(&self, parts: &[&[u8]], offset: u64) -> Result<(), DeviceError> {
        if self.opts.read_only {
            return Err(ObjectError::Invalid { spec: self.name.clone(), detail: "opened read-only".into() }.into());
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let Some(end) = squeezefs_device::end_offset(offset, total) else {
            return Err(DeviceError::Full { path: self.name.clone(), capacity: u64::MAX });
        };
        if total == 0 {
            return Ok(());
        }
        self.probe_if_stalled()?;
        {
            let mut st = self.state.lock();
            self.append_locked(&mut st, parts, offset);
            st.len = st.len.max(end);
        }
        self.bound_inflight();
        Ok(())
    }

    /// Past the stall timeout, a write is taken only once the held segments are uploaded:
    /// one attempt each, now. The engine tries a held txg again by writing it anew, so
    /// without this every retry would add its bytes to the held ones while the store is away.
    fn probe_if_stalled(&self) -> Result<(), ObjectError> {
        let Some(since) = *self.stalled_since.lock() else { return Ok(()) };
        if since.elapsed() < self.opts.stall_timeout {
            return Ok(());
        }
        let _g = self.sync_lock.lock();
        let sealed = self.state.lock().sealed.clone();
        for s in &sealed {
            if !matches!(*s.done.lock(), Some(Ok(()))) {
                self.puts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match self.store.put(&segment_name(s.id), s.data.clone()) {
                    Ok(()) => s.finish(Ok(())),
                    Err(e) => {
                        return Err(ObjectError::Stalled {
                            spec: self.name.clone(),
                            secs: since.elapsed().as_secs(),
                            last: e.to_string(),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Append `parts` to the open segment as the new bytes of `offset..`.
    fn append_locked(&self, st: &mut State, parts: &[&[u8]], offset: u64) {
        let total: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if !st.open.is_empty() && st.open.len() as u64 + total > self.opts.segment_bytes {
            self.seal(st);
        }
        let seg_off = st.open.len() as u64;
        for p in parts {
            st.open.extend_from_slice(p);
        }
        let ext = Extent { len: total, seg: st.open_id, seg_off };
        let State { view, ops, .. } = st;
        view.write(offset, ext, ops);
        if st.open.len() as u64 >= self.opts.segment_bytes {
            self.seal(st);
        }
    }
}

impl Device for ObjectDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let mut fetches = Vec::new();
        let _shared = self.gate.read();
        {
            let st = self.state.lock();
            let end = squeezefs_device::end_offset(offset, buf.len());
            if end.is_none_or(|e| e > st.len) {
                return Err(DeviceError::OutOfRange {
                    path: self.name.clone(),
                    offset,
                    len: buf.len() as u64,
                    device_len: st.len,
                });
            }
            if buf.is_empty() {
                return Ok(());
            }
            for p in st.view.lookup(offset, buf.len() as u64) {
                match p {
                    Piece::Hole { dev_off, len } => {
                        let s = (dev_off - offset) as usize;
                        buf[s..s + len as usize].fill(0);
                    }
                    Piece::Mapped { dev_off, seg, seg_off, len } => {
                        let s = (dev_off - offset) as usize;
                        let dst = &mut buf[s..s + len as usize];
                        let (a, b) = (seg_off as usize, (seg_off + len) as usize);
                        if seg == st.open_id {
                            dst.copy_from_slice(&st.open[a..b]);
                        } else if let Some(x) = st.sealed.iter().find(|x| x.id == seg) {
                            dst.copy_from_slice(&x.data[a..b]);
                        } else if let Some(row) = st.segments.get(&seg) {
                            fetches.push(Fetch { buf_off: s, seg, seg_off, len, row: row.clone() });
                        } else {
                            return Err(ObjectError::Invalid {
                                spec: self.name.clone(),
                                detail: format!("the map refers to segment {seg}, which it does not hold"),
                            }
                            .into());
                        }
                    }
                }
            }
        }
        for f in &fetches {
            self.fetch(f, buf)?;
        }
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.write_parts(&[data], offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), DeviceError> {
        self.write_parts(bufs, offset)
    }

    fn stop_background(&self) {
        self.stop_repack();
        // a pass's copies commit with a sync; on a pool with nothing left to commit the
        // engine's last txg makes none, and the copies (perhaps a sealed, uploaded segment)
        // would be left to the next open's sweep
        if !self.opts.read_only {
            if let Err(e) = Device::sync(self) {
                log::warn!("{}: committing the last repack at close: {e}", self.name);
            }
        }
    }
    fn sync(&self) -> Result<(), DeviceError> {
        self.do_sync().map_err(|e| {
            log::error!("{e}");
            e.into()
        })
    }

    fn len(&self) -> u64 {
        self.state.lock().len
    }

    fn capacity(&self) -> Option<u64> {
        None
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.opts.read_only || len == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        let State { view, ops, .. } = &mut *st;
        view.punch(offset, len, ops);
        Ok(())
    }
}

impl Drop for ObjectDevice {
    fn drop(&mut self) {
        self.stop_repack();
        self.io.close();
        // whatever was written after the last sync is lost with the process anyway; waiting
        // for running uploads keeps their threads from outliving the runtime
        let sealed: Vec<Arc<Sealed>> = self.state.lock().sealed.clone();
        for s in sealed {
            let _ = s.wait();
        }
    }
}
