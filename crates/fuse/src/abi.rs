//! The FUSE kernel ABI (include/uapi/linux/fuse.h, protocol 7.40 as this daemon announces it
//! at INIT): opcodes, headers, INIT, the per-operation argument structs decoded into [`Op`],
//! and the reply structs, read and written field by field at their byte offsets. Both
//! transports use it: they differ only in where a request's parts lie (see below), not in
//! their bytes. The kernel ABI is native-endian; every target this builds for is
//! little-endian, which `const _` below pins.
//!
//! A request has three parts: the `fuse_in_header` (40 bytes), the operation's fixed
//! argument struct (`arg`, e.g. `fuse_write_in`; empty for LOOKUP and other name-only
//! operations) and the variable part (`payload`: names, written data). A reply is a
//! `fuse_out_header` (16 bytes) and a body.
//!
//! * `/dev/fuse`: one read returns header, arg and payload back to back; the arg's length
//!   is the operation's (see [`arg_len`]). A reply is written as header + body.
//! * io_uring: a ring entry has a header buffer and a payload buffer. Header buffer
//!   (`struct fuse_uring_req_header`, 288 bytes):
//!
//!   | offset | size | field |
//!   |---|---|---|
//!   | 0 | 128 | `in_out`: `fuse_in_header` (request) / `fuse_out_header` (reply) |
//!   | 128 | 128 | `op_in`: the arg struct |
//!   | 256 | 32 | `ring_ent_in_out`: flags u64, commit_id u64, payload_sz u32, pad u32, reserved u64 |
//!
//!   The payload buffer holds `payload_sz` bytes of request payload, then the reply body.
//!
//! Decoding never panics: a request too short for its fields is refused with EINVAL.
const _: () = assert!(cfg!(target_endian = "little"));

pub const IN_OUT: usize = 0;
pub const OP_IN: usize = 128;
pub const OP_IN_LEN: usize = 128;
pub const ENT_IN_OUT: usize = 256;
pub const HEADER_LEN: usize = 288;
/// `ring_ent_in_out` fields, relative to the header buffer.
pub const ENT_COMMIT_ID: usize = ENT_IN_OUT + 8;
pub const ENT_PAYLOAD_SZ: usize = ENT_IN_OUT + 16;

/// `enum fuse_uring_cmd` (the SQE's cmd_op).
pub const CMD_REGISTER: u32 = 1;
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// The protocol version this daemon speaks (`FUSE_KERNEL_VERSION`.`FUSE_KERNEL_MINOR_VERSION`).
pub const KERNEL_VERSION: u32 = 7;
pub const KERNEL_MINOR_VERSION: u32 = 40;

/// Opcodes (`enum fuse_opcode`) the daemon answers; the rest get ENOSYS.
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
}

/// INIT capability bits (`fuse_init_in.flags`, and `flags2` shifted up by 32 once both sides
/// have `INIT_EXT`).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const INIT_EXT: u64 = 1 << 30;
    /// shared mmap of files opened with FOPEN_DIRECT_IO (QoS trees' writers)
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    pub const OVER_IO_URING: u64 = 1 << 41;

    /// Names of the bits above, for the log.
    pub fn name(bit: u64) -> &'static str {
        match bit {
            ASYNC_READ => "ASYNC_READ",
            BIG_WRITES => "BIG_WRITES",
            DO_READDIRPLUS => "DO_READDIRPLUS",
            READDIRPLUS_AUTO => "READDIRPLUS_AUTO",
            ASYNC_DIO => "ASYNC_DIO",
            WRITEBACK_CACHE => "WRITEBACK_CACHE",
            PARALLEL_DIROPS => "PARALLEL_DIROPS",
            MAX_PAGES => "MAX_PAGES",
            CACHE_SYMLINKS => "CACHE_SYMLINKS",
            HANDLE_KILLPRIV_V2 => "HANDLE_KILLPRIV_V2",
            INIT_EXT => "INIT_EXT",
            DIRECT_IO_ALLOW_MMAP => "DIRECT_IO_ALLOW_MMAP",
            OVER_IO_URING => "OVER_IO_URING",
            _ => "?",
        }
    }
}

/// `fuse_open_out.open_flags`.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;
/// `fuse_write_in.write_flags`: the write comes from the kernel's page cache.
pub const FUSE_WRITE_CACHE: u32 = 1 << 0;

pub const IN_HEADER_LEN: usize = 40;
pub const OUT_HEADER_LEN: usize = 16;
pub const ATTR_LEN: usize = 88;
pub const ENTRY_OUT_LEN: usize = 40 + ATTR_LEN;
pub const ATTR_OUT_LEN: usize = 16 + ATTR_LEN;
pub const OPEN_OUT_LEN: usize = 16;
pub const STATFS_OUT_LEN: usize = 80;
pub const INIT_IN_LEN: usize = 64;
pub const INIT_OUT_LEN: usize = 64;
/// `fuse_dirent` up to the name, and `fuse_direntplus` (entry_out + dirent) up to the name.
pub const DIRENT_NAME_OFF: usize = 24;
pub const DIRENTPLUS_NAME_OFF: usize = ENTRY_OUT_LEN + DIRENT_NAME_OFF;
/// `fuse_forget_one`: node id u64, nlookup u64.
pub const FORGET_ONE_LEN: usize = 16;
/// `fuse_ioctl_out`: result i32, flags u32, in_iovs u32, out_iovs u32 (all 0 for a
/// restricted ioctl answered in full).
pub const IOCTL_OUT_LEN: usize = 16;

/// Bytes of the fixed argument struct the kernel sends first for `opcode` (what a
/// `/dev/fuse` request carries between its header and its payload); 0 for operations that
/// send only names or nothing. Sizes of protocol ≥ 7.23 without `SETXATTR_EXT`.
pub fn arg_len(opcode: u32) -> usize {
    match opcode {
        op::FORGET | op::BATCH_FORGET | op::INTERRUPT => 8,
        op::GETATTR => 16,
        op::SETATTR => 88,
        op::MKNOD | op::CREATE | op::RENAME2 | op::FSYNC | op::FSYNCDIR => 16,
        op::MKDIR | op::RENAME | op::LINK | op::OPEN | op::OPENDIR => 8,
        op::SETXATTR | op::GETXATTR | op::LISTXATTR | op::ACCESS => 8,
        op::READ | op::WRITE | op::READDIR | op::READDIRPLUS => 40,
        op::RELEASE | op::RELEASEDIR | op::FLUSH | op::LSEEK => 24,
        op::FALLOCATE | op::IOCTL => 32,
        op::COPY_FILE_RANGE => 56,
        op::INIT => INIT_IN_LEN,
        _ => 0,
    }
}

/// Operations whose reply body the core produces straight into the transport's reply
/// buffer (read data, directory entries): their request carries no payload, so the
/// transport can hand the buffer the request arrived in to the core as the reply's.
pub fn fills_reply_buffer(opcode: u32) -> bool {
    matches!(opcode, op::READ | op::READDIR | op::READDIRPLUS)
}

pub fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// `struct fuse_in_header` (40 bytes at `in_out`, or at the start of a /dev/fuse read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InHeader {
    /// whole request length (/dev/fuse; the ring leaves it to `payload_sz`)
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl InHeader {
    /// The header at the start of `h`, which must hold at least [`IN_HEADER_LEN`] bytes.
    pub fn parse(h: &[u8]) -> InHeader {
        InHeader {
            len: u32_at(h, IN_OUT),
            opcode: u32_at(h, IN_OUT + 4),
            unique: u64_at(h, IN_OUT + 8),
            nodeid: u64_at(h, IN_OUT + 16),
            uid: u32_at(h, IN_OUT + 24),
            gid: u32_at(h, IN_OUT + 28),
            pid: u32_at(h, IN_OUT + 32),
        }
    }
}

/// `struct fuse_out_header` at `off`: len, error (negative errno or 0), unique.
pub fn put_out_header(h: &mut [u8], off: usize, unique: u64, error: i32, body_len: usize) {
    put_u32(h, off, (OUT_HEADER_LEN + body_len) as u32);
    put_u32(h, off + 4, error as u32);
    put_u64(h, off + 8, unique);
}

/// The 80-byte command area of a FUSE ring SQE (`struct fuse_uring_cmd_req`):
/// flags u64, commit_id u64, qid u16, padding.
pub fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_le_bytes());
    c[16..18].copy_from_slice(&qid.to_le_bytes());
    c
}

/// A timestamp as the kernel sends it: seconds (signed) and nanoseconds.
pub type Time = (i64, u32);

/// `struct fuse_setattr_in`, the fields the daemon uses; `valid` says which are set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetattrIn {
    pub valid: u32,
    pub fh: u64,
    pub size: u64,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// One request's arguments, borrowed from the buffer it arrived in.
#[derive(Debug, PartialEq, Eq)]
pub enum Op<'a> {
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    /// `count` (node id, nlookup) pairs of [`FORGET_ONE_LEN`] bytes each
    BatchForget {
        list: &'a [u8],
    },
    Getattr,
    Setattr(SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        mode: u32,
        rdev: u32,
        name: &'a [u8],
    },
    Mkdir {
        mode: u32,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    /// RENAME (flags 0) and RENAME2
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        oldnodeid: u64,
        name: &'a [u8],
    },
    Open {
        flags: u32,
    },
    Read {
        offset: u64,
        size: u32,
    },
    Write {
        offset: u64,
        write_flags: u32,
        data: &'a [u8],
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync,
    Setxattr {
        flags: i32,
        name: &'a [u8],
        value: &'a [u8],
    },
    Getxattr {
        size: u32,
        name: &'a [u8],
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush,
    Opendir {
        flags: u32,
    },
    /// READDIR, and READDIRPLUS (`plus`)
    Readdir {
        offset: u64,
        size: u32,
        plus: bool,
    },
    Releasedir {
        fh: u64,
    },
    Fsyncdir,
    Access {
        mask: u32,
    },
    Create {
        flags: u32,
        mode: u32,
        name: &'a [u8],
    },
    Interrupt,
    Destroy,
    Fallocate {
        offset: u64,
        length: u64,
        mode: i32,
    },
    Lseek {
        offset: i64,
        whence: i32,
    },
    /// `fuse_copy_file_range_in`: from the request's node (handle `fh_in`, at `off_in`) to
    /// node `nodeid_out` (handle `fh_out`, at `off_out`)
    CopyFileRange {
        fh_in: u64,
        off_in: u64,
        nodeid_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    },
    /// chattr/lsattr (FS_IOC_GETFLAGS/SETFLAGS and FS_IOC_FSGETXATTR): `input` is the
    /// ioctl's input bytes, `out_size` what the caller's buffer takes
    Ioctl {
        cmd: u32,
        input: &'a [u8],
        out_size: u32,
    },
    /// INIT after the handshake, or an operation this daemon does not implement
    Unsupported(u32),
}

/// Little-endian field reads over an argument struct that may be shorter than its fields
/// (a malformed request): the first missing field refuses the request.
struct Args<'a>(&'a [u8]);

impl Args<'_> {
    fn u32(&self, off: usize) -> Result<u32, i32> {
        self.0.get(off..off + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))).ok_or(libc::EINVAL)
    }

    fn u64(&self, off: usize) -> Result<u64, i32> {
        self.0.get(off..off + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).ok_or(libc::EINVAL)
    }

    fn time(&self, secs: usize, nsec: usize) -> Result<Time, i32> {
        Ok((self.u64(secs)? as i64, self.u32(nsec)?))
    }
}

/// The first NUL-terminated name of `p` and what follows its NUL.
pub fn cstr(p: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = p.iter().position(|&c| c == 0)?;
    Some((&p[..end], &p[end + 1..]))
}

fn name(p: &[u8]) -> Result<&[u8], i32> {
    cstr(p).map(|(n, _)| n).ok_or(libc::EINVAL)
}

fn two_names(p: &[u8]) -> Result<(&[u8], &[u8]), i32> {
    let (a, rest) = cstr(p).ok_or(libc::EINVAL)?;
    let (b, _) = cstr(rest).ok_or(libc::EINVAL)?;
    Ok((a, b))
}

/// Decode request `opcode` from its argument struct and payload; Err(errno) for a request
/// too short for what it must carry.
pub fn decode<'a>(opcode: u32, arg: &'a [u8], payload: &'a [u8]) -> Result<Op<'a>, i32> {
    let a = Args(arg);
    Ok(match opcode {
        op::LOOKUP => Op::Lookup { name: name(payload)? },
        op::FORGET => Op::Forget { nlookup: a.u64(0)? },
        op::BATCH_FORGET => {
            let count = a.u32(0)? as usize;
            let list = count.checked_mul(FORGET_ONE_LEN).and_then(|n| payload.get(..n)).ok_or(libc::EINVAL)?;
            Op::BatchForget { list }
        }
        op::GETATTR => Op::Getattr,
        // fuse_setattr_in: valid 0, fh 8, size 16, lock_owner 24, atime 32, mtime 40,
        // ctime 48, atimensec 56, mtimensec 60, ctimensec 64, mode 68, uid 76, gid 80
        op::SETATTR => Op::Setattr(SetattrIn {
            valid: a.u32(0)?,
            fh: a.u64(8)?,
            size: a.u64(16)?,
            atime: a.time(32, 56)?,
            mtime: a.time(40, 60)?,
            ctime: a.time(48, 64)?,
            mode: a.u32(68)?,
            uid: a.u32(76)?,
            gid: a.u32(80)?,
        }),
        op::READLINK => Op::Readlink,
        op::SYMLINK => {
            let (name, target) = two_names(payload)?;
            Op::Symlink { name, target }
        }
        op::MKNOD => Op::Mknod { mode: a.u32(0)?, rdev: a.u32(4)?, name: name(payload)? },
        op::MKDIR => Op::Mkdir { mode: a.u32(0)?, name: name(payload)? },
        op::UNLINK => Op::Unlink { name: name(payload)? },
        op::RMDIR => Op::Rmdir { name: name(payload)? },
        op::RENAME | op::RENAME2 => {
            let flags = if opcode == op::RENAME2 { a.u32(8)? } else { 0 };
            let (name, newname) = two_names(payload)?;
            Op::Rename { newdir: a.u64(0)?, flags, name, newname }
        }
        op::LINK => Op::Link { oldnodeid: a.u64(0)?, name: name(payload)? },
        op::OPEN => Op::Open { flags: a.u32(0)? },
        op::READ => Op::Read { offset: a.u64(8)?, size: a.u32(16)? },
        op::WRITE => {
            let size = a.u32(16)? as usize;
            Op::Write { offset: a.u64(8)?, write_flags: a.u32(20)?, data: payload.get(..size).ok_or(libc::EINVAL)? }
        }
        op::STATFS => Op::Statfs,
        op::RELEASE => Op::Release { fh: a.u64(0)? },
        op::FSYNC => Op::Fsync,
        op::SETXATTR => {
            let size = a.u32(0)? as usize;
            let (name, rest) = cstr(payload).ok_or(libc::EINVAL)?;
            Op::Setxattr { flags: a.u32(4)? as i32, name, value: rest.get(..size).ok_or(libc::EINVAL)? }
        }
        op::GETXATTR => Op::Getxattr { size: a.u32(0)?, name: name(payload)? },
        op::LISTXATTR => Op::Listxattr { size: a.u32(0)? },
        op::REMOVEXATTR => Op::Removexattr { name: name(payload)? },
        op::FLUSH => Op::Flush,
        op::OPENDIR => Op::Opendir { flags: a.u32(0)? },
        op::READDIR | op::READDIRPLUS => {
            Op::Readdir { offset: a.u64(8)?, size: a.u32(16)?, plus: opcode == op::READDIRPLUS }
        }
        op::RELEASEDIR => Op::Releasedir { fh: a.u64(0)? },
        op::FSYNCDIR => Op::Fsyncdir,
        op::ACCESS => Op::Access { mask: a.u32(0)? },
        op::CREATE => Op::Create { flags: a.u32(0)?, mode: a.u32(4)?, name: name(payload)? },
        op::INTERRUPT => Op::Interrupt,
        op::DESTROY => Op::Destroy,
        op::FALLOCATE => Op::Fallocate { offset: a.u64(8)?, length: a.u64(16)?, mode: a.u32(24)? as i32 },
        op::LSEEK => Op::Lseek { offset: a.u64(8)? as i64, whence: a.u32(16)? as i32 },
        op::COPY_FILE_RANGE => Op::CopyFileRange {
            fh_in: a.u64(0)?,
            off_in: a.u64(8)?,
            nodeid_out: a.u64(16)?,
            fh_out: a.u64(24)?,
            off_out: a.u64(32)?,
            len: a.u64(40)?,
            flags: a.u64(48)?,
        },
        // fuse_ioctl_in: fh 0, flags 8, cmd 12, arg 16, in_size 24, out_size 28; the input
        // follows as the payload
        op::IOCTL => {
            let in_size = a.u32(24)? as usize;
            Op::Ioctl { cmd: a.u32(12)?, input: payload.get(..in_size).ok_or(libc::EINVAL)?, out_size: a.u32(28)? }
        }
        other => Op::Unsupported(other),
    })
}

/// (node id, nlookup) of every entry of a BATCH_FORGET list.
pub fn forget_list(list: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    list.chunks_exact(FORGET_ONE_LEN).map(|c| (u64_at(c, 0), u64_at(c, 8)))
}

/// `struct fuse_init_in`, the fields the handshake reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    /// `flags`, with `flags2` in the high half when the kernel set `INIT_EXT`
    pub flags: u64,
}

impl InitIn {
    /// From INIT's argument struct: major, minor, max_readahead, flags, flags2 (the part
    /// from `max_readahead` on exists since 7.6, `flags2` since 7.36).
    pub fn parse(arg: &[u8]) -> Result<InitIn, i32> {
        let a = Args(arg);
        let (major, minor) = (a.u32(0)?, a.u32(4)?);
        let max_readahead = a.u32(8).unwrap_or(0);
        let mut flags = u64::from(a.u32(12).unwrap_or(0));
        if flags & init::INIT_EXT != 0 {
            flags |= u64::from(a.u32(16).unwrap_or(0)) << 32;
        }
        Ok(InitIn { major, minor, max_readahead, flags })
    }
}

/// `struct fuse_init_out` (64 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitOut {
    pub max_readahead: u32,
    /// granted capabilities (`flags2` is the high half)
    pub flags: u64,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    /// timestamp granularity in ns
    pub time_gran: u32,
    pub max_pages: u16,
}

pub fn put_init_out(b: &mut [u8], o: &InitOut) {
    b[..INIT_OUT_LEN].fill(0);
    put_u32(b, 0, KERNEL_VERSION);
    put_u32(b, 4, KERNEL_MINOR_VERSION);
    put_u32(b, 8, o.max_readahead);
    put_u32(b, 12, o.flags as u32);
    put_u16(b, 16, o.max_background);
    put_u16(b, 18, o.congestion_threshold);
    put_u32(b, 20, o.max_write);
    put_u32(b, 24, o.time_gran);
    put_u16(b, 28, o.max_pages);
    put_u32(b, 32, (o.flags >> 32) as u32);
}

/// `struct fuse_attr` fields the daemon fills (88 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

pub fn put_attr(b: &mut [u8], off: usize, a: &Attr) {
    put_u64(b, off, a.ino);
    put_u64(b, off + 8, a.size);
    put_u64(b, off + 16, a.blocks);
    put_u64(b, off + 24, a.atime.0 as u64);
    put_u64(b, off + 32, a.mtime.0 as u64);
    put_u64(b, off + 40, a.ctime.0 as u64);
    put_u32(b, off + 48, a.atime.1);
    put_u32(b, off + 52, a.mtime.1);
    put_u32(b, off + 56, a.ctime.1);
    put_u32(b, off + 60, a.mode);
    put_u32(b, off + 64, a.nlink);
    put_u32(b, off + 68, a.uid);
    put_u32(b, off + 72, a.gid);
    put_u32(b, off + 76, a.rdev);
    put_u32(b, off + 80, a.blksize);
    put_u32(b, off + 84, 0);
}

/// `struct fuse_entry_out` (128 bytes): node id, generation, entry and attr validity.
pub fn put_entry_out(b: &mut [u8], off: usize, nodeid: u64, generation: u64, valid_secs: u64, a: &Attr) {
    put_u64(b, off, nodeid);
    put_u64(b, off + 8, generation);
    put_u64(b, off + 16, valid_secs);
    put_u64(b, off + 24, valid_secs);
    put_u32(b, off + 32, 0);
    put_u32(b, off + 36, 0);
    put_attr(b, off + 40, a);
}

/// `struct fuse_attr_out` (104 bytes).
pub fn put_attr_out(b: &mut [u8], off: usize, valid_secs: u64, a: &Attr) {
    put_u64(b, off, valid_secs);
    put_u32(b, off + 8, 0);
    put_u32(b, off + 12, 0);
    put_attr(b, off + 16, a);
}

/// `struct fuse_open_out` (16 bytes): fh, open_flags, backing id 0.
pub fn put_open_out(b: &mut [u8], off: usize, fh: u64, open_flags: u32) {
    put_u64(b, off, fh);
    put_u32(b, off + 8, open_flags);
    put_u32(b, off + 12, 0);
}

/// `struct fuse_kstatfs` in `fuse_statfs_out` (80 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kstatfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

pub fn put_statfs_out(b: &mut [u8], off: usize, s: &Kstatfs) {
    b[off..off + STATFS_OUT_LEN].fill(0);
    for (i, v) in [s.blocks, s.bfree, s.bavail, s.files, s.ffree].into_iter().enumerate() {
        put_u64(b, off + i * 8, v);
    }
    put_u32(b, off + 40, s.bsize);
    put_u32(b, off + 44, s.namelen);
    put_u32(b, off + 48, s.frsize);
}

/// Size of one `fuse_dirent` (`plus`: `fuse_direntplus`) with a name of `namelen` bytes,
/// padded to 8 bytes as the kernel walks them.
pub fn dirent_len(namelen: usize, plus: bool) -> usize {
    let base = if plus { DIRENTPLUS_NAME_OFF } else { DIRENT_NAME_OFF };
    (base + namelen).next_multiple_of(8)
}

/// Write a `fuse_dirent` at `off` (the caller checked the room with [`dirent_len`]).
pub fn put_dirent(b: &mut [u8], off: usize, ino: u64, next_off: u64, dtype: u32, name: &[u8]) -> usize {
    put_u64(b, off, ino);
    put_u64(b, off + 8, next_off);
    put_u32(b, off + 16, name.len() as u32);
    put_u32(b, off + 20, dtype);
    b[off + DIRENT_NAME_OFF..off + DIRENT_NAME_OFF + name.len()].copy_from_slice(name);
    let len = dirent_len(name.len(), false);
    b[off + DIRENT_NAME_OFF + name.len()..off + len].fill(0);
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_header_fields_sit_at_their_abi_offsets() {
        let mut h = [0u8; HEADER_LEN];
        put_u32(&mut h, 0, 40 + 5);
        put_u32(&mut h, 4, op::LOOKUP);
        put_u64(&mut h, 8, 0x1122_3344_5566_7788);
        put_u64(&mut h, 16, 42);
        put_u32(&mut h, 24, 1000);
        put_u32(&mut h, 28, 100);
        put_u32(&mut h, 32, 4321);
        let p = InHeader::parse(&h);
        assert_eq!(
            p,
            InHeader {
                len: 45,
                opcode: op::LOOKUP,
                unique: 0x1122_3344_5566_7788,
                nodeid: 42,
                uid: 1000,
                gid: 100,
                pid: 4321
            }
        );
    }

    #[test]
    fn out_header_carries_negative_errno_and_total_length() {
        let mut h = [0xffu8; HEADER_LEN];
        put_out_header(&mut h, 0, 7, -libc::ENOENT, 128);
        assert_eq!(u32_at(&h, 0), 16 + 128);
        assert_eq!(u32_at(&h, 4) as i32, -libc::ENOENT);
        assert_eq!(u64_at(&h, 8), 7);
    }

    #[test]
    fn entry_out_is_128_bytes_with_attr_at_40() {
        let mut b = vec![0u8; ENTRY_OUT_LEN];
        let a = Attr { ino: 9, size: 10, mode: 0o100644, nlink: 1, blksize: 4096, ..Attr::default() };
        put_entry_out(&mut b, 0, 9, 3, 3600, &a);
        assert_eq!(u64_at(&b, 0), 9);
        assert_eq!(u64_at(&b, 8), 3);
        assert_eq!(u64_at(&b, 16), 3600);
        assert_eq!(u64_at(&b, 40), 9, "attr.ino");
        assert_eq!(u32_at(&b, 40 + 60), 0o100644, "attr.mode");
        assert_eq!(u32_at(&b, 40 + 80), 4096, "attr.blksize");
    }

    #[test]
    fn dirents_are_padded_to_eight_bytes_for_every_name_length() {
        for n in 1..=255usize {
            let len = dirent_len(n, false);
            assert_eq!(len % 8, 0);
            assert!(len >= DIRENT_NAME_OFF + n && len < DIRENT_NAME_OFF + n + 8);
            let plus = dirent_len(n, true);
            assert_eq!(plus % 8, 0);
            assert_eq!(plus - len, ENTRY_OUT_LEN);
            let mut b = vec![0xaau8; len];
            assert_eq!(put_dirent(&mut b, 0, 1, 2, 8, &vec![b'x'; n]), len);
            assert!(b[DIRENT_NAME_OFF + n..].iter().all(|&c| c == 0), "padding zeroed");
        }
    }

    #[test]
    fn cmd_req_puts_commit_id_and_queue() {
        let c = cmd_req(0xabcdef, 3);
        assert_eq!(u64_at(&c, 0), 0);
        assert_eq!(u64_at(&c, 8), 0xabcdef);
        assert_eq!(u16_at(&c, 16), 3);
    }

    #[test]
    fn cstr_splits_at_the_first_nul() {
        assert_eq!(cstr(b"a\0bc\0"), Some((&b"a"[..], &b"bc\0"[..])));
        assert_eq!(cstr(b"abc"), None);
    }

    /// A `fuse_setattr_in` as the kernel lays it out, with times set.
    fn setattr_in(valid: u32, atime: Time, mtime: Time) -> Vec<u8> {
        let mut b = vec![0u8; arg_len(op::SETATTR)];
        put_u32(&mut b, 0, valid);
        put_u64(&mut b, 32, atime.0 as u64);
        put_u64(&mut b, 40, mtime.0 as u64);
        put_u32(&mut b, 56, atime.1);
        put_u32(&mut b, 60, mtime.1);
        put_u32(&mut b, 68, 0o100644);
        b
    }

    /// Seconds and nanoseconds come through exactly as the kernel sent them, at the extremes
    /// of the range and before 1970 (a parser going through `SystemTime` panics on
    /// `INT64_MIN` and is a second off for negative times with nanoseconds).
    #[test]
    fn setattr_times_decode_exactly_at_the_extremes_and_before_1970() {
        for t in [(i64::MIN, 0), (i64::MIN, 999_999_999), (i64::MAX, 999_999_999), (-1, 500_000_000), (-86_400, 1)] {
            let b = setattr_in(fattr::ATIME | fattr::MTIME, t, (t.0.wrapping_add(1), t.1));
            let Ok(Op::Setattr(s)) = decode(op::SETATTR, &b, &[]) else { panic!("setattr decodes") };
            assert_eq!((s.atime, s.mtime, s.valid), (t, (t.0.wrapping_add(1), t.1), fattr::ATIME | fattr::MTIME));
        }
    }

    #[test]
    fn short_requests_are_refused_not_read_past_their_end() {
        // every operation, every truncation of its arg struct and of a payload
        let payload = b"name\0target\0";
        for opcode in 0..64 {
            let full = vec![0u8; arg_len(opcode)];
            for cut in 0..full.len() {
                let _ = decode(opcode, &full[..cut], payload);
            }
            for cut in 0..payload.len() {
                let _ = decode(opcode, &full, &payload[..cut]);
            }
        }
        assert_eq!(decode(op::MKDIR, &[0u8; 2], b"d\0"), Err(libc::EINVAL));
        assert_eq!(decode(op::LOOKUP, &[], b"no-nul"), Err(libc::EINVAL));
        let mut w = vec![0u8; 40];
        put_u32(&mut w, 16, 10);
        assert_eq!(decode(op::WRITE, &w, &[1, 2, 3]), Err(libc::EINVAL), "size beyond the payload");
        let mut f = vec![0u8; 8];
        put_u32(&mut f, 0, u32::MAX);
        assert_eq!(decode(op::BATCH_FORGET, &f, &[0; 32]), Err(libc::EINVAL), "count beyond the payload");
    }

    /// `fuse_copy_file_range_in`: seven u64 at 0, 8, …, 48, in the kernel's order.
    #[test]
    fn copy_file_range_in_decodes_its_fields_in_order() {
        let mut a = vec![0u8; arg_len(op::COPY_FILE_RANGE)];
        assert_eq!(a.len(), 56);
        for (i, v) in [11u64, 22, 33, 44, 55, 66, 77].into_iter().enumerate() {
            a[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        match decode(op::COPY_FILE_RANGE, &a, &[]) {
            Ok(Op::CopyFileRange { fh_in, off_in, nodeid_out, fh_out, off_out, len, flags }) => {
                assert_eq!((fh_in, off_in, nodeid_out, fh_out, off_out, len, flags), (11, 22, 33, 44, 55, 66, 77));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(decode(op::COPY_FILE_RANGE, &a[..55], &[]).err(), Some(libc::EINVAL));
    }

    #[test]
    fn batch_forget_lists_its_pairs() {
        let mut f = vec![0u8; 8];
        put_u32(&mut f, 0, 2);
        let mut list = vec![0u8; 32];
        put_u64(&mut list, 0, 5);
        put_u64(&mut list, 8, 1);
        put_u64(&mut list, 16, 9);
        put_u64(&mut list, 24, 3);
        let Ok(Op::BatchForget { list }) = decode(op::BATCH_FORGET, &f, &list) else { panic!() };
        assert_eq!(forget_list(list).collect::<Vec<_>>(), vec![(5, 1), (9, 3)]);
    }

    #[test]
    fn names_and_two_name_operations_split_at_their_nuls() {
        assert_eq!(decode(op::LOOKUP, &[], b"a\0"), Ok(Op::Lookup { name: b"a" }));
        assert_eq!(decode(op::SYMLINK, &[], b"l\0/t\0"), Ok(Op::Symlink { name: b"l", target: b"/t" }));
        let mut r2 = vec![0u8; 16];
        put_u64(&mut r2, 0, 7);
        put_u32(&mut r2, 8, 2);
        assert_eq!(
            decode(op::RENAME2, &r2, b"x\0y\0"),
            Ok(Op::Rename { newdir: 7, flags: 2, name: b"x", newname: b"y" })
        );
        assert_eq!(
            decode(op::RENAME, &r2[..8], b"x\0y\0"),
            Ok(Op::Rename { newdir: 7, flags: 0, name: b"x", newname: b"y" })
        );
        let mut sx = vec![0u8; 8];
        put_u32(&mut sx, 0, 3);
        assert_eq!(
            decode(op::SETXATTR, &sx, b"user.k\0abcdef"),
            Ok(Op::Setxattr { flags: 0, name: b"user.k", value: b"abc" })
        );
    }

    #[test]
    fn init_reads_flags2_only_with_init_ext() {
        let mut b = vec![0u8; INIT_IN_LEN];
        put_u32(&mut b, 0, 7);
        put_u32(&mut b, 4, 44);
        put_u32(&mut b, 8, 131_072);
        put_u32(&mut b, 12, (init::ASYNC_READ | init::INIT_EXT) as u32);
        put_u32(&mut b, 16, (init::OVER_IO_URING >> 32) as u32);
        let i = InitIn::parse(&b).unwrap();
        assert_eq!((i.major, i.minor, i.max_readahead), (7, 44, 131_072));
        assert_eq!(i.flags, init::ASYNC_READ | init::INIT_EXT | init::OVER_IO_URING);
        put_u32(&mut b, 12, init::ASYNC_READ as u32);
        assert_eq!(InitIn::parse(&b).unwrap().flags, init::ASYNC_READ);
        let mut out = [0xffu8; INIT_OUT_LEN];
        put_init_out(
            &mut out,
            &InitOut { flags: init::OVER_IO_URING | init::MAX_PAGES, max_pages: 256, ..Default::default() },
        );
        assert_eq!((u32_at(&out, 0), u32_at(&out, 4)), (KERNEL_VERSION, KERNEL_MINOR_VERSION));
        assert_eq!(u32_at(&out, 12) as u64, init::MAX_PAGES);
        assert_eq!(u32_at(&out, 32) as u64, init::OVER_IO_URING >> 32);
        assert_eq!(u16_at(&out, 28), 256);
        assert!(out[36..].iter().all(|&c| c == 0));
    }
}
