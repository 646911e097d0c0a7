//! Establishing and tearing down the kernel mount.
//!
//! As root we call mount(2) ourselves with type `fuse.squeezefs` and the pool as source,
//! so /proc/mounts reads `POOL MNT fuse.squeezefs ...` like any other filesystem.
//! Unprivileged users go through the setuid fusermount3 helper (fusermount.rs). Either way
//! the /dev/fuse descriptor is then served by devfuse.rs (INIT, request threads) and, when
//! the kernel agreed at INIT, by the io_uring queues (uring/).
use crate::devfuse::{self, InitWants, Session};
use crate::mount_config::{MountConfig, UringMode};
use crate::opcore::OpCore;
use crate::requests::RequestCounts;
use crate::{abi, fusermount, uring};
use squeezefs_fs::Fs;
use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

pub const FS_TYPE: &str = "fuse.squeezefs";

/// Request-serving threads (each with its own cloned /dev/fuse descriptor).
/// `SQUEEZEFS_FUSE_THREADS` overrides the default (2 × cores, 4..=16) for experiments.
fn n_threads() -> usize {
    if let Some(n) = std::env::var("SQUEEZEFS_FUSE_THREADS").ok().and_then(|v| v.parse::<usize>().ok()) {
        return n.clamp(1, 64);
    }
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8) * 2
}

fn cstring(p: &[u8]) -> io::Result<CString> {
    CString::new(p).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Mount `fs` on `mountpoint`; the returned session is live (INIT answered).
pub fn mount(fs: Arc<Fs>, pool: &Path, mountpoint: &Path, cfg: &MountConfig) -> io::Result<Session> {
    let s = mount_session(fs, pool, mountpoint, cfg)?;
    // INIT is answered, so the kernel will not lower the window again; nothing serves
    // requests yet, so the mount is found in mountinfo, never by touching its root
    let abs = match (mountpoint.parent(), mountpoint.file_name()) {
        (Some(d), Some(n)) if !d.as_os_str().is_empty() => std::fs::canonicalize(d).map(|d| d.join(n)),
        _ => std::fs::canonicalize(".").map(|d| d.join(mountpoint)),
    };
    match abs.and_then(|p| crate::readahead::raise(&p, crate::readahead::READ_AHEAD_KB)) {
        Ok(()) => log::debug!("readahead window {} KiB", crate::readahead::READ_AHEAD_KB),
        Err(e) => log::info!("kept the kernel's readahead window (128 KiB): {e}"),
    }
    Ok(s)
}

/// Whether to ask the kernel for the io_uring transport at INIT (root mounts only: the
/// rings are registered on the /dev/fuse descriptor we open ourselves).
fn want_uring(cfg: &MountConfig) -> bool {
    match cfg.uring {
        UringMode::Off => false,
        UringMode::Auto => uring::kernel_allows(),
        UringMode::On => {
            if !uring::kernel_allows() {
                match uring::kernel_enable() {
                    Ok(()) => log::info!("switched on FUSE over io_uring ({})", uring::ENABLE_PARAM),
                    Err(e) => log::warn!("uring=on: {e}; serving /dev/fuse"),
                }
            }
            uring::kernel_allows()
        }
    }
}

fn mount_session(fs: Arc<Fs>, pool: &Path, mountpoint: &Path, cfg: &MountConfig) -> io::Result<Session> {
    let root = unsafe { libc::geteuid() } == 0;
    let wants = InitWants { writeback: !cfg.read_only, uring: root && want_uring(cfg) };
    let core = Arc::new(OpCore::new(fs, wants.writeback, Arc::new(RequestCounts::default())));
    let fsname = cfg.fsname.clone().unwrap_or_else(|| pool.display().to_string().replace(',', "_"));
    let fd =
        if root { mount_as_root(&fsname, mountpoint, cfg)? } else { mount_unprivileged(&fsname, mountpoint, cfg)? };
    let granted = devfuse::handshake(&fd, wants)?;
    // INIT is answered: the kernel said whether it takes rings on this connection
    if granted & abi::init::OVER_IO_URING != 0 {
        match fd.try_clone().and_then(|ring_fd| uring::start(core.clone(), ring_fd)) {
            Ok(n) => log::info!("serving FUSE requests over io_uring: {n} per-CPU queues"),
            Err(e) => log::warn!("FUSE over io_uring did not start ({e}); serving /dev/fuse"),
        }
    }
    Ok(Session::new(fd, core, n_threads()))
}

/// Mount through fusermount3 with the options it understands.
fn mount_unprivileged(fsname: &str, mountpoint: &Path, cfg: &MountConfig) -> io::Result<OwnedFd> {
    let mut opts = vec![format!("fsname={fsname}"), "subtype=squeezefs".to_string()];
    for (on, opt) in [
        (cfg.allow_other, "allow_other"),
        (cfg.kernel_checks_permissions(), "default_permissions"),
        (cfg.read_only, "ro"),
        (cfg.flags.noexec, "noexec"),
        (cfg.flags.noatime, "noatime"),
        // asked-for durability must not be dropped on the fusermount path
        (cfg.flags.sync, "sync"),
        (cfg.flags.dirsync, "dirsync"),
    ] {
        if on {
            opts.push(opt.to_string());
        }
    }
    fusermount::mount(mountpoint, &opts.join(",")).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{e} (unprivileged mounts need read/write access to /dev/fuse and a setuid fusermount3)"),
        )
    })
}

fn mount_as_root(fsname: &str, mountpoint: &Path, cfg: &MountConfig) -> io::Result<OwnedFd> {
    let root_mode = std::fs::metadata(mountpoint)?.mode() & libc::S_IFMT;
    let dev = cstring(b"/dev/fuse")?;
    let raw = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("opening /dev/fuse: {e} (is the fuse module loaded?)")));
    }
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // The fs core checks permissions unless default_permissions was given; the kernel
    // checks too when asked to or when other users reach the mount (`kernel_checks_permissions`).
    let mut data = format!("fd={raw},rootmode={root_mode:o},user_id=0,group_id=0");
    if cfg.kernel_checks_permissions() {
        data.push_str(",default_permissions");
    }
    if cfg.allow_other {
        data.push_str(",allow_other");
    }
    data.push_str(&format!(",max_read={}", 1 << 20));
    let mut flags: libc::c_ulong = 0;
    if cfg.read_only {
        flags |= libc::MS_RDONLY;
    }
    if cfg.flags.nodev {
        flags |= libc::MS_NODEV;
    }
    if cfg.flags.nosuid {
        flags |= libc::MS_NOSUID;
    }
    if cfg.flags.noexec {
        flags |= libc::MS_NOEXEC;
    }
    if cfg.flags.noatime {
        flags |= libc::MS_NOATIME;
    }
    if cfg.flags.sync {
        flags |= libc::MS_SYNCHRONOUS;
    }
    if cfg.flags.dirsync {
        flags |= libc::MS_DIRSYNC;
    }
    let src = cstring(fsname.as_bytes())?;
    let target = cstring(mountpoint.as_os_str().as_bytes())?;
    let fstype = cstring(FS_TYPE.as_bytes())?;
    let data_c = cstring(data.as_bytes())?;
    let r = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, data_c.as_ptr().cast()) };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("mount({}) failed: {e}", mountpoint.display())));
    }
    Ok(fd)
}

/// Unmount `mountpoint`. `lazy` detaches a busy mount (MNT_DETACH).
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    if unsafe { libc::geteuid() } == 0 {
        let target = cstring(mountpoint.as_os_str().as_bytes())?;
        let r = unsafe { libc::umount2(target.as_ptr(), if lazy { libc::MNT_DETACH } else { 0 }) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(());
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg(mountpoint).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "fusermount3 -u {}: {}",
            mountpoint.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Abort the FUSE connection serving `dev` (st_dev of the mount root) through fusectl,
/// so a detached-but-busy mount stops waiting for its last user.
pub fn abort_connection(dev: u64) -> io::Result<()> {
    let minor = libc::minor(dev as libc::dev_t);
    let dir = Path::new("/sys/fs/fuse/connections");
    if !dir.join(minor.to_string()).exists() {
        let _ =
            std::process::Command::new("mount").args(["-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"]).status();
    }
    std::fs::write(dir.join(minor.to_string()).join("abort"), b"1")
}
