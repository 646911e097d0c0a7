//! The CPU squeezefs gets: the cores its threads obtain when they demand CPU, and the CPU
//! the pipeline spends per byte outside the codec.
//!
//! ```text
//! Sources (behind `CpuSource`, so the meters and the controller stay pure and testable):
//!   `ProcStat` — the only I/O in this crate: /proc/stat (ticks per CPU: busy, idle) summed over
//!   the CPUs this process may run on (sched_getaffinity: `taskset -c 0` gives one core), and
//!   /proc/self/stat (our own user + system ticks).
//! Meters:
//!   `UsableCores` — the cores the pipeline's compression can count on (what the auto
//!     controller's model calls n, and the QoS plan's CPU). What matters is what our threads
//!     obtain from the scheduler when they demand CPU, not what is idle: on a shared machine
//!     the neighbours' load expands into whatever squeezefs leaves idle (builds, other
//!     benchmarks), so "cores not taken by others" reads a fraction of what a demanding
//!     compressor gets (0.4 of 2 cores where zstd:1 took about 1). Per interval between two
//!     samples (every METER_PERIOD in the pipeline):
//!       share  = codec CPU time ÷ codec wall time over the calls of the interval (the thread
//!                clocks around each call, `CallTime`): the fraction of a core a compressing
//!                thread obtained while it demanded one. Two figures: over the calls made
//!                while records waited behind them (saturated: every worker demanding, the
//!                figure to trust) and over all calls (optimistic: a lone worker waking up
//!                gets more than when all demand). Each interval with at least
//!                SHARE_MIN_WALL_NS of calls updates an average over SHARE_TAU_SECS.
//!       ours   = process CPU time ÷ wall time: what we obtain now, averaged over CPU_TAU_SECS;
//!                and the same over the saturated intervals only (at least SATURATED_SHARE
//!                of SATURATED_MIN_RECORDS or more records decided with a backlog): what the
//!                whole process obtains when it demands, writers compressing their own
//!                records and FUSE threads included (the workers' share alone misses those:
//!                with 12 runnable threads on 2 cores each thread gets a sixth of a core,
//!                and the more of ours demand, the more we get).
//!     usable = clamp( max(demand, ours), MIN_CORES, allowed CPUs ), where demand is, first
//!     that applies: max(workers × saturated share, ours while saturated), each if measured
//!     within SHARE_FRESH_SECS; workers × share of all calls if measured within
//!     SHARE_FRESH_SECS; else `CpuMeter` (idle + ours: before any codec call, or when nothing
//!     was compressed for a while). Never less than `ours`: whatever the estimate, what we
//!     already get is available. An optimistic figure corrects itself: the controller picks
//!     stronger levels, the workers saturate, and the saturated figures take over.
//!   `CpuMeter` — cores not taken by others: between two samples, others' busy ticks = all busy
//!     ticks − ours; available = allowed CPUs − others' busy share × allowed CPUs, floored at
//!     MIN_CORES (the scheduler always gives our runnable threads some share), averaged over
//!     CPU_TAU_SECS. A CPU hog on one of two cores gives 1; a writer process using half a core
//!     to feed us gives 1.5 (its CPU is not ours to spend on compression). `UsableCores`'
//!     fallback. Also the idle share of the allowed CPUs, every process counted, averaged
//!     over IDLE_TAU_SECS (`idle_share`): near 0 the machine's CPU bounds a write even while
//!     the compress workers wait (auto's rate check, auto/rate_check.rs).
//!   `OverheadMeter` — (process CPU − codec CPU) per input byte written: copies, checksums, the
//!     FUSE round trips, the device threads. The pipeline model needs it: every byte costs this
//!     much CPU even when stored raw, so `none` is CPU-bound on a fast device with a slow CPU.
//!     Attributes all of the process's non-codec CPU to written bytes (reads in the same period
//!     inflate it; the controller's queue feedback corrects what that misleads). Of it, the
//!     part that scales with the bytes stored rather than those written, the device writers'
//!     CPU inside their writes per byte they wrote (the kernel's copy and page handling:
//!     about a nanosecond per byte, as much as a fast codec), is averaged apart
//!     (`update_store`): a weaker level stores more and pays it on every extra byte.
//! ```

use crate::measure::ewma::{ByteEwma, TimeEwma};

/// Time constant of the available-cores average, seconds.
pub const CPU_TAU_SECS: f64 = 1.0;
/// Time constant of the averaged idle share of the allowed CPUs, seconds: shorter than the
/// cores' average, for the rate check asks at each record whether the CPU bounds the write
/// now (auto/rate_check.rs), and a test window lasts 0.1 s.
pub const IDLE_TAU_SECS: f64 = 0.3;
/// Fewest cores the meter reports.
pub const MIN_CORES: f64 = 0.25;
/// Time constant of the averaged share of a core a compressing thread obtains, seconds.
pub const SHARE_TAU_SECS: f64 = 0.5;
/// Fewest nanoseconds of codec calls (wall time) in an interval for its share to count.
pub const SHARE_MIN_WALL_NS: u64 = 2_000_000;
/// A share measured longer ago than this no longer says what a demanding thread obtains.
pub const SHARE_FRESH_SECS: f64 = 2.0;
/// An interval is saturated when at least this share of its records were decided with a
/// backlog…
pub const SATURATED_SHARE: f64 = 0.75;
/// …and it decided at least this many records.
pub const SATURATED_MIN_RECORDS: u64 = 4;
/// Bytes over which the pipeline overhead per byte is averaged.
pub const OVERHEAD_WINDOW_BYTES: u64 = 64 << 20;
/// Fewest input bytes between two overhead samples (smaller intervals are merged: the
/// process clock and the codec counters are read at slightly different moments).
pub const OVERHEAD_MIN_BYTES: u64 = 4 << 20;

/// Errors of reading the CPU figures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CpuError {
    #[error("cannot read {path}: {source}")]
    Read { path: &'static str, source: std::io::Error },
    #[error("cannot parse {path}: {detail}")]
    Parse { path: &'static str, detail: String },
}

/// CPU ticks over the CPUs this process may use, cumulative since boot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSample {
    /// all ticks (busy and idle) of the allowed CPUs
    pub total_ticks: u64,
    /// idle + iowait ticks of the allowed CPUs
    pub idle_ticks: u64,
    /// user + system ticks of this process
    pub self_ticks: u64,
    /// number of allowed CPUs
    pub cpus: u32,
}

/// Where CPU samples come from.
pub trait CpuSource {
    fn sample(&mut self) -> Result<CpuSample, CpuError>;
}

/// Busy and idle ticks summed over `cpus` (indices of `cpuN` lines) from /proc/stat text.
/// guest time is already inside user/nice and is not added again; steal counts as busy.
pub fn parse_proc_stat(text: &str, cpus: &[usize]) -> Result<(u64, u64), CpuError> {
    let bad = |detail: String| CpuError::Parse { path: "/proc/stat", detail };
    let (mut total, mut idle, mut found) = (0u64, 0u64, 0usize);
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let Some(name) = it.next() else { continue };
        let Some(n) = name.strip_prefix("cpu").filter(|n| !n.is_empty()) else { continue };
        let Ok(n) = n.parse::<usize>() else { continue };
        if !cpus.contains(&n) {
            continue;
        }
        let v: Vec<u64> =
            it.take(8).map(|f| f.parse::<u64>()).collect::<Result<_, _>>().map_err(|e| bad(format!("{name}: {e}")))?;
        if v.len() < 5 {
            return Err(bad(format!("{name}: {} fields, expected at least 5", v.len())));
        }
        total += v.iter().sum::<u64>();
        idle += v[3] + v[4];
        found += 1;
    }
    if found != cpus.len() {
        return Err(bad(format!("found {found} of the {} allowed CPUs", cpus.len())));
    }
    Ok((total, idle))
}

/// user + system ticks of a process from its /proc/PID/stat text (fields 14 and 15; the
/// command name in parentheses may hold spaces and parentheses, so fields count from the last
/// closing parenthesis).
pub fn parse_self_stat(text: &str) -> Result<u64, CpuError> {
    let bad = |detail: &str| CpuError::Parse { path: "/proc/self/stat", detail: detail.to_string() };
    let rest = &text[text.rfind(')').ok_or_else(|| bad("no command name"))? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| bad("short or non-numeric fields"));
    Ok(get(11)? + get(12)?)
}

/// Reads /proc/stat and /proc/self/stat over the CPUs of this process's affinity mask.
#[derive(Debug)]
pub struct ProcStat {
    cpus: Vec<usize>,
}

impl ProcStat {
    /// The allowed CPUs are read once (a later `taskset` on the daemon is not followed).
    pub fn new() -> Result<ProcStat, CpuError> {
        Ok(ProcStat { cpus: allowed_cpus()? })
    }

    /// Indices of the CPUs this process may run on.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }
}

impl CpuSource for ProcStat {
    fn sample(&mut self) -> Result<CpuSample, CpuError> {
        let stat =
            std::fs::read_to_string("/proc/stat").map_err(|source| CpuError::Read { path: "/proc/stat", source })?;
        let me = std::fs::read_to_string("/proc/self/stat")
            .map_err(|source| CpuError::Read { path: "/proc/self/stat", source })?;
        let (total_ticks, idle_ticks) = parse_proc_stat(&stat, &self.cpus)?;
        Ok(CpuSample { total_ticks, idle_ticks, self_ticks: parse_self_stat(&me)?, cpus: self.cpus.len() as u32 })
    }
}

fn allowed_cpus() -> Result<Vec<usize>, CpuError> {
    // SAFETY: `set` is a valid cpu_set_t for the call; CPU_ISSET reads it within its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(CpuError::Read { path: "sched_getaffinity", source: std::io::Error::last_os_error() });
        }
        Ok((0..libc::CPU_SETSIZE as usize).filter(|&i| libc::CPU_ISSET(i, &set)).collect())
    }
}

/// CPU time of the whole process in nanoseconds (`CLOCK_PROCESS_CPUTIME_ID`), 0 if unreadable.
pub fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Cores available to this process (see the module comment).
#[derive(Clone, Debug)]
pub struct CpuMeter {
    prev: Option<CpuSample>,
    avail: TimeEwma,
    idle: TimeEwma,
}

impl Default for CpuMeter {
    fn default() -> Self {
        CpuMeter { prev: None, avail: TimeEwma::new(CPU_TAU_SECS), idle: TimeEwma::new(IDLE_TAU_SECS) }
    }
}

impl CpuMeter {
    pub fn new() -> CpuMeter {
        CpuMeter::default()
    }

    /// Add a sample taken at `now_secs`; returns the averaged available cores once two
    /// samples with ticks between them were seen.
    pub fn update(&mut self, now_secs: f64, s: CpuSample) -> Option<f64> {
        let Some(p) = self.prev.replace(s) else { return self.avail.value() };
        let total = s.total_ticks.saturating_sub(p.total_ticks);
        if total == 0 || s.cpus == 0 || p.cpus != s.cpus {
            return self.avail.value();
        }
        let idle = s.idle_ticks.saturating_sub(p.idle_ticks).min(total);
        self.idle.update(now_secs, idle as f64 / total as f64);
        let busy = total - idle;
        let others = busy.saturating_sub(s.self_ticks.saturating_sub(p.self_ticks));
        let cpus = s.cpus as f64;
        let avail = (cpus - others as f64 / total as f64 * cpus).clamp(MIN_CORES.min(cpus), cpus);
        Some(self.avail.update(now_secs, avail))
    }

    pub fn available_cores(&self) -> Option<f64> {
        self.avail.value()
    }

    /// The averaged idle share of the allowed CPUs, every process counted, once measured.
    pub fn idle_share(&self) -> Option<f64> {
        self.idle.value()
    }
}

/// Cumulative CPU and wall time of codec calls (the pipeline's counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallTotals {
    pub cpu_ns: u64,
    pub wall_ns: u64,
}

impl CallTotals {
    /// CPU ÷ wall of the calls since `earlier`, if they span at least SHARE_MIN_WALL_NS.
    fn share_since(self, earlier: CallTotals) -> Option<f64> {
        let wall = self.wall_ns.saturating_sub(earlier.wall_ns);
        let cpu = self.cpu_ns.saturating_sub(earlier.cpu_ns);
        (wall >= SHARE_MIN_WALL_NS).then(|| (cpu as f64 / wall as f64).min(1.0))
    }
}

/// What the pipeline hands [`UsableCores`] at each sample: cumulative counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CoresSample {
    /// /proc/stat and /proc/self/stat, when readable (`CpuMeter`'s input)
    pub proc: Option<CpuSample>,
    /// CPU time of the whole process (`process_cpu_ns`)
    pub process_cpu_ns: u64,
    /// codec calls made while more records waited for compression
    pub saturated: CallTotals,
    /// every codec call
    pub all: CallTotals,
    /// records decided with a backlog, and all records decided
    pub saturated_records: u64,
    pub records: u64,
}

/// The cores the pipeline's compression can count on (see the module comment).
#[derive(Clone, Debug)]
pub struct UsableCores {
    workers: f64,
    cpus: f64,
    idle: CpuMeter,
    prev: Option<(f64, CoresSample)>,
    ours: TimeEwma,
    saturated: TimeEwma,
    /// when the saturated share was last updated
    saturated_at: f64,
    all: TimeEwma,
    all_at: f64,
    /// process CPU per second over saturated intervals
    ours_saturated: TimeEwma,
    ours_saturated_at: f64,
}

impl UsableCores {
    /// `workers`: the compress workers; `cpus`: the CPUs this process may use.
    pub fn new(workers: usize, cpus: f64) -> UsableCores {
        UsableCores {
            workers: workers.max(1) as f64,
            cpus: cpus.max(1.0),
            idle: CpuMeter::new(),
            prev: None,
            ours: TimeEwma::new(CPU_TAU_SECS),
            saturated: TimeEwma::new(SHARE_TAU_SECS),
            saturated_at: f64::NEG_INFINITY,
            all: TimeEwma::new(SHARE_TAU_SECS),
            all_at: f64::NEG_INFINITY,
            ours_saturated: TimeEwma::new(SHARE_TAU_SECS),
            ours_saturated_at: f64::NEG_INFINITY,
        }
    }

    /// Cores not taken by other processes (the `CpuMeter` fallback), once measured.
    pub fn idle_cores(&self) -> Option<f64> {
        self.idle.available_cores()
    }

    /// The idle share of the allowed CPUs, every process counted (`CpuMeter::idle_share`).
    pub fn idle_share(&self) -> Option<f64> {
        self.idle.idle_share()
    }

    /// Add the sample taken at `now_secs`; returns the usable cores once two samples were seen.
    pub fn update(&mut self, now_secs: f64, s: CoresSample) -> Option<f64> {
        let idle = s.proc.and_then(|p| self.idle.update(now_secs, p));
        let (t0, p) = self.prev.replace((now_secs, s))?;
        let dt = now_secs - t0;
        if dt > 0.0 {
            let ours = (s.process_cpu_ns.saturating_sub(p.process_cpu_ns) as f64 / 1e9 / dt).min(self.cpus);
            self.ours.update(now_secs, ours);
            let records = s.records.saturating_sub(p.records);
            let saturated = s.saturated_records.saturating_sub(p.saturated_records);
            if records >= SATURATED_MIN_RECORDS && saturated as f64 >= SATURATED_SHARE * records as f64 {
                self.ours_saturated.update(now_secs, ours);
                self.ours_saturated_at = now_secs;
            }
        }
        if let Some(x) = s.saturated.share_since(p.saturated) {
            self.saturated.update(now_secs, x);
            self.saturated_at = now_secs;
        }
        if let Some(x) = s.all.share_since(p.all) {
            self.all.update(now_secs, x);
            self.all_at = now_secs;
        }
        let fresh = |e: &TimeEwma, at: f64| e.value().filter(|_| now_secs - at <= SHARE_FRESH_SECS);
        let saturated = [
            fresh(&self.saturated, self.saturated_at).map(|x| self.workers * x),
            fresh(&self.ours_saturated, self.ours_saturated_at),
        ];
        let demand = saturated
            .into_iter()
            .flatten()
            .reduce(f64::max)
            .or_else(|| fresh(&self.all, self.all_at).map(|x| self.workers * x))
            .unwrap_or_else(|| idle.unwrap_or(self.cpus));
        let ours = self.ours.value().unwrap_or(0.0);
        Some(demand.max(ours).clamp(MIN_CORES.min(self.cpus), self.cpus))
    }
}

/// Nanoseconds per byte from two cumulative counters, averaged over OVERHEAD_WINDOW_BYTES;
/// intervals of fewer than OVERHEAD_MIN_BYTES are merged into the next.
#[derive(Clone, Debug)]
struct PerByte {
    prev: Option<(u64, u64)>,
    avg: ByteEwma,
}

impl PerByte {
    fn new() -> PerByte {
        PerByte { prev: None, avg: ByteEwma::new(OVERHEAD_WINDOW_BYTES) }
    }

    fn update(&mut self, ns: u64, bytes: u64) -> Option<f64> {
        let Some((ns0, bytes0)) = self.prev else {
            self.prev = Some((ns, bytes));
            return self.avg.value();
        };
        let b = bytes.saturating_sub(bytes0);
        if b < OVERHEAD_MIN_BYTES {
            return self.avg.value();
        }
        self.prev = Some((ns, bytes));
        self.avg.update(ns.saturating_sub(ns0) as f64 / b as f64, b)
    }
}

/// The pipeline's CPU per input byte outside the codec (see the module comment).
#[derive(Clone, Debug)]
pub struct OverheadMeter {
    total: PerByte,
    store: PerByte,
}

impl Default for OverheadMeter {
    fn default() -> Self {
        OverheadMeter { total: PerByte::new(), store: PerByte::new() }
    }
}

impl OverheadMeter {
    pub fn new() -> OverheadMeter {
        OverheadMeter::default()
    }

    /// Cumulative counters: the process's CPU time, the codec's CPU time (the workspace
    /// pool's `compress_cpu_ns`), input bytes written. Returns the averaged ns per byte.
    pub fn update(&mut self, process_cpu_ns: u64, codec_cpu_ns: u64, input_bytes: u64) -> Option<f64> {
        self.total.update(process_cpu_ns.saturating_sub(codec_cpu_ns), input_bytes)
    }

    pub fn ns_per_byte(&self) -> Option<f64> {
        self.total.avg.value()
    }

    /// Cumulative counters of the device writers: their CPU time inside writes, the bytes
    /// they wrote. Returns the averaged ns per byte written (the part of `ns_per_byte` that
    /// goes per stored byte).
    pub fn update_store(&mut self, write_cpu_ns: u64, written_bytes: u64) -> Option<f64> {
        self.store.update(write_cpu_ns, written_bytes)
    }

    pub fn store_ns_per_byte(&self) -> Option<f64> {
        self.store.avg.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0
cpu1 1335808 39891 522013 13385598 6193 0 2789 5 88 0
intr 199292 0
ctxt 12345
";

    #[test]
    fn proc_stat_sums_the_allowed_cpus() {
        let (t0, i0) = parse_proc_stat(STAT, &[0]).unwrap();
        assert_eq!(t0, 1393280 + 32966 + 572056 + 13343292 + 6130 + 17875);
        assert_eq!(i0, 13343292 + 6130);
        let (t, i) = parse_proc_stat(STAT, &[0, 1]).unwrap();
        assert_eq!(t, t0 + 1335808 + 39891 + 522013 + 13385598 + 6193 + 2789 + 5);
        assert_eq!(i, i0 + 13385598 + 6193);
        assert!(parse_proc_stat(STAT, &[2]).is_err(), "a CPU missing from the file");
        assert!(parse_proc_stat("cpu0 1 2 x 4 5\n", &[0]).is_err());
        assert!(parse_proc_stat("cpu0 1 2 3\n", &[0]).is_err());
    }

    #[test]
    fn self_stat_reads_utime_and_stime_after_the_command_name() {
        let text = "4242 (we ird) name)) S 1 2 3 4 5 6 7 8 9 10 111 222 13 14 15 16\n";
        assert_eq!(parse_self_stat(text).unwrap(), 333);
        assert!(parse_self_stat("4242 (x) S 1 2").is_err());
        assert!(parse_self_stat("no name").is_err());
    }

    fn sample(total: u64, idle: u64, me: u64, cpus: u32) -> CpuSample {
        CpuSample { total_ticks: total, idle_ticks: idle, self_ticks: me, cpus }
    }

    #[test]
    fn cores_not_taken_by_others() {
        let mut m = CpuMeter::new();
        assert_eq!(m.update(0.0, sample(0, 0, 0, 2)), None, "one sample is no interval");
        // 2 CPUs, 200 ticks: a hog busy 100, we busy 80, idle 20 → 1 core is ours to take
        assert_eq!(m.update(1.0, sample(200, 20, 80, 2)), Some(1.0));
        let mut m = CpuMeter::new();
        m.update(0.0, sample(0, 0, 0, 2));
        // idle machine apart from us: both cores
        assert_eq!(m.update(1.0, sample(200, 150, 50, 2)), Some(2.0));
        // a writer using a quarter of the ticks (half a core)
        let mut m = CpuMeter::new();
        m.update(0.0, sample(0, 0, 0, 2));
        assert_eq!(m.update(1.0, sample(200, 0, 150, 2)), Some(1.5));
        // others saturate everything: the floor
        let mut m = CpuMeter::new();
        m.update(0.0, sample(0, 0, 0, 1));
        assert_eq!(m.update(1.0, sample(100, 0, 0, 1)), Some(MIN_CORES));
        // no ticks in between, or a changed CPU count: no new figure
        assert_eq!(m.update(2.0, sample(100, 0, 0, 1)), Some(MIN_CORES));
        assert_eq!(m.update(3.0, sample(300, 200, 0, 2)), Some(MIN_CORES));
    }

    #[test]
    fn idle_share_counts_every_process() {
        let mut m = CpuMeter::new();
        assert_eq!(m.idle_share(), None);
        m.update(0.0, sample(0, 0, 0, 2));
        assert_eq!(m.idle_share(), None, "one sample is no interval");
        // 200 ticks, 10 idle: busy whoever takes them, ours (120) or others' (70)
        m.update(1.0, sample(200, 10, 120, 2));
        assert_eq!(m.idle_share(), Some(0.05));
        // then idle half the time: the average moves towards it
        m.update(2.0, sample(400, 110, 170, 2));
        let i = m.idle_share().unwrap();
        assert!(i > 0.05 && i < 0.5, "{i}");
    }

    #[test]
    fn this_machine_reads() {
        let mut src = ProcStat::new().unwrap();
        assert!(!src.cpus().is_empty());
        let a = src.sample().unwrap();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(60) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let b = src.sample().unwrap();
        assert_eq!(a.cpus as usize, src.cpus().len());
        assert!(b.total_ticks >= a.total_ticks && b.self_ticks >= a.self_ticks);
        let mut m = CpuMeter::new();
        m.update(0.0, a);
        if let Some(c) = m.update(0.06, b) {
            assert!((MIN_CORES..=a.cpus as f64).contains(&c), "{c}");
        }
        assert!(process_cpu_ns() > 0);
    }

    /// Drives a `UsableCores` with 100 ms samples: per interval, the ticks others take
    /// (cores, of 2), our process CPU (cores), and codec calls (wall ms, share) made with a
    /// backlog and without.
    struct Feed {
        m: UsableCores,
        t: f64,
        s: CoresSample,
    }

    impl Feed {
        fn new(workers: usize, cpus: u32) -> Feed {
            let proc = Some(sample(0, 0, 0, cpus));
            Feed { m: UsableCores::new(workers, cpus as f64), t: 0.0, s: CoresSample { proc, ..Default::default() } }
        }

        /// One 100 ms interval; returns the usable cores after it.
        fn step(&mut self, others: f64, ours: f64, saturated: (f64, f64), unsaturated: (f64, f64)) -> Option<f64> {
            let p = self.s.proc.unwrap();
            let cpus = p.cpus as f64;
            // 100 ticks per CPU per interval
            let total = 100 * p.cpus as u64;
            let busy = ((others + ours) / cpus * total as f64).round() as u64;
            self.s.proc = Some(sample(
                p.total_ticks + total,
                p.idle_ticks + total.saturating_sub(busy),
                p.self_ticks + (ours / cpus * total as f64).round() as u64,
                p.cpus,
            ));
            self.s.process_cpu_ns += (ours * 0.1e9) as u64;
            let add = |c: &mut CallTotals, (ms, share): (f64, f64)| {
                c.wall_ns += (ms * 1e6) as u64;
                c.cpu_ns += (ms * 1e6 * share) as u64;
            };
            add(&mut self.s.saturated, saturated);
            add(&mut self.s.all, saturated);
            add(&mut self.s.all, unsaturated);
            // a record per 0.5 ms of calls: the interval's saturation is its share of calls
            // made with a backlog
            let records = |ms: f64| (ms * 2.0).round() as u64;
            self.s.saturated_records += records(saturated.0);
            self.s.records += records(saturated.0) + records(unsaturated.0);
            self.t += 0.1;
            self.m.update(self.t, self.s)
        }

        fn steps(&mut self, n: usize, others: f64, ours: f64, sat: (f64, f64), unsat: (f64, f64)) -> f64 {
            (0..n).filter_map(|_| self.step(others, ours, sat, unsat)).last().expect("a figure")
        }
    }

    #[test]
    fn usable_cores_are_what_demanding_workers_obtain_not_what_is_idle() {
        // a loaded machine: others take 1.6 of 2 cores while we idle (idle + ours: 0.4), but
        // our 2 workers, saturated, each obtain 45% of a core from the scheduler: 0.9 cores
        let mut f = Feed::new(2, 2);
        let c = f.steps(30, 1.2, 0.8, (150.0, 0.45), (0.0, 0.0));
        assert!((c - 0.9).abs() < 0.01, "{c}");
        assert!((f.m.idle_cores().unwrap() - 0.8).abs() < 0.01, "the /proc/stat figure stays available");
        // the same machine before any codec call: only /proc/stat to go by
        let mut f = Feed::new(2, 2);
        let c = f.steps(30, 1.6, 0.0, (0.0, 0.0), (0.0, 0.0));
        assert!((c - 0.4).abs() < 0.01, "{c}");
        // a CPU hog on one of two cores, 2 workers: 3 runnable threads, 2/3 of a core each
        let mut f = Feed::new(2, 2);
        let c = f.steps(30, 0.67, 1.33, (180.0, 2.0 / 3.0), (0.0, 0.0));
        assert!((c - 4.0 / 3.0).abs() < 0.01, "{c}");
        // an idle machine: both cores
        let mut f = Feed::new(2, 2);
        assert!((f.steps(30, 0.0, 2.0, (190.0, 1.0), (0.0, 0.0)) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn usable_cores_are_never_fewer_than_what_we_already_get() {
        // one allowed CPU, one worker: the writer thread compresses too (caller-runs) and the
        // FUSE threads run, so the worker's share is 0.5, yet the process gets the whole core
        let mut f = Feed::new(1, 1);
        let c = f.steps(30, 0.0, 1.0, (90.0, 0.5), (0.0, 0.0));
        assert!((c - 1.0).abs() < 0.01, "{c}");
        // the share says 0.9 of 2 cores but the process already gets 1.3
        let mut f = Feed::new(2, 2);
        let c = f.steps(30, 0.7, 1.3, (150.0, 0.45), (0.0, 0.0));
        assert!((c - 1.3).abs() < 0.01, "{c}");
        // more workers than CPUs: never more than the CPUs
        let mut f = Feed::new(8, 2);
        assert_eq!(f.steps(30, 0.0, 2.0, (500.0, 0.9), (0.0, 0.0)), 2.0);
        // everything taken by others and nothing obtained: the floor
        let mut f = Feed::new(1, 1);
        assert_eq!(f.steps(30, 1.0, 0.0, (0.0, 0.0), (0.0, 0.0)), MIN_CORES);
    }

    #[test]
    fn usable_cores_count_what_the_whole_process_obtains_while_saturated() {
        // 12 runnable threads on 2 cores: each of our 2 workers gets a sixth of a core, the
        // writer compressing its own records and the FUSE threads get theirs too — the
        // process obtains half a core while saturated, though only 0.25 on average because
        // half the intervals are not saturated
        let mut f = Feed::new(2, 2);
        let mut c = None;
        for _ in 0..15 {
            c = f.step(1.5, 0.5, (180.0, 1.0 / 6.0), (0.0, 0.0)).or(c);
            c = f.step(1.8, 0.0, (0.0, 0.0), (1.0, 1.0)).or(c);
        }
        let c = c.expect("a figure");
        assert!((c - 0.5).abs() < 0.02, "{c}");
    }

    #[test]
    fn usable_cores_fall_back_from_saturated_to_any_calls_to_proc_stat() {
        let mut f = Feed::new(2, 2);
        f.steps(30, 1.2, 0.8, (150.0, 0.45), (0.0, 0.0));
        // the pipeline stops being saturated (a weaker level): lone calls obtain 90% of a
        // core; the saturated figure counts while fresh, then the optimistic one takes over
        let c = f.steps(10, 1.6, 0.2, (0.0, 0.0), (20.0, 0.9));
        assert!((c - 0.9).abs() < 0.01, "still the saturated figure: {c}");
        let c = f.steps(20, 1.6, 0.2, (0.0, 0.0), (20.0, 0.9));
        assert!((c - 1.8).abs() < 0.02, "the lone calls' share once the saturated one is stale: {c}");
        // nothing compressed for longer than SHARE_FRESH_SECS: /proc/stat
        let c = f.steps(30, 1.6, 0.0, (0.0, 0.0), (0.0, 0.0));
        assert!((c - 0.4).abs() < 0.01, "{c}");
        // intervals with too few calls to tell do not count
        let mut f = Feed::new(2, 2);
        let c = f.steps(30, 1.6, 0.0, (1.0, 0.1), (0.5, 0.1));
        assert!((c - 0.4).abs() < 0.01, "{c}");
        // no /proc/stat at all and no calls yet: the allowed CPUs
        let mut m = UsableCores::new(2, 2.0);
        assert_eq!(m.update(0.0, CoresSample::default()), None, "one sample is no interval");
        assert_eq!(m.update(0.1, CoresSample::default()), Some(2.0));
    }

    #[test]
    fn overhead_is_process_cpu_beyond_the_codec_per_byte() {
        let mut m = OverheadMeter::new();
        assert_eq!(m.update(1_000, 500, 0), None);
        // too few bytes yet: merged into the next interval
        assert_eq!(m.update(2_000_000, 1_000_000, 1 << 20), None);
        // 8 MiB written; 20 ms of process CPU, 12 ms of it in the codec → 8 ms / 8 MiB
        let mib8 = 8u64 << 20;
        let got = m.update(1_000 + 20_000_000, 500 + 12_000_000, mib8).unwrap();
        assert!((got - 8e6 / mib8 as f64).abs() < 1e-9, "{got}");
        assert_eq!(m.ns_per_byte(), Some(got));
    }

    #[test]
    fn store_overhead_is_the_writers_cpu_per_byte_written() {
        let mut m = OverheadMeter::new();
        assert_eq!(m.update_store(7, 100), None);
        assert_eq!(m.update_store(1_000_000, 1 << 20), None, "merged into the next interval");
        let mib4 = 4u64 << 20;
        let got = m.update_store(7 + 4_000_000, 100 + mib4).unwrap();
        assert!((got - 4e6 / mib4 as f64).abs() < 1e-9, "{got}");
        // the next interval writes twice as many bytes for the same CPU: the average moves
        // towards it, weighted by bytes
        let next = m.update_store(7 + 8_000_000, 100 + 3 * mib4).unwrap();
        assert!(next < got && next > 4e6 / (2 * mib4) as f64, "{next}");
        assert_eq!(m.store_ns_per_byte(), Some(next));
        assert_eq!(m.ns_per_byte(), None, "the two averages are apart");
    }
}
