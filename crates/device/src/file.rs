//! `FileDevice`: a regular file or a block device accessed with positional I/O.
//!
//! * Regular file, no capacity given: growable; writes past the end extend the file.
//! * Regular file with a capacity: fixed; a write ending past the capacity returns
//!   `DeviceError::Full` and writes nothing (the file is extended to the capacity lazily).
//! * Block device: fixed; the capacity is the device size (seek to end, which the kernel
//!   answers with the same figure as the BLKGETSIZE64 ioctl).
//!
//! `sync` is `fdatasync`. Writes start the kernel's writeback early: once
//! `WRITEBACK_KICK_BYTES` were written since the last kick, the written range gets
//! `sync_file_range(SYNC_FILE_RANGE_WRITE)` (asynchronous; a hint — durability still comes
//! only from `sync`), so the `fdatasync` before a commit waits for the tail, not for the
//! whole txg.
//!
//! Writeback watcher (`Device::measure_drain`, which the engine's device queue calls): a
//! thread per device file waits for each kicked range's writeback in turn
//! (`SYNC_FILE_RANGE_WAIT_*`) and reports how long the device took for it — from the kick,
//! or from the previous range's completion if later — to `DeviceStats::record_drain`; a sync
//! kicks the writes since the last kick first, so that they are timed too. That is
//! the device's drain rate, where timing `write_at` measures the page cache. The kicked
//! ranges whose writeback is not done form a window: past `WRITEBACK_WINDOW_BYTES` a write
//! waits for the watcher, so a device slower than its writer holds up the writer (and the
//! engine's queue for the device grows) instead of the page cache filling with its data.
//! Without a watcher (tools, tests using the file directly) kicks are hints only.
//!
//! `write_vectored_at` writes a run of contiguous records with `pwritev` straight
//! from their buffers (the device queue's coalesced runs). The host filesystem running out
//! of space (ENOSPC) while a growable file grows is reported as `Full` too, so the engine
//! sees one "no space" error.
//!
//! A device opened read-write is written with `O_DIRECT` where the kernel takes it: a block
//! device always, a device file where its filesystem reports a direct-I/O alignment
//! (`direct.rs`: the page-cache copy costs the writer as much CPU as fast compression). Its
//! writes then are the device's own time, so there is no writeback to kick or watch. Reads
//! stay buffered. A direct write to a growable file leaves its length a whole number of
//! blocks (zeros past the last byte written); one to a fixed-capacity file never reaches
//! past the capacity. If a direct write fails with EINVAL (the device refuses the alignment
//! after all), the device falls back to buffered writes for good and the write is retried
//! so.

use crate::direct::DirectWriter;
use crate::power_loss::{recorder_for, PowerLoss};
use crate::{end_offset, Device, DeviceError, DeviceStats};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How to open a [`FileDevice`].
#[derive(Debug, Clone, Default)]
pub struct FileDeviceOptions {
    /// Open read-only (scrub, fsck, read-only mounts); writes then fail with an I/O error.
    pub read_only: bool,
    /// Create the file if it does not exist (regular files only).
    pub create: bool,
    /// Fixed capacity in bytes for a regular file; `None` = growable. Ignored for block
    /// devices, whose size is their capacity.
    pub capacity: Option<u64>,
}

pub struct FileDevice {
    file: File,
    name: String,
    capacity: Option<u64>,
    block_device: bool,
    /// Highest byte ever written or present; grows monotonically.
    len: AtomicU64,
    /// Set when a crash test armed `power_loss` for this path.
    power: Option<Arc<PowerLoss>>,
    /// Range written since the last writeback kick.
    unkicked: std::sync::Mutex<Unkicked>,
    /// The writeback watcher, once `measure_drain` started it.
    watcher: std::sync::OnceLock<Watcher>,
    /// The host filesystem refused a hole punch (EOPNOTSUPP): `discard` does nothing.
    no_punch: AtomicBool,
    /// Direct writes, for a block device opened read-write (see the module comment).
    direct: Option<DirectWriter>,
    /// A direct write failed with EINVAL: every write since goes through the page cache.
    direct_refused: AtomicBool,
}

/// Start writeback after this many bytes written (see the module comment).
pub const WRITEBACK_KICK_BYTES: u64 = 4 << 20;
/// Kicked bytes whose writeback may be unfinished before a write waits (see the module
/// comment): two kicks, so the device always has one range to work on while the watcher
/// waits for the other.
pub const WRITEBACK_WINDOW_BYTES: u64 = 2 * WRITEBACK_KICK_BYTES;

#[derive(Default)]
struct Unkicked {
    lo: u64,
    hi: u64,
    bytes: u64,
}

/// A range to write back: offset, length, and the bytes written into it since the last kick
/// (fewer than its length when the writes left gaps).
type Kick = (u64, u64, u64);

impl Unkicked {
    /// Add a write of `len` bytes at `offset`; the range to kick when enough accumulated.
    fn add(&mut self, offset: u64, end: u64) -> Option<Kick> {
        if self.bytes == 0 {
            (self.lo, self.hi) = (offset, end);
        } else {
            self.lo = self.lo.min(offset);
            self.hi = self.hi.max(end);
        }
        self.bytes += end - offset;
        if self.bytes < WRITEBACK_KICK_BYTES {
            return None;
        }
        let bytes = std::mem::take(&mut self.bytes);
        Some((self.lo, self.hi - self.lo, bytes))
    }
}

/// The writeback watcher's end of the window (see the module comment).
struct Watcher {
    tx: std::sync::mpsc::Sender<(Kick, std::time::Instant)>,
    window: Arc<Window>,
}

#[derive(Default)]
struct Window {
    /// bytes kicked whose writeback the watcher has not seen finish
    bytes: std::sync::Mutex<u64>,
    finished: std::sync::Condvar,
    /// the watcher thread ended: nobody will shrink the window any more
    gone: AtomicBool,
}

impl Window {
    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until at most `WRITEBACK_WINDOW_BYTES` are in flight (or the watcher is gone).
    fn wait_room(&self) {
        let mut b = self.lock();
        while *b > WRITEBACK_WINDOW_BYTES && !self.gone.load(Ordering::Acquire) {
            b = self
                .finished
                .wait_timeout(b, std::time::Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Marks the window's watcher gone when its thread ends, however it ends.
struct Gone(Arc<Window>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0.gone.store(true, Ordering::Release);
        self.0.finished.notify_all();
    }
}

/// The watcher thread: each kicked range in turn, its writeback waited for and timed.
fn watch(
    file: File,
    rx: std::sync::mpsc::Receiver<(Kick, std::time::Instant)>,
    window: Arc<Window>,
    stats: Arc<DeviceStats>,
) {
    use std::os::fd::AsRawFd;
    let _gone = Gone(window.clone());
    let mut prev: Option<std::time::Instant> = None;
    for ((off, len, bytes), kicked) in rx {
        // SAFETY: plain syscall on our own descriptor. A failure (a writeback error) is
        // reported by the next fdatasync, which durability depends on; here it only ends
        // this range's wait.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                off as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            );
        }
        let done = std::time::Instant::now();
        // the device worked on this range from its kick, or from the previous range's end
        // if that came later (one range after the other); a range a sync wrote back with
        // the previous one finishes at once, and the previous one's time covered both
        let from = prev.map_or(kicked, |p| p.max(kicked));
        stats.record_drain(bytes, done.saturating_duration_since(from));
        prev = Some(done);
        *window.lock() -= len;
        window.finished.notify_all();
    }
}

impl FileDevice {
    /// Open an existing file or block device read-write, growable for regular files.
    pub fn open(path: &Path) -> Result<Self, DeviceError> {
        Self::open_with(path, &FileDeviceOptions::default())
    }

    /// Create (or open) a regular file device; `capacity` makes it fixed-size.
    pub fn create(path: &Path, capacity: Option<u64>) -> Result<Self, DeviceError> {
        Self::open_with(path, &FileDeviceOptions { create: true, capacity, ..Default::default() })
    }

    pub fn open_with(path: &Path, opts: &FileDeviceOptions) -> Result<Self, DeviceError> {
        let name = path.display().to_string();
        let io = |source: std::io::Error| DeviceError::Io { path: name.clone(), source };
        let mut file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .create(opts.create && !opts.read_only)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        let ft = meta.file_type();
        let (capacity, block_device, len) = if ft.is_block_device() {
            let size = file.seek(SeekFrom::End(0)).map_err(io)?;
            (Some(size), true, size)
        } else if ft.is_file() {
            (opts.capacity, false, meta.len())
        } else {
            return Err(DeviceError::NotFileOrBlockDevice { path: name });
        };
        if let Some(cap) = capacity {
            if !block_device && len > cap {
                return Err(DeviceError::LargerThanCapacity { path: name, len, capacity: cap });
            }
        }
        let power = recorder_for(path);
        // the power-loss recorder models buffered writes; a read-only device writes nothing
        let direct = match (opts.read_only || power.is_some(), block_device) {
            (true, _) => None,
            (false, true) => DirectWriter::open_block_device(path, &file),
            (false, false) => DirectWriter::open_file(path, capacity, &file),
        };
        Ok(Self {
            file,
            name,
            capacity,
            block_device,
            len: AtomicU64::new(len),
            power,
            unkicked: Default::default(),
            watcher: std::sync::OnceLock::new(),
            no_punch: AtomicBool::new(false),
            direct,
            direct_refused: AtomicBool::new(false),
        })
    }

    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    /// Writes go past the page cache (`O_DIRECT`): a device opened read-write whose kernel
    /// and filesystem take it (see the module comment).
    pub fn writes_direct(&self) -> bool {
        self.direct.is_some() && !self.direct_refused.load(Ordering::Relaxed)
    }

    /// Write the concatenation of `bufs` at `offset` direct, if this device writes so;
    /// `None` when the write is to go through the page cache instead.
    fn write_direct(&self, bufs: &[&[u8]], offset: u64) -> Option<std::io::Result<()>> {
        let d = self.direct.as_ref().filter(|_| self.writes_direct())?;
        match d.write(bufs, offset) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                log::warn!(
                    "{}: direct write of {} blocks of {} bytes refused ({e}); writing through the page cache from now on",
                    self.name,
                    bufs.iter().map(|b| b.len()).sum::<usize>() as u64 / d.block_size(),
                    d.block_size()
                );
                self.direct_refused.store(true, Ordering::Relaxed);
                None
            }
            r => Some(r),
        }
    }

    /// End offset of a write of `len` bytes at `offset`, or `Full` if it does not fit.
    fn check_write(&self, offset: u64, len: usize) -> Result<u64, DeviceError> {
        let Some(end) = end_offset(offset, len) else {
            return Err(DeviceError::Full { path: self.name.clone(), capacity: self.capacity.unwrap_or(u64::MAX) });
        };
        if let Some(cap) = self.capacity {
            if end > cap {
                return Err(DeviceError::Full { path: self.name.clone(), capacity: cap });
            }
        }
        Ok(end)
    }

    /// Bookkeeping after a completed write of `[offset, end)`: the length, and the early
    /// writeback kick (see the module comment).
    fn after_write(&self, offset: u64, end: u64) {
        self.len.fetch_max(end, Ordering::AcqRel);
        if self.power.is_none() && !self.writes_direct() {
            let kick = self.unkicked.lock().unwrap_or_else(|p| p.into_inner()).add(offset, end);
            if let Some(k) = kick {
                self.kick(k);
                if let Some(w) = self.watcher.get() {
                    w.window.wait_room();
                }
            }
        }
    }

    /// Start the writeback of a range, and have the watcher (if any) time it.
    fn kick(&self, (off, len, bytes): Kick) {
        use std::os::fd::AsRawFd;
        // SAFETY: plain syscall on our own open descriptor; a failure only means the
        // writeback starts at fdatasync, so the result is ignored.
        unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                off as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        if let Some(w) = self.watcher.get() {
            *w.window.lock() += len;
            if w.tx.send(((off, len, bytes), std::time::Instant::now())).is_err() {
                *w.window.lock() -= len;
            }
        }
    }

    fn io_err(&self, source: std::io::Error) -> DeviceError {
        if source.raw_os_error() == Some(libc_enospc()) {
            return DeviceError::Full { path: self.name.clone(), capacity: self.len.load(Ordering::Relaxed) };
        }
        DeviceError::Io { path: self.name.clone(), source }
    }
}

/// Host page size hole punching works in (the page cache's granularity on every Linux
/// filesystem that supports punching).
const PUNCH_GRAIN: u64 = 4096;

/// The whole `PUNCH_GRAIN` pages inside `[offset, offset+len)`: `(start, len)`, or `None`
/// if the range covers no whole page.
fn punchable_pages(offset: u64, len: u64) -> Option<(u64, u64)> {
    let end = offset.checked_add(len)?;
    let start = offset.checked_next_multiple_of(PUNCH_GRAIN)?;
    let stop = end / PUNCH_GRAIN * PUNCH_GRAIN;
    (stop > start).then(|| (start, stop - start))
}

/// ENOSPC on Linux (asm-generic errno 28); spelled out to avoid a libc dependency.
const fn libc_enospc() -> i32 {
    28
}

/// Most iovecs one `pwritev` takes (Linux UIO_MAXIOV).
const MAX_IOVECS: usize = 1024;

/// Write the concatenation of `bufs` at `offset` with `pwritev`, at most `MAX_IOVECS`
/// slices per call, resuming after short writes and EINTR (the same "all or an error"
/// contract as `write_all_at`).
pub(crate) fn pwritev_all(file: &File, bufs: &[&[u8]], mut offset: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut idx = 0; // first slice not completely written
    let mut skip = 0; // bytes of bufs[idx] already written
    while idx < bufs.len() {
        if bufs[idx].len() == skip {
            idx += 1;
            skip = 0;
            continue;
        }
        let iov: Vec<libc::iovec> = bufs[idx..]
            .iter()
            .take(MAX_IOVECS)
            .enumerate()
            .map(|(i, b)| {
                let b = if i == 0 { &b[skip..] } else { b };
                libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() }
            })
            .collect();
        let off = libc::off_t::try_from(offset).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: every iovec points into a live slice of `bufs`, read-only for the kernel;
        // `iov.len()` ≤ MAX_IOVECS fits a c_int.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int, off) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero));
        }
        let mut n = n as usize;
        offset += n as u64;
        // advance past what was written
        while n > 0 {
            let left = bufs[idx].len() - skip;
            if n >= left {
                n -= left;
                idx += 1;
                skip = 0;
            } else {
                skip += n;
                n = 0;
            }
        }
    }
    Ok(())
}

impl Device for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let device_len = self.len.load(Ordering::Acquire);
        match end_offset(offset, buf.len()) {
            Some(end) if end <= device_len => {}
            _ => {
                return Err(DeviceError::OutOfRange {
                    path: self.name.clone(),
                    offset,
                    len: buf.len() as u64,
                    device_len,
                })
            }
        }
        self.file.read_exact_at(buf, offset).map_err(|e| self.io_err(e))
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        let end = self.check_write(offset, data.len())?;
        match &self.power {
            Some(p) => p.write(&self.file, self.len.load(Ordering::Acquire), data, offset),
            None => self.write_direct(&[data], offset).unwrap_or_else(|| self.file.write_all_at(data, offset)),
        }
        .map_err(|e| self.io_err(e))?;
        self.after_write(offset, end);
        Ok(())
    }

    /// `pwritev` of the slices (no copy into a batch buffer); under the power-loss recorder
    /// the slices are joined and written as one `write_at`, which the recorder models.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), DeviceError> {
        if self.power.is_some() || bufs.len() == 1 {
            return match bufs {
                [one] => self.write_at(one, offset),
                _ => self.write_at(&bufs.concat(), offset),
            };
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let end = self.check_write(offset, total)?;
        self.write_direct(bufs, offset)
            .unwrap_or_else(|| pwritev_all(&self.file, bufs, offset))
            .map_err(|e| self.io_err(e))?;
        self.after_write(offset, end);
        Ok(())
    }

    fn sync(&self) -> Result<(), DeviceError> {
        if self.watcher.get().is_some() {
            // the writes since the last kick are timed too: a device that took less than a
            // kick's worth between syncs (small txgs) is measured all the same
            let tail = {
                let mut u = self.unkicked.lock().unwrap_or_else(|p| p.into_inner());
                let bytes = std::mem::take(&mut u.bytes);
                (bytes > 0).then(|| (u.lo, u.hi - u.lo, bytes))
            };
            if let Some(k) = tail {
                self.kick(k);
            }
        }
        match &self.power {
            Some(p) => p.sync(&self.file),
            None => self.file.sync_data(),
        }
        .map_err(|e| self.io_err(e))
    }

    fn measure_drain(&self, stats: Arc<DeviceStats>) -> bool {
        if self.power.is_some() || self.writes_direct() {
            // the power-loss recorder models writes only, and a direct write's time is the
            // device's own: no writeback to watch
            return false;
        }
        let Ok(file) = self.file.try_clone() else { return false };
        let window = Arc::new(Window::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let w = window.clone();
        let spawned =
            std::thread::Builder::new().name("sqz-writeback".into()).spawn(move || watch(file, rx, w, stats)).is_ok();
        spawned && self.watcher.set(Watcher { tx, window }).is_ok()
    }

    /// Punches the whole host pages inside the range out of a device *file* (the partial
    /// pages at either end may hold neighbouring records). Block devices are left alone
    /// (a discard there can be slow and is not needed for space accounting), and so is a
    /// file under the power-loss recorder, which models writes only.
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.block_device || self.power.is_some() || self.no_punch.load(Ordering::Relaxed) {
            return Ok(());
        }
        let Some((start, plen)) = punchable_pages(offset, len) else {
            return Ok(());
        };
        use std::os::fd::AsRawFd;
        // SAFETY: plain syscall on our own open descriptor; KEEP_SIZE leaves the length.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                start as libc::off_t,
                plen as libc::off_t,
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                // the host filesystem cannot punch holes: stop asking
                self.no_punch.store(true, Ordering::Relaxed);
                return Ok(());
            }
            return Err(self.io_err(e));
        }
        if let Some(d) = &self.direct {
            d.forget(start, plen);
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_kick_covers_every_write_since_the_last_kick() {
        let mut u = Unkicked::default();
        let step = 300 * 1024u64;
        let mut kicked = Vec::new();
        // out-of-order writes (a sorted batch after another): the kick spans them all
        for i in (0..64u64).rev() {
            if let Some(r) = u.add(i * step, (i + 1) * step) {
                kicked.push(r);
            }
        }
        let per_kick = WRITEBACK_KICK_BYTES.div_ceil(step);
        assert_eq!(kicked.len() as u64, 64 / per_kick);
        let mut covered = 0;
        for (off, len, bytes) in &kicked {
            assert_eq!(*len, per_kick * step, "a kick spans exactly its writes");
            assert_eq!(bytes, len, "no gaps between them");
            assert_eq!(off % step, 0);
            covered += len;
        }
        assert_eq!(covered + u.bytes, 64 * step);
    }

    /// The device with its direct writer dropped: written through the page cache, as on a
    /// host filesystem without direct I/O (tmpfs, FUSE).
    fn buffered(mut dev: FileDevice) -> FileDevice {
        dev.direct = None;
        dev
    }

    #[test]
    fn the_watcher_measures_the_drain_and_bounds_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let dev = buffered(FileDevice::create(&dir.path().join("d"), None).unwrap());
        let stats = Arc::new(DeviceStats::new());
        assert!(dev.measure_drain(stats.clone()));
        let chunk = vec![7u8; 1 << 20];
        for i in 0..40u64 {
            dev.write_at(&chunk, i << 20).unwrap();
            let in_flight = *dev.watcher.get().unwrap().window.lock();
            assert!(in_flight <= WRITEBACK_WINDOW_BYTES, "{in_flight} bytes in flight after a write");
        }
        dev.sync().unwrap();
        // every kick's writeback finishes and is measured (a rate, whatever the host's speed)
        let w = &dev.watcher.get().unwrap().window;
        let t0 = std::time::Instant::now();
        while *w.lock() > 0 {
            assert!(t0.elapsed() < std::time::Duration::from_secs(30), "kicked writeback never finished");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(stats.throughput_bps() > 0.0, "no drain measured");
        assert_eq!(stats.snapshot().written_bytes, 0, "drain samples are not writes");
        // less than a kick between syncs is measured too: the sync kicks it
        let small = buffered(FileDevice::create(&dir.path().join("s"), None).unwrap());
        let s2 = Arc::new(DeviceStats::new());
        assert!(small.measure_drain(s2.clone()));
        small.write_at(&chunk[..100 << 10], 0).unwrap();
        small.sync().unwrap();
        let t0 = std::time::Instant::now();
        while s2.throughput_bps() <= 0.0 {
            assert!(t0.elapsed() < std::time::Duration::from_secs(30), "a synced tail was never measured");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // the watcher ends with the device
        let w = dev.watcher.get().unwrap().window.clone();
        drop(dev);
        let t0 = std::time::Instant::now();
        while !w.gone.load(Ordering::Acquire) {
            assert!(t0.elapsed() < std::time::Duration::from_secs(30), "the watcher outlived its device");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn punchable_pages_are_the_whole_pages_inside_the_range() {
        for off in (0..3 * PUNCH_GRAIN).step_by(512) {
            for len in (0..3 * PUNCH_GRAIN).step_by(512) {
                match punchable_pages(off, len) {
                    Some((s, l)) => {
                        assert!(s >= off && s + l <= off + len, "{off}+{len} -> {s}+{l}");
                        assert_eq!(s % PUNCH_GRAIN, 0);
                        assert_eq!(l % PUNCH_GRAIN, 0);
                        assert!(l > 0);
                        // maximal: no whole page left out at either end
                        assert!(s - off < PUNCH_GRAIN && off + len - (s + l) < PUNCH_GRAIN);
                    }
                    None => assert!(off.next_multiple_of(PUNCH_GRAIN) + PUNCH_GRAIN > off + len),
                }
            }
        }
        assert_eq!(punchable_pages(u64::MAX - 10, 100), None);
    }

    #[test]
    fn discard_punches_whole_pages_and_keeps_neighbours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        let d = FileDevice::create(&path, None).unwrap();
        let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8 + 1).collect();
        d.write_at(&data, 0).unwrap();
        d.sync().unwrap();
        // free bytes 1000..50000: pages 4096..49152 go, the partial pages keep their bytes
        d.discard(1000, 49_000).unwrap();
        let mut back = vec![0u8; data.len()];
        d.read_at(&mut back, 0).unwrap();
        assert_eq!(&back[..4096], &data[..4096]);
        assert!(back[4096..49_152].iter().all(|&b| b == 0));
        assert_eq!(&back[49_152..], &data[49_152..]);
        assert_eq!(d.len(), data.len() as u64, "discard keeps the length");
        use std::os::unix::fs::MetadataExt;
        let blocks = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(blocks <= (data.len() - 45_056) as u64 + 4096, "host still holds {blocks} bytes");
    }

    #[test]
    fn growable_file_round_trips_and_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev0");
        let dev = FileDevice::create(&path, None).unwrap();
        assert_eq!(dev.len(), 0);
        assert_eq!(dev.capacity(), None);
        dev.write_at(b"hello", 4096).unwrap();
        assert_eq!(dev.len(), 4101);
        let mut buf = [0u8; 5];
        dev.read_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf, b"hello");
        // The gap before the write reads as zeros (sparse file).
        let mut gap = [1u8; 16];
        dev.read_at(&mut gap, 0).unwrap();
        assert_eq!(gap, [0u8; 16]);
        dev.sync().unwrap();
        let direct = dev.direct.as_ref().map(|d| d.block_size());
        drop(dev);
        let again = FileDevice::open(&path).unwrap();
        // a direct write leaves the file a whole number of its blocks long
        assert_eq!(again.len(), direct.map_or(4101, |b| 4101u64.next_multiple_of(b)));
        let mut buf = [0u8; 5];
        again.read_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf, b"hello");
    }

    /// pwritev takes at most 1024 iovecs and may write short: a gathered write of more
    /// slices (some empty, odd lengths) must still land whole and in order.
    #[test]
    fn vectored_write_of_more_slices_than_one_pwritev_takes_lands_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let dev = buffered(FileDevice::create(&dir.path().join("d"), None).unwrap());
        let slices: Vec<Vec<u8>> = (0..2500u32).map(|i| vec![(i % 251) as u8; ((i * 37) % 1500) as usize]).collect();
        let refs: Vec<&[u8]> = slices.iter().map(Vec::as_slice).collect();
        let want = refs.concat();
        dev.write_vectored_at(&refs, 4096).unwrap();
        assert_eq!(dev.len(), 4096 + want.len() as u64);
        let mut got = vec![0u8; want.len()];
        dev.read_at(&mut got, 4096).unwrap();
        assert!(got == want, "gathered bytes differ from their concatenation");
        // the writeback kick counted the gathered write (4 MiB not reached: nothing kicked)
        assert_eq!(dev.unkicked.lock().unwrap().bytes, want.len() as u64);
    }

    #[test]
    fn vectored_write_past_a_fixed_capacity_is_refused_whole() {
        let dir = tempfile::tempdir().unwrap();
        let dev = FileDevice::create(&dir.path().join("d"), Some(8192)).unwrap();
        let a = [1u8; 4096];
        let b = [2u8; 1];
        let err = dev.write_vectored_at(&[&a, &b], 4096).unwrap_err();
        assert!(matches!(err, DeviceError::Full { capacity: 8192, .. }), "{err}");
        assert_eq!(dev.len(), 0, "nothing of the refused write landed");
        dev.write_vectored_at(&[&a[..2048], &a[2048..]], 4096).unwrap();
        assert_eq!(dev.len(), 8192);
    }

    #[test]
    fn read_past_end_is_out_of_range() {
        let dir = tempfile::tempdir().unwrap();
        let dev = FileDevice::create(&dir.path().join("d"), None).unwrap();
        dev.write_at(&[7u8; 100], 0).unwrap();
        let mut buf = [0u8; 10];
        let err = dev.read_at(&mut buf, 95).unwrap_err();
        assert!(matches!(err, DeviceError::OutOfRange { device_len: 100, .. }), "{err}");
        let err = dev.read_at(&mut buf, u64::MAX - 3).unwrap_err();
        assert!(matches!(err, DeviceError::OutOfRange { .. }), "{err}");
        dev.read_at(&mut buf, 90).unwrap();
    }

    #[test]
    fn fixed_capacity_refuses_writes_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let dev = FileDevice::create(&dir.path().join("d"), Some(8192)).unwrap();
        assert_eq!(dev.capacity(), Some(8192));
        dev.write_at(&[1u8; 4096], 4096).unwrap();
        let err = dev.write_at(&[1u8; 4097], 4096).unwrap_err();
        assert!(matches!(err, DeviceError::Full { capacity: 8192, .. }), "{err}");
        assert!(err.to_string().contains("is full"));
        // Nothing of the refused write landed.
        assert_eq!(dev.len(), 8192);
        let err = dev.write_at(&[1u8; 1], u64::MAX).unwrap_err();
        assert!(matches!(err, DeviceError::Full { .. }));
    }

    #[test]
    fn existing_file_larger_than_capacity_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        std::fs::write(&path, vec![0u8; 10_000]).unwrap();
        let opts = FileDeviceOptions { capacity: Some(4096), ..Default::default() };
        let err = FileDevice::open_with(&path, &opts).err().unwrap();
        assert!(err.to_string().contains("fixed capacity"), "{err}");
    }

    #[test]
    fn missing_file_without_create_is_an_io_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope");
        let err = FileDevice::open(&path).err().unwrap();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn directory_is_not_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let opts = FileDeviceOptions { read_only: true, ..Default::default() };
        let err = FileDevice::open_with(dir.path(), &opts).err().unwrap();
        assert!(err.to_string().contains("neither a regular file nor a block device"), "{err}");
    }

    #[test]
    fn read_only_device_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        std::fs::write(&path, b"abc").unwrap();
        let opts = FileDeviceOptions { read_only: true, ..Default::default() };
        let dev = FileDevice::open_with(&path, &opts).unwrap();
        assert!(matches!(dev.write_at(b"x", 0), Err(DeviceError::Io { .. })));
        let mut b = [0u8; 3];
        dev.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"abc");
    }

    #[test]
    fn block_device_capacity_is_its_size() {
        // /dev/loop* or /dev/ram* may not exist in a container; use any readable block
        // device if there is one, else the test has nothing to check.
        let Some(path) = ["/dev/loop0", "/dev/ram0", "/dev/sda", "/dev/vda"].iter().map(Path::new).find(|p| p.exists())
        else {
            eprintln!("no block device to probe; skipping");
            return;
        };
        let opts = FileDeviceOptions { read_only: true, ..Default::default() };
        let Ok(dev) = FileDevice::open_with(path, &opts) else {
            eprintln!("cannot open {}; skipping", path.display());
            return;
        };
        assert!(dev.is_block_device());
        assert_eq!(dev.capacity(), Some(dev.len()));
    }
}
