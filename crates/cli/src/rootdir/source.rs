//! The source side of the copy: what the host says about an entry (lstat, extended
//! attributes, symlink target), opening a regular file without following links or blocking,
//! and its data ranges found with SEEK_DATA / SEEK_HOLE.
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use squeezefs_fs::{FileKind, Timestamp};

/// What the copy keeps of a host inode's `stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrcStat {
    pub dev: u64,
    pub ino: u64,
    pub kind: Option<FileKind>,
    /// permission bits with setuid, setgid and sticky (0o7777)
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub size: u64,
    /// 512-byte blocks allocated
    pub blocks: u64,
    pub rdev: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

impl SrcStat {
    pub fn from_metadata(m: &std::fs::Metadata) -> SrcStat {
        let ts = |secs: i64, nanos: i64| Timestamp { secs, nanos: nanos.clamp(0, 999_999_999) as u32 };
        SrcStat {
            dev: m.dev(),
            ino: m.ino(),
            kind: kind_of(m.mode()),
            perm: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            nlink: m.nlink(),
            size: m.size(),
            blocks: m.blocks(),
            rdev: m.rdev(),
            atime: ts(m.atime(), m.atime_nsec()),
            mtime: ts(m.mtime(), m.mtime_nsec()),
            ctime: ts(m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether the file's content may have changed between two stats of it (size, mtime
    /// or ctime moved: a write, a truncation or anything else that touched the inode).
    pub fn changed_since(&self, before: &SrcStat) -> bool {
        (self.size, self.mtime, self.ctime) != (before.size, before.mtime, before.ctime)
    }

    /// Whether the file may hold holes: fewer bytes allocated than its size. A file that is
    /// not sparse is read without SEEK_DATA/SEEK_HOLE (two system calls per file saved).
    pub fn may_be_sparse(&self) -> bool {
        self.blocks.saturating_mul(512) < self.size
    }
}

/// The entry type of a `st_mode`; `None` for a type the pool has no kind for.
pub fn kind_of(mode: u32) -> Option<FileKind> {
    Some(match mode & libc::S_IFMT {
        libc::S_IFREG => FileKind::File,
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        libc::S_IFCHR => FileKind::CharDev,
        libc::S_IFBLK => FileKind::BlockDev,
        libc::S_IFIFO => FileKind::Fifo,
        libc::S_IFSOCK => FileKind::Socket,
        _ => return None,
    })
}

pub fn lstat(p: &Path) -> io::Result<SrcStat> {
    Ok(SrcStat::from_metadata(&std::fs::symlink_metadata(p)?))
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Names and values of an entry's extended attributes (not following a symlink), in the
/// order the host lists them. Those the caller may not read are not listed by the kernel
/// (`trusted.*` without CAP_SYS_ADMIN). A host filesystem without xattrs gives none.
pub fn xattrs(p: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = cpath(p)?;
    let names = loop {
        // SAFETY: a size query with a null buffer
        let len = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOTSUP) => Ok(Vec::new()),
                _ => Err(e),
            };
        }
        if len == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; len as usize];
        // SAFETY: buf is valid for buf.len() bytes
        let got = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue; // the list grew between the two calls
            }
            return Err(e);
        }
        buf.truncate(got as usize);
        break buf;
    };
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        match xattr_value(&c, name)? {
            Some(v) => out.push((name.to_vec(), v)),
            None => continue, // removed meanwhile
        }
    }
    Ok(out)
}

fn xattr_value(path: &CString, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let n = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: a size query with a null buffer
        let len = unsafe { libc::lgetxattr(path.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            let e = io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::ENODATA) { Ok(None) } else { Err(e) };
        }
        let mut buf = vec![0u8; len as usize];
        // SAFETY: buf is valid for buf.len() bytes
        let got = unsafe { libc::lgetxattr(path.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => continue, // the value grew between the two calls
                Some(libc::ENODATA) => return Ok(None),
                _ => return Err(e),
            }
        }
        buf.truncate(got as usize);
        return Ok(Some(buf));
    }
}

/// What a directory listing says of an entry's type (`d_type`): a regular file can be
/// opened without an lstat first; anything else (or a filesystem that does not say) is
/// lstat'ed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    File,
    Other,
}

/// The names in a directory (without `.` and `..`), read through a descriptor opened with
/// O_NOATIME where the kernel allows it, so listing the source leaves its atime alone.
pub fn list_dir(p: &Path) -> io::Result<Vec<(std::ffi::OsString, Listed)>> {
    use std::os::unix::ffi::OsStringExt;
    let c = cpath(p)?;
    let base = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: open of a NUL-terminated path
    let mut fd = unsafe { libc::open(c.as_ptr(), base | libc::O_NOATIME) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
        // SAFETY: as above
        fd = unsafe { libc::open(c.as_ptr(), base) };
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a directory descriptor we own; fdopendir takes it over (closedir closes it)
    let dir = unsafe { libc::fdopendir(fd) };
    if dir.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so the descriptor is still ours
        unsafe { libc::close(fd) };
        return Err(e);
    }
    let mut out = Vec::new();
    let result = loop {
        // readdir reports an error only through errno, with a null result
        // SAFETY: errno is thread-local
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: dir is a valid DIR stream until closedir below
        let ent = unsafe { libc::readdir64(dir) };
        if ent.is_null() {
            let e = io::Error::last_os_error();
            break if e.raw_os_error() == Some(0) { Ok(()) } else { Err(e) };
        }
        // SAFETY: d_name is NUL-terminated inside the entry readdir returned
        let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            // SAFETY: as above
            let listed = if unsafe { (*ent).d_type } == libc::DT_REG { Listed::File } else { Listed::Other };
            out.push((std::ffi::OsString::from_vec(name.to_vec()), listed));
        }
    };
    // SAFETY: closes the stream and its descriptor once
    unsafe { libc::closedir(dir) };
    result.map(|()| out)
}

/// Open a regular file for reading without following a symlink and without blocking (an
/// entry replaced by a FIFO since its lstat must not hang the copy), and without touching
/// its atime where the kernel allows that (O_NOATIME needs the owner or CAP_FOWNER).
pub fn open_file(p: &Path) -> io::Result<File> {
    let base = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    match std::fs::OpenOptions::new().read(true).custom_flags(base | libc::O_NOATIME).open(p) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            std::fs::OpenOptions::new().read(true).custom_flags(base).open(p)
        }
        r => r,
    }
}

/// The next byte at or after `pos` that holds data (SEEK_DATA), `None` past the last data.
/// A host filesystem without SEEK_DATA treats the whole file as data (lseek's generic
/// fallback), so this never fails for lack of support.
pub fn next_data(f: &File, pos: u64) -> io::Result<Option<u64>> {
    seek(f, pos, libc::SEEK_DATA)
}

/// The first byte at or after `pos` in a hole (SEEK_HOLE; the end of file counts as one).
pub fn next_hole(f: &File, pos: u64) -> io::Result<Option<u64>> {
    seek(f, pos, libc::SEEK_HOLE)
}

fn seek(f: &File, pos: u64, whence: i32) -> io::Result<Option<u64>> {
    let Ok(off) = libc::off_t::try_from(pos) else { return Ok(None) };
    // SAFETY: lseek on a descriptor we own; SEEK_DATA/SEEK_HOLE only report a position
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENXIO) { Ok(None) } else { Err(e) };
    }
    Ok(Some(r as u64))
}

/// Read `buf.len()` bytes at `offset`; fewer only at end of file.
pub fn read_full_at(f: &File, mut offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
