//! squeezefs metadata store: the schema over redb.
//!
//! CONTRACT: `records` (Ino, FileKind, Timestamp, InodeAttr, DirEntry) are used by the fs core
//! and the engine alike. Table definitions live in one file (`tables.rs`).

pub mod records;
pub use records::*;
