//! Mount life cycle, mounted with the built binary: the default request transport.
mod mounted_common;
use mounted_common::*;
use std::path::Path;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

fn mount_info(m: &Mounted) -> String {
    String::from_utf8(xattr_get(&m.mnt, "user.squeezefs.mount").expect("mount info")).unwrap()
}

/// The daemon log's lines written by `pid`.
fn log_lines(m: &Mounted, pid: i32) -> Vec<String> {
    let log = std::fs::read_to_string(m.pool.join("squeezefs.log")).unwrap_or_default();
    log.lines().filter(|l| l.contains(&format!("pid {pid}]"))).map(str::to_string).collect()
}

/// The default mount (no `uring=`) of root on a kernel with FUSE over io_uring takes the
/// fast path, switching the kernel's `enable_uring` from N (its boot value) to Y, and says
/// so in its log and in `user.squeezefs.mount`.
#[test]
fn the_default_mount_switches_fuse_over_io_uring_on() {
    if !can_mount() {
        return;
    }
    if !Path::new(ENABLE_URING).exists() {
        let m = Mounted::new("");
        assert_transport(&m, "");
        assert!(mount_info(&m).contains("transport=/dev/fuse (this kernel has no FUSE over io_uring"));
        return;
    }
    // another mount (a test running beside this one) may set Y between our N and our mount:
    // then this mount found Y and says nothing about switching; try again
    for attempt in 0..10 {
        std::fs::write(ENABLE_URING, b"N").unwrap();
        let m = Mounted::new("");
        assert_transport(&m, "");
        assert_eq!(std::fs::read_to_string(ENABLE_URING).unwrap().trim(), "Y");
        let info = mount_info(&m);
        let transport = info.lines().find_map(|l| l.strip_prefix("transport=")).expect("transport line").to_string();
        assert!(transport.starts_with("io_uring, "), "{info}");
        let lines = log_lines(&m, m.daemon_pid());
        let mounted = lines.iter().find(|l| l.contains("mounted")).expect("mounted line");
        if transport.contains("this mount set") {
            assert!(mounted.contains("this mount set /sys/module/fuse/parameters/enable_uring to Y"), "{mounted}");
            return;
        }
        eprintln!("attempt {attempt}: another mount set enable_uring first");
    }
    panic!("no default mount switched enable_uring from N to Y in 10 attempts");
}

/// `uring=off` opts out: /dev/fuse, with one log line saying why and how to get the fast path.
#[test]
fn uring_off_serves_dev_fuse_and_says_why() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("uring=off");
    assert_transport(&m, "uring=off");
    assert!(mount_info(&m).contains("transport=/dev/fuse (uring=off was given"), "{}", mount_info(&m));
    let why: Vec<_> =
        log_lines(&m, m.daemon_pid()).into_iter().filter(|l| l.contains("requests come through /dev/fuse")).collect();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why[0].contains("leave it out for FUSE over io_uring"), "{}", why[0]);
}
