//! One FUSE request taken from a ring entry → the fs core → the reply written back into the
//! same entry. The same calls and policies as the fuser adapter (`adapter.rs`), with the
//! argument decoding and reply encoding fuser does for /dev/fuse done here on the ring's
//! header and payload buffers: read data and directory entries are produced straight into
//! the payload the kernel copies from.
use super::abi::{self, fattr, op, Attr, InHeader};
use crate::adapter::{
    errno, file_attr_kind_bits, kind_of_mode, lseek_left_to_kernel, negative_attr, statfs_fields, xattr_name_list,
    xattr_reply, XattrReply, BLKSIZE, READDIR_BATCH, TTL,
};
use crate::requests::{self, RequestCounts};
use squeezefs_fs::{Creds, FileKind, Fs, FsError, InodeAttr, SetAttr, TimeSet, Timestamp};
use std::sync::Arc;

/// What the ring thread sends back for one request.
#[derive(Debug, PartialEq, Eq)]
pub struct Handled {
    /// 0 or a negative errno
    pub error: i32,
    /// reply bytes at the start of the payload buffer
    pub len: usize,
    /// a relatime update to make once the reply is on its way (READ)
    pub atime_after: Option<u64>,
}

fn ok(len: usize) -> Handled {
    Handled { error: 0, len, atime_after: None }
}

fn err(code: i32) -> Handled {
    Handled { error: -code, len: 0, atime_after: None }
}

fn fs_err(e: &FsError) -> Handled {
    err(errno(e).code())
}

/// Requests that can wait for a txg commit (hundreds of ms under heavy writes): handled off
/// the ring thread (mod.rs `Queue::lend`).
pub fn is_slow(opcode: u32) -> bool {
    matches!(opcode, op::FSYNC | op::FSYNCDIR)
}

/// Requests that carry real work (decompression, copies of large payloads, listings): a
/// ring thread handles them as SCHED_OTHER (mod.rs `Sched::Lazy`). `payload` is the
/// request's payload length.
pub fn is_heavy(opcode: u32, payload: u32) -> bool {
    match opcode {
        op::READ | op::READDIR | op::READDIRPLUS | op::FALLOCATE => true,
        op::WRITE => payload >= 32 * 1024,
        _ => false,
    }
}

pub struct Dispatcher {
    fs: Arc<Fs>,
    writeback: bool,
    requests: Arc<RequestCounts>,
}

fn attr(a: &InodeAttr) -> Attr {
    Attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks_bytes.div_ceil(512),
        atime: (a.atime.secs, a.atime.nanos),
        mtime: (a.mtime.secs, a.mtime.nanos),
        ctime: (a.ctime.secs, a.ctime.nanos),
        mode: file_attr_kind_bits(a.kind) | (a.perm & 0o7777),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLKSIZE,
    }
}

/// `d_type` of a directory entry: the S_IFMT bits shifted down, as the kernel expects.
fn dtype(k: FileKind) -> u32 {
    file_attr_kind_bits(k) >> 12
}

fn time_arg(op_in: &[u8], secs_off: usize, nsec_off: usize) -> TimeSet {
    TimeSet::At(Timestamp { secs: abi::u64_at(op_in, secs_off) as i64, nanos: abi::u32_at(op_in, nsec_off) })
}

/// The first NUL-terminated name of the payload (EINVAL when the kernel sent none).
fn name(p: &[u8]) -> Result<Vec<u8>, Handled> {
    abi::cstr(p).map(|(n, _)| n.to_vec()).ok_or_else(|| err(libc::EINVAL))
}

fn two_names(p: &[u8]) -> Result<(Vec<u8>, Vec<u8>), Handled> {
    let (a, rest) = abi::cstr(p).ok_or_else(|| err(libc::EINVAL))?;
    let (b, _) = abi::cstr(rest).ok_or_else(|| err(libc::EINVAL))?;
    Ok((a.to_vec(), b.to_vec()))
}

impl Dispatcher {
    pub fn new(fs: Arc<Fs>, writeback: bool, requests: Arc<RequestCounts>) -> Dispatcher {
        Dispatcher { fs, writeback, requests }
    }

    /// The relatime update of a READ, once its reply has been submitted (as the adapter
    /// does after replying).
    pub fn after_read(&self, ino: u64) {
        self.fs.write_atime(ino);
    }

    /// Handle the request in `header` (+ `payload[..payload_len]`); the reply body is
    /// left at the start of `payload`.
    pub fn handle(&self, h: &InHeader, op_in: &[u8], payload: &mut [u8], payload_len: usize) -> Handled {
        let payload_len = payload_len.min(payload.len());
        self.requests.count(h.opcode);
        match self.dispatch(h, op_in, payload, payload_len) {
            Ok(x) | Err(x) => x,
        }
    }

    fn entry(&self, payload: &mut [u8], r: Result<InodeAttr, FsError>) -> Handled {
        match r {
            Ok(a) => {
                abi::put_entry_out(payload, 0, a.ino, a.generation, TTL.as_secs(), &attr(&a));
                ok(abi::ENTRY_OUT_LEN)
            }
            Err(e) => fs_err(&e),
        }
    }

    fn empty(r: Result<(), FsError>) -> Handled {
        match r {
            Ok(()) => ok(0),
            Err(e) => fs_err(&e),
        }
    }

    fn attr_reply(payload: &mut [u8], r: Result<InodeAttr, FsError>) -> Handled {
        match r {
            Ok(a) => {
                abi::put_attr_out(payload, 0, TTL.as_secs(), &attr(&a));
                ok(abi::ATTR_OUT_LEN)
            }
            Err(e) => fs_err(&e),
        }
    }

    fn xattr(payload: &mut [u8], size: u32, r: Result<Vec<u8>, FsError>) -> Handled {
        match xattr_reply(size, r) {
            XattrReply::Size(n) => {
                abi::put_u32(payload, 0, n);
                abi::put_u32(payload, 4, 0);
                ok(8)
            }
            XattrReply::Data(v) if v.len() <= payload.len() => {
                payload[..v.len()].copy_from_slice(&v);
                ok(v.len())
            }
            XattrReply::Data(_) => err(libc::E2BIG),
            XattrReply::Error(e) => err(e),
        }
    }

    fn dispatch(&self, h: &InHeader, op_in: &[u8], payload: &mut [u8], plen: usize) -> Result<Handled, Handled> {
        let c = Creds::from_request(h.uid, h.gid, h.pid);
        let fs = &self.fs;
        let ino = h.nodeid;
        Ok(match h.opcode {
            op::LOOKUP => {
                let n = name(&payload[..plen])?;
                match fs.lookup(&c, ino, &n) {
                    // a negative entry (node id 0) the kernel may cache, as in the adapter
                    Err(FsError::NotFound) => {
                        let mut a = attr(&negative_attr());
                        a.ino = 0;
                        abi::put_entry_out(payload, 0, 0, 0, TTL.as_secs(), &a);
                        ok(abi::ENTRY_OUT_LEN)
                    }
                    r => self.entry(payload, r),
                }
            }
            op::GETATTR => Self::attr_reply(payload, fs.getattr(ino)),
            op::SETATTR => {
                let valid = abi::u32_at(op_in, 0);
                let has = |bit: u32| valid & bit != 0;
                // fuse_setattr_in: valid 0, fh 8, size 16, atime 32, mtime 40, ctime 48,
                // atimensec 56, mtimensec 60, ctimensec 64, mode 68, uid 76, gid 80
                let s = SetAttr {
                    mode: has(fattr::MODE).then(|| abi::u32_at(op_in, 68) & 0o7777),
                    uid: has(fattr::UID).then(|| abi::u32_at(op_in, 76)),
                    gid: has(fattr::GID).then(|| abi::u32_at(op_in, 80)),
                    size: has(fattr::SIZE).then(|| abi::u64_at(op_in, 16)),
                    atime: if has(fattr::ATIME_NOW) {
                        Some(TimeSet::Now)
                    } else {
                        has(fattr::ATIME).then(|| time_arg(op_in, 32, 56))
                    },
                    mtime: if has(fattr::MTIME_NOW) {
                        Some(TimeSet::Now)
                    } else {
                        has(fattr::MTIME).then(|| time_arg(op_in, 40, 60))
                    },
                    ctime: has(fattr::CTIME)
                        .then(|| Timestamp { secs: abi::u64_at(op_in, 48) as i64, nanos: abi::u32_at(op_in, 64) }),
                    fh: has(fattr::FH).then(|| abi::u64_at(op_in, 8)),
                };
                Self::attr_reply(payload, fs.setattr(&c, ino, &s))
            }
            op::READLINK => match fs.readlink(ino) {
                Ok(t) if t.len() <= payload.len() => {
                    payload[..t.len()].copy_from_slice(&t);
                    ok(t.len())
                }
                Ok(_) => err(libc::ENAMETOOLONG),
                Err(e) => fs_err(&e),
            },
            op::SYMLINK => {
                let (n, target) = two_names(&payload[..plen])?;
                self.entry(payload, fs.symlink(&c, ino, &n, &target))
            }
            op::MKNOD => {
                let mode = abi::u32_at(op_in, 0);
                let rdev = abi::u32_at(op_in, 4);
                let n = name(&payload[..plen])?;
                let Some(kind) = kind_of_mode(mode) else { return Err(err(libc::EINVAL)) };
                self.entry(payload, fs.mknod(&c, ino, &n, kind, mode & 0o7777, rdev))
            }
            op::MKDIR => {
                let mode = abi::u32_at(op_in, 0);
                let n = name(&payload[..plen])?;
                self.entry(payload, fs.mkdir(&c, ino, &n, mode & 0o7777))
            }
            op::UNLINK => Self::empty(fs.unlink(&c, ino, &name(&payload[..plen])?)),
            op::RMDIR => Self::empty(fs.rmdir(&c, ino, &name(&payload[..plen])?)),
            op::RENAME | op::RENAME2 => {
                let newdir = abi::u64_at(op_in, 0);
                let flags = if h.opcode == op::RENAME2 { abi::u32_at(op_in, 8) } else { 0 };
                let (a, b) = two_names(&payload[..plen])?;
                Self::empty(fs.rename(&c, ino, &a, newdir, &b, flags))
            }
            op::LINK => {
                let old = abi::u64_at(op_in, 0);
                let n = name(&payload[..plen])?;
                self.entry(payload, fs.link(&c, old, ino, &n))
            }
            op::OPEN => match fs.open(&c, ino, abi::u32_at(op_in, 0) as i32) {
                // we are the only writer: cached pages stay valid across opens
                Ok(fh) => {
                    abi::put_open_out(payload, 0, fh, abi::FOPEN_KEEP_CACHE);
                    ok(abi::OPEN_OUT_LEN)
                }
                Err(e) => fs_err(&e),
            },
            op::OPENDIR => match fs.opendir(&c, ino, abi::u32_at(op_in, 0) as i32) {
                Ok(fh) => {
                    abi::put_open_out(payload, 0, fh, 0);
                    ok(abi::OPEN_OUT_LEN)
                }
                Err(e) => fs_err(&e),
            },
            op::CREATE => {
                let flags = abi::u32_at(op_in, 0) as i32;
                let mode = abi::u32_at(op_in, 4);
                let n = name(&payload[..plen])?;
                match fs.create(&c, ino, &n, mode & 0o7777, flags) {
                    Ok((a, fh)) => {
                        abi::put_entry_out(payload, 0, a.ino, a.generation, TTL.as_secs(), &attr(&a));
                        abi::put_open_out(payload, abi::ENTRY_OUT_LEN, fh, abi::FOPEN_KEEP_CACHE);
                        ok(abi::ENTRY_OUT_LEN + abi::OPEN_OUT_LEN)
                    }
                    Err(e) => fs_err(&e),
                }
            }
            op::READ => {
                let offset = abi::u64_at(op_in, 8);
                let size = (abi::u32_at(op_in, 16) as usize).min(payload.len());
                match fs.read_into(ino, offset, &mut payload[..size]) {
                    Ok(n) => Handled { error: 0, len: n, atime_after: Some(ino) },
                    Err(e) => fs_err(&e),
                }
            }
            op::WRITE => {
                let offset = abi::u64_at(op_in, 8);
                let size = (abi::u32_at(op_in, 16) as usize).min(plen);
                let from_cache = abi::u32_at(op_in, 20) & abi::FUSE_WRITE_CACHE != 0;
                match fs.write(&c, ino, offset, &payload[..size], from_cache) {
                    Ok(n) => {
                        abi::put_u32(payload, 0, n as u32);
                        abi::put_u32(payload, 4, 0);
                        ok(8)
                    }
                    Err(e) => fs_err(&e),
                }
            }
            op::STATFS => match fs.statfs() {
                Ok(s) => {
                    let (blocks, bfree, bavail, files, ffree, bsize, namelen, frsize) = statfs_fields(&s);
                    payload[..abi::STATFS_OUT_LEN].fill(0);
                    for (i, v) in [blocks, bfree, bavail, files, ffree].into_iter().enumerate() {
                        abi::put_u64(payload, i * 8, v);
                    }
                    abi::put_u32(payload, 40, bsize);
                    abi::put_u32(payload, 44, namelen);
                    abi::put_u32(payload, 48, frsize);
                    ok(abi::STATFS_OUT_LEN)
                }
                Err(e) => fs_err(&e),
            },
            op::RELEASE => Self::empty(fs.release(abi::u64_at(op_in, 0))),
            op::RELEASEDIR => Self::empty(fs.releasedir(abi::u64_at(op_in, 0))),
            op::FSYNC | op::FSYNCDIR => Self::empty(fs.fsync(ino)),
            // nothing to do at close; ENOSYS makes the kernel stop sending FLUSH (adapter.rs)
            op::FLUSH => err(libc::ENOSYS),
            op::SETXATTR => {
                let size = abi::u32_at(op_in, 0) as usize;
                let flags = abi::u32_at(op_in, 4) as i32;
                let (n, rest) = abi::cstr(&payload[..plen]).ok_or_else(|| err(libc::EINVAL))?;
                let value = rest.get(..size).ok_or_else(|| err(libc::EINVAL))?;
                Self::empty(fs.setxattr(&c, ino, n, value, flags))
            }
            op::GETXATTR => {
                let size = abi::u32_at(op_in, 0);
                let n = name(&payload[..plen])?;
                Self::xattr(payload, size, requests::getxattr(fs, &self.requests, &c, ino, &n))
            }
            op::LISTXATTR => {
                let size = abi::u32_at(op_in, 0);
                Self::xattr(payload, size, fs.listxattr(&c, ino).map(xattr_name_list))
            }
            op::REMOVEXATTR => Self::empty(fs.removexattr(&c, ino, &name(&payload[..plen])?)),
            op::ACCESS => Self::empty(fs.access(&c, ino, abi::u32_at(op_in, 0))),
            op::READDIR | op::READDIRPLUS => {
                let offset = abi::u64_at(op_in, 8);
                let size = (abi::u32_at(op_in, 16) as usize).min(payload.len());
                self.readdir(ino, offset, &mut payload[..size], h.opcode == op::READDIRPLUS)
            }
            op::FALLOCATE => {
                let offset = abi::u64_at(op_in, 8);
                let length = abi::u64_at(op_in, 16);
                let mode = abi::u32_at(op_in, 24) as i32;
                Self::empty(fs.fallocate(&c, ino, offset, length, mode))
            }
            op::LSEEK => {
                let offset = abi::u64_at(op_in, 8) as i64;
                let whence = abi::u32_at(op_in, 16) as i32;
                if offset < 0 {
                    return Err(err(libc::ENXIO));
                }
                if lseek_left_to_kernel(fs, self.writeback, ino) {
                    return Err(err(libc::ENOSYS));
                }
                match fs.lseek(ino, offset as u64, whence) {
                    Ok(o) => {
                        abi::put_u64(payload, 0, o);
                        ok(8)
                    }
                    Err(e) => fs_err(&e),
                }
            }
            // only fuseblk mounts get DESTROY; the flush runs when the session ends anyway
            op::DESTROY => ok(0),
            op::IOCTL => {
                // fuse_ioctl_in: fh 0, flags 8, cmd 12, arg 16, in_size 24, out_size 28; the
                // input follows in the payload; the reply is fuse_ioctl_out (16 bytes) + data
                let cmd = abi::u32_at(op_in, 12);
                let in_size = abi::u32_at(op_in, 24) as usize;
                let out_size = abi::u32_at(op_in, 28);
                let input = payload.get(..in_size.min(plen)).ok_or_else(|| err(libc::EINVAL))?.to_vec();
                match fs.ioctl(&c, ino, cmd, &input, out_size) {
                    Ok(data) if 16 + data.len() <= payload.len() => {
                        payload[..16].fill(0);
                        payload[16..16 + data.len()].copy_from_slice(&data);
                        ok(16 + data.len())
                    }
                    Ok(_) => err(libc::E2BIG),
                    Err(e) => fs_err(&e),
                }
            }
            _ => err(libc::ENOSYS),
        })
    }

    /// Directory entries from `offset` into `out` (the kernel's buffer size) until full.
    fn readdir(&self, dir: u64, mut offset: u64, out: &mut [u8], plus: bool) -> Handled {
        let mut used = 0;
        loop {
            let items = match self.fs.readdir(dir, offset, READDIR_BATCH, plus) {
                Ok(i) => i,
                Err(e) if used == 0 => return fs_err(&e),
                Err(_) => return ok(used),
            };
            if items.is_empty() {
                return ok(used);
            }
            for it in items {
                let len = abi::dirent_len(it.name.len(), plus);
                if used + len > out.len() {
                    return ok(used);
                }
                if plus {
                    // the inode's generation, as LOOKUP sends it (see the adapter's readdirplus)
                    let (a, generation) = match &it.attr {
                        Some(a) => (attr(a), a.generation),
                        None => match self.fs.getattr(it.ino) {
                            Ok(a) => (attr(&a), a.generation),
                            Err(e) if used == 0 => return fs_err(&e),
                            Err(_) => return ok(used),
                        },
                    };
                    abi::put_entry_out(out, used, it.ino, generation, TTL.as_secs(), &a);
                    abi::put_dirent(out, used + abi::ENTRY_OUT_LEN, it.ino, it.next_offset, dtype(it.kind), &it.name);
                    // the kernel counts a lookup for every entry it received except . and ..
                    if it.name != b"." && it.name != b".." {
                        self.fs.remember_entry(dir, &it);
                    }
                } else {
                    abi::put_dirent(out, used, it.ino, it.next_offset, dtype(it.kind), &it.name);
                }
                used += len;
                offset = it.next_offset;
            }
        }
    }
}
