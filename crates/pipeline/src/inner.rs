//! The engine's shared state (one `Arc<Inner>` held by the API, the txg driver and jobs).

use crate::alloc::DevSpace;
use crate::caches::{ExtentCache, RecordCache};
use crate::devq::DevQueue;
use crate::dirty::{BufPool, FileTable};
use crate::error::{EngineError, Result};
use crate::options::OpenOptions;
use crate::policy::Policy;
use crate::txg::TxgCtl;
use crate::workers::WorkerPool;
use parking_lot::{Condvar, Mutex, RwLock};
use rustc_hash::{FxHashMap, FxHashSet};
use squeezefs_codec::{WorkspaceConfig, Workspaces};
use squeezefs_device::Device;
use squeezefs_meta::{tables, Ino, InodeAttr};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

pub struct DevSlot {
    pub dev: Arc<dyn Device>,
    pub queue: DevQueue,
    /// The file of a growable device file: its host filesystem's free space bounds it
    /// (`None`: not a growable file, or a device object given by a test; the pool
    /// directory's filesystem then stands in)
    pub host_path: Option<PathBuf>,
}

/// The host filesystem under a growable device: its id (`st_dev`) and free bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostSpace {
    pub fs: u64,
    pub free: u64,
}

pub struct Inner {
    pub pool_dir: PathBuf,
    pub db: crate::metadb::MetaDb,
    pub read_only: bool,
    pub sector: u64,
    /// record packing unit on the devices: 1 in pools with `INCOMPAT_PACKED_BYTES`, else the
    /// sector (alloc.rs); footprints of device extents are their stored length rounded to it
    pub granule: u64,
    pub recordsize: u64,
    pub max_inline: u64,
    pub devs: Vec<DevSlot>,
    /// The live space image: every placement (early or at sync) is taken here, and space a
    /// commit freed comes back only after that commit is durable and the range discarded.
    /// Never persisted (alloc.rs, early_place.rs).
    pub space: Mutex<Vec<DevSpace>>,
    /// The durable space image: what the last commit persisted, changed only by the commit
    /// stage (the committing txg's extents taken exactly, its frees given back), so records
    /// placed early for a later txg are never persisted as allocated. Lock order: `space`
    /// is never taken while holding `durable`.
    pub durable: Mutex<Vec<DevSpace>>,
    /// early placements given up before their txg committed (early_place.rs)
    pub early: Arc<crate::early_place::EarlySink>,
    /// early placement is allowed: the pool's room is far above what dirty data can take
    /// (refreshed per txg, early_place.rs `refresh_room`)
    pub early_room: AtomicBool,
    pub files: FileTable,
    /// inodes with changes in the open txg
    pub dirty_set: Mutex<FxHashSet<Ino>>,
    /// Files whose layers the syncing txg holds (0 between txgs): write admission bounds the
    /// short last records in flight with it.
    pub syncing_files: AtomicU64,
    /// Stored bytes of the records the syncing txg has placed on devices so far: they are
    /// on the devices' free space already and still in `dirty_bytes` (at least these bytes
    /// each) until the txg's release; admission counts them once (write.rs `reserve`).
    /// Also the records placed early (early_place.rs) until their txg commits or they are
    /// given up. Taken out before the release, so a reader taking `dirty_bytes` first never
    /// subtracts bytes the release already took out.
    pub placed_stored: Arc<AtomicU64>,
    /// bytes held by dirty record buffers (open + syncing layers) and by early
    /// compression results waiting for their txg (early.rs); shared with those results
    pub dirty_bytes: Arc<AtomicU64>,
    /// compress tasks: the sync stage's before early compression (early.rs)
    pub compress_q: crate::early::CompressQueue,
    /// writers delayed at the dirty bound wait here; the commit stage notifies
    pub throttle_lock: Mutex<()>,
    pub throttle_cv: Condvar,
    pub txg: TxgCtl,
    /// Metadata changes not yet in redb (nsdelta.rs).
    pub ns: crate::nsdelta::NsDelta,
    /// redb snapshot shared by the namespace's point reads until the next commit (snapshot.rs)
    pub snap: crate::snapshot::SnapshotCache,
    pub ext_cache: ExtentCache,
    pub rec_cache: RecordCache,
    pub policy: RwLock<Policy>,
    pub workers: WorkerPool,
    ws: OnceLock<Workspaces>,
    pub opts: OpenOptions,
    pub closed: AtomicBool,
    /// free bytes of the host filesystems under growable device files, each filesystem
    /// counted once (refreshed per txg)
    pub host_free: AtomicU64,
    /// per device: the host filesystem under it if it is a growable file (`None` for fixed
    /// devices); device choice keeps each growable device within its own filesystem
    pub host_space: Mutex<Vec<Option<HostSpace>>>,
    /// room for metadata commits on the pool directory's filesystem (meta_space.rs)
    pub meta_space: crate::meta_space::MetaSpace,
    /// a growable device file lies on the pool directory's filesystem: its dirty data takes
    /// the room metadata commits need (refreshed with `host_space`)
    pub data_on_meta_fs: AtomicBool,
    /// sequential-read detection: inode → end of its last read
    pub readahead: Mutex<FxHashMap<Ino, u64>>,
    /// prefetches in flight (record keys), so one record is decoded once
    pub prefetching: Mutex<HashSet<(u32, u64, u64)>>,
    /// notified whenever a prefetch finishes
    pub prefetch_cv: Condvar,
    /// bundling of small records, and the next bundle id (bundle.rs)
    pub bundles: crate::bundle::Bundles,
    /// the pool has `INCOMPAT_COMPACT_ROWS`: inode, extent and directory-entry rows are
    /// written in their compact encodings (set once at open)
    pub compact_rows: AtomicBool,
    /// next inode number; persisted in the superblock at every txg commit (at open, the
    /// largest inode number in the store + 1 wins over a stale superblock value)
    pub next_ino: AtomicU64,
    pub bufs: BufPool,
    /// buffers of compressed records, recycled (outbuf.rs)
    pub outs: Arc<crate::outbuf::OutPool>,
    /// panics armed for tests (fault.rs); shared with the device writers
    pub faults: Arc<crate::fault::Faults>,
    me: OnceLock<Weak<Inner>>,
    /// the last field, so it is dropped last: tells `Engine::drop` that everything else,
    /// the metadata store included, is closed
    pub released: ReleaseOnDrop,
}

/// Set once the engine's shared state is gone (the last `Arc<Inner>` dropped).
#[derive(Default)]
pub struct Released {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Released {
    /// Wait until released, at most until `deadline`; whether it was.
    pub fn wait_until(&self, deadline: std::time::Instant) -> bool {
        let mut done = self.done.lock();
        while !*done {
            if self.cv.wait_until(&mut done, deadline).timed_out() {
                return *done;
            }
        }
        true
    }
}

/// Sets its [`Released`] when dropped.
#[derive(Default)]
pub struct ReleaseOnDrop(pub Arc<Released>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        *self.0.done.lock() = true;
        self.0.cv.notify_all();
    }
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pool_dir: PathBuf,
        db: crate::metadb::MetaDb,
        read_only: bool,
        sector: u64,
        granule: u64,
        recordsize: u64,
        max_inline: u64,
        devs: Vec<DevSlot>,
        space: Vec<DevSpace>,
        opts: OpenOptions,
        last_txg: u64,
        next_ino: u64,
        faults: Arc<crate::fault::Faults>,
    ) -> Inner {
        let policy = Policy { spec: opts.compression, force: opts.force_compression };
        let pool_bytes = (64usize << 20).min(opts.max_dirty_bytes as usize / 4);
        Inner {
            pool_dir,
            db,
            read_only,
            sector,
            granule,
            recordsize,
            max_inline,
            devs,
            durable: Mutex::new(space.clone()),
            space: Mutex::new(space.into_iter().map(DevSpace::untracked).collect()),
            early: Arc::new(crate::early_place::EarlySink::default()),
            early_room: AtomicBool::new(false),
            files: FileTable::default(),
            syncing_files: AtomicU64::new(0),
            placed_stored: Arc::new(AtomicU64::new(0)),
            dirty_set: Mutex::new(FxHashSet::default()),
            dirty_bytes: Arc::new(AtomicU64::new(0)),
            compress_q: Default::default(),
            throttle_lock: Mutex::new(()),
            throttle_cv: Condvar::new(),
            txg: TxgCtl::new(last_txg),
            ns: Default::default(),
            snap: Default::default(),
            ext_cache: ExtentCache::new(1 << 18),
            rec_cache: RecordCache::new(opts.record_cache_bytes),
            policy: RwLock::new(policy),
            workers: WorkerPool::new(opts.workers, "sqz-work"),
            ws: OnceLock::new(),
            opts,
            closed: AtomicBool::new(false),
            host_free: AtomicU64::new(u64::MAX),
            host_space: Mutex::new(Vec::new()),
            meta_space: Default::default(),
            data_on_meta_fs: AtomicBool::new(false),
            readahead: Mutex::new(FxHashMap::default()),
            prefetching: Mutex::new(HashSet::new()),
            prefetch_cv: Condvar::new(),
            bundles: Default::default(),
            compact_rows: AtomicBool::new(false),
            next_ino: AtomicU64::new(next_ino),
            bufs: BufPool::new(recordsize as usize, pool_bytes),
            outs: crate::outbuf::OutPool::new(pool_bytes / 4),
            faults,
            me: OnceLock::new(),
            released: ReleaseOnDrop::default(),
        }
    }

    /// Wrap in an `Arc` and remember it (jobs on workers need an owned reference).
    pub fn into_arc(self) -> Arc<Inner> {
        let a = Arc::new(self);
        let _ = a.me.set(Arc::downgrade(&a));
        a
    }

    /// Stop changing the pool (see fault.rs): writes, syncs and fsyncs fail from now on, and
    /// everyone waiting for the txg driver or for dirty memory wakes up to see it.
    pub fn suspend(&self, why: String) {
        self.txg.suspend(why);
        let _g = self.throttle_lock.lock();
        self.throttle_cv.notify_all();
    }

    /// A panic caught in `site` (fault.rs): log it, suspend the pool, and the error for
    /// whoever waited for the work.
    pub fn caught_panic(&self, site: &str, payload: &(dyn std::any::Any + Send)) -> EngineError {
        let why = format!("panic in {site}: {}", crate::fault::panic_message(payload));
        log::error!("{why}; pool suspended at txg {} (changes after it are not saved)", self.txg.synced());
        self.suspend(why.clone());
        EngineError::Suspended(why)
    }

    /// Run `f`, turning a panic in it into [`Inner::caught_panic`]'s error.
    pub fn catch<T>(&self, site: &str, f: impl FnOnce() -> T) -> Result<T> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| self.caught_panic(site, &*p))
    }

    pub fn self_arc(&self) -> Arc<Inner> {
        self.me.get().and_then(Weak::upgrade).expect("Inner lives in an Arc")
    }

    /// Figures of the compression contexts, without creating them.
    pub fn codec_stats(&self) -> squeezefs_codec::PoolStats {
        self.ws.get().map(Workspaces::stats).unwrap_or_default()
    }

    /// Compression contexts, created on first use (a pool that stores raw never needs them).
    pub fn workspaces(&self) -> &Workspaces {
        self.ws.get_or_init(|| {
            let workers = self.workers.threads().max(1);
            Workspaces::new(WorkspaceConfig {
                max_bytes: (64usize << 20).max(workers * (8 << 20)),
                idle_timeout: std::time::Duration::from_secs(60),
                // the largest source a record hands the codec: anything longer is refused
                block_size: self.recordsize as usize,
            })
        })
    }

    pub fn check_writable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        if self.read_only {
            return Err(EngineError::ReadOnly);
        }
        if let Some(e) = self.txg.halted() {
            return Err(e);
        }
        Ok(())
    }

    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        Ok(())
    }

    /// Inode record: the namespace delta's attributes over redb's, size/blocks as committed
    /// (0 for an inode not committed yet). `NoInode` if it does not exist.
    pub fn inode_record(&self, ino: Ino) -> Result<InodeAttr> {
        // the delta first, then a redb read started after it (nsdelta.rs)
        let row = self.ns.find(|d| d.inodes.get(&ino).cloned());
        if let Some(None) = row {
            return Err(EngineError::NoInode(ino));
        }
        let s = self.snap.get(&self.db)?;
        crate::nsdelta::resolve_inode(ino, row, inode_in(&s.inodes, ino)?)
    }

    /// A row of a byte-keyed namespace table: the delta's, else redb's (read after it).
    pub fn row(
        &self,
        sel: fn(&crate::nsdelta::Delta) -> &crate::nsdelta::ByteRows,
        table: redb::TableDefinition<&'static [u8], &'static [u8]>,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.ns.find(|d| sel(d).get(key).cloned()) {
            return Ok(v);
        }
        let s = self.snap.get(&self.db)?;
        let v = match s.byte_table(table) {
            Some(t) => t.get(key)?.map(|v| v.value().to_vec()),
            None => s.rx.open_table(table)?.get(key)?.map(|v| v.value().to_vec()),
        };
        Ok(v)
    }

    /// Size and physical bytes of `ino` held by the data path, if it holds the file.
    pub fn live_sizes(&self, ino: Ino) -> Option<(u64, u64)> {
        let f = self.files.get(ino)?;
        let fd = f.lock();
        (!fd.retired).then(|| (fd.size, fd.blocks_bytes()))
    }

    /// Free bytes over all devices, for statfs' total: whole free sectors of fixed devices;
    /// for growable devices the host filesystem's free space only. Their free ranges are not
    /// added: a commit punches them back to the host (`Device::discard`), so the host's free
    /// figure already holds them, and counting them again kept deleted data in `df`'s Used
    /// (tests/discard.rs::deleted_data_stays_used_in_statfs_on_a_growable_pool).
    pub fn free_bytes(&self) -> u64 {
        let space = self.space.lock();
        let mut total = 0u64;
        let mut any_growable = false;
        for s in space.iter() {
            match s.free_bytes() {
                Some(f) => total = total.saturating_add(f),
                None => any_growable = true,
            }
        }
        if any_growable {
            total = total.saturating_add(self.host_free.load(Ordering::Relaxed));
        }
        total
    }

    /// Bytes new data is sure to find room in (write admission, statfs' free and available):
    /// on a fixed device what records of up to `recordsize` are sure to get in its free
    /// pieces (`DevSpace::placeable_bytes`); for growable devices the host filesystem's free
    /// space only, since their freed ranges were punched back to the host and reusing them
    /// takes host space again (records that find no free range go past the end).
    pub fn placeable_bytes(&self) -> u64 {
        self.placeable_bytes_with_reserve(true)
    }

    /// `placeable_bytes`, keeping the metadata reserve back (admission) or not (statfs'
    /// free figure, so that `df`'s Used stays the live data).
    pub fn placeable_bytes_with_reserve(&self, keep_reserve: bool) -> u64 {
        let record = crate::units::sector_bytes(self.recordsize, self.sector);
        let space = self.space.lock();
        let mut total = 0u64;
        let mut any_growable = false;
        for s in space.iter() {
            match s.placeable_bytes(record) {
                Some(f) => total = total.saturating_add(f),
                None => any_growable = true,
            }
        }
        if any_growable {
            let mut host = self.host_free.load(Ordering::Relaxed);
            if keep_reserve && self.data_on_meta_fs.load(Ordering::Relaxed) {
                // what metadata commits need stays free (meta_space.rs)
                host = host.saturating_sub(self.meta_space.held_back());
            }
            total = total.saturating_add(host);
        }
        total
    }

    /// What the dirty data in flight, plus `extra` bytes about to be written, takes in the
    /// metadata store at its commit (meta_space.rs `data_meta`).
    pub fn data_meta(&self, extra: u64) -> u64 {
        let files = self.dirty_set.lock().len() as u64 + self.syncing_files.load(Ordering::Relaxed) + 1;
        let records = self.dirty_bytes.load(Ordering::Relaxed).saturating_add(extra) / self.recordsize.max(1) + files;
        crate::meta_space::data_meta(files, records, self.max_inline)
    }

    /// Inputs for a metadata-room decision (meta_space.rs) with `extra` data bytes about to
    /// be written; `None` for a store in memory.
    pub fn meta_room(&self, extra: u64) -> Option<crate::meta_space::Room> {
        let on_fs = if self.data_on_meta_fs.load(Ordering::Relaxed) {
            self.dirty_bytes.load(Ordering::Relaxed).saturating_add(extra)
        } else {
            0
        };
        self.meta_space.room(on_fs, self.data_meta(extra))
    }

    /// Refresh the cached free space of the host filesystems under the growable device
    /// files: each device's own (a device file may live on another filesystem than the
    /// pool directory; counting the pool directory's admitted writes that device's
    /// filesystem had no room for, and the txg failed on its ENOSPC), and their sum over
    /// distinct filesystems for admission.
    pub fn refresh_host_free(&self) {
        let growable: Vec<bool> = self.space.lock().iter().map(|s| s.capacity.is_none()).collect();
        let mut hs = self.host_space.lock();
        hs.resize(self.devs.len(), None);
        for (i, slot) in self.devs.iter().enumerate() {
            if !growable.get(i).copied().unwrap_or(false) {
                hs[i] = None;
                continue;
            }
            let path = slot.host_path.as_deref().unwrap_or(&self.pool_dir);
            // a failed statvfs keeps the last figure
            if let Some(h) = host_space_of(path) {
                hs[i] = Some(h);
            }
        }
        let meta = host_fs_of(&self.pool_dir);
        self.meta_space.measured(meta);
        if let Some(m) = self.meta_space.host() {
            let shared = hs.iter().flatten().any(|h| h.fs == m.fs);
            self.data_on_meta_fs.store(shared, Ordering::Relaxed);
        }
        let mut seen: Vec<HostSpace> = Vec::new();
        for h in hs.iter().flatten() {
            if !seen.iter().any(|s| s.fs == h.fs) {
                seen.push(*h);
            }
        }
        if !seen.is_empty() {
            self.host_free.store(seen.iter().fold(0u64, |a, h| a.saturating_add(h.free)), Ordering::Relaxed);
        } else if let Some(f) = host_free_bytes(&self.pool_dir) {
            self.host_free.store(f, Ordering::Relaxed);
        }
    }
}

/// redb's record of `ino`, if it holds one.
pub fn base_inode(rx: &redb::ReadTransaction, ino: Ino) -> Result<Option<InodeAttr>> {
    inode_in(&rx.open_table(tables::INODES)?, ino)
}

/// `ino`'s record in an opened `inodes` table, if it holds one.
pub fn inode_in(t: &redb::ReadOnlyTable<u64, &'static [u8]>, ino: Ino) -> Result<Option<InodeAttr>> {
    Ok(match t.get(ino)? {
        Some(v) => Some(squeezefs_meta::encode::decode_inode(ino, v.value())?),
        None => None,
    })
}

/// `a` with the data path's size and physical bytes, if it holds the file.
pub fn with_live_sizes(mut a: InodeAttr, live: Option<(u64, u64)>) -> InodeAttr {
    if let Some((size, blocks)) = live {
        a.size = size;
        a.blocks_bytes = blocks;
    }
    a
}

/// The filesystem holding `path` (its `st_dev`) and its free bytes (`host_free_bytes`).
pub fn host_space_of(path: &std::path::Path) -> Option<HostSpace> {
    use std::os::unix::fs::MetadataExt;
    let fs = std::fs::metadata(path).ok()?.dev();
    Some(HostSpace { fs, free: host_free_bytes(path)? })
}

/// The filesystem holding `path`: its `st_dev`, available and total bytes.
pub fn host_fs_of(path: &std::path::Path) -> Option<crate::meta_space::HostFs> {
    use std::os::unix::fs::MetadataExt;
    let fs = std::fs::metadata(path).ok()?.dev();
    let (free, total) = host_stat(path)?;
    Some(crate::meta_space::HostFs { fs, free, total })
}

/// statvfs of `path`: bytes available to unprivileged users.
pub fn host_free_bytes(path: &std::path::Path) -> Option<u64> {
    host_stat(path).map(|(free, _)| free)
}

/// statvfs of `path`: (bytes available to unprivileged users, size of the filesystem).
fn host_stat(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated path and st a writable statvfs.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if r != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some(((st.f_bavail as u64).saturating_mul(frsize), (st.f_blocks as u64).saturating_mul(frsize)))
}
