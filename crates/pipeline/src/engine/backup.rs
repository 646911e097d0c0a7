//! Metadata backups of a pool on an object device, into its bucket (formats and segment
//! protection: crates/object backup.rs, backup_io.rs).
//!
//! A pool whose one device is an object device can be opened again on another machine
//! from the bucket alone (restore.rs), but only as far as the last backup: the metadata
//! store and the object map live in the pool directory. So a writable open backs them up,
//! on a thread of its own:
//!
//! * when a commit is followed by a quiet period (`QUIET`, no commit since), and
//! * at least every `interval` (mount option `s3-backup=`, default 30 s) while commits go on,
//! * and once more as the pool closes, after its last commit (unmount).
//!
//! Each backup is of one commit, both halves: the txg driver holds `gate` while a txg
//! syncs and commits, and a backup takes its read transaction of the store and the dump of
//! the object map with the gate held, between two commits. The object map then holds
//! everything the store's commit references (the device's sync precedes the commit), and
//! no range that commit references has been rewritten or discarded (the engine reuses a
//! range only after a later commit freed it). Sealing and uploading run after the gate is
//! released.
//!
//! What a machine loss costs: the commits after the last complete backup, that is up to
//! `interval` plus the time of one backup's upload of acknowledged (fsynced) writes, plus
//! the txg timeout for writes not fsynced. docs/usage.md says so to users.
//!
//! This file holds the state and the decision; backup_run.rs the thread and the backup
//! itself, which work on the engine's `Inner`.

use parking_lot::{Condvar, Mutex};
use squeezefs_object::ObjectDevice;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long no commit must follow one before it is backed up.
pub const QUIET: Duration = Duration::from_secs(5);
/// The default longest time between two backups while commits go on.
pub const DEFAULT_BACKUP_INTERVAL: Duration = Duration::from_secs(30);
/// zstd level of the store's seal in a backup: backups run every few seconds to minutes
/// while the pool is in use, so a fast level (squeezefs-meta seal.rs has the table).
pub const BACKUP_SEAL_LEVEL: i32 = 3;
/// How often the backup thread looks at the commits.
pub(crate) const TICK: Duration = Duration::from_millis(250);

/// What the backup decision looks at.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// txg of the newest backup
    pub backed_txg: u64,
    /// txg of the newest commit
    pub synced_txg: u64,
    /// when the newest backup was written (or the pool opened)
    pub last_backup: Instant,
    /// when the newest commit was first seen
    pub last_commit: Instant,
}

/// Whether a backup is due now: there is a commit no backup holds, and either commits
/// have been quiet for `quiet` since, or the last backup is `interval` old.
pub fn due(p: &Progress, now: Instant, interval: Duration, quiet: Duration) -> bool {
    p.synced_txg > p.backed_txg
        && (now.duration_since(p.last_commit) >= quiet.min(interval) || now.duration_since(p.last_backup) >= interval)
}

/// The backup side of an engine: set up only for a writable pool whose one device is an
/// object device.
#[derive(Default)]
pub struct Backups {
    /// held by the txg driver while a txg syncs and commits (block comment)
    pub gate: Mutex<()>,
    pub(crate) device: OnceLock<Arc<ObjectDevice>>,
    pub(crate) backed_txg: AtomicU64,
    pub(crate) stop: Mutex<bool>,
    pub(crate) wake: Condvar,
    pub(crate) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// backups written since open, for tests and stats
    pub written: AtomicU64,
}

impl Backups {
    /// Back the pool up into `dev`'s bucket from now on.
    pub fn attach(&self, dev: Arc<ObjectDevice>) {
        self.backed_txg.store(dev.newest_backup_txg().unwrap_or(0), Ordering::Release);
        let _ = self.device.set(dev);
    }

    pub fn enabled(&self) -> bool {
        self.device.get().is_some()
    }

    /// Stop the thread (waiting for a backup it is writing).
    pub fn stop(&self) {
        *self.stop.lock() = true;
        self.wake.notify_all();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_follows_a_quiet_commit_and_at_least_every_interval() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let p = Progress { backed_txg: 4, synced_txg: 5, last_backup: t0, last_commit: t0 };
        let (interval, quiet) = (s(30), s(5));
        assert!(!due(&p, t0 + s(4), interval, quiet), "not quiet yet");
        assert!(due(&p, t0 + s(5), interval, quiet), "quiet after a commit");
        // commits keep coming: the interval bounds the wait
        let busy = Progress { last_commit: t0 + s(29), synced_txg: 40, ..p };
        assert!(!due(&busy, t0 + s(29), interval, quiet));
        assert!(due(&busy, t0 + s(30), interval, quiet));
        // nothing new: never
        let idle = Progress { backed_txg: 5, ..p };
        assert!(!due(&idle, t0 + s(3600), interval, quiet));
        // an interval shorter than the quiet period is the quiet period too
        assert!(due(&p, t0 + s(1), s(1), quiet));
    }
}
