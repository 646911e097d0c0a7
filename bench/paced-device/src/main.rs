//! `paced-device`: a FUSE file whose writes are served at a steady rate, the slow device of
//! `bench/auto-eval.sh --device paced` (a loop device is attached to it).
//!
//! Why it exists: the cgroup-v1 blkio throttle is a token bucket. While writes arrive below
//! its limit it passes them at the speed of the disk under it, so a device's rate shows only
//! while the device is saturated, and an adaptive writer that is not yet saturating it sees
//! a device of several GB/s. A disk serves every write in about size ÷ rate whether it is
//! busy or idle. This server does the same: it is one FIFO server (requests taken up by a pool
//! of threads as they arrive, then served one after another by the [`Pacer`]), and
//! a write of n bytes completes n ÷ rate after it arrived, or after the write before it
//! completed, whichever is later. Writes only: reads are served at once, as the
//! throttle leaves them too, so the two devices differ in the burst and nothing else.
//!
//! The data lives in a backing file (put it on tmpfs: then the host disk's writeback, which
//! bounds long runs on the throttled loop device, is not part of the figure). The cost of the
//! device is two copies of each stored byte on the host's CPUs, unpinned, as the loop
//! device's worker is.
//!
//! Files in the mount:
//! * `dev`: the device, of the fixed size given at start; opened with `FOPEN_DIRECT_IO`, so
//!   no page cache sits between the loop device and the pacing;
//! * `rate`: the write rate in bytes per second as decimal text; write a number to change
//!   it (0 = unpaced), read it to see the rate in force;
//! * `written`: the bytes written to `dev` since start (read-only).
//!
//! Discards (hole punches, the loop device's `blkdiscard`) reach the backing file unpaced.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use clap::Parser;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, KernelConfig, LockOwner, MountOption,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
    WriteFlags,
};

/// A single FIFO server with a steady service rate: the completion time of each write.
///
/// Invariant: `busy_until` is the completion time of the last write taken up. A write taken
/// up at `now` starts at max(now, busy_until) and occupies the server for bytes ÷ rate. With
/// rate 0 the server is unpaced and every write completes when it is taken up.
#[derive(Debug)]
struct Pacer {
    /// Bytes per second; 0 = unpaced.
    rate: u64,
    busy_until: Instant,
}

impl Pacer {
    fn new(rate: u64, now: Instant) -> Pacer {
        Pacer { rate, busy_until: now }
    }

    /// A new rate applies to writes taken up from `now` on; the backlog is forgotten.
    fn set_rate(&mut self, rate: u64, now: Instant) {
        self.rate = rate;
        self.busy_until = now;
    }

    /// The time at which a write of `bytes` taken up at `now` completes.
    fn completion(&mut self, now: Instant, bytes: u64) -> Instant {
        if self.rate == 0 {
            return now;
        }
        let start = now.max(self.busy_until);
        let done = start + service_time(bytes, self.rate);
        self.busy_until = done;
        done
    }
}

/// How long a server of `rate` bytes per second takes to serve `bytes`.
fn service_time(bytes: u64, rate: u64) -> Duration {
    let rate = rate.max(1);
    let nanos = u128::from(bytes % rate) * 1_000_000_000 / u128::from(rate);
    Duration::new(bytes / rate, nanos as u32)
}

/// Request threads: more than the kernel keeps in flight on one file.
const THREADS: usize = 16;
const ROOT: INodeNo = INodeNo::ROOT;
const DEV: INodeNo = INodeNo(2);
const RATE: INodeNo = INodeNo(3);
const WRITTEN: INodeNo = INodeNo(4);
const FILES: [(INodeNo, &str); 3] = [(DEV, "dev"), (RATE, "rate"), (WRITTEN, "written")];
/// Attributes change under the kernel (the rate, the count): it must not cache them.
const TTL: Duration = Duration::ZERO;

struct PacedDevice {
    backing: File,
    size: u64,
    pacer: Mutex<Pacer>,
    written: AtomicU64,
    uid: u32,
    gid: u32,
    started: SystemTime,
}

impl PacedDevice {
    fn rate_text(&self) -> String {
        format!("{}\n", self.pacer.lock().unwrap().rate)
    }

    fn written_text(&self) -> String {
        format!("{}\n", self.written.load(Ordering::Relaxed))
    }

    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        let (kind, perm, size) = match ino {
            ROOT => (FileType::Directory, 0o755, 0),
            DEV => (FileType::RegularFile, 0o600, self.size),
            RATE => (FileType::RegularFile, 0o644, self.rate_text().len() as u64),
            WRITTEN => (FileType::RegularFile, 0o444, self.written_text().len() as u64),
            _ => return None,
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }
}

fn text_slice(text: &str, offset: u64, size: u32) -> &[u8] {
    let bytes = text.as_bytes();
    let start = (offset as usize).min(bytes.len());
    let end = start.saturating_add(size as usize).min(bytes.len());
    &bytes[start..end]
}

impl Filesystem for PacedDevice {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // 1 MiB requests: fewer round trips per stored byte (the kernel caps it if it must)
        let _ = config.set_max_write(1 << 20);
        // asynchronous direct I/O: the loop device's requests reach us together, queue here
        // and are served back to back, as a disk's queue is; without it the kernel sends
        // one request at a time and each turnaround is idle time the model does not have
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ASYNC_DIO);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = FILES.iter().find(|(_, n)| OsStr::new(n) == name);
        match (parent, found.and_then(|(ino, _)| self.attr(*ino))) {
            (ROOT, Some(attr)) => reply.entry(&TTL, &attr, fuser::Generation(0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // `echo N > rate` truncates first; the device's size is fixed
        match (ino, size) {
            (DEV, Some(s)) if s != self.size => reply.error(Errno::EPERM),
            (WRITTEN, Some(_)) => reply.error(Errno::EPERM),
            _ => match self.attr(ino) {
                Some(attr) => reply.attr(&TTL, &attr),
                None => reply.error(Errno::ENOENT),
            },
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino {
            DEV | RATE | WRITTEN => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match ino {
            DEV => {
                let len = u64::from(size).min(self.size.saturating_sub(offset));
                let mut buf = vec![0u8; len as usize];
                match self.backing.read_exact_at(&mut buf, offset) {
                    Ok(()) => reply.data(&buf),
                    Err(e) => reply.error(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))),
                }
            }
            RATE => reply.data(text_slice(&self.rate_text(), offset, size)),
            WRITTEN => reply.data(text_slice(&self.written_text(), offset, size)),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match ino {
            DEV => {
                let taken_up = Instant::now();
                let len = data.len() as u64;
                if offset.checked_add(len).is_none_or(|end| end > self.size) {
                    reply.error(Errno::ENOSPC);
                    return;
                }
                let done = self.pacer.lock().unwrap().completion(taken_up, len);
                if let Err(e) = self.backing.write_all_at(data, offset) {
                    reply.error(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)));
                    return;
                }
                self.written.fetch_add(len, Ordering::Relaxed);
                std::thread::sleep(done.saturating_duration_since(Instant::now()));
                reply.written(data.len() as u32);
            }
            RATE => {
                let parsed = std::str::from_utf8(data).ok().and_then(|s| s.trim().parse::<u64>().ok());
                match parsed {
                    Some(rate) if offset == 0 => {
                        self.pacer.lock().unwrap().set_rate(rate, Instant::now());
                        reply.written(data.len() as u32);
                    }
                    _ => reply.error(Errno::EINVAL),
                }
            }
            WRITTEN => reply.error(Errno::EPERM),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        // every write was in the backing file when it was answered; a backing file on a
        // disk is made durable here
        let synced = if ino == DEV {
            if datasync {
                self.backing.sync_data()
            } else {
                self.backing.sync_all()
            }
        } else {
            Ok(())
        };
        match synced {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // the loop device's discard: holes punched in the backing file, not paced (a
        // discard moves no data); the device's size never changes
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        if ino != DEV || mode & !(punch | libc::FALLOC_FL_ZERO_RANGE) != 0 {
            reply.error(Errno::EOPNOTSUPP);
            return;
        }
        if offset.checked_add(length).is_none_or(|end| end > self.size) {
            reply.error(Errno::EINVAL);
            return;
        }
        // SAFETY: a plain syscall on a descriptor this process owns; no memory is passed
        let rc =
            unsafe { libc::fallocate(self.backing.as_raw_fd(), mode, offset as libc::off_t, length as libc::off_t) };
        if rc == 0 {
            reply.ok();
        } else {
            let errno = std::io::Error::last_os_error().raw_os_error();
            reply.error(Errno::from_i32(errno.unwrap_or(libc::EIO)));
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != ROOT {
            reply.error(Errno::ENOTDIR);
            return;
        }
        let entries = [(ROOT, FileType::Directory, "."), (ROOT, FileType::Directory, "..")]
            .into_iter()
            .chain(FILES.iter().map(|&(ino, name)| (ino, FileType::RegularFile, name)));
        for (i, (ino, kind, name)) in entries.enumerate().skip(offset as usize) {
            if reply.add(ino, (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// A byte count with an optional binary suffix: 4096, 512K, 3G.
fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        Some((i, 'T' | 't')) => (&s[..i], 40),
        _ => (s, 0),
    };
    let n: u64 = digits.parse().map_err(|_| format!("'{s}' is not a size: digits with an optional K, M, G or T"))?;
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("'{s}' is not a size between 1 byte and 2^64 − 1"))
}

#[derive(Parser)]
#[command(about = "Serve one file, `dev`, whose writes complete at a steady rate (see --help)")]
struct Args {
    /// Where to mount: the device appears as MOUNTPOINT/dev.
    mountpoint: PathBuf,
    /// The file that holds the device's data (created sparse; put it on tmpfs).
    #[arg(long)]
    backing: PathBuf,
    /// The device's size, bytes with an optional K, M, G or T suffix.
    #[arg(long, value_parser = parse_size)]
    size: u64,
    /// The initial write rate in bytes per second (0 = unpaced); MOUNTPOINT/rate changes it.
    #[arg(long, default_value_t = 0)]
    rate: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.mountpoint.is_dir() {
        bail!("mount point {} is not a directory", args.mountpoint.display());
    }
    let backing = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&args.backing)
        .with_context(|| format!("opening the backing file {}", args.backing.display()))?;
    backing.set_len(args.size).with_context(|| format!("sizing {} to {} bytes", args.backing.display(), args.size))?;
    let fs = PacedDevice {
        backing,
        size: args.size,
        pacer: Mutex::new(Pacer::new(args.rate, Instant::now())),
        written: AtomicU64::new(0),
        // SAFETY: getuid and getgid cannot fail and touch no memory
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
        started: SystemTime::now(),
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![MountOption::FSName("paced-device".into()), MountOption::RW];
    // Requests are taken up by whichever of these threads is free, so a write's take-up is
    // its arrival (up to this many in flight; the kernel sends at most 12 async requests by
    // default) and the server's own turnaround and copies are not idle time of the modelled
    // disk; the pacer then serves them one after another in take-up order.
    config.n_threads = Some(THREADS);
    config.clone_fd = true;
    fuser::mount(fs, &args.mountpoint, &config).with_context(|| format!("serving {}", args.mountpoint.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    #[test]
    fn a_write_on_an_idle_server_takes_its_size_over_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(100 * MB, t0);
        assert_eq!(p.completion(t0, MB), t0 + Duration::from_millis(10));
    }

    #[test]
    fn writes_arriving_together_queue_behind_each_other() {
        let t0 = Instant::now();
        let mut p = Pacer::new(100 * MB, t0);
        let a = p.completion(t0, MB);
        let b = p.completion(t0, MB);
        assert_eq!(b - a, Duration::from_millis(10));
        assert_eq!(b, t0 + Duration::from_millis(20));
    }

    #[test]
    fn an_idle_gap_is_not_credited_to_later_writes() {
        // the property the blkio throttle lacks: no burst after idling
        let t0 = Instant::now();
        let mut p = Pacer::new(100 * MB, t0);
        p.completion(t0, MB);
        let later = t0 + Duration::from_secs(5);
        assert_eq!(p.completion(later, 4 * MB), later + Duration::from_millis(40));
    }

    #[test]
    fn rate_zero_is_unpaced_and_a_new_rate_drops_the_backlog() {
        let t0 = Instant::now();
        let mut p = Pacer::new(0, t0);
        assert_eq!(p.completion(t0, 1 << 30), t0);
        p.set_rate(25 * MB, t0);
        p.completion(t0, 100 * MB);
        let t1 = t0 + Duration::from_millis(1);
        p.set_rate(50 * MB, t1);
        assert_eq!(p.completion(t1, 50 * MB), t1 + Duration::from_secs(1));
    }

    #[test]
    fn service_time_over_whole_ranges_matches_float_division() {
        for rate in [1, 25 * MB, 400 * MB, u64::MAX] {
            for bytes in [0, 1, 4096, 1 << 20, 1 << 30, u64::MAX / 2] {
                let exact = bytes as f64 / rate as f64;
                let got = service_time(bytes, rate).as_secs_f64();
                // whole nanoseconds, truncated: at most 1 ns short
                let tolerance = 1.5e-9 + 1e-15 * exact;
                assert!((got - exact).abs() <= tolerance, "{bytes} at {rate}");
            }
        }
    }

    #[test]
    fn sizes_take_binary_suffixes_and_reject_the_rest() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("3G"), Ok(3 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        for bad in ["", "G", "0", "1.5G", "-1", "1P", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
