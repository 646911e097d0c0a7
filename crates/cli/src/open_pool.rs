//! Opening a pool from a command: a pool whose previous holder is still closing it (a mount
//! daemon flushing after `umount`) is waited for, a bounded time, instead of refused; a
//! pool in use (a live mount, another command) is refused at once (pipeline pool_lock.rs).
use squeezefs_pipeline::{Engine, EngineError, OpenOptions, PoolError};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The daemon's log in the pool directory: its stderr once it runs in the background, so
/// errors after the mount went live (a failed txg, an unmount that could not flush) are kept.
/// Opened for appending by the mount; a big log moves to `squeezefs.log.1` at mount.
pub const LOG_FILE: &str = "squeezefs.log";

/// How long a command waits by default for the previous holder of a pool to close it.
pub const DEFAULT_WAIT_SECS: u64 = 60;

/// `Engine::open`, retried while the pool is closing, for up to `wait`. Says once on stderr
/// that it waits, and for which process.
pub fn open_waiting(pool: &Path, opts: &OpenOptions, wait: Duration) -> anyhow::Result<Arc<Engine>> {
    let start = Instant::now();
    let mut told = false;
    loop {
        match Engine::open(pool, opts) {
            Err(EngineError::Pool(PoolError::Closing { holder, .. })) => {
                if start.elapsed() >= wait {
                    anyhow::bail!(
                        "pool {} is still open by {} after waiting {} s for it to close (its daemon is still \
                         flushing; wait longer with --wait SECS, or see {})",
                        pool.display(),
                        holder.describe(),
                        wait.as_secs(),
                        pool.join(LOG_FILE).display()
                    );
                }
                if !told {
                    eprintln!(
                        "squeezefs: pool {} is still open by {}, which is closing it (flushing after its \
                         unmount); waiting up to {} s",
                        pool.display(),
                        holder.describe(),
                        wait.as_secs()
                    );
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return Ok(r?),
        }
    }
}
