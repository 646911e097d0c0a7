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

/// Where the stored bytes of a record live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredRecord {
    Device(DeviceExtent),
    /// Small files: the stored bytes live in the extent row itself.
    Inline(Vec<u8>),
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

pub const EXTENT_VERSION: u8 = 1;
const TAG_DEVICE: u8 = 1;
const TAG_INLINE: u8 = 2;

impl ExtentPtr {
    /// Stored (physical) length in bytes.
    pub fn psize(&self) -> u64 {
        match &self.stored {
            StoredRecord::Device(d) => u64::from(d.psize),
            StoredRecord::Inline(v) => v.len() as u64,
        }
    }

    /// version, tag, alg, level, logical, hash, birth, then either
    /// device (dev u32, offset u64, psize u32) or inline (the stored bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(48);
        w.u8(EXTENT_VERSION);
        w.u8(match self.stored {
            StoredRecord::Device(_) => TAG_DEVICE,
            StoredRecord::Inline(_) => TAG_INLINE,
        });
        w.u8(self.alg).i32(self.level).u32(self.logical).u64(self.hash).u64(self.birth);
        match &self.stored {
            StoredRecord::Device(d) => {
                w.u32(d.dev).u64(d.offset).u32(d.psize);
            }
            StoredRecord::Inline(v) => {
                w.bytes(v);
            }
        }
        w.finish()
    }

    pub fn decode(v: &[u8]) -> Result<ExtentPtr, MetaError> {
        let mut r = Reader::new(v, "extent");
        r.version(EXTENT_VERSION)?;
        let tag = r.u8()?;
        let alg = r.u8()?;
        let level = r.i32()?;
        let logical = r.u32()?;
        let hash = r.u64()?;
        let birth = r.u64()?;
        let stored = match tag {
            TAG_DEVICE => StoredRecord::Device(DeviceExtent { dev: r.u32()?, offset: r.u64()?, psize: r.u32()? }),
            TAG_INLINE => StoredRecord::Inline(r.rest().to_vec()),
            t => return Err(r.corrupt(format!("unknown extent tag {t}"))),
        };
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
                              inline in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64))) {
            let stored = match inline {
                Some(v) => StoredRecord::Inline(v),
                None => StoredRecord::Device(DeviceExtent { dev, offset, psize }),
            };
            let e = ExtentPtr { logical, alg, level, hash, birth, stored };
            prop_assert_eq!(ExtentPtr::decode(&e.encode()).unwrap(), e);
        }
    }

    #[test]
    fn unknown_tag_is_corrupt() {
        let e = ExtentPtr { logical: 1, alg: 0, level: 0, hash: 0, birth: 1, stored: StoredRecord::Inline(vec![1]) };
        let mut b = e.encode();
        b[1] = 9;
        assert!(matches!(ExtentPtr::decode(&b), Err(MetaError::Corrupt { .. })));
    }
}
