//! Timestamps: the current time and the relatime rule for atime updates.
use squeezefs_pipeline::{InodeAttr, Timestamp};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The kernel's tick clock, as kernel filesystems stamp inodes (why: `squeezefs_pipeline::now`).
pub fn now() -> Timestamp {
    squeezefs_pipeline::now()
}

pub fn from_system(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() },
        Err(e) => {
            // before the epoch: floor to whole seconds below, nanos stay positive
            let d = e.duration();
            let mut secs = -(d.as_secs() as i64);
            let mut nanos = 0;
            if d.subsec_nanos() > 0 {
                secs -= 1;
                nanos = 1_000_000_000 - d.subsec_nanos();
            }
            Timestamp { secs, nanos }
        }
    }
}

pub fn to_system(t: Timestamp) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs()) + Duration::from_nanos(t.nanos as u64)
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
    fn system_time_round_trips_around_the_epoch() {
        for t in [
            Timestamp { secs: 0, nanos: 0 },
            Timestamp { secs: 1_700_000_000, nanos: 123_456_789 },
            Timestamp { secs: -1, nanos: 500_000_000 },
            Timestamp { secs: -86_400, nanos: 0 },
        ] {
            assert_eq!(from_system(to_system(t)), t);
        }
    }
}
