//! What the compress stage gives an auto controller for each record (`AutoInputs`), what it
//! gets back (`Decision`, with its `Reason`, a trace column), and the outcome it feeds back
//! once the record is compressed (`Sample`).

use crate::device_choice::DeviceView;
use squeezefs_codec::Codec;

/// What the pipeline knows when a record is about to be compressed.
#[derive(Clone, Copy, Debug)]
pub struct AutoInputs<'a> {
    /// monotonic seconds (any origin)
    pub now_secs: f64,
    /// the record's input bytes
    pub record_bytes: u64,
    /// the devices (queued bytes, averaged write throughput, free space)
    pub devices: &'a [DeviceView],
    /// the summed drain rate per range of the devices with room for the record, in large
    /// writes (bytes over the time their writes were in flight, less the fixed time each
    /// write costs: device stats `bulk_bps`; before any bound by a sustained rate), bytes/s;
    /// 0 if a device has no such figure yet. What the devices can take once a backlog
    /// coalesces their writes, or more: a throttle's burst or a write cache make it read
    /// high, never low (feedback.rs, FLOOR)
    pub range_bps: f64,
    /// cores our threads obtain when they demand CPU (`UsableCores`), or the machine's if
    /// not measured
    pub cores: f64,
    /// compress workers
    pub workers: usize,
    /// pipeline CPU per input byte outside the codec (`OverheadMeter`), 0 if not measured
    pub overhead_ns_per_byte: f64,
    /// of that overhead, the device writers' CPU per byte they write (`OverheadMeter::
    /// store_ns_per_byte`): the part a level pays per stored byte; None if not measured
    pub store_ns_per_byte: Option<f64>,
    /// more records wait for compression behind this one (the pipeline is saturated)
    pub backlog: bool,
    /// the compress workers' busy share of the recent time (`WorkerUse`), in [0, 1]; None
    /// if not measured
    pub workers_busy: Option<f64>,
    /// the idle share of the CPUs this process may use, all processes counted (`CpuMeter::
    /// idle_share`), in [0, 1]; None if not measured. Near 0 the machine's CPU bounds the
    /// write even when the compress workers wait: the FUSE round trips, the writer's copy, a
    /// loop device's worker take the rest
    pub cpu_idle: Option<f64>,
}

/// Why a record got its level (a trace column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// the model's mix
    Model,
    /// the queue delay did not fit a stronger level
    Guard,
    /// measuring an unmeasured or stale rung
    Explore,
    /// testing whether data stored raw compresses again
    Probe,
    /// nothing measured yet: holding the starting level
    Hold,
    /// not chosen by auto (a fixed policy, in a trace)
    Fixed,
    /// chosen by the QoS plan of the record's tree (qos/levels.rs)
    Qos,
    /// stored raw without compressing: the compressibility heuristic found nothing to gain
    /// (chosen by the compress stage before any policy is asked)
    Incompressible,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Model => "model",
            Reason::Guard => "guard",
            Reason::Explore => "explore",
            Reason::Probe => "probe",
            Reason::Hold => "hold",
            Reason::Fixed => "fixed",
            Reason::Qos => "qos",
            Reason::Incompressible => "incompressible",
        }
    }

    pub fn from_name(s: &str) -> Option<Reason> {
        [
            Reason::Model,
            Reason::Guard,
            Reason::Explore,
            Reason::Probe,
            Reason::Hold,
            Reason::Fixed,
            Reason::Qos,
            Reason::Incompressible,
        ]
        .into_iter()
        .find(|r| r.name() == s)
    }
}

/// The level for one record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// `Codec::NONE`: store the record raw without compressing
    pub codec: Codec,
    pub reason: Reason,
    /// the expected queue delay the decision saw (less the safety margin), seconds
    pub queue_delay_secs: Option<f64>,
}

/// A compressed record's outcome, fed back with [`crate::AutoController::observe`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub codec: Codec,
    pub input_bytes: u64,
    /// bytes stored (the input size when the output did not save space)
    pub stored_bytes: u64,
    /// thread CPU time inside the codec (`thread_cpu_ns` around the call)
    pub cpu_ns: u64,
}
