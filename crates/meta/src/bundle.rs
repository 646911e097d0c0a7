//! Bundles: one stored record holding the small records of several files, compressed
//! together (docs/format.md, `bundles`). A file's record points into a bundle with a
//! [`crate::BundleSlice`]; the bundle row says where the stored bytes are, how to decode
//! them, and how many extent rows still point into it.

use crate::encode::{Reader, Writer};
use crate::error::MetaError;
use crate::extent::DeviceExtent;

pub const BUNDLE_VERSION: u8 = 1;
/// Encoded length of a bundle row, version 1.
pub const BUNDLE_LEN: usize = 1 + 1 + 4 + 4 + 8 + 8 + 4 + 8 + 4 + 4;

/// One bundle (key: its id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// `squeezefs_codec::Algorithm` id of the stored bytes (0 = raw)
    pub alg: u8,
    /// codec level used (informational)
    pub level: i32,
    /// bytes the stored bytes decode to: the members, back to back
    pub logical: u32,
    /// xxh3-64 of the stored bytes
    pub hash: u64,
    /// txg that wrote the bundle
    pub birth: u64,
    /// where the stored bytes are
    pub ext: DeviceExtent,
    /// extent rows pointing into the bundle; the commit that brings it to 0 deletes the row
    /// and frees the device range
    pub members: u32,
}

impl Bundle {
    /// version, alg, level, logical, hash, birth, dev, offset, psize, members.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(BUNDLE_LEN);
        w.u8(BUNDLE_VERSION)
            .u8(self.alg)
            .i32(self.level)
            .u32(self.logical)
            .u64(self.hash)
            .u64(self.birth)
            .u32(self.ext.dev)
            .u64(self.ext.offset)
            .u32(self.ext.psize)
            .u32(self.members);
        w.finish()
    }

    pub fn decode(v: &[u8]) -> Result<Bundle, MetaError> {
        let mut r = Reader::new(v, "bundle");
        r.version(BUNDLE_VERSION)?;
        Ok(Bundle {
            alg: r.u8()?,
            level: r.i32()?,
            logical: r.u32()?,
            hash: r.u64()?,
            birth: r.u64()?,
            ext: DeviceExtent { dev: r.u32()?, offset: r.u64()?, psize: r.u32()? },
            members: r.u32()?,
        })
    }
}

/// The bytes a record of `len` decoded bytes in a bundle of `logical` decoded bytes and
/// `footprint` stored bytes is charged: its proportional share, rounded up, at least 1 (a
/// file with data always has a non-zero footprint). The shares of a bundle's members add up
/// to its footprint plus at most one byte per member.
pub fn member_share(len: u32, logical: u32, footprint: u64) -> u32 {
    if logical == 0 {
        return 1;
    }
    let share = (footprint * u64::from(len)).div_ceil(u64::from(logical));
    share.clamp(1, u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bundle() -> Bundle {
        Bundle {
            alg: 4,
            level: 3,
            logical: 0x0001_0000,
            hash: 0x0102_0304_0506_0708,
            birth: 0x1112_1314_1516_1718,
            ext: DeviceExtent { dev: 2, offset: 0x2122_2324_2526_2728, psize: 0x3132_3334 },
            members: 7,
        }
    }

    /// The layout of docs/format.md, byte by byte.
    #[test]
    fn bundle_layout() {
        let b = bundle().encode();
        assert_eq!(b.len(), BUNDLE_LEN);
        assert_eq!(BUNDLE_LEN, 46);
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 4);
        assert_eq!(&b[2..6], &3i32.to_le_bytes());
        assert_eq!(&b[6..10], &0x0001_0000u32.to_le_bytes());
        assert_eq!(&b[10..18], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[18..26], &0x1112_1314_1516_1718u64.to_le_bytes());
        assert_eq!(&b[26..30], &2u32.to_le_bytes());
        assert_eq!(&b[30..38], &0x2122_2324_2526_2728u64.to_le_bytes());
        assert_eq!(&b[38..42], &0x3132_3334u32.to_le_bytes());
        assert_eq!(&b[42..46], &7u32.to_le_bytes());
        assert_eq!(Bundle::decode(&b).unwrap(), bundle());
    }

    #[test]
    fn truncated_or_future_bundle_is_an_error() {
        let b = bundle().encode();
        for n in 0..b.len() {
            assert!(matches!(Bundle::decode(&b[..n]), Err(MetaError::Corrupt { .. }) | Err(MetaError::Version { .. })));
        }
        let mut f = b.clone();
        f[0] = 2;
        assert!(matches!(Bundle::decode(&f), Err(MetaError::Version { found: 2, .. })));
    }

    proptest! {
        #[test]
        fn bundle_round_trips(alg: u8, level: i32, logical: u32, hash: u64, birth: u64, dev: u32, offset: u64,
                              psize: u32, members: u32) {
            let b = Bundle { alg, level, logical, hash, birth, ext: DeviceExtent { dev, offset, psize }, members };
            prop_assert_eq!(Bundle::decode(&b.encode()).unwrap(), b);
        }

        /// Shares are at least 1, at most the footprint (for a member no longer than the
        /// bundle), and add up to the footprint plus less than one byte per member.
        #[test]
        fn shares_add_up_to_the_footprint(lens in proptest::collection::vec(1u32..200_000, 1..40),
                                          footprint in 1u64..2_000_000) {
            let logical: u32 = lens.iter().sum();
            let shares: Vec<u32> = lens.iter().map(|&l| member_share(l, logical, footprint)).collect();
            let sum: u64 = shares.iter().map(|&s| u64::from(s)).sum();
            for (&s, &l) in shares.iter().zip(&lens) {
                prop_assert!(s >= 1);
                prop_assert!(u64::from(s) <= footprint.max(1) || l > logical);
            }
            prop_assert!(sum >= footprint);
            prop_assert!(sum < footprint + lens.len() as u64 + 1);
        }
    }
}
