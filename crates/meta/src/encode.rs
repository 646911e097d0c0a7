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
    /// LEB128: 7 bits per byte, low bits first, the high bit set on every byte but the
    /// last (1 byte below 128, 10 for the largest u64).
    pub fn varint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }
    /// A signed number as the varint of its zigzag form (0, -1, 1, -2, … → 0, 1, 2, 3, …),
    /// so small magnitudes of either sign take few bytes.
    pub fn zigzag(&mut self, v: i64) -> &mut Self {
        self.varint(((v << 1) ^ (v >> 63)) as u64)
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
    /// Inverse of [`Writer::varint`]; an encoding longer than 10 bytes or wider than 64
    /// bits is corrupt.
    pub fn varint(&mut self) -> Result<u64, MetaError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if i == 9 && bits > 1 {
                return Err(self.corrupt("varint wider than 64 bits".into()));
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.corrupt("varint longer than 10 bytes".into()))
    }
    pub fn zigzag(&mut self) -> Result<i64, MetaError> {
        let u = self.varint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
    /// A varint that must fit 32 bits.
    pub fn varint32(&mut self) -> Result<u32, MetaError> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.corrupt(format!("{v} does not fit 32 bits")))
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
/// The compact inode encoding (pools with `INCOMPAT_COMPACT_ROWS`).
pub const INODE_VERSION_COMPACT: u8 = 2;
/// Encoded length of an inode record, version 1.
pub const INODE_LEN: usize = 1 + 1 + 4 * 4 + 8 + 8 + 4 + 12 * 4 + 8;

/// The inode encoding a pool writes: compact (version 2) in pools with
/// `INCOMPAT_COMPACT_ROWS`, version 1 in older ones (which older builds must still read).
pub fn encode_inode_for(a: &InodeAttr, compact: bool) -> Vec<u8> {
    if compact {
        encode_inode_compact(a)
    } else {
        encode_inode(a)
    }
}

/// Flags byte of a compact inode: which times have non-zero nanoseconds (then stored as
/// a u32), and which times equal another (then not stored).
const NS_MTIME: u8 = 1 << 0;
const NS_ATIME: u8 = 1 << 1;
const NS_CTIME: u8 = 1 << 2;
const NS_CRTIME: u8 = 1 << 3;
const ATIME_IS_MTIME: u8 = 1 << 4;
const CTIME_IS_MTIME: u8 = 1 << 5;
const CRTIME_IS_CTIME: u8 = 1 << 6;

/// Inode value, version 2 (docs/format.md): version, kind, flags, then varints of perm, uid,
/// gid, nlink, size, blocks_bytes, rdev, generation, then the times: mtime's seconds
/// (zigzag), atime's and ctime's as zigzag differences from mtime's, crtime's from ctime's,
/// each left out when the flags say it equals that time, each followed by its nanoseconds
/// (u32) when the flags say they are not zero.
pub fn encode_inode_compact(a: &InodeAttr) -> Vec<u8> {
    let mut flags = 0u8;
    for (t, bit) in [(a.mtime, NS_MTIME), (a.atime, NS_ATIME), (a.ctime, NS_CTIME), (a.crtime, NS_CRTIME)] {
        if t.nanos != 0 {
            flags |= bit;
        }
    }
    if a.atime == a.mtime {
        flags |= ATIME_IS_MTIME;
    }
    if a.ctime == a.mtime {
        flags |= CTIME_IS_MTIME;
    }
    if a.crtime == a.ctime {
        flags |= CRTIME_IS_CTIME;
    }
    let mut w = Writer::with_capacity(48);
    w.u8(INODE_VERSION_COMPACT).u8(kind_id(a.kind)).u8(flags);
    for v in [
        u64::from(a.perm),
        u64::from(a.uid),
        u64::from(a.gid),
        u64::from(a.nlink),
        a.size,
        a.blocks_bytes,
        u64::from(a.rdev),
        a.generation,
    ] {
        w.varint(v);
    }
    let time = |w: &mut Writer, t: Timestamp, base: i64, ns_bit: u8| {
        w.zigzag(t.secs.wrapping_sub(base));
        if flags & ns_bit != 0 {
            w.u32(t.nanos);
        }
    };
    time(&mut w, a.mtime, 0, NS_MTIME);
    if flags & ATIME_IS_MTIME == 0 {
        time(&mut w, a.atime, a.mtime.secs, NS_ATIME);
    }
    if flags & CTIME_IS_MTIME == 0 {
        time(&mut w, a.ctime, a.mtime.secs, NS_CTIME);
    }
    if flags & CRTIME_IS_CTIME == 0 {
        time(&mut w, a.crtime, a.ctime.secs, NS_CRTIME);
    }
    w.finish()
}

fn decode_inode_compact(ino: Ino, r: &mut Reader<'_>) -> Result<InodeAttr, MetaError> {
    let kind = r.kind()?;
    let flags = r.u8()?;
    if flags & 0x80 != 0 {
        return Err(r.corrupt(format!("unknown inode flags {flags:#x}")));
    }
    let (perm, uid, gid, nlink) = (r.varint32()?, r.varint32()?, r.varint32()?, r.varint32()?);
    let (size, blocks_bytes, rdev, generation) = (r.varint()?, r.varint()?, r.varint32()?, r.varint()?);
    let time = |r: &mut Reader<'_>, base: i64, ns_bit: u8| -> Result<Timestamp, MetaError> {
        let secs = r.zigzag()?.wrapping_add(base);
        let nanos = if flags & ns_bit != 0 { r.u32()? } else { 0 };
        if nanos >= 1_000_000_000 {
            return Err(r.corrupt(format!("timestamp nanoseconds {nanos} >= 10^9")));
        }
        Ok(Timestamp { secs, nanos })
    };
    let mtime = time(r, 0, NS_MTIME)?;
    let atime = if flags & ATIME_IS_MTIME != 0 { mtime } else { time(r, mtime.secs, NS_ATIME)? };
    let ctime = if flags & CTIME_IS_MTIME != 0 { mtime } else { time(r, mtime.secs, NS_CTIME)? };
    let crtime = if flags & CRTIME_IS_CTIME != 0 { ctime } else { time(r, ctime.secs, NS_CRTIME)? };
    if !r.rest().is_empty() {
        return Err(r.corrupt("bytes after the last field".into()));
    }
    Ok(InodeAttr {
        ino,
        kind,
        perm,
        uid,
        gid,
        nlink,
        size,
        blocks_bytes,
        rdev,
        atime,
        mtime,
        ctime,
        crtime,
        generation,
    })
}

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

/// Either version: a pool with compact inodes may still hold rows written before
/// (`fsck_damage` writes version 1 rows into any pool, for one).
pub fn decode_inode(ino: Ino, v: &[u8]) -> Result<InodeAttr, MetaError> {
    let mut r = Reader::new(v, "inode");
    if r.version(INODE_VERSION_COMPACT)? == INODE_VERSION_COMPACT {
        return decode_inode_compact(ino, &mut r);
    }
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
/// The compact directory-entry encodings (pools with `INCOMPAT_COMPACT_ROWS`).
pub const DIRENT_VERSION_COMPACT: u8 = 2;

/// Value of `dirents` ((dir, name) → entry): version, kind, ino, cookie; compact (version
/// 2): version, kind, varint ino, varint cookie.
pub fn encode_dirent_for(ino: Ino, kind: FileKind, cookie: u64, compact: bool) -> Vec<u8> {
    let mut w = Writer::with_capacity(18);
    if compact {
        w.u8(DIRENT_VERSION_COMPACT).u8(kind_id(kind)).varint(ino).varint(cookie);
    } else {
        w.u8(DIRENT_VERSION).u8(kind_id(kind)).u64(ino).u64(cookie);
    }
    w.finish()
}

/// Version 1 of [`encode_dirent_for`].
pub fn encode_dirent(ino: Ino, kind: FileKind, cookie: u64) -> Vec<u8> {
    encode_dirent_for(ino, kind, cookie, false)
}

pub fn decode_dirent(v: &[u8]) -> Result<(Ino, FileKind, u64), MetaError> {
    let mut r = Reader::new(v, "dirent");
    let version = r.version(DIRENT_VERSION_COMPACT)?;
    let kind = r.kind()?;
    if version == DIRENT_VERSION_COMPACT {
        let (ino, cookie) = (r.varint()?, r.varint()?);
        if !r.rest().is_empty() {
            return Err(r.corrupt("bytes after the last field".into()));
        }
        return Ok((ino, kind, cookie));
    }
    Ok((r.u64()?, kind, r.u64()?))
}

/// Value of `dir_cookies` ((dir, cookie) → entry): version, kind, ino, name (rest);
/// compact (version 2): version, kind, varint ino, name (rest).
pub fn encode_cookie_entry_for(ino: Ino, kind: FileKind, name: &[u8], compact: bool) -> Vec<u8> {
    let mut w = Writer::with_capacity(10 + name.len());
    if compact {
        w.u8(DIRENT_VERSION_COMPACT).u8(kind_id(kind)).varint(ino).bytes(name);
    } else {
        w.u8(DIRENT_VERSION).u8(kind_id(kind)).u64(ino).bytes(name);
    }
    w.finish()
}

/// Version 1 of [`encode_cookie_entry_for`].
pub fn encode_cookie_entry(ino: Ino, kind: FileKind, name: &[u8]) -> Vec<u8> {
    encode_cookie_entry_for(ino, kind, name, false)
}

pub fn decode_cookie_entry(v: &[u8]) -> Result<(Ino, FileKind, Vec<u8>), MetaError> {
    let mut r = Reader::new(v, "directory cookie");
    let version = r.version(DIRENT_VERSION_COMPACT)?;
    let kind = r.kind()?;
    let ino = if version == DIRENT_VERSION_COMPACT { r.varint()? } else { r.u64()? };
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
        e[0] = 3;
        assert!(matches!(decode_inode(5, &e), Err(MetaError::Version { found: 3, .. })));
    }

    fn ts() -> impl Strategy<Value = Timestamp> {
        (any::<i64>(), prop_oneof![Just(0u32), 0u32..1_000_000_000]).prop_map(|(secs, nanos)| Timestamp { secs, nanos })
    }

    prop_compose! {
        fn any_attr()(ino in 1u64.., kind in 1u8..=7, perm in 0u32..0o10000, uid: u32, gid: u32, nlink: u32,
                      size: u64, blocks_bytes: u64, rdev: u32, generation: u64,
                      mtime in ts(), atime in ts(), ctime in ts(), crtime in ts(),
                      same in 0u8..8) -> InodeAttr {
            // times equal to each other as often as not, as in real inodes
            let atime = if same & 1 != 0 { mtime } else { atime };
            let ctime = if same & 2 != 0 { mtime } else { ctime };
            let crtime = if same & 4 != 0 { ctime } else { crtime };
            InodeAttr { ino, kind: kind_from_id(kind).unwrap(), perm, uid, gid, nlink, size, blocks_bytes, rdev,
                        atime, mtime, ctime, crtime, generation }
        }
    }

    proptest! {
        #[test]
        fn compact_inode_round_trips(a in any_attr()) {
            let e = encode_inode_compact(&a);
            prop_assert_eq!(e[0], INODE_VERSION_COMPACT);
            prop_assert_eq!(decode_inode(a.ino, &e).unwrap(), a.clone());
            for n in 0..e.len() {
                prop_assert!(decode_inode(a.ino, &e[..n]).is_err());
            }
            prop_assert_eq!(decode_inode(a.ino, &encode_inode_for(&a, false)).unwrap(), a);
        }

        #[test]
        fn varints_round_trip(v: u64, s: i64) {
            let mut w = Writer::default();
            w.varint(v).zigzag(s);
            let b = w.finish();
            let mut r = Reader::new(&b, "test");
            prop_assert_eq!(r.varint().unwrap(), v);
            prop_assert_eq!(r.zigzag().unwrap(), s);
            prop_assert!(r.rest().is_empty());
        }
    }

    /// The compact layout of docs/format.md, byte by byte: a file made at one moment
    /// (every time equal) and one whose times differ.
    #[test]
    fn compact_inode_layout() {
        let t = Timestamp { secs: 1_700_000_000, nanos: 0 };
        let a = InodeAttr { generation: 1, ..InodeAttr::new(9, FileKind::File, 0o644, 1000, 100, t) };
        let e = encode_inode_compact(&a);
        let secs = [0x80, 0xc4, 0x9f, 0xd5, 0x0c]; // zigzag(1_700_000_000) = 3_400_000_000
        let mut want = vec![2, 1, 0x70, 0xa4, 0x03, 0xe8, 0x07, 0x64, 1, 0, 0, 0, 1];
        want.extend_from_slice(&secs);
        assert_eq!(e, want);
        let b = InodeAttr {
            atime: Timestamp { secs: 1_700_000_001, nanos: 5 },
            ctime: Timestamp { secs: 1_699_999_999, nanos: 0 },
            crtime: Timestamp { secs: 1_700_000_063, nanos: 0 },
            size: 300,
            ..a
        };
        let e = encode_inode_compact(&b);
        let mut want = vec![2, 1, NS_ATIME, 0xa4, 0x03, 0xe8, 0x07, 0x64, 1, 0xac, 0x02, 0, 0, 1];
        want.extend_from_slice(&secs);
        want.extend_from_slice(&[2, 5, 0, 0, 0]); // atime: +1 s, 5 ns
        want.push(1); // ctime: -1 s
        want.push(128); // crtime: ctime + 64 s (zigzag 128, two bytes)
        want.push(1);
        assert_eq!(e, want);
        assert_eq!(decode_inode(9, &e).unwrap(), b);
    }

    #[test]
    fn overlong_varints_are_corrupt() {
        let b = [0xffu8; 11];
        assert!(matches!(Reader::new(&b, "t").varint(), Err(MetaError::Corrupt { .. })));
        let mut b = vec![0xffu8; 9];
        b.push(0x02); // bit 64
        assert!(matches!(Reader::new(&b, "t").varint(), Err(MetaError::Corrupt { .. })));
        let mut b = vec![0xffu8; 9];
        b.push(0x01);
        assert_eq!(Reader::new(&b, "t").varint().unwrap(), u64::MAX);
    }

    #[test]
    fn dirent_round_trips() {
        for compact in [false, true] {
            for (ino, cookie) in [(42, 7), (u64::MAX, u64::MAX), (1, 3)] {
                let e = encode_dirent_for(ino, FileKind::Dir, cookie, compact);
                assert_eq!(decode_dirent(&e).unwrap(), (ino, FileKind::Dir, cookie));
                for n in 0..e.len() {
                    assert!(decode_dirent(&e[..n]).is_err());
                }
                let c = encode_cookie_entry_for(ino, FileKind::Fifo, b"name\0x", compact);
                assert_eq!(decode_cookie_entry(&c).unwrap(), (ino, FileKind::Fifo, b"name\0x".to_vec()));
            }
        }
        // the layouts of docs/format.md
        assert_eq!(encode_dirent_for(300, FileKind::File, 5, true), [2, 1, 0xac, 0x02, 5]);
        assert_eq!(encode_cookie_entry_for(300, FileKind::Dir, b"ab", true), [2, 2, 0xac, 0x02, b'a', b'b']);
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
