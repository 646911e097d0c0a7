//! POSIX semantics over the engine, returning typed errors; tested without mounting.
//!
//! [`Fs`] mirrors the FUSE low-level operations (lookup/forget, getattr/setattr, mknod,
//! mkdir, unlink, rmdir, symlink, rename, link, open/read/write/release, readdir, xattrs,
//! fallocate, lseek, fsync, statfs, the chattr ioctls) with inode numbers as handles.
//! Properties (props.rs) are xattrs it validates, inherited dynamically (inherit.rs); each
//! write hands the engine its file's resolved compression. Semantics follow ext4
//! (same errno for the same situation). Namespace changes and their checks run inside one
//! engine metadata transaction, so a check and the change it guards are atomic; data goes
//! straight to the engine without any fs-wide lock.
mod config;
mod error;
mod handles;
mod inodes;
mod jobs;
mod ops;
pub mod props;
mod rules;

pub use jobs::{background, recompress};
pub use ops::usage;
pub use rules::{perm, time};

pub use config::{Compression, FsConfig};
pub use error::{FsError, Result};
pub use ops::attr::{SetAttr, TimeSet};
pub use ops::copy::CopyEnd;
pub use ops::dir::DirItem;
pub use rules::creds::{Cap, Creds, ALL_CAPS};
pub use rules::name::NAME_MAX;

/// Names of the virtual extended attributes served by the fs core.
pub mod xattr_names {
    pub use crate::ops::usage::XATTR_USAGE as USAGE;
    pub use crate::ops::xattr::{
        XATTR_EFFECTIVE as EFFECTIVE, XATTR_MOUNT as MOUNT, XATTR_QOS_STATS as QOS_STATS, XATTR_REMOUNT as REMOUNT,
    };
}
pub use squeezefs_pipeline::{
    EngineError, FileKind, Ino, InodeAttr, PanicSite, QosStatsRow, QosTree, StatFs, Timestamp, TreeId,
    DEFAULT_QOS_BURST, NO_TREE, QOS_BURST_RANGE, ROOT_INO,
};

use parking_lot::Mutex;
use squeezefs_pipeline::{Engine, MetaTx};
use std::sync::Arc;

/// The filesystem core over one open engine.
pub struct Fs {
    engine: Arc<Engine>,
    cfg: FsConfig,
    compression: Mutex<Option<Compression>>,
    /// the mount-wide `qos` rate, bytes/s: starts as `cfg.qos`, a remount may change it
    mount_qos: Mutex<Option<u64>>,
    /// the QoS trees the engine was told about (qos.rs)
    qos_reg: Mutex<props::qos::QosReg>,
    /// `noatime` in effect: starts as `cfg.noatime`, a remount may change it
    noatime: std::sync::atomic::AtomicBool,
    inodes: inodes::InodeTable,
    handles: handles::Handles,
    atimes: rules::atime::PendingAtimes,
    /// held across a rename's transaction and its parent-map update (is_within)
    rename_lock: Mutex<()>,
    /// set when the flush at unmount failed (`shutdown`)
    shutdown_error: Mutex<Option<String>>,
    /// how the mount receives requests, as the FUSE layer describes it (`set_transport`)
    transport: Mutex<String>,
    /// background compression's worker (background.rs)
    bg: jobs::background::Background,
    /// `squeezefs recompress` jobs running (recompress.rs)
    jobs_running: std::sync::atomic::AtomicUsize,
    /// set by `shutdown`: running jobs stop, new ones are refused
    closing: std::sync::atomic::AtomicBool,
}

impl Fs {
    /// Wrap an open engine: applies the mount-wide compression and frees orphans left by a
    /// crash (inodes unlinked while open that never saw their last close).
    pub fn new(engine: Arc<Engine>, cfg: FsConfig) -> Result<Fs> {
        if let Some(c) = cfg.compression {
            engine.set_compression(c.spec, c.force);
        }
        let fs = Fs {
            compression: Mutex::new(cfg.compression),
            mount_qos: Mutex::new(cfg.qos),
            qos_reg: Mutex::new(props::qos::QosReg::default()),
            noatime: std::sync::atomic::AtomicBool::new(cfg.noatime),
            engine,
            cfg,
            inodes: inodes::InodeTable::new(),
            handles: handles::Handles::default(),
            atimes: rules::atime::PendingAtimes::default(),
            rename_lock: Mutex::new(()),
            shutdown_error: Mutex::new(None),
            transport: Mutex::new(String::new()),
            bg: Default::default(),
            jobs_running: Default::default(),
            closing: Default::default(),
        };
        if !fs.engine.read_only() && !fs.cfg.read_only {
            for ino in fs.engine.orphans()? {
                fs.tx(|tx| {
                    tx.delete_inode(ino)?;
                    tx.remove_orphan(ino)?;
                    Ok(())
                })?;
            }
        }
        Ok(fs)
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    /// Unmount: free orphans still referenced by the kernel, then flush and close the engine.
    /// The engine is closed whatever the sweep met: an orphan that cannot be freed (it stays
    /// listed and goes at the next mount) must not cost the final flush of everyone's data.
    pub fn shutdown(&self) -> Result<()> {
        // recompress jobs stop (what they rewrote goes into the last commit), and the
        // background worker saves its position into it
        self.closing.store(true, std::sync::atomic::Ordering::Release);
        self.wait_for_jobs(jobs::recompress::JOBS_STOP_WAIT);
        self.stop_background();
        let mut first_err = None;
        if !self.read_only() {
            for ino in self.inodes.referenced() {
                if let Ok(a) = self.stat(ino) {
                    if a.nlink == 0 {
                        if let Err(e) = self.delete_inode(ino, true) {
                            log::error!("unmount: orphan {ino} not freed now (it goes at the next mount): {e}");
                            first_err.get_or_insert(e);
                        }
                    }
                }
            }
        }
        if let Err(e) = self.engine.close() {
            // what was written after the last commit is lost: the daemon reports it to
            // `squeezefs umount` (cmd_mount.rs)
            *self.shutdown_error.lock() =
                Some(format!("{e}; changes after txg {} were not saved", self.engine.info().last_txg));
            return Err(e.into());
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Why the flush at unmount failed, if it did (`shutdown`).
    pub fn shutdown_error(&self) -> Option<String> {
        self.shutdown_error.lock().clone()
    }

    /// Record how the mount receives requests (the FUSE layer's one-line description, e.g.
    /// `io_uring (2 per-CPU queues)` or `/dev/fuse (uring=off)`); `user.squeezefs.mount`
    /// shows it as `transport=…`.
    pub fn set_transport(&self, description: &str) {
        *self.transport.lock() = description.replace('\n', " ");
    }

    pub fn transport(&self) -> String {
        self.transport.lock().clone()
    }

    /// Change the mount-wide compression for data written from now on (remount).
    pub fn set_compression(&self, c: Compression) {
        self.engine.set_compression(c.spec, c.force);
        *self.compression.lock() = Some(c);
        // what every inode inherits from the mount changed
        self.inodes.bump_gen();
    }

    pub fn compression(&self) -> Option<Compression> {
        *self.compression.lock()
    }

    /// Change the mount-wide `qos` rate (bytes/s; `None`: no target) for writes from now on
    /// (remount).
    pub fn set_mount_qos(&self, rate: Option<u64>) {
        *self.mount_qos.lock() = rate;
        // what every inode inherits from the mount changed
        self.inodes.bump_gen();
    }

    /// The mount-wide `qos` rate, bytes/s.
    pub fn mount_qos(&self) -> Option<u64> {
        *self.mount_qos.lock()
    }

    /// Make every cached property resolution stale, as a property change does (benchmarks:
    /// the cost of resolving after a change; inherit.rs).
    #[doc(hidden)]
    pub fn invalidate_inheritance(&self) {
        self.inodes.bump_gen();
    }

    /// Attributes as stat(2) shows them: the engine's, plus a symlink's size being the
    /// length of its target (the engine's data path leaves it 0).
    fn stat(&self, ino: Ino) -> std::result::Result<InodeAttr, EngineError> {
        let mut a = self.engine.getattr(ino)?;
        a.atime = self.shown_atime(ino, a.atime);
        if a.kind == FileKind::Symlink && a.size == 0 {
            a.size = self.engine.read_link(ino)?.len() as u64;
        }
        Ok(a)
    }

    /// `stored` (the engine's atime of `ino`), or the atime a read decided from it but has
    /// not written yet (atime.rs).
    fn shown_atime(&self, ino: Ino, stored: Timestamp) -> Timestamp {
        match self.atimes.get(ino) {
            Some(p) if p.applies_to(stored) => p.atime,
            _ => stored,
        }
    }

    fn read_only(&self) -> bool {
        self.cfg.read_only || self.engine.read_only()
    }

    fn noatime(&self) -> bool {
        self.noatime.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn check_writable(&self) -> Result<()> {
        if self.read_only() {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// After a namespace change: under `dirsync` (or `sync`) it is durable when the call
    /// returns, as on ext4 (IS_DIRSYNC). The FUSE kernel module sets the flags on its
    /// superblock but never syncs a directory operation, so the fs core commits here.
    fn dirsync(&self) -> Result<()> {
        if self.cfg.dirsync || self.cfg.sync {
            self.sync()?;
        }
        Ok(())
    }

    /// After an attribute, xattr or fallocate change: under `sync` it is durable when the
    /// call returns (ext4: IS_SYNC). Data writes need nothing here: on a `sync` mount the
    /// kernel follows each one with an fsync.
    fn attrsync(&self) -> Result<()> {
        if self.cfg.sync {
            self.sync()?;
        }
        Ok(())
    }

    /// Permission check unless the kernel was asked to do it alone (default_permissions).
    fn check_perm(&self, a: &InodeAttr, c: &Creds, mask: u32) -> Result<()> {
        if self.cfg.check_permissions {
            perm::check(a, c, mask)
        } else {
            Ok(())
        }
    }

    /// Run `f` in one engine metadata transaction; an fs-level error aborts it.
    fn tx<T>(&self, f: impl FnOnce(&mut MetaTx<'_>) -> Result<T>) -> Result<T> {
        let mut fs_err = None;
        let r = self.engine.meta_write(|tx| match f(tx) {
            Ok(v) => Ok(v),
            Err(FsError::Engine(e)) => Err(e),
            Err(e) => {
                fs_err = Some(e);
                Err(EngineError::Aborted)
            }
        });
        match (r, fs_err) {
            (_, Some(e)) => Err(e),
            (Ok(v), None) => Ok(v),
            (Err(e), None) => Err(e.into()),
        }
    }

    /// The last reference to `ino` went away: delete it if it has no links left.
    fn maybe_delete(&self, ino: Ino) -> Result<()> {
        if self.read_only() {
            return Ok(());
        }
        match self.stat(ino) {
            Ok(a) if a.nlink == 0 => self.delete_inode(ino, false),
            Ok(_) => Ok(()),
            Err(EngineError::NoInode(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn delete_inode(&self, ino: Ino, at_unmount: bool) -> Result<()> {
        self.tx(|tx| {
            let a = match tx.get_inode(ino) {
                Ok(a) => a,
                Err(EngineError::NoInode(_)) => return Ok(()), // deleted meanwhile
                Err(e) => return Err(e.into()),
            };
            if a.nlink == 0 && (at_unmount || !self.inodes.is_referenced(ino)) {
                tx.delete_inode(ino)?;
                tx.remove_orphan(ino)?;
            }
            Ok(())
        })
    }

    /// Kernel lookup count: `n` more references (lookup, create, readdirplus entries).
    pub fn remember(&self, ino: Ino, n: u64) {
        self.inodes.add_lookup(ino, n);
    }

    /// One kernel reference to a readdirplus entry of directory `dir` (not for `.`/`..`).
    pub fn remember_entry(&self, dir: Ino, item: &DirItem) {
        self.inodes.add_lookup_in(dir, item.ino, item.kind == FileKind::Dir);
    }

    /// FUSE forget: the kernel dropped `n` references.
    pub fn forget(&self, ino: Ino, n: u64) {
        if self.inodes.forget(ino, n) == inodes::Drop::Unreferenced {
            if let Err(e) = self.maybe_delete(ino) {
                log::warn!("freeing unlinked inode {ino}: {e}");
            }
        }
    }

    pub fn statfs(&self) -> Result<squeezefs_pipeline::StatFs> {
        Ok(self.engine.statfs()?)
    }
}

#[cfg(test)]
mod tests;
