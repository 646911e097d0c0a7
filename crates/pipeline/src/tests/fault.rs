//! Panics at each engine boundary, injected (fault.rs): the caller waiting for the work
//! gets an error, the pool is suspended, and it reopens at its last commit.

use crate::base::fault::Site;
use crate::{Engine, EngineError, FileKind, Ino, InodeAttr, MkfsOptions, OpenOptions, Timestamp, ROOT_INO};
use std::sync::Arc;
use std::time::Duration;

fn opts() -> OpenOptions {
    OpenOptions {
        compression: "zstd:1".parse().unwrap(),
        // two workers: a read of several records decodes them in jobs (read/path.rs)
        workers: 2,
        txg_timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

fn create(e: &Engine, name: &str) -> Ino {
    e.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        let t = Timestamp { secs: 1_700_000_000, nanos: 0 };
        tx.put_inode(&InodeAttr { nlink: 1, generation: 1, ..InodeAttr::new(ino, FileKind::File, 0o644, 0, 0, t) })?;
        tx.dir_insert(ROOT_INO, name.as_bytes(), ino, FileKind::File)?;
        Ok(ino)
    })
    .unwrap()
}

/// Compressible, not all zeros.
fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i / 7 % 251) as u8).collect()
}

/// Run `f` on another thread; its result, or a failure if it takes more than 10 s.
fn within_seconds<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("{what} still waits after 10 s"))
}

/// `r` failed because the pool is suspended, for a reason holding `reason`.
fn assert_suspended<T: std::fmt::Debug>(r: crate::Result<T>, reason: &str) {
    match r {
        Err(EngineError::Suspended(why)) => assert!(why.to_string().contains(reason), "{why}"),
        other => panic!("expected a suspension ({reason}), got {other:?}"),
    }
}

/// After the suspension: writes and syncs fail, `close` returns (with the suspension,
/// whose reason holds `reason`), and the pool reopens at its last commit, `committed`
/// bytes in file `ino`.
fn check_aftermath(pool: &std::path::Path, e: Arc<Engine>, ino: Ino, committed: &[u8], reason: &str) {
    assert!(matches!(e.write(ino, 0, b"later"), Err(EngineError::Suspended(_))), "a write after the panic");
    assert!(matches!(e.sync(), Err(EngineError::Suspended(_))), "a sync after the panic");
    let closed = within_seconds("close", move || {
        let r = e.close();
        drop(e);
        r
    });
    assert_suspended(closed, reason);
    let e = Engine::open(pool, &opts()).unwrap();
    let mut buf = vec![0u8; committed.len() + 1];
    assert_eq!(e.read(ino, 0, &mut buf).unwrap(), committed.len());
    assert_eq!(&buf[..committed.len()], committed);
    e.close().unwrap();
}

/// A panic in a job or thread the fsync waits for: the fsync fails with the suspension
/// (its reason holding `reason`).
fn fsync_fails_after_a_panic_in(site: Site, reason: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &opts()).unwrap();
    let ino = create(&e, "f");
    let first = data(1 << 20);
    e.write(ino, 0, &first).unwrap();
    e.fsync(ino).unwrap();
    e.inner.faults.arm(site);
    let e2 = e.clone();
    let r = within_seconds("fsync", move || {
        // a write may already see the suspension (an early compression job panicked)
        e2.write(ino, 1 << 20, &data(1 << 20))?;
        e2.fsync(ino)
    });
    assert_suspended(r, reason);
    check_aftermath(&pool, e, ino, &first, reason);
}

#[test]
fn a_panic_in_a_compression_job_fails_the_fsync_and_suspends_the_pool() {
    fsync_fails_after_a_panic_in(Site::CompressJob, "panic in a compression job");
}

#[test]
fn a_panic_in_the_txg_driver_fails_the_fsync_and_close_still_returns() {
    fsync_fails_after_a_panic_in(Site::TxgDriver, "panic in the txg driver");
}

/// The writer's requests complete with an error, which fails (and suspends) the txg.
#[test]
fn a_panic_in_a_device_writer_fails_the_fsync_and_suspends_the_pool() {
    fsync_fails_after_a_panic_in(Site::DeviceWrite, "the device writer panicked");
}

#[test]
fn a_panic_in_a_decode_job_fails_the_read_and_suspends_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &opts()).unwrap();
    let ino = create(&e, "f");
    let content = data(2 << 20);
    e.write(ino, 0, &content).unwrap();
    e.close().unwrap();
    drop(e);
    // cold: the read decodes its records in jobs
    let e = Engine::open(&pool, &opts()).unwrap();
    e.inner.faults.arm(Site::DecodeJob);
    let e2 = e.clone();
    let r = within_seconds("read", move || e2.read(ino, 0, &mut vec![0u8; 1 << 20]));
    assert_suspended(r, "panic in a decode job");
    // reads go on
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(e.read(ino, 1 << 20, &mut buf).unwrap(), 1 << 20);
    assert_eq!(buf, content[1 << 20..]);
    check_aftermath(&pool, e, ino, &content, "panic in a decode job");
}

#[test]
fn a_suspension_during_a_sync_keeps_the_txg_from_committing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &opts()).unwrap();
    let ino = create(&e, "f");
    e.write(ino, 0, b"committed").unwrap();
    e.sync().unwrap();
    e.write(ino, 0, b"lost soon").unwrap();
    e.suspend(EngineError::Aborted);
    assert!(matches!(e.sync(), Err(EngineError::Suspended(why)) if matches!(*why, EngineError::Aborted)));
    check_aftermath(&pool, e, ino, b"committed", "transaction aborted");
}
