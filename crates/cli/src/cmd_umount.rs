//! `squeezefs umount MOUNTPOINT`: unmount and wait until the daemon has flushed and
//! closed the pool (so the pool can be mounted or checked again at once).
use anyhow::{bail, Context, Result};
use squeezefs_fuse::mount;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct UmountArgs {
    /// Mount point of a squeezefs filesystem
    pub mountpoint: PathBuf,
    /// Detach a busy mount now; it goes away when its last user leaves
    #[arg(short = 'l', long)]
    pub lazy: bool,
    /// Seconds to wait for the daemon to finish flushing
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

pub fn run(args: UmountArgs) -> Result<()> {
    let mnt = std::fs::canonicalize(&args.mountpoint)
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    // the daemon's pid, to wait for its exit, and its pool, to read its report; a dead
    // daemon's mount is still unmounted
    let info = crate::cmd_stats::mount_info(&mnt).ok();
    let field = |key: &str| info.as_deref().and_then(|i| i.lines().find_map(|l| l.strip_prefix(key)));
    let pid = field("pid=").and_then(|p| p.parse::<i32>().ok());
    let pool = field("pool=").map(PathBuf::from);
    if pid.is_none() && !is_fuse_squeezefs_mount(&mnt) {
        bail!("{} is not a squeezefs mount", mnt.display());
    }
    mount::unmount(&mnt, args.lazy).map_err(|e| match e.raw_os_error() {
        Some(libc::EBUSY) => anyhow::anyhow!("unmounting {}: target is busy (use --lazy to detach)", mnt.display()),
        _ => anyhow::anyhow!("unmounting {}: {e}", mnt.display()),
    })?;
    if let (Some(pid), false) = (pid, args.lazy) {
        let deadline = Instant::now() + Duration::from_secs(args.timeout);
        while unsafe { libc::kill(pid, 0) } == 0 && !(is_zombie(pid) && other_threads_gone(pid)) {
            if Instant::now() > deadline {
                bail!("the daemon (pid {pid}) is still flushing after {} s", args.timeout);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(pool) = pool {
            check_unmount_report(&pool, pid, &mnt)?;
        }
    }
    Ok(())
}

/// The daemon's report on its last flush (cmd_mount.rs `UNMOUNT_REPORT`): an error, or no
/// report of this daemon at all (it died), means changes since the last commit are lost.
fn check_unmount_report(pool: &std::path::Path, pid: i32, mnt: &std::path::Path) -> Result<()> {
    let path = pool.join(crate::cmd_mount::UNMOUNT_REPORT);
    let report = std::fs::read_to_string(&path).unwrap_or_default();
    let mut lines = report.lines();
    if lines.next() != Some(&format!("pid={pid}")) {
        if !writable(pool) {
            return Ok(()); // the daemon had nowhere to write its report (read-only pool)
        }
        bail!(
            "unmounted {}, but the daemon (pid {pid}) exited without reporting its final flush \
             (killed or crashed?): changes after the pool's last commit may be lost; see {} and \
             run `squeezefs fsck {}`",
            mnt.display(),
            pool.join(crate::open_pool::LOG_FILE).display(),
            pool.display()
        );
    }
    match lines.next() {
        Some("flushed") => Ok(()),
        other => bail!(
            "unmounted {}, but flushing the pool failed: {}; see {}",
            mnt.display(),
            other.and_then(|l| l.strip_prefix("error=")).unwrap_or("no details"),
            pool.join(crate::open_pool::LOG_FILE).display()
        ),
    }
}

/// The main thread of an exiting daemon turns zombie before its other threads have torn
/// down, and the last of them closes the files: the pool's lock on its metadata store is
/// free only once they are gone (a mount of the same pool right after `umount` returned
/// found it "already open").
fn other_threads_gone(pid: i32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |d| d.count() <= 1)
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// /proc/self/mounts lists `mnt` with type fuse.squeezefs (daemon gone: ENOTCONN case).
fn is_fuse_squeezefs_mount(mnt: &std::path::Path) -> bool {
    let Ok(m) = std::fs::read_to_string("/proc/self/mounts") else { return false };
    m.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 2 && f[2] == mount::FS_TYPE && crate::on_mount::unescape_mount_field(f[1]) == mnt
    })
}

fn writable(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: c is a valid NUL-terminated path
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}
