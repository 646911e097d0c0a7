//! QoS trees (DESIGN.md §6): admission, level choice and compression scheduling.

pub mod admission;
pub mod levels;
pub mod sched;

pub use admission::{split, Admission, AdmissionTunables, Admit, Claim, QosError, TreeId, TreeInfo, NO_TREE};
pub use levels::{plan, LevelTunables, Plan, QosLevels, TreeDemand, TreeLoad, TreePlan};
pub use sched::{CompressScheduler, Job, SchedTunables};
