//! Thin fuser adapter over squeezefs-fs: calls into the core and maps errors to errno.
//! Also the kernel-facing mount plumbing and the mount option grammar.
mod adapter;
pub mod mount;
pub mod mount_config;
mod readahead;
pub mod requests;
pub mod uring;

pub use adapter::FuseFs;
pub use fuser::Session;
pub use mount_config::{MountConfig, MountOptionError, UringMode};
