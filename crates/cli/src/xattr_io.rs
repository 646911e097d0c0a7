//! Extended attributes of a path on a mount, without following symlinks: how the CLI
//! talks to a running daemon's virtual `user.squeezefs.*` attributes.
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cpath(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| std::io::Error::other("path contains NUL"))
}

/// lgetxattr with the size-probe protocol.
pub fn get_xattr(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let p = cpath(path)?;
    let n = CString::new(name).map_err(std::io::Error::other)?;
    loop {
        let len = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; len as usize];
        let got = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got >= 0 {
            buf.truncate(got as usize);
            return Ok(buf);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
    }
}

pub fn set_xattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let p = cpath(path)?;
    let n = CString::new(name).map_err(std::io::Error::other)?;
    let r = unsafe { libc::lsetxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
