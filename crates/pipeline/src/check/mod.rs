//! Checks of a committed pool: fsck, the consistency of space, extents, bundles and the
//! namespace (fsck.rs) and the references of shared records (refs.rs), and scrub, every stored record read from its device and verified
//! (scrub.rs).
//!
//! Layer 5: imports base/, store/, txg/ (bundle decoding) and engine/. Called only through
//! lib.rs (`Engine::fsck`, `Engine::scrub`) and the CLI.

pub mod fsck;
pub(crate) mod refs;
pub mod scrub;
