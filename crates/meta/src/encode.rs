//! Hand-written, versioned little-endian encodings of the metadata values.
//!
//! Every value starts with a version byte; decoders refuse versions they do not know with
//! [`MetaError::Version`] and short or malformed input with [`MetaError::Corrupt`]. The byte
//! layouts are documented in docs/format.md.

use crate::error::MetaError;
use crate::records::{FileKind, Ino, InodeAttr, Timestamp};

/// Appends little-endian fields to a byte vector.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(n: usize) -> Writer {
        Writer { buf: Vec::with_capacity(n) }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    pub fn ts(&mut self, t: Timestamp) -> &mut Self {
        self.i64(t.secs).u32(t.nanos)
    }
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads little-endian fields; every read checks the remaining length.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { buf, pos: 0, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], MetaError> {
        if self.buf.len() - self.pos < n {
            return Err(MetaError::Corrupt {
                what: self.what,
                detail: format!("needs {} more bytes at offset {}, has {}", n, self.pos, self.buf.len() - self.pos),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], MetaError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8, MetaError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, MetaError> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    pub fn u32(&mut self) -> Result<u32, MetaError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub fn i32(&mut self) -> Result<i32, MetaError> {
        Ok(i32::from_le_bytes(self.arr()?))
    }
    pub fn u64(&mut self) -> Result<u64, MetaError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    pub fn i64(&mut self) -> Result<i64, MetaError> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], MetaError> {
        self.take(n)
    }
    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
    pub fn ts(&mut self) -> Result<Timestamp, MetaError> {
        let secs = self.i64()?;
        let nanos = self.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(self.corrupt(format!("timestamp nanoseconds {nanos} >= 10^9")));
        }
        Ok(Timestamp { secs, nanos })
    }
    /// Reads the version byte and refuses anything above `supported` (or 0).
    pub fn version(&mut self, supported: u8) -> Result<u8, MetaError> {
        let v = self.u8()?;
        if v == 0 || v > supported {
            return Err(MetaError::Version { what: self.what, found: v, supported });
        }
        Ok(v)
    }
    pub fn corrupt(&self, detail: String) -> MetaError {
        MetaError::Corrupt { what: self.what, detail }
    }
    pub fn kind(&mut self) -> Result<FileKind, MetaError> {
        let k = self.u8()?;
        kind_from_id(k).ok_or_else(|| self.corrupt(format!("unknown file kind {k}")))
    }
}

/// On-disk file kind ids (part of the format).
pub fn kind_id(k: FileKind) -> u8 {
    match k {
        FileKind::File => 1,
        FileKind::Dir => 2,
        FileKind::Symlink => 3,
        FileKind::CharDev => 4,
        FileKind::BlockDev => 5,
        FileKind::Fifo => 6,
        FileKind::Socket => 7,
    }
}

pub fn kind_from_id(id: u8) -> Option<FileKind> {
    Some(match id {
        1 => FileKind::File,
        2 => FileKind::Dir,
        3 => FileKind::Symlink,
        4 => FileKind::CharDev,
        5 => FileKind::BlockDev,
        6 => FileKind::Fifo,
        7 => FileKind::Socket,
        _ => return None,
    })
}

pub const INODE_VERSION: u8 = 1;
/// Encoded length of an inode record, version 1.
pub const INODE_LEN: usize = 1 + 1 + 4 * 4 + 8 + 8 + 4 + 12 * 4 + 8;

/// Inode value: version, kind, perm, uid, gid, nlink, size, blocks_bytes, rdev, atime, mtime,
/// ctime, crtime, generation. The inode number is the key and is not repeated.
pub fn encode_inode(a: &InodeAttr) -> Vec<u8> {
    let mut w = Writer::with_capacity(INODE_LEN);
    w.u8(INODE_VERSION)
        .u8(kind_id(a.kind))
        .u32(a.perm)
        .u32(a.uid)
        .u32(a.gid)
        .u32(a.nlink)
        .u64(a.size)
        .u64(a.blocks_bytes)
        .u32(a.rdev)
        .ts(a.atime)
        .ts(a.mtime)
        .ts(a.ctime)
        .ts(a.crtime)
        .u64(a.generation);
    w.finish()
}

pub fn decode_inode(ino: Ino, v: &[u8]) -> Result<InodeAttr, MetaError> {
    let mut r = Reader::new(v, "inode");
    r.version(INODE_VERSION)?;
    Ok(InodeAttr {
        ino,
        kind: r.kind()?,
        perm: r.u32()?,
        uid: r.u32()?,
        gid: r.u32()?,
        nlink: r.u32()?,
        size: r.u64()?,
        blocks_bytes: r.u64()?,
        rdev: r.u32()?,
        atime: r.ts()?,
        mtime: r.ts()?,
        ctime: r.ts()?,
        crtime: r.ts()?,
        generation: r.u64()?,
    })
}

pub const DIRENT_VERSION: u8 = 1;

/// Value of `dirents` ((dir, name) → entry): version, kind, ino, cookie.
pub fn encode_dirent(ino: Ino, kind: FileKind, cookie: u64) -> Vec<u8> {
    let mut w = Writer::with_capacity(18);
    w.u8(DIRENT_VERSION).u8(kind_id(kind)).u64(ino).u64(cookie);
    w.finish()
}

pub fn decode_dirent(v: &[u8]) -> Result<(Ino, FileKind, u64), MetaError> {
    let mut r = Reader::new(v, "dirent");
    r.version(DIRENT_VERSION)?;
    let kind = r.kind()?;
    Ok((r.u64()?, kind, r.u64()?))
}

/// Value of `dir_cookies` ((dir, cookie) → entry): version, kind, ino, name (rest).
pub fn encode_cookie_entry(ino: Ino, kind: FileKind, name: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(10 + name.len());
    w.u8(DIRENT_VERSION).u8(kind_id(kind)).u64(ino).bytes(name);
    w.finish()
}

pub fn decode_cookie_entry(v: &[u8]) -> Result<(Ino, FileKind, Vec<u8>), MetaError> {
    let mut r = Reader::new(v, "directory cookie");
    r.version(DIRENT_VERSION)?;
    let kind = r.kind()?;
    let ino = r.u64()?;
    Ok((ino, kind, r.rest().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attr(ino: u64, size: u64, secs: i64, nanos: u32) -> InodeAttr {
        let t = Timestamp { secs, nanos };
        InodeAttr {
            ino,
            kind: FileKind::Symlink,
            perm: 0o4755,
            uid: 1000,
            gid: 100,
            nlink: 3,
            size,
            blocks_bytes: 4096,
            rdev: 7,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            generation: 9,
        }
    }

    proptest! {
        #[test]
        fn inode_round_trips(ino in 1u64.., size: u64, secs: i64, nanos in 0u32..1_000_000_000) {
            let a = attr(ino, size, secs, nanos);
            let e = encode_inode(&a);
            prop_assert_eq!(e.len(), INODE_LEN);
            prop_assert_eq!(decode_inode(ino, &e).unwrap(), a);
        }
    }

    #[test]
    fn truncated_inode_is_corrupt_not_panic() {
        let e = encode_inode(&attr(5, 1, 2, 3));
        for n in 0..e.len() {
            assert!(decode_inode(5, &e[..n]).is_err());
        }
    }

    #[test]
    fn future_inode_version_is_refused() {
        let mut e = encode_inode(&attr(5, 1, 2, 3));
        e[0] = 2;
        assert!(matches!(decode_inode(5, &e), Err(MetaError::Version { found: 2, .. })));
    }

    #[test]
    fn dirent_round_trips() {
        let e = encode_dirent(42, FileKind::Dir, 7);
        assert_eq!(decode_dirent(&e).unwrap(), (42, FileKind::Dir, 7));
        let c = encode_cookie_entry(42, FileKind::Fifo, b"name\0x");
        assert_eq!(decode_cookie_entry(&c).unwrap(), (42, FileKind::Fifo, b"name\0x".to_vec()));
    }

    #[test]
    fn kind_ids_round_trip_and_unknown_is_none() {
        for id in 0..=255u8 {
            if let Some(k) = kind_from_id(id) {
                assert_eq!(kind_id(k), id);
            }
        }
        assert!(kind_from_id(0).is_none());
        assert!(kind_from_id(8).is_none());
    }
}
