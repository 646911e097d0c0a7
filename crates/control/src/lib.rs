//! Controllers as pure functions of measured inputs: device choice (smallest expected queue
//! delay), auto (the level that keeps the devices busy), and QoS trees ([`qos`]: admission
//! nested like HTB, levels per tree for their rates, the compress queue across trees), and
//! when background compression works ([`background`]).
//! No clocks and no threads here: callers pass measurements in and get a decision out, so
//! every controller is testable without a filesystem. The only I/O is the /proc reader in
//! [`cpu`] (behind the [`CpuSource`] trait) and the [`trace`] file writer and reader.

mod auto;
pub mod background;
pub mod cpu;
mod decision;
mod device_choice;
pub mod ewma;
pub mod feedback;
pub mod ladder;
pub mod measure;
pub mod qos;
pub mod trace;
mod tunables;

pub use auto::AutoController;
pub use cpu::{CallTotals, CoresSample, CpuMeter, CpuSample, CpuSource, OverheadMeter, ProcStat, UsableCores};
pub use decision::{AutoInputs, Decision, Reason, Sample};
pub use device_choice::{
    choose_device, expected_completion_secs, min_queue_delay, queue_delay_secs, safety_buffer_bytes, DeviceView,
    DEFAULT_SAFETY_RECORDS,
};
pub use ladder::{Mix, Point};
pub use measure::{queue_estimate, BusyDrain, DeviceMeter, LevelMeter, QueueEstimate, WorkerUse, WriterBlocked};
pub use trace::{read_trace, Trace, TraceError, TraceRow, TraceWriter};
pub use tunables::Tunables;
