//! What a transaction group holds before it is durable: the txg state machine (state.rs),
//! the dirty cache of open and syncing layers (dirty.rs), early placement of records filled
//! in the open txg (early_place.rs), bundles of short records (bundle.rs) and the write
//! throttle over the dirty bytes (throttle.rs).
//!
//! Layer 3: imports base/, compress/ and space/. The engine state (engine/) holds these;
//! the write stages fill them and the sync stages (sync/) drain them.

pub(crate) mod bundle;
pub(crate) mod dirty;
pub(crate) mod early_place;
pub(crate) mod state;
pub(crate) mod throttle;
