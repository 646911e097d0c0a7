//! squeezefs metadata store: the schema over redb.
//!
//! CONTRACT: `records` (Ino, FileKind, Timestamp, InodeAttr, DirEntry) are used by the fs core
//! and the engine alike. Table definitions live in one file (`tables.rs`); every value stored
//! in a table is encoded by hand (explicit little-endian, leading version byte) in `encode.rs`,
//! `superblock.rs`, `extent.rs` and `bundle.rs`, so the format is ours and not serde's or redb's.

pub mod auto_start;
pub mod background;
pub mod bundle;
pub mod encode;
pub mod error;
pub mod extent;
pub mod keys;
pub mod records;
pub mod seal;
mod seal_dirents;
mod seal_extents;
mod seal_wire;
pub mod superblock;
pub mod tables;

pub use auto_start::AutoStart;
pub use background::{BgCursor, BgFrame};
pub use bundle::Bundle;
pub use error::MetaError;
pub use extent::{BundleSlice, DeviceExtent, ExtentPtr, StoredRecord};
pub use records::*;
pub use seal::{SealError, SealHeader, SealSummary};
pub use superblock::{DeviceKind, DeviceRecord, Features, Superblock};
