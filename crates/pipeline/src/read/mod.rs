//! The read path (path.rs): layered lookup from the open layer down to the committed
//! extent, verified device reads, decompression into the record cache, parallel decoding
//! and prefetch; and compsize-like usage of one file (usage.rs).
//!
//! Layer 5: imports base/, txg/ and engine/. lib.rs reads through it; the write stages load
//! the records a change covers only partly through it, and rewrite/ the records it recompresses.

pub(crate) mod namespace;
pub(crate) mod path;
pub(crate) mod usage;
