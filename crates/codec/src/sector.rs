//! The one-sector rule: a compressed record is kept only if it occupies fewer sectors than
//! the raw record would.

/// Number of `sector`-byte sectors `bytes` occupies (rounded up).
pub fn sectors(bytes: usize, sector: usize) -> usize {
    bytes.div_ceil(sector)
}

/// A stored record must save at least one sector, else it is stored raw.
pub fn saves_a_sector(compressed_len: usize, logical_len: usize, sector: usize) -> bool {
    sectors(compressed_len, sector) < sectors(logical_len, sector)
}

/// The largest compressed length that still saves a sector for a `logical_len`-byte record:
/// size `dst` to this so that the codec itself aborts early (`DstTooSmall`) when compression
/// would not pay. 0 means no compressed form can pay (records of at most one sector).
pub fn stored_limit(logical_len: usize, sector: usize) -> usize {
    sectors(logical_len, sector).saturating_sub(1) * sector
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_limit_agrees_with_saves_a_sector_over_whole_range() {
        for sector in [512usize, 4096] {
            for logical in 0..=3 * sector + 7 {
                let limit = stored_limit(logical, sector);
                if limit > 0 {
                    assert!(saves_a_sector(limit, logical, sector), "{logical} {sector}");
                }
                assert!(!saves_a_sector(limit + 1, logical, sector) || limit + 1 > logical);
                assert!(!saves_a_sector(logical, logical, sector));
            }
        }
    }

    #[test]
    fn one_byte_less_is_not_a_sector() {
        assert!(!saves_a_sector(131071, 131072, 512));
        assert!(saves_a_sector(130560, 131072, 512));
        assert!(!saves_a_sector(130561, 131072, 512));
        assert!(saves_a_sector(0, 1, 512));
    }
}
