//! Scheduling classes of the request-serving threads of both transports, and whether every
//! CPU is busy.
//!
//! A synchronous FUSE request is a round trip: the caller sleeps, a daemon thread is woken,
//! answers, and wakes the caller. When every CPU is busy with other programs, a woken
//! SCHED_OTHER thread waits behind the runnable tasks of its CPU before it runs, so the
//! daemon's half of each round trip grows by a scheduling wait that has nothing to do with
//! the request. A SCHED_FIFO thread runs as soon as it is woken. Measured on a 2-vCPU VM with
//! other jobs at load 15 (docs/benchmarks.md, "FUSE floor"), /dev/fuse threads as
//! SCHED_OTHER against SCHED_FIFO: one bare round trip 26–107 µs against 13–20 µs, a tar
//! extract of 10 k files 7.7–15.4 s against 3.0–3.6 s.
//!
//! The io_uring ring threads have their own modes (uring/ module comment: they also sleep
//! as SCHED_IDLE on a quiet machine, for wake-up placement on the caller's CPU); they share
//! [`Policy`], [`contention`] and [`is_heavy`] with the /dev/fuse threads here.
//!
//! /dev/fuse threads ([`DevSched`]), states per thread:
//! * OTHER: SCHED_OTHER. The initial state; the state while some CPU had idle time in the
//!   last sampling period; and the state while the thread handles a request with real work
//!   ([`is_heavy`]), so that a large read or write never holds a CPU against everyone else.
//! * FIFO: SCHED_FIFO priority 1 while the thread waits in read(2) and handles short
//!   requests, while no CPU had idle time ([`contention::busy`]).
//!
//! Transitions, made by the thread itself: before each read(2), FIFO when every CPU is busy
//! (and the kernel allows SCHED_FIFO: it needs CAP_SYS_NICE; once refused, the thread stays
//! OTHER), else OTHER; when a heavy request arrives, OTHER until the next read.
//! A class is set only when it changes (one sched_setscheduler, ~3 µs here).
//!
//! Tunables: the [`contention`] thresholds (`BUSY_BELOW` 10% idle, `QUIET_ABOVE` 25%,
//! `PERIOD` 100 ms), `HEAVY_WRITE` (32 KiB). `SQUEEZEFS_FUSE_SCHED` overrides the mode of
//! the /dev/fuse threads for experiments: `adaptive` (default), `normal` (always OTHER),
//! `fifo` (FIFO whenever allowed).
use crate::abi::op;

/// A request-serving thread's scheduling class.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Policy {
    Other,
    Idle,
    Fifo,
}

/// Switch the calling thread to `p`; false when the kernel refused (SCHED_FIFO needs
/// CAP_SYS_NICE).
pub(crate) fn set_policy(p: Policy) -> bool {
    let (policy, priority) = match p {
        Policy::Other => (libc::SCHED_OTHER, 0),
        Policy::Idle => (libc::SCHED_IDLE, 0),
        Policy::Fifo => (libc::SCHED_FIFO, 1),
    };
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: plain syscall on the calling thread with a valid parameter block
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// The calling thread's class, as the kernel reports it (None: a class we never set).
#[cfg(test)]
pub(crate) fn current_policy() -> Option<Policy> {
    // SAFETY: plain syscall on the calling thread
    match unsafe { libc::sched_getscheduler(0) } {
        libc::SCHED_OTHER => Some(Policy::Other),
        libc::SCHED_IDLE => Some(Policy::Idle),
        libc::SCHED_FIFO => Some(Policy::Fifo),
        _ => None,
    }
}

/// A thread's class as it last set it, so that it switches only on a change.
pub(crate) struct ThreadClass {
    policy: Policy,
    /// the kernel refused SCHED_FIFO once (no CAP_SYS_NICE)
    fifo_refused: bool,
    /// who the thread is, for the log
    who: String,
}

impl ThreadClass {
    /// A thread that starts as SCHED_OTHER (what threads inherit from the daemon's main
    /// thread).
    pub fn new(who: String) -> ThreadClass {
        ThreadClass { policy: Policy::Other, fifo_refused: false, who }
    }

    pub fn fifo_allowed(&self) -> bool {
        !self.fifo_refused
    }

    pub fn set(&mut self, p: Policy) {
        if self.policy == p {
            return;
        }
        if set_policy(p) {
            self.policy = p;
        } else if p == Policy::Fifo {
            log::info!(
                "{}: SCHED_FIFO refused ({}); staying in its quiet-machine class",
                self.who,
                std::io::Error::last_os_error()
            );
            self.fifo_refused = true;
        }
    }
}

/// Writes from this size on carry real work (the copy of their data).
const HEAVY_WRITE: u32 = 32 * 1024;

/// Requests that carry real work (decompression, copies of large payloads, listings): a
/// request thread handles them as SCHED_OTHER. `payload` is the request's payload length.
pub(crate) fn is_heavy(opcode: u32, payload: u32) -> bool {
    match opcode {
        op::READ | op::READDIR | op::READDIRPLUS | op::FALLOCATE => true,
        op::WRITE => payload >= HEAVY_WRITE,
        _ => false,
    }
}

/// How the /dev/fuse threads present themselves to the scheduler (module comment).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DevSched {
    /// FIFO while every CPU is busy, OTHER otherwise
    Adaptive,
    /// OTHER throughout
    Normal,
    /// FIFO whenever the kernel allows it
    Fifo,
}

impl DevSched {
    /// The mode of this process: `SQUEEZEFS_FUSE_SCHED`, else `Adaptive`.
    pub fn from_env() -> DevSched {
        match std::env::var("SQUEEZEFS_FUSE_SCHED").as_deref() {
            Ok("normal") => DevSched::Normal,
            Ok("fifo") => DevSched::Fifo,
            Ok("adaptive") | Err(_) => DevSched::Adaptive,
            Ok(other) => {
                log::info!("SQUEEZEFS_FUSE_SCHED={other} is not a mode (adaptive, normal, fifo); using adaptive");
                DevSched::Adaptive
            }
        }
    }

    /// The class a /dev/fuse thread waits for its next request in.
    pub fn waiting_policy(self, busy: bool, fifo_allowed: bool) -> Policy {
        match self {
            DevSched::Fifo if fifo_allowed => Policy::Fifo,
            DevSched::Adaptive if busy && fifo_allowed => Policy::Fifo,
            _ => Policy::Other,
        }
    }
}

/// Whether every CPU is busy: the share of idle time of all CPUs over the last `PERIOD`,
/// from /proc/stat, read by one sampler thread per process (states QUIET / BUSY, with
/// hysteresis: QUIET → BUSY below `BUSY_BELOW` idle, BUSY → QUIET above `QUIET_ABOVE`).
pub(crate) mod contention {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Once;
    use std::time::Duration;

    static BUSY: AtomicBool = AtomicBool::new(false);
    static START: Once = Once::new();
    /// QUIET → BUSY below this share of idle time
    const BUSY_BELOW: f64 = 0.10;
    /// BUSY → QUIET above this share
    const QUIET_ABOVE: f64 = 0.25;
    pub const PERIOD: Duration = Duration::from_millis(100);

    pub fn busy() -> bool {
        BUSY.load(Ordering::Relaxed)
    }

    /// The next state from the current one and the idle share of the last period.
    pub fn next_busy(busy: bool, idle_share: f64) -> bool {
        if busy {
            idle_share <= QUIET_ABOVE
        } else {
            idle_share < BUSY_BELOW
        }
    }

    /// Start the sampler (once per process; it runs for the life of the process).
    pub fn start() {
        START.call_once(|| {
            let sampler = std::thread::Builder::new().name("sqz-cpu-busy".into()).spawn(|| {
                let read = || std::fs::read_to_string("/proc/stat").ok().and_then(|t| parse(&t));
                let mut last = read();
                loop {
                    std::thread::sleep(PERIOD);
                    let now = read();
                    if let (Some((i0, t0)), Some((i1, t1))) = (last, now) {
                        if t1 > t0 {
                            let share = i1.saturating_sub(i0) as f64 / (t1 - t0) as f64;
                            BUSY.store(next_busy(busy(), share), Ordering::Relaxed);
                        }
                    }
                    last = now;
                }
            });
            if let Err(e) = sampler {
                log::info!("no CPU sampler ({e}): request threads stay in their quiet-machine class");
            }
        });
    }

    /// (idle + iowait, total) jiffies of all CPUs from /proc/stat's `cpu` line (total: user
    /// to steal, the first eight fields).
    pub fn parse(stat: &str) -> Option<(u64, u64)> {
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let v: Vec<u64> = line.split_whitespace().map_while(|x| x.parse().ok()).collect();
        let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
        Some((idle, v.iter().take(8).sum()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devfuse_threads_wait_fifo_only_when_every_cpu_is_busy_and_fifo_is_allowed() {
        use Policy::*;
        for busy in [false, true] {
            for allowed in [false, true] {
                let fifo = |yes: bool| if yes { Fifo } else { Other };
                assert_eq!(DevSched::Adaptive.waiting_policy(busy, allowed), fifo(busy && allowed));
                assert_eq!(DevSched::Normal.waiting_policy(busy, allowed), Other);
                assert_eq!(DevSched::Fifo.waiting_policy(busy, allowed), fifo(allowed));
            }
        }
    }

    #[test]
    fn a_thread_class_switches_the_thread_and_remembers_a_refused_fifo() {
        // on a thread of its own: the test harness's threads keep their class
        std::thread::spawn(|| {
            let mut c = ThreadClass::new("test thread".into());
            assert_eq!(current_policy(), Some(Policy::Other));
            c.set(Policy::Fifo);
            // SAFETY: plain syscall
            if unsafe { libc::geteuid() } == 0 {
                assert!(c.fifo_allowed());
                assert_eq!(current_policy(), Some(Policy::Fifo));
            } else {
                assert!(!c.fifo_allowed(), "an unprivileged thread is refused SCHED_FIFO");
                assert_eq!(current_policy(), Some(Policy::Other));
            }
            c.set(Policy::Other);
            assert_eq!(current_policy(), Some(Policy::Other));
            c.set(Policy::Idle);
            assert_eq!(current_policy(), Some(Policy::Idle));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn heavy_requests_are_reads_listings_and_large_writes() {
        assert!(is_heavy(op::READ, 0) && is_heavy(op::READDIRPLUS, 0) && is_heavy(op::FALLOCATE, 0));
        assert!(!is_heavy(op::WRITE, HEAVY_WRITE - 1));
        assert!(is_heavy(op::WRITE, HEAVY_WRITE));
        for short in [op::LOOKUP, op::CREATE, op::SETATTR, op::GETXATTR, op::GETATTR] {
            assert!(!is_heavy(short, 1 << 20));
        }
    }

    #[test]
    fn contention_switches_with_hysteresis() {
        use contention::next_busy;
        assert!(!next_busy(false, 0.5));
        assert!(!next_busy(false, 0.15), "between the thresholds: stays quiet");
        assert!(next_busy(false, 0.05));
        assert!(next_busy(true, 0.15), "between the thresholds: stays busy");
        assert!(next_busy(true, 0.0));
        assert!(!next_busy(true, 0.30));
    }

    #[test]
    fn proc_stat_gives_idle_and_total_jiffies() {
        let text = "cpu  100 5 50 800 20 1 2 3 0 0\ncpu0 50 2 25 400 10 0 1 1 0 0\n";
        assert_eq!(contention::parse(text), Some((820, 981)));
        assert_eq!(contention::parse("intr 1 2\n"), None);
        assert_eq!(contention::parse(""), None);
    }
}
