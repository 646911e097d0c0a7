//! The metadata backup thread and one backup (the state, the schedule and why a backup
//! is of one commit: backup.rs).

use crate::base::error::{PoolError, Result};
use crate::engine::backup::{due, Progress, BACKUP_SEAL_LEVEL, DEFAULT_BACKUP_INTERVAL, QUIET, TICK};
use crate::engine::inner::Inner;
use squeezefs_object::{BackupReport, DEFAULT_KEEP};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Start the backup thread (no-op unless attached).
pub fn start(inner: &Arc<Inner>) -> Result<()> {
    let b = &inner.backup;
    if !b.enabled() {
        return Ok(());
    }
    let weak = Arc::downgrade(inner);
    let interval = inner.opts.object.backup_interval.unwrap_or(DEFAULT_BACKUP_INTERVAL);
    let h = std::thread::Builder::new()
        .name("sqz-backup".into())
        .spawn(move || run_thread(weak, interval))
        .map_err(crate::base::error::EngineError::Spawn)?;
    *b.thread.lock() = Some(h);
    Ok(())
}

/// The last backup as the pool closes: after the final commit, if any commit is not
/// backed up yet. A failure is logged: the data stays in the bucket and the pool
/// directory, only a restore from the bucket would miss the last commits.
pub fn final_backup(inner: &Inner) {
    let b = &inner.backup;
    b.stop();
    if b.enabled() && inner.txg.synced() > b.backed_txg.load(Ordering::Acquire) {
        if let Err(e) = backup_now(inner) {
            log::error!("{}: the last metadata backup failed: {e}", inner.pool_dir.display());
        }
    }
}

/// Write one backup of the newest commit.
pub fn backup_now(inner: &Inner) -> Result<BackupReport> {
    let b = &inner.backup;
    let dev = b.device.get().ok_or(PoolError::NoBackupDevice)?;
    let obj = |source| PoolError::Object { source: Box::new(source) };
    let (rx, snap) = {
        let _g = b.gate.lock();
        let rx = inner.db.begin_read()?;
        let snap = dev.snapshot_map().map_err(obj)?;
        (rx, snap)
    };
    let sealed = superblock_txg(&rx).and_then(|txg| {
        let (bytes, _) = squeezefs_meta::seal::seal(&rx, BACKUP_SEAL_LEVEL)
            .map_err(|source| PoolError::BackupSeal { source: Box::new(source) })?;
        Ok((txg, bytes))
    });
    drop(rx);
    let (txg, bytes) = match sealed {
        Ok(x) => x,
        Err(e) => {
            dev.drop_snapshot(snap);
            return Err(e);
        }
    };
    let report = dev.write_backup(snap, txg, bytes, DEFAULT_KEEP).map_err(obj)?;
    b.backed_txg.fetch_max(txg, Ordering::AcqRel);
    b.written.fetch_add(1, Ordering::Relaxed);
    log::info!(
        "{}: metadata backup {} of txg {txg} written ({} bytes, {} older pruned)",
        dev.spec(),
        report.generation,
        report.bytes,
        report.pruned
    );
    Ok(report)
}

fn superblock_txg(rx: &redb::ReadTransaction) -> Result<u64> {
    let t = rx.open_table(squeezefs_meta::tables::SUPERBLOCK)?;
    let v = t.get(0u8)?.ok_or(PoolError::NoSuperblock)?;
    Ok(squeezefs_meta::Superblock::decode(v.value())?.txg)
}

fn run_thread(weak: Weak<Inner>, interval: Duration) {
    let opened = Instant::now();
    let mut p = {
        let Some(inner) = weak.upgrade() else { return };
        Progress {
            backed_txg: inner.backup.backed_txg.load(Ordering::Acquire),
            synced_txg: inner.txg.synced(),
            last_backup: opened,
            last_commit: opened,
        }
    };
    loop {
        {
            let Some(inner) = weak.upgrade() else { return };
            let b = &inner.backup;
            let mut stop = b.stop.lock();
            if *stop {
                return;
            }
            b.wake.wait_for(&mut stop, TICK);
            if *stop {
                return;
            }
        }
        let Some(inner) = weak.upgrade() else { return };
        let now = Instant::now();
        let synced = inner.txg.synced();
        if synced != p.synced_txg {
            p.synced_txg = synced;
            p.last_commit = now;
        }
        p.backed_txg = inner.backup.backed_txg.load(Ordering::Acquire);
        if !due(&p, now, interval, QUIET) {
            continue;
        }
        if let Err(e) = backup_now(&inner) {
            log::warn!("{}: metadata backup failed ({e}); trying again later", inner.pool_dir.display());
        }
        // a failed backup is tried again after a whole interval, not at once
        p.last_backup = Instant::now();
    }
}
