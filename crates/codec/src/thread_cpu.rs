//! CPU time of the calling thread, for charging compression work by CPU rather than by wall
//! clock (docs/design.md §9: a controller must see what compression costs even when other work
//! shares the cores; wall time would also count the time the thread was not running).

/// Nanoseconds of CPU the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`); 0 if the clock
/// cannot be read, so a difference of two readings is never negative garbage.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

thread_local! {
    /// This thread's /proc/thread-self/schedstat, opened on first use (None: the kernel
    /// keeps no schedstat, or /proc is not mounted).
    static SCHEDSTAT: Option<std::fs::File> = std::fs::File::open("/proc/thread-self/schedstat").ok();
}

/// Nanoseconds the calling thread has spent runnable but waiting for a CPU (schedstat's
/// run delay, its second field); None where the kernel does not keep it. What separates
/// a thread starved of CPU from one blocked on a device: both are off the CPU, only the
/// first is on a run queue.
pub fn thread_run_delay_ns() -> Option<u64> {
    use std::os::unix::fs::FileExt;
    SCHEDSTAT.with(|f| {
        let f = f.as_ref()?;
        let mut buf = [0u8; 96];
        // seq_file regenerates the text on a read from offset 0
        let n = f.read_at(&mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..n]).ok()?.split_whitespace().nth(1)?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until the thread clock shows 20 ms of CPU (a loaded machine may give the thread
    /// only a fraction of the wall time, so the work is bounded by CPU, the wait by 10 s of
    /// wall time), then sleeps: the sleep must not count.
    #[test]
    fn thread_cpu_time_grows_with_work_and_not_with_sleep() {
        let t0 = thread_cpu_ns();
        assert!(t0 > 0, "the thread clock reads");
        let mut x = 0u64;
        let start = std::time::Instant::now();
        let mut t1 = t0;
        while t1 - t0 < 20_000_000 && start.elapsed() < std::time::Duration::from_secs(10) {
            for _ in 0..10_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            t1 = thread_cpu_ns();
        }
        std::hint::black_box(x);
        assert!(t1 - t0 >= 20_000_000, "{:?} of spinning charged {} ns", start.elapsed(), t1 - t0);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let t2 = thread_cpu_ns();
        assert!(t2 - t1 < 20_000_000, "a 50 ms sleep charged {} ns of CPU", t2 - t1);
    }

    /// Two threads spinning on one CPU wait for it in turns: each one's run delay grows by
    /// a good part of the wall time, while a thread alone that sleeps gains none.
    #[test]
    fn run_delay_grows_when_threads_share_a_cpu_and_not_in_sleep() {
        let Some(d0) = thread_run_delay_ns() else {
            eprintln!("skipping: this kernel keeps no schedstat");
            return;
        };
        std::thread::sleep(std::time::Duration::from_millis(30));
        let slept = thread_run_delay_ns().expect("read twice") - d0;
        assert!(slept < 25_000_000, "a 30 ms sleep counted {slept} ns of run delay");
        // SAFETY: a zeroed cpu_set_t is valid; the set and the calls use this thread only.
        let pin = || unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            let first = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)).unwrap_or(0);
            libc::CPU_ZERO(&mut set);
            libc::CPU_SET(first, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        let spin = move || {
            pin();
            let (d0, t0) = (thread_run_delay_ns().unwrap_or(0), std::time::Instant::now());
            let mut x = 0u64;
            while t0.elapsed() < std::time::Duration::from_millis(300) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
            thread_run_delay_ns().unwrap_or(0) - d0
        };
        // both in threads of their own: the pinning ends with them
        let (a, b) = (std::thread::spawn(spin), std::thread::spawn(spin));
        let (a, b) = (a.join().expect("spinner"), b.join().expect("spinner"));
        // each ran about half of 300 ms and waited the other half (more on a busy machine)
        assert!(a + b >= 150_000_000, "run delays {a} and {b} ns of two spinners on one CPU");
    }
}
