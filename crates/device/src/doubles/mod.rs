//! Test doubles for the [`Device`](crate::Device) trait, public so other crates' tests use
//! them: an in-memory device, a crash-image recorder, a fail-after-N injector and a
//! bandwidth throttle.

mod crash;
mod fail_after;
mod mem;
mod rng;
mod throttled;

pub use crash::{CrashDevice, CrashMode};
pub use fail_after::FailAfter;
pub use mem::MemDevice;
pub use rng::SplitMix64;
pub use throttled::Throttled;
