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
        op::READ | op::READDIR | op::READDIRPLUS | op::FALLOCATE | op::COPY_FILE_RANGE => true,
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
///
/// The same sampler watches the ring threads for starvation (`watch`). A ring thread is
/// pinned to its CPU and sleeps as SCHED_IDLE while the machine is QUIET; when a program
/// holds that one CPU busy (a CPU hog on core 0) while the other stays idle, the machine
/// reads QUIET, and a woken SCHED_IDLE ring thread waits behind the hog for seconds: every
/// request from that CPU stalls, the pipeline behind it drains, and the idle share grows.
/// States per watched thread:
/// * FREE: its class is the ring's own choice (QUIET: SCHED_IDLE while it sleeps).
/// * STARVED: within one period it waited at least `STARVED_DELAY` to run (schedstat's run
///   delay, which grows only when the wait ends), or it was runnable at both ends of the
///   period and ran less than `STARVED_RAN` (a wait that has not ended): the sampler moves
///   it to SCHED_FIFO priority 1 (SCHED_OTHER where the kernel refuses FIFO) at once, from
///   outside, since a thread that cannot run cannot change its own class; it then sleeps
///   in that class. STARVED → FREE when its CPU had more than `QUIET_ABOVE` idle time over
///   a period.
pub(crate) mod contention {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, Once};
    use std::time::Duration;

    static BUSY: AtomicBool = AtomicBool::new(false);
    static START: Once = Once::new();
    static WATCHED: Mutex<Vec<Watched>> = Mutex::new(Vec::new());
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    /// QUIET → BUSY below this share of idle time
    const BUSY_BELOW: f64 = 0.10;
    /// BUSY → QUIET above this share
    const QUIET_ABOVE: f64 = 0.25;
    pub const PERIOD: Duration = Duration::from_millis(100);
    /// A watched thread that waited this long to run within one period is STARVED: a fifth
    /// of the period, far above the microseconds a woken thread waits on a CPU it may use.
    pub const STARVED_DELAY: Duration = Duration::from_millis(20);
    /// A watched thread runnable at both ends of a period that ran less than this in it
    /// waited most of the period (a thread at its fair share beside one hog runs half).
    pub const STARVED_RAN: Duration = Duration::from_millis(5);

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

    /// What a watched thread did over one period.
    #[derive(Clone, Copy, Debug)]
    pub struct Period {
        /// run delay that ended in the period (schedstat)
        pub waited: Duration,
        /// CPU time it ran (schedstat)
        pub ran: Duration,
        /// runnable (running or waiting to) at both ends of the period
        pub runnable_throughout: bool,
    }

    /// The next STARVED state of a watched thread from the current one, the last period and
    /// its CPU's idle share then (None: not known).
    pub fn next_starved(starved: bool, p: Period, cpu_idle_share: Option<f64>) -> bool {
        if starved {
            cpu_idle_share.is_none_or(|s| s <= QUIET_ABOVE)
        } else {
            p.waited >= STARVED_DELAY || (p.runnable_throughout && p.ran < STARVED_RAN)
        }
    }

    struct Watched {
        id: u64,
        tid: libc::pid_t,
        cpu: usize,
        /// at the last sample: (ran ns, waited ns, runnable)
        last: Option<(u64, u64, bool)>,
        starved: Arc<AtomicBool>,
    }

    /// The calling thread, watched for starvation on `cpu` while this lives.
    pub struct Watch {
        id: u64,
        starved: Arc<AtomicBool>,
    }

    impl Watch {
        /// STARVED: the thread is to sleep in a class that preempts (module comment).
        pub fn starved(&self) -> bool {
            self.starved.load(Ordering::Relaxed)
        }
    }

    impl Drop for Watch {
        fn drop(&mut self) {
            if let Ok(mut w) = WATCHED.lock() {
                w.retain(|x| x.id != self.id);
            }
        }
    }

    /// Watch the calling thread, pinned to `cpu` (module comment); starts the sampler.
    pub fn watch(cpu: usize) -> Watch {
        // SAFETY: plain syscall without arguments
        let tid = unsafe { libc::gettid() };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let starved = Arc::new(AtomicBool::new(false));
        if let Ok(mut w) = WATCHED.lock() {
            w.push(Watched { id, tid, cpu, last: None, starved: starved.clone() });
        }
        start();
        Watch { id, starved }
    }

    /// Thread `tid` of this process: (ns it ran, ns it waited on a run queue: schedstat's
    /// first two fields, whether it is runnable: state R in its stat); None where the
    /// kernel does not keep them.
    fn sample(tid: libc::pid_t) -> Option<(u64, u64, bool)> {
        let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
        let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
        let (ran, waited) = (f.next()??, f.next()??);
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
        Some((ran, waited, state == "R"))
    }

    /// Move thread `tid` to SCHED_FIFO priority 1, or SCHED_OTHER where FIFO is refused.
    fn promote(tid: libc::pid_t) {
        let fifo = libc::sched_param { sched_priority: 1 };
        let other = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscalls on a thread of this process with valid parameter blocks
        unsafe {
            if libc::sched_setscheduler(tid, libc::SCHED_FIFO, &fifo) != 0 {
                libc::sched_setscheduler(tid, libc::SCHED_OTHER, &other);
            }
        }
    }

    /// One period's look at the watched threads, with each CPU's idle share.
    fn check_watched(cpu_idle: &[Option<f64>]) {
        let Ok(mut watched) = WATCHED.lock() else { return };
        for w in watched.iter_mut() {
            let Some(now @ (ran, waited, runnable)) = sample(w.tid) else { continue };
            let Some((ran0, waited0, runnable0)) = w.last.replace(now) else { continue };
            let p = Period {
                waited: Duration::from_nanos(waited.saturating_sub(waited0)),
                ran: Duration::from_nanos(ran.saturating_sub(ran0)),
                runnable_throughout: runnable0 && runnable,
            };
            let was = w.starved.load(Ordering::Relaxed);
            let now = next_starved(was, p, cpu_idle.get(w.cpu).copied().flatten());
            // the flag first: the promoted thread may preempt this one at once
            w.starved.store(now, Ordering::Relaxed);
            if now && !was {
                promote(w.tid);
                log::debug!("ring thread of CPU {} starved ({p:?}): out of SCHED_IDLE", w.cpu);
            }
        }
    }

    /// Start the sampler (once per process; it runs for the life of the process).
    pub fn start() {
        START.call_once(|| {
            let sampler = std::thread::Builder::new().name("sqz-cpu-busy".into()).spawn(|| {
                let read = || std::fs::read_to_string("/proc/stat").ok();
                let mut last = read();
                loop {
                    std::thread::sleep(PERIOD);
                    let now = read();
                    if let (Some(a), Some(b)) = (&last, &now) {
                        if let (Some((i0, t0)), Some((i1, t1))) = (parse(a), parse(b)) {
                            if t1 > t0 {
                                let share = i1.saturating_sub(i0) as f64 / (t1 - t0) as f64;
                                BUSY.store(next_busy(busy(), share), Ordering::Relaxed);
                            }
                        }
                        check_watched(&idle_shares(&parse_cpus(a), &parse_cpus(b)));
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
        fields(line)
    }

    fn fields(line: &str) -> Option<(u64, u64)> {
        let v: Vec<u64> = line.split_whitespace().map_while(|x| x.parse().ok()).collect();
        let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
        Some((idle, v.iter().take(8).sum()))
    }

    /// The same per CPU, indexed by CPU number (None for a CPU without a line: offline).
    pub fn parse_cpus(stat: &str) -> Vec<Option<(u64, u64)>> {
        let mut out: Vec<Option<(u64, u64)>> = Vec::new();
        for line in stat.lines() {
            let Some(rest) = line.strip_prefix("cpu") else { continue };
            let Some((n, rest)) = rest.split_once(' ') else { continue };
            let Ok(n) = n.parse::<usize>() else { continue };
            if n >= 4096 {
                continue;
            }
            if out.len() <= n {
                out.resize(n + 1, None);
            }
            out[n] = fields(rest);
        }
        out
    }

    /// Each CPU's idle share between two `parse_cpus` samples (None: not in both, or no
    /// ticks in between).
    pub fn idle_shares(a: &[Option<(u64, u64)>], b: &[Option<(u64, u64)>]) -> Vec<Option<f64>> {
        (0..a.len().max(b.len()))
            .map(|i| match (a.get(i).copied().flatten(), b.get(i).copied().flatten()) {
                (Some((i0, t0)), Some((i1, t1))) if t1 > t0 => Some(i1.saturating_sub(i0) as f64 / (t1 - t0) as f64),
                _ => None,
            })
            .collect()
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
    fn a_ring_thread_starved_behind_a_hog_on_its_cpu_stays_out_of_sched_idle_until_the_cpu_idles() {
        use contention::{next_starved, Period, STARVED_DELAY, STARVED_RAN};
        use std::time::Duration;
        let ms = Duration::from_millis;
        let p = |waited, ran, runnable_throughout| Period { waited, ran, runnable_throughout };
        assert!(!next_starved(false, p(ms(1), ms(1), false), Some(0.0)), "a short wait on a busy CPU is no starvation");
        assert!(next_starved(false, p(STARVED_DELAY, ms(1), false), Some(0.6)));
        assert!(next_starved(false, p(ms(1900), ms(0), false), None), "a long wait that ended");
        // a wait that has not ended shows in no run delay: runnable throughout, barely ran
        assert!(next_starved(false, p(ms(0), ms(0), true), Some(0.0)));
        assert!(!next_starved(false, p(ms(0), STARVED_RAN, true), Some(0.0)), "ran its share beside a hog");
        assert!(!next_starved(false, p(ms(0), ms(0), false), Some(0.0)), "asleep");
        // held while its CPU stays busy, whatever it waits now (as FIFO it waits little)
        let calm = p(ms(0), ms(1), false);
        assert!(next_starved(true, calm, Some(0.0)));
        assert!(next_starved(true, calm, Some(0.25)));
        assert!(next_starved(true, calm, None));
        assert!(!next_starved(true, calm, Some(0.30)), "the CPU idles: back to the quiet class");
    }

    /// Thread CPU time of the caller, nanoseconds.
    fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid, writable timespec
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn pin_to_cpu0() {
        // SAFETY: cpu_set_t is plain data; the call reads exactly its size
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
        }
    }

    /// A ring thread pinned to CPU 0 slept as SCHED_IDLE while a hog held CPU 0 and CPU 1
    /// idled (a quiet machine by the global share): woken, it waited behind the hog for
    /// 2–13 s, and every request from CPU 0 with it. Here the hog runs at nice -20, beside
    /// which a SCHED_IDLE thread gets a 30,000th of the CPU: 20 ms of work would take ten
    /// minutes. Watched, the thread is moved out of SCHED_IDLE by the sampler and finishes.
    #[test]
    fn a_watched_thread_starved_behind_a_hog_on_its_cpu_gets_to_run() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        use std::time::{Duration, Instant};
        // SAFETY: plain syscall
        if unsafe { libc::geteuid() } != 0 || std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            eprintln!("skipping: needs root (nice -20, SCHED_FIFO) and a second CPU for the sampler");
            return;
        }
        if !std::path::Path::new("/proc/self/schedstat").exists() {
            eprintln!("skipping: this kernel keeps no schedstat");
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let hog = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin_to_cpu0();
                // SAFETY: plain syscalls on the calling thread
                assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as u32, -20) }, 0);
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            pin_to_cpu0();
            // watched before it sleeps as SCHED_IDLE, as a ring thread is
            let w = contention::watch(0);
            assert!(set_policy(Policy::Idle));
            let (t, c0) = (Instant::now(), thread_cpu_ns());
            while thread_cpu_ns() - c0 < 20_000_000 {
                std::hint::black_box(());
            }
            let promoted = current_policy() != Some(Policy::Idle);
            let _ = tx.send((t.elapsed(), w.starved(), promoted));
        });
        let got = rx.recv_timeout(Duration::from_secs(30));
        stop.store(true, Ordering::Relaxed);
        hog.join().unwrap();
        let (took, starved, promoted) =
            got.expect("the watched thread did not get 20 ms of CPU in 30 s beside the hog");
        assert!(starved && promoted, "finished in {took:?} but starved {starved}, promoted {promoted}");
    }

    #[test]
    fn per_cpu_idle_shares_come_from_the_cpu_lines() {
        use contention::{idle_shares, parse_cpus};
        let a = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 10 0 10 30 0 0 0 0\ncpu1 0 0 0 50 0 0 0 0\nintr 1\n";
        let b = "cpu  110 0 10 130 0 0 0 0 0 0\ncpu0 110 0 10 30 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0\nintr 1\n";
        let (pa, pb) = (parse_cpus(a), parse_cpus(b));
        assert_eq!(pa, vec![Some((30, 50)), Some((50, 50))]);
        // CPU 0 ran a hog for 100 ticks; CPU 1 idled through its 50
        assert_eq!(idle_shares(&pa, &pb), vec![Some(0.0), Some(1.0)]);
        // a CPU gone offline in between, and one without ticks, have no share
        let c = "cpu0 110 0 10 30 0 0 0 0\n";
        assert_eq!(idle_shares(&pb, &parse_cpus(c)), vec![None, None]);
        assert!(parse_cpus("cpuX 1 2\nnothing\n").is_empty());
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
