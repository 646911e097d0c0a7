//! The auto controller: for each record, the level that keeps the devices busy with the
//! strongest compression the CPU allows (docs/design.md §9). Its two modes, the model of
//! model.rs and the queue feedback of feedback.rs (the default); what it takes and gives
//! per record (decision.rs); the ladder of candidate codecs (ladder.rs); its tunables
//! (tunables.rs); the end-to-end rate check that holds the feedback mode's CPU-bound position
//! to what the mount measurably writes (rate_check.rs); and the per-record trace file (trace.rs).
//!
//! Imports measure/ (the inputs it is fed) and device_choice.rs; qos/ builds on it.

pub(crate) mod decision;
pub mod feedback;
pub mod ladder;
pub(crate) mod model;
pub mod rate_check;
pub mod trace;
pub(crate) mod tunables;
