//! Every redb table of the metadata store, in one place. Key and value layouts are in
//! docs/format.md; keys are built by `keys.rs`, values by `encode.rs` / `superblock.rs` /
//! `extent.rs`.

use redb::TableDefinition;

/// `0u8` → [`crate::Superblock`] encoding. One row.
pub const SUPERBLOCK: TableDefinition<u8, &[u8]> = TableDefinition::new("superblock");
/// device index (u32) → [`crate::DeviceRecord`] encoding.
pub const DEVICES: TableDefinition<u32, &[u8]> = TableDefinition::new("devices");
/// ino (u64) → inode encoding (`encode::encode_inode`).
pub const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
/// (dir u64 BE ‖ name) → (kind, ino, cookie): name lookup.
pub const DIRENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("dirents");
/// (dir u64 BE ‖ cookie u64 BE) → (kind, ino, name): listing in cookie order.
pub const DIR_COOKIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("dir_cookies");
/// dir (u64) → next cookie to hand out (u64). Cookies are never reused within a directory.
pub const DIR_NEXT_COOKIE: TableDefinition<u64, u64> = TableDefinition::new("dir_next_cookie");
/// (ino u64 BE ‖ name) → value bytes.
pub const XATTRS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("xattrs");
/// ino (u64) → symlink target bytes.
pub const SYMLINKS: TableDefinition<u64, &[u8]> = TableDefinition::new("symlinks");
/// ino (u64) → () : inodes with link count 0 still open when written.
pub const ORPHANS: TableDefinition<u64, ()> = TableDefinition::new("orphans");
/// (ino u64 BE ‖ record index u64 BE) → [`crate::ExtentPtr`] encoding.
pub const EXTENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("extents");
/// (device u32 BE ‖ offset u64 BE) → length (u64): free ranges below the device's
/// allocation end. Everything from the allocation end on is free too.
pub const FREE_SPACE: TableDefinition<&[u8], u64> = TableDefinition::new("free_space");
/// ino (u64) → the file's record size in bytes (u32, a power of two from 4 KiB to 1 MiB):
/// only for regular files whose record size differs from the superblock's. A pool with a
/// row has `INCOMPAT_RECORDSIZES`; a pool made before it may lack the table (none of its
/// files has a record size of its own).
pub const RECORDSIZES: TableDefinition<u64, u32> = TableDefinition::new("recordsizes");
/// bundle id (u64) → [`crate::Bundle`] encoding: small records of several files stored
/// as one (pools with `INCOMPAT_BUNDLES`; created by mkfs only in those).
pub const BUNDLES: TableDefinition<u64, &[u8]> = TableDefinition::new("bundles");
/// `0u8` → [`crate::BgCursor`] encoding: background compression's walk position and
/// totals. One row, absent until background compression first saved it (compat feature
/// `COMPAT_BACKGROUND`).
pub const BACKGROUND: TableDefinition<u8, &[u8]> = TableDefinition::new("background");
/// auto range's spec text (UTF-8, e.g. `auto`, `auto:lz4..zstd:9`) → [`crate::AutoStart`]
/// encoding: the rung that range's controller starts at on the next mount. Absent until
/// a commit first wrote a row (compat feature `COMPAT_AUTO_START`).
pub const AUTO_START: TableDefinition<&[u8], &[u8]> = TableDefinition::new("auto_start");
/// (device u32 BE ‖ offset u64 BE) → references (u64, at least 2): the extent rows that
/// point to the device record stored at that address, for records referenced more than once
/// (shared by `copy_file_range`). A record without a row has one reference. Pools with
/// `INCOMPAT_SHARED_RECORDS`; a pool made before it lacks the table, which reads as empty.
pub const REFCOUNTS: TableDefinition<&[u8], u64> = TableDefinition::new("refcounts");
