//! Changes into the open txg: data changes (write, truncate, punch hole, allocate:
//! data.rs), early compression of records as they fill (early.rs), and namespace
//! transactions published into the namespace delta (metatx.rs), copies that share stored
//! records (share.rs).
//!
//! Layer 6: imports every layer below it except check/. Called by lib.rs; the sync stages
//! reuse early compression, and rewrite/ writes its recompressed records through data.rs.

pub(crate) mod data;
pub(crate) mod early;
pub(crate) mod metatx;
pub(crate) mod namespace;
pub(crate) mod share;
