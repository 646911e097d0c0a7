//! Where a path lies on a mounted squeezefs: the mount's root, the pool its daemon serves
//! (for the control channel, crates/ctlsock) and the path relative to the root, with clear
//! errors for a path that does not exist, one outside any squeezefs mount, and a mount
//! whose daemon is gone; and the mount table's escaped paths (`unescape_mount_field`), read
//! by mount and umount too.
use anyhow::{anyhow, bail, Result};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A path on a squeezefs mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnMount {
    /// the mount's root directory
    pub root: PathBuf,
    /// the pool directory of the daemon serving it
    pub pool: PathBuf,
    /// the path relative to the root (`/`-separated bytes, empty for the root)
    pub rel: Vec<u8>,
    /// the canonical path
    pub path: PathBuf,
}

/// The root of the mount holding `path`: the topmost ancestor on the same device.
pub fn mount_root(path: &Path) -> PathBuf {
    let Ok(dev) = std::fs::metadata(path).map(|m| m.dev()) else { return path.to_path_buf() };
    let mut root = path.to_path_buf();
    while let Some(parent) = root.parent() {
        match std::fs::metadata(parent) {
            Ok(m) if m.dev() == dev => root = parent.to_path_buf(),
            _ => break,
        }
    }
    root
}

fn gone(what: &Path) -> anyhow::Error {
    anyhow!(
        "{}: the squeezefs daemon serving this mount is gone (transport endpoint is not connected); \
         `umount -l` it, then mount the pool again",
        what.display()
    )
}

/// The squeezefs mount point at or above `path` (the deepest one /proc/self/mountinfo lists)
/// whose daemon is gone: asking it for its mount attribute, which the kernel never
/// caches, fails with ENOTCONN. (Its cached attributes and names may still answer.)
fn dead_mount_above(path: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = info
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = unescape_mount_field(left.split(' ').nth(4)?);
            (right.split(' ').next()? == squeezefs_fuse::mount::FS_TYPE && abs.starts_with(&point)).then_some(point)
        })
        .max_by_key(|p| p.as_os_str().len())?;
    let e = crate::xattr_io::get_xattr(&mount, squeezefs_fs::xattr_names::MOUNT).err()?;
    (e.raw_os_error() == Some(libc::ENOTCONN)).then_some(mount)
}

/// Locate `path` (module comment).
pub fn locate(path: &Path) -> Result<OnMount> {
    let canonical = std::fs::canonicalize(path).map_err(|e| {
        // a dead FUSE mount on the way answers ENOTCONN, though realpath may say ENOENT
        if let Some(dead) = dead_mount_above(path) {
            return gone(&dead);
        }
        match e.raw_os_error() {
            Some(libc::ENOENT) => anyhow!("{}: no such file or directory", path.display()),
            _ => anyhow!("{}: {e}", path.display()),
        }
    })?;
    let root = mount_root(&canonical);
    let info = match crate::xattr_io::get_xattr(&root, squeezefs_fs::xattr_names::MOUNT) {
        Ok(v) => String::from_utf8_lossy(&v).into_owned(),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Err(gone(&root)),
        Err(_) => bail!("{} is not on a squeezefs mount", path.display()),
    };
    let pool = info.lines().find_map(|l| l.strip_prefix("pool=")).ok_or_else(|| {
        anyhow!("{}: the daemon of this mount does not name its pool (an older version?)", root.display())
    })?;
    let rel = canonical.strip_prefix(&root).map_err(|_| anyhow!("{} lies outside its mount", canonical.display()))?;
    Ok(OnMount { root, pool: PathBuf::from(pool), rel: rel.as_os_str().as_bytes().to_vec(), path: canonical })
}

/// /proc/mounts writes space, tab, newline and backslash in paths as `\ooo` octal escapes;
/// the bytes between are the path's own (not necessarily UTF-8).
pub fn unescape_mount_field(f: &str) -> PathBuf {
    let b = f.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = (b[i] == b'\\' && i + 3 < b.len())
            .then(|| {
                b[i + 1..i + 4]
                    .iter()
                    .try_fold(0u32, |v, c| (b'0'..=b'7').contains(c).then(|| v * 8 + u32::from(c - b'0')))
            })
            .flatten()
            .and_then(|v| u8::try_from(v).ok());
        if let Some(byte) = octal {
            out.push(byte);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::unescape_mount_field;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    #[test]
    fn proc_mounts_octal_escapes_are_undone() {
        assert_eq!(unescape_mount_field("/mnt/a\\040b"), Path::new("/mnt/a b"));
        assert_eq!(unescape_mount_field("/x\\011y\\012z\\134"), Path::new("/x\ty\nz\\"));
        // not an escape: left as it is
        assert_eq!(unescape_mount_field("/p\\9ab\\777"), Path::new("/p\\9ab\\777"));
        assert_eq!(unescape_mount_field("/end\\04"), Path::new("/end\\04"));
        // a byte that is not UTF-8 comes back as it was
        assert_eq!(unescape_mount_field("/l\\351t").as_os_str().as_bytes(), b"/l\xe9t");
    }
}
