//! FUSE over io_uring: per-CPU request queues served by threads pinned to their CPU.
//!
//! Why: on /dev/fuse every synchronous request wakes a daemon thread that the scheduler
//! usually puts on another CPU than the caller, and the reply wakes the caller back across
//! CPUs. On small VMs a cross-CPU wake-up costs far more than the work: measured here
//! (2 vCPUs), one SETATTR round trip takes ~70 µs with caller and daemon on different CPUs
//! and ~6 µs on the same CPU, and a tar extract of 10 k files went from 3.4 s to 1.5 s when
//! everything ran on one CPU. With io_uring (Linux ≥ 6.14, `enable_uring` module parameter)
//! the kernel queues a request on the ring of the CPU the caller runs on; the thread that
//! owns that ring is pinned there, so both wake-ups stay on one CPU.
//!
//! Ring entry states (one entry = a header buffer + a payload buffer registered with the
//! kernel; `DEPTH` entries per CPU queue, one ring and one thread per queue):
//!
//! * `WAITING`: a REGISTER or COMMIT_AND_FETCH command is with the kernel, which holds the
//!   entry until a request for this CPU arrives;
//! * `HANDLING`: its completion arrived with a request in the buffers; the thread runs it
//!   through the operation core ([`OpCore`]), writes the reply into the same buffers and submits
//!   COMMIT_AND_FETCH with the request's commit id → `WAITING`;
//! * `LENT`: a slow request runs on a helper thread; its reply comes back through the
//!   queue's eventfd → COMMIT_AND_FETCH → `WAITING`;
//! * `DEAD`: the completion failed with ENOTCONN/ENODEV (unmount or abort), or with an
//!   error we cannot retry. EINTR/EAGAIN resubmit the last command. The thread ends when
//!   all its entries are dead.
//!
//! The kernel switches the connection to the rings once every CPU queue has an entry;
//! until then (and for FORGET and INTERRUPT always) requests still come through /dev/fuse,
//! which its threads keep serving (devfuse.rs). Requests are handled in the ring thread, one at a time per
//! CPU, as libfuse does; requests that may wait long ([`OpCore::may_wait`]: fsync waiting
//! for a txg commit, a WRITE into a QoS tree waiting for its admission) are `LENT` to a
//! helper thread (crate::helpers), which hands the entry back through an eventfd the ring
//! polls, so one process's fsync or one tree's pacing does not stall the other requests
//! from its CPU. A lent entry is not with the kernel, so the queue registers a spare entry
//! for it while fewer than `DEPTH` entries are free (at most `MAX_ENTRIES` in all): the
//! other requests of the CPU keep finding `DEPTH` entries whatever number of requests wait.
//!
//! Placement: pinning the ring threads is half of it. The reply wakes the caller from the
//! ring thread, and the scheduler puts a wakee on an idle CPU rather than on the busy
//! waker's: on a quiet 2-CPU machine tar then hopped CPUs on nearly every request, paying
//! the cross-CPU wake-up again (subset extract 3.0 s instead of 1.4 s; it only looked fast
//! while other jobs kept the second CPU busy). A CPU that runs only SCHED_IDLE tasks counts
//! as idle for that choice, so a ring thread is SCHED_IDLE while it sleeps in
//! io_uring_enter (where its replies are committed and the callers woken) and SCHED_OTHER
//! while it handles requests that carry real work (reads, large writes, listings): those
//! keep their normal share against the compression workers (SCHED_IDLE throughout cost
//! 20–35% of cold read throughput). Switching costs two sched_setscheduler calls (~3 µs
//! each here), so it happens only for such requests, not for the many short metadata
//! requests of e.g. an extract (`Sched::Lazy`).
//!
//! Contention: SCHED_IDLE has a price when no CPU is idle. A woken SCHED_IDLE thread waits
//! behind every other runnable task of its CPU (other programs, our own compression
//! workers), and the caller waits on it for each of the eight synchronous requests of a
//! created file: with other jobs keeping both CPUs busy a full Linux extract took 2–3× as
//! long as btrfs', against 1.2–1.3× with ring threads that preempt (docs/benchmarks.md).
//! When every CPU is busy the caller has no idle CPU to be woken onto either, so the
//! placement argument above no longer holds. Hence `Sched::Adaptive`, the default, with two
//! states per ring thread, switched at its next sleep:
//! * QUIET (some CPU had idle time): as `Lazy`;
//! * BUSY (no CPU had): SCHED_FIFO priority 1 while it sleeps and handles short requests,
//!   so a request is served as soon as it arrives; SCHED_OTHER for requests with real work,
//!   as above, so a large read never holds a CPU against everyone else.
//!
//! QUIET → BUSY when the share of idle CPU time over the last `contention::PERIOD` (100 ms,
//! all CPUs, /proc/stat) falls below `BUSY_BELOW` (10%); BUSY → QUIET above `QUIET_ABOVE`
//! (25%). SCHED_FIFO needs CAP_SYS_NICE (root mounts have it); where the kernel refuses it
//! the thread stays QUIET.
//! The whole machine's share misses one busy CPU beside an idle one (a CPU hog on core 0):
//! it reads QUIET while ring thread 0 sleeps as SCHED_IDLE behind the hog. After a request
//! handled as SCHED_OTHER, the switch back to SCHED_IDLE scales the CPU the thread owes by
//! the weights' ratio (1024 ÷ 3), and the woken thread can wait seconds, every request
//! from CPU 0 with it, while the pipeline drains and CPU 1 idles. So each ring thread is also
//! watched on its own (sched.rs `contention::watch`): starved, it is moved to SCHED_FIFO
//! from outside and sleeps so until its CPU idles again.
//!
//! Tunables: `DEPTH` (entries per CPU), `MAX_ENTRIES` (with spares for lent entries),
//! `PAYLOAD` (≥ the kernel's max payload: max_write / max_pages, 1 MiB here, or registration
//! fails with EINVAL).
use crate::abi;
use crate::opcore::{Handled, OpCore, MAX_WRITE};
use crate::sched::{contention, is_heavy, Policy, ThreadClass};
use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{mpsc, Arc};

/// Entries per CPU queue.
const DEPTH: usize = 8;
/// Most entries per CPU queue, spares for lent entries included (each holds a `PAYLOAD`).
const MAX_ENTRIES: usize = DEPTH + 32;
/// Payload buffer per entry: the largest request or reply body (1 MiB write/read) + slack.
const PAYLOAD: usize = MAX_WRITE as usize + 4096;
/// Where root switches the transport on (the kernel reads it at INIT).
pub const ENABLE_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Per-CPU queues this process serves (0: requests come through /dev/fuse only).
static ACTIVE_QUEUES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How this daemon receives requests, for its log: "io_uring, N per-CPU queues" or "/dev/fuse".
pub fn transport() -> String {
    match ACTIVE_QUEUES.load(std::sync::atomic::Ordering::Relaxed) {
        0 => "/dev/fuse".into(),
        n => format!("io_uring, {n} per-CPU queues"),
    }
}

/// Whether the kernel offers FUSE over io_uring to new connections right now.
pub fn kernel_allows() -> bool {
    std::fs::read_to_string(ENABLE_PARAM).is_ok_and(|v| v.trim() == "Y")
}

/// Switch the kernel's `enable_uring` on (root only); an error names what failed.
pub fn kernel_enable() -> io::Result<()> {
    if !Path::new(ENABLE_PARAM).exists() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{ENABLE_PARAM} does not exist (kernel without CONFIG_FUSE_IO_URING, Linux < 6.14)"),
        ));
    }
    std::fs::write(ENABLE_PARAM, b"Y")
        .map_err(|e| io::Error::new(e.kind(), format!("writing Y to {ENABLE_PARAM}: {e}")))
}

/// CPU queue ids the kernel expects rings for: 0..=highest possible CPU.
fn queue_count() -> usize {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    possible_cpus(&possible).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// "0-3,5" → 6 (highest id + 1); None when unreadable.
fn possible_cpus(s: &str) -> Option<usize> {
    let mut max = None;
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let hi = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        max = Some(max.map_or(hi, |m: usize| m.max(hi)));
    }
    max.map(|m| m + 1)
}

/// The buffers of one ring entry. Heap allocations: their addresses stay fixed while the
/// kernel holds them, whatever happens to the `Entry` value.
struct Entry {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    iov: Box<[libc::iovec; 2]>,
    commit: bool,
    /// with a helper thread for a slow request (`Queue::lend`)
    lent: bool,
    dead: bool,
}

impl Entry {
    fn new() -> Entry {
        let mut header = vec![0u8; abi::HEADER_LEN].into_boxed_slice();
        let mut payload = vec![0u8; PAYLOAD].into_boxed_slice();
        let iov = Box::new([
            libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: header.len() },
            libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() },
        ]);
        Entry { header, payload, iov, commit: false, lent: false, dead: false }
    }

    /// REGISTER (first time) or COMMIT_AND_FETCH (after a reply) for entry `idx` of `qid`.
    fn sqe(&self, fd: i32, qid: u16, idx: usize) -> squeue::Entry128 {
        let (op, commit_id, addr) = if self.commit {
            (abi::CMD_COMMIT_AND_FETCH, abi::u64_at(&self.header, abi::ENT_COMMIT_ID), None)
        } else {
            (abi::CMD_REGISTER, 0, Some(self.iov.as_ptr() as u64))
        };
        let e = opcode::UringCmd80::new(types::Fd(fd), op)
            .cmd(abi::cmd_req(commit_id, qid))
            .addr(addr)
            .build()
            .user_data(idx as u64);
        if self.commit {
            e
        } else {
            with_len(e, 2)
        }
    }
}

/// Set the SQE's `len` (bytes 24..28: the iovec count REGISTER reads), which the
/// io-uring crate's UringCmd80 builder does not expose.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is #[repr(C)] over the kernel's 128-byte SQE (asserted above); bytes
    // 24..28 are `len` in every SQE layout.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&len.to_le_bytes());
    unsafe { std::mem::transmute(raw) }
}

/// How a ring thread presents itself to the scheduler (`SQUEEZEFS_URING_SCHED` overrides
/// the default for experiments: `normal`, `idle`, `waiting-idle`, `lazy`, `fifo`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sched {
    /// `Lazy` while some CPU has idle time, `Fifo` while none has (module comment)
    Adaptive,
    /// SCHED_FIFO priority 1 while it sleeps and handles short requests, SCHED_OTHER from
    /// a request that carries real work until it sleeps again
    Fifo,
    /// SCHED_OTHER throughout
    Normal,
    /// SCHED_IDLE throughout
    Idle,
    /// SCHED_IDLE while it sleeps in io_uring_enter (where it commits replies, i.e. wakes
    /// the callers), SCHED_OTHER while it handles requests
    WaitingIdle,
    /// SCHED_IDLE while it sleeps and while it handles short requests; SCHED_OTHER from a
    /// request that carries real work (`is_heavy`) until it sleeps again
    Lazy,
}

fn sched_mode() -> Sched {
    match std::env::var("SQUEEZEFS_URING_SCHED").as_deref() {
        Ok("normal") => Sched::Normal,
        Ok("fifo") => Sched::Fifo,
        Ok("lazy") => Sched::Lazy,
        Ok("idle") => Sched::Idle,
        Ok("waiting-idle") => Sched::WaitingIdle,
        _ => Sched::Adaptive,
    }
}

/// The class a ring thread of mode `sched` sleeps in (and handles short requests in), with
/// every CPU busy or not, the thread starved on its CPU or not (sched.rs `contention`),
/// and SCHED_FIFO allowed or not.
fn waiting_policy(sched: Sched, busy: bool, starved: bool, fifo_allowed: bool) -> Policy {
    match sched {
        Sched::Fifo if fifo_allowed => Policy::Fifo,
        Sched::Adaptive if fifo_allowed && (busy || starved) => Policy::Fifo,
        Sched::Adaptive if starved => Policy::Other,
        Sched::Normal => Policy::Other,
        _ => Policy::Idle,
    }
}

/// Pin the calling thread to `cpu` (the queue's CPU); best effort. A CPU outside the
/// thread's inherited affinity (the daemon started under `taskset`, or in a cpuset) is left
/// alone: the queue's thread then runs on the CPUs the daemon was given, so a restriction
/// the user put on the daemon holds for every one of its threads.
fn pin_to(cpu: usize) {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain data; both calls read or write exactly `size` bytes of it
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) == 0 && !libc::CPU_ISSET(cpu, &allowed) {
            log::debug!("uring queue {cpu}: its CPU is outside the daemon's affinity; not pinned");
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size, &set) != 0 {
            log::info!("uring queue {cpu}: could not pin to its CPU: {}", io::Error::last_os_error());
        }
    }
}

/// Start one ring thread per CPU queue on the connection behind `fuse_fd` (INIT must be
/// answered with FUSE_OVER_IO_URING). Returns the number of queues once every thread has
/// registered its entries; on error the connection keeps using /dev/fuse.
pub fn start(core: Arc<OpCore>, fuse_fd: OwnedFd) -> io::Result<usize> {
    let fd = Arc::new(fuse_fd);
    let disp = core;
    let queues = queue_count();
    let (tx, rx) = mpsc::channel();
    for qid in 0..queues {
        let (fd, disp, tx) = (fd.clone(), disp.clone(), tx.clone());
        std::thread::Builder::new().name(format!("sqz-uring-{qid}")).spawn(move || {
            if let Err(e) = serve_queue(qid, &fd, &disp, &tx) {
                let _ = tx.send(Err(io::Error::new(e.kind(), format!("uring queue {qid}: {e}"))));
                log::error!("uring queue {qid}: {e}");
            }
        })?;
    }
    drop(tx);
    for _ in 0..queues {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("a uring queue thread ended before registering")),
        }
    }
    ACTIVE_QUEUES.store(queues, std::sync::atomic::Ordering::Relaxed);
    Ok(queues)
}

/// user_data of the eventfd poll through which finished slow requests wake the ring thread.
const WAKE_TAG: u64 = u64::MAX;

/// An entry's buffers handed to a helper thread for a slow request. The ring thread does
/// not touch an entry while it is away (no command of it is with the kernel, so no
/// completion can name it), and does not return while one is away (it is not DEAD).
struct Lent {
    idx: usize,
    header: *mut u8,
    payload: *mut u8,
    payload_cap: usize,
}

// SAFETY: see `Lent`: exactly one thread uses the buffers at a time.
unsafe impl Send for Lent {}

/// One CPU queue: its ring, its entries, and the way back for slow requests.
struct Queue {
    ring: IoUring<squeue::Entry128>,
    ents: Vec<Entry>,
    disp: Arc<OpCore>,
    fd: i32,
    qid: u16,
    wake: OwnedFd,
    done_tx: mpsc::Sender<usize>,
    done_rx: mpsc::Receiver<usize>,
    sched: Sched,
    /// the thread's scheduling class now; once the kernel refused SCHED_FIFO (no
    /// CAP_SYS_NICE), `Fifo` and `Adaptive` behave as `Lazy`
    class: ThreadClass,
}

impl Drop for Queue {
    /// Never free an entry's buffers under a helper thread: wait for every lent entry
    /// (each helper sends exactly once; `done_tx` lives here, so `recv` cannot fail early).
    fn drop(&mut self) {
        for _ in self.ents.iter().filter(|e| e.lent) {
            let _ = self.done_rx.recv();
        }
    }
}

fn serve_queue(qid: usize, fd: &OwnedFd, disp: &Arc<OpCore>, started: &mpsc::Sender<io::Result<()>>) -> io::Result<()> {
    pin_to(qid);
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    let (done_tx, done_rx) = mpsc::channel();
    let mut q = Queue {
        // an entry command each (spares included) + the wake-up poll
        ring: IoUring::builder().setup_cqsize(2 * (MAX_ENTRIES as u32 + 1)).build(MAX_ENTRIES as u32 + 1)?,
        ents: (0..DEPTH).map(|_| Entry::new()).collect(),
        disp: disp.clone(),
        fd: fd.as_raw_fd(),
        qid: qid as u16,
        wake: unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) },
        done_tx,
        done_rx,
        sched: sched_mode(),
        class: ThreadClass::new(format!("uring queue {qid}")),
    };
    for i in 0..DEPTH {
        // SAFETY: the SQE points at the entry's iovec and buffers, which live in `q.ents`
        // until this function returns (after the kernel has let go of them: all DEAD, or
        // the ring is closed, which cancels the commands).
        let sqe = q.ents[i].sqe(q.fd, q.qid, i);
        q.push(sqe)?;
    }
    q.arm_wake()?;
    q.ring.submit()?;
    // a refused registration completes at once; a good one only when a request comes
    let early: Vec<(u64, i32)> = q.ring.completion().map(|c| (c.user_data(), c.result())).collect();
    if let Some((_, res)) = early.iter().find(|(tag, res)| *res < 0 && *tag != WAKE_TAG) {
        return Err(io::Error::from_raw_os_error(-res));
    }
    for (tag, res) in early {
        q.completion(tag, res)?;
    }
    let _ = started.send(Ok(()));
    let sched = q.sched;
    let watch = (sched == Sched::Adaptive).then(|| contention::watch(qid));
    loop {
        let starved = watch.as_ref().is_some_and(|w| w.starved());
        let p = waiting_policy(sched, contention::busy(), starved, q.class.fifo_allowed());
        q.class.set(p);
        let waited = q.ring.submit_and_wait(1);
        if sched == Sched::WaitingIdle {
            q.class.set(Policy::Other);
        }
        match waited {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        let done: Vec<(u64, i32)> = q.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        for (tag, res) in done {
            q.completion(tag, res)?;
        }
        if q.ents.iter().all(|e| e.dead) {
            log::debug!("uring queue {qid}: connection gone");
            return Ok(());
        }
    }
}

impl Queue {
    fn push(&mut self, sqe: squeue::Entry128) -> io::Result<()> {
        // at most one command per entry plus the poll is ever outstanding: MAX_ENTRIES + 1 slots
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| io::Error::other("submission queue full"))
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        let poll =
            opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32).build().user_data(WAKE_TAG);
        self.push(poll.into())
    }

    fn completion(&mut self, tag: u64, res: i32) -> io::Result<()> {
        if tag == WAKE_TAG {
            let mut n = 0u64;
            unsafe { libc::read(self.wake.as_raw_fd(), (&raw mut n).cast(), 8) };
            while let Ok(idx) = self.done_rx.try_recv() {
                let e = &mut self.ents[idx];
                e.lent = false;
                e.commit = true;
                let sqe = e.sqe(self.fd, self.qid, idx);
                self.push(sqe)?;
            }
            if res == -libc::ECANCELED {
                return Ok(());
            }
            return self.arm_wake();
        }
        let idx = tag as usize;
        let (fd, qid) = (self.fd, self.qid);
        let Some(e) = self.ents.get_mut(idx) else {
            return Err(io::Error::other(format!("completion for unknown entry {idx}")));
        };
        if res < 0 {
            match -res {
                libc::EINTR | libc::EAGAIN => {}
                libc::ENOTCONN | libc::ENODEV => {
                    e.dead = true;
                    return Ok(());
                }
                errno => {
                    e.dead = true;
                    log::error!(
                        "uring queue {qid}: entry {idx} failed ({}); requests from this CPU may stall",
                        io::Error::from_raw_os_error(errno)
                    );
                    return Ok(());
                }
            }
        } else {
            let h = abi::InHeader::parse(&e.header);
            let opcode = h.opcode;
            if self.disp.may_wait(&h) && self.lend(idx) {
                self.add_spare()?;
                return Ok(());
            }
            if matches!(self.sched, Sched::Lazy | Sched::Fifo | Sched::Adaptive)
                && is_heavy(opcode, abi::u32_at(&self.ents[idx].header, abi::ENT_PAYLOAD_SZ))
            {
                self.class.set(Policy::Other);
            }
            let e = &mut self.ents[idx];
            let r = run(&self.disp, &mut e.header, &mut e.payload);
            e.commit = true;
            if r.atime_after.is_some() {
                let sqe = e.sqe(fd, qid, idx);
                self.push(sqe)?;
                self.ring.submit()?;
                self.disp.after_reply(r);
                return Ok(());
            }
        }
        let sqe = self.ents[idx].sqe(fd, qid, idx);
        self.push(sqe)
    }

    /// Hand entry `idx` (a request that may wait long: `OpCore::may_wait`) to a helper
    /// thread, so the other requests from this CPU keep being served; its reply comes back
    /// through `done_tx` and the eventfd. (Without a helper thread it runs here, and comes
    /// back the same way.)
    fn lend(&mut self, idx: usize) -> bool {
        let e = &mut self.ents[idx];
        let lent =
            Lent { idx, header: e.header.as_mut_ptr(), payload: e.payload.as_mut_ptr(), payload_cap: e.payload.len() };
        let (disp, done, wake) = (self.disp.clone(), self.done_tx.clone(), self.wake.as_raw_fd());
        e.lent = true;
        self.disp.clone().helpers().run(move || {
            let lent = lent;
            // SAFETY: see `Lent`; the lengths are the boxes' own
            let header = unsafe { std::slice::from_raw_parts_mut(lent.header, abi::HEADER_LEN) };
            let payload = unsafe { std::slice::from_raw_parts_mut(lent.payload, lent.payload_cap) };
            let r = run(&disp, header, payload);
            disp.after_reply(r);
            let _ = done.send(lent.idx);
            let one = 1u64;
            unsafe { libc::write(wake, (&raw const one).cast(), 8) };
        });
        true
    }

    /// Register a spare entry while fewer than `DEPTH` entries are with the kernel (some
    /// are lent), up to `MAX_ENTRIES` (module doc). A refused registration completes with
    /// an error and marks the spare dead; the queue goes on with what it has.
    fn add_spare(&mut self) -> io::Result<()> {
        let free = self.ents.iter().filter(|e| !e.lent && !e.dead).count();
        if free >= DEPTH || self.ents.len() >= MAX_ENTRIES {
            return Ok(());
        }
        let idx = self.ents.len();
        self.ents.push(Entry::new());
        // SAFETY: as for the first entries (serve_queue): the buffers live in `self.ents`
        // (boxed: a growing Vec moves only the handles) until the queue is dropped
        let sqe = self.ents[idx].sqe(self.fd, self.qid, idx);
        self.push(sqe)
    }
}

/// Run the request in an entry's buffers through the core and leave the reply in them: the
/// argument struct is in the header buffer's `op_in`, names and written data in the
/// payload buffer, which then takes the reply body.
fn run(core: &OpCore, header: &mut [u8], payload: &mut [u8]) -> Handled {
    let h = abi::InHeader::parse(header);
    let plen = (abi::u32_at(header, abi::ENT_PAYLOAD_SZ) as usize).min(payload.len());
    let arg = &header[abi::OP_IN..abi::OP_IN + abi::OP_IN_LEN];
    let handled = if abi::fills_reply_buffer(h.opcode) {
        core.serve(&h, abi::decode(h.opcode, arg, &[]), payload)
    } else {
        core.serve(&h, abi::decode(h.opcode, arg, &payload[..plen]), &mut [])
    };
    let (error, len) = match handled.reply.encode(payload) {
        Ok(n) => (0, n),
        Err(e) => (-e, 0),
    };
    header[abi::IN_OUT..abi::IN_OUT + abi::OUT_HEADER_LEN].fill(0);
    abi::put_out_header(header, abi::IN_OUT, h.unique, error, len);
    abi::put_u32(header, abi::ENT_PAYLOAD_SZ, len as u32);
    handled
}

#[cfg(test)]
mod tests {
    use super::*;

    fn affinity() -> Vec<usize> {
        // SAFETY: as in pin_to
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
            (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
        }
    }

    #[test]
    fn ring_threads_stay_on_the_cpus_the_daemon_was_given() {
        let cpus = affinity();
        if cpus.len() < 2 {
            eprintln!("skipped: needs two CPUs, this process may use {cpus:?}");
            return;
        }
        let (first, second) = (cpus[0], cpus[1]);
        std::thread::spawn(move || {
            // the daemon under `taskset -c FIRST`: a queue of another CPU is not pinned there
            pin_to(first);
            pin_to(second);
            assert_eq!(affinity(), vec![first]);
        })
        .join()
        .unwrap();
        std::thread::spawn(move || {
            // with both CPUs allowed, each queue's thread goes to its own
            pin_to(second);
            assert_eq!(affinity(), vec![second]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn ring_threads_sleep_fifo_only_when_every_cpu_is_busy_and_fifo_is_allowed() {
        use Policy::*;
        for busy in [false, true] {
            for allowed in [false, true] {
                let want_fifo = busy && allowed;
                assert_eq!(waiting_policy(Sched::Adaptive, busy, false, allowed), if want_fifo { Fifo } else { Idle });
                assert_eq!(waiting_policy(Sched::Lazy, busy, false, allowed), Idle);
                assert_eq!(waiting_policy(Sched::Normal, busy, false, allowed), Other);
                assert_eq!(waiting_policy(Sched::Fifo, busy, false, allowed), if allowed { Fifo } else { Idle });
            }
        }
    }

    #[test]
    fn a_ring_thread_starved_on_its_cpu_never_sleeps_sched_idle() {
        use Policy::*;
        for busy in [false, true] {
            assert_eq!(waiting_policy(Sched::Adaptive, busy, true, true), Fifo);
            assert_eq!(waiting_policy(Sched::Adaptive, busy, true, false), Other);
            // the experiment modes keep their classes
            assert_eq!(waiting_policy(Sched::Lazy, busy, true, true), Idle);
            assert_eq!(waiting_policy(Sched::Normal, busy, true, true), Other);
        }
    }

    #[test]
    fn possible_cpu_lists_give_the_queue_count() {
        assert_eq!(possible_cpus("0-1\n"), Some(2));
        assert_eq!(possible_cpus("0"), Some(1));
        assert_eq!(possible_cpus("0-3,5"), Some(6));
        assert_eq!(possible_cpus(""), None);
        assert_eq!(possible_cpus("x"), None);
    }

    #[test]
    fn register_sqe_carries_the_iovec_count_and_queue() {
        let e = Entry::new();
        let sqe = e.sqe(7, 1, 3);
        let raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(raw[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(u32::from_le_bytes(raw[4..8].try_into().unwrap()), 7, "fd");
        assert_eq!(u32::from_le_bytes(raw[8..12].try_into().unwrap()), abi::CMD_REGISTER, "cmd_op");
        assert_eq!(u64::from_le_bytes(raw[16..24].try_into().unwrap()), e.iov.as_ptr() as u64, "addr");
        assert_eq!(u32::from_le_bytes(raw[24..28].try_into().unwrap()), 2, "len");
        assert_eq!(u64::from_le_bytes(raw[32..40].try_into().unwrap()), 3, "user_data");
        // the 80-byte command area starts at byte 48: commit id 0, queue 1
        assert_eq!(u64::from_le_bytes(raw[56..64].try_into().unwrap()), 0);
        assert_eq!(u16::from_le_bytes(raw[64..66].try_into().unwrap()), 1);
    }
}
