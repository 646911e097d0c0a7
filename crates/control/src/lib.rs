//! Controllers as pure functions of measured inputs: device choice (smallest expected queue
//! delay), auto (the level that keeps the devices busy), and QoS trees ([`qos`]: admission
//! nested like HTB, levels per tree for their rates, the compress queue across trees), and
//! when background compression works ([`background`]).
//! No clocks and no threads here: callers pass measurements in and get a decision out, so
//! every controller is testable without a filesystem. The only I/O is the /proc reader in
//! [`cpu`] (behind the [`CpuSource`] trait) and the [`trace`] file writer and reader.

mod auto;
pub mod background;
mod device_choice;
mod measure;
pub mod qos;

pub use auto::{feedback, ladder, trace};
pub use measure::{cpu, ewma};

pub use auto::decision::{AutoInputs, Decision, Reason, Sample};
pub use auto::ladder::{Mix, Point};
pub use auto::model::AutoController;
pub use auto::trace::{read_trace, Trace, TraceError, TraceRow, TraceWriter};
pub use auto::tunables::Tunables;
pub use device_choice::{
    choose_device, expected_completion_secs, min_queue_delay, queue_delay_secs, safety_buffer_bytes, DeviceView,
    DEFAULT_SAFETY_RECORDS,
};
pub use measure::cpu::{CallTotals, CoresSample, CpuMeter, CpuSample, CpuSource, OverheadMeter, ProcStat, UsableCores};
pub use measure::meters::{
    queue_estimate, BusyDrain, DeviceMeter, LevelMeter, QueueEstimate, WorkerUse, WriterBlocked,
};
