//! Creating and opening a pool: a directory holding the metadata store (`meta.redb`) and,
//! unless devices are named, one growable device file (`data.0`).

use crate::alloc::DevSpace;
use crate::devq::DevQueue;
use crate::error::{EngineError, Result};
use crate::inner::{DevSlot, Inner};
#[allow(unused_imports)]
use crate::metadb::MetaDb;
use crate::options::{
    MkfsOptions, OpenOptions, DEFAULT_MAX_INLINE, DEFAULT_RECORDSIZE, MAX_RECORDSIZE, MIN_RECORDSIZE,
};
use crate::pool_lock::{PoolLock, Refusal};
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

pub const META_FILE: &str = "meta.redb";
pub const DEFAULT_DEVICE_FILE: &str = "data.0";

/// The clock of every file timestamp: `CLOCK_REALTIME_COARSE`, the clock the kernel's
/// `current_time()` reads (the last timer tick, 1–10 ms steps), as ext4 and btrfs stamp
/// their inodes with.
///
/// Why not the precise clock: with the FUSE writeback cache the kernel keeps a regular
/// file's mtime/ctime itself and stamps them with `current_time()` on every write. When the
/// times the daemon handed out (CREATE, SETATTR) equal that tick, `file_update_time` finds
/// nothing to change and leaves the inode clean, so the next `fchown`/`fchmod`/close sends
/// no SETATTR to flush the times back: one round trip less per file a `tar xf` creates
/// (10 → 9, docs/benchmarks.md). A precise stamp always differed from the tick, and could
/// even be later than the kernel's next stamp of the same file, so mtime ran backwards.
pub fn now() -> Timestamp {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec to the pointer it is given; CLOCK_REALTIME_COARSE
    // exists on every Linux since 2.6.32, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    Timestamp { secs: ts.tv_sec, nanos: ts.tv_nsec as u32 }
}

fn pool_err(msg: String) -> EngineError {
    EngineError::Pool(msg)
}

fn validate(opts: &MkfsOptions) -> Result<(u32, u32)> {
    if let Some(s) = opts.sector {
        if s != 512 && s != 4096 {
            return Err(pool_err(format!("sector size {s} is not supported (accepted: 512 or 4096)")));
        }
    }
    let rs = opts.recordsize.unwrap_or(DEFAULT_RECORDSIZE);
    if !rs.is_power_of_two() || !(MIN_RECORDSIZE..=MAX_RECORDSIZE).contains(&rs) {
        return Err(pool_err(format!(
            "record size {rs} is not supported (accepted: a power of two from {MIN_RECORDSIZE} to {MAX_RECORDSIZE} bytes, e.g. 128K)"
        )));
    }
    let mi = opts.max_inline.unwrap_or(DEFAULT_MAX_INLINE);
    if mi > rs / 2 {
        return Err(pool_err(format!("max_inline {mi} exceeds half the record size ({} bytes)", rs / 2)));
    }
    Ok((rs, mi))
}

pub fn mkfs(pool: &Path, opts: &MkfsOptions, injected: Option<Vec<Arc<dyn Device>>>) -> Result<()> {
    let (recordsize, max_inline) = validate(opts)?;
    let meta = pool.join(META_FILE);
    if pool.exists() && !pool.is_dir() {
        return Err(pool_err(format!("{} exists and is not a directory; a pool is a directory", pool.display())));
    }
    if meta.exists() && !opts.force {
        return Err(pool_err(format!(
            "{} already holds a squeezefs pool; use --force to overwrite it",
            pool.display()
        )));
    }
    std::fs::create_dir_all(pool).map_err(|e| pool_err(format!("cannot create {}: {e}", pool.display())))?;
    let mut devs: Vec<(Arc<dyn Device>, PathBuf, DeviceKind)> = Vec::new();
    if let Some(list) = injected {
        for d in list {
            if !opts.force && is_nonempty(&*d).map_err(|e| pool_err(e.to_string()))? {
                return Err(pool_err(format!("device {} is not empty; use --force to overwrite it", d.name())));
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
        if own && p.exists() {
            if !opts.force {
                return Err(pool_err(format!("{} exists; use --force to overwrite it", p.display())));
            }
            std::fs::remove_file(p).map_err(|e| pool_err(format!("cannot remove {}: {e}", p.display())))?;
        }
        let capacity = if own { opts.device_capacity } else { None };
        let d = FileDevice::open_with(p, &FileDeviceOptions { read_only: false, create: true, capacity })
            .map_err(|e| pool_err(format!("cannot open device {}: {e}", p.display())))?;
        if !own && !opts.force && is_nonempty(&d).map_err(|e| pool_err(e.to_string()))? {
            return Err(pool_err(format!(
                "device {} is not empty (it may hold a filesystem or another pool); use --force to overwrite it",
                p.display()
            )));
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
    // --force, not destroyed by a mistyped --device (tests/checking_tools.rs::
    // a_failed_mkfs_force_does_not_destroy_the_existing_pool)
    if meta.exists() {
        std::fs::remove_file(&meta).map_err(|e| pool_err(format!("cannot remove {}: {e}", meta.display())))?;
    }
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
        write_header(&**d, &h).map_err(|e| pool_err(e.to_string()))?;
    }
    let db = redb::Database::create(&meta)?;
    let tx = db.begin_write()?;
    {
        let sb = Superblock {
            features: Features::current(),
            pool_id: pool_id.0,
            sector,
            recordsize,
            max_inline,
            device_count: count,
            next_ino: ROOT_INO + 1,
            txg: 0,
            created: now().secs,
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
        // pools made by this build have INCOMPAT_BUNDLES
        tx.open_table(tables::BUNDLES)?;
    }
    tx.commit()?;
    drop(db);
    // the new names (meta.redb, the device file, the pool directory itself) are durable only
    // once their directories are synced: without this a power cut right after mkfs could
    // leave a pool directory with no meta.redb although mkfs said it succeeded
    let parent = pool.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
    for dir in [Some(pool), parent].into_iter().flatten() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| pool_err(format!("cannot sync directory {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// The file a rebuild of the metadata store writes before it replaces `meta.redb`.
const REBUILD_FILE: &str = "meta.redb.rebuild";

/// Rewrite the metadata store of a closed pool compactly; returns the file's length before
/// and after. Each txg commit writes the B-tree pages it changes to free pages of the
/// file, and rows inserted in key order, or grown in place, leave leaves about half full; a
/// pool filled by many commits (`mkfs --rootdir`) holds both kinds of waste, which redb
/// reuses for later commits but never gives back.
///
/// Every table is copied in key order, in one transaction, into a new store
/// (`meta.redb.rebuild`), which is made durable and then renamed over `meta.redb`: a crash
/// before the rename leaves the old store (and a stray file the next rebuild replaces), one
/// after it the new one. A store holding a table this build does not know is compacted in
/// place instead (redb `Database::compact`: free pages cut off, leaves as they are). Takes
/// the pool's holder lock: refused while the pool is open.
pub fn compact_meta(pool: &Path) -> Result<(u64, u64)> {
    let meta = pool.join(META_FILE);
    let _lock = PoolLock::acquire(pool, false).map_err(|r| match r {
        Refusal::InUse(holder) => EngineError::PoolInUse { pool: pool.to_path_buf(), holder },
        Refusal::Closing(holder) => EngineError::PoolClosing { pool: pool.to_path_buf(), holder },
    })?;
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let before = len(&meta);
    let fail = |what: &str, e: &dyn std::fmt::Display| pool_err(format!("{what} {}: {e}", meta.display()));
    let mut db = redb::Database::open(&meta).map_err(|e| fail("cannot open the metadata store", &e))?;
    if !rebuild_meta(&db, &pool.join(REBUILD_FILE))? {
        while db.compact().map_err(|e| fail("compacting the metadata store", &e))? {}
        drop(db);
        return Ok((before, len(&meta)));
    }
    drop(db);
    std::fs::rename(pool.join(REBUILD_FILE), &meta).map_err(|e| fail("cannot replace", &e))?;
    std::fs::File::open(pool)
        .and_then(|d| d.sync_all())
        .map_err(|e| pool_err(format!("cannot sync directory {}: {e}", pool.display())))?;
    Ok((before, len(&meta)))
}

/// Copy every table of `db` into a new store at `to`, durably; `false` (and nothing
/// written) when `db` holds a table this build does not know.
fn rebuild_meta(db: &redb::Database, to: &Path) -> Result<bool> {
    use redb::{ReadableDatabase, TableHandle};
    let known = [
        tables::SUPERBLOCK.name(),
        tables::DEVICES.name(),
        tables::INODES.name(),
        tables::DIRENTS.name(),
        tables::DIR_COOKIES.name(),
        tables::DIR_NEXT_COOKIE.name(),
        tables::XATTRS.name(),
        tables::SYMLINKS.name(),
        tables::ORPHANS.name(),
        tables::EXTENTS.name(),
        tables::FREE_SPACE.name(),
        tables::BUNDLES.name(),
    ];
    let rx = db.begin_read()?;
    let present: Vec<String> = rx.list_tables()?.map(|t| t.name().to_string()).collect();
    if present.iter().any(|n| !known.contains(&n.as_str())) || rx.list_multimap_tables()?.next().is_some() {
        return Ok(false);
    }
    if to.exists() {
        std::fs::remove_file(to).map_err(|e| pool_err(format!("cannot remove {}: {e}", to.display())))?;
    }
    let out = redb::Database::create(to)?;
    let tx = out.begin_write()?;
    macro_rules! copy {
        ($def:expr) => {
            if present.iter().any(|n| n == $def.name()) {
                let from = rx.open_table($def)?;
                let mut into = tx.open_table($def)?;
                for row in from.iter()? {
                    let (k, v) = row?;
                    into.insert(k.value(), v.value())?;
                }
            }
        };
    }
    copy!(tables::SUPERBLOCK);
    copy!(tables::DEVICES);
    copy!(tables::INODES);
    copy!(tables::DIRENTS);
    copy!(tables::DIR_COOKIES);
    copy!(tables::DIR_NEXT_COOKIE);
    copy!(tables::XATTRS);
    copy!(tables::SYMLINKS);
    copy!(tables::ORPHANS);
    copy!(tables::EXTENTS);
    copy!(tables::FREE_SPACE);
    copy!(tables::BUNDLES);
    tx.commit()?;
    drop(rx);
    // the copy's own transaction leaves some pages free behind it
    let mut out = out;
    while out.compact().map_err(|e| pool_err(format!("compacting {}: {e}", to.display())))? {}
    Ok(true)
}

pub fn open(pool: &Path, opts: &OpenOptions, injected: Option<Vec<Arc<dyn Device>>>) -> Result<(Arc<Inner>, PoolLock)> {
    let meta = pool.join(META_FILE);
    if !meta.exists() {
        return Err(pool_err(format!(
            "{} is not a squeezefs pool (no {META_FILE}); create one with `squeezefs mkfs`",
            pool.display()
        )));
    }
    let lock = PoolLock::acquire(pool, opts.read_only).map_err(|r| match r {
        Refusal::InUse(holder) => EngineError::PoolInUse { pool: pool.to_path_buf(), holder },
        Refusal::Closing(holder) => EngineError::PoolClosing { pool: pool.to_path_buf(), holder },
    })?;
    let open_db = |read_only: bool| {
        MetaDb::open(&meta, read_only).map_err(|e| match e {
            // holding the holder lock, a store still open is its previous holder's, closing
            redb::DatabaseError::DatabaseAlreadyOpen if lock.is_held() => {
                EngineError::PoolClosing { pool: pool.to_path_buf(), holder: lock.previous_holder() }
            }
            redb::DatabaseError::DatabaseAlreadyOpen => {
                pool_err(format!("pool {} is already open (mounted or in use by another command)", pool.display()))
            }
            e => pool_err(format!("cannot open the metadata store {}: {e}", meta.display())),
        })
    };
    let mut db = open_db(opts.read_only)?;
    lock.claim();
    let mut rx = db.begin_read()?;
    let sb = {
        let t = rx.open_table(tables::SUPERBLOCK)?;
        let v = t.get(0u8)?.ok_or_else(|| pool_err("the pool has no superblock".into()))?;
        Superblock::decode(v.value())?
    };
    if !(sb.sector == 512 || sb.sector == 4096)
        || !sb.recordsize.is_power_of_two()
        || !(MIN_RECORDSIZE..=MAX_RECORDSIZE).contains(&sb.recordsize)
        || sb.max_inline > sb.recordsize
        || sb.device_count == 0
    {
        return Err(pool_err(format!(
            "the superblock of {} is corrupt: sector {}, record size {}, max_inline {}, {} devices",
            pool.display(),
            sb.sector,
            sb.recordsize,
            sb.max_inline,
            sb.device_count
        )));
    }
    let unknown = sb.features.unknown_incompat();
    if unknown != 0 {
        return Err(pool_err(format!(
            "pool {} uses features this build does not support (incompat flags {unknown:#x}); upgrade squeezefs",
            pool.display()
        )));
    }
    let mut read_only = opts.read_only;
    let ro_unknown = sb.features.unknown_ro_compat();
    if ro_unknown != 0 && !read_only {
        log::warn!(
            "pool {} uses read-only-compatible features this build does not know ({ro_unknown:#x}); opening read-only",
            pool.display()
        );
        read_only = true;
        // and the store too: this build must not write a pool it does not fully understand
        drop(rx);
        drop(db); // the read-write handle holds redb's lock until dropped
        db = open_db(true)?;
        rx = db.begin_read()?;
    }
    let pool_id = PoolId(sb.pool_id);
    // pools made before PACKED_BYTES keep packing at the sector: their free map and extent
    // footprints are in whole sectors
    let granule = if sb.features.incompat & Features::INCOMPAT_PACKED_BYTES != 0 { 1 } else { u64::from(sb.sector) };
    let mut devs = Vec::new();
    let mut space = Vec::new();
    let mut host_paths = Vec::new();
    {
        let dt = rx.open_table(tables::DEVICES)?;
        let ft = rx.open_table(tables::FREE_SPACE)?;
        for i in 0..sb.device_count {
            let rec = {
                let v = dt.get(i)?.ok_or_else(|| pool_err(format!("device record {i} missing")))?;
                DeviceRecord::decode(v.value())?
            };
            let path = match opts.devices.get(i as usize) {
                Some(p) => p.clone(),
                None => {
                    use std::os::unix::ffi::OsStrExt;
                    let p = PathBuf::from(std::ffi::OsStr::from_bytes(&rec.path));
                    if p.is_relative() {
                        pool.join(p)
                    } else {
                        p
                    }
                }
            };
            let capacity = (rec.kind == DeviceKind::FixedFile).then_some(rec.capacity);
            let injected_dev = injected.as_ref().and_then(|v| v.get(i as usize));
            host_paths.push((rec.kind == DeviceKind::GrowableFile && injected_dev.is_none()).then(|| path.clone()));
            let d: Arc<dyn Device> = match injected_dev {
                Some(d) => d.clone(),
                None => Arc::new(
                    FileDevice::open_with(&path, &FileDeviceOptions { read_only, create: false, capacity })
                        .map_err(|e| pool_err(format!("device #{i} of pool {}: {e}", pool.display())))?,
                ),
            };
            let h = read_header(&*d).map_err(|e| pool_err(e.to_string()))?;
            h.check(&path.display().to_string(), &pool_id, i).map_err(|e| pool_err(e.to_string()))?;
            if h.sector_size != sb.sector {
                return Err(pool_err(format!(
                    "{} has sector size {} but the pool uses {}",
                    path.display(),
                    h.sector_size,
                    sb.sector
                )));
            }
            let lo = keys::dev_offset(i, 0);
            let hi = keys::dev_offset(i, u64::MAX);
            let mut free = BTreeMap::new();
            for row in ft.range(&lo[..]..=&hi[..])? {
                let (k, v) = row?;
                if let Some((_, off)) = keys::split_dev_offset(k.value()) {
                    let len = v.value();
                    // a damaged row is left out of the maps (its space counts as allocated:
                    // never handed out) and left in the store, where fsck reports it
                    if !crate::alloc::range_inside(off, len, DATA_START, rec.alloc_end) {
                        log::warn!(
                            "{}: ignoring free-space row of device {i} at offset {off}, {len} bytes: outside \
                             its data area [{DATA_START}, {}) (the metadata store is damaged; run fsck)",
                            pool.display(),
                            rec.alloc_end
                        );
                        continue;
                    }
                    free.insert(off, len);
                }
            }
            let cap = match rec.kind {
                DeviceKind::GrowableFile => None,
                _ => d.capacity(),
            };
            // records and free ranges lie below the allocation end: a device ending before
            // it lost data, and new records placed past its end would fail their writes
            if let Some(c) = cap.filter(|&c| c < rec.alloc_end) {
                return Err(pool_err(format!(
                    "{} is {c} bytes but the pool keeps data on it up to byte {}: the device \
                     shrank, or it is not the device the pool was made with",
                    path.display(),
                    rec.alloc_end
                )));
            }
            space.push(DevSpace::new(DATA_START, rec.alloc_end, cap, free, u64::from(sb.sector), granule));
            devs.push(d);
        }
    }
    let next_bundle = crate::bundle::next_id(&rx)?;
    let (next_ino, inode_rows) = {
        use redb::ReadableTableMetadata;
        let t = rx.open_table(tables::INODES)?;
        let last = t.last()?.map(|(k, _)| k.value()).unwrap_or(0);
        // numbers are handed out below u64::MAX (metatx.rs); a damaged row numbered u64::MAX
        // leaves the counter exhausted (creates fail cleanly) and the pool open for fsck
        let after_last = last.saturating_add(1);
        (sb.next_ino.max(after_last), t.len()? as i64)
    };
    drop(rx);
    let faults = Arc::new(crate::fault::Faults::default());
    let slots = devs
        .into_iter()
        .enumerate()
        .zip(host_paths)
        .map(|((i, dev), host_path)| DevSlot { queue: DevQueue::start(dev.clone(), i, faults.clone()), dev, host_path })
        .collect();
    let inner = Inner::new(
        pool.to_path_buf(),
        db,
        read_only,
        u64::from(sb.sector),
        granule,
        u64::from(sb.recordsize),
        u64::from(sb.max_inline),
        slots,
        space,
        opts.clone(),
        sb.txg,
        next_ino,
        faults,
    )
    .into_arc();
    inner.ns.set_committed_inodes(inode_rows);
    // only pools made with bundles get them: older builds must still open the others
    let bundles = sb.features.incompat & Features::INCOMPAT_BUNDLES != 0;
    inner.bundles.init(bundles && opts.bundle_small_records && !read_only, next_bundle);
    let compact = sb.features.incompat & Features::INCOMPAT_COMPACT_ROWS != 0;
    inner.compact_rows.store(compact, std::sync::atomic::Ordering::Relaxed);
    inner.refresh_host_free();
    crate::early_place::refresh_room(&inner, false);
    Ok((inner, lock))
}
