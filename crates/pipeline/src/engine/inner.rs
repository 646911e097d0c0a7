//! The engine's shared state (one `Arc<Inner>` held by the API, the txg driver and jobs).

use crate::base::accounting::Accounting;
use crate::base::error::{EngineError, PanicSite, Result};
use crate::base::fault::Faults;
use crate::base::locks::Mutex;
use crate::base::options::OpenOptions;
use crate::base::workers::WorkerPool;
use crate::compress::levels::Levels;
use crate::compress::policy::Policy;
use crate::compress::queue::{Codecs, Compression};
use crate::engine::caches::ReadCaches;
use crate::space::placement::Space;
use crate::txg::bundle::Bundles;
use crate::txg::dirty::{DirtyData, FileRef, RecordHome};
use crate::txg::early_place::EarlyPlacement;
use crate::txg::state::TxgCtl;
use crate::txg::throttle::Throttle;
use squeezefs_codec::Workspaces;
use squeezefs_meta::{tables, Ino, InodeAttr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

pub struct Inner {
    pub pool_dir: PathBuf,
    pub db: crate::store::metadb::MetaDb,
    pub read_only: bool,
    pub sector: u64,
    /// record packing unit on the devices: 1 in pools with `INCOMPAT_PACKED_BYTES`, else the
    /// sector (alloc.rs); footprints of device extents are their stored length rounded to it
    pub granule: u64,
    /// the pool's record size (superblock): files without a `recordsizes` row use it
    pub recordsize: u64,
    /// bound of a bundle's decoded and stored bytes (superblock `bundle_size()`): what
    /// `bundle::select` fills bundles up to and what every read, cache and check of a
    /// bundle accepts
    pub bundle_size: u64,
    /// the pool has `INCOMPAT_RECORDSIZES` (set by the commit of its first `recordsizes` row)
    pub recordsizes_on: AtomicBool,
    /// the pool has `INCOMPAT_SHARED_RECORDS` (set by the commit of its first `refcounts`
    /// row): commits look reference counts up before freeing a record
    pub shared_on: AtomicBool,
    /// taken for writing by the quiesce, for reading by `share_range` while it looks up a
    /// source record and shares it into the target's open layer: both files' open layers
    /// then belong to one txg (write/share.rs)
    pub quiesce_gate: crate::base::locks::RwLock<()>,
    /// records shared into open layers since the last quiesce: they hold no dirty bytes, so
    /// nothing else bounds how many one txg carries (write/share.rs `MAX_SHARED_PER_TXG`)
    pub shared_in_txg: AtomicU64,
    /// the smallest record size of any file the data path held since open (the pool's at
    /// first): bounds how many records the dirty bytes in flight can be (`data_meta`)
    smallest_rs: AtomicU64,
    pub max_inline: u64,
    /// the pool has `INCOMPAT_COMPACT_ROWS`: inode, extent and directory-entry rows are
    /// written in their compact encodings (docs/format.md)
    pub compact_rows: bool,
    /// devices, space images, host filesystems (space/placement.rs)
    pub space: Space,
    /// early placement: on or off, and the placements given up (early_place.rs)
    pub early: EarlyPlacement,
    /// the dirty, placed, ready and backlog counters (accounting.rs)
    pub acct: Arc<Accounting>,
    /// every file's dirty layers, the inodes changed in the open txg (dirty.rs)
    pub dirty: DirtyData,
    /// the compress stage: pool policy, codecs, queue (compress/queue.rs, early.rs)
    pub compress: Compression<RecordHome>,
    /// bundling of small records: on or off, the next bundle id (bundle.rs)
    pub bundles: Bundles,
    /// QoS trees: admission, levels, stats (qos.rs); shared with the codecs
    pub qos: Arc<crate::compress::qos::Qos>,
    /// writers delayed at the dirty bound wait here (throttle.rs)
    pub throttle: Throttle,
    pub txg: TxgCtl,
    /// Metadata changes not yet in redb (nsdelta.rs).
    pub ns: crate::store::nsdelta::NsDelta,
    /// extent and record caches, read-ahead state (caches.rs)
    pub cache: ReadCaches,
    pub workers: WorkerPool,
    pub opts: OpenOptions,
    pub closed: AtomicBool,
    /// room for metadata commits on the pool directory's filesystem (meta_space.rs)
    pub meta_space: crate::store::meta_space::MetaSpace,
    /// foreground activity and the background worker's cursor (bgstate.rs)
    pub bg: crate::engine::bgstate::BgState,
    /// panics armed for tests (fault.rs); shared with the device writers
    pub faults: Arc<Faults>,
    /// metadata backups into the bucket of an object device (backup.rs)
    pub backup: crate::engine::backup::Backups,
    me: OnceLock<Weak<Inner>>,
    /// the last field, so it is dropped last: tells `Engine::drop` that everything else,
    /// the metadata store included, is closed
    pub released: ReleaseOnDrop,
}

/// Set once the engine's shared state is gone (the last `Arc<Inner>` dropped).
#[derive(Default)]
pub struct Released {
    done: Mutex<bool>,
    cv: parking_lot::Condvar,
}

impl Released {
    /// Wait until released, at most until `deadline`; whether it was.
    pub fn wait_until(&self, deadline: std::time::Instant) -> bool {
        let mut done = self.done.lock();
        while !*done {
            if done.wait_until(&self.cv, deadline) {
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
        db: crate::store::metadb::MetaDb,
        read_only: bool,
        sector: u64,
        granule: u64,
        recordsize: u64,
        bundle_size: u64,
        recordsizes_on: bool,
        max_inline: u64,
        space: Space,
        opts: OpenOptions,
        last_txg: u64,
        faults: Arc<Faults>,
        trace: Option<squeezefs_control::TraceWriter<std::fs::File>>,
        bundles: Bundles,
        compact_rows: bool,
    ) -> Inner {
        let policy = Policy { spec: opts.compression, force: opts.force_compression, tree: 0 };
        let qos = Arc::new(crate::compress::qos::Qos::new(
            squeezefs_control::qos::AdmissionTunables {
                burst_secs: opts.qos_burst.as_secs_f64(),
                ..Default::default()
            },
            Default::default(),
        ));
        let pool_bytes = (64usize << 20).min(opts.max_dirty_bytes as usize / 4);
        let workers = WorkerPool::new(opts.workers, "sqz-work");
        let levels = Levels::new(
            workers.threads(),
            space.devs().iter().map(|d| d.queue.stats.clone()).collect(),
            space.room_hints(),
            trace,
            crate::compress::queue::EARLY_SYNC_BYTES,
        )
        .with_busy(workers.busy())
        .with_qos(qos.clone());
        Inner {
            pool_dir,
            db,
            read_only,
            sector,
            granule,
            recordsize,
            bundle_size,
            recordsizes_on: AtomicBool::new(recordsizes_on),
            shared_on: AtomicBool::new(false),
            quiesce_gate: crate::base::locks::RwLock::new(crate::base::locks::Rank::QuiesceGate, ()),
            shared_in_txg: AtomicU64::new(0),
            smallest_rs: AtomicU64::new(recordsize),
            max_inline,
            compact_rows,
            space,
            early: EarlyPlacement::new(granule),
            acct: Arc::default(),
            dirty: DirtyData::new(pool_bytes),
            compress: Compression::new(
                policy,
                levels,
                Codecs::new(workers.threads(), sector, pool_bytes / 4, recordsize),
            ),
            bundles,
            qos,
            throttle: Throttle::new(opts.max_dirty_bytes),
            txg: TxgCtl::new(last_txg),
            ns: Default::default(),
            cache: ReadCaches::new(opts.record_cache_bytes),
            workers,
            opts,
            closed: AtomicBool::new(false),
            meta_space: Default::default(),
            bg: crate::engine::bgstate::BgState::new(last_txg),
            faults,
            me: OnceLock::new(),
            backup: Default::default(),
            released: ReleaseOnDrop::default(),
        }
    }

    /// Wrap in an `Arc` and remember it (jobs on workers need an owned reference).
    pub fn into_arc(self) -> Arc<Inner> {
        let a = Arc::new(self);
        let _ = a.me.set(Arc::downgrade(&a));
        a
    }

    /// Stop changing the pool because of `cause` (see fault.rs): writes, syncs and fsyncs
    /// fail from now on, and everyone waiting for the txg driver or for dirty memory wakes
    /// up to see it. Returns the error they get.
    pub fn suspend(&self, cause: EngineError) -> EngineError {
        log::error!("{cause}; pool suspended at txg {} (changes after it are not saved)", self.txg.synced());
        let cause = Arc::new(cause);
        self.txg.suspend(cause.clone());
        self.throttle.wake_all();
        EngineError::Suspended(cause)
    }

    /// A panic caught in `site` (fault.rs): log it, suspend the pool, and the error for
    /// whoever waited for the work.
    pub fn caught_panic(&self, site: PanicSite, payload: &(dyn std::any::Any + Send)) -> EngineError {
        let message = crate::base::fault::panic_message(payload).into();
        self.suspend(EngineError::Panicked { site, message })
    }

    /// Run `f`, turning a panic in it into [`Inner::caught_panic`]'s error.
    pub fn catch<T>(&self, site: PanicSite, f: impl FnOnce() -> T) -> Result<T> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| self.caught_panic(site, &*p))
    }

    pub fn self_arc(&self) -> Arc<Inner> {
        self.me.get().and_then(Weak::upgrade).expect("Inner lives in an Arc")
    }

    /// Compression contexts, created on first use (compress/queue.rs).
    pub fn workspaces(&self) -> &Workspaces {
        self.compress.codecs.workspaces()
    }

    /// Turn early placement on or off for the txg starting now (or after a failed one).
    pub fn refresh_early_room(&self, failed: bool) {
        self.early.refresh_room(self.placeable_bytes(), self.opts.max_dirty_bytes, !self.read_only, failed);
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
        let s = self.ns.snap.get(&self.db)?;
        crate::store::nsdelta::resolve_inode(ino, row, inode_in(&s.inodes, ino)?)
    }

    /// A row of a byte-keyed namespace table: the delta's, else redb's (read after it).
    pub fn row(
        &self,
        sel: fn(&crate::store::nsdelta::Delta) -> &crate::store::nsdelta::ByteRows,
        table: redb::TableDefinition<&'static [u8], &'static [u8]>,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.ns.find(|d| sel(d).get(key).cloned()) {
            return Ok(v);
        }
        let s = self.ns.snap.get(&self.db)?;
        let v = match s.byte_table(table) {
            Some(t) => t.get(key)?.map(|v| v.value().to_vec()),
            None => s.rx.open_table(table)?.get(key)?.map(|v| v.value().to_vec()),
        };
        Ok(v)
    }

    /// The record size of `ino` in bytes as the namespace says: its `recordsizes` row (the
    /// delta's, else redb's), else the pool's. The data path reads it once per FileData
    /// (`file_init`); readers of a file it does not hold ask here.
    pub fn record_size(&self, ino: Ino) -> Result<u64> {
        // the delta first, then a redb read started after it (nsdelta.rs); a pool without
        // `RECORDSIZES` has no row in redb (the commit sets the flag before its rows leave
        // the delta), so a read there needs no redb lookup
        let row = self.ns.find(|d| d.recordsizes.get(&ino).copied());
        let rs = match row {
            Some(r) => r,
            None if !self.recordsizes_on.load(Ordering::Acquire) => None,
            None => {
                let s = self.ns.snap.get(&self.db)?;
                match &s.recordsizes {
                    Some(t) => t.get(ino)?.map(|v| v.value()),
                    None => None,
                }
            }
        };
        match rs.map(u64::from) {
            None => Ok(self.recordsize),
            Some(b) if crate::base::options::recordsize_supported(b) => Ok(b),
            Some(b) => Err(crate::base::error::Corruption::BadRecordSize { ino, bytes: b }.into()),
        }
    }

    /// What a new FileData of `ino` starts from: committed size and physical bytes, and the
    /// file's record size (noted for the bounds that depend on record sizes).
    fn file_init(&self, ino: Ino) -> Result<(u64, u64, u64)> {
        let a = self.inode_record(ino)?;
        let rs = self.record_size(ino)?;
        self.note_record_size(rs);
        Ok((a.size, a.blocks_bytes, rs))
    }

    /// A file with records of `rs` bytes takes data: the bounds that depend on the record
    /// sizes in use take it in (`data_meta`'s smallest, placement's largest).
    pub fn note_record_size(&self, rs: u64) {
        self.smallest_rs.fetch_min(rs, Ordering::Relaxed);
        self.space.note_record_size(rs);
    }

    /// The file's dirty state, created from the committed inode if needed.
    pub fn file_ref(&self, ino: Ino) -> Result<FileRef> {
        loop {
            let f = self.dirty.files.get_or_create(ino, || self.file_init(ino))?;
            if !f.lock().retired {
                return Ok(f);
            }
        }
    }

    /// Run `f` on `ino`'s FileData (made if needed) while nobody can create, retire or
    /// purge it (its shard lock is held; see dirty.rs `with_file`).
    pub fn with_file<T>(&self, ino: Ino, f: impl FnOnce(&FileRef) -> T) -> Result<T> {
        self.dirty.files.with_file(ino, || self.file_init(ino), f)
    }

    /// Size and physical bytes of `ino` held by the data path, if it holds the file.
    pub fn live_sizes(&self, ino: Ino) -> Option<(u64, u64)> {
        let f = self.dirty.files.get(ino)?;
        let fd = f.lock();
        (!fd.retired).then(|| (fd.size, fd.blocks_bytes()))
    }

    /// Bytes new data is sure to find room in, the metadata reserve kept back (write
    /// admission; space/placement.rs `Space::placeable_bytes`).
    pub fn placeable_bytes(&self) -> u64 {
        self.space.placeable_bytes(Some(&self.meta_space))
    }

    /// What the dirty data in flight, plus `extra` bytes about to be written, takes in the
    /// metadata store at its commit (meta_space.rs `data_meta`).
    pub fn data_meta(&self, extra: u64) -> u64 {
        let files = self.dirty.files_in_flight();
        let smallest = self.smallest_rs.load(Ordering::Relaxed).max(1);
        let records = self.acct.dirty().saturating_add(extra) / smallest + files;
        crate::store::meta_space::data_meta(files, records, self.max_inline)
    }

    /// Inputs for a metadata-room decision (meta_space.rs) with `extra` data bytes about to
    /// be written; `None` for a store in memory.
    pub fn meta_room(&self, extra: u64) -> Option<crate::store::meta_space::Room> {
        let on_fs = if self.space.data_on_meta_fs() { self.acct.dirty().saturating_add(extra) } else { 0 };
        self.meta_space.room(on_fs, self.data_meta(extra))
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
