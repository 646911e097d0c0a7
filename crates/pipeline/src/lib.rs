//! squeezefs engine: the pool, transaction groups, the write pipeline and the read path.
//!
//! CONTRACT used by the fs core (crates/fs). Semantics:
//! * Namespace and attribute changes go through [`Engine::meta_write`]: one atomic metadata
//!   transaction, visible at once, durable at the next txg commit (or `fsync`/`sync`).
//! * Data goes through `read`/`write`/`set_size`/`punch_hole`/`allocate`: visible at once,
//!   durable at the next txg commit; `fsync(ino)` returns only after a commit covering it.
//! * The engine knows nothing of POSIX permissions; the fs core checks them.
//!
//! Durability model (docs/design.md §5): every `meta_write` is one atomic change of the
//! in-memory namespace delta (nsdelta.rs; visible at once, no redb transaction); every txg
//! ends with one durable redb commit that carries the txg's extent pointers, sizes and freed
//! space and, with them, every namespace change made before it. A crash leaves the pool at the last
//! durable commit: namespace and data consistent (extent pointers only ever reference data
//! that was fdatasync'ed before the commit). Data written after the quiesce of txg N is in
//! txg N+1, while namespace changes made during N's sync are made durable by N's commit:
//! after a crash, a file renamed during that window may show its older contents (as with
//! ext4 `data=writeback`); applications that need ordering call `fsync`.
//!
//! Dropping an [`Engine`] without [`Engine::close`] behaves like a crash of the data path:
//! dirty data not yet committed is lost (tests use this to check `fsync`).

mod base;
mod check;
mod compress;
mod engine;
mod read;
mod rewrite;
mod space;
mod store;
mod sync;
#[cfg(test)]
mod tests;
mod txg;
mod write;

pub use base::accounting::EarlyStats;
pub use base::error::{Corruption, EngineError, Internal, InvalidArg, IoError, PanicSite, PoolError, Result};
pub use base::options::{
    bundle_size_supported, default_bundle_size, recordsize_supported, MkfsOptions, ObjectSettings, OpenOptions,
    DEFAULT_DEVICE_FILE, DEFAULT_MAX_INLINE, DEFAULT_QOS_BURST, DEFAULT_RECORDSIZE, MAX_BUNDLE_SIZE, MAX_RECORDSIZE,
    META_FILE, MIN_RECORDSIZE, QOS_BURST_RANGE, SEAL_FILE,
};
pub use base::{pool_lock, units};
pub use check::{fsck, scrub};
pub use compress::levels::RATE_CONFIRM_BYTES;
pub use compress::policy::ADAPTIVE_PLACEHOLDER;
pub use compress::qos::{QosAdmit, QosTree, TREE_BACKLOG_MIN_BYTES, TREE_BACKLOG_SECS};
pub use engine::backup::{DEFAULT_BACKUP_INTERVAL, QUIET as BACKUP_QUIET};
pub use engine::object_dev::map_path as object_map_path;
pub use engine::pool::now;
pub use engine::restore::RestoreReport;
pub use read::path::PREFETCH_RECORDS;
pub use read::usage::UsageRow;
pub use rewrite::record::{stored_codec, RewriteOutcome, RewriteSkip, RewriteTo};
pub use space::placement::DeviceStatus;
pub use squeezefs_control::qos::{QosError, StatsRow as QosStatsRow, TreeId, TreeInfo, NO_TREE};
pub use squeezefs_device::{Device, DeviceStatsSnapshot};
pub use squeezefs_meta::seal::SEAL_LEVEL;
pub use squeezefs_meta::{BgCursor, BgFrame, Bundle, BundleSlice, DeviceExtent, ExtentPtr, StoredRecord};
pub use squeezefs_meta::{DirEntry, FileKind, Ino, InodeAttr, Timestamp, ROOT_INO};
pub use store::meta_convert::Converted as MetaConverted;
pub use store::meta_files::{Form as MetaForm, COPY_FILES, DEFAULT_META_COPIES};
pub use store::meta_mirror::{CopyCheck, LostBlock, Repair as MetaRepair, StoreCheck as MetaCheck};
pub use store::meta_seal::{seal_level_for, SealReport, SEAL_TMP_FILE, UNSEAL_TMP_FILE};
pub use write::metatx::MetaTx;
pub use write::share::ShareOutcome;

/// For crash tests: the power cut of the metadata store's copies and their files, and
/// arming it for a pool directory the engine then opens by path.
#[doc(hidden)]
pub mod testing {
    pub use crate::store::meta_copy::{arm_pool, disarm_pool, CopyFile, PowerCut};
}

use engine::inner::Inner;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct StatFs {
    pub total_bytes: u64,
    /// free for new data, the metadata reserve included (`df`: Used = total − free)
    pub free_bytes: u64,
    /// what new data is admitted to: free less the metadata reserve when a growable device
    /// shares the metadata store's filesystem (meta_space.rs; `df`'s Avail)
    pub avail_bytes: u64,
    pub sector: u32,
    pub inodes: u64,
}

/// Pool-wide parameters fixed at mkfs.
#[derive(Clone, Debug)]
pub struct PoolInfo {
    pub sector: u32,
    pub recordsize: u32,
    /// bound of a bundle's decoded bytes (the record size in pools made before the field)
    pub bundle_size: u32,
    pub max_inline: u32,
    pub devices: usize,
    pub last_txg: u64,
    /// the pool directory (holds the metadata store)
    pub pool_dir: std::path::PathBuf,
}

pub struct Engine {
    /// taken only by `drop`, which then waits until every other holder let go
    inner: std::mem::ManuallyDrop<Arc<Inner>>,
    driver: Mutex<Option<JoinHandle<()>>>,
    /// the pool's holder lock, given up when `close` begins (pool_lock.rs: the pool is then
    /// CLOSING, and a new mount waits for it instead of refusing)
    holder: Mutex<Option<base::pool_lock::PoolLock>>,
}

impl Engine {
    pub fn mkfs(pool: &Path, opts: &MkfsOptions) -> Result<()> {
        engine::pool::mkfs(pool, opts, None)
    }

    /// Like `mkfs`, but the data devices are these objects (tests: crash images, fault
    /// injection). The metadata store is still `meta.redb` in `pool`.
    pub fn mkfs_with_devices(pool: &Path, devices: Vec<Arc<dyn Device>>, opts: &MkfsOptions) -> Result<()> {
        if devices.is_empty() {
            return Err(base::error::InvalidArg::NoDevices.into());
        }
        engine::pool::mkfs(pool, opts, Some(devices))
    }

    /// Compact the metadata store of a closed pool (meta_compact.rs): (length before, length
    /// after) of `meta.redb`.
    pub fn compact_meta(pool: &Path) -> Result<(u64, u64)> {
        store::meta_compact::compact_meta(pool)
    }

    /// Give the metadata store of a closed pool `copies` checked copies, 1 or 2
    /// (meta_convert.rs); a plain store becomes checked.
    pub fn set_meta_copies(pool: &Path, copies: u8) -> Result<MetaConverted> {
        store::meta_convert::set_meta_copies(pool, copies)
    }

    /// Check every block of every copy of a closed pool's metadata store; `repair`: rewrite
    /// the bad ones from intact copies. `None` for a plain store (no checksums to check).
    pub fn check_meta(pool: &Path, repair: bool) -> Result<Option<MetaCheck>> {
        store::meta_convert::check_meta(pool, repair)
    }

    /// The store of a closed pool as a redb database, read-write, through its checked copies
    /// when it has them (tests and tools that look at rows directly).
    pub fn open_meta_store(pool: &Path) -> Result<redb::Database> {
        store::meta_files::open_rw(pool)
    }

    /// Seal the metadata store of a closed pool at zstd `level` (meta_seal.rs): `meta.redb`
    /// becomes `meta.seal`. `None` when it was sealed already.
    pub fn seal(pool: &Path, level: i32) -> Result<Option<SealReport>> {
        store::meta_seal::seal_pool(pool, level)
    }

    /// Unseal the metadata store of a closed pool: `meta.seal` becomes `meta.redb` again
    /// (a read-write open does it too). `None` when it was not sealed.
    pub fn unseal(pool: &Path) -> Result<Option<SealReport>> {
        store::meta_seal::unseal_pool(pool)
    }

    /// Whether the pool's metadata store is sealed.
    pub fn is_sealed(pool: &Path) -> bool {
        store::meta_seal::is_sealed(pool)
    }

    /// Open a pool. Another process holding it gives [`PoolError::InUse`], or
    /// [`PoolError::Closing`] while that process is closing it (try again shortly).
    pub fn open(pool: &Path, opts: &OpenOptions) -> Result<Arc<Engine>> {
        Self::start(engine::pool::open(pool, opts, None)?)
    }

    /// Like `open`, with these device objects (index = device index); headers are checked.
    pub fn open_with_devices(pool: &Path, devices: Vec<Arc<dyn Device>>, opts: &OpenOptions) -> Result<Arc<Engine>> {
        Self::start(engine::pool::open(pool, opts, Some(devices))?)
    }

    /// Record the mount this engine serves (device `MAJ:MIN` as mountinfo lists it, and its
    /// path) in the pool's holder lock: once that mount is gone, a new mount of the pool
    /// waits for this process to close it instead of refusing (pool_lock.rs).
    pub fn record_mount(&self, dev: &str, mountpoint: &Path) {
        if let Some(l) = &*self.holder.lock() {
            l.record_mount(dev, mountpoint);
        }
    }

    /// Restore the pool backed up on the object device `spec` (`s3://BUCKET/PREFIX`) into
    /// the new or empty directory `pool` (engine/restore.rs).
    pub fn restore(pool: &Path, spec: &str, object: &ObjectSettings) -> Result<RestoreReport> {
        let spec = engine::object_dev::spec_of(Path::new(spec))?
            .ok_or_else(|| PoolError::ObjectSpec(Box::new(squeezefs_object::SpecError::NotS3 { spec: spec.into() })))?;
        engine::restore::restore(pool, &spec, object)
    }

    /// Write a metadata backup of the newest commit into the bucket now (a pool of one
    /// object device); the backup thread does it by itself (engine/backup.rs).
    pub fn backup_now(&self) -> Result<squeezefs_object::BackupReport> {
        engine::backup_run::backup_now(&self.inner)
    }

    /// Metadata backups written since open.
    pub fn backups_written(&self) -> u64 {
        self.inner.backup.written.load(Ordering::Relaxed)
    }

    fn start((inner, holder): (Arc<Inner>, base::pool_lock::PoolLock)) -> Result<Arc<Engine>> {
        let driver = if inner.read_only {
            None
        } else {
            let i2 = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name("sqz-txg".into())
                    .spawn(move || sync::driver::driver(i2))
                    .map_err(EngineError::Spawn)?,
            )
        };
        if driver.is_some() {
            engine::backup_run::start(&inner)?;
        }
        Ok(Arc::new(Engine {
            inner: std::mem::ManuallyDrop::new(inner),
            driver: Mutex::new(driver),
            holder: Mutex::new(Some(holder)),
        }))
    }

    /// Stop changing the pool after a failure whose effect on the engine's state is unknown
    /// (a panic caught at the FUSE edge): from now on writes, syncs and fsyncs fail with
    /// `Suspended`; what the last commit made durable stays, and `close` still works.
    pub fn suspend(&self, cause: EngineError) {
        self.inner.suspend(cause);
    }

    /// Make the next pass through the named place panic once (fault.rs `Site` names:
    /// compress, decode, device-write, txg). Test builds only.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn inject_panic(&self, site: &str) -> Result<()> {
        let s = base::fault::Site::ALL
            .into_iter()
            .find(|s| s.name() == site)
            .ok_or(base::error::InvalidArg::UnknownPanicSite { sites: base::fault::Site::NAMES })?;
        self.inner.faults.arm(s);
        Ok(())
    }

    /// Flush everything and commit; the engine refuses work afterwards.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // from here the pool is CLOSING: a mount of it waits for the store instead of refusing
        drop(self.holder.lock().take());
        // a device's own work (repack) ends before the last txg, which then commits it
        for d in self.inner.space.devs() {
            d.dev.stop_background();
        }
        let mut r = Ok(());
        if let Some(h) = self.driver.lock().take() {
            self.inner.txg.shutdown();
            let _ = h.join();
            if let Some(cause) = self.inner.txg.halt_cause() {
                r = Err(EngineError::Suspended(cause));
            }
        }
        if r.is_ok() {
            engine::backup_run::final_backup(&self.inner);
        } else {
            self.inner.backup.stop();
        }
        self.inner.compress.levels.flush_trace();
        r
    }

    pub fn read_only(&self) -> bool {
        self.inner.read_only
    }

    pub fn info(&self) -> PoolInfo {
        PoolInfo {
            sector: self.inner.sector as u32,
            recordsize: self.inner.recordsize as u32,
            bundle_size: self.inner.bundle_size as u32,
            max_inline: self.inner.max_inline as u32,
            devices: self.inner.space.devs().len(),
            last_txg: self.inner.txg.synced(),
            pool_dir: self.inner.pool_dir.clone(),
        }
    }

    /// The record size of `ino` in bytes: a regular file's own (fixed when it was created,
    /// or set while it was empty: `MetaTx::set_record_size`), else the pool's.
    pub fn record_size(&self, ino: Ino) -> Result<u32> {
        read::namespace::record_size(&self.inner, ino)
    }

    /// Run `f` in one atomic metadata transaction: its changes are visible at once (all or,
    /// when `f` fails, none) and durable at the next txg commit (nsdelta.rs).
    pub fn meta_write<T>(&self, f: impl FnOnce(&mut MetaTx<'_>) -> Result<T>) -> Result<T> {
        write::namespace::meta_write(&self.inner, f)
    }

    /// Change one inode's attributes (mode, owner, times, flags — not size: `set_size`):
    /// `f` gets the current record and returns whether it changed anything; like a
    /// `meta_write` of that one record. An `Err` from `f` changes nothing.
    pub fn update_attr<T, E: From<EngineError>>(
        &self,
        ino: Ino,
        f: impl FnOnce(&mut InodeAttr) -> std::result::Result<(T, bool), E>,
    ) -> std::result::Result<T, E> {
        write::namespace::update_attr(&self.inner, ino, f)
    }

    /// Current attributes, including the in-memory size of dirty data.
    pub fn getattr(&self, ino: Ino) -> Result<InodeAttr> {
        read::namespace::getattr(&self.inner, ino)
    }

    pub fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<(Ino, FileKind)>> {
        read::namespace::lookup(&self.inner, dir, name)
    }

    /// Entries of `dir` with cookie > `after`, at most `limit`.
    pub fn dir_list(&self, dir: Ino, after: u64, limit: usize) -> Result<Vec<DirEntry>> {
        self.inner.check_open()?;
        write::metatx::list_cookies(&self.inner, None, dir, after, limit)
    }

    pub fn get_xattr(&self, ino: Ino, name: &[u8]) -> Result<Option<Vec<u8>>> {
        read::namespace::get_xattr(&self.inner, ino, name)
    }

    pub fn list_xattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        read::namespace::list_xattr(&self.inner, ino)
    }

    /// Symlink target (stored with the inode).
    pub fn read_link(&self, ino: Ino) -> Result<Vec<u8>> {
        read::namespace::read_link(&self.inner, ino)
    }

    /// Read up to `buf.len()` bytes at `offset`; short at EOF; holes read as zeros.
    pub fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.inner.bg.touch();
        read::path::read(&self.inner, ino, offset, buf)
    }

    /// Write `data` at `offset`, extending the size; may delay (throttle), never fails for load.
    /// The file's data is compressed with the policy its last `write_with_compression`
    /// stated while it has uncommitted data, else the pool's.
    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.bg.touch();
        write::data::write(&self.inner, ino, offset, data, compress::policy::Stated::Keep)
    }

    /// `write`, stating the compression of the file's data from this write on: `Some((spec,
    /// force))` (what the fs core resolved from the file's properties) or `None` (the pool's,
    /// `set_compression`). A record is compressed with the policy of the write that filled
    /// it (early compression) or, if none did, of the file's last write before its txg; the
    /// engine keeps a file's policy only while the file has uncommitted data.
    pub fn write_with_compression(
        &self,
        ino: Ino,
        offset: u64,
        data: &[u8],
        compression: Option<(squeezefs_codec::Spec, bool)>,
    ) -> Result<()> {
        self.write_stated(ino, offset, data, compression, NO_TREE)
    }

    /// `write_with_compression` of data in QoS tree `tree` (`NO_TREE`: none): its records
    /// are compressed at the tree's levels and scheduled by its deadlines (qos.rs). The
    /// caller asked admission first ([`Engine::qos_admit`]); this does not pace.
    pub fn write_stated(
        &self,
        ino: Ino,
        offset: u64,
        data: &[u8],
        compression: Option<(squeezefs_codec::Spec, bool)>,
        tree: TreeId,
    ) -> Result<()> {
        let p = match (compression, tree) {
            (Some((spec, force)), _) => Some(compress::policy::Policy { spec, force, tree }),
            (None, NO_TREE) => None,
            // the pool's compression, for data of a tree (the tree has to travel with it)
            (None, _) => Some(compress::policy::Policy { tree, ..self.inner.compress.pool_policy() }),
        };
        self.inner.bg.touch();
        write::data::write(&self.inner, ino, offset, data, compress::policy::Stated::Is(p))
    }

    /// Create or change QoS tree `tree` (a directory's inode number) with `rate_bps` under
    /// `parent` (the tree of the nearest ancestor directory holding `qos`, if any).
    pub fn qos_set_tree(
        &self,
        tree: TreeId,
        parent: Option<TreeId>,
        rate_bps: f64,
    ) -> std::result::Result<(), QosError> {
        if self.inner.qos.set_tree(tree, parent, rate_bps)? {
            let weak = Arc::downgrade(&self.inner);
            let spawned = std::thread::Builder::new().name("sqz-qos".into()).spawn(move || {
                // a thread inherits its creator's scheduling class, and this one is started
                // by a request, whose thread may wait as SCHED_IDLE or SCHED_FIFO (squeezefs-fuse
                // sched.rs): the level thread runs as every engine thread does
                let p = libc::sched_param { sched_priority: 0 };
                // SAFETY: plain syscall on the calling thread with a valid parameter block
                unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) };
                rewrite::qos_replan::replan_loop(weak)
            });
            if let Err(e) = spawned {
                // admission still paces; the levels stay at the start level
                log::error!("starting the QoS level thread: {e}; QoS trees keep their start level");
            }
        }
        Ok(())
    }

    /// QoS tree `tree` is gone (its directory lost `qos`).
    pub fn qos_remove_tree(&self, tree: TreeId) -> std::result::Result<(), QosError> {
        self.inner.qos.remove_tree(tree)
    }

    /// May `bytes` be written into QoS tree `tree` now? `Wait(t)`: nothing was charged, ask
    /// again at `t` (holding no lock meanwhile). Never sleeps.
    pub fn qos_admit(&self, tree: TreeId, bytes: u64) -> QosAdmit {
        self.inner.qos.admit(tree, bytes)
    }

    /// The QoS trees: admission state and stats line of each.
    pub fn qos_trees(&self) -> Vec<QosTree> {
        self.inner.qos.trees()
    }

    /// Truncate up or down.
    pub fn set_size(&self, ino: Ino, size: u64) -> Result<()> {
        self.inner.bg.touch();
        write::data::set_size(&self.inner, ino, size)
    }

    pub fn punch_hole(&self, ino: Ino, offset: u64, len: u64) -> Result<()> {
        self.inner.bg.touch();
        write::data::punch_hole(&self.inner, ino, offset, len)
    }

    /// fallocate mode 0 / KEEP_SIZE: ensure space is available (ENOSPC otherwise) and, unless
    /// `keep_size`, extend the size to offset+len. (A compressing pool cannot reserve blocks
    /// for later writes; the range stays a hole until written.)
    pub fn allocate(&self, ino: Ino, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        self.inner.bg.touch();
        write::data::allocate(&self.inner, ino, offset, len, keep_size)
    }

    /// Copy `len` bytes at `src_off` of `src` to `dst_off` of `dst` (`copy_file_range`; the
    /// same file when the ranges do not overlap), up to the source's end, extending `dst`:
    /// whole records that line up share the source's stored records (no decode, no
    /// compression, no new space; a later write to either side rewrites only the writer's
    /// record), the rest is copied as data (write/share.rs).
    pub fn share_range(&self, src: Ino, src_off: u64, dst: Ino, dst_off: u64, len: u64) -> Result<ShareOutcome> {
        self.inner.bg.touch();
        write::share::share_range(&self.inner, src, src_off, dst, dst_off, len)
    }

    /// How many extent rows the committed state counts for the device record at `ext`
    /// (its `refcounts` row, else 1; store/refcounts.rs).
    pub fn references(&self, ext: &DeviceExtent) -> Result<u64> {
        let rx = self.inner.db.begin_read()?;
        store::refcounts::references(&rx, ext.dev, ext.offset)
    }

    /// SEEK_DATA / SEEK_HOLE: `None` means ENXIO.
    pub fn seek_data(&self, ino: Ino, offset: u64) -> Result<Option<u64>> {
        read::path::seek(&self.inner, ino, offset, true)
    }

    pub fn seek_hole(&self, ino: Ino, offset: u64) -> Result<Option<u64>> {
        read::path::seek(&self.inner, ino, offset, false)
    }

    /// Durable when it returns.
    pub fn fsync(&self, _ino: Ino) -> Result<()> {
        self.sync()
    }

    /// Order `ino`'s data before a rename that replaces a name: when this returns, every
    /// change made to `ino` so far commits no later than a namespace change made next. The
    /// fs calls it for the file that moves in over an existing name (ext4's auto_da_alloc,
    /// btrfs's flush on rename-over): the common "write a temporary file, rename it over the
    /// old one" without fsync must leave the old file or the new one after a crash, never
    /// the new name on an empty file. Waits only while a txg is in flight and `ino` has
    /// changes that txg does not hold (see `TxgCtl::wait_for_txg_in_flight_if_dirty`).
    pub fn order_data_before_rename(&self, ino: Ino) -> Result<()> {
        self.inner.check_open()?;
        if self.inner.read_only {
            return Ok(());
        }
        self.inner.txg.wait_for_txg_in_flight_if_dirty(&self.inner.dirty, ino)
    }

    pub fn sync(&self) -> Result<()> {
        self.inner.check_open()?;
        if self.inner.read_only {
            return Ok(());
        }
        let r = self.inner.txg.sync_and_wait(&self.inner.dirty);
        // the rows of everything synced are in the trace file too
        self.inner.compress.levels.flush_trace();
        r
    }

    pub fn statfs(&self) -> Result<StatFs> {
        self.inner.check_open()?;
        // total counts every whole free sector; free only what new data is sure to get
        // (the admission figure), so `df` never shows room that writes are refused
        let avail = self.inner.placeable_bytes();
        let free = self.inner.space.placeable_bytes(None);
        let whole_free = self.inner.space.free_bytes().max(free);
        let used: u64 = self.device_stats().iter().map(|d| d.used_bytes).sum();
        let inodes = self.inner.ns.total_inodes().max(0) as u64;
        Ok(StatFs {
            total_bytes: used.saturating_add(whole_free),
            free_bytes: free,
            avail_bytes: avail,
            sector: self.inner.sector as u32,
            inodes,
        })
    }

    /// compsize-like usage of one inode's data (committed records).
    pub fn usage(&self, ino: Ino) -> Result<Vec<UsageRow>> {
        self.inner.check_open()?;
        read::usage::usage(&self.inner, ino)
    }

    /// Mount-wide compression for data written from now on (mount option / remount).
    /// `Spec::Auto` chooses per record (levels.rs); `Spec::Qos` compresses with zstd:3 until
    /// the QoS plan chooses.
    pub fn set_compression(&self, spec: squeezefs_codec::Spec, force: bool) {
        self.inner.compress.set_pool_policy(compress::policy::Policy { spec, force, tree: NO_TREE });
    }

    /// The mount-wide compression: (spec, force).
    pub fn compression(&self) -> (squeezefs_codec::Spec, bool) {
        let p = self.inner.compress.pool_policy();
        (p.spec, p.force)
    }

    /// Inodes whose link count reached 0 while open, left over from a crash: the fs core
    /// frees them at mount.
    pub fn orphans(&self) -> Result<Vec<Ino>> {
        read::namespace::orphans(&self.inner)
    }

    /// Per-device queue, latency, throughput and space (for controllers and `stats`).
    pub fn device_stats(&self) -> Vec<DeviceStatus> {
        self.inner.space.device_status()
    }

    /// The object device's counters (segments, live bytes, requests, repack, read cache),
    /// for a writable pool whose one device is an object device; `None` for any other.
    pub fn object_usage(&self) -> Option<squeezefs_object::ObjectUse> {
        self.inner.backup.device.get().map(|d| d.usage())
    }

    /// Bytes of dirty (uncommitted) data held in memory.
    pub fn dirty_bytes(&self) -> u64 {
        self.inner.acct.dirty()
    }

    /// Early compression figures (queue, results waiting for their txg, records held
    /// compressed; see early.rs).
    pub fn early_stats(&self) -> EarlyStats {
        self.inner.acct.early_stats()
    }

    /// The compression contexts' pool: memory, reuse, and the compression work done so far
    /// (calls, source bytes, CPU time inside the codec). All zeros before the first record
    /// is compressed.
    pub fn codec_stats(&self) -> squeezefs_codec::PoolStats {
        self.inner.compress.codecs.stats()
    }

    /// Verify every checksum (see scrub.rs).
    pub fn scrub(&self, progress: &dyn Fn(u64, u64)) -> Result<check::scrub::ScrubReport> {
        self.inner.check_open()?;
        check::scrub::scrub(&self.inner, progress)
    }

    /// Check metadata and space-map consistency (see fsck.rs).
    pub fn fsck(&self) -> Result<check::fsck::FsckReport> {
        self.inner.check_open()?;
        check::fsck::fsck(&self.inner)
    }

    /// Committed extents of a file: (file offset, extent pointer), in file order.
    pub fn extents(&self, ino: Ino) -> Result<Vec<(u64, ExtentPtr)>> {
        read::namespace::extents(&self.inner, ino)
    }

    /// Committed bundles (small records of several files stored as one, bundle.rs), by id;
    /// a row that does not decode is left out (fsck reports it).
    pub fn bundles(&self) -> Result<Vec<(u64, Bundle)>> {
        self.inner.check_open()?;
        let rx = self.inner.db.begin_read()?;
        Ok(txg::bundle::all(&rx)?.into_iter().filter_map(|(id, b)| b.ok().map(|b| (id, b))).collect())
    }

    /// Whether this engine stores small records in bundles (the pool has them and the
    /// engine was opened with `bundle_small_records`).
    pub fn bundling(&self) -> bool {
        self.inner.bundles.enabled()
    }

    /// Rewrite committed record `idx` of `ino` with `to` if its committed extent is still
    /// the one read (compare-and-swap under the file lock; rewrite/record.rs): the new encoding
    /// goes into the open txg like a write of the same bytes, durable with its commit.
    /// `if_different`: leave a record stored the way `to` asks already. Compresses on the
    /// calling thread.
    pub fn rewrite_record(&self, ino: Ino, idx: u64, to: RewriteTo, if_different: bool) -> Result<RewriteOutcome> {
        rewrite::record::rewrite_record(&self.inner, ino, idx, to, if_different)
    }

    /// Time since the last foreground operation (data read or write, size change, namespace
    /// or attribute change; bgstate.rs): what background compression waits on.
    pub fn idle_for(&self) -> std::time::Duration {
        self.inner.bg.idle_for()
    }

    /// The last txg whose commit changed file data (since this engine opened; the pool's
    /// last txg at open).
    pub fn data_txg(&self) -> u64 {
        self.inner.bg.data_txg()
    }

    /// The bound on dirty data in memory (`OpenOptions::max_dirty_bytes`).
    pub fn max_dirty_bytes(&self) -> u64 {
        self.inner.opts.max_dirty_bytes
    }

    /// Background compression's cursor: the one saved last (committed or not), `None` if
    /// the pool never had one.
    pub fn background_cursor(&self) -> Result<Option<BgCursor>> {
        read::namespace::background_cursor(&self.inner)
    }

    /// Save background compression's cursor: durable with the next commit (which this
    /// asks for, as a metadata change does).
    pub fn save_background_cursor(&self, c: BgCursor) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.bg.save(c);
        self.inner.txg.note_meta_change();
        Ok(())
    }

    /// Bytes of decoded records held in the read cache now.
    pub fn record_cache_bytes(&self) -> usize {
        self.inner.cache.records.bytes()
    }

    /// Committed inode record: redb's, without the namespace delta (tests, fsck).
    pub fn committed_attr(&self, ino: Ino) -> Result<InodeAttr> {
        read::namespace::committed_attr(&self.inner, ino)
    }
}

impl Drop for Engine {
    /// Without `close`: stop the driver without syncing (a crash of the data path), then
    /// wait until no job holds the engine (its shared state is released, the metadata store
    /// closed) so the pool can be reopened at once.
    fn drop(&mut self) {
        if let Some(h) = self.driver.lock().take() {
            self.inner.txg.abandon();
            let _ = h.join();
        }
        self.inner.backup.stop();
        self.inner.closed.store(true, Ordering::Release);
        let released = self.inner.released.0.clone();
        // SAFETY: `inner` is not used after this (we are in drop), and taken only here
        drop(unsafe { std::mem::ManuallyDrop::take(&mut self.inner) });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        if !released.wait_until(deadline) {
            log::warn!("engine dropped while a job still holds it after 10 s; the pool stays open until it ends");
        }
    }
}
