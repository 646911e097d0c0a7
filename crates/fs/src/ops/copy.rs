//! `copy_file_range` between two open files of the mount (or within one): the engine shares
//! the whole records that line up and copies the rest as data (pipeline write/share.rs), so
//! a `cp` inside the mount costs neither codec time nor space. The kernel has checked the
//! handles' modes and clamped the length to the source's size; here the handles are
//! resolved, both inodes must be regular files, the target is extended and marked modified
//! as a write would be.

use crate::error::{FsError, Result};
use crate::ops::attr::MAX_FILE_SIZE;
use crate::rules::creds::Creds;
use crate::Fs;
use squeezefs_pipeline::{FileKind, Ino};

/// The most one call copies: its count is answered in 32 bits (`fuse_write_out`), and a
/// whole number of MiB keeps every record size's boundaries where the caller's next call
/// starts.
pub const MAX_COPY: u64 = (u32::MAX as u64) & !((1 << 20) - 1);

/// One side of a copy: the inode and the handle it was opened with.
#[derive(Clone, Copy, Debug)]
pub struct CopyEnd {
    pub ino: Ino,
    pub fh: u64,
    pub offset: u64,
}

impl Fs {
    /// Copy up to `len` bytes from `src` to `dst` (FUSE_COPY_FILE_RANGE); returns the bytes
    /// copied (0 at or past the source's end). `flags` must be 0, as for copy_file_range(2).
    pub fn copy_file_range(&self, c: &Creds, src: CopyEnd, dst: CopyEnd, len: u64, flags: u64) -> Result<u64> {
        self.check_writable()?;
        if flags != 0 {
            return Err(FsError::Invalid("copy_file_range flags"));
        }
        let hin = self.handles.get(src.fh).ok_or(FsError::BadHandle)?;
        let hout = self.handles.get(dst.fh).ok_or(FsError::BadHandle)?;
        if hin.ino != src.ino || hout.ino != dst.ino || !hout.write {
            return Err(FsError::BadHandle);
        }
        for ino in [src.ino, dst.ino] {
            match self.stat(ino)?.kind {
                FileKind::File => {}
                FileKind::Dir => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("copy_file_range of a file that is not regular")),
            }
        }
        if dst.offset >= MAX_FILE_SIZE {
            return Err(FsError::FileTooBig);
        }
        let len = len.min(MAX_COPY).min(MAX_FILE_SIZE - dst.offset);
        if len == 0 {
            return Ok(0);
        }
        let out = self.engine.share_range(src.ino, src.offset, dst.ino, dst.offset, len)?;
        if out.bytes > 0 {
            self.file_modified(c, dst.ino)?;
        }
        self.attrsync()?;
        Ok(out.bytes)
    }
}
