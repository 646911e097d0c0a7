//! Helper threads for requests that may wait long: an fsync waiting for a txg commit, a
//! WRITE into a QoS tree waiting for its tree's admission (squeezefs_fs qos.rs). Both
//! transports hand such a request, with the buffer holding it, to a helper, so the threads
//! that receive requests keep serving everyone else (other trees' writers, readers).
//!
//! States of a helper thread: *busy* (running a job) → *idle* (waiting for the next job, at
//! most IDLE_SECS) → busy again, or ended. `run` gives a job to an idle helper if one is
//! free (claiming it before sending, so two jobs never wait for the same helper) and starts
//! a new thread otherwise: a job never waits behind another job, whatever that job waits
//! for. Threads are reused, so pacing many small writes does not start a thread per write.
//! Tunable: IDLE_SECS 10.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// A helper with nothing to do ends after this long.
const IDLE_SECS: u64 = 10;

type Job = Box<dyn FnOnce() + Send>;

struct Shared {
    /// idle helpers not yet claimed by a `run`
    idle: AtomicUsize,
    /// jobs given and not finished
    running: AtomicUsize,
    rx: Mutex<mpsc::Receiver<Job>>,
}

/// A pool of helper threads that grows with the number of jobs waiting at once.
pub struct Helpers {
    name: String,
    tx: Mutex<mpsc::Sender<Job>>,
    shared: Arc<Shared>,
}

impl Helpers {
    pub fn new(name: &str) -> Helpers {
        let (tx, rx) = mpsc::channel();
        Helpers {
            name: name.into(),
            tx: Mutex::new(tx),
            shared: Arc::new(Shared { idle: AtomicUsize::new(0), running: AtomicUsize::new(0), rx: Mutex::new(rx) }),
        }
    }

    /// Run `job` on a helper thread at once; when no thread can be started (out of
    /// threads), on the calling thread. Returns whether a helper took it.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) -> bool {
        self.shared.running.fetch_add(1, Ordering::AcqRel);
        let shared = self.shared.clone();
        let job = move || {
            job();
            shared.running.fetch_sub(1, Ordering::AcqRel);
        };
        let claimed = self.shared.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
        if claimed {
            // an idle helper is claimed for it: it takes this job (or another claimed one)
            let sent = self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(Box::new(job));
            return match sent {
                Ok(()) => true,
                Err(mpsc::SendError(job)) => {
                    job();
                    false
                }
            };
        }
        // the job is handed over through a slot, so a failed spawn gives it back
        let slot: Arc<Mutex<Option<Job>>> = Arc::new(Mutex::new(Some(Box::new(job))));
        let (shared, theirs) = (self.shared.clone(), slot.clone());
        let spawned = std::thread::Builder::new().name(self.name.clone()).spawn(move || {
            let first = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
            helper(&shared, first)
        });
        if let Err(e) = spawned {
            log::warn!("starting a helper thread: {e}; the request runs on the thread that received it");
            if let Some(job) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                job();
            }
            return false;
        }
        true
    }
}

impl Helpers {
    /// Wait until every job given so far has finished, at most `timeout`; whether they have.
    pub fn wait_done(&self, timeout: Duration) -> bool {
        let t0 = std::time::Instant::now();
        while self.shared.running.load(Ordering::Acquire) > 0 {
            if t0.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }
}

fn helper(shared: &Shared, first: Option<Job>) {
    // a thread inherits its creator's scheduling class, and a request thread may run
    // SCHED_FIFO or SCHED_IDLE while it waits (sched.rs): a helper's requests run as
    // everyone's do
    crate::sched::set_policy(crate::sched::Policy::Other);
    if let Some(j) = first {
        j();
    }
    loop {
        shared.idle.fetch_add(1, Ordering::AcqRel);
        let job = loop {
            let r = shared.rx.lock().unwrap_or_else(|p| p.into_inner()).recv_timeout(Duration::from_secs(IDLE_SECS));
            match r {
                Ok(j) => break Some(j),
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // leave only if nobody claimed this idle helper meanwhile (a job is
                    // then on its way: take it)
                    if shared.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok() {
                        return;
                    }
                }
            }
        };
        match job {
            Some(j) => j(),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Instant;

    #[test]
    fn jobs_never_wait_behind_each_other_and_threads_are_reused() {
        let h = Helpers::new("test-helper");
        let done = Arc::new(AtomicU32::new(0));
        // 16 jobs that each wait 300 ms, given at once: all done in about 300 ms
        let t0 = Instant::now();
        for _ in 0..16 {
            let d = done.clone();
            assert!(h.run(move || {
                std::thread::sleep(Duration::from_millis(300));
                d.fetch_add(1, Ordering::SeqCst);
            }));
        }
        while done.load(Ordering::SeqCst) < 16 {
            assert!(t0.elapsed() < Duration::from_secs(10), "jobs waited behind each other");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(t0.elapsed() < Duration::from_millis(1500), "16 waits of 300 ms took {:?}", t0.elapsed());
        // the 16 helpers are idle now; more jobs reuse them instead of starting threads
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(h.shared.idle.load(Ordering::SeqCst), 16);
        for _ in 0..8 {
            let d = done.clone();
            assert!(h.run(move || {
                d.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert!(h.wait_done(Duration::from_secs(10)));
        assert_eq!(done.load(Ordering::SeqCst), 24);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(h.shared.idle.load(Ordering::SeqCst), 16, "no thread was added");
    }
}
