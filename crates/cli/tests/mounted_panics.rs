//! A panic in the daemon ends as an error for the caller, never as a hang or a dead mount:
//! each test arms a one-shot panic at one place (crates/pipeline/src/fault.rs; the test
//! build of the binary has the `fault-injection` feature), runs what passes there, and
//! checks that the caller gets EIO within seconds, that the pool is suspended (writes get
//! EIO, reads go on), that the daemon log names the panic, and that `umount` works.
mod mounted_common;
use mounted_common::*;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Arm a panic at `site` in the daemon serving `m` (the fault-injection xattr on the root).
fn arm(m: &Mounted, site: &str) {
    let c = cstr(&m.mnt);
    let r = unsafe {
        libc::setxattr(c.as_ptr(), c"trusted.squeezefs.inject-panic".as_ptr(), site.as_ptr().cast(), site.len(), 0)
    };
    assert_eq!(r, 0, "arming a panic at {site}: {}", std::io::Error::last_os_error());
}

/// Run `f` on another thread; its result, or a failure if it still runs after 10 s.
fn within_seconds<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("{what} still waits after 10 s"))
}

fn eio<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => panic!("{what}: expected EIO, got {other:?}"),
    }
}

/// Compressible bytes, not all zeros.
fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i / 7 % 251) as u8).collect()
}

fn write_and_fsync(p: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(p)?;
    f.write_all(data)?;
    f.sync_all()
}

/// What every panic leaves: the pool suspended (a new file gets EIO; `readable`, written
/// before, reads back), the panic in the daemon log (`logged`), and a mount that
/// unmounts, its daemon gone, with umount saying the final flush failed.
fn check_aftermath(mut m: Mounted, readable: &Path, content: &[u8], logged: &str) {
    eio(write_and_fsync(&m.path("after-the-panic"), b"x"), "a new file after the panic");
    assert_eq!(std::fs::read(readable).unwrap(), content, "reads go on after the panic");
    let pid = m.daemon_pid();
    let mnt = m.mnt.clone();
    let out = within_seconds("umount", move || run(&["umount", mnt.to_str().unwrap()]));
    m.forget_dead_mount();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("pool suspended"), "umount: {stderr}");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(m.mnt.to_str().unwrap()), "still mounted: {mounts}");
    let t = Instant::now();
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "the daemon {pid} still runs after umount");
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = std::fs::read_to_string(m.pool.join("squeezefs.log")).unwrap();
    assert!(log.contains(logged), "the daemon log does not name the panic ({logged}):\n{log}");
}

/// A committed file to read back after the panic.
fn committed_file(m: &Mounted) -> (std::path::PathBuf, Vec<u8>) {
    let p = m.path("before");
    let content = data(300_000);
    write_and_fsync(&p, &content).unwrap();
    (p, content)
}

#[test]
fn a_panic_in_a_request_handler_is_eio_on_both_transports() {
    if !can_mount() {
        return;
    }
    for transport in ["uring=off", "uring=on"] {
        let m = Mounted::new(transport);
        assert_transport(&m, transport);
        let (before, content) = committed_file(&m);
        arm(&m, "request");
        let p = m.path("looked-up");
        eio(within_seconds("lookup", move || std::fs::metadata(p)), "the panicking LOOKUP");
        check_aftermath(m, &before, &content, "panic in the FUSE request handler (LOOKUP");
    }
}

/// A panic in a job or thread an fsync waits for: the fsync gets EIO.
fn fsync_is_eio_after_a_panic_in(site: &str, logged: &str) {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("compress=zstd:1");
    let (before, content) = committed_file(&m);
    arm(&m, site);
    let p = m.path("written");
    eio(within_seconds("fsync", move || write_and_fsync(&p, &data(2 << 20))), "the fsync");
    check_aftermath(m, &before, &content, logged);
}

#[test]
fn a_panic_in_a_compression_job_fails_the_fsync() {
    fsync_is_eio_after_a_panic_in("compress", "panic in a compression job");
}

#[test]
fn a_panic_in_the_txg_driver_fails_the_fsync() {
    fsync_is_eio_after_a_panic_in("txg", "panic in the txg driver");
}

#[test]
fn a_panic_in_a_device_writer_fails_the_fsync() {
    fsync_is_eio_after_a_panic_in("device-write", "panic in the device writer");
}

#[test]
fn a_panic_in_a_decode_job_fails_the_read() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=zstd:1");
    let big = m.path("big");
    write_and_fsync(&big, &data(4 << 20)).unwrap();
    let (before, content) = committed_file(&m);
    // a cold start: the next read decodes its records in jobs
    m.remount();
    arm(&m, "decode");
    // one direct 1 MiB read: one READ request over 8 records, decoded in parallel jobs
    let r = within_seconds("read", move || {
        let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(big)?;
        let mut buf = vec![0u8; 1 << 20];
        f.read(&mut buf)
    });
    eio(r, "the direct read");
    check_aftermath(m, &before, &content, "panic in a decode job");
}
