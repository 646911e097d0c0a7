//! The holder lock of a pool (`POOL/squeezefs.lock`): who has the pool open, and whether it
//! is closing.
//!
//! redb locks `meta.redb` for as long as a process has the store open, and a mount daemon
//! keeps it open after the unmount while it flushes and commits. That lock alone cannot tell
//! a pool that is in use (a second mount must be refused at once) from one whose daemon is
//! closing it (a mount right after `umount` should wait for it). The holder lock can:
//!
//! States of a pool, as a process about to open it sees them:
//! * FREE: no holder lock, store not open → it opens.
//! * HELD: the holder lock is taken (exclusively by a read-write opener, shared by read-only
//!   ones) and the holder is not a mount daemon whose mount is gone → refused at once
//!   ([`Refusal::InUse`]).
//! * CLOSING: the holder lock is free but the store is still open (the holder gave the lock
//!   up when it began to close, [`PoolLock`] dropped by `Engine::close`), or the holder is a
//!   mount daemon whose mount is no longer in its mount table (unmounted; the daemon has not
//!   yet seen its connection end) → [`Refusal::Closing`]; `squeezefs mount` waits (bounded)
//!   and tries again.
//!
//! Transitions: FREE → HELD (open), HELD → CLOSING (close begins, or the mount goes away),
//! CLOSING → FREE (the store is closed). A process that dies loses its locks with it (the
//! kernel drops them with its last descriptor), so no state outlives its holder: a crashed
//! daemon never blocks a mount.
//!
//! The file's content only informs (who holds it, for messages, and which mount a daemon
//! serves): lines `pid=N`, and for a mount daemon `mount=MAJ:MIN` (the mount's device as
//! /proc/PID/mountinfo lists it) and `mountpoint=PATH`. Holders rewrite it in place; it is
//! never replaced by a rename, which would leave the lock on an unlinked inode. A pool on a
//! read-only filesystem without the file is opened read-only without a holder lock (nothing
//! can write the pool there anyway).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

pub const LOCK_FILE: &str = "squeezefs.lock";

/// The holder lock, held until dropped.
pub struct PoolLock {
    file: Option<File>,
    /// the pid the file named when the lock was taken: the previous holder, which may still
    /// have the store open while it closes
    previous_pid: Option<u32>,
}

/// Who holds a pool, as far as the lock file tells.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub mount_dev: Option<String>,
    pub mountpoint: Option<String>,
}

impl Holder {
    /// `key=value` lines of the lock file; unknown or broken lines are skipped.
    pub fn parse(text: &str) -> Holder {
        let mut h = Holder::default();
        for line in text.lines() {
            match line.split_once('=') {
                Some(("pid", v)) => h.pid = v.parse().ok().filter(|&p| p > 0),
                Some(("mount", v)) if !v.is_empty() => h.mount_dev = Some(v.to_string()),
                Some(("mountpoint", v)) if !v.is_empty() => h.mountpoint = Some(v.to_string()),
                _ => {}
            }
        }
        h
    }

    fn encode(&self) -> String {
        let mut s = String::new();
        if let Some(p) = self.pid {
            s.push_str(&format!("pid={p}\n"));
        }
        if let Some(d) = &self.mount_dev {
            s.push_str(&format!("mount={d}\n"));
        }
        if let Some(m) = &self.mountpoint {
            s.push_str(&format!("mountpoint={}\n", m.replace('\n', "?")));
        }
        s
    }

    /// `pid N, mounted on M`, `pid N`, or `another process`.
    pub fn describe(&self) -> String {
        match (self.pid, &self.mountpoint) {
            (Some(p), Some(m)) => format!("pid {p}, mounted on {m}"),
            (Some(p), None) => format!("pid {p}"),
            (None, _) => "another process".into(),
        }
    }
}

/// Why the holder lock could not be taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    InUse(Holder),
    Closing(Holder),
}

/// Does a mountinfo text list a mount with device `dev` (`MAJ:MIN`, its third field)?
pub fn mountinfo_has_dev(mountinfo: &str, dev: &str) -> bool {
    mountinfo.lines().any(|l| l.split(' ').nth(2) == Some(dev))
}

/// Is the mount a daemon recorded still in that daemon's mount table? A process that is
/// gone has no mount (its lock goes with it); a table that cannot be read (another user's
/// process) counts as live, so nothing waits on a guess.
fn mount_alive(pid: u32, dev: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) {
        Ok(text) => mountinfo_has_dev(&text, dev),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// A held lock's holder: in use, or closing when it is a mount daemon whose mount is gone.
fn classify_held(h: Holder, alive: impl Fn(u32, &str) -> bool) -> Refusal {
    match (h.pid, &h.mount_dev) {
        (Some(pid), Some(dev)) if !alive(pid, dev) => Refusal::Closing(h),
        _ => Refusal::InUse(h),
    }
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists
    i32::try_from(pid).is_ok_and(
        |p| unsafe { libc::kill(p, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM),
    )
}

/// `flock(2)` on `f`, retried on EINTR.
pub(crate) fn flock(f: &File, op: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: plain syscall on a descriptor we own
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn read_holder(f: &mut File) -> Holder {
    let mut text = String::new();
    let _ = f.seek(SeekFrom::Start(0)).and_then(|_| f.read_to_string(&mut text));
    Holder::parse(&text)
}

impl PoolLock {
    /// Take the holder lock of `pool` (exclusive for a read-write open, shared for a
    /// read-only one) and name this process in it.
    pub fn acquire(pool: &Path, read_only: bool) -> Result<PoolLock, Refusal> {
        let path = pool.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .or_else(|e| if read_only { File::open(&path) } else { Err(e) });
        let mut file = match file {
            Ok(f) => f,
            // a read-only pool directory without the file: nothing can write the pool, and
            // a read-write open fails on the store anyway
            Err(e) => {
                log::info!("{}: {e}; opening without the holder lock", path.display());
                return Ok(PoolLock { file: None, previous_pid: None });
            }
        };
        let op = if read_only { libc::LOCK_SH } else { libc::LOCK_EX };
        if let Err(e) = flock(&file, op | libc::LOCK_NB) {
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(classify_held(read_holder(&mut file), mount_alive));
            }
            log::info!("{}: flock: {e}; opening without the holder lock", path.display());
            return Ok(PoolLock { file: None, previous_pid: None });
        }
        let previous_pid = read_holder(&mut file).pid.filter(|&p| pid_alive(p));
        Ok(PoolLock { file: Some(file), previous_pid })
    }

    /// Name this process in the file, once the pool is open (before, the file keeps naming
    /// the previous holder, which a process waiting for it reports).
    pub fn claim(&self) {
        self.write(&Holder { pid: Some(std::process::id()), ..Holder::default() });
    }

    /// The process that held the pool before (named in the file, still alive): the one that
    /// has the store open when this process finds it open.
    pub fn previous_holder(&self) -> Holder {
        Holder { pid: self.previous_pid, ..Holder::default() }
    }

    /// Whether the lock is really held (false: a read-only pool without the lock file).
    pub fn is_held(&self) -> bool {
        self.file.is_some()
    }

    /// Record the mount this process serves (its device `MAJ:MIN` and path): once that mount
    /// is gone, another process may wait for this one instead of refusing.
    pub fn record_mount(&self, dev: &str, mountpoint: &Path) {
        self.write(&Holder {
            pid: Some(std::process::id()),
            mount_dev: Some(dev.to_string()),
            mountpoint: Some(mountpoint.display().to_string()),
        });
    }

    /// Best effort: the content only informs, and a read-only file keeps the old one.
    fn write(&self, h: &Holder) {
        let Some(f) = &self.file else { return };
        let mut f: &File = f;
        let body = h.encode();
        let r = f
            .seek(SeekFrom::Start(0))
            .and_then(|_| f.write_all(body.as_bytes()))
            .and_then(|()| f.set_len(body.len() as u64));
        if let Err(e) = r {
            log::debug!("writing the pool's holder lock file: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_lines_round_trip_and_junk_is_skipped() {
        let h = Holder { pid: Some(42), mount_dev: Some("0:51".into()), mountpoint: Some("/mnt/a b".into()) };
        assert_eq!(Holder::parse(&h.encode()), h);
        assert_eq!(h.describe(), "pid 42, mounted on /mnt/a b");
        assert_eq!(Holder::parse("pid=x\nmount=\nnoise\n=\npid=0"), Holder::default());
        assert_eq!(Holder::parse("pid=7").describe(), "pid 7");
        assert_eq!(Holder::default().describe(), "another process");
        // a half-written file (a reader racing a rewrite) parses to what is there
        assert_eq!(Holder::parse("pid=12\nmou").pid, Some(12));
    }

    #[test]
    fn mountinfo_lookup_by_device() {
        let info = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    80 22 0:40 / /mnt/x rw,nosuid,nodev,relatime shared:40 - fuse.squeezefs /p rw,user_id=0\n";
        assert!(mountinfo_has_dev(info, "0:40"));
        assert!(mountinfo_has_dev(info, "254:0"));
        assert!(!mountinfo_has_dev(info, "0:4"));
        assert!(!mountinfo_has_dev("", "0:40"));
    }

    #[test]
    fn a_held_lock_is_closing_only_when_the_daemons_mount_is_gone() {
        let daemon = Holder { pid: Some(9), mount_dev: Some("0:40".into()), mountpoint: Some("/m".into()) };
        let command = Holder { pid: Some(9), ..Holder::default() };
        assert_eq!(classify_held(daemon.clone(), |_, _| true), Refusal::InUse(daemon.clone()));
        assert_eq!(classify_held(daemon.clone(), |_, _| false), Refusal::Closing(daemon));
        // a command (fsck, a test) or an unknown holder has no mount to lose: in use
        assert_eq!(classify_held(command.clone(), |_, _| false), Refusal::InUse(command));
        assert_eq!(classify_held(Holder::default(), |_, _| false), Refusal::InUse(Holder::default()));
    }

    #[test]
    fn the_lock_excludes_writers_shares_readers_and_goes_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let rw = PoolLock::acquire(dir.path(), false).unwrap();
        assert!(rw.is_held());
        rw.claim();
        let me = Holder { pid: Some(std::process::id()), ..Holder::default() };
        assert_eq!(PoolLock::acquire(dir.path(), false).err(), Some(Refusal::InUse(me.clone())));
        assert_eq!(PoolLock::acquire(dir.path(), true).err(), Some(Refusal::InUse(me.clone())));
        // a mount recorded in this process's table: still in use; a device no mount has: closing
        let dev = crate::base::pool_lock::tests::some_mounted_dev();
        rw.record_mount(&dev, Path::new("/somewhere"));
        assert!(matches!(PoolLock::acquire(dir.path(), false), Err(Refusal::InUse(_))));
        rw.record_mount("4095:1048575", Path::new("/gone"));
        let Err(Refusal::Closing(h)) = PoolLock::acquire(dir.path(), false) else { panic!("not closing") };
        assert_eq!(h.pid, Some(std::process::id()));
        drop(rw);
        let r1 = PoolLock::acquire(dir.path(), true).unwrap();
        assert_eq!(r1.previous_holder().pid, Some(std::process::id()), "the file still names the last holder");
        r1.claim();
        let r2 = PoolLock::acquire(dir.path(), true).unwrap();
        assert!(matches!(PoolLock::acquire(dir.path(), false), Err(Refusal::InUse(_))));
        drop((r1, r2));
        assert!(PoolLock::acquire(dir.path(), false).is_ok());
    }

    /// The device of the filesystem holding /, as this process's mountinfo lists it.
    fn some_mounted_dev() -> String {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        info.lines().next().and_then(|l| l.split(' ').nth(2)).unwrap().to_string()
    }
}
