//! The superblock (pool-wide parameters, feature flags, counters) and device records.

use crate::encode::{Reader, Writer};
use crate::error::MetaError;

pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"SQZFSMET";
pub const SUPERBLOCK_VERSION: u8 = 1;

/// Feature flags, ext4-style:
/// * `compat`: an implementation that does not know the bit may read and write the pool;
/// * `ro_compat`: it may only open the pool read-only;
/// * `incompat`: it must refuse to open the pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    pub compat: u64,
    pub ro_compat: u64,
    pub incompat: u64,
}

impl Features {
    /// Small files stored inline in the extent table.
    pub const INCOMPAT_INLINE_DATA: u64 = 1 << 0;
    /// Records packed at sector granularity (not block granularity).
    pub const INCOMPAT_PACKED_SECTORS: u64 = 1 << 1;
    /// Records of one txg packed at byte granularity inside runs of whole sectors (an
    /// extent's offset need not be sector-aligned; its footprint is its stored length).
    pub const INCOMPAT_PACKED_BYTES: u64 = 1 << 2;
    /// Small records of several files may be stored together as one bundle (the `bundles`
    /// table; extents with the bundled tag).
    pub const INCOMPAT_BUNDLES: u64 = 1 << 3;
    /// Inode, extent and directory-entry rows may use their compact encodings (version 2:
    /// varints; an inode's times that equal another left out).
    pub const INCOMPAT_COMPACT_ROWS: u64 = 1 << 4;
    /// Files may have their own record size (rows of the `recordsizes` table): offsets of
    /// such a file map to records of that size, not the superblock's. Not set by mkfs: the
    /// commit that writes the pool's first such row sets it, so a pool whose files all use
    /// the superblock's record size stays readable by builds that predate it.
    pub const INCOMPAT_RECORDSIZES: u64 = 1 << 5;
    /// Bundles may be longer than the pool's record size: the superblock carries their bound
    /// (`Superblock::bundle_size`, bytes 89..93). Set by mkfs only when that bound differs
    /// from the record size, so a pool whose bundles are bounded by its record size stays
    /// readable by builds that predate it; a build that does not know the bit would take
    /// the record size for the bound and call every longer bundle damaged.
    pub const INCOMPAT_BUNDLE_SIZE: u64 = 1 << 6;
    /// The metadata store is kept as checked copies (`meta.copy0`, `meta.copy1`: every 4 KiB
    /// block with its own checksum), not as one plain `meta.redb`; the superblock carries
    /// how many (`Superblock::meta_copies`, the byte after `created` or `bundle_size`).
    /// Builds that predate it find no `meta.redb` and call the pool no pool.
    pub const INCOMPAT_META_COPIES: u64 = 1 << 7;
    /// A device of the pool is an object store prefix (device kind 3): its bytes live in
    /// segment objects found through the pool directory's object map (`object.N.redb`).
    /// Set by mkfs only for such pools; a build that does not know the bit would take the
    /// `s3://` path for a file.
    pub const INCOMPAT_OBJECT_DEVICE: u64 = 1 << 8;
    /// Device records may be referenced by more than one extent row (copies that share
    /// stored records, `copy_file_range`): the `refcounts` table holds the reference count of
    /// each record referenced more than once, and a record is freed only when its last
    /// reference goes. Not set by mkfs: the commit that writes the pool's first `refcounts`
    /// row sets it; a build that does not know it would free a shared record while another
    /// file still points to it.
    pub const INCOMPAT_SHARED_RECORDS: u64 = 1 << 9;

    /// The `background` table may hold background compression's cursor (a build that does
    /// not know it ignores the table; background compression then starts afresh).
    pub const COMPAT_BACKGROUND: u64 = 1 << 0;
    /// The `auto_start` table may hold the rung each auto range starts at (a build that
    /// does not know it ignores the table; its mounts start at the nominal rung).
    pub const COMPAT_AUTO_START: u64 = 1 << 1;

    pub const KNOWN_COMPAT: u64 = Self::COMPAT_BACKGROUND | Self::COMPAT_AUTO_START;
    pub const KNOWN_RO_COMPAT: u64 = 0;
    pub const KNOWN_INCOMPAT: u64 = Self::INCOMPAT_INLINE_DATA
        | Self::INCOMPAT_PACKED_SECTORS
        | Self::INCOMPAT_PACKED_BYTES
        | Self::INCOMPAT_BUNDLES
        | Self::INCOMPAT_COMPACT_ROWS
        | Self::INCOMPAT_RECORDSIZES
        | Self::INCOMPAT_BUNDLE_SIZE
        | Self::INCOMPAT_OBJECT_DEVICE
        | Self::INCOMPAT_META_COPIES
        | Self::INCOMPAT_SHARED_RECORDS;
    /// Incompatible features mkfs sets; `INCOMPAT_BUNDLE_SIZE` is added by mkfs when the
    /// pool's bundle size is not its record size, the others are set when first used.
    pub const MKFS_INCOMPAT: u64 = Self::INCOMPAT_INLINE_DATA
        | Self::INCOMPAT_PACKED_SECTORS
        | Self::INCOMPAT_PACKED_BYTES
        | Self::INCOMPAT_BUNDLES
        | Self::INCOMPAT_COMPACT_ROWS;

    /// What this build writes at mkfs.
    pub fn current() -> Features {
        Features { compat: 0, ro_compat: 0, incompat: Self::MKFS_INCOMPAT }
    }
    pub fn unknown_incompat(&self) -> u64 {
        self.incompat & !Self::KNOWN_INCOMPAT
    }
    pub fn unknown_ro_compat(&self) -> u64 {
        self.ro_compat & !Self::KNOWN_RO_COMPAT
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub features: Features,
    pub pool_id: [u8; 16],
    pub sector: u32,
    pub recordsize: u32,
    pub max_inline: u32,
    pub device_count: u32,
    /// next inode number `alloc_ino` hands out (numbers are never reused)
    pub next_ino: u64,
    /// last committed transaction group
    pub txg: u64,
    /// creation time, seconds since the epoch
    pub created: i64,
    /// bound of a bundle's decoded and stored bytes when the pool has
    /// `INCOMPAT_BUNDLE_SIZE` (encoded after `created` then, and only then); `None`: the
    /// record size bounds them, as in pools made before the field
    pub bundle_size: Option<u32>,
    /// copies of the metadata store when the pool has `INCOMPAT_META_COPIES` (encoded last
    /// then, and only then); `None`: one plain `meta.redb`
    pub meta_copies: Option<u8>,
}

impl Superblock {
    /// The bound of a bundle's decoded and stored bytes in this pool.
    pub fn bundle_size(&self) -> u32 {
        self.bundle_size.unwrap_or(self.recordsize)
    }

    /// magic, version, compat, ro_compat, incompat, pool_id, sector, recordsize, max_inline,
    /// device_count, next_ino, txg, created, with `INCOMPAT_BUNDLE_SIZE` bundle_size, with
    /// `INCOMPAT_META_COPIES` meta_copies.
    /// The field follows the flag, not `bundle_size`: a superblock always decodes to what
    /// its flags say (a `bundle_size` without the flag is not written).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(96);
        w.bytes(&SUPERBLOCK_MAGIC)
            .u8(SUPERBLOCK_VERSION)
            .u64(self.features.compat)
            .u64(self.features.ro_compat)
            .u64(self.features.incompat)
            .bytes(&self.pool_id)
            .u32(self.sector)
            .u32(self.recordsize)
            .u32(self.max_inline)
            .u32(self.device_count)
            .u64(self.next_ino)
            .u64(self.txg)
            .i64(self.created);
        if self.features.incompat & Features::INCOMPAT_BUNDLE_SIZE != 0 {
            w.u32(self.bundle_size());
        }
        if self.features.incompat & Features::INCOMPAT_META_COPIES != 0 {
            w.u8(self.meta_copies.unwrap_or(1));
        }
        w.finish()
    }

    pub fn decode(v: &[u8]) -> Result<Superblock, MetaError> {
        let mut r = Reader::new(v, "superblock");
        let magic = r.bytes(8)?;
        if magic != SUPERBLOCK_MAGIC {
            return Err(r.corrupt(format!("bad magic {magic:02x?}, expected \"SQZFSMET\"")));
        }
        r.version(SUPERBLOCK_VERSION)?;
        let features = Features { compat: r.u64()?, ro_compat: r.u64()?, incompat: r.u64()? };
        let mut pool_id = [0u8; 16];
        pool_id.copy_from_slice(r.bytes(16)?);
        let mut sb = Superblock {
            features,
            pool_id,
            sector: r.u32()?,
            recordsize: r.u32()?,
            max_inline: r.u32()?,
            device_count: r.u32()?,
            next_ino: r.u64()?,
            txg: r.u64()?,
            created: r.i64()?,
            bundle_size: None,
            meta_copies: None,
        };
        if features.incompat & Features::INCOMPAT_BUNDLE_SIZE != 0 {
            sb.bundle_size = Some(r.u32()?);
        }
        if features.incompat & Features::INCOMPAT_META_COPIES != 0 {
            sb.meta_copies = Some(r.u8()?);
        }
        Ok(sb)
    }
}

/// Kind of a pool device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// the pool's own device file, grows on demand
    GrowableFile = 0,
    /// a file with a fixed capacity
    FixedFile = 1,
    /// a block device
    Block = 2,
    /// an object store prefix (`s3://BUCKET/PREFIX`, the path field); growable
    Object = 3,
}

pub const DEVICE_RECORD_VERSION: u8 = 1;

/// What the superblock knows about one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRecord {
    pub kind: DeviceKind,
    /// usable bytes (0 = growable)
    pub capacity: u64,
    /// allocation end: every byte at or after it is free
    pub alloc_end: u64,
    /// path as given at mkfs; relative paths are relative to the pool directory
    pub path: Vec<u8>,
}

impl DeviceRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(24 + self.path.len());
        w.u8(DEVICE_RECORD_VERSION)
            .u8(self.kind as u8)
            .u64(self.capacity)
            .u64(self.alloc_end)
            .u16(self.path.len() as u16)
            .bytes(&self.path);
        w.finish()
    }

    pub fn decode(v: &[u8]) -> Result<DeviceRecord, MetaError> {
        let mut r = Reader::new(v, "device");
        r.version(DEVICE_RECORD_VERSION)?;
        let kind = match r.u8()? {
            0 => DeviceKind::GrowableFile,
            1 => DeviceKind::FixedFile,
            2 => DeviceKind::Block,
            3 => DeviceKind::Object,
            k => return Err(r.corrupt(format!("unknown device kind {k}"))),
        };
        let capacity = r.u64()?;
        let alloc_end = r.u64()?;
        let n = r.u16()? as usize;
        let path = r.bytes(n)?.to_vec();
        Ok(DeviceRecord { kind, capacity, alloc_end, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            features: Features::current(),
            pool_id: [7; 16],
            sector: 512,
            recordsize: 131072,
            max_inline: 2048,
            device_count: 2,
            next_ino: 2,
            txg: 5,
            created: 1_700_000_000,
            bundle_size: None,
            meta_copies: None,
        }
    }

    #[test]
    fn superblock_round_trips() {
        assert_eq!(Superblock::decode(&sb().encode()).unwrap(), sb());
        let mut b = sb();
        b.features.incompat |= Features::INCOMPAT_BUNDLE_SIZE;
        b.bundle_size = Some(1 << 22);
        assert_eq!(Superblock::decode(&b.encode()).unwrap(), b);
    }

    /// The layout of docs/format.md §2, byte by byte: 89 bytes, and the bundle size at
    /// 89..93 only in a pool with `INCOMPAT_BUNDLE_SIZE`.
    #[test]
    fn superblock_layout() {
        let mut b = sb();
        b.next_ino = 0x0102_0304_0506_0708;
        let e = b.encode();
        assert_eq!(e.len(), 89);
        assert_eq!(&e[0..8], b"SQZFSMET");
        assert_eq!(e[8], 1);
        assert_eq!(&e[25..33], &Features::MKFS_INCOMPAT.to_le_bytes());
        assert_eq!(&e[53..57], &131072u32.to_le_bytes());
        assert_eq!(&e[65..73], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(b.bundle_size(), 131072, "without the field the record size bounds bundles");
        b.features.incompat |= Features::INCOMPAT_BUNDLE_SIZE;
        b.bundle_size = Some(0x0004_0000);
        let e = b.encode();
        assert_eq!(e.len(), 93);
        assert_eq!(&e[89..93], &0x0004_0000u32.to_le_bytes());
        assert_eq!(b.bundle_size(), 0x0004_0000);
        // the flag without its field is a truncated superblock, not a default
        assert!(matches!(Superblock::decode(&e[..89]), Err(MetaError::Corrupt { .. })));
        // a bundle size without the flag is not written: the pool reads as one without it
        let mut c = sb();
        c.bundle_size = Some(1 << 20);
        assert_eq!(Superblock::decode(&c.encode()).unwrap().bundle_size, None);
    }

    /// `META_COPIES` puts the copy count after the other fields: byte 89 without a bundle
    /// size, byte 93 with one.
    #[test]
    fn superblock_meta_copies_follows_the_flag() {
        let mut b = sb();
        b.features.incompat |= Features::INCOMPAT_META_COPIES;
        b.meta_copies = Some(2);
        let e = b.encode();
        assert_eq!((e.len(), e[89]), (90, 2));
        assert_eq!(Superblock::decode(&e).unwrap(), b);
        b.features.incompat |= Features::INCOMPAT_BUNDLE_SIZE;
        b.bundle_size = Some(1 << 18);
        let e = b.encode();
        assert_eq!((e.len(), e[93]), (94, 2));
        assert_eq!(Superblock::decode(&e).unwrap(), b);
        assert!(matches!(Superblock::decode(&e[..93]), Err(MetaError::Corrupt { .. })));
    }

    #[test]
    fn superblock_bad_magic_is_refused() {
        let mut e = sb().encode();
        e[0] = b'X';
        assert!(matches!(Superblock::decode(&e), Err(MetaError::Corrupt { .. })));
    }

    #[test]
    fn unknown_feature_bits_are_detected() {
        let mut f = Features::current();
        assert_eq!(f.unknown_incompat(), 0);
        f.incompat |= 1 << 40;
        f.ro_compat |= 1 << 3;
        assert_eq!(f.unknown_incompat(), 1 << 40);
        assert_eq!(f.unknown_ro_compat(), 1 << 3);
    }

    #[test]
    fn device_record_round_trips() {
        let d = DeviceRecord {
            kind: DeviceKind::FixedFile,
            capacity: 1 << 30,
            alloc_end: 4096,
            path: b"/dev/loop0".to_vec(),
        };
        assert_eq!(DeviceRecord::decode(&d.encode()).unwrap(), d);
    }
}
