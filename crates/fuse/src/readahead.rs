//! Kernel readahead window of the mount (its backing_dev_info).
//!
//! The kernel offers FUSE at most its default readahead (128 KiB) in INIT and lowers the
//! mount's window to what the daemon answers, so `max_readahead` in INIT cannot raise it.
//! With 128 KiB the kernel sends sequential readers requests of 128–256 KiB one or two at a
//! time: every record costs a request round trip and the workers idle between requests.
//! After INIT the window is the bdi's `read_ahead_kb` in sysfs, writable by root: a window
//! of several max-size (1 MiB) requests keeps several reads in flight on the request
//! threads, as the block layer does for a kernel filesystem. Unprivileged mounts keep the
//! kernel's window (sysfs is root-only).
use std::io;
use std::path::Path;

/// Readahead window of a squeezefs mount: four 1 MiB requests in flight per sequential reader.
pub const READ_AHEAD_KB: u32 = 4096;

/// `major:minor` of the mount at `mountpoint` in /proc/self/mountinfo text (the last mount on
/// that path, i.e. the one on top). Mount points are octal-escaped there (`\040` = space).
pub fn mount_dev_in_mountinfo(mountinfo: &str, mountpoint: &Path) -> Option<String> {
    let want = escape_mountinfo(mountpoint);
    mountinfo.lines().rev().find_map(|l| {
        let mut f = l.split(' ');
        let dev = f.nth(2)?;
        let _root = f.next()?;
        let mp = f.next()?;
        (mp == want).then(|| dev.to_string())
    })
}

/// The octal escapes the kernel writes for space, tab, newline and backslash in mountinfo.
fn escape_mountinfo(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut s = String::new();
    for &b in p.as_os_str().as_bytes() {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => s.push_str(&format!("\\{b:03o}")),
            _ => s.push(b as char),
        }
    }
    s
}

/// Set the readahead window of the mount on `mountpoint` (after INIT, which would lower it
/// again) to `kb` KiB.
pub fn raise(mountpoint: &Path, kb: u32) -> io::Result<()> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let dev = mount_dev_in_mountinfo(&info, mountpoint).ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("{} is not in /proc/self/mountinfo", mountpoint.display()))
    })?;
    std::fs::write(format!("/sys/class/bdi/{dev}/read_ahead_kb"), format!("{kb}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
80 22 0:40 / /mnt/a\\040b rw,nosuid,nodev,relatime shared:40 - fuse.squeezefs /p rw,user_id=0
81 22 0:41 / /mnt/c rw,relatime shared:41 - fuse.squeezefs /q rw,user_id=0
82 22 0:42 / /mnt/c rw,relatime shared:42 - fuse.squeezefs /r rw,user_id=0
";

    #[test]
    fn finds_escaped_and_topmost_mount() {
        assert_eq!(mount_dev_in_mountinfo(INFO, Path::new("/mnt/a b")).as_deref(), Some("0:40"));
        assert_eq!(mount_dev_in_mountinfo(INFO, Path::new("/mnt/c")).as_deref(), Some("0:42"));
        assert_eq!(mount_dev_in_mountinfo(INFO, Path::new("/")).as_deref(), Some("254:0"));
        assert_eq!(mount_dev_in_mountinfo(INFO, Path::new("/mnt")), None);
        assert_eq!(mount_dev_in_mountinfo("", Path::new("/mnt/c")), None);
    }
}
