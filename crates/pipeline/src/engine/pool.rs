//! Creating and opening a pool: a directory holding the metadata store (`meta.redb`) and,
//! unless devices are named, one growable device file (`data.0`).

use crate::base::error::{PoolError, Result};
use crate::base::options::{
    bundle_size_supported, default_bundle_size, recordsize_supported, MkfsOptions, OpenOptions, DEFAULT_DEVICE_FILE,
    DEFAULT_MAX_INLINE, DEFAULT_RECORDSIZE, META_FILE, SEAL_FILE,
};
use crate::base::pool_lock::{PoolLock, Refusal};
use crate::engine::inner::Inner;
use crate::space::alloc::DevSpace;
use crate::space::devq::DevQueue;
use crate::space::placement::{DevSlot, Space};
#[allow(unused_imports)]
use crate::store::metadb::MetaDb;
use crate::txg::bundle::Bundles;
use redb::ReadableTable;
use squeezefs_device::{
    is_nonempty, read_header, write_header, Device, DeviceHeader, FileDevice, FileDeviceOptions, PoolId, DATA_START,
};
use squeezefs_meta::encode::encode_inode_for;
use squeezefs_meta::{
    keys, tables, DeviceKind, DeviceRecord, Features, FileKind, InodeAttr, Superblock, Timestamp, ROOT_INO,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The clock of every file timestamp: `CLOCK_REALTIME_COARSE`, the clock the kernel's
/// `current_time()` reads (the last timer tick, 1–10 ms steps), as ext4 and btrfs stamp
/// their inodes with.
///
/// Why not the precise clock: with the FUSE writeback cache the kernel keeps a regular
/// file's mtime/ctime itself and stamps them with `current_time()` on every write. When the
/// times the daemon handed out (CREATE, SETATTR) equal that tick, `file_update_time` finds
/// nothing to change and leaves the inode clean, so the next `fchown`/`fchmod`/close sends
/// no SETATTR to flush the times back: one round trip less per file a `tar xf` creates
/// (10 → 9). A precise stamp always differs from the tick, and can even be later than the
/// kernel's next stamp of the same file, which would make mtime run backwards.
pub fn now() -> Timestamp {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec to the pointer it is given; CLOCK_REALTIME_COARSE
    // exists on every Linux since 2.6.32, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    Timestamp { secs: ts.tv_sec, nanos: ts.tv_nsec as u32 }
}

/// The checked geometry of a new pool: (record size, max_inline, bundle size).
fn validate(opts: &MkfsOptions) -> Result<(u32, u32, u32)> {
    if let Some(s) = opts.sector {
        if s != 512 && s != 4096 {
            return Err(PoolError::SectorUnsupported { sector: s }.into());
        }
    }
    let rs = opts.recordsize.unwrap_or(DEFAULT_RECORDSIZE);
    if !recordsize_supported(u64::from(rs)) {
        return Err(PoolError::RecordSizeUnsupported { recordsize: rs }.into());
    }
    let mi = opts.max_inline.unwrap_or(DEFAULT_MAX_INLINE);
    if mi > rs / 2 {
        return Err(PoolError::MaxInlineTooLarge { max_inline: mi, limit: rs / 2 }.into());
    }
    if let Some(c) = opts.meta_copies.filter(|c| !(1..=2).contains(c)) {
        return Err(PoolError::MetaCopiesUnsupported { copies: c }.into());
    }
    let bs = opts.bundle_size.unwrap_or_else(|| default_bundle_size(rs));
    if !bundle_size_supported(u64::from(bs), u64::from(rs)) {
        return Err(PoolError::BundleSizeUnsupported { bundle_size: bs, recordsize: rs }.into());
    }
    Ok((rs, mi, bs))
}

pub fn mkfs(pool: &Path, opts: &MkfsOptions, injected: Option<Vec<Arc<dyn Device>>>) -> Result<()> {
    let (recordsize, max_inline, bundle_size) = validate(opts)?;
    if pool.exists() && !pool.is_dir() {
        return Err(PoolError::NotADirectory { path: pool.to_path_buf() }.into());
    }
    let sealed = pool.join(SEAL_FILE);
    if (crate::store::meta_files::form(pool).is_some() || sealed.exists()) && !opts.force {
        return Err(PoolError::AlreadyAPool { path: pool.to_path_buf() }.into());
    }
    // an overwritten sealed pool's store must not outlive it (an open prefers meta.redb,
    // but a crash before the new one is durable would bring the old one back)
    for stale in [SEAL_FILE, crate::store::meta_seal::SEAL_TMP_FILE, crate::store::meta_seal::UNSEAL_TMP_FILE] {
        let p = pool.join(stale);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|source| PoolError::Remove { path: p.clone(), source })?;
        }
    }
    std::fs::create_dir_all(pool).map_err(|source| PoolError::CreateDir { path: pool.to_path_buf(), source })?;
    let mut devs: Vec<(Arc<dyn Device>, PathBuf, DeviceKind)> = Vec::new();
    if let Some(list) = injected {
        for d in list {
            if !opts.force && is_nonempty(&*d).map_err(PoolError::Device)? {
                return Err(PoolError::DeviceNotEmpty { path: PathBuf::from(d.name()) }.into());
            }
            let kind = if d.capacity().is_some() { DeviceKind::FixedFile } else { DeviceKind::GrowableFile };
            devs.push((d.clone(), PathBuf::from(d.name()), kind));
        }
    }
    let own = opts.devices.is_empty() && devs.is_empty();
    let paths: Vec<PathBuf> = if own {
        vec![pool.join(DEFAULT_DEVICE_FILE)]
    } else if devs.is_empty() {
        opts.devices.clone()
    } else {
        Vec::new()
    };
    for p in &paths {
        if let Some(spec) = crate::engine::object_dev::spec_of(p)? {
            let d = crate::engine::object_dev::create(pool, devs.len(), &spec, &opts.object, opts.force)?;
            devs.push((d, PathBuf::from(spec.to_string()), DeviceKind::Object));
            continue;
        }
        if own && p.exists() {
            if !opts.force {
                return Err(PoolError::FileExists { path: p.clone() }.into());
            }
            std::fs::remove_file(p).map_err(|source| PoolError::Remove { path: p.clone(), source })?;
        }
        let capacity = if own { opts.device_capacity } else { None };
        let d = FileDevice::open_with(p, &FileDeviceOptions { read_only: false, create: true, capacity })
            .map_err(|source| PoolError::OpenDevice { path: p.clone(), source })?;
        if !own && !opts.force && is_nonempty(&d).map_err(PoolError::Device)? {
            return Err(PoolError::DeviceInUse { path: p.clone() }.into());
        }
        let kind = if d.is_block_device() {
            DeviceKind::Block
        } else if capacity.is_some() {
            DeviceKind::FixedFile
        } else {
            DeviceKind::GrowableFile
        };
        let recorded = if own {
            PathBuf::from(DEFAULT_DEVICE_FILE)
        } else {
            std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())
        };
        devs.push((Arc::new(d), recorded, kind));
    }
    // only now that every device opened and passed its checks: an old pool is replaced by
    // --force, not destroyed by a mistyped --device
    crate::store::meta_files::remove_all(pool)?;
    let any_block = devs.iter().any(|d| d.2 == DeviceKind::Block);
    let sector = opts.sector.unwrap_or(if any_block { 4096 } else { 512 });
    let pool_id = PoolId::random();
    let count = devs.len() as u32;
    for (i, (d, _, _)) in devs.iter().enumerate() {
        let h = DeviceHeader {
            pool_id,
            device_index: i as u32,
            device_count: count,
            sector_size: sector,
            capacity: d.capacity(),
        };
        write_header(&**d, &h).map_err(PoolError::Header)?;
    }
    let copies = opts.meta_copies.unwrap_or(crate::store::meta_files::DEFAULT_META_COPIES);
    let db = crate::store::meta_files::create(pool, copies)?;
    let tx = db.begin_write()?;
    {
        // bundles bounded by the record size need no field: such a pool stays readable by
        // builds that predate bundle sizes
        let mut features = Features::current();
        let bundle_size = (bundle_size != recordsize).then_some(bundle_size);
        if bundle_size.is_some() {
            features.incompat |= Features::INCOMPAT_BUNDLE_SIZE;
        }
        if devs.iter().any(|d| d.2 == DeviceKind::Object) {
            features.incompat |= Features::INCOMPAT_OBJECT_DEVICE;
        }
        features.incompat |= Features::INCOMPAT_META_COPIES;
        let sb = Superblock {
            features,
            pool_id: pool_id.0,
            sector,
            recordsize,
            max_inline,
            device_count: count,
            next_ino: ROOT_INO + 1,
            txg: 0,
            created: now().secs,
            bundle_size,
            meta_copies: Some(copies),
        };
        tx.open_table(tables::SUPERBLOCK)?.insert(0u8, &sb.encode()[..])?;
        let mut dt = tx.open_table(tables::DEVICES)?;
        for (i, (d, path, kind)) in devs.iter().enumerate() {
            use std::os::unix::ffi::OsStrExt;
            let rec = DeviceRecord {
                kind: *kind,
                capacity: d.capacity().unwrap_or(0),
                alloc_end: DATA_START,
                path: path.as_os_str().as_bytes().to_vec(),
            };
            dt.insert(i as u32, &rec.encode()[..])?;
        }
        let t = now();
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let root = InodeAttr { generation: 1, ..InodeAttr::new(ROOT_INO, FileKind::Dir, 0o755, uid, gid, t) };
        let compact = Features::current().incompat & Features::INCOMPAT_COMPACT_ROWS != 0;
        tx.open_table(tables::INODES)?.insert(ROOT_INO, &encode_inode_for(&root, compact)[..])?;
        // create the remaining tables so read transactions find them
        tx.open_table(tables::DIRENTS)?;
        tx.open_table(tables::DIR_COOKIES)?;
        tx.open_table(tables::DIR_NEXT_COOKIE)?;
        tx.open_table(tables::XATTRS)?;
        tx.open_table(tables::SYMLINKS)?;
        tx.open_table(tables::ORPHANS)?;
        tx.open_table(tables::EXTENTS)?;
        tx.open_table(tables::FREE_SPACE)?;
        tx.open_table(tables::RECORDSIZES)?;
        // pools made by this build have INCOMPAT_BUNDLES
        tx.open_table(tables::BUNDLES)?;
    }
    tx.commit()?;
    drop(db);
    // the new names (the store's copies, the device file, the pool directory itself) are durable only
    // once their directories are synced: without this a power cut right after mkfs could
    // leave a pool directory with no store although mkfs said it succeeded
    let parent = pool.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
    for dir in [Some(pool), parent].into_iter().flatten() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| PoolError::SyncDir { path: dir.to_path_buf(), source })?;
    }
    Ok(())
}

/// Open the pool in `pool`: its metadata store and superblock (`open_store`), each device
/// with its header and free-space map (`open_device`), the inode counter; then the engine's
/// shared state, and the lock that marks this process as the pool's holder (pool_lock.rs).
/// `injected` devices (tests) stand in for the recorded device files.
pub fn open(pool: &Path, opts: &OpenOptions, injected: Option<Vec<Arc<dyn Device>>>) -> Result<(Arc<Inner>, PoolLock)> {
    let has_store = |pool: &Path| crate::store::meta_files::form(pool).is_some();
    if !has_store(pool) && !pool.join(SEAL_FILE).exists() {
        return Err(PoolError::NotAPool { path: pool.to_path_buf() }.into());
    }
    let lock = PoolLock::acquire(pool, opts.read_only).map_err(|r| match r {
        Refusal::InUse(holder) => PoolError::InUse { pool: pool.to_path_buf(), holder },
        Refusal::Closing(holder) => PoolError::Closing { pool: pool.to_path_buf(), holder },
    })?;
    // a read-write open needs the store as a file; a read-only one of a sealed pool reads
    // the seal into memory (meta_seal.rs). A sealed pool's superblock is checked before it
    // is unsealed: a pool this build cannot open is refused, and one it may only read is
    // opened read-only, both without writing to it
    let mut read_only = opts.read_only;
    if !read_only && !has_store(pool) {
        let db = MetaDb::Sealed(crate::store::meta_seal::load_in_memory(pool)?);
        let sb = read_superblock(&db)?;
        check_superblock(pool, &sb)?;
        read_only = warn_read_only(pool, &sb);
    }
    if !read_only {
        crate::store::meta_seal::settle(pool)?;
        crate::store::meta_files::settle(pool)?;
    }
    let (db, sb, read_only) = open_store(pool, read_only, &lock)?;
    lock.claim();
    // pools made before PACKED_BYTES keep packing at the sector: their free map and extent
    // footprints are in whole sectors
    let granule = if sb.features.incompat & Features::INCOMPAT_PACKED_BYTES != 0 { 1 } else { u64::from(sb.sector) };
    let rx = db.begin_read()?;
    let faults = Arc::new(crate::base::fault::Faults::default());
    let objects;
    let mut slots = Vec::new();
    let mut images = Vec::new();
    {
        let at = DeviceOpen {
            pool,
            sb: &sb,
            opts,
            injected: injected.as_deref(),
            read_only,
            granule,
            faults: faults.clone(),
            objects: Default::default(),
        };
        let dt = rx.open_table(tables::DEVICES)?;
        let ft = rx.open_table(tables::FREE_SPACE)?;
        for i in 0..sb.device_count {
            let (slot, image) = at.open_device(i, &dt, &ft)?;
            slots.push(slot);
            images.push(image);
        }
        objects = at.objects.take();
    }
    let (next_ino, inode_rows) = inode_counter(&rx, &sb)?;
    let recordsizes_on = recordsizes_in_use(pool, &rx, &sb)?;
    // only pools made with bundles get them: older builds must still open the others
    let bundling = sb.features.incompat & Features::INCOMPAT_BUNDLES != 0 && opts.bundle_small_records && !read_only;
    let bundles = Bundles::new(bundling, crate::txg::bundle::next_id(&rx)?);
    let auto_starts = crate::store::auto_start::load(&rx);
    drop(rx);
    let space = Space::new(pool.to_path_buf(), slots, images, u64::from(sb.sector), granule, u64::from(sb.recordsize));
    if bundling {
        // a bundle is placed like a record of up to the bundle size
        space.note_record_size(u64::from(sb.bundle_size()));
    }
    // the trace is created once the pool is known to open (a refused open leaves an old
    // trace alone); a read-only open compresses nothing and traces nothing
    let trace = match &opts.trace {
        Some(path) if !read_only => Some(
            squeezefs_control::TraceWriter::create(path, space.devs().len())
                .map_err(|source| PoolError::Trace { path: path.clone(), source })?,
        ),
        _ => None,
    };
    let inner = Inner::new(
        pool.to_path_buf(),
        db,
        read_only,
        u64::from(sb.sector),
        granule,
        u64::from(sb.recordsize),
        u64::from(sb.bundle_size()),
        recordsizes_on,
        u64::from(sb.max_inline),
        space,
        opts.clone(),
        sb.txg,
        faults,
        trace,
        bundles,
        sb.features.incompat & Features::INCOMPAT_COMPACT_ROWS != 0,
    )
    .into_arc();
    inner
        .shared_on
        .store(sb.features.incompat & Features::INCOMPAT_SHARED_RECORDS != 0, std::sync::atomic::Ordering::Release);
    inner.ns.set_committed_inodes(inode_rows, next_ino);
    inner.compress.levels.set_resume(auto_starts);
    // a pool of one object device can be restored from its bucket: it backs up there
    if let ([dev], 1, false) = (&objects[..], sb.device_count, read_only) {
        inner.backup.attach(dev.clone());
    }
    inner.space.refresh_host(&inner.meta_space);
    inner.refresh_early_room(false);
    Ok((inner, lock))
}

/// The metadata store and its checked superblock; read-only when asked, or when the pool
/// uses read-only-compatible features this build does not know.
fn open_store(pool: &Path, read_only: bool, lock: &PoolLock) -> Result<(MetaDb, Superblock, bool)> {
    use crate::store::metadb::OpenError;
    let open_db = |read_only: bool| -> Result<MetaDb> {
        MetaDb::open(pool, read_only).map_err(|e| match e {
            // holding the holder lock, a store still open is its previous holder's, closing
            OpenError::Redb(redb::DatabaseError::DatabaseAlreadyOpen) if lock.is_held() => {
                PoolError::Closing { pool: pool.to_path_buf(), holder: lock.previous_holder() }.into()
            }
            OpenError::Redb(redb::DatabaseError::DatabaseAlreadyOpen) => {
                PoolError::AlreadyOpen { path: pool.to_path_buf() }.into()
            }
            OpenError::Redb(source) => PoolError::OpenStore { path: store_path(pool), source }.into(),
            OpenError::Pool(e) => e,
        })
    };
    let db = if read_only && crate::store::meta_files::form(pool).is_none() {
        MetaDb::Sealed(crate::store::meta_seal::load_in_memory(pool)?)
    } else {
        open_db(read_only)?
    };
    let sb = read_superblock(&db)?;
    check_superblock(pool, &sb)?;
    if read_only || !warn_read_only(pool, &sb) {
        return Ok((db, sb, read_only));
    }
    // and the store too: this build must not write a pool it does not fully understand
    drop(db); // the read-write handle holds redb's lock until dropped
    Ok((open_db(true)?, sb, true))
}

/// The file named in errors of the store of `pool`: its copy 0, or its plain file.
fn store_path(pool: &Path) -> PathBuf {
    match crate::store::meta_files::form(pool) {
        Some(crate::store::meta_files::Form::Checked { .. }) => pool.join(crate::store::meta_files::COPY_FILES[0]),
        _ => pool.join(META_FILE),
    }
}

/// The superblock row of a store.
fn read_superblock(db: &MetaDb) -> Result<Superblock> {
    let rx = db.begin_read()?;
    let t = rx.open_table(tables::SUPERBLOCK)?;
    let v = t.get(0u8)?.ok_or(PoolError::NoSuperblock)?;
    Ok(Superblock::decode(v.value())?)
}

/// Whether the pool uses read-only-compatible features this build does not know (logged):
/// then it is opened read-only.
fn warn_read_only(pool: &Path, sb: &Superblock) -> bool {
    let ro_unknown = sb.features.unknown_ro_compat();
    if ro_unknown != 0 {
        log::warn!(
            "pool {} uses read-only-compatible features this build does not know ({ro_unknown:#x}); opening read-only",
            pool.display()
        );
    }
    ro_unknown != 0
}

/// A superblock this build can use: its geometry in range, no unknown incompatible feature.
fn check_superblock(pool: &Path, sb: &Superblock) -> Result<()> {
    if !(sb.sector == 512 || sb.sector == 4096)
        || !recordsize_supported(u64::from(sb.recordsize))
        || !bundle_size_supported(u64::from(sb.bundle_size()), u64::from(sb.recordsize))
        || sb.max_inline > sb.recordsize
        || sb.device_count == 0
    {
        return Err(PoolError::CorruptSuperblock {
            path: pool.to_path_buf(),
            sector: sb.sector,
            recordsize: sb.recordsize,
            bundle_size: sb.bundle_size(),
            max_inline: sb.max_inline,
            devices: sb.device_count,
        }
        .into());
    }
    let unknown = sb.features.unknown_incompat();
    if unknown != 0 {
        return Err(PoolError::UnknownFeatures { path: pool.to_path_buf(), flags: unknown }.into());
    }
    Ok(())
}

/// What opening each device of a pool needs.
struct DeviceOpen<'a> {
    pool: &'a Path,
    sb: &'a Superblock,
    opts: &'a OpenOptions,
    injected: Option<&'a [Arc<dyn Device>]>,
    read_only: bool,
    granule: u64,
    /// panics armed for tests (fault.rs), shared by the engine and its device writers
    faults: Arc<crate::base::fault::Faults>,
    /// the object devices opened (for metadata backups)
    objects: std::cell::RefCell<Vec<Arc<squeezefs_object::ObjectDevice>>>,
}

type ReadTable<K, V> = redb::ReadOnlyTable<K, V>;

impl DeviceOpen<'_> {
    /// Device `i`: opened (or the injected object), its header checked against the pool,
    /// its write queue started, and its space image from the free-space map.
    fn open_device(
        &self,
        i: u32,
        dt: &ReadTable<u32, &'static [u8]>,
        ft: &ReadTable<&'static [u8], u64>,
    ) -> Result<(DevSlot, DevSpace)> {
        let sb = self.sb;
        let rec = {
            let v = dt.get(i)?.ok_or(PoolError::DeviceRecordMissing { index: i })?;
            DeviceRecord::decode(v.value())?
        };
        let path = self.path_of(i, &rec);
        let capacity = (rec.kind == DeviceKind::FixedFile).then_some(rec.capacity);
        let injected = self.injected.and_then(|v| v.get(i as usize));
        let host_path = (rec.kind == DeviceKind::GrowableFile && injected.is_none()).then(|| path.clone());
        let d: Arc<dyn Device> = match injected {
            Some(d) => d.clone(),
            None if rec.kind == DeviceKind::Object => {
                let spec = crate::engine::object_dev::spec_of(&path)?
                    .ok_or_else(|| PoolError::ObjectRecord { index: i, path: path.clone() })?;
                let d =
                    crate::engine::object_dev::open(self.pool, i as usize, &spec, &self.opts.object, self.read_only)?;
                self.objects.borrow_mut().push(d.clone());
                d
            }
            None => Arc::new(
                FileDevice::open_with(&path, &FileDeviceOptions { read_only: self.read_only, create: false, capacity })
                    .map_err(|source| PoolError::OpenPoolDevice { index: i, pool: self.pool.to_path_buf(), source })?,
            ),
        };
        let h = read_header(&*d).map_err(PoolError::Header)?;
        h.check(&path.display().to_string(), &PoolId(sb.pool_id), i).map_err(PoolError::Header)?;
        if h.sector_size != sb.sector {
            return Err(PoolError::SectorMismatch { path, device: h.sector_size, pool: sb.sector }.into());
        }
        let free = self.free_map(i, &rec, ft)?;
        let cap = match rec.kind {
            DeviceKind::GrowableFile => None,
            _ => d.capacity(),
        };
        // records and free ranges lie below the allocation end: a device ending before it
        // lost data, and new records placed past its end would fail their writes
        if let Some(c) = cap.filter(|&c| c < rec.alloc_end) {
            return Err(PoolError::DeviceShrank { path, len: c, alloc_end: rec.alloc_end }.into());
        }
        let image = DevSpace::new(DATA_START, rec.alloc_end, cap, free, u64::from(sb.sector), self.granule);
        let slot = DevSlot { queue: DevQueue::start(d.clone(), i as usize, self.faults.clone()), dev: d, host_path };
        Ok((slot, image))
    }

    /// Where device `i` is: the path given at open, else the one recorded at mkfs (relative
    /// to the pool directory).
    fn path_of(&self, i: u32, rec: &DeviceRecord) -> PathBuf {
        if let Some(p) = self.opts.devices.get(i as usize) {
            return p.clone();
        }
        use std::os::unix::ffi::OsStrExt;
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(&rec.path));
        if p.is_relative() && rec.kind != DeviceKind::Object {
            self.pool.join(p)
        } else {
            p
        }
    }

    /// Device `i`'s free ranges. A damaged row is left out (its space counts as allocated:
    /// never handed out) and left in the store, where fsck reports it.
    fn free_map(&self, i: u32, rec: &DeviceRecord, ft: &ReadTable<&'static [u8], u64>) -> Result<BTreeMap<u64, u64>> {
        let lo = keys::dev_offset(i, 0);
        let hi = keys::dev_offset(i, u64::MAX);
        let mut free = BTreeMap::new();
        for row in ft.range(&lo[..]..=&hi[..])? {
            let (k, v) = row?;
            let Some((_, off)) = keys::split_dev_offset(k.value()) else { continue };
            let len = v.value();
            if !crate::space::alloc::range_inside(off, len, DATA_START, rec.alloc_end) {
                log::warn!(
                    "{}: ignoring free-space row of device {i} at offset {off}, {len} bytes: outside \
                     its data area [{DATA_START}, {}) (the metadata store is damaged; run fsck)",
                    self.pool.display(),
                    rec.alloc_end
                );
                continue;
            }
            free.insert(off, len);
        }
        Ok(free)
    }
}

/// Whether files of this pool may have their own record size: the superblock has
/// `RECORDSIZES`, or (damage: fsck reports it) the `recordsizes` table holds rows anyway,
/// which the engine then honours rather than read those files at the pool's record size.
fn recordsizes_in_use(pool: &Path, rx: &redb::ReadTransaction, sb: &Superblock) -> Result<bool> {
    use redb::ReadableTableMetadata;
    if sb.features.incompat & Features::INCOMPAT_RECORDSIZES != 0 {
        return Ok(true);
    }
    let rows = match crate::store::snapshot::open_if_present(rx, tables::RECORDSIZES)? {
        Some(t) => t.len()?,
        None => 0,
    };
    if rows > 0 {
        log::warn!(
            "pool {}: {rows} files have a record size of their own but the superblock lacks the RECORDSIZES \
             feature (the metadata store is damaged; run fsck)",
            pool.display()
        );
    }
    Ok(rows > 0)
}

/// The next inode number and the inode count: the superblock's counter, unless the store
/// holds a larger number (a stale superblock).
fn inode_counter(rx: &redb::ReadTransaction, sb: &Superblock) -> Result<(u64, i64)> {
    use redb::ReadableTableMetadata;
    let t = rx.open_table(tables::INODES)?;
    let last = t.last()?.map(|(k, _)| k.value()).unwrap_or(0);
    // numbers are handed out below u64::MAX (metatx.rs); a damaged row numbered u64::MAX
    // leaves the counter exhausted (creates fail cleanly) and the pool open for fsck
    let after_last = last.saturating_add(1);
    Ok((sb.next_ino.max(after_last), t.len()? as i64))
}
