//! The engine's shared state, `Inner` (inner.rs): one `Arc` held by the API, the txg
//! driver and jobs, owning the parts of every layer below; creating and opening a pool into
//! it (pool.rs), with object devices (object_dev.rs), their metadata backups into the bucket (backup.rs)
//! and restoring a pool from one (restore.rs); and the state it keeps for the read path (caches.rs) and for background
//! compression (bgstate.rs).
//!
//! Layer 4: imports base/, compress/, store/, space/ and txg/. Every stage above (read/,
//! check/, write/, sync/, rewrite/) and lib.rs work on `Inner`; nothing here calls a stage.

pub(crate) mod backup;
pub(crate) mod backup_run;
pub(crate) mod bgstate;
pub(crate) mod caches;
pub(crate) mod inner;
pub(crate) mod object_dev;
pub(crate) mod pool;
pub(crate) mod restore;
