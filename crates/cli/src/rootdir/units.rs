//! Unit conversions of the copy: device numbers between the host's `dev_t` and the 32-bit
//! encoding FUSE carries, and byte ranges cut into write chunks.

/// The largest major number the 32-bit encoding holds (12 bits).
pub const MAX_MAJOR: u32 = (1 << 12) - 1;
/// The largest minor number the 32-bit encoding holds (20 bits).
pub const MAX_MINOR: u32 = (1 << 20) - 1;

/// `(major, minor)` in the kernel's `new_encode_dev` form, the `rdev` a FUSE mknod carries
/// and a FUSE attribute reply is decoded from (`new_decode_dev`): minor bits 0–7 in bits
/// 0–7, major in bits 8–19, minor bits 8–19 in bits 20–31. `None` when a number does not fit
/// (the pool stores `rdev` as 32 bits, as FUSE does).
pub fn fuse_rdev(major: u32, minor: u32) -> Option<u32> {
    if major > MAX_MAJOR || minor > MAX_MINOR {
        return None;
    }
    Some((minor & 0xff) | (major << 8) | ((minor & !0xff) << 12))
}

/// Inverse of [`fuse_rdev`]: `(major, minor)` of a stored `rdev`.
#[cfg(test)]
pub fn fuse_rdev_parts(rdev: u32) -> (u32, u32) {
    ((rdev >> 8) & 0xfff, (rdev & 0xff) | ((rdev >> 12) & 0xfff00))
}

/// End of the chunk that starts at byte `pos` of a data range ending at byte `end`: the
/// next multiple of `chunk` bytes, or `end`. Chunks aligned to multiples of the record size
/// make every write but a range's first and last cover whole records.
pub fn chunk_end_byte(pos: u64, end: u64, chunk: u64) -> u64 {
    debug_assert!(chunk > 0 && pos < end);
    let next = (pos / chunk + 1).saturating_mul(chunk);
    next.min(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdev_round_trips_over_every_major_and_sampled_minors() {
        for major in 0..=MAX_MAJOR {
            for minor in [0, 1, 0xff, 0x100, 0x1234, 0xfff00, MAX_MINOR] {
                let r = fuse_rdev(major, minor).unwrap();
                assert_eq!(fuse_rdev_parts(r), (major, minor));
            }
        }
        for minor in 0..=MAX_MINOR {
            let r = fuse_rdev(7, minor).unwrap();
            assert_eq!(fuse_rdev_parts(r), (7, minor));
        }
    }

    /// For numbers that fit, the 32-bit form equals the low half of glibc's `makedev`,
    /// which is what stat(2) on the mount returns after the kernel decodes it.
    #[test]
    fn rdev_matches_the_low_half_of_glibc_makedev() {
        for (major, minor) in [(0, 0), (1, 3), (8, 1), (136, 300), (4095, 1048575), (259, 65536)] {
            let dev = libc::makedev(major, minor);
            assert_eq!(fuse_rdev(major, minor), Some(dev as u32), "{major}:{minor}");
            assert_eq!((libc::major(dev), libc::minor(dev)), (major, minor));
        }
    }

    #[test]
    fn rdev_refuses_numbers_wider_than_the_encoding() {
        assert_eq!(fuse_rdev(MAX_MAJOR + 1, 0), None);
        assert_eq!(fuse_rdev(0, MAX_MINOR + 1), None);
        assert_eq!(fuse_rdev(u32::MAX, u32::MAX), None);
    }

    #[test]
    fn chunks_cover_a_range_exactly_at_chunk_boundaries() {
        for chunk in [1u64, 3, 4096, 131072] {
            for start in (0..3 * chunk + 5).step_by(((chunk / 3) as usize).max(1)) {
                for len in [1, 2, chunk.saturating_sub(1).max(1), chunk, chunk + 1, 3 * chunk + 7] {
                    let end = start + len;
                    let mut pos = start;
                    let mut n = 0;
                    while pos < end {
                        let e = chunk_end_byte(pos, end, chunk);
                        assert!(e > pos && e <= end);
                        // every chunk but the last ends on a boundary; none crosses one
                        assert!(e == end || e.is_multiple_of(chunk));
                        assert_eq!((e - 1) / chunk, pos / chunk);
                        pos = e;
                        n += 1;
                    }
                    assert_eq!(pos, end);
                    assert!(n <= (end - start).div_ceil(chunk) + 1);
                }
            }
        }
        assert_eq!(chunk_end_byte(u64::MAX - 1, u64::MAX, 1 << 20), u64::MAX);
    }
}
