//! Rewriting committed records with another compression (record.rs: the one operation
//! under `squeezefs recompress` and background compression) and the QoS thread that
//! replans the QoS trees' levels (qos_replan.rs).
//!
//! Layer 7: imports base/, compress/, txg/, engine/, read/ and write/. Called by lib.rs.

pub(crate) mod qos_replan;
pub(crate) mod record;
