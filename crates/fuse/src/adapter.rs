//! The fuser `Filesystem` over `squeezefs_fs::Fs`: converts arguments, calls the core,
//! maps `FsError` to errno. No semantics live here.
use crate::requests::{self, RequestCounts};
use crate::uring::abi::op;
use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use squeezefs_fs::{time, Creds, FileKind, Fs, FsError, InodeAttr, SetAttr, TimeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Entry and attribute lifetime in the kernel caches: we are the only writer of the pool.
pub(crate) const TTL: Duration = Duration::from_secs(3600);
/// st_blksize: the default record size, so tools use large buffers.
pub(crate) const BLKSIZE: u32 = 128 * 1024;
/// Largest write request (the kernel caps it with its max_pages limit).
pub(crate) const MAX_WRITE: u32 = 1 << 20;
/// Directory entries fetched from the engine per readdir call.
pub(crate) const READDIR_BATCH: usize = 256;

pub struct FuseFs {
    fs: Arc<Fs>,
    writeback: bool,
    /// requests served, shared with the io_uring transport (requests.rs)
    requests: Arc<RequestCounts>,
    /// ask the kernel for FUSE-over-io_uring at INIT; set afterwards to whether it agreed
    uring: Arc<AtomicBool>,
}

impl FuseFs {
    /// `writeback`: ask for the kernel writeback cache (not for read-only mounts).
    /// `uring`: ask for the io_uring transport; holds whether the kernel granted it once
    /// INIT is answered.
    pub fn new(fs: Arc<Fs>, writeback: bool, uring: Arc<AtomicBool>, requests: Arc<RequestCounts>) -> FuseFs {
        FuseFs { fs, writeback, requests, uring }
    }
}

/// How a getxattr/listxattr request is answered (shared by both transports).
pub(crate) enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
    Error(i32),
}

/// getxattr/listxattr size protocol: 0 asks for the size, too small is ERANGE.
pub(crate) fn xattr_reply(size: u32, r: Result<Vec<u8>, FsError>) -> XattrReply {
    match r {
        Ok(v) if size == 0 => XattrReply::Size(v.len() as u32),
        Ok(v) if v.len() > size as usize => XattrReply::Error(libc::ERANGE),
        Ok(v) => XattrReply::Data(v),
        Err(e) => XattrReply::Error(errno(&e).code()),
    }
}

/// listxattr's reply body: NUL-terminated names.
pub(crate) fn xattr_name_list(names: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for n in names {
        out.extend_from_slice(&n);
        out.push(0);
    }
    out
}

/// statfs in 4 KiB blocks: blocks, bfree, bavail, files, ffree, bsize, namelen, frsize.
pub(crate) fn statfs_fields(s: &squeezefs_fs::StatFs) -> (u64, u64, u64, u64, u64, u32, u32, u32) {
    let bsize = 4096u64;
    (
        s.total_bytes / bsize,
        s.free_bytes / bsize,
        s.avail_bytes.min(s.free_bytes) / bsize,
        s.inodes + (1 << 32),
        1 << 32,
        bsize as u32,
        squeezefs_fs::NAME_MAX as u32,
        bsize as u32,
    )
}

/// With the writeback cache the kernel may hold written pages (and a larger size) that
/// the daemon has not seen, and it does not flush them before FUSE_LSEEK: answering
/// from our state could report ENXIO or a hole over fresh data (`cp` would then skip
/// it). ENOSYS makes the kernel answer from its own page cache and size for the rest
/// of this mount (whole file = data): always correct, without hole detection.
pub(crate) fn lseek_left_to_kernel(fs: &Fs, writeback: bool, ino: u64) -> bool {
    writeback && fs.open_for_write(ino)
}

fn creds(req: &Request) -> Creds {
    Creds::from_request(req.uid(), req.gid(), req.pid())
}

pub(crate) fn errno(e: &FsError) -> Errno {
    if matches!(e, FsError::Corrupt(_) | FsError::Engine(_)) {
        log::error!("{e}");
    }
    Errno::from_i32(e.errno())
}

fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

/// Kind → the file type bits of a mode (S_IFMT).
pub(crate) fn file_attr_kind_bits(k: FileKind) -> u32 {
    match k {
        FileKind::File => libc::S_IFREG,
        FileKind::Dir => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::CharDev => libc::S_IFCHR,
        FileKind::BlockDev => libc::S_IFBLK,
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::Socket => libc::S_IFSOCK,
    }
}

/// File type bits of a mode (S_IFMT) → kind.
pub(crate) fn kind_of_mode(mode: u32) -> Option<FileKind> {
    Some(match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => FileKind::File,
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        libc::S_IFCHR => FileKind::CharDev,
        libc::S_IFBLK => FileKind::BlockDev,
        libc::S_IFIFO => FileKind::Fifo,
        libc::S_IFSOCK => FileKind::Socket,
        _ => return None,
    })
}

pub(crate) fn file_attr(a: &InodeAttr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks_bytes.div_ceil(512),
        atime: time::to_system(a.atime),
        mtime: time::to_system(a.mtime),
        ctime: time::to_system(a.ctime),
        crtime: time::to_system(a.crtime),
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLKSIZE,
        flags: 0,
    }
}

/// Placeholder attributes for a negative lookup reply (only the node id 0 matters).
pub(crate) fn negative_attr() -> InodeAttr {
    let t = squeezefs_fs::Timestamp::default();
    InodeAttr {
        ino: 0,
        kind: FileKind::File,
        perm: 0,
        uid: 0,
        gid: 0,
        nlink: 0,
        size: 0,
        blocks_bytes: 0,
        rdev: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        generation: 0,
    }
}

fn time_set(t: Option<TimeOrNow>) -> Option<TimeSet> {
    t.map(|t| match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(st) => TimeSet::At(time::from_system(st)),
    })
}

fn reply_entry(reply: ReplyEntry, r: Result<InodeAttr, FsError>) {
    match r {
        Ok(a) => reply.entry(&TTL, &file_attr(&a), Generation(a.generation)),
        Err(e) => reply.error(errno(&e)),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), FsError>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

fn reply_xattr(reply: ReplyXattr, size: u32, r: Result<Vec<u8>, FsError>) {
    match xattr_reply(size, r) {
        XattrReply::Size(n) => reply.size(n),
        XattrReply::Data(v) => reply.data(&v),
        XattrReply::Error(e) => reply.error(Errno::from_i32(e)),
    }
}

impl Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_BIG_WRITES
            | InitFlags::FUSE_MAX_PAGES
            | InitFlags::FUSE_CACHE_SYMLINKS
            // the fs core clears suid/sgid on write, truncate and chown itself (crates/fs
            // perm.rs, as ext4 does); with this the kernel stops asking before every write
            // (GETXATTR security.capability per write() and a GETATTR per chown: 2.5 of ~14
            // requests per file of a tar extract) — the superblock gets SB_NOSEC
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        if self.writeback {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        for flag in wanted.iter() {
            if config.add_capabilities(flag).is_err() {
                log::info!("kernel lacks FUSE capability {flag:?}");
            }
        }
        // per-CPU request queues (crates/fuse/src/uring): offered by the kernel only when
        // /sys/module/fuse/parameters/enable_uring is Y
        if self.uring.load(Ordering::Relaxed) {
            let granted = config.add_capabilities(InitFlags::FUSE_OVER_IO_URING).is_ok();
            if !granted {
                log::info!("kernel does not offer FUSE over io_uring; serving /dev/fuse only");
            }
            self.uring.store(granted, Ordering::Relaxed);
        }
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE).or_else(|max| config.set_max_readahead(max));
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.fs.shutdown() {
            log::error!("flushing the pool at unmount: {e}");
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.requests.count(op::LOOKUP);
        match self.fs.lookup(&creds(req), parent.0, name.as_bytes()) {
            // a negative entry (node id 0) the kernel may cache: we are the only writer,
            // and our own creates replace it
            Err(FsError::NotFound) => {
                let mut attr = file_attr(&negative_attr());
                attr.ino = INodeNo(0);
                reply.entry(&TTL, &attr, Generation(0));
            }
            r => reply_entry(reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.requests.count(op::FORGET);
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.requests.count(op::GETATTR);
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.requests.count(op::SETATTR);
        let s = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: time_set(atime),
            mtime: time_set(mtime),
            ctime: ctime.map(time::from_system),
            fh: fh.map(|f| f.0),
        };
        match self.fs.setattr(&creds(req), ino.0, &s) {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.requests.count(op::READLINK);
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.requests.count(op::MKNOD);
        let Some(kind) = kind_of_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        reply_entry(reply, self.fs.mknod(&creds(req), parent.0, name.as_bytes(), kind, mode & 0o7777, rdev));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        self.requests.count(op::MKDIR);
        reply_entry(reply, self.fs.mkdir(&creds(req), parent.0, name.as_bytes(), mode & 0o7777));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.requests.count(op::UNLINK);
        reply_empty(reply, self.fs.unlink(&creds(req), parent.0, name.as_bytes()));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.requests.count(op::RMDIR);
        reply_empty(reply, self.fs.rmdir(&creds(req), parent.0, name.as_bytes()));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.requests.count(op::SYMLINK);
        reply_entry(reply, self.fs.symlink(&creds(req), parent.0, link_name.as_bytes(), target.as_os_str().as_bytes()));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // the kernel sends RENAME2 only for a rename with flags
        self.requests.count(if flags.bits() == 0 { op::RENAME } else { op::RENAME2 });
        reply_empty(
            reply,
            self.fs.rename(&creds(req), parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), flags.bits()),
        );
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.requests.count(op::LINK);
        reply_entry(reply, self.fs.link(&creds(req), ino.0, newparent.0, newname.as_bytes()));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.requests.count(op::OPEN);
        match self.fs.open(&creds(req), ino.0, flags.0) {
            // we are the only writer: cached pages stay valid across opens
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.requests.count(op::READ);
        // one reply buffer per request thread: no allocation, page faults or zeroing of
        // up to 1 MiB per request (read_into writes every byte it returns)
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with_borrow_mut(|buf| {
            let size = size as usize;
            if buf.len() < size {
                buf.resize(size, 0);
            }
            match self.fs.read_into(ino.0, offset, &mut buf[..size]) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(&e)),
            }
        });
        // the relatime write (a metadata transaction) after the reply, off the reader's
        // critical path; stat shows the new atime meanwhile
        self.fs.write_atime(ino.0);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.requests.count(op::WRITE);
        // the kernel resolves O_APPEND offsets itself (it owns the size)
        let from_cache = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        match self.fs.write(&creds(req), ino.0, offset, data, from_cache) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        self.requests.count(op::FLUSH);
        // Nothing to do at close (data is durable at fsync/txg, POSIX locks stay in the
        // kernel): ENOSYS makes the kernel stop sending FLUSH, one synchronous round trip
        // less per close(2) — a quarter of the requests of a small-file tree read. The kernel
        // still writes back its cached pages and reports their errors before it checks this.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.requests.count(op::RELEASE);
        reply_empty(reply, self.fs.release(fh.0));
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.requests.count(op::FSYNC);
        reply_empty(reply, self.fs.fsync(ino.0));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.requests.count(op::OPENDIR);
        match self.fs.opendir(&creds(req), ino.0, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.requests.count(op::READDIR);
        let mut offset = offset;
        loop {
            let items = match self.fs.readdir(ino.0, offset, READDIR_BATCH, false) {
                Ok(i) => i,
                Err(e) => return reply.error(errno(&e)),
            };
            if items.is_empty() {
                return reply.ok();
            }
            for it in items {
                if reply.add(INodeNo(it.ino), it.next_offset, file_type(it.kind), OsStr::from_bytes(&it.name)) {
                    return reply.ok();
                }
                offset = it.next_offset;
            }
        }
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        self.requests.count(op::READDIRPLUS);
        let mut offset = offset;
        loop {
            let items = match self.fs.readdir(ino.0, offset, READDIR_BATCH, true) {
                Ok(i) => i,
                Err(e) => return reply.error(errno(&e)),
            };
            if items.is_empty() {
                return reply.ok();
            }
            for it in items {
                let dot = it.name == b"." || it.name == b"..";
                // the inode's generation, as LOOKUP sends it: a mismatch makes the kernel take
                // the cached inode for a reused number and fail its open files with EIO
                let (attr, generation) = match &it.attr {
                    Some(a) => (file_attr(a), a.generation),
                    None => match self.fs.getattr(it.ino) {
                        Ok(a) => (file_attr(&a), a.generation),
                        Err(e) => return reply.error(errno(&e)),
                    },
                };
                if reply.add(
                    INodeNo(it.ino),
                    it.next_offset,
                    OsStr::from_bytes(&it.name),
                    &TTL,
                    &attr,
                    Generation(generation),
                ) {
                    return reply.ok();
                }
                // the kernel counts a lookup for every entry it received except . and ..
                if !dot {
                    self.fs.remember_entry(ino.0, &it);
                }
                offset = it.next_offset;
            }
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.requests.count(op::RELEASEDIR);
        reply_empty(reply, self.fs.releasedir(fh.0));
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.requests.count(op::FSYNCDIR);
        reply_empty(reply, self.fs.fsync(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.requests.count(op::STATFS);
        match self.fs.statfs() {
            Ok(s) => {
                let (blocks, bfree, bavail, files, ffree, bsize, namelen, frsize) = statfs_fields(&s);
                reply.statfs(blocks, bfree, bavail, files, ffree, bsize, namelen, frsize)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.requests.count(op::SETXATTR);
        reply_empty(reply, self.fs.setxattr(&creds(req), ino.0, name.as_bytes(), value, flags));
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.requests.count(op::GETXATTR);
        let r = requests::getxattr(&self.fs, &self.requests, &creds(req), ino.0, name.as_bytes());
        reply_xattr(reply, size, r);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.requests.count(op::LISTXATTR);
        let r = self.fs.listxattr(&creds(req), ino.0).map(xattr_name_list);
        reply_xattr(reply, size, r);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.requests.count(op::REMOVEXATTR);
        reply_empty(reply, self.fs.removexattr(&creds(req), ino.0, name.as_bytes()));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.requests.count(op::ACCESS);
        reply_empty(reply, self.fs.access(&creds(req), ino.0, mask.bits() as u32));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.requests.count(op::CREATE);
        match self.fs.create(&creds(req), parent.0, name.as_bytes(), mode & 0o7777, flags) {
            Ok((a, fh)) => reply.created(
                &TTL,
                &file_attr(&a),
                Generation(a.generation),
                FileHandle(fh),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.requests.count(op::FALLOCATE);
        reply_empty(reply, self.fs.fallocate(&creds(req), ino.0, offset, length, mode));
    }

    /// chattr/lsattr (FS_IOC_GETFLAGS/SETFLAGS), answered by the core.
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.requests.count(op::IOCTL);
        match self.fs.ioctl(&creds(req), ino.0, cmd, in_data, out_size) {
            Ok(data) => reply.ioctl(0, &data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        self.requests.count(op::LSEEK);
        if offset < 0 {
            return reply.error(Errno::ENXIO);
        }
        if lseek_left_to_kernel(&self.fs, self.writeback, ino.0) {
            return reply.error(Errno::ENOSYS);
        }
        match self.fs.lseek(ino.0, offset as u64, whence) {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_type_bits_map_to_kinds() {
        assert_eq!(kind_of_mode(libc::S_IFREG | 0o644), Some(FileKind::File));
        assert_eq!(kind_of_mode(0o644), Some(FileKind::File));
        assert_eq!(kind_of_mode(libc::S_IFIFO | 0o600), Some(FileKind::Fifo));
        assert_eq!(kind_of_mode(libc::S_IFCHR), Some(FileKind::CharDev));
        assert_eq!(kind_of_mode(0o170000), None);
    }
}
