//! Extent pointers: where one record of a file is stored and how to verify and decode it.

use crate::encode::{Reader, Writer};
use crate::error::MetaError;

/// A record stored on a device: `psize` bytes at byte `offset` of device `dev`. The
/// allocation occupies `psize` rounded up to the pool's sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceExtent {
    pub dev: u32,
    pub offset: u64,
    pub psize: u32,
}

/// A record stored as a slice of a bundle (crate::bundle): the record's `logical` bytes
/// start at byte `offset` of the bundle's decoded bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BundleSlice {
    /// key of the bundle in the `bundles` table
    pub bundle: u64,
    /// first byte of the record in the decoded bundle
    pub offset: u32,
    /// bytes charged to the file for it (its share of the bundle's footprint, at least 1)
    pub share: u32,
}

/// Where the stored bytes of a record live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredRecord {
    Device(DeviceExtent),
    /// Small files: the stored bytes live in the extent row itself.
    Inline(Vec<u8>),
    /// Small records of several files compressed together (pools with `BUNDLES`).
    Bundled(BundleSlice),
}

/// One record of a file (key: inode, record index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtentPtr {
    /// bytes the record decodes to
    pub logical: u32,
    /// `squeezefs_codec::Algorithm` id of the stored bytes (0 = raw)
    pub alg: u8,
    /// codec level used (informational: decoding needs only `alg`)
    pub level: i32,
    /// xxh3-64 of the stored bytes
    pub hash: u64,
    /// txg that wrote the record
    pub birth: u64,
    pub stored: StoredRecord,
}

// For a bundled record, `alg` and `level` are the bundle's (informational: the bundle row
// says how to decode) and `hash` is the xxh3-64 of the record's decoded bytes (the slice),
// checked after the bundle itself was verified and decoded.

pub const EXTENT_VERSION: u8 = 1;
/// The compact extent encoding (pools with `INCOMPAT_COMPACT_ROWS`).
pub const EXTENT_VERSION_COMPACT: u8 = 2;
const TAG_DEVICE: u8 = 1;
const TAG_INLINE: u8 = 2;
const TAG_BUNDLED: u8 = 3;

impl ExtentPtr {
    /// Stored (physical) length in bytes; for a bundled record, its share of the bundle.
    pub fn psize(&self) -> u64 {
        match &self.stored {
            StoredRecord::Device(d) => u64::from(d.psize),
            StoredRecord::Inline(v) => v.len() as u64,
            StoredRecord::Bundled(b) => u64::from(b.share),
        }
    }

    /// version, tag, alg, level, logical, hash, birth, then either
    /// device (dev u32, offset u64, psize u32), inline (the stored bytes) or bundled
    /// (bundle u64, offset u32, share u32).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(48);
        w.u8(EXTENT_VERSION);
        w.u8(match self.stored {
            StoredRecord::Device(_) => TAG_DEVICE,
            StoredRecord::Inline(_) => TAG_INLINE,
            StoredRecord::Bundled(_) => TAG_BUNDLED,
        });
        w.u8(self.alg).i32(self.level).u32(self.logical).u64(self.hash).u64(self.birth);
        match &self.stored {
            StoredRecord::Device(d) => {
                w.u32(d.dev).u64(d.offset).u32(d.psize);
            }
            StoredRecord::Inline(v) => {
                w.bytes(v);
            }
            StoredRecord::Bundled(b) => {
                w.u64(b.bundle).u32(b.offset).u32(b.share);
            }
        }
        w.finish()
    }

    /// The encoding a pool writes: compact (version 2) in pools with
    /// `INCOMPAT_COMPACT_ROWS`, version 1 in older ones.
    pub fn encode_for(&self, compact: bool) -> Vec<u8> {
        if compact {
            self.encode_compact()
        } else {
            self.encode()
        }
    }

    /// Version 2: version, tag, alg, then zigzag level, varint logical, hash (u64), varint
    /// birth, then device (varints dev, offset, psize), inline (the stored bytes) or
    /// bundled (varints bundle, offset, share).
    pub fn encode_compact(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(32);
        w.u8(EXTENT_VERSION_COMPACT);
        w.u8(match self.stored {
            StoredRecord::Device(_) => TAG_DEVICE,
            StoredRecord::Inline(_) => TAG_INLINE,
            StoredRecord::Bundled(_) => TAG_BUNDLED,
        });
        w.u8(self.alg).zigzag(i64::from(self.level)).varint(u64::from(self.logical)).u64(self.hash).varint(self.birth);
        match &self.stored {
            StoredRecord::Device(d) => {
                w.varint(u64::from(d.dev)).varint(d.offset).varint(u64::from(d.psize));
            }
            StoredRecord::Inline(v) => {
                w.bytes(v);
            }
            StoredRecord::Bundled(b) => {
                w.varint(b.bundle).varint(u64::from(b.offset)).varint(u64::from(b.share));
            }
        }
        w.finish()
    }

    /// Either version.
    pub fn decode(v: &[u8]) -> Result<ExtentPtr, MetaError> {
        let mut r = Reader::new(v, "extent");
        if r.version(EXTENT_VERSION_COMPACT)? == EXTENT_VERSION_COMPACT {
            return Self::decode_compact(&mut r);
        }
        let tag = r.u8()?;
        let alg = r.u8()?;
        let level = r.i32()?;
        let logical = r.u32()?;
        let hash = r.u64()?;
        let birth = r.u64()?;
        let stored = match tag {
            TAG_DEVICE => StoredRecord::Device(DeviceExtent { dev: r.u32()?, offset: r.u64()?, psize: r.u32()? }),
            TAG_INLINE => StoredRecord::Inline(r.rest().to_vec()),
            TAG_BUNDLED => StoredRecord::Bundled(BundleSlice { bundle: r.u64()?, offset: r.u32()?, share: r.u32()? }),
            t => return Err(r.corrupt(format!("unknown extent tag {t}"))),
        };
        Ok(ExtentPtr { logical, alg, level, hash, birth, stored })
    }

    fn decode_compact(r: &mut Reader<'_>) -> Result<ExtentPtr, MetaError> {
        let tag = r.u8()?;
        let alg = r.u8()?;
        let level = r.zigzag()?;
        let level = i32::try_from(level).map_err(|_| r.corrupt(format!("level {level} does not fit 32 bits")))?;
        let logical = r.varint32()?;
        let hash = r.u64()?;
        let birth = r.varint()?;
        let stored = match tag {
            TAG_DEVICE => {
                StoredRecord::Device(DeviceExtent { dev: r.varint32()?, offset: r.varint()?, psize: r.varint32()? })
            }
            TAG_INLINE => StoredRecord::Inline(r.rest().to_vec()),
            TAG_BUNDLED => {
                StoredRecord::Bundled(BundleSlice { bundle: r.varint()?, offset: r.varint32()?, share: r.varint32()? })
            }
            t => return Err(r.corrupt(format!("unknown extent tag {t}"))),
        };
        if !r.rest().is_empty() {
            return Err(r.corrupt("bytes after the last field".into()));
        }
        Ok(ExtentPtr { logical, alg, level, hash, birth, stored })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn extent_round_trips(dev: u32, offset: u64, psize: u32, logical: u32, alg: u8,
                              level: i32, hash: u64, birth: u64,
                              inline in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
                              bundled: bool) {
            let stored = match inline {
                Some(v) => StoredRecord::Inline(v),
                None if bundled => StoredRecord::Bundled(BundleSlice { bundle: offset, offset: dev, share: psize }),
                None => StoredRecord::Device(DeviceExtent { dev, offset, psize }),
            };
            let e = ExtentPtr { logical, alg, level, hash, birth, stored };
            prop_assert_eq!(ExtentPtr::decode(&e.encode()).unwrap(), e.clone());
            let c = e.encode_compact();
            prop_assert_eq!(ExtentPtr::decode(&c).unwrap(), e.clone());
            if !matches!(e.stored, StoredRecord::Inline(_)) {
                for n in 0..c.len() {
                    prop_assert!(ExtentPtr::decode(&c[..n]).is_err());
                }
            }
        }
    }

    /// The bundled layout of docs/format.md, byte by byte.
    #[test]
    fn bundled_extent_layout() {
        let e = ExtentPtr {
            logical: 0x0102_0304,
            alg: 4,
            level: -3,
            hash: 0x1122_3344_5566_7788,
            birth: 9,
            stored: StoredRecord::Bundled(BundleSlice { bundle: 0xA1A2_A3A4_A5A6_A7A8, offset: 77, share: 5 }),
        };
        let b = e.encode();
        assert_eq!(b.len(), 43);
        assert_eq!(&b[..3], &[1, 3, 4]);
        assert_eq!(&b[3..7], &(-3i32).to_le_bytes());
        assert_eq!(&b[27..35], &0xA1A2_A3A4_A5A6_A7A8u64.to_le_bytes());
        assert_eq!(&b[35..39], &77u32.to_le_bytes());
        assert_eq!(&b[39..43], &5u32.to_le_bytes());
        for n in 0..b.len() {
            assert!(ExtentPtr::decode(&b[..n]).is_err(), "{n} bytes decoded");
        }
    }

    /// The compact layout of docs/format.md, byte by byte.
    #[test]
    fn compact_extent_layout() {
        let e = ExtentPtr {
            logical: 300,
            alg: 4,
            level: -2,
            hash: 0x1122_3344_5566_7788,
            birth: 5,
            stored: StoredRecord::Bundled(BundleSlice { bundle: 200, offset: 0, share: 1 }),
        };
        let mut want = vec![2, 3, 4, 3, 0xac, 0x02];
        want.extend_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        want.extend_from_slice(&[5, 0xc8, 0x01, 0, 1]);
        assert_eq!(e.encode_compact(), want);
        let d = ExtentPtr { stored: StoredRecord::Device(DeviceExtent { dev: 0, offset: 4096, psize: 127 }), ..e };
        let mut want = vec![2, 1, 4, 3, 0xac, 0x02];
        want.extend_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        want.extend_from_slice(&[5, 0, 0x80, 0x20, 127]);
        assert_eq!(d.encode_compact(), want);
    }

    #[test]
    fn unknown_tag_is_corrupt() {
        let e = ExtentPtr { logical: 1, alg: 0, level: 0, hash: 0, birth: 1, stored: StoredRecord::Inline(vec![1]) };
        let mut b = e.encode();
        b[1] = 9;
        assert!(matches!(ExtentPtr::decode(&b), Err(MetaError::Corrupt { .. })));
    }
}
