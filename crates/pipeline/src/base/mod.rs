//! What every stage of the engine uses, and which uses nothing of the engine: the typed
//! errors (error.rs), the locks and their order (locks.rs), the options of `mkfs` and `open`
//! (options.rs), offset arithmetic by unit (units.rs), the panic boundaries (fault.rs), the
//! worker threads (workers.rs), the pool holder lock (pool_lock.rs) and the dirty-byte
//! counters that admission, the throttle and the txg driver share (accounting.rs).
//!
//! Layer 0: modules here import only each other and other crates; every folder may import
//! them (scripts/module-cycles.py checks the folder order, docs/design.md §13).

pub(crate) mod accounting;
pub(crate) mod error;
pub(crate) mod fault;
pub(crate) mod locks;
pub(crate) mod options;
pub mod pool_lock;
pub mod units;
pub(crate) mod workers;
