//! Open files and their data: open/create/release, read/write, fallocate, lseek, fsync,
//! readlink. Data calls go straight to the engine; no fs lock is held across them.
use crate::error::{FsError, Result};
use crate::handles::Handle;
use crate::ops::attr::MAX_FILE_SIZE;
use crate::rules::creds::Creds;
use crate::rules::perm::{self, MAY_READ, MAY_WRITE};
use crate::{inodes, rules::time, Fs};
use squeezefs_codec::{AUTO_DEFAULT_MAX, AUTO_DEFAULT_MIN};
use squeezefs_pipeline::{FileKind, Ino, InodeAttr};

pub const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
pub const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

pub const SEEK_DATA: i32 = 3;
pub const SEEK_HOLE: i32 = 4;

/// Access mask an open with `flags` needs.
fn open_mask(flags: i32) -> u32 {
    let mut m = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => MAY_READ,
        libc::O_WRONLY => MAY_WRITE,
        _ => MAY_READ | MAY_WRITE,
    };
    if flags & libc::O_TRUNC != 0 {
        m |= MAY_WRITE;
    }
    m
}

/// End of a byte range, refusing ranges past the largest file.
fn range_end(offset: u64, len: u64) -> Result<u64> {
    match offset.checked_add(len) {
        Some(end) if end <= MAX_FILE_SIZE => Ok(end),
        _ => Err(FsError::FileTooBig),
    }
}

impl Fs {
    /// Open an existing inode; returns the handle number.
    pub fn open(&self, c: &Creds, ino: Ino, flags: i32) -> Result<u64> {
        let a = self.stat(ino)?;
        let mask = open_mask(flags);
        match a.kind {
            FileKind::Dir if mask & MAY_WRITE != 0 => return Err(FsError::IsDir),
            FileKind::Symlink => return Err(FsError::Loop),
            _ => {}
        }
        if mask & MAY_WRITE != 0 {
            self.check_writable()?;
        }
        self.check_perm(&a, c, mask)?;
        if flags & libc::O_TRUNC != 0 && a.kind == FileKind::File && a.size > 0 {
            self.truncate_open(c, &a)?;
        }
        self.inodes.add_open(ino);
        Ok(self.handles.insert(Handle { ino, write: mask & MAY_WRITE != 0 }))
    }

    fn truncate_open(&self, c: &Creds, a: &InodeAttr) -> Result<()> {
        let s = crate::SetAttr { size: Some(0), fh: Some(0), ..Default::default() };
        self.setattr(c, a.ino, &s).map(|_| ())
    }

    /// Create and open a regular file (O_CREAT). An existing file is opened unless `O_EXCL`.
    /// Counts one kernel reference.
    pub fn create(&self, c: &Creds, parent: Ino, name: &[u8], perm: u32, flags: i32) -> Result<(InodeAttr, u64)> {
        let attr = match self.mknod(c, parent, name, FileKind::File, perm, 0) {
            Ok(a) => a,
            Err(FsError::Exists) if flags & libc::O_EXCL == 0 => {
                let a = self.lookup(c, parent, name)?;
                return match self.open(c, a.ino, flags) {
                    Ok(fh) => Ok((self.stat(a.ino)?, fh)),
                    Err(e) => {
                        self.forget(a.ino, 1);
                        Err(e)
                    }
                };
            }
            Err(e) => return Err(e),
        };
        self.inodes.add_open(attr.ino);
        let fh = self.handles.insert(Handle { ino: attr.ino, write: true });
        Ok((attr, fh))
    }

    /// Last close of a handle; frees the inode if it was unlinked and nothing else holds it.
    pub fn release(&self, fh: u64) -> Result<()> {
        let h = self.handles.remove(fh).ok_or(FsError::BadHandle)?;
        if self.inodes.close(h.ino) == inodes::Drop::Unreferenced {
            self.maybe_delete(h.ino)?;
        }
        Ok(())
    }

    /// Read up to `size` bytes at `offset` (short at EOF).
    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; size as usize];
        let n = self.read_into(ino, offset, &mut buf)?;
        buf.truncate(n);
        self.write_atime(ino);
        Ok(buf)
    }

    /// Read up to `buf.len()` bytes at `offset` into `buf` (whose old contents do not
    /// matter: every returned byte is written), so a request thread can reuse one reply
    /// buffer instead of allocating and zeroing a fresh one per request. An atime update
    /// is only decided here (stat shows it at once); the caller writes it with
    /// [`Fs::write_atime`] once the data is on its way (atime.rs).
    pub fn read_into(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let n = self.engine.read(ino, offset, buf)?;
        self.decide_atime(ino);
        Ok(n)
    }

    /// relatime: record the access if atime is not newer than mtime/ctime or a day old
    /// (never with `noatime`).
    pub(crate) fn decide_atime(&self, ino: Ino) {
        if self.read_only() || self.noatime() {
            return;
        }
        let now = time::now();
        let Ok(mut a) = self.engine.getattr(ino) else { return };
        let seen = a.atime;
        a.atime = self.shown_atime(ino, seen);
        if time::relatime_wants_update(&a, now) {
            self.atimes.insert(ino, crate::rules::atime::PendingAtime { atime: now, seen });
        }
    }

    /// Write the atime update a read of `ino` decided, if any and if atime is still the one
    /// the read saw (an explicit atime in between wins; atime.rs).
    pub fn write_atime(&self, ino: Ino) {
        let Some(p) = self.atimes.get(ino) else { return };
        let r = self.engine.update_attr(ino, |a| -> Result<((), bool)> {
            // under the metadata lock, so a setattr that forgot the decision came before
            let newer = self.atimes.get(ino) == Some(p) && p.applies_to(a.atime);
            if newer {
                a.atime = p.atime;
            }
            Ok(((), newer))
        });
        if let Err(e) = r {
            log::debug!("atime update of inode {ino}: {e}");
        }
        self.atimes.remove_if(ino, p);
    }

    /// Write `data` at `offset`; `append` writes at the current end of file instead.
    /// `from_page_cache` marks writeback-cache flushes: the kernel then owns mtime and
    /// setuid clearing and sends them as setattr.
    /// In a QoS tree the write first waits for its tree's admission (qos.rs PACING), holding
    /// no lock.
    pub fn write(&self, c: &Creds, ino: Ino, offset: u64, data: &[u8], from_page_cache: bool) -> Result<usize> {
        self.check_writable()?;
        if data.is_empty() {
            return Ok(0);
        }
        let tree = self.qos_pace(ino, data.len() as u64)?;
        self.write_admitted(c, ino, offset, data, from_page_cache, tree)
    }

    /// `write` once admitted into QoS tree `tree` (`NO_TREE`: none).
    fn write_admitted(
        &self,
        c: &Creds,
        ino: Ino,
        offset: u64,
        data: &[u8],
        from_page_cache: bool,
        tree: squeezefs_pipeline::TreeId,
    ) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        // generic_write_check_limits: EFBIG at or past the limit, a short write across it
        if offset >= MAX_FILE_SIZE {
            return Err(FsError::FileTooBig);
        }
        let data = &data[..data.len().min((MAX_FILE_SIZE - offset).min(usize::MAX as u64) as usize)];
        // the file's compression from its properties: cached, no walk up the tree (inherit.rs)
        let mut policy = self.write_policy(ino)?;
        if tree != squeezefs_pipeline::NO_TREE && policy.is_none() && self.compression().is_none() {
            // nothing chose a compression (no property, no mount option): in a QoS tree the
            // tree's rate does, on the adaptive ladder; a fixed compression chosen anywhere
            // (`none` included) is kept
            policy = Some((squeezefs_codec::Spec::Auto { min: AUTO_DEFAULT_MIN, max: AUTO_DEFAULT_MAX }, false));
        }
        self.engine.write_stated(ino, offset, data, policy, tree)?;
        if !from_page_cache {
            self.file_modified(c, ino)?;
        }
        Ok(data.len())
    }

    /// What the kernel's file_modified() does after a write or fallocate: mtime and ctime
    /// now, setuid/setgid dropped as `perm::mode_after_write` decides for the writer.
    pub(crate) fn file_modified(&self, c: &Creds, ino: Ino) -> Result<()> {
        let now = time::now();
        self.engine.update_attr(ino, |a| -> Result<((), bool)> {
            a.mtime = now;
            a.ctime = now;
            a.perm = perm::mode_after_write(a.perm, a.gid, c);
            Ok(((), true))
        })?;
        Ok(())
    }

    /// O_APPEND write through a handle: at the end of file.
    /// Paced before the append lock is taken: a waiting appender holds up nobody else.
    pub fn append(&self, c: &Creds, ino: Ino, data: &[u8]) -> Result<u64> {
        self.check_writable()?;
        let tree = self.qos_pace(ino, data.len() as u64)?;
        let _g = self.handles.append_lock(ino);
        let off = self.stat(ino)?.size;
        self.write_admitted(c, ino, off, data, false, tree)?;
        Ok(off)
    }

    pub fn fallocate(&self, c: &Creds, ino: Ino, offset: u64, len: u64, mode: i32) -> Result<()> {
        self.check_writable()?;
        if len == 0 {
            return Err(FsError::Invalid("fallocate length 0"));
        }
        let a = self.stat(ino)?;
        match a.kind {
            FileKind::File => {}
            FileKind::Dir => return Err(FsError::IsDir),
            _ => return Err(FsError::NoDevice),
        }
        let end = range_end(offset, len)?;
        let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
        let known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 {
            return Err(FsError::NotSupported("fallocate mode (collapse/insert range)"));
        }
        if mode & FALLOC_FL_PUNCH_HOLE != 0 {
            if !keep || mode & FALLOC_FL_ZERO_RANGE != 0 {
                return Err(FsError::NotSupported("punch hole needs FALLOC_FL_KEEP_SIZE alone"));
            }
            let end = end.min(a.size);
            if end > offset {
                self.engine.punch_hole(ino, offset, end - offset)?;
            }
        } else if mode & FALLOC_FL_ZERO_RANGE != 0 {
            let zero_end = end.min(a.size);
            if zero_end > offset {
                self.engine.punch_hole(ino, offset, zero_end - offset)?;
            }
            self.engine.allocate(ino, offset, len, keep)?;
        } else {
            self.engine.allocate(ino, offset, len, keep)?;
        }
        // ext4_fallocate calls file_modified() in every mode
        self.file_modified(c, ino)?;
        self.attrsync()
    }

    /// Whether some open handle of `ino` can write (the kernel may hold unflushed data).
    pub fn open_for_write(&self, ino: Ino) -> bool {
        self.handles.has_writer(ino)
    }

    /// lseek for SEEK_DATA / SEEK_HOLE (others are handled by the kernel).
    pub fn lseek(&self, ino: Ino, offset: u64, whence: i32) -> Result<u64> {
        let a = self.stat(ino)?;
        if offset >= a.size {
            return Err(FsError::NoSuchOffset);
        }
        let r = match whence {
            SEEK_DATA => self.engine.seek_data(ino, offset)?,
            SEEK_HOLE => Some(self.engine.seek_hole(ino, offset)?.unwrap_or(a.size).min(a.size)),
            _ => return Err(FsError::Invalid("lseek whence: only SEEK_DATA and SEEK_HOLE")),
        };
        r.ok_or(FsError::NoSuchOffset)
    }

    /// Durable when it returns (data and metadata of `ino`, or everything for a directory).
    pub fn fsync(&self, ino: Ino) -> Result<()> {
        if self.read_only() {
            return Ok(());
        }
        Ok(self.engine.fsync(ino)?)
    }

    pub fn sync(&self) -> Result<()> {
        Ok(self.engine.sync()?)
    }

    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let a = self.stat(ino)?;
        if a.kind != FileKind::Symlink {
            return Err(FsError::Invalid("readlink of a non-symlink"));
        }
        let target = self.engine.read_link(ino)?;
        // readlinkat -> touch_atime, as on ext4: relatime decides, at most one write per change
        self.decide_atime(ino);
        self.write_atime(ino);
        Ok(target)
    }

    /// access(2) (without default_permissions the kernel forwards it).
    pub fn access(&self, c: &Creds, ino: Ino, mask: u32) -> Result<()> {
        let a = self.stat(ino)?;
        if mask & MAY_WRITE != 0 && self.read_only() {
            return Err(FsError::ReadOnly);
        }
        perm::check(&a, c, mask & 7)
    }
}
