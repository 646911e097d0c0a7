//! A fixed pool of worker threads (one per core by default) running compression and
//! decompression jobs. Jobs never block on locks held across I/O; results go back through
//! channels the submitter owns.
//!
//! States: running → (drop) stopping: the job channel closes, workers finish queued jobs and
//! exit; drop joins them.

use crossbeam_channel::{unbounded, Sender};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send + 'static>;

pub struct WorkerPool {
    tx: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
    n: usize,
}

impl WorkerPool {
    pub fn new(n: usize, name: &str) -> WorkerPool {
        let n = if n == 0 { std::thread::available_parallelism().map(|p| p.get()).unwrap_or(2) } else { n };
        let (tx, rx) = unbounded::<Job>();
        let threads = (0..n)
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || {
                        for job in rx {
                            // jobs catch their own panics where someone waits for them
                            // (fault.rs); this keeps the worker for the next job regardless
                            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
                                log::error!("a worker job panicked: {}", crate::fault::panic_message(&*p));
                            }
                        }
                    })
                    .expect("spawn worker thread")
            })
            .collect();
        WorkerPool { tx: Some(tx), threads, n }
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
}
