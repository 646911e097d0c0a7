//! Offset arithmetic, one unit per function: byte offsets, record indices, sectors.
//! Everything is checked: offsets near u64::MAX are refused, never wrapped.

/// Largest file size the engine accepts (2^62 bytes): keeps `offset + len` and
/// `record_index * recordsize` far from overflow.
pub const MAX_FILE_SIZE: u64 = 1 << 62;

/// Index of the record holding byte `offset`.
pub fn record_of_byte(offset: u64, recordsize: u64) -> u64 {
    offset / recordsize
}

/// First byte of record `idx`.
pub fn record_start_byte(idx: u64, recordsize: u64) -> u64 {
    idx.saturating_mul(recordsize)
}

/// Number of records needed to hold `size` bytes (= index of the first record wholly at or
/// past `size`).
pub fn records_for_size(size: u64, recordsize: u64) -> u64 {
    size.div_ceil(recordsize)
}

/// Logical length of record `idx` in a file of `size` bytes (the last record is short;
/// records past the end have length 0).
pub fn record_len_in_file(idx: u64, size: u64, recordsize: u64) -> u64 {
    let start = record_start_byte(idx, recordsize);
    size.saturating_sub(start).min(recordsize)
}

/// Bytes occupied on a device by `bytes` stored bytes: rounded up to whole sectors. Past
/// the last sector boundary below 2^64 it saturates at `u64::MAX` (no sector starts there,
/// so nothing is ever placed at it; offsets that high only come from damaged metadata).
pub fn sector_bytes(bytes: u64, sector: u64) -> u64 {
    bytes.div_ceil(sector).saturating_mul(sector)
}

/// Bytes a record of `stored` bytes occupies on a device whose records are packed at
/// `granule` bytes (1 with the PACKED_BYTES feature, else the sector): its footprint.
/// Saturates at `u64::MAX` like [`sector_bytes`].
pub fn granule_bytes(stored: u64, granule: u64) -> u64 {
    stored.div_ceil(granule).saturating_mul(granule)
}

/// Physical bytes an extent occupies (for `blocks_bytes`, frees and fsck), in a pool whose
/// records are packed at `granule` bytes: a device extent its stored length rounded to the
/// granule, an inline one its stored bytes.
pub fn extent_footprint(e: &squeezefs_meta::ExtentPtr, granule: u64) -> u64 {
    match &e.stored {
        squeezefs_meta::StoredRecord::Device(d) => granule_bytes(u64::from(d.psize), granule),
        squeezefs_meta::StoredRecord::Inline(v) => v.len() as u64,
        // its share of the bundle (bundle.rs): the bundle's own range is freed with its
        // last member
        squeezefs_meta::StoredRecord::Bundled(b) => u64::from(b.share),
    }
}

/// `offset + len` if it stays within [`MAX_FILE_SIZE`].
pub fn checked_end(offset: u64, len: u64) -> Option<u64> {
    offset.checked_add(len).filter(|&e| e <= MAX_FILE_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn byte_lies_inside_its_record(off in 0u64..MAX_FILE_SIZE, shift in 12u32..21) {
            let rs = 1u64 << shift;
            let idx = record_of_byte(off, rs);
            let start = record_start_byte(idx, rs);
            prop_assert!(start <= off && off < start + rs);
        }

        #[test]
        fn record_lengths_sum_to_size(size in 0u64..(1u64 << 40), shift in 12u32..21) {
            let rs = 1u64 << shift;
            let n = records_for_size(size, rs);
            if n > 0 {
                let last = record_len_in_file(n - 1, size, rs);
                prop_assert!(last > 0 && last <= rs);
                prop_assert_eq!((n - 1) * rs + last, size);
            }
            prop_assert_eq!(record_len_in_file(n, size, rs), 0);
        }

        #[test]
        fn sector_bytes_is_smallest_multiple(b in 0u64..(1u64 << 50), s in prop::sample::select(vec![512u64, 4096])) {
            let r = sector_bytes(b, s);
            prop_assert!(r >= b && r.is_multiple_of(s) && r < b + s);
        }
    }

    #[test]
    fn rounding_up_saturates_at_the_end_of_the_address_space() {
        let top = u64::MAX / 512 * 512;
        assert_eq!(sector_bytes(top, 512), top);
        assert_eq!(sector_bytes(top + 1, 512), u64::MAX);
        assert_eq!(sector_bytes(u64::MAX, 4096), u64::MAX);
        assert_eq!(granule_bytes(u64::MAX, 1), u64::MAX);
        assert_eq!(granule_bytes(u64::MAX - 1, 512), u64::MAX);
        assert_eq!(granule_bytes(0, 512), 0);
    }

    #[test]
    fn checked_end_refuses_overflow() {
        assert_eq!(checked_end(1, 2), Some(3));
        assert_eq!(checked_end(MAX_FILE_SIZE, 0), Some(MAX_FILE_SIZE));
        assert_eq!(checked_end(MAX_FILE_SIZE, 1), None);
        assert_eq!(checked_end(u64::MAX, 1), None);
    }
}
