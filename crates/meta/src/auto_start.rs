//! Where `compress=auto` starts on the next mount: the rung the last write ended on, per auto
//! range (table `auto_start`, key: the range's spec text; docs/format.md "auto_start").
//! Written by the txg commit when a controller's point changed, read at pool open; a pool
//! without rows has never written under `auto`, and a build that does not know the table
//! ignores it (compat feature `COMPAT_AUTO_START`).

use crate::encode::{Reader, Writer};
use crate::error::MetaError;

pub const AUTO_START_VERSION: u8 = 1;
/// Bytes of an encoded value: version, alg, level (i32 LE).
pub const AUTO_START_LEN: usize = 6;
/// The highest `squeezefs_codec::Algorithm` id the format knows (0 raw … 5 lzo).
pub const MAX_ALG_ID: u8 = 5;

const WHAT: &str = "auto start";

/// The codec an auto range's controller starts at: a `squeezefs_codec::Algorithm` id (0 =
/// raw) and its level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoStart {
    pub alg: u8,
    pub level: i32,
}

impl AutoStart {
    /// version (1), alg (u8), level (i32 LE): 6 bytes.
    pub fn encode(&self) -> [u8; AUTO_START_LEN] {
        let mut w = Writer::with_capacity(AUTO_START_LEN);
        w.u8(AUTO_START_VERSION).u8(self.alg).i32(self.level);
        let mut out = [0u8; AUTO_START_LEN];
        out.copy_from_slice(&w.finish());
        out
    }

    /// Refuses another length (`Corrupt`), another version (`Version`) and an algorithm id
    /// above [`MAX_ALG_ID`] (`Corrupt`).
    pub fn decode(v: &[u8]) -> Result<AutoStart, MetaError> {
        let mut r = Reader::new(v, WHAT);
        r.version(AUTO_START_VERSION)?;
        if v.len() != AUTO_START_LEN {
            return Err(r.corrupt(format!("{} bytes, expected {AUTO_START_LEN}", v.len())));
        }
        let alg = r.u8()?;
        if alg > MAX_ALG_ID {
            return Err(r.corrupt(format!("unknown algorithm id {alg}")));
        }
        Ok(AutoStart { alg, level: r.i32()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn auto_start_round_trips(alg in 0u8..=MAX_ALG_ID, level: i32) {
            let a = AutoStart { alg, level };
            prop_assert_eq!(AutoStart::decode(&a.encode()).unwrap(), a);
        }
    }

    #[test]
    fn the_value_is_laid_out_byte_by_byte() {
        let a = AutoStart { alg: 4, level: -5 };
        assert_eq!(a.encode(), [1, 4, 0xfb, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn damaged_values_are_refused() {
        let good = AutoStart { alg: 4, level: 1 }.encode();
        assert!(matches!(AutoStart::decode(&good[..5]), Err(MetaError::Corrupt { .. })));
        assert!(matches!(AutoStart::decode(&[]), Err(MetaError::Corrupt { .. })));
        let mut long = good.to_vec();
        long.push(0);
        assert!(matches!(AutoStart::decode(&long), Err(MetaError::Corrupt { .. })));
        let mut newer = good;
        newer[0] = 2;
        assert!(matches!(AutoStart::decode(&newer), Err(MetaError::Version { found: 2, .. })));
        let mut zero = good;
        zero[0] = 0;
        assert!(matches!(AutoStart::decode(&zero), Err(MetaError::Version { .. })));
        let mut alg = good;
        alg[1] = MAX_ALG_ID + 1;
        assert!(matches!(AutoStart::decode(&alg), Err(MetaError::Corrupt { .. })));
    }
}
