//! An object store (the S3 API) as a squeezefs device.
//!
//! The engine places records at device offsets and reuses freed ones; an object store
//! holds immutable objects. [`ObjectDevice`] bridges them with a translation layer: writes
//! append to an in-memory open segment (an append-only log, offsets in it never reused);
//! `sync` uploads the pending segments as immutable objects (multipart when large) and only
//! then commits, durably, in a local redb map which device ranges now live where (map.rs).
//! So a commit of the engine, which follows the device's sync, never references an object
//! that is not completely written. Reads look the range up and fetch each piece with one
//! ranged GET of the checksummed blocks under it, through a bounded local read cache.
//!
//! Modules: `spec` (s3://BUCKET/PREFIX), `config` (endpoint and credentials from the
//! standard AWS variables and files), `store` (the S3 client on a small tokio runtime),
//! `extents` (the interval map and its ops), `segment` (segment objects and their rows),
//! `map` (the durable map), `cache` (the read cache), `device` (the [`Device`] itself),
//! `backup` (the formats of metadata backups in the bucket), `backup_io` (writing, pruning
//! and finding them, and the segments they keep).
//!
//! [`Device`]: squeezefs_device::Device

mod backup;
mod backup_io;
mod cache;
mod config;
mod device;
mod error;
mod extents;
mod map;
mod readahead;
mod segment;
mod spec;
mod store;
#[doc(hidden)]
pub mod testing;

pub use backup::{BackupImage, Manifest, MapDump, BACKUP_DIR, DEFAULT_KEEP};
pub use backup_io::{BackupReport, FoundBackup, MapSnapshot};
pub use cache::CacheUse;
pub use config::{ConfigError, StoreConfig};
pub use device::{ObjectDevice, ObjectOptions, ObjectUse, RepackReport};
pub use error::{ObjectError, StoreFault};
pub use spec::{ObjectSpec, SpecError, SCHEME};
pub use store::RequestLimits;
