//! fsck: consistency of the committed pool.
//!
//! * space: every device extent lies in the data area below the allocation end, no two
//!   extents overlap, no extent overlaps a free range, free ranges are disjoint and merged
//!   (never touching), every allocated byte belongs to an extent (no leak); in pools without
//!   byte packing every extent starts on a sector; records sharing a sector were written by
//!   one txg (alloc.rs: a torn write of a sector may only hurt an uncommitted run);
//! * devices: the superblock, the `devices` table and every device header agree on the
//!   number of devices; every device is long enough to hold the bytes its extents point to
//!   (a growable device file truncated below its allocation end has lost them; open cannot
//!   see that, only fixed devices have a recorded size);
//! * extents: belong to an existing inode and lie below its size, each record within the
//!   file's record size (its `recordsizes` row, else the superblock's); the inode's
//!   `blocks_bytes` equals the sum of its extents; no file is larger than
//!   [`MAX_FILE_SIZE`];
//! * record sizes: each `recordsizes` row names an existing regular file and a supported
//!   size, and the superblock has `INCOMPAT_RECORDSIZES` when any row exists (without it an
//!   older build would read those files at the pool's record size);
//! * bundles: every bundled record names an existing bundle and lies inside its decoded
//!   bytes, no two records of a bundle overlap, a bundle's member count equals the records
//!   pointing into it (a bundle nobody points to is a leak), it is at most the pool's
//!   bundle size, stored and decoded, and its device range takes part in the space checks
//!   above like a record's;
//! * shared records: the extent rows pointing to each device record equal its reference
//!   count (check/refs.rs), and the space checks count a shared record once;
//! * namespace: dirents point to live inodes of the right kind, each dirent has its cookie
//!   row and vice versa, link counts match the dirents (directories: 2 + subdirectories),
//!   every inode is reachable or an orphan, symlinks have targets.

use crate::base::error::Result;
use crate::base::units::extent_footprint;
use crate::base::units::{record_len_in_file, records_for_size, MAX_FILE_SIZE};
use crate::engine::inner::Inner;
use redb::ReadableTable;
use serde::Serialize;
use squeezefs_device::DATA_START;
use squeezefs_meta::encode::{decode_cookie_entry, decode_dirent, decode_inode};
use squeezefs_meta::{
    keys, tables, DeviceRecord, ExtentPtr, Features, FileKind, Ino, InodeAttr, StoredRecord, Superblock, ROOT_INO,
};
use std::collections::{BTreeMap, HashMap, HashSet};

#[derive(Clone, Debug, Default, Serialize)]
pub struct FsckReport {
    pub inodes: u64,
    pub directories: u64,
    pub extents: u64,
    /// bundles (records of several files stored together)
    pub bundles: u64,
    /// device records more than one extent row points to (shared copies), and their
    /// footprint bytes, counted once each
    pub shared_records: u64,
    pub shared_bytes: u64,
    pub allocated_bytes: u64,
    pub free_range_bytes: u64,
    /// orphans waiting for reclaim at mount (not an error)
    pub orphans: Vec<Ino>,
    pub problems: Vec<String>,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Check the committed pool (see the block comment); a writable pool first commits what it
/// holds, since the persisted space map matches the extents at commit points.
pub fn fsck(inner: &Inner) -> Result<FsckReport> {
    if !inner.read_only && inner.txg.halt_cause().is_none() {
        inner.txg.sync_and_wait(&inner.dirty)?;
    }
    let mut r = FsckReport::default();
    let rx = inner.db.begin_read()?;
    let inodes = load_inodes(&rx, &mut r)?;
    check_device_count(inner, &rx, &mut r)?;
    if !inodes.get(&ROOT_INO).is_some_and(|a| a.kind == FileKind::Dir) {
        r.problems.push("root inode 1 is missing or not a directory".into());
    }
    let names = check_names(&rx, &inodes, &mut r)?;
    check_links(&rx, &inodes, &names, &mut r)?;
    let sizes = check_record_sizes(&rx, &inodes, &mut r)?;
    let (mut exts, blocks, bundled) = check_extents(inner, &rx, &inodes, &sizes, &mut r)?;
    check_references(&rx, &mut exts, &mut r)?;
    check_blocks(&inodes, &blocks, &mut r);
    check_bundles(inner, &rx, bundled, &mut exts, &mut r)?;
    check_space(inner, &rx, &mut exts, &mut r)?;
    Ok(r)
}

/// Every inode record that decodes.
fn load_inodes(rx: &redb::ReadTransaction, r: &mut FsckReport) -> Result<BTreeMap<Ino, InodeAttr>> {
    let mut inodes: BTreeMap<Ino, InodeAttr> = BTreeMap::new();
    for row in rx.open_table(tables::INODES)?.iter()? {
        let (k, v) = row?;
        match decode_inode(k.value(), v.value()) {
            Ok(a) => {
                inodes.insert(k.value(), a);
            }
            Err(e) => r.problems.push(format!("inode {}: {e}", k.value())),
        }
    }
    r.inodes = inodes.len() as u64;
    for (ino, a) in &inodes {
        if a.size > MAX_FILE_SIZE {
            r.problems
                .push(format!("inode {ino}: size {} is above the largest file size ({MAX_FILE_SIZE} bytes)", a.size));
        }
    }
    Ok(inodes)
}

/// Names counted per inode (`links`) and subdirectories per directory, from the dirents.
struct Names {
    links: HashMap<Ino, u32>,
    subdirs: HashMap<Ino, u32>,
}

/// Dirents point to live inodes of the right kind; each dirent has its cookie row and vice
/// versa.
fn check_names(rx: &redb::ReadTransaction, inodes: &BTreeMap<Ino, InodeAttr>, r: &mut FsckReport) -> Result<Names> {
    let mut links: HashMap<Ino, u32> = HashMap::new();
    let mut subdirs: HashMap<Ino, u32> = HashMap::new();
    let mut cookies_seen: HashSet<(Ino, u64)> = HashSet::new();
    for row in rx.open_table(tables::DIRENTS)?.iter()? {
        let (k, v) = row?;
        let Some((dir, name)) = keys::split_ino_name(k.value()) else {
            r.problems.push("dirent with a short key".into());
            continue;
        };
        let name_s = String::from_utf8_lossy(name).into_owned();
        let (ino, kind, cookie) = match decode_dirent(v.value()) {
            Ok(x) => x,
            Err(e) => {
                r.problems.push(format!("dirent {dir}/{name_s}: {e}"));
                continue;
            }
        };
        cookies_seen.insert((dir, cookie));
        match inodes.get(&dir) {
            Some(d) if d.kind == FileKind::Dir => {}
            _ => r.problems.push(format!("dirent {name_s:?} lives in {dir}, which is not a directory inode")),
        }
        match inodes.get(&ino) {
            None => r.problems.push(format!("dirent {dir}/{name_s:?} points to missing inode {ino}")),
            Some(a) if a.kind != kind => {
                r.problems.push(format!("dirent {dir}/{name_s:?} says {kind:?} but inode {ino} is {:?}", a.kind))
            }
            _ => {}
        }
        *links.entry(ino).or_default() += 1;
        if kind == FileKind::Dir {
            *subdirs.entry(dir).or_default() += 1;
        }
    }
    for row in rx.open_table(tables::DIR_COOKIES)?.iter()? {
        let (k, v) = row?;
        let Some((dir, cookie)) = keys::unpair(k.value()) else {
            r.problems.push("directory cookie row with a bad key".into());
            continue;
        };
        if !cookies_seen.remove(&(dir, cookie)) {
            let name =
                decode_cookie_entry(v.value()).map(|x| String::from_utf8_lossy(&x.2).into_owned()).unwrap_or_default();
            r.problems.push(format!("directory {dir} cookie {cookie} ({name:?}) has no name entry"));
        }
    }
    for (dir, cookie) in cookies_seen {
        r.problems.push(format!("directory {dir}: an entry's cookie {cookie} has no listing row"));
    }
    Ok(Names { links, subdirs })
}

/// Link counts match the names (directories: 2 + subdirectories); every inode is reachable
/// or an orphan; symlinks have targets.
fn check_links(
    rx: &redb::ReadTransaction,
    inodes: &BTreeMap<Ino, InodeAttr>,
    names: &Names,
    r: &mut FsckReport,
) -> Result<()> {
    let (links, subdirs) = (&names.links, &names.subdirs);
    let mut orphan_set = HashSet::new();
    for row in rx.open_table(tables::ORPHANS)?.iter()? {
        let ino = row?.0.value();
        if !inodes.contains_key(&ino) {
            r.problems.push(format!("orphan list names missing inode {ino}"));
        } else {
            orphan_set.insert(ino);
            r.orphans.push(ino);
        }
    }
    let symlinks = rx.open_table(tables::SYMLINKS)?;
    for (ino, a) in inodes {
        let n = links.get(ino).copied().unwrap_or(0);
        if a.kind == FileKind::Dir {
            r.directories += 1;
            // an rmdir'ed directory the kernel still referenced stays as an orphan (no name,
            // link count 0) until its last reference goes, or until the next open after a
            // crash
            if n == 0 && a.nlink == 0 && orphan_set.contains(ino) {
                continue;
            }
            let parent_link = u32::from(*ino != ROOT_INO);
            if n != parent_link && *ino != ROOT_INO {
                r.problems.push(format!("directory {ino} has {n} names (expected 1)"));
            }
            let expected = 2 + subdirs.get(ino).copied().unwrap_or(0);
            if a.nlink != expected {
                r.problems.push(format!("directory {ino}: link count {} but {expected} expected", a.nlink));
            }
        } else if a.nlink != n && !(n == 0 && orphan_set.contains(ino)) {
            r.problems.push(format!("inode {ino}: link count {} but {n} names point to it", a.nlink));
        }
        if n == 0 && *ino != ROOT_INO && !orphan_set.contains(ino) {
            r.problems.push(format!("inode {ino} is unreachable (no name, not an orphan)"));
        }
        if a.kind == FileKind::Symlink && symlinks.get(*ino)?.is_none() {
            r.problems.push(format!("symlink {ino} has no target"));
        }
    }
    Ok(())
}

/// The files' own record sizes (rows that check out); rows naming no regular file, sizes
/// out of range and rows in a pool without `INCOMPAT_RECORDSIZES` are problems.
fn check_record_sizes(
    rx: &redb::ReadTransaction,
    inodes: &BTreeMap<Ino, InodeAttr>,
    r: &mut FsckReport,
) -> Result<HashMap<Ino, u64>> {
    let mut sizes = HashMap::new();
    let Some(t) = crate::store::snapshot::open_if_present(rx, tables::RECORDSIZES)? else { return Ok(sizes) };
    for row in t.iter()? {
        let (k, v) = row?;
        let (ino, bytes) = (k.value(), u64::from(v.value()));
        match inodes.get(&ino) {
            None => r.problems.push(format!("record size {bytes} of missing inode {ino}")),
            Some(a) if a.kind != FileKind::File => {
                r.problems.push(format!("inode {ino} is a {:?}, yet has a record size ({bytes})", a.kind))
            }
            Some(_) if !crate::base::options::recordsize_supported(bytes) => {
                r.problems.push(format!("inode {ino}: record size {bytes} is not a power of two from 4096 to 1048576"))
            }
            Some(_) => {
                sizes.insert(ino, bytes);
            }
        }
    }
    let flagged = match rx.open_table(tables::SUPERBLOCK)?.get(0u8)? {
        Some(v) => Superblock::decode(v.value())?.features.incompat & Features::INCOMPAT_RECORDSIZES != 0,
        None => true, // reported by check_device_count
    };
    use redb::ReadableTableMetadata;
    if !flagged && t.len()? > 0 {
        r.problems.push(format!(
            "{} files have a record size of their own but the superblock lacks the RECORDSIZES feature",
            t.len()?
        ));
    }
    Ok(sizes)
}

/// What `check_extents` found on the devices, indexed by device.
struct DeviceExtents {
    /// per device: (offset, footprint, owner, birth txg) of every device extent and bundle
    per_dev: Vec<Vec<(u64, u64, Owner, u64)>>,
    /// per device: the end of the stored bytes that reach furthest, and whose they are
    reach: Vec<Option<(u64, Ino)>>,
}

/// Per bundle id: (offset in the bundle, length, inode, record index) of the records
/// pointing into it.
type BundleRefs = BTreeMap<u64, Vec<(u64, u64, Ino, u64)>>;

/// Extents belong to an existing inode, lie below its size, within its record size
/// (`sizes`, else the pool's) and on a sector in pools without byte packing; returns the
/// device extents, the bytes each inode's extents occupy, and the records lying in bundles
/// (a bundle itself is bounded by the pool's bundle size, `check_bundles`).
fn check_extents(
    inner: &Inner,
    rx: &redb::ReadTransaction,
    inodes: &BTreeMap<Ino, InodeAttr>,
    sizes: &HashMap<Ino, u64>,
    r: &mut FsckReport,
) -> Result<(DeviceExtents, HashMap<Ino, u64>, BundleRefs)> {
    let mut per_dev: Vec<Vec<(u64, u64, Owner, u64)>> = vec![Vec::new(); inner.space.devs().len()];
    let mut bundled = BundleRefs::new();
    // per device: the end of the stored bytes that reach furthest, and whose they are
    let mut reach: Vec<Option<(u64, Ino)>> = vec![None; inner.space.devs().len()];
    let mut blocks: HashMap<Ino, u64> = HashMap::new();
    for row in rx.open_table(tables::EXTENTS)?.iter()? {
        let (k, v) = row?;
        let Some((ino, idx)) = keys::unpair(k.value()) else {
            r.problems.push("extent with a bad key".into());
            continue;
        };
        let e = match ExtentPtr::decode(v.value()) {
            Ok(e) => e,
            Err(err) => {
                r.problems.push(format!("extent of inode {ino} record {idx}: {err}"));
                continue;
            }
        };
        r.extents += 1;
        match inodes.get(&ino) {
            None => r.problems.push(format!("extent of missing inode {ino} (record {idx})")),
            Some(a) => {
                let rs = sizes.get(&ino).copied().unwrap_or(inner.recordsize);
                if idx >= records_for_size(a.size, rs) {
                    r.problems.push(format!(
                        "inode {ino}: record {idx} lies beyond its size {} (records of {rs} bytes)",
                        a.size
                    ));
                } else if u64::from(e.logical) > record_len_in_file(idx, a.size, rs) {
                    r.problems.push(format!(
                        "inode {ino}: record {idx} holds {} bytes, past the end of its record of {rs} bytes or of the file (size {})",
                        e.logical, a.size
                    ));
                } else if e.psize() > rs {
                    r.problems.push(format!(
                        "inode {ino}: record {idx} stores {} bytes, more than its record size {rs}",
                        e.psize()
                    ));
                }
            }
        }
        *blocks.entry(ino).or_default() += extent_footprint(&e, inner.granule);
        if let StoredRecord::Bundled(s) = e.stored {
            bundled.entry(s.bundle).or_default().push((u64::from(s.offset), u64::from(e.logical), ino, idx));
        }
        if let StoredRecord::Device(d) = e.stored {
            if inner.granule > 1 && d.offset % inner.granule != 0 {
                r.problems.push(format!(
                    "inode {ino} record {idx}: offset {} on device {} is not on a {}-byte sector (this pool does not pack records)",
                    d.offset, d.dev, inner.granule
                ));
            }
            if let (Some(end), Some(slot)) = (d.offset.checked_add(u64::from(d.psize)), reach.get_mut(d.dev as usize)) {
                if slot.is_none_or(|(e, _)| end > e) {
                    *slot = Some((end, ino));
                }
            }
            match per_dev.get_mut(d.dev as usize) {
                Some(v) => v.push((
                    d.offset,
                    crate::base::units::granule_bytes(u64::from(d.psize), inner.granule),
                    Owner::Inode(ino),
                    e.birth,
                )),
                None => r.problems.push(format!("inode {ino} record {idx} points to device {}", d.dev)),
            }
        }
    }
    Ok((DeviceExtents { per_dev, reach }, blocks, bundled))
}

/// References of shared records against the `refcounts` table (check/refs.rs); `exts` is
/// left with one entry per stored record.
fn check_references(rx: &redb::ReadTransaction, exts: &mut DeviceExtents, r: &mut FsckReport) -> Result<()> {
    let rows = crate::store::refcounts::all(rx)?;
    let incompat = match rx.open_table(tables::SUPERBLOCK)?.get(0u8)? {
        Some(v) => Superblock::decode(v.value())?.features.incompat,
        None => 0, // reported by check_device_count
    };
    let owner_ino = |o: Owner| match o {
        Owner::Inode(i) => i,
        Owner::Bundle(_) => 0,
    };
    let per_dev = std::mem::take(&mut exts.per_dev)
        .into_iter()
        .map(|v| v.into_iter().map(|(off, len, o, birth)| (off, len, owner_ino(o), birth)).collect())
        .collect();
    let (unique, totals) = crate::check::refs::check(per_dev, rows, incompat, &mut r.problems);
    exts.per_dev = unique
        .into_iter()
        .map(|v| v.into_iter().map(|(off, len, ino, birth)| (off, len, Owner::Inode(ino), birth)).collect())
        .collect();
    r.shared_records = totals.shared_records;
    r.shared_bytes = totals.shared_bytes;
    Ok(())
}

/// Each inode's `blocks_bytes` equals the bytes of its extents.
fn check_blocks(inodes: &BTreeMap<Ino, InodeAttr>, blocks: &HashMap<Ino, u64>, r: &mut FsckReport) {
    for (ino, a) in inodes {
        let b = blocks.get(ino).copied().unwrap_or(0);
        if a.blocks_bytes != b {
            r.problems.push(format!("inode {ino}: blocks_bytes {} but its extents occupy {b}", a.blocks_bytes));
        }
    }
}

/// Per device: extents and free ranges lie in the data area below the allocation end,
/// never overlap, leave no byte unaccounted (no leak); free ranges are merged; records of
/// different txgs never share a sector.
fn check_space(
    inner: &Inner,
    rx: &redb::ReadTransaction,
    exts_of: &mut DeviceExtents,
    r: &mut FsckReport,
) -> Result<()> {
    let ft = rx.open_table(tables::FREE_SPACE)?;
    let dt = rx.open_table(tables::DEVICES)?;
    for (dev, (exts, reach)) in exts_of.per_dev.iter_mut().zip(&exts_of.reach).enumerate() {
        let rec = match dt.get(dev as u32)? {
            Some(v) => DeviceRecord::decode(v.value())?,
            None => {
                r.problems.push(format!("device record {dev} missing"));
                continue;
            }
        };
        let end = rec.alloc_end;
        let slot = &inner.space.devs()[dev];
        let len = slot.dev.len();
        if let Some((data_end, ino)) = (*reach).filter(|&(e, _)| e > len) {
            r.problems.push(format!(
                "device {dev} ({}) is {len} bytes, but the pool keeps data on it up to byte {data_end} (inode \
                 {ino}; allocation end {end}): the device was truncated below its allocation end, and the \
                 records past byte {len} are lost",
                slot.dev.name()
            ));
        }
        let lo = keys::dev_offset(dev as u32, 0);
        let hi = keys::dev_offset(dev as u32, u64::MAX);
        // (offset, length, what, birth txg of an extent / None for a free range)
        let mut spans: Vec<(u64, u64, String, Option<u64>)> = Vec::new();
        for row in ft.range(&lo[..]..=&hi[..])? {
            let (k, v) = row?;
            let Some((_, off)) = keys::split_dev_offset(k.value()) else { continue };
            r.free_range_bytes = r.free_range_bytes.saturating_add(v.value());
            spans.push((off, v.value(), "free range".to_string(), None));
        }
        for (off, len, owner, birth) in exts.iter() {
            r.allocated_bytes = r.allocated_bytes.saturating_add(*len);
            spans.push((*off, *len, owner.to_string(), Some(*birth)));
        }
        spans.sort_by_key(|s| s.0);
        let sector = inner.sector.max(1);
        let mut frees: Vec<(u64, u64)> = spans.iter().filter(|s| s.3.is_none()).map(|s| (s.0, s.1)).collect();
        frees.sort_unstable();
        for w in frees.windows(2) {
            if w[0].0.checked_add(w[0].1) == Some(w[1].0) {
                r.problems.push(format!("device {dev}: free ranges meet at {} without being merged into one", w[1].0));
            }
        }
        let mut recs: Vec<(u64, u64, u64)> = exts.iter().map(|&(off, len, _, birth)| (off, len, birth)).collect();
        recs.sort_unstable();
        for w in recs.windows(2) {
            let ((a_off, a_len, a_birth), (b_off, _, b_birth)) = (w[0], w[1]);
            let Some(a_end) = a_off.checked_add(a_len) else { continue };
            if a_birth != b_birth && a_end > a_off && (a_end - 1) / sector == b_off / sector {
                r.problems.push(format!(
                    "device {dev}: sector {} holds records of txg {a_birth} and txg {b_birth} (only one txg's records may share a sector)",
                    b_off / sector
                ));
            }
        }
        let mut cursor = DATA_START;
        let mut prev = String::from("device header");
        for (off, len, what, _) in spans {
            // corrupt rows may name any offset and length: their end is checked, not computed
            let Some(span_end) = off.checked_add(len) else {
                r.problems.push(format!("device {dev}: {what} at {off}+{len} reaches past the largest offset"));
                continue;
            };
            if off < cursor {
                r.problems.push(format!("device {dev}: {what} at {off}+{len} overlaps {prev} (double allocation)"));
            } else if off > cursor {
                r.problems
                    .push(format!("device {dev}: {} bytes at {cursor} are neither free nor used (leak)", off - cursor));
            }
            if span_end > end {
                r.problems.push(format!("device {dev}: {what} at {off}+{len} ends past the allocation end {end}"));
            }
            cursor = cursor.max(span_end);
            prev = what;
        }
        if cursor < end {
            r.problems.push(format!(
                "device {dev}: {} bytes at {cursor} below the allocation end are neither free nor used (leak)",
                end - cursor
            ));
        }
    }
    Ok(())
}

/// What owns a range of a device.
#[derive(Clone, Copy, Debug)]
enum Owner {
    Inode(Ino),
    Bundle(u64),
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Inode(ino) => write!(f, "extent of inode {ino}"),
            Owner::Bundle(id) => write!(f, "bundle {id}"),
        }
    }
}

/// Bundles against the records pointing into them (`bundled`); each bundle's range goes
/// into `exts` for the space checks.
fn check_bundles(
    inner: &Inner,
    rx: &redb::ReadTransaction,
    mut bundled: BundleRefs,
    exts: &mut DeviceExtents,
    r: &mut FsckReport,
) -> Result<()> {
    let DeviceExtents { per_dev, reach } = exts;
    for (id, row) in crate::txg::bundle::all(rx)? {
        let mut refs = bundled.remove(&id).unwrap_or_default();
        let b = match row {
            Ok(b) => b,
            Err(e) => {
                r.problems.push(format!("bundle {id}: {e}"));
                continue;
            }
        };
        r.bundles += 1;
        if refs.is_empty() {
            r.problems.push(format!("bundle {id} holds no file's record (leak of {} bytes)", b.ext.psize));
        } else if refs.len() as u64 != u64::from(b.members) {
            r.problems.push(format!("bundle {id} counts {} records but {} point into it", b.members, refs.len()));
        }
        if u64::from(b.logical) > inner.bundle_size || u64::from(b.ext.psize) > inner.bundle_size {
            r.problems.push(format!(
                "bundle {id}: {} stored / {} decoded bytes exceed the pool's bundle size {}",
                b.ext.psize, b.logical, inner.bundle_size
            ));
        }
        refs.sort_unstable();
        let mut end_prev = 0u64;
        for &(off, len, ino, idx) in &refs {
            if off + len > u64::from(b.logical) {
                r.problems.push(format!(
                    "inode {ino} record {idx}: bytes {off}..{} of bundle {id}, which decodes to {}",
                    off + len,
                    b.logical
                ));
            }
            if off < end_prev {
                r.problems.push(format!("inode {ino} record {idx} overlaps another record in bundle {id}"));
            }
            end_prev = end_prev.max(off + len);
        }
        let d = b.ext;
        if inner.granule > 1 && d.offset % inner.granule != 0 {
            r.problems.push(format!("bundle {id}: offset {} on device {} is not on a sector", d.offset, d.dev));
        }
        let owner_ino = refs.first().map_or(0, |x| x.2);
        if let (Some(end), Some(slot)) = (d.offset.checked_add(u64::from(d.psize)), reach.get_mut(d.dev as usize)) {
            if slot.is_none_or(|(e, _)| end > e) {
                *slot = Some((end, owner_ino));
            }
        }
        match per_dev.get_mut(d.dev as usize) {
            Some(v) => v.push((
                d.offset,
                crate::base::units::granule_bytes(u64::from(d.psize), inner.granule),
                Owner::Bundle(id),
                b.birth,
            )),
            None => r.problems.push(format!("bundle {id} lies on device {}", d.dev)),
        }
    }
    for (id, refs) in bundled {
        for (_, _, ino, idx) in refs {
            r.problems.push(format!("inode {ino} record {idx} lies in bundle {id}, which does not exist"));
        }
    }
    Ok(())
}

/// The superblock's device count against the `devices` table and every device header (open
/// reads as many device rows as the superblock names and checks each header's pool and
/// index, not its count).
fn check_device_count(inner: &Inner, rx: &redb::ReadTransaction, r: &mut FsckReport) -> Result<()> {
    use redb::ReadableTableMetadata;
    let Some(v) = rx.open_table(tables::SUPERBLOCK)?.get(0u8)? else {
        r.problems.push("the superblock is missing".into());
        return Ok(());
    };
    let count = Superblock::decode(v.value())?.device_count;
    let rows = rx.open_table(tables::DEVICES)?.len()?;
    if rows != u64::from(count) {
        r.problems.push(format!("the superblock names {count} devices but the devices table holds {rows}"));
    }
    for (i, slot) in inner.space.devs().iter().enumerate() {
        match squeezefs_device::read_header(&*slot.dev) {
            Ok(h) if h.device_count != count => r.problems.push(format!(
                "device {i} ({}): its header says the pool has {} devices, the superblock says {count}",
                slot.dev.name(),
                h.device_count
            )),
            Ok(_) => {}
            Err(e) => r.problems.push(format!("device {i} ({}): {e}", slot.dev.name())),
        }
    }
    Ok(())
}
