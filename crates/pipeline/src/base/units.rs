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

/// Byte `offset`'s position inside its record (bytes from the record's start).
pub fn byte_in_record(offset: u64, recordsize: u64) -> u64 {
    offset % recordsize
}

/// Records touched by the byte range `[off, end)` (`end > off`): the first and the last
/// record index, both included.
pub fn records_of_range(off: u64, end: u64, recordsize: u64) -> (u64, u64) {
    (record_of_byte(off, recordsize), record_of_byte(end - 1, recordsize))
}

/// Records lying wholly inside the byte range `[off, end)`: indices `first..past` (empty
/// when `first >= past`).
pub fn whole_records_within(off: u64, end: u64, recordsize: u64) -> (u64, u64) {
    (off.div_ceil(recordsize), end / recordsize)
}

/// Bytes from `offset` up to the start of the next record (0 when `offset` is a record
/// boundary).
pub fn bytes_to_record_end(offset: u64, recordsize: u64) -> u64 {
    match byte_in_record(offset, recordsize) {
        0 => 0,
        r => recordsize - r,
    }
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

    /// Every record size the engine supports (4 KiB … 1 MiB), as the strategies' `shift`.
    const SHIFTS: std::ops::Range<u32> = 12..21;

    #[test]
    fn shifts_cover_exactly_the_supported_record_sizes() {
        let from_shifts: Vec<u64> = SHIFTS.map(|s| 1u64 << s).collect();
        let supported: Vec<u64> =
            (0..64).map(|s| 1u64 << s).filter(|&b| crate::base::options::recordsize_supported(b)).collect();
        assert_eq!(from_shifts, supported);
    }

    proptest! {
        #[test]
        fn byte_lies_inside_its_record(off in 0u64..MAX_FILE_SIZE, shift in SHIFTS) {
            let rs = 1u64 << shift;
            let idx = record_of_byte(off, rs);
            let start = record_start_byte(idx, rs);
            prop_assert!(start <= off && off < start + rs);
            prop_assert_eq!(start + byte_in_record(off, rs), off);
            let to_end = bytes_to_record_end(off, rs);
            prop_assert!(to_end < rs);
            prop_assert!((off + to_end).is_multiple_of(rs));
            prop_assert_eq!(to_end == 0, byte_in_record(off, rs) == 0);
        }

        #[test]
        fn a_range_touches_the_records_of_its_first_and_last_byte(
            off in 0u64..(1u64 << 50), len in 1u64..(1u64 << 24), shift in SHIFTS,
        ) {
            let rs = 1u64 << shift;
            let end = off + len;
            let (first, last) = records_of_range(off, end, rs);
            prop_assert!(first <= last);
            prop_assert!(record_start_byte(first, rs) <= off && off < record_start_byte(first + 1, rs));
            prop_assert!(record_start_byte(last, rs) < end && end <= record_start_byte(last + 1, rs));
            let (lo, past) = whole_records_within(off, end, rs);
            // the whole records are the touched ones less a partly covered first or last
            prop_assert_eq!(lo, if byte_in_record(off, rs) == 0 { first } else { first + 1 });
            prop_assert_eq!(past, if byte_in_record(end, rs) == 0 { last + 1 } else { last });
            for idx in [lo, past.saturating_sub(1)] {
                if lo < past {
                    prop_assert!(off <= record_start_byte(idx, rs) && record_start_byte(idx + 1, rs) <= end);
                }
            }
        }

        #[test]
        fn record_lengths_sum_to_size(size in 0u64..(1u64 << 40), shift in SHIFTS) {
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

    /// Every supported record size, every offset within two bytes of its first record
    /// boundaries and of a boundary near the largest file size.
    #[test]
    fn record_boundaries_of_every_record_size() {
        for rs in SHIFTS.map(|s| 1u64 << s) {
            let near_top = record_start_byte(record_of_byte(MAX_FILE_SIZE, rs), rs);
            let bases = (0..4).map(|k| k * rs).chain([near_top - rs, near_top]);
            for base in bases {
                for off in base.saturating_sub(2)..base + 3 {
                    let idx = record_of_byte(off, rs);
                    assert_eq!(idx, off / rs);
                    assert_eq!(byte_in_record(off, rs), off - record_start_byte(idx, rs));
                    assert_eq!(records_for_size(off, rs), off.div_ceil(rs));
                    assert_eq!(bytes_to_record_end(off, rs), records_for_size(off, rs) * rs - off);
                    if off > 0 {
                        let last = record_len_in_file(records_for_size(off, rs) - 1, off, rs);
                        assert_eq!(last, off - record_start_byte(records_for_size(off, rs) - 1, rs));
                        assert!(last >= 1 && last <= rs);
                    }
                }
            }
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
