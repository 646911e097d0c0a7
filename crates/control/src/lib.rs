//! Controllers as pure functions of measured inputs: device choice (smallest expected queue
//! delay), auto, qos. No I/O, no clocks, no threads here: callers pass measurements in and
//! get a decision out, so every controller is testable without a filesystem.

mod device_choice;

pub use device_choice::{
    choose_device, expected_completion_secs, min_queue_delay, queue_delay_secs, safety_buffer_bytes, DeviceView,
    DEFAULT_SAFETY_RECORDS,
};
