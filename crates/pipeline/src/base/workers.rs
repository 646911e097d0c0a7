//! A fixed pool of worker threads (one per core by default) running compression and
//! decompression jobs. Jobs never block on locks held across I/O; results go back through
//! channels the submitter owns.
//!
//! States: running → (drop) stopping: the job channel closes, workers finish queued jobs and
//! exit; drop joins them.
//!
//! Busy time (`WorkerBusy`): the wall time the workers spent running jobs, the job running
//! now included up to the moment of reading (a job that drains the compress queue may run
//! for seconds while the pipeline is saturated). Over an interval, busy ÷ (workers × wall)
//! is how much of the time the workers had work: near 1 the compress stage is the
//! bottleneck, well below it the records come slower than the workers take them.

use crossbeam_channel::{unbounded, Sender};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// The workers' busy time (see the block comment).
pub struct WorkerBusy {
    start: Instant,
    /// nanoseconds of jobs finished
    done_ns: AtomicU64,
    /// per worker, nanoseconds since `start` at which its running job began, plus one
    /// (0: idle)
    since: Vec<AtomicU64>,
}

impl WorkerBusy {
    fn new(n: usize) -> WorkerBusy {
        WorkerBusy {
            start: Instant::now(),
            done_ns: AtomicU64::new(0),
            since: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn begin(&self, i: usize) {
        self.since[i].store(self.now_ns().saturating_add(1), Ordering::Relaxed);
    }

    fn end(&self, i: usize) {
        let began = self.since[i].swap(0, Ordering::Relaxed);
        if began > 0 {
            self.done_ns.fetch_add(self.now_ns().saturating_sub(began - 1), Ordering::Relaxed);
        }
    }

    /// Nanoseconds the workers have been busy in all, the running jobs so far included.
    pub fn busy_ns(&self) -> u64 {
        let now = self.now_ns();
        let running = self.since.iter().map(|s| s.load(Ordering::Relaxed)).filter(|&b| b > 0);
        running.fold(self.done_ns.load(Ordering::Relaxed), |acc, b| acc.saturating_add(now.saturating_sub(b - 1)))
    }
}

type Job = Box<dyn FnOnce() + Send + 'static>;

pub struct WorkerPool {
    tx: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
    n: usize,
    busy: Arc<WorkerBusy>,
}

impl WorkerPool {
    pub fn new(n: usize, name: &str) -> WorkerPool {
        let n = if n == 0 { std::thread::available_parallelism().map(|p| p.get()).unwrap_or(2) } else { n };
        let (tx, rx) = unbounded::<Job>();
        let busy = Arc::new(WorkerBusy::new(n));
        let threads = (0..n)
            .map(|i| {
                let (rx, busy) = (rx.clone(), busy.clone());
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || {
                        for job in rx {
                            busy.begin(i);
                            // jobs catch their own panics where someone waits for them
                            // (fault.rs); this keeps the worker for the next job regardless
                            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
                                log::error!("a worker job panicked: {}", crate::base::fault::panic_message(&*p));
                            }
                            busy.end(i);
                        }
                    })
                    .expect("spawn worker thread")
            })
            .collect();
        WorkerPool { tx: Some(tx), threads, n, busy }
    }

    /// The workers' busy time (see the block comment).
    pub fn busy(&self) -> Arc<WorkerBusy> {
        self.busy.clone()
    }

    pub fn threads(&self) -> usize {
        self.n
    }

    pub fn execute(&self, job: impl FnOnce() + Send + 'static) {
        if let Some(tx) = &self.tx {
            // the receivers live as long as the pool, so send cannot fail while we exist
            let _ = tx.send(Box::new(job));
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.tx.take();
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            // a worker may drop the last reference to the engine; never join oneself
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_job() {
        let pool = WorkerPool::new(3, "t");
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..100u32 {
            let tx = tx.clone();
            pool.execute(move || tx.send(i).unwrap());
        }
        drop(tx);
        let mut got: Vec<u32> = rx.iter().collect();
        got.sort();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn busy_time_counts_running_jobs_and_not_idle_workers() {
        let pool = WorkerPool::new(2, "t");
        let busy = pool.busy();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(busy.busy_ns(), 0, "idle workers are not busy");
        let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
        let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
        pool.execute(move || {
            started_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        started_rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(60));
        let running = busy.busy_ns();
        assert!(running >= 60_000_000, "a job running for 60 ms counts before it ends: {running}");
        go_tx.send(()).unwrap();
        drop(pool);
        let done = busy.busy_ns();
        assert!(done >= running && done < running + 1_000_000_000, "{running} → {done}");
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(busy.busy_ns(), done, "a finished job stops counting");
    }
}
