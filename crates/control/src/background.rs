//! When background compression works (docs/design.md §15): a pure decision, taken before
//! each record the background worker would rewrite, from how long the pool has been idle
//! and what else is going on.
//!
//! ```text
//! states (of the worker, as this decision drives it):
//!   OFF      background compression is off (no `bg-idle`)          → Sleep(POLL_MAX)
//!   WAITING  a foreground operation less than `idle_after` ago     → Sleep(until idle_after
//!            has passed since it, at most POLL_MAX)
//!   HELD     idle, but a `squeezefs recompress` job runs, or the    → Sleep(HOLD)
//!            dirty data is above `HELD_DIRTY_PERCENT` of its bound
//!            (the txg holding earlier rewrites has not committed)
//!   WORKING  idle for `idle_after` and nothing above               → Work: one record, then
//!                                                                    decide again
//! transitions: every foreground operation restarts the idle time, so WORKING falls back to
//! WAITING within one record of a foreground operation (the record in hand is finished,
//! which bounds the delay to one record's compression, ~20 ms at zstd:15); the rest follow
//! the inputs.
//! tunables: POLL_MAX (1 s), HOLD (50 ms), HELD_DIRTY_PERCENT (25).
//! ```
//!
//! Foreground priority comes from this gate (the worker works only while nobody else uses
//! the pool), from the worker thread's lowest CPU priority (nice 19, set by the worker), and
//! from the rewrites themselves, which pass the same write throttle as any writer.

use std::time::Duration;

/// Longest sleep between two looks at the inputs.
pub const POLL_MAX: Duration = Duration::from_secs(1);
/// Sleep while held (a recompress job, or dirty data waiting for its commit).
pub const HOLD: Duration = Duration::from_millis(50);
/// Dirty data above this share of its bound holds the worker.
pub const HELD_DIRTY_PERCENT: u64 = 25;

/// What the decision looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BgInputs {
    /// idle time needed before working; `None`: background compression is off
    pub idle_after: Option<Duration>,
    /// time since the last foreground operation
    pub idle_for: Duration,
    /// `squeezefs recompress` jobs running
    pub jobs_running: usize,
    pub dirty_bytes: u64,
    /// the engine's dirty-data bound
    pub dirty_max: u64,
}

/// What the worker does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BgDecision {
    /// rewrite one record, then decide again
    Work,
    /// look again after this long
    Sleep(Duration),
}

/// The decision (module comment).
pub fn decide(i: &BgInputs) -> BgDecision {
    let Some(idle_after) = i.idle_after else { return BgDecision::Sleep(POLL_MAX) };
    if i.idle_for < idle_after {
        return BgDecision::Sleep((idle_after - i.idle_for).min(POLL_MAX));
    }
    if i.jobs_running > 0 || i.dirty_bytes.saturating_mul(100) > i.dirty_max.saturating_mul(HELD_DIRTY_PERCENT) {
        return BgDecision::Sleep(HOLD);
    }
    BgDecision::Work
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inputs() -> BgInputs {
        BgInputs {
            idle_after: Some(Duration::from_secs(5)),
            idle_for: Duration::from_secs(6),
            jobs_running: 0,
            dirty_bytes: 0,
            dirty_max: 1 << 30,
        }
    }

    #[test]
    fn works_only_when_idle_long_enough_and_nothing_holds_it() {
        assert_eq!(decide(&inputs()), BgDecision::Work);
        let off = BgInputs { idle_after: None, ..inputs() };
        assert_eq!(decide(&off), BgDecision::Sleep(POLL_MAX));
        let busy = BgInputs { idle_for: Duration::from_millis(4500), ..inputs() };
        assert_eq!(decide(&busy), BgDecision::Sleep(Duration::from_millis(500)), "wakes when the idle time is up");
        let just_now = BgInputs { idle_for: Duration::ZERO, ..inputs() };
        assert_eq!(decide(&just_now), BgDecision::Sleep(POLL_MAX));
        let job = BgInputs { jobs_running: 1, ..inputs() };
        assert_eq!(decide(&job), BgDecision::Sleep(HOLD));
        let dirty = BgInputs { dirty_bytes: (1 << 30) / 4 + 1, ..inputs() };
        assert_eq!(decide(&dirty), BgDecision::Sleep(HOLD));
        let some_dirty = BgInputs { dirty_bytes: (1 << 30) / 4, ..inputs() };
        assert_eq!(decide(&some_dirty), BgDecision::Work);
    }

    proptest! {
        /// A foreground operation inside the idle time never lets the worker work, and a
        /// sleep never exceeds POLL_MAX.
        #[test]
        fn never_works_inside_the_idle_time(after_ms in 0u64..60_000, idle_ms in 0u64..60_000,
                                            jobs in 0usize..3, dirty in any::<u64>(), max in any::<u64>()) {
            let i = BgInputs {
                idle_after: Some(Duration::from_millis(after_ms)),
                idle_for: Duration::from_millis(idle_ms),
                jobs_running: jobs,
                dirty_bytes: dirty,
                dirty_max: max,
            };
            match decide(&i) {
                BgDecision::Work => prop_assert!(idle_ms >= after_ms && jobs == 0),
                BgDecision::Sleep(d) => prop_assert!(d <= POLL_MAX && !d.is_zero() || idle_ms >= after_ms),
            }
        }
    }
}
