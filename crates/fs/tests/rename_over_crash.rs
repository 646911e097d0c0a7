//! Crash after "write a new version, rename it over the old file" without fsync — the way
//! editors, package managers and config tools replace files. ext4 (auto_da_alloc) and btrfs
//! leave either the old or the new contents after a crash; so must we.
//!
//! The rig: the pool's device is gated so that a txg N can be held in its flush while the
//! test writes the new version (whose data then belongs to txg N+1) and renames it over the
//! old file. The gate opens, N commits, and the daemon dies before N+1 (the engine is
//! dropped without close, as after SIGKILL: every written byte stays on the device, nothing
//! more commits). The reopened pool must show the old or the new contents under the name.

use squeezefs_device::doubles::MemDevice;
use squeezefs_device::{Device, DeviceError};
use squeezefs_fs::{Creds, Fs, FsConfig, ROOT_INO};
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A device whose `sync` (the flush stage's fdatasync) blocks while the gate is closed.
struct Gated {
    dev: Arc<MemDevice>,
    /// (closed, syncs waiting at the gate)
    gate: Mutex<(bool, usize)>,
    cv: Condvar,
}

impl Gated {
    fn close(&self) {
        self.gate.lock().unwrap().0 = true;
    }
    fn open(&self) {
        self.gate.lock().unwrap().0 = false;
        self.cv.notify_all();
    }
    /// Wait until a sync is held at the gate: a txg is in its flush stage, frozen.
    fn wait_for_a_held_sync(&self) {
        let g = self.gate.lock().unwrap();
        let (g, t) = self.cv.wait_timeout_while(g, Duration::from_secs(30), |g| g.1 == 0).unwrap();
        assert!(!t.timed_out() && g.1 > 0, "no txg reached the gate");
    }
}

impl Device for Gated {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.dev.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.dev.write_at(data, offset)
    }
    fn sync(&self) -> Result<(), DeviceError> {
        let mut g = self.gate.lock().unwrap();
        g.1 += 1;
        self.cv.notify_all();
        while g.0 {
            g = self.cv.wait(g).unwrap();
        }
        g.1 -= 1;
        drop(g);
        self.dev.sync()
    }
    fn len(&self) -> u64 {
        self.dev.len()
    }
    fn capacity(&self) -> Option<u64> {
        self.dev.capacity()
    }
    fn name(&self) -> &str {
        self.dev.name()
    }
}

fn write_file(fs: &Fs, name: &[u8], data: &[u8]) {
    let (a, fh) = fs.create(&Creds::root(), ROOT_INO, name, 0o644, libc::O_RDWR | libc::O_TRUNC).unwrap();
    fs.write(&Creds::root(), a.ino, 0, data, false).unwrap();
    fs.release(fh).unwrap();
}

fn contents(fs: &Fs, name: &[u8]) -> Vec<u8> {
    let a = fs.lookup(&Creds::root(), ROOT_INO, name).unwrap();
    fs.read(a.ino, 0, a.size as u32).unwrap()
}

fn options() -> OpenOptions {
    // no txg closes on its own during the test: only the syncs it asks for
    OpenOptions { txg_timeout: Duration::from_secs(600), ..OpenOptions::default() }
}

#[test]
fn rename_over_after_a_crash_leaves_the_old_or_the_new_file_never_an_empty_one() {
    rename_over_then_crash(0);
}

/// The same with RENAME_EXCHANGE (an atomic swap, used the same way).
#[test]
fn rename_exchange_after_a_crash_leaves_the_old_or_the_new_file_never_an_empty_one() {
    rename_over_then_crash(libc::RENAME_EXCHANGE);
}

fn rename_over_then_crash(flags: u32) {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let mem = Arc::new(MemDevice::new("dev0"));
    let gated = Arc::new(Gated { dev: mem.clone(), gate: Mutex::new((false, 0)), cv: Condvar::new() });
    Engine::mkfs_with_devices(&pool, vec![gated.clone()], &MkfsOptions::default()).unwrap();
    let old: Vec<u8> = b"old configuration\n".repeat(5000);
    let new: Vec<u8> = b"new configuration, longer\n".repeat(6000);
    {
        let engine = Engine::open_with_devices(&pool, vec![gated.clone()], &options()).unwrap();
        let fs = Arc::new(Fs::new(engine, FsConfig::default()).unwrap());
        write_file(&fs, b"config", &old);
        fs.engine().sync().unwrap();

        // txg N: some other file's data, held in its flush by the gate
        write_file(&fs, b"other", &vec![7u8; 300_000]);
        gated.close();
        let syncer = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.engine().sync())
        };
        gated.wait_for_a_held_sync();

        // the new version's data lands in txg N+1; the rename is made while N is in flight
        write_file(&fs, b"config.tmp", &new);
        let renamer = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.rename(&Creds::root(), ROOT_INO, b"config.tmp", ROOT_INO, b"config", flags))
        };
        // a rename that waits for N (the fix) is released by the gate opening; one that does
        // not has long finished by then and its change joins N's commit
        std::thread::sleep(Duration::from_millis(200));
        gated.open();
        syncer.join().unwrap().unwrap();
        renamer.join().unwrap().unwrap();
        assert_eq!(contents(&fs, b"config"), new, "before the crash the name shows the new file");
        // the daemon dies here: N is committed, N+1 never will be
        drop(Arc::into_inner(fs).expect("no other reference to the fs"));
    }
    let engine = Engine::open_with_devices(&pool, vec![mem as Arc<dyn Device>], &options()).unwrap();
    let fs = Fs::new(engine, FsConfig::default()).unwrap();
    let got = contents(&fs, b"config");
    assert!(
        got == old || got == new,
        "after the crash `config` holds {} bytes, neither the old ({}) nor the new ({}) contents",
        got.len(),
        old.len(),
        new.len()
    );
    let r = fs.engine().fsck().unwrap();
    assert!(r.is_clean(), "fsck after the crash: {:?}", r.problems);
}
