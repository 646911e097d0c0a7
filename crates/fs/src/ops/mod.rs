//! The `Fs` operations by topic, each file one `impl Fs` block over the state lib.rs
//! declares: getattr/setattr (attr.rs), open files and their data (data.rs), directory
//! streams (dir.rs), copies that share stored records (copy.rs), namespace changes (namespace.rs), extended attributes (xattr.rs) with
//! the virtual usage attribute (usage.rs), and inode flags (fileattr.rs).
//!
//! Uses rules/ for every permission and name check and props/ for what a file inherits.

pub(crate) mod attr;
pub(crate) mod copy;
pub(crate) mod data;
pub(crate) mod dir;
pub(crate) mod fileattr;
pub(crate) mod namespace;
pub mod usage;
pub(crate) mod xattr;
