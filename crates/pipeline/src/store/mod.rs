//! The metadata store as the engine holds it: the redb handle, read-write or read-only
//! (metadb.rs), over checked copies (meta_copy.rs one copy's blocks, meta_mirror.rs the
//! backend under redb, meta_files.rs the forms in the pool directory, meta_convert.rs
//! converting and checking them, meta_owner.rs naming what a lost block held) or a plain file, the shared read snapshot of point reads (snapshot.rs), the namespace delta
//! kept in memory until the next commit (nsdelta.rs), the room kept free for commits on the
//! filesystem holding `meta.redb` (meta_space.rs), and sealing (meta_seal.rs) and compacting
//! (meta_compact.rs) the store of a closed pool, and the rung each auto range starts at on the
//! next mount (auto_start.rs).
//!
//! Layer 1: imports only base/. The commit stage (sync/) writes through it; the engine
//! state, fsck and the namespace API read through it.

pub(crate) mod auto_start;
pub(crate) mod meta_compact;
pub(crate) mod meta_convert;
pub mod meta_copy;
pub mod meta_files;
pub mod meta_mirror;
pub(crate) mod meta_owner;
pub(crate) mod meta_seal;
pub(crate) mod meta_space;
pub(crate) mod metadb;
pub(crate) mod nsdelta;
pub(crate) mod refcounts;
pub(crate) mod snapshot;
