//! The `/dev/fuse` transport: the INIT handshake and the request-serving threads.
//!
//! Each thread owns a descriptor of the connection (the first one the mount's; the others
//! cloned with `FUSE_DEV_IOC_CLONE`, so the kernel hands requests to whichever thread reads
//! next without one shared queue lock) and one buffer. A request is read into the buffer
//! (header, argument struct and payload back to back), decoded ([`abi::decode`]), handled
//! by the [`OpCore`], and its reply encoded into the same buffer (out header + body) and
//! written back; then the core's after-reply work runs (the relatime update of a READ).
//! FORGET and BATCH_FORGET get no reply. A request that may wait long
//! ([`OpCore::may_wait`]: an fsync, a WRITE into a QoS tree waiting for its admission) is
//! handed, with the buffer holding it, to a helper thread that handles it and writes its
//! reply on the same descriptor; the receiving thread goes on with a spare buffer from the
//! session's pool (`Spares`), so a paced tree never holds the threads that other trees and
//! readers need. A thread ends when the connection is gone
//! (ENODEV: unmounted or aborted); when the last one has ended, [`Session::run`] flushes
//! and closes the pool.
//!
//! While every CPU is busy with other work, the threads wait for requests as SCHED_FIFO, so
//! that the daemon's half of a round trip is not a scheduling wait (sched.rs: states,
//! measurements, the `SQUEEZEFS_FUSE_SCHED` override).
//!
//! The kernel itself limits who reaches the mount (only the mounting user unless
//! `allow_other`), and the fs core checks permissions on every request with the caller's
//! credentials, so the threads do not filter requests by uid (a process whose fsuid
//! differs from its uid, e.g. a file server, gets the answer ext4 gives it).
use crate::abi::{self, init, op, InHeader};
use crate::opcore::{OpCore, MAX_WRITE};
use crate::sched::{contention, is_heavy, DevSched, Policy, ThreadClass};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// Read buffer per thread: the largest request (a 1 MiB write after its header and
/// argument struct) with room to spare; also the reply buffer (a 1 MiB read).
const BUF_LEN: usize = MAX_WRITE as usize + 4096;
/// Spare request buffers a session keeps for threads whose buffer went to a helper.
const SPARE_BUFFERS: usize = 8;
/// Requests the kernel keeps in flight in the background (readahead, writeback).
const MAX_BACKGROUND: u16 = 64;
/// Background requests past which the kernel counts the connection congested.
const CONGESTION_THRESHOLD: u16 = 48;

/// What the daemon asks the kernel for at INIT.
#[derive(Clone, Copy, Debug)]
pub struct InitWants {
    /// the kernel writeback cache (not for read-only mounts)
    pub writeback: bool,
    /// per-CPU io_uring queues (crate::uring)
    pub uring: bool,
}

/// The capabilities asked for at INIT, and what the INIT reply holds.
pub fn init_reply(kernel: &abi::InitIn, wants: InitWants) -> abi::InitOut {
    let mut wanted = init::ASYNC_READ
        | init::BIG_WRITES
        | init::MAX_PAGES
        | init::DO_READDIRPLUS
        | init::READDIRPLUS_AUTO
        | init::PARALLEL_DIROPS
        | init::ASYNC_DIO
        | init::CACHE_SYMLINKS
        // the fs core clears suid/sgid on write, truncate and chown itself (crates/fs
        // perm.rs, as ext4 does); with this the kernel stops asking before every write
        // (GETXATTR security.capability per write() and a GETATTR per chown: 2.5 of ~14
        // requests per file of a tar extract) — the superblock gets SB_NOSEC
        | init::HANDLE_KILLPRIV_V2
        // writers in QoS trees get FOPEN_DIRECT_IO (opcore.rs): their files stay mappable
        | init::DIRECT_IO_ALLOW_MMAP
        | init::INIT_EXT;
    if wants.writeback {
        wanted |= init::WRITEBACK_CACHE;
    }
    // per-CPU request queues: offered by the kernel only when the fuse module's
    // `enable_uring` parameter is Y
    if wants.uring {
        wanted |= init::OVER_IO_URING;
    }
    let granted = wanted & kernel.flags;
    let missing = wanted & !kernel.flags & !init::INIT_EXT;
    for bit in (0..64).map(|b| 1u64 << b).filter(|b| missing & b != 0) {
        if bit == init::OVER_IO_URING {
            log::info!("kernel does not offer FUSE over io_uring; serving /dev/fuse only");
        } else {
            log::info!("kernel lacks FUSE capability {}", init::name(bit));
        }
    }
    // the kernel offers at most its default readahead; asking for more is refused
    let max_readahead = kernel.max_readahead.min(MAX_WRITE);
    let page = 4096;
    abi::InitOut {
        max_readahead,
        flags: granted,
        max_background: MAX_BACKGROUND,
        congestion_threshold: CONGESTION_THRESHOLD,
        max_write: MAX_WRITE,
        time_gran: 1,
        max_pages: (MAX_WRITE.max(max_readahead).div_ceil(page)) as u16,
    }
}

/// Answer the kernel's INIT on `fd`; returns the capabilities granted.
pub fn handshake(fd: &OwnedFd, wants: InitWants) -> io::Result<u64> {
    let mut buf = vec![0u8; BUF_LEN];
    loop {
        let n = read_request(fd, &mut buf)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "the FUSE connection ended before INIT"))?;
        let h = InHeader::parse(&buf);
        if h.opcode != op::INIT {
            send(fd, &mut buf, h.unique, Err(libc::EIO));
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("FUSE request {} before INIT", h.opcode)));
        }
        let kernel = abi::InitIn::parse(&buf[abi::IN_HEADER_LEN..n]).map_err(io::Error::from_raw_os_error)?;
        if kernel.major > abi::KERNEL_VERSION {
            // the kernel sends INIT again with our major version
            abi::put_init_out(&mut buf[abi::OUT_HEADER_LEN..], &abi::InitOut::default());
            send(fd, &mut buf, h.unique, Ok(abi::INIT_OUT_LEN));
            continue;
        }
        if kernel.major < abi::KERNEL_VERSION || kernel.minor < 23 {
            send(fd, &mut buf, h.unique, Err(libc::EPROTO));
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "FUSE protocol {}.{} of this kernel is too old (7.23 or later needed)",
                    kernel.major, kernel.minor
                ),
            ));
        }
        let out = init_reply(&kernel, wants);
        log::debug!(
            "INIT: kernel {}.{} flags {:#x}; granted {:#x}, max_readahead {}",
            kernel.major,
            kernel.minor,
            kernel.flags,
            out.flags,
            out.max_readahead
        );
        abi::put_init_out(&mut buf[abi::OUT_HEADER_LEN..], &out);
        if !send(fd, &mut buf, h.unique, Ok(abi::INIT_OUT_LEN)) {
            return Err(io::Error::last_os_error());
        }
        return Ok(out.flags);
    }
}

/// A connection with INIT answered, served by `threads` threads once [`run`](Self::run).
pub struct Session {
    fd: OwnedFd,
    core: Arc<OpCore>,
    threads: usize,
}

impl Session {
    pub fn new(fd: OwnedFd, core: Arc<OpCore>, threads: usize) -> Session {
        Session { fd, core, threads: threads.max(1) }
    }

    /// Serve requests until the connection ends (unmount), then flush and close the pool.
    pub fn run(self) -> io::Result<()> {
        let main = Arc::new(self.fd);
        let mut fds = Vec::with_capacity(self.threads);
        for _ in 1..self.threads {
            match clone_fd(&main) {
                Ok(fd) => fds.push(Arc::new(fd)),
                Err(e) => {
                    // e.g. an unprivileged mount without access to /dev/fuse: the threads
                    // share one descriptor (the kernel hands each read its own request)
                    log::info!("{e}; the request threads share one descriptor");
                    fds.resize(self.threads - 1, main.clone());
                    break;
                }
            }
        }
        fds.push(main);
        let mut handles = Vec::with_capacity(fds.len());
        let spares = Arc::new(Spares::default());
        let mode = DevSched::from_env();
        if mode == DevSched::Adaptive {
            contention::start();
        }
        for (i, fd) in fds.into_iter().enumerate() {
            let (core, spares) = (self.core.clone(), spares.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("sqz-fuse-{i}"))
                    .spawn(move || serve(&fd, &core, &spares, i, mode))?,
            );
        }
        let mut result = Ok(());
        for h in handles {
            let r = h.join().unwrap_or_else(|_| Err(io::Error::other("a /dev/fuse thread panicked")));
            if let Err(e) = r {
                log::error!("serving /dev/fuse: {e}");
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        self.core.destroy();
        result
    }
}

/// A new descriptor on the connection of `fd` (`FUSE_DEV_IOC_CLONE`).
fn clone_fd(fd: &OwnedFd) -> io::Result<OwnedFd> {
    // _IOR(229, 0, uint32_t)
    const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;
    let raw = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just opened and own from here on
    let new = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut src = fd.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 (the source descriptor) through the pointer
    if unsafe { libc::ioctl(new.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut src) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("cloning the /dev/fuse descriptor: {e}")));
    }
    Ok(new)
}

/// Read one request into `buf`: its length, or None once the connection is gone.
fn read_request(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: reads at most buf.len() bytes into buf
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            let n = n as usize;
            if n < abi::IN_HEADER_LEN {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("short FUSE request ({n} bytes)")));
            }
            return Ok(Some(n));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // ENOENT: the request was interrupted before we read it
            Some(libc::ENOENT | libc::EINTR | libc::EAGAIN) => continue,
            Some(libc::ENODEV) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Write the reply to request `unique` whose body (`Ok(len)`) is at
/// `buf[OUT_HEADER_LEN..]`, or the error; false when the write failed.
fn send(fd: &OwnedFd, buf: &mut [u8], unique: u64, body: Result<usize, i32>) -> bool {
    let (error, len) = match body {
        Ok(n) => (0, n),
        Err(e) => (-e, 0),
    };
    abi::put_out_header(buf, 0, unique, error, len);
    let total = abi::OUT_HEADER_LEN + len;
    // SAFETY: writes the first `total` bytes of buf (len fits: encode checked the room)
    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), total) };
    if n < 0 {
        let e = io::Error::last_os_error();
        // ENOENT: the request was interrupted or the connection aborted meanwhile
        if e.raw_os_error() != Some(libc::ENOENT) {
            log::debug!("FUSE reply to request {unique}: {e}");
        }
        return false;
    }
    true
}

/// Request buffers for threads whose own went to a helper with a waiting request.
#[derive(Default)]
struct Spares(std::sync::Mutex<Vec<Vec<u8>>>);

impl Spares {
    fn take(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_else(|| vec![0u8; BUF_LEN])
    }

    fn give(&self, buf: Vec<u8>) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if g.len() < SPARE_BUFFERS {
            g.push(buf);
        }
    }
}

/// One thread's loop: read, then handle and reply here, or (a request that may wait long)
/// on a helper; until the connection ends. The thread waits for each request in the class
/// that `mode` gives for the machine's load, and handles heavy requests as SCHED_OTHER
/// (sched.rs).
fn serve(fd: &Arc<OwnedFd>, core: &Arc<OpCore>, spares: &Arc<Spares>, i: usize, mode: DevSched) -> io::Result<()> {
    let mut buf = vec![0u8; BUF_LEN];
    let mut class = ThreadClass::new(format!("/dev/fuse thread {i}"));
    loop {
        class.set(mode.waiting_policy(contention::busy(), class.fifo_allowed()));
        let Some(n) = read_request(fd, &mut buf)? else { break };
        let h = InHeader::parse(&buf);
        if is_heavy(h.opcode, payload_len(&h, n)) {
            class.set(Policy::Other);
        }
        if core.may_wait(&h) {
            let mine = std::mem::replace(&mut buf, spares.take());
            let (fd, core, spares) = (fd.clone(), core.clone(), spares.clone());
            core.clone().helpers().run(move || {
                let mut mine = mine;
                handle(&fd, &core, &mut mine, n);
                spares.give(mine);
            });
            continue;
        }
        handle(fd, core, &mut buf, n);
    }
    Ok(())
}

/// Bytes after the argument struct in a request of `n` bytes (a WRITE's data).
fn payload_len(h: &InHeader, n: usize) -> u32 {
    let body = (h.len as usize).clamp(abi::IN_HEADER_LEN, n) - abi::IN_HEADER_LEN;
    body.saturating_sub(abi::arg_len(h.opcode)) as u32
}

/// Decode, handle and answer the request of `n` bytes in `buf`.
fn handle(fd: &OwnedFd, core: &OpCore, buf: &mut [u8], n: usize) {
    let h = InHeader::parse(buf);
    let body_end = (h.len as usize).clamp(abi::IN_HEADER_LEN, n);
    let body = &buf[abi::IN_HEADER_LEN..body_end];
    let alen = abi::arg_len(h.opcode).min(body.len());
    let handled = if abi::fills_reply_buffer(h.opcode) {
        // the argument struct is all these requests carry: copied out, the buffer
        // takes the reply body
        let mut arg = [0u8; abi::OP_IN_LEN];
        arg[..alen].copy_from_slice(&body[..alen]);
        core.serve(&h, abi::decode(h.opcode, &arg[..alen], &[]), &mut buf[abi::OUT_HEADER_LEN..])
    } else if h.opcode == op::INIT {
        core.serve(&h, Err(libc::EIO), &mut [])
    } else {
        let (arg, payload) = body.split_at(alen);
        core.serve(&h, abi::decode(h.opcode, arg, payload), &mut [])
    };
    if matches!(handled.reply, crate::opcore::Reply::None) {
        return;
    }
    let body = handled.reply.encode(&mut buf[abi::OUT_HEADER_LEN..]);
    send(fd, buf, h.unique, body);
    core.after_reply(handled);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(flags: u64, max_readahead: u32) -> abi::InitIn {
        abi::InitIn { major: 7, minor: 44, max_readahead, flags }
    }

    #[test]
    fn init_grants_what_both_sides_have() {
        let all = u64::MAX;
        let out = init_reply(&kernel(all, 131_072), InitWants { writeback: true, uring: false });
        assert!(out.flags & init::WRITEBACK_CACHE != 0);
        assert!(out.flags & init::OVER_IO_URING == 0, "not asked for");
        assert!(out.flags & init::HANDLE_KILLPRIV_V2 != 0 && out.flags & init::INIT_EXT != 0);
        assert_eq!((out.max_write, out.max_pages, out.max_readahead), (MAX_WRITE, 256, 131_072));
        assert_eq!((out.max_background, out.congestion_threshold, out.time_gran), (64, 48, 1));
        let ro = init_reply(&kernel(all, 131_072), InitWants { writeback: false, uring: true });
        assert!(ro.flags & init::WRITEBACK_CACHE == 0 && ro.flags & init::OVER_IO_URING != 0);
        let old = init_reply(
            &kernel(init::ASYNC_READ | init::BIG_WRITES, 4 << 20),
            InitWants { writeback: true, uring: true },
        );
        assert_eq!(old.flags, init::ASYNC_READ | init::BIG_WRITES, "nothing the kernel lacks");
        assert_eq!(old.max_readahead, MAX_WRITE, "readahead capped at one max-size request");
    }
}
