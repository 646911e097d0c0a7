//! Timestamps: the current time and the relatime rule for atime updates.
use squeezefs_pipeline::{InodeAttr, Timestamp};

/// The kernel's tick clock, as kernel filesystems stamp inodes (why: `squeezefs_pipeline::now`).
pub fn now() -> Timestamp {
    squeezefs_pipeline::now()
}

/// The timestamps ext4 can store (256-byte inodes: seconds in 32 bits plus two epoch bits,
/// 1901-12-13T20:45:52Z to 2446-05-10T22:38:55Z). A time set outside is stored as the
/// nearest end with zero nanoseconds, as the kernel's `timestamp_truncate` does for ext4.
pub const MIN_SECS: i64 = i32::MIN as i64;
pub const MAX_SECS: i64 = (1 << 34) - 1 + i32::MIN as i64;

/// A time someone sets (utimensat, the ctime the kernel sends), as ext4 would store it.
pub fn clamp(t: Timestamp) -> Timestamp {
    if t.secs <= MIN_SECS {
        Timestamp { secs: MIN_SECS, nanos: 0 }
    } else if t.secs >= MAX_SECS {
        Timestamp { secs: MAX_SECS, nanos: 0 }
    } else {
        t
    }
}

/// relatime: update atime on read only if it is not newer than mtime or ctime, or if it
/// is more than a day old; and never to the value it has (a second read in the same tick
/// writes nothing, as the kernel's `atime_needs_update`).
pub fn relatime_wants_update(attr: &InodeAttr, now: Timestamp) -> bool {
    const DAY: i64 = 24 * 3600;
    attr.atime != now && (attr.atime <= attr.mtime || attr.atime <= attr.ctime || now.secs - attr.atime.secs >= DAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_times_clamp_to_the_ext4_range_with_zero_nanoseconds_at_its_ends() {
        let t = |secs, nanos| Timestamp { secs, nanos };
        // (set, stored) pairs as ext4 stores them (checked with utimensat on ext4)
        for (set, stored) in [
            (t(i64::MIN, 0), t(-2_147_483_648, 0)),
            (t(i64::MIN, 999_999_999), t(-2_147_483_648, 0)),
            (t(i64::MAX, 999_999_999), t(15_032_385_535, 0)),
            (t(-2_147_483_648, 5), t(-2_147_483_648, 0)),
            (t(-2_147_483_649, 7), t(-2_147_483_648, 0)),
            (t(-2_147_483_647, 7), t(-2_147_483_647, 7)),
            (t(15_032_385_535, 3), t(15_032_385_535, 0)),
            (t(15_032_385_534, 3), t(15_032_385_534, 3)),
            (t(-1, 500_000_000), t(-1, 500_000_000)),
            (t(-86_400, 123_456_789), t(-86_400, 123_456_789)),
            (t(0, 0), t(0, 0)),
        ] {
            assert_eq!(clamp(set), stored, "{set:?}");
        }
    }
}
