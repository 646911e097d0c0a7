//! Test doubles for the [`Device`](crate::Device) trait, public so other crates' tests use
//! them: an in-memory device, a crash-image recorder, a fail-after-N injector, a
//! bandwidth throttle, and a real loop device to run block-device paths against.

mod crash;
mod fail_after;
mod loop_device;
mod mem;
mod rng;
mod throttled;

pub use crash::{CrashDevice, CrashMode};
pub use fail_after::FailAfter;
pub use loop_device::LoopDevice;
pub use mem::MemDevice;
pub use rng::SplitMix64;
pub use throttled::Throttled;
