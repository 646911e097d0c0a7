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
}
