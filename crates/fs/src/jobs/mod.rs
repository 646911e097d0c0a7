//! Work that visits stored records on its own thread rather than answering a request:
//! background compression while the pool is idle (background.rs), `squeezefs recompress`
//! jobs (recompress.rs), and the namespace walks both use (walk.rs).
//!
//! Uses props/ for each file's effective compression and the engine's rewrite operation.

pub mod background;
pub mod recompress;
pub(crate) mod walk;
