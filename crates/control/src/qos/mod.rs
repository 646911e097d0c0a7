//! QoS trees (DESIGN.md §6): admission, level choice and compression scheduling.

pub mod admission;

pub use admission::{split, Admission, AdmissionTunables, Admit, Claim, QosError, TreeId, TreeInfo, NO_TREE};
