//! The POSIX rules the operations apply, as the Linux VFS applies them for ext4: the
//! caller's credentials (creds.rs), permission checks (perm.rs), name limits (name.rs),
//! timestamps and relatime (time.rs), and access-time updates decided by a read but not yet
//! written (atime.rs).
//!
//! Pure rules over the values they are given, except atime.rs, which keeps the pending
//! updates of the `Fs` it belongs to.

pub(crate) mod atime;
pub(crate) mod creds;
pub(crate) mod name;
pub mod perm;
pub mod time;
