//! Settings of one mounted fs core (validated by the mount option parser in crates/fuse).
use squeezefs_codec::Spec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compression {
    pub spec: Spec,
    /// compress-force: skip the compressibility heuristic
    pub force: bool,
}

#[derive(Clone, Debug)]
pub struct FsConfig {
    pub read_only: bool,
    /// false with `default_permissions`: the kernel alone checks permissions
    pub check_permissions: bool,
    /// mount-wide compression; `None` keeps the engine's default
    pub compression: Option<Compression>,
    /// `background_compression=`: the codec idle-time rewriting converts data to where no
    /// directory or file sets its own (`None`: no background compression)
    pub background: Option<Spec>,
    /// `qos=`: the whole filesystem is a QoS tree paced to this many bytes/s (what the root
    /// directory inherits when it has no `qos` of its own)
    pub qos: Option<u64>,
    /// `recordsize=`: the record size of files created where no directory sets
    /// `recordsize` (what the root inherits); `None`: the pool's (set at mkfs)
    pub recordsize: Option<u32>,
    /// `noatime`: reads never update atime (the daemon, not the kernel, keeps atime for a
    /// FUSE mount, so the mount flag alone does not stop the updates)
    pub noatime: bool,
    /// `nodiratime`: readdir never updates the directory's atime
    pub nodiratime: bool,
    /// `dirsync`: a namespace change (create, link, unlink, rename, ...) is durable when its
    /// call returns. The fs core keeps this promise itself: the FUSE kernel module ignores
    /// the flag for directory operations
    pub dirsync: bool,
    /// `sync`: as `dirsync`, and attribute, xattr and fallocate changes too (the kernel
    /// itself follows each data write with an fsync)
    pub sync: bool,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            read_only: false,
            check_permissions: true,
            compression: None,
            background: None,
            qos: None,
            recordsize: None,
            noatime: false,
            nodiratime: false,
            dirsync: false,
            sync: false,
        }
    }
}
