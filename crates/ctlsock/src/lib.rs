//! The control channel between squeezefs commands and a mounted daemon (docs/design.md
//! §15.3): a Unix socket `control.sock` in the pool directory, open to root and the pool's
//! owner only, carrying a small versioned protocol of JSON lines ([`proto`]). Long jobs
//! (`squeezefs recompress`) and status queries (`squeezefs stats`, background compression)
//! go through it, never through the FUSE data path.
//!
//! The daemon starts a [`Server`] once the mount is live and stops it at unmount; commands
//! use a [`Client`].
pub mod client;
pub mod proto;
pub mod server;

pub use client::{Client, ClientError};
pub use proto::{ErrorKind, Op, Reply, SOCKET_NAME};
pub use server::{Server, ServerError};
