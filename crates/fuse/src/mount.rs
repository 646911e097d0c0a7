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

/// Mount `fs` on `mountpoint`; the returned session is live (INIT answered), and the
/// transport says how its requests arrive.
pub fn mount(fs: Arc<Fs>, pool: &Path, mountpoint: &Path, cfg: &MountConfig) -> io::Result<(Session, Transport)> {
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

/// `MAJ:MIN` of the mount on `mountpoint` (an absolute path), as /proc/self/mountinfo lists it.
pub fn mount_device(mountpoint: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    crate::readahead::mount_dev_in_mountinfo(&info, mountpoint)
}

/// What `uring=` decides before the mount, from the caller and the kernel's `enable_uring`
/// parameter (`param`: None when the kernel has no such parameter, else whether it is Y).
///
/// The fast path needs three things: a root mount (the rings are registered on the
/// /dev/fuse descriptor the daemon opens itself; fusermount3 keeps it), a kernel with FUSE
/// over io_uring (the parameter exists), and the parameter at Y when INIT runs (its boot
/// default is N). `auto` (the default) and `on` write Y when it is N; `on` refuses to mount
/// when the fast path cannot be had, `auto` falls back to /dev/fuse saying why.
#[derive(Debug, PartialEq, Eq)]
pub enum UringPlan {
    /// ask the kernel for io_uring at INIT
    Ask,
    /// write Y to the parameter, then ask
    EnableAndAsk,
    /// serve /dev/fuse: why, and how to get the fast path
    DevFuse(String),
    /// `uring=on` cannot be had: refuse the mount with this reason
    Refuse(String),
}

pub fn plan_uring(mode: UringMode, root: bool, param: Option<bool>) -> UringPlan {
    let unavailable = |why: String| match mode {
        UringMode::On => UringPlan::Refuse(format!("uring=on: {why}")),
        _ => UringPlan::DevFuse(why),
    };
    match (mode, root, param) {
        (UringMode::Off, ..) => {
            UringPlan::DevFuse("uring=off was given (leave it out for FUSE over io_uring, the fast path)".into())
        }
        (_, false, _) => unavailable(
            "not a root mount: FUSE over io_uring serves root mounts only (mount as root for the fast path)".into(),
        ),
        (_, true, None) => unavailable(format!(
            "this kernel has no FUSE over io_uring ({} does not exist: it needs Linux 6.14 or later built \
             with CONFIG_FUSE_IO_URING)",
            uring::ENABLE_PARAM
        )),
        (_, true, Some(true)) => UringPlan::Ask,
        (_, true, Some(false)) => UringPlan::EnableAndAsk,
    }
}

/// How a mount receives its requests, once INIT is answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transport {
    /// per-CPU io_uring queues serving requests (0: /dev/fuse only)
    pub uring_queues: usize,
    /// `enable_uring` was N and this mount set it to Y
    pub enabled_uring: bool,
    /// requests come through /dev/fuse: why, and how to get the fast path
    pub fallback: Option<String>,
}

impl Transport {
    /// One line for the log and `user.squeezefs.mount`: `io_uring, N per-CPU queues` (and
    /// whether this mount switched the kernel parameter on), or `/dev/fuse (why)`.
    pub fn describe(&self) -> String {
        if self.uring_queues > 0 {
            let mut s = format!("io_uring, {} per-CPU queues", self.uring_queues);
            if self.enabled_uring {
                s.push_str(&format!("; this mount set {} to Y (it was N)", uring::ENABLE_PARAM));
            }
            s
        } else {
            match &self.fallback {
                Some(why) => format!("/dev/fuse ({why})"),
                None => "/dev/fuse".into(),
            }
        }
    }
}

/// The kernel parameter now: None when it does not exist.
fn uring_param() -> Option<bool> {
    Path::new(uring::ENABLE_PARAM).exists().then(uring::kernel_allows)
}

/// Carry out the plan up to INIT: whether to ask for io_uring, and the transport so far.
/// Writing Y never fails the mount under `auto`: a failed write falls back to /dev/fuse.
fn prepare_uring(cfg: &MountConfig, root: bool) -> io::Result<(bool, Transport)> {
    let mut t = Transport::default();
    let ask = match plan_uring(cfg.uring, root, uring_param()) {
        UringPlan::Ask => true,
        UringPlan::EnableAndAsk => match uring::kernel_enable() {
            Ok(()) => {
                t.enabled_uring = true;
                true
            }
            Err(e) if cfg.uring == UringMode::On => {
                return Err(io::Error::new(e.kind(), format!("uring=on: {e}")));
            }
            Err(e) => {
                t.fallback = Some(format!("{e}; write Y there as root for FUSE over io_uring, the fast path"));
                false
            }
        },
        UringPlan::DevFuse(why) => {
            t.fallback = Some(why);
            false
        }
        UringPlan::Refuse(why) => return Err(io::Error::new(io::ErrorKind::Unsupported, why)),
    };
    Ok((ask, t))
}

fn mount_session(fs: Arc<Fs>, pool: &Path, mountpoint: &Path, cfg: &MountConfig) -> io::Result<(Session, Transport)> {
    let root = unsafe { libc::geteuid() } == 0;
    let (ask, mut transport) = prepare_uring(cfg, root)?;
    let wants = InitWants { writeback: !cfg.read_only, uring: ask };
    let core = Arc::new(OpCore::new(fs.clone(), wants.writeback, Arc::new(RequestCounts::default())));
    let fsname = cfg.fsname.clone().unwrap_or_else(|| pool.display().to_string().replace(',', "_"));
    let fd =
        if root { mount_as_root(&fsname, mountpoint, cfg)? } else { mount_unprivileged(&fsname, mountpoint, cfg)? };
    let granted = devfuse::handshake(&fd, wants)?;
    // INIT is answered: the kernel said whether it takes rings on this connection
    if granted & abi::init::OVER_IO_URING != 0 {
        match fd.try_clone().and_then(|ring_fd| uring::start(core.clone(), ring_fd)) {
            Ok(n) => transport.uring_queues = n,
            Err(e) => transport.fallback = Some(format!("starting the io_uring queues failed: {e}")),
        }
    } else if ask {
        transport.fallback =
            Some(format!("the kernel did not offer FUSE over io_uring at INIT although {} is Y", uring::ENABLE_PARAM));
    }
    fs.set_transport(&transport.describe());
    Ok((Session::new(fd, core, n_threads()), transport))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uring_plan_over_every_mode_caller_and_kernel() {
        use UringMode::*;
        for mode in [Auto, On, Off] {
            for root in [false, true] {
                for param in [None, Some(false), Some(true)] {
                    let plan = plan_uring(mode, root, param);
                    let expected_ask = match (mode, root, param) {
                        (Off, ..) | (_, false, _) | (_, _, None) => None,
                        (_, true, Some(true)) => Some(UringPlan::Ask),
                        (_, true, Some(false)) => Some(UringPlan::EnableAndAsk),
                    };
                    match (expected_ask, &plan) {
                        (Some(want), got) => assert_eq!(got, &want, "{mode:?} root={root} {param:?}"),
                        (None, UringPlan::DevFuse(why)) => {
                            assert_ne!(mode, On, "uring=on never falls back before INIT: {why}");
                        }
                        (None, UringPlan::Refuse(why)) => {
                            assert_eq!(mode, On, "only uring=on refuses: {why}");
                            assert!(why.starts_with("uring=on: "), "{why}");
                        }
                        (None, other) => panic!("{mode:?} root={root} {param:?}: {other:?}"),
                    }
                }
            }
        }
        // each fallback says why and how to get the fast path
        let why = |p| match p {
            UringPlan::DevFuse(w) => w,
            other => panic!("{other:?}"),
        };
        assert!(why(plan_uring(Off, true, Some(true))).contains("uring=off"));
        assert!(why(plan_uring(Auto, false, Some(true))).contains("mount as root"));
        let no_kernel = why(plan_uring(Auto, true, None));
        assert!(no_kernel.contains(uring::ENABLE_PARAM) && no_kernel.contains("6.14"), "{no_kernel}");
    }

    #[test]
    fn transport_descriptions_name_the_path_and_the_reason() {
        let t = Transport { uring_queues: 2, enabled_uring: true, fallback: None };
        assert!(t.describe().starts_with("io_uring, 2 per-CPU queues; this mount set"), "{}", t.describe());
        let t = Transport { uring_queues: 2, enabled_uring: false, fallback: None };
        assert_eq!(t.describe(), "io_uring, 2 per-CPU queues");
        let t = Transport { uring_queues: 0, enabled_uring: false, fallback: Some("uring=off was given".into()) };
        assert_eq!(t.describe(), "/dev/fuse (uring=off was given)");
    }
}
