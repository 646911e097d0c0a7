//! Record types shared by the engine and the fs core.

/// Inode number. [`ROOT_INO`] is the root directory; 0 is never used.
pub type Ino = u64;
pub const ROOT_INO: Ino = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    CharDev,
    BlockDev,
    Fifo,
    Socket,
}

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

/// Everything `stat` reports about an inode.
///
/// `size` and `blocks` are owned by the data path: `MetaTx::put_inode` ignores them; they
/// change through `Engine::write`, `set_size`, `punch_hole`, `allocate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InodeAttr {
    pub ino: Ino,
    pub kind: FileKind,
    /// permission bits including setuid/setgid/sticky (mask 0o7777); the type is `kind`
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    /// physical bytes in use (for st_blocks = ceil(blocks_bytes / 512))
    pub blocks_bytes: u64,
    pub rdev: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
    /// bumped when an inode number is reused
    pub generation: u64,
}

impl InodeAttr {
    /// A new, empty inode: every time set to `time`, one link (two for a directory: its
    /// parent's entry and its own `.`), no data, generation 0.
    pub fn new(ino: Ino, kind: FileKind, perm: u32, uid: u32, gid: u32, time: Timestamp) -> InodeAttr {
        InodeAttr {
            ino,
            kind,
            perm,
            uid,
            gid,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            size: 0,
            blocks_bytes: 0,
            rdev: 0,
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            generation: 0,
        }
    }
}

/// One directory entry as listed by `MetaTx::dir_list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// stable per-directory cookie (strictly increasing in listing order, never 0)
    pub cookie: u64,
    pub name: Vec<u8>,
    pub ino: Ino,
    pub kind: FileKind,
}
