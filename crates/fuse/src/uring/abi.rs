//! The FUSE kernel ABI as the io_uring transport sees it (include/uapi/linux/fuse.h, protocol
//! 7.40 as negotiated by fuser at INIT): opcodes, the ring entry's header buffer, and the
//! per-operation argument and reply structs, read and written field by field at their byte
//! offsets. The kernel ABI is native-endian; every target this builds for is little-endian,
//! which `const _` below pins.
//!
//! Ring entry header buffer (`struct fuse_uring_req_header`, 288 bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 128 | `in_out`: `fuse_in_header` (request) / `fuse_out_header` (reply) |
//! | 128 | 128 | `op_in`: the operation's fixed argument struct (e.g. `fuse_write_in`) |
//! | 256 | 32 | `ring_ent_in_out`: flags u64, commit_id u64, payload_sz u32, pad u32, reserved u64 |
//!
//! Everything variable (names, write data; read data, dirents in replies) lives in the
//! entry's payload buffer, `payload_sz` bytes of it.
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

/// Opcodes (`enum fuse_opcode`) the transport answers itself; the rest get ENOSYS.
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
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
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

/// `fuse_open_out.open_flags`.
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;
/// `fuse_write_in.write_flags`: the write comes from the kernel's page cache.
pub const FUSE_WRITE_CACHE: u32 = 1 << 0;

pub const OUT_HEADER_LEN: usize = 16;
pub const ATTR_LEN: usize = 88;
pub const ENTRY_OUT_LEN: usize = 40 + ATTR_LEN;
pub const ATTR_OUT_LEN: usize = 16 + ATTR_LEN;
pub const OPEN_OUT_LEN: usize = 16;
pub const STATFS_OUT_LEN: usize = 80;
/// `fuse_dirent` up to the name, and `fuse_direntplus` (entry_out + dirent) up to the name.
pub const DIRENT_NAME_OFF: usize = 24;
pub const DIRENTPLUS_NAME_OFF: usize = ENTRY_OUT_LEN + DIRENT_NAME_OFF;

pub fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// `struct fuse_in_header` (40 bytes at `in_out`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl InHeader {
    pub fn parse(h: &[u8]) -> InHeader {
        InHeader {
            opcode: u32_at(h, IN_OUT + 4),
            unique: u64_at(h, IN_OUT + 8),
            nodeid: u64_at(h, IN_OUT + 16),
            uid: u32_at(h, IN_OUT + 24),
            gid: u32_at(h, IN_OUT + 28),
            pid: u32_at(h, IN_OUT + 32),
        }
    }
}

/// `struct fuse_out_header` into `in_out`: len, error (negative errno or 0), unique.
pub fn put_out_header(h: &mut [u8], unique: u64, error: i32, payload_len: usize) {
    h[IN_OUT..IN_OUT + OUT_HEADER_LEN].fill(0);
    put_u32(h, IN_OUT, (OUT_HEADER_LEN + payload_len) as u32);
    put_u32(h, IN_OUT + 4, error as u32);
    put_u64(h, IN_OUT + 8, unique);
}

/// The 80-byte command area of a FUSE ring SQE (`struct fuse_uring_cmd_req`):
/// flags u64, commit_id u64, qid u16, padding.
pub fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_le_bytes());
    c[16..18].copy_from_slice(&qid.to_le_bytes());
    c
}

/// `struct fuse_attr` fields the transport fills (88 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
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

/// A NUL-terminated name at the start of `p`, and what follows its NUL.
pub fn cstr(p: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = p.iter().position(|&c| c == 0)?;
    Some((&p[..end], &p[end + 1..]))
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
            InHeader { opcode: op::LOOKUP, unique: 0x1122_3344_5566_7788, nodeid: 42, uid: 1000, gid: 100, pid: 4321 }
        );
    }

    #[test]
    fn out_header_carries_negative_errno_and_total_length() {
        let mut h = [0xffu8; HEADER_LEN];
        put_out_header(&mut h, 7, -libc::ENOENT, 128);
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
}
