//! The operation core: one function per FUSE operation over [`squeezefs_fs::Fs`], shared
//! by both transports. A transport decodes a request ([`abi::decode`]), hands it to
//! [`OpCore::serve`], encodes the [`Reply`] into its reply buffer ([`Reply::encode`]) and
//! sends it; after sending, it runs what the core left for later ([`Handled::atime_after`]).
//! Typed errors become errno here, and only here. No semantics live here: the fs core
//! decides, this maps arguments and results.
//!
//! Request counting (`user.squeezefs.requests`, requests.rs) happens in `serve`, so both
//! transports count the same way: every request but INIT, counted before it is handled.
//!
//! QoS trees (squeezefs_fs qos.rs): a WRITE into a tree waits in the fs core until its
//! tree admits it. [`OpCore::may_wait`] names such requests (and FSYNC, which waits for a
//! txg commit) so that each transport hands them to a helper thread ([`crate::helpers`])
//! with the buffer holding the request, and goes on serving everyone else: one tree's
//! pacing holds no thread other trees' writers or any reader need. A file of a tree opened
//! for writing is opened with FOPEN_DIRECT_IO: each write(2) then reaches us as WRITEs
//! from the writer's own thread and is paced on its own. Through the writeback cache the
//! paced tree's dirty pages would fill the page cache of the whole mount (the kernel's
//! dirty limits are per FUSE connection), and `balance_dirty_pages` would throttle the
//! writers of every other tree with them. While a WRITE waits the kernel holds that file's
//! inode lock only (other writers and truncates of the same file wait, as they would
//! behind ext4's throttled writer); reads of cached pages do not take it.
//!
//! A panic while handling a request is caught here, on either transport: the request gets
//! EIO, the pool is suspended (`Engine::suspend`: the panic may have left the engine's
//! state half changed, so nothing more is written; reads go on), and the log names the
//! panic and the request. The request threads and the mount stay up, so `umount` works.
//!
//! Test builds (feature `fault-injection`) take `setfattr -n trusted.squeezefs.inject-panic
//! -v SITE` on the mount's root: `request` makes the next LOOKUP panic here, the engine's
//! site names (crates/pipeline/src/fault.rs) arm a panic there.
use crate::abi::{self, fattr, op, Attr, InHeader, Kstatfs, Op};
use crate::requests::{self, RequestCounts};
use squeezefs_fs::{Creds, EngineError, FileKind, Fs, FsError, Ino, InodeAttr, PanicSite, SetAttr, TimeSet, Timestamp};
use std::sync::Arc;
use std::time::Duration;

/// Entry and attribute lifetime in the kernel caches: we are the only writer of the pool.
pub const TTL: Duration = Duration::from_secs(3600);
/// st_blksize: the default record size, so tools use large buffers.
pub const BLKSIZE: u32 = 128 * 1024;
/// Largest write request (the kernel caps it with its max_pages limit).
pub const MAX_WRITE: u32 = 1 << 20;
/// Directory entries fetched from the fs core per batch of a readdir.
const READDIR_BATCH: usize = 256;

/// What a request is answered with, before its encoding.
#[derive(Debug)]
pub enum Reply {
    /// FORGET, BATCH_FORGET: the kernel expects no reply
    None,
    /// positive errno
    Error(i32),
    Empty,
    Entry(InodeAttr),
    /// a LOOKUP miss the kernel may cache (node id 0)
    NegativeEntry,
    Attr(InodeAttr),
    Open {
        fh: u64,
        flags: u32,
    },
    Created {
        attr: InodeAttr,
        fh: u64,
        open_flags: u32,
    },
    Bytes(Vec<u8>),
    /// the reply body is already in the first `n` bytes of the reply buffer (read data,
    /// directory entries)
    Filled(usize),
    XattrSize(u32),
    Written(u32),
    Statfs(Kstatfs),
    Offset(u64),
}

impl Reply {
    /// Write the reply body at the start of `out`: its length, or the errno to answer
    /// with instead (the error itself, or E2BIG when the body does not fit).
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, i32> {
        let need = match self {
            Reply::None | Reply::Empty | Reply::Filled(_) => 0,
            Reply::Error(e) => return Err(*e),
            Reply::Entry(_) | Reply::NegativeEntry => abi::ENTRY_OUT_LEN,
            Reply::Attr(_) => abi::ATTR_OUT_LEN,
            Reply::Open { .. } => abi::OPEN_OUT_LEN,
            Reply::Created { .. } => abi::ENTRY_OUT_LEN + abi::OPEN_OUT_LEN,
            Reply::Bytes(v) => v.len(),
            Reply::XattrSize(_) | Reply::Written(_) | Reply::Offset(_) => 8,
            Reply::Statfs(_) => abi::STATFS_OUT_LEN,
        };
        if need > out.len() {
            return Err(libc::E2BIG);
        }
        Ok(match self {
            Reply::None | Reply::Empty | Reply::Error(_) => 0,
            Reply::Filled(n) => *n,
            Reply::Entry(a) => {
                abi::put_entry_out(out, 0, a.ino, a.generation, TTL.as_secs(), &attr(a));
                need
            }
            Reply::NegativeEntry => {
                abi::put_entry_out(out, 0, 0, 0, TTL.as_secs(), &Attr::default());
                need
            }
            Reply::Attr(a) => {
                abi::put_attr_out(out, 0, TTL.as_secs(), &attr(a));
                need
            }
            Reply::Open { fh, flags } => {
                abi::put_open_out(out, 0, *fh, *flags);
                need
            }
            Reply::Created { attr: a, fh, open_flags } => {
                abi::put_entry_out(out, 0, a.ino, a.generation, TTL.as_secs(), &attr(a));
                abi::put_open_out(out, abi::ENTRY_OUT_LEN, *fh, *open_flags);
                need
            }
            Reply::Bytes(v) => {
                out[..v.len()].copy_from_slice(v);
                need
            }
            Reply::XattrSize(n) | Reply::Written(n) => {
                abi::put_u32(out, 0, *n);
                abi::put_u32(out, 4, 0);
                need
            }
            Reply::Offset(o) => {
                abi::put_u64(out, 0, *o);
                need
            }
            Reply::Statfs(s) => {
                abi::put_statfs_out(out, 0, s);
                need
            }
        })
    }
}

/// One request's outcome.
#[derive(Debug)]
pub struct Handled {
    pub reply: Reply,
    /// a relatime update to make once the reply is on its way (READ), off the reader's
    /// critical path; stat shows the new atime meanwhile
    pub atime_after: Option<Ino>,
}

impl From<Reply> for Handled {
    fn from(reply: Reply) -> Handled {
        Handled { reply, atime_after: None }
    }
}

/// The fs core as both transports serve it.
pub struct OpCore {
    fs: Arc<Fs>,
    /// threads for requests that may wait long (`may_wait`)
    helpers: crate::helpers::Helpers,
    /// the kernel writeback cache is on (asked for at INIT on writable mounts)
    writeback: bool,
    requests: Arc<RequestCounts>,
    /// the next LOOKUP panics (test builds, see the module doc)
    #[cfg(feature = "fault-injection")]
    panic_next_lookup: std::sync::atomic::AtomicBool,
}

/// The xattr a test build arms panics with (module doc).
#[cfg(feature = "fault-injection")]
pub const XATTR_INJECT_PANIC: &str = "trusted.squeezefs.inject-panic";

/// What a caught panic said.
fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>().copied().or_else(|| p.downcast_ref::<String>().map(String::as_str)).unwrap_or("?")
}

/// typed error → errno, logging the errors that mean damage or an engine failure
pub fn errno(e: &FsError) -> i32 {
    if matches!(e, FsError::Corrupt { .. } | FsError::Engine(_)) {
        log::error!("{e}");
    }
    e.errno()
}

fn file_type_bits(k: FileKind) -> u32 {
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
fn kind_of_mode(mode: u32) -> Option<FileKind> {
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

/// `d_type` of a directory entry: the S_IFMT bits shifted down, as the kernel expects.
fn dtype(k: FileKind) -> u32 {
    file_type_bits(k) >> 12
}

fn attr(a: &InodeAttr) -> Attr {
    Attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks_bytes.div_ceil(512),
        atime: (a.atime.secs, a.atime.nanos),
        mtime: (a.mtime.secs, a.mtime.nanos),
        ctime: (a.ctime.secs, a.ctime.nanos),
        mode: file_type_bits(a.kind) | (a.perm & 0o7777),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLKSIZE,
    }
}

fn timestamp((secs, nanos): abi::Time) -> Timestamp {
    Timestamp { secs, nanos }
}

/// The setattr request's fields as the fs core takes them.
fn set_attr(s: &abi::SetattrIn) -> SetAttr {
    let has = |bit: u32| s.valid & bit != 0;
    let time = |now: u32, set: u32, t: abi::Time| {
        if has(now) {
            Some(TimeSet::Now)
        } else {
            has(set).then(|| TimeSet::At(timestamp(t)))
        }
    };
    SetAttr {
        mode: has(fattr::MODE).then_some(s.mode & 0o7777),
        uid: has(fattr::UID).then_some(s.uid),
        gid: has(fattr::GID).then_some(s.gid),
        size: has(fattr::SIZE).then_some(s.size),
        atime: time(fattr::ATIME_NOW, fattr::ATIME, s.atime),
        mtime: time(fattr::MTIME_NOW, fattr::MTIME, s.mtime),
        ctime: has(fattr::CTIME).then(|| timestamp(s.ctime)),
        fh: has(fattr::FH).then_some(s.fh),
    }
}

/// statfs in 4 KiB blocks.
fn kstatfs(s: &squeezefs_fs::StatFs) -> Kstatfs {
    let bsize = 4096u64;
    Kstatfs {
        blocks: s.total_bytes / bsize,
        bfree: s.free_bytes / bsize,
        bavail: s.avail_bytes.min(s.free_bytes) / bsize,
        files: s.inodes + (1 << 32),
        ffree: 1 << 32,
        bsize: bsize as u32,
        namelen: squeezefs_fs::NAME_MAX as u32,
        frsize: bsize as u32,
    }
}

fn entry(r: Result<InodeAttr, FsError>) -> Reply {
    match r {
        Ok(a) => Reply::Entry(a),
        Err(e) => Reply::Error(errno(&e)),
    }
}

fn empty(r: Result<(), FsError>) -> Reply {
    match r {
        Ok(()) => Reply::Empty,
        Err(e) => Reply::Error(errno(&e)),
    }
}

fn attr_reply(r: Result<InodeAttr, FsError>) -> Reply {
    match r {
        Ok(a) => Reply::Attr(a),
        Err(e) => Reply::Error(errno(&e)),
    }
}

/// getxattr/listxattr size protocol: 0 asks for the size, too small is ERANGE.
fn xattr(size: u32, r: Result<Vec<u8>, FsError>) -> Reply {
    match r {
        Ok(v) if size == 0 => Reply::XattrSize(v.len() as u32),
        Ok(v) if v.len() > size as usize => Reply::Error(libc::ERANGE),
        Ok(v) => Reply::Bytes(v),
        Err(e) => Reply::Error(errno(&e)),
    }
}

/// listxattr's reply body: NUL-terminated names.
fn name_list(names: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for n in names {
        out.extend_from_slice(&n);
        out.push(0);
    }
    out
}

impl OpCore {
    /// `writeback`: the kernel writeback cache was asked for (not on read-only mounts).
    pub fn new(fs: Arc<Fs>, writeback: bool, requests: Arc<RequestCounts>) -> OpCore {
        OpCore {
            fs,
            helpers: crate::helpers::Helpers::new("sqz-fuse-wait"),
            writeback,
            requests,
            #[cfg(feature = "fault-injection")]
            panic_next_lookup: Default::default(),
        }
    }

    /// Count and handle one request (`op`: its decoding, or the errno that refused it).
    /// `out` is the reply buffer for the operations that fill it
    /// ([`abi::fills_reply_buffer`]); the others get an empty one.
    pub fn serve(&self, h: &InHeader, op: Result<Op<'_>, i32>, out: &mut [u8]) -> Handled {
        self.requests.count(h.opcode);
        match op {
            Ok(op) => self.handle(h, op, out),
            Err(e) => Reply::Error(e).into(),
        }
    }

    /// Whether handling request `h` may wait long (module doc): an FSYNC (a txg commit), a
    /// COPY_FILE_RANGE (commits the source's dirty records before sharing them) or a WRITE
    /// into a QoS tree (its admission). The transports hand these to a helper.
    pub fn may_wait(&self, h: &InHeader) -> bool {
        match h.opcode {
            op::FSYNC | op::FSYNCDIR | op::COPY_FILE_RANGE => true,
            op::WRITE => self.fs.in_qos_tree(h.nodeid),
            _ => false,
        }
    }

    /// The helper threads for requests that `may_wait`.
    pub fn helpers(&self) -> &crate::helpers::Helpers {
        &self.helpers
    }

    /// Open flags of a regular file opened with `flags` (module doc: direct I/O for writers
    /// into a QoS tree; otherwise the page cache, kept across opens: we are the only writer).
    fn open_flags(&self, ino: Ino, flags: i32) -> u32 {
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writes && self.fs.in_qos_tree(ino) {
            abi::FOPEN_DIRECT_IO
        } else {
            abi::FOPEN_KEEP_CACHE
        }
    }

    /// The relatime update of a READ, once its reply is on its way.
    pub fn after_reply(&self, h: Handled) {
        if let Some(ino) = h.atime_after {
            self.fs.write_atime(ino);
        }
    }

    /// The session ended (unmount): flush and close the pool.
    pub fn destroy(&self) {
        // requests still on helpers (a writer paced at unmount time) finish first
        if !self.helpers.wait_done(Duration::from_secs(30)) {
            log::warn!("unmount: requests still waiting on helper threads after 30 s; closing the pool anyway");
        }
        if let Err(e) = self.fs.shutdown() {
            log::error!("flushing the pool at unmount: {e}");
        }
    }

    /// [`dispatch`](Self::dispatch), with a panic turned into EIO and a suspended pool.
    fn handle(&self, h: &InHeader, op: Op<'_>, out: &mut [u8]) -> Handled {
        let run = std::panic::AssertUnwindSafe(|| {
            #[cfg(feature = "fault-injection")]
            if let Some(r) = self.injection(h, &op) {
                return r.into();
            }
            self.dispatch(h, op, out)
        });
        match std::panic::catch_unwind(run) {
            Ok(handled) => handled,
            Err(p) => {
                let message = panic_message(&*p);
                log::error!(
                    "panic in the FUSE request handler ({} of node {}): {message}",
                    requests::op_name(h.opcode),
                    h.nodeid
                );
                let site = PanicSite::Request { node: h.nodeid };
                self.fs.engine().suspend(EngineError::Panicked { site, message: message.into() });
                match h.opcode {
                    op::FORGET | op::BATCH_FORGET => Reply::None,
                    _ => Reply::Error(libc::EIO),
                }
                .into()
            }
        }
    }

    /// Test builds: arm a panic (the xattr on the root), or panic as armed.
    #[cfg(feature = "fault-injection")]
    fn injection(&self, h: &InHeader, op: &Op<'_>) -> Option<Reply> {
        use std::sync::atomic::Ordering;
        match op {
            Op::Setxattr { name, value, .. }
                if h.nodeid == squeezefs_fs::ROOT_INO && *name == XATTR_INJECT_PANIC.as_bytes() =>
            {
                Some(match *value {
                    b"request" => {
                        self.panic_next_lookup.store(true, Ordering::SeqCst);
                        Reply::Empty
                    }
                    site => match self.fs.engine().inject_panic(&String::from_utf8_lossy(site)) {
                        Ok(()) => Reply::Empty,
                        Err(e) => {
                            log::error!("{XATTR_INJECT_PANIC}: {e}");
                            Reply::Error(libc::EINVAL)
                        }
                    },
                })
            }
            Op::Lookup { .. } if self.panic_next_lookup.swap(false, Ordering::SeqCst) => {
                panic!("injected panic (request)")
            }
            _ => None,
        }
    }

    fn dispatch(&self, h: &InHeader, op: Op<'_>, out: &mut [u8]) -> Handled {
        let fs = &*self.fs;
        let c = Creds::from_request(h.uid, h.gid, h.pid);
        let ino = h.nodeid;
        let reply = match op {
            Op::Lookup { name } => match fs.lookup(&c, ino, name) {
                // a negative entry the kernel may cache: we are the only writer, and our
                // own creates replace it
                Err(FsError::NotFound) => Reply::NegativeEntry,
                r => entry(r),
            },
            Op::Forget { nlookup } => {
                fs.forget(ino, nlookup);
                Reply::None
            }
            Op::BatchForget { list } => {
                for (ino, nlookup) in abi::forget_list(list) {
                    fs.forget(ino, nlookup);
                }
                Reply::None
            }
            Op::Getattr => attr_reply(fs.getattr(ino)),
            Op::Setattr(s) => attr_reply(fs.setattr(&c, ino, &set_attr(&s))),
            Op::Readlink => match fs.readlink(ino) {
                Ok(t) => Reply::Bytes(t),
                Err(e) => Reply::Error(errno(&e)),
            },
            Op::Symlink { name, target } => entry(fs.symlink(&c, ino, name, target)),
            Op::Mknod { mode, rdev, name } => match kind_of_mode(mode) {
                Some(kind) => entry(fs.mknod(&c, ino, name, kind, mode & 0o7777, rdev)),
                None => Reply::Error(libc::EINVAL),
            },
            Op::Mkdir { mode, name } => entry(fs.mkdir(&c, ino, name, mode & 0o7777)),
            Op::Unlink { name } => empty(fs.unlink(&c, ino, name)),
            Op::Rmdir { name } => empty(fs.rmdir(&c, ino, name)),
            Op::Rename { newdir, flags, name, newname } => empty(fs.rename(&c, ino, name, newdir, newname, flags)),
            Op::Link { oldnodeid, name } => entry(fs.link(&c, oldnodeid, ino, name)),
            // we are the only writer: cached pages stay valid across opens
            Op::Open { flags } => match fs.open(&c, ino, flags as i32) {
                Ok(fh) => Reply::Open { fh, flags: self.open_flags(ino, flags as i32) },
                Err(e) => Reply::Error(errno(&e)),
            },
            Op::Read { offset, size } => {
                let size = (size as usize).min(out.len());
                return match fs.read_into(ino, offset, &mut out[..size]) {
                    Ok(n) => Handled { reply: Reply::Filled(n), atime_after: Some(ino) },
                    Err(e) => Reply::Error(errno(&e)).into(),
                };
            }
            // the kernel resolves O_APPEND offsets itself (it owns the size)
            Op::Write { offset, write_flags, data } => {
                match fs.write(&c, ino, offset, data, write_flags & abi::FUSE_WRITE_CACHE != 0) {
                    Ok(n) => Reply::Written(n as u32),
                    Err(e) => Reply::Error(errno(&e)),
                }
            }
            Op::Statfs => match fs.statfs() {
                Ok(s) => Reply::Statfs(kstatfs(&s)),
                Err(e) => Reply::Error(errno(&e)),
            },
            Op::Release { fh } => empty(fs.release(fh)),
            Op::Fsync | Op::Fsyncdir => empty(fs.fsync(ino)),
            Op::Setxattr { flags, name, value } => empty(fs.setxattr(&c, ino, name, value, flags)),
            Op::Getxattr { size, name } => xattr(size, requests::getxattr(fs, &self.requests, &c, ino, name)),
            Op::Listxattr { size } => xattr(size, fs.listxattr(&c, ino).map(name_list)),
            Op::Removexattr { name } => empty(fs.removexattr(&c, ino, name)),
            // Nothing to do at close (data is durable at fsync/txg, POSIX locks stay in the
            // kernel): ENOSYS makes the kernel stop sending FLUSH, one synchronous round trip
            // less per close(2) — a quarter of the requests of a small-file tree read. The
            // kernel still writes back its cached pages and reports their errors before it
            // checks this.
            Op::Flush => Reply::Error(libc::ENOSYS),
            Op::Opendir { flags } => match fs.opendir(&c, ino, flags as i32) {
                Ok(fh) => Reply::Open { fh, flags: 0 },
                Err(e) => Reply::Error(errno(&e)),
            },
            Op::Readdir { offset, size, plus } => {
                let size = (size as usize).min(out.len());
                self.readdir(ino, offset, &mut out[..size], plus)
            }
            Op::Releasedir { fh } => empty(fs.releasedir(fh)),
            Op::Access { mask } => empty(fs.access(&c, ino, mask)),
            Op::Create { flags, mode, name } => match fs.create(&c, ino, name, mode & 0o7777, flags as i32) {
                Ok((attr, fh)) => {
                    let open_flags = self.open_flags(attr.ino, flags as i32);
                    Reply::Created { attr, fh, open_flags }
                }
                Err(e) => Reply::Error(errno(&e)),
            },
            // no interrupt support: ENOSYS tells the kernel to stop sending INTERRUPT
            Op::Interrupt => Reply::Error(libc::ENOSYS),
            // only fuseblk mounts get DESTROY; the flush runs when the session ends anyway
            Op::Destroy => Reply::Empty,
            Op::Fallocate { offset, length, mode } => empty(fs.fallocate(&c, ino, offset, length, mode)),
            Op::Lseek { offset, whence } => self.lseek(ino, offset, whence),
            Op::CopyFileRange { fh_in, off_in, nodeid_out, fh_out, off_out, len, flags } => {
                let src = squeezefs_fs::CopyEnd { ino, fh: fh_in, offset: off_in };
                let dst = squeezefs_fs::CopyEnd { ino: nodeid_out, fh: fh_out, offset: off_out };
                match fs.copy_file_range(&c, src, dst, len, flags) {
                    // at most `MAX_COPY`, which fits
                    Ok(n) => Reply::Written(n as u32),
                    Err(e) => Reply::Error(errno(&e)),
                }
            }
            Op::Ioctl { cmd, input, out_size } => match fs.ioctl(&c, ino, cmd, input, out_size) {
                Ok(data) => {
                    let mut body = vec![0u8; abi::IOCTL_OUT_LEN];
                    body.extend_from_slice(&data);
                    Reply::Bytes(body)
                }
                Err(e) => Reply::Error(errno(&e)),
            },
            Op::Unsupported(_) => Reply::Error(libc::ENOSYS),
        };
        reply.into()
    }

    fn lseek(&self, ino: Ino, offset: i64, whence: i32) -> Reply {
        if offset < 0 {
            return Reply::Error(libc::ENXIO);
        }
        // With the writeback cache the kernel may hold written pages (and a larger size)
        // that the daemon has not seen, and it does not flush them before FUSE_LSEEK:
        // answering from our state could report ENXIO or a hole over fresh data (`cp` would
        // then skip it). ENOSYS makes the kernel answer from its own page cache and size
        // for the rest of this mount (whole file = data): always correct, without hole
        // detection.
        if self.writeback && self.fs.open_for_write(ino) {
            return Reply::Error(libc::ENOSYS);
        }
        match self.fs.lseek(ino, offset as u64, whence) {
            Ok(o) => Reply::Offset(o),
            Err(e) => Reply::Error(errno(&e)),
        }
    }

    /// Directory entries from `offset` into `out` (the kernel's buffer size) until it is
    /// full. An error after some entries were placed ends the listing there (the kernel
    /// asks again from the last offset and then gets the error): the entries sent are
    /// counted as lookups (readdirplus), which an error reply would leak.
    fn readdir(&self, dir: Ino, mut offset: u64, out: &mut [u8], plus: bool) -> Reply {
        let fail = |used: usize, e: &FsError| if used == 0 { Reply::Error(errno(e)) } else { Reply::Filled(used) };
        let mut used = 0;
        loop {
            let items = match self.fs.readdir(dir, offset, READDIR_BATCH, plus) {
                Ok(i) => i,
                Err(e) => return fail(used, &e),
            };
            if items.is_empty() {
                return Reply::Filled(used);
            }
            for it in items {
                let len = abi::dirent_len(it.name.len(), plus);
                if used + len > out.len() {
                    return Reply::Filled(used);
                }
                if plus {
                    // the inode's generation, as LOOKUP sends it: a mismatch makes the kernel
                    // take the cached inode for a reused number and fail its open files with EIO
                    let a = match &it.attr {
                        Some(a) => a.clone(),
                        None => match self.fs.getattr(it.ino) {
                            Ok(a) => a,
                            Err(e) => return fail(used, &e),
                        },
                    };
                    abi::put_entry_out(out, used, it.ino, a.generation, TTL.as_secs(), &attr(&a));
                    abi::put_dirent(out, used + abi::ENTRY_OUT_LEN, it.ino, it.next_offset, dtype(it.kind), &it.name);
                    // the kernel counts a lookup for every entry it received except . and ..
                    if it.name != b"." && it.name != b".." {
                        self.fs.remember_entry(dir, &it);
                    }
                } else {
                    abi::put_dirent(out, used, it.ino, it.next_offset, dtype(it.kind), &it.name);
                }
                used += len;
                offset = it.next_offset;
            }
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

    #[test]
    fn setattr_now_wins_over_an_explicit_time_and_omitted_fields_stay_none() {
        let s = abi::SetattrIn {
            valid: fattr::ATIME | fattr::ATIME_NOW | fattr::MTIME | fattr::SIZE,
            size: 7,
            atime: (1, 2),
            mtime: (-1, 500_000_000),
            ..Default::default()
        };
        let a = set_attr(&s);
        assert_eq!(a.atime, Some(TimeSet::Now));
        assert_eq!(a.mtime, Some(TimeSet::At(Timestamp { secs: -1, nanos: 500_000_000 })));
        assert_eq!(a.size, Some(7));
        assert_eq!((a.mode, a.uid, a.gid, a.ctime, a.fh), (None, None, None, None, None));
    }

    #[test]
    fn replies_that_do_not_fit_are_e2big_and_errors_stay_errors() {
        let mut small = [0u8; 8];
        assert_eq!(Reply::Bytes(vec![1; 9]).encode(&mut small), Err(libc::E2BIG));
        assert_eq!(Reply::Bytes(vec![1; 8]).encode(&mut small), Ok(8));
        assert_eq!(Reply::Error(libc::ENOENT).encode(&mut small), Err(libc::ENOENT));
        assert_eq!(Reply::Written(5).encode(&mut small), Ok(8));
        assert_eq!(abi::u32_at(&small, 0), 5);
        let mut big = [0xffu8; abi::ENTRY_OUT_LEN];
        assert_eq!(Reply::NegativeEntry.encode(&mut big), Ok(abi::ENTRY_OUT_LEN));
        assert_eq!(abi::u64_at(&big, 0), 0, "node id 0");
        assert_eq!(abi::u64_at(&big, 16), TTL.as_secs(), "the kernel may keep the miss");
    }

    #[test]
    fn statfs_reports_4k_blocks_and_never_more_available_than_free() {
        let s = squeezefs_fs::StatFs {
            total_bytes: 10 << 20,
            free_bytes: 4 << 20,
            avail_bytes: 8 << 20,
            sector: 512,
            inodes: 3,
        };
        let k = kstatfs(&s);
        assert_eq!((k.blocks, k.bfree, k.bavail), (2560, 1024, 1024));
        assert_eq!((k.bsize, k.frsize, k.namelen), (4096, 4096, 255));
    }
}
