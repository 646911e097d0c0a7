//! The FUSE side of squeezefs: the kernel protocol, its two transports, and the one
//! operation core between them and the fs core (crates/fs).
//!
//! ```text
//!  /dev/fuse threads (devfuse.rs)      per-CPU io_uring queues (uring/)
//!        │ read → header|arg|payload          │ completion → header buffer + payload buffer
//!        └──────────► abi::decode ◄───────────┘          (abi.rs: the kernel ABI, byte by byte)
//!                          │ Op
//!                          ▼
//!                 OpCore::serve (opcore.rs): one function per operation over `Fs`,
//!                          │ typed errors → errno, request counting, readdir(plus)
//!                          │ Reply
//!        ┌──────────► Reply::encode ◄──────────┐
//!  write(header|body)                   COMMIT_AND_FETCH (out header in the header buffer,
//!                                                         body in the payload buffer)
//! ```
//!
//! Why our own /dev/fuse loop rather than a FUSE library: both transports decode the same
//! bytes with the same code, so each operation exists once and the transports cannot
//! answer differently; and request parsing is ours, so every field reaches the fs core as
//! the kernel sent it (timestamps included: seconds before 1970 with nanoseconds, the
//! extremes of the 64-bit range) and no malformed request can panic a thread. What such a
//! library would add is small and lives here: the INIT handshake and the reader threads on
//! cloned descriptors (devfuse.rs), and unprivileged mounts through fusermount3
//! (fusermount.rs).
//!
//! Also here: the kernel-facing mount plumbing (mount.rs), the mount option grammar
//! (mount_config.rs), the mount's readahead window (readahead.rs) and the scheduling
//! classes of the request threads (sched.rs).
pub mod abi;
mod devfuse;
mod fusermount;
pub mod helpers;
pub mod mount;
pub mod mount_config;
pub mod opcore;
mod readahead;
pub mod requests;
mod sched;
pub mod uring;

pub use devfuse::Session;
pub use mount_config::{MountConfig, MountOptionError, UringMode};
