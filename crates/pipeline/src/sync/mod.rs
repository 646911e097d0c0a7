//! Getting a txg to disk: the driver thread running the state machine of txg/state.rs
//! (driver.rs), the SYNCING stages run in order from one table (stages.rs) and the commit
//! stage, one durable redb transaction (commit.rs).
//!
//! Layer 7: imports every layer below it except read/ and check/. Started by lib.rs when a
//! pool opens; nothing below calls it (the driver is woken through txg/state.rs).

pub(crate) mod commit;
pub(crate) mod driver;
pub(crate) mod stages;
