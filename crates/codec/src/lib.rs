//! squeezefs codec layer: pure library, no I/O, no threads (except the [`bench`](mod@bench) engine, which
//! runs its blocks on scoped threads).
//!
//! CONTRACT (other crates build against these names; keep them stable):
//! * [`Algorithm`] — on-disk algorithm ids (`id()` / `from_id()`), never renumbered.
//! * [`Codec`] — a concrete (algorithm, level) pair; for lz4 the level is the acceleration.
//! * [`Spec`] — a parsed compression spec (`FromStr` + `Display` round-trip).
//! * [`Workspaces`] — pooled contexts; `compress`/`decompress` into caller-owned buffers.
//! * [`compress_bound`], [`heuristic::assess`], [`saves_a_sector`].
//! * [`CodecError`] — typed, `#[non_exhaustive]`, distinguishes corrupt input from a small buffer.

mod algorithm;
mod backend;
pub mod bench;
mod bound;
mod codec;
mod error;
pub mod heuristic;
pub mod nominal;
mod sector;
mod spec;
#[cfg(test)]
mod test_data;
mod thread_cpu;
mod versions;
mod workspace;

pub use algorithm::*;
pub use bound::compress_bound;
pub use codec::Codec;
pub use error::{level_help, CodecError, SpecError, ACCEPTED_FORMS};
pub use sector::{saves_a_sector, stored_limit};
pub use spec::{Spec, AUTO_DEFAULT_MAX, AUTO_DEFAULT_MIN, MAX_LIST_LEN, QOS_MAX_MB_PER_S};
pub use thread_cpu::{thread_cpu_ns, thread_run_delay_ns};
pub use versions::{library_versions, LibraryVersion};
pub use workspace::{workspace_bytes, CallTime, PoolStats, WorkspaceConfig, Workspaces};
