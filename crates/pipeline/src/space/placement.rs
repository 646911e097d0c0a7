//! Space and placement: the pool's devices, their two space images, the host filesystems
//! under growable device files, and the placement decisions made over them.
//!
//! Two images per device (alloc.rs holds one image's state):
//! * `live`: where every placement is taken, early (early_place.rs) or in the sync stage;
//!   space a commit freed comes back here only after that commit is durable and the range
//!   has been discarded on the device (`give_back`). Never persisted.
//! * `durable`: what the last commit persisted, changed only by the commit stage (the
//!   committing txg's extents taken exactly, its frees given back), so records placed early
//!   for a later txg are never persisted as allocated.
//!
//! Hence a range free in the live image is free in the durable image too, and a placement
//! never overwrites data the last durable commit refers to.
//!
//! Host space: a growable device file takes its room from the filesystem holding it
//! (`host`, refreshed per txg by `refresh_host`); each filesystem is counted once in
//! `host_free`. When one of them also holds the metadata store, data admission keeps the
//! metadata reserve free there (`data_on_meta_fs`, meta_space.rs).
//!
//! Locks (locks.rs ranks): `durable` is never held while `live` is taken by the same
//! thread, nor the other way round; `host` is taken after `live`.

use crate::base::error::Result;
use crate::base::locks::{Mutex, MutexGuard, Rank};
use crate::space::alloc::DevSpace;
use crate::space::devq::{DevQueue, WriteReq};
use crate::store::meta_space::{HostFs, MetaSpace};
use squeezefs_control::{choose_device, DeviceView};
use squeezefs_device::{Device, DeviceStatsSnapshot};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One device of the pool and its write queue.
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

/// What the controllers and `squeezefs stats` see of one device.
#[derive(Clone, Debug)]
pub struct DeviceStatus {
    pub index: u32,
    pub name: String,
    pub stats: DeviceStatsSnapshot,
    /// bytes allocated to records
    pub used_bytes: u64,
    /// free bytes; `None` for a growable device file
    pub free_bytes: Option<u64>,
}

/// The host page a device file gives back whole (`Device::discard` punches whole pages).
const PUNCH_PAGE: u64 = 4096;

pub struct Space {
    devs: Vec<DevSlot>,
    live: Mutex<Vec<DevSpace>>,
    durable: Mutex<Vec<DevSpace>>,
    /// per device: the host filesystem under it if it is a growable file (`None` for fixed
    /// devices); device choice keeps each growable device within its own filesystem
    host: Mutex<Vec<Option<HostSpace>>>,
    /// free bytes of the host filesystems under growable device files, each filesystem
    /// counted once (refreshed per txg)
    host_free: AtomicU64,
    /// a growable device file lies on the pool directory's filesystem: its dirty data takes
    /// the room metadata commits need (refreshed with `host`)
    data_on_meta_fs: AtomicBool,
    pool_dir: PathBuf,
    sector: u64,
    granule: u64,
    /// the largest record size a dirty file held since open (the pool's at first): a record
    /// never spans two free ranges, so each range keeps back one such record
    /// (`placeable_bytes`)
    largest_rs: AtomicU64,
    /// per device: its room as the last `device_views` saw it, for readers that must not
    /// take the live image's lock (the auto controller's inputs, levels.rs)
    room_hint: Arc<[AtomicU64]>,
}

impl Space {
    /// `images`: each device's durable image as persisted (the live one starts equal).
    pub fn new(
        pool_dir: PathBuf,
        devs: Vec<DevSlot>,
        images: Vec<DevSpace>,
        sector: u64,
        granule: u64,
        recordsize: u64,
    ) -> Space {
        let room_hint = images
            .iter()
            .map(|s| AtomicU64::new(s.free_bytes().map_or(u64::MAX, |f| f.saturating_add(s.run_room()))))
            .collect();
        Space {
            devs,
            room_hint,
            durable: Mutex::new(Rank::DurableSpace, images.clone()),
            live: Mutex::new(Rank::LiveSpace, images.into_iter().map(DevSpace::untracked).collect()),
            host: Mutex::new(Rank::HostSpace, Vec::new()),
            host_free: AtomicU64::new(u64::MAX),
            data_on_meta_fs: AtomicBool::new(false),
            pool_dir,
            sector,
            granule,
            largest_rs: AtomicU64::new(recordsize),
        }
    }

    /// A file with records of `rs` bytes takes data (inner.rs `note_record_size`).
    pub fn note_record_size(&self, rs: u64) {
        self.largest_rs.fetch_max(rs, Ordering::Relaxed);
    }

    pub fn devs(&self) -> &[DevSlot] {
        &self.devs
    }

    /// Record packing unit on the devices: 1 in pools with `INCOMPAT_PACKED_BYTES`, else the
    /// sector (alloc.rs); footprints of device extents are their stored length rounded to it.
    pub fn granule(&self) -> u64 {
        self.granule
    }

    /// The live image (see the module comment).
    pub fn live(&self) -> MutexGuard<'_, Vec<DevSpace>> {
        self.live.lock()
    }

    /// The durable image (see the module comment); only the commit stage changes it.
    pub fn durable(&self) -> MutexGuard<'_, Vec<DevSpace>> {
        self.durable.lock()
    }

    /// The host filesystems under growable devices as last measured (per device).
    pub fn host_rooms(&self) -> Vec<Option<HostSpace>> {
        self.host.lock().clone()
    }

    /// Queue a write on device `dev`.
    pub fn submit(&self, dev: usize, req: WriteReq) {
        self.devs[dev].queue.submit(req);
    }

    /// Make the writes of the devices marked in `written` durable (fdatasync).
    pub fn flush(&self, written: &[bool]) -> Result<()> {
        for (i, w) in written.iter().enumerate() {
            if *w {
                self.devs[i].dev.sync()?;
            }
        }
        Ok(())
    }

    /// Free bytes over all devices, for statfs' total: whole free sectors of fixed devices;
    /// for growable devices the host filesystem's free space only. Their free ranges are not
    /// added: a commit punches them back to the host (`Device::discard`), so the host's free
    /// figure already holds them, and counting them again would keep deleted data in `df`'s
    /// Used.
    pub fn free_bytes(&self) -> u64 {
        let live = self.live.lock();
        let mut total = 0u64;
        let mut any_growable = false;
        for s in live.iter() {
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
    /// on a fixed device what records of up to the largest record size in use are sure to
    /// get in its free pieces (`DevSpace::placeable_bytes`); for growable devices the host
    /// filesystem's free
    /// space only, since their freed ranges were punched back to the host and reusing them
    /// takes host space again (records that find no free range go past the end). With
    /// `keep_back` (admission), what metadata commits need stays free on a filesystem that
    /// holds both the metadata store and a growable device (meta_space.rs); without it
    /// (statfs' free figure), `df`'s Used stays the live data.
    pub fn placeable_bytes(&self, keep_back: Option<&MetaSpace>) -> u64 {
        let record = crate::base::units::sector_bytes(self.largest_rs.load(Ordering::Relaxed), self.sector);
        let live = self.live.lock();
        let mut total = 0u64;
        let mut any_growable = false;
        for s in live.iter() {
            match s.placeable_bytes(record) {
                Some(f) => total = total.saturating_add(f),
                None => any_growable = true,
            }
        }
        if any_growable {
            let mut host = self.host_free.load(Ordering::Relaxed);
            if let Some(meta) = keep_back.filter(|_| self.data_on_meta_fs.load(Ordering::Relaxed)) {
                host = host.saturating_sub(meta.held_back());
            }
            total = total.saturating_add(host);
        }
        total
    }

    /// A growable device file lies on the metadata store's filesystem.
    pub fn data_on_meta_fs(&self) -> bool {
        self.data_on_meta_fs.load(Ordering::Relaxed)
    }

    /// Refresh the cached free space of the host filesystems under the growable device
    /// files: each device's own (a device file may live on another filesystem than the
    /// pool directory, and counting the pool directory's would admit writes that device's
    /// filesystem has no room for), and their sum over distinct filesystems for admission.
    /// Measures the metadata store's filesystem into `meta` too.
    pub fn refresh_host(&self, meta: &MetaSpace) {
        let growable: Vec<bool> = self.live.lock().iter().map(|s| s.capacity.is_none()).collect();
        let mut hs = self.host.lock();
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
        meta.measured(host_fs_of(&self.pool_dir));
        if let Some(m) = meta.host() {
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

    /// What device choice (crates/control) sees of each device: its queue and throughput, and
    /// its room = whole free sectors + what is left in its open run, or for a growable device
    /// `growable_room(index)` (the room of its host filesystem).
    /// Each device's room is also kept as a hint ([`Space::room_hints`]).
    pub fn device_views(&self, live: &[DevSpace], growable_room: impl Fn(usize) -> u64) -> Vec<DeviceView> {
        self.devs
            .iter()
            .zip(live.iter())
            .enumerate()
            .map(|(i, (d, s))| {
                let st = d.queue.stats.snapshot();
                let free_bytes = s.free_bytes().map_or_else(|| growable_room(i), |f| f.saturating_add(s.run_room()));
                self.room_hint[i].store(free_bytes, Ordering::Relaxed);
                DeviceView { queued_bytes: st.queued_bytes, throughput_bps: st.throughput_bps, free_bytes }
            })
            .collect()
    }

    /// Each device's room as the last placement saw it (lock-free; see `room_hint`).
    pub fn room_hints(&self) -> Arc<[AtomicU64]> {
        self.room_hint.clone()
    }

    /// Per-device queue, latency, throughput and space (for controllers and `stats`).
    pub fn device_status(&self) -> Vec<DeviceStatus> {
        let live = self.live.lock();
        self.devs
            .iter()
            .zip(live.iter())
            .enumerate()
            .map(|(i, (d, s))| DeviceStatus {
                index: i as u32,
                name: d.dev.name().to_string(),
                stats: d.queue.stats.snapshot(),
                used_bytes: s.end - s.data_start - s.free_range_bytes(),
                free_bytes: s.free_bytes(),
            })
            .collect()
    }

    /// Give ranges back to the live image (a commit's frees, once it is durable: before,
    /// the last committed txg may still point into them; or early placements given up, once
    /// their writes finished) and to the devices (holes in device files, so deleting data
    /// returns host disk space). The live lock is held until the discards are done: a range
    /// free in the live image may be placed early at any moment, and a discard after a write
    /// into it would punch that write away.
    pub fn give_back(&self, ranges: &[(u32, u64, u64)]) {
        // the ranges themselves first, without the lock: they are still allocated in the live
        // image, so nothing is placed in them meanwhile (a large fragmented delete is thousands
        // of punches, which must not stall placement and admission)
        self.discard(ranges);
        let mut live = self.live.lock();
        // then, under the lock, the edge pages a range shares with free neighbours: wholly free
        // only now (a page or two per range)
        let mut edges = Vec::new();
        for &(dev, off, len) in ranges {
            let (s, l) = live[dev as usize].free(off, len);
            edges.extend(edge_pages(off, len, s, l).into_iter().flatten().map(|p| (dev, p, PUNCH_PAGE)));
        }
        self.discard(&edges);
        drop(live);
    }

    fn discard(&self, ranges: &[(u32, u64, u64)]) {
        for &(dev, off, len) in ranges {
            if let Err(e) = self.devs[dev as usize].dev.discard(off, len) {
                log::warn!("discarding {len} freed bytes at {off} on device {dev}: {e}");
            }
        }
    }
}

/// The device and offset for a record of `stored` bytes (footprint `need` ≥ 1): the best
/// device by `choose_device` that can place it. The room in `views` is an estimate (free
/// sectors need not be contiguous), so a device that cannot place the record after all is
/// passed over for the next best one (its room set to 0).
pub fn place_on_a_device(
    live: &mut [DevSpace],
    views: &mut [DeviceView],
    stored: u64,
    need: u64,
) -> Option<(usize, u64)> {
    loop {
        let dev = choose_device(views, need)?;
        match live[dev].alloc_packed(stored) {
            Some(off) => return Some((dev, off)),
            None => views[dev].free_bytes = 0,
        }
    }
}

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

/// The filesystem holding `path` (its `st_dev`) and its free bytes (`host_free_bytes`).
pub fn host_space_of(path: &Path) -> Option<HostSpace> {
    use std::os::unix::fs::MetadataExt;
    let fs = std::fs::metadata(path).ok()?.dev();
    Some(HostSpace { fs, free: host_free_bytes(path)? })
}

/// The filesystem holding `path`: its `st_dev`, available and total bytes.
pub fn host_fs_of(path: &Path) -> Option<HostFs> {
    use std::os::unix::fs::MetadataExt;
    let fs = std::fs::metadata(path).ok()?.dev();
    let (free, total) = host_stat(path)?;
    Some(HostFs { fs, free, total })
}

/// statvfs of `path`: bytes available to unprivileged users.
pub fn host_free_bytes(path: &Path) -> Option<u64> {
    host_stat(path).map(|(free, _)| free)
}

/// statvfs of `path`: (bytes available to unprivileged users, size of the filesystem).
fn host_stat(path: &Path) -> Option<(u64, u64)> {
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

#[cfg(test)]
mod tests {
    use super::*;
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
