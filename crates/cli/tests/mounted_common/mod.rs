//! Shared helpers of the mounted integration tests: a pool in a temp dir, mounted with
//! the built `squeezefs` binary, always unmounted on drop (even when a test fails).
#![allow(dead_code)]
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const BIN: &str = env!("CARGO_BIN_EXE_squeezefs");

/// Mounted tests need root and /dev/fuse; elsewhere they skip with a message.
pub fn can_mount() -> bool {
    if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
        eprintln!("skipping: mounted tests need root and /dev/fuse");
        return false;
    }
    true
}

pub fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().expect("running squeezefs")
}

pub fn run_ok(args: &[&str]) {
    let out = run(args);
    assert!(
        out.status.success(),
        "squeezefs {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The request transport of every mount whose options name none: `uring=on` or `uring=off`
/// from `SQUEEZEFS_TEST_URING` (scripts/test.sh runs the mounted tests once with each),
/// the mount's default without it.
pub const TRANSPORT_ENV: &str = "SQUEEZEFS_TEST_URING";

fn with_test_transport(opts: &str) -> String {
    let names_one = opts.split(',').any(|o| o.starts_with("uring="));
    match std::env::var(TRANSPORT_ENV).as_deref() {
        Ok(v @ ("on" | "off")) if !names_one => {
            if opts.is_empty() {
                format!("uring={v}")
            } else {
                format!("{opts},uring={v}")
            }
        }
        Ok("on" | "off") | Err(_) => opts.to_string(),
        Ok(other) => panic!("{TRANSPORT_ENV}={other}: use on or off"),
    }
}

pub struct Mounted {
    pub dir: tempfile::TempDir,
    pub pool: PathBuf,
    pub mnt: PathBuf,
    pub opts: String,
    /// mounted with allow_other (the default of these tests)
    pub allow_other: bool,
    /// `SQUEEZEFS_TEST_URING` may add its `uring=` (false: `opts` exactly as given)
    test_transport: bool,
    mounted: bool,
}

impl Mounted {
    /// mkfs a fresh pool and mount it with `opts` (allow_other is always added so that
    /// tests can act as other users).
    pub fn new(opts: &str) -> Mounted {
        Mounted::create(opts, true, true)
    }

    /// Like `new` but the mount gets `opts` as given whatever `SQUEEZEFS_TEST_URING` says:
    /// for tests of the default transport.
    pub fn new_as_given(opts: &str) -> Mounted {
        Mounted::create(opts, true, false)
    }

    /// Like `new` but without allow_other: only uid 0 processes reach the mount, and the
    /// daemon alone checks permissions.
    pub fn new_private(opts: &str) -> Mounted {
        Mounted::create(opts, false, true)
    }

    fn create(opts: &str, allow_other: bool, test_transport: bool) -> Mounted {
        let dir = tempfile::Builder::new().prefix("sqzmnt").tempdir_in("/tmp").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let pool = dir.path().join("pool");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        run_ok(&["mkfs", pool.to_str().unwrap()]);
        let mut m = Mounted { dir, pool, mnt, opts: opts.to_string(), allow_other, test_transport, mounted: false };
        m.mount();
        m
    }

    fn full_opts(&self) -> String {
        let opts = if self.test_transport { with_test_transport(&self.opts) } else { self.opts.clone() };
        match (self.allow_other, opts.is_empty()) {
            (true, true) => "allow_other".into(),
            (true, false) => format!("allow_other,{opts}"),
            (false, true) => "defaults".into(),
            (false, false) => opts,
        }
    }

    pub fn mount(&mut self) {
        assert!(!self.mounted);
        run_ok(&["mount", self.pool.to_str().unwrap(), self.mnt.to_str().unwrap(), "-o", &self.full_opts()]);
        self.mounted = true;
    }

    pub fn umount(&mut self) {
        assert!(self.mounted);
        self.mounted = false;
        run_ok(&["umount", self.mnt.to_str().unwrap()]);
    }

    pub fn remount(&mut self) {
        self.umount();
        self.mount();
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Pid of the daemon serving this mount.
    pub fn daemon_pid(&self) -> i32 {
        let v = xattr_get(&self.mnt, "user.squeezefs.mount").expect("mount info");
        let s = String::from_utf8(v).unwrap();
        s.lines().find_map(|l| l.strip_prefix("pid=")).unwrap().parse().unwrap()
    }

    /// The test unmounted it itself (e.g. plain umount(2)).
    pub fn unmounted_by_hand(&mut self) {
        self.mounted = false;
    }

    /// The test mounted it itself (with its own command line).
    pub fn mounted_by_hand(&mut self) {
        self.mounted = true;
    }

    /// The daemon died (killed): clean up the dead mount, nothing was flushed at exit.
    pub fn forget_dead_mount(&mut self) {
        let c = cstr(&self.mnt);
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        self.mounted = false;
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted {
            let out = run(&["umount", self.mnt.to_str().unwrap()]);
            if !out.status.success() {
                let c = cstr(&self.mnt);
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}

pub fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// getxattr with the size-query protocol; Err(errno).
pub fn xattr_get(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let c = cstr(p);
    let n = CString::new(name).unwrap();
    let len = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
    if len < 0 {
        return Err(errno());
    }
    let mut buf = vec![0u8; len as usize];
    let got = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if got < 0 {
        return Err(errno());
    }
    buf.truncate(got as usize);
    Ok(buf)
}

/// Run `f` in a forked child after `become_` switched its credentials (false: it could
/// not, and the child exits with 255); returns what `f` returned (an errno, 0 for
/// success). `f` must only make system calls.
fn in_child(become_: impl FnOnce() -> bool, f: impl FnOnce() -> i32) -> i32 {
    unsafe {
        match libc::fork() {
            -1 => panic!("fork failed"),
            0 => libc::_exit(if become_() { f() } else { 255 }),
            pid => {
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
                assert!(libc::WIFEXITED(status), "child died");
                libc::WEXITSTATUS(status)
            }
        }
    }
}

/// Run `f` in a forked child with uid/gid `id` and no supplementary groups.
pub fn as_user(id: u32, f: impl FnOnce() -> i32) -> i32 {
    in_child(
        || unsafe {
            libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(id, id, id) == 0
                && libc::setresuid(id, id, id) == 0
        },
        f,
    )
}

/// The kernel's capget/capset layout (version 3: two 32-bit halves), written out here
/// rather than taken from the fs crate, so that these tests check its capability lookup
/// against the kernel ABI independently.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Run `f` in a forked child that stays uid 0 but drops `caps` (capability numbers) from
/// its effective and permitted sets, like a confined service.
pub fn as_confined_root(caps: &[u32], f: impl FnOnce() -> i32) -> i32 {
    in_child(
        || unsafe {
            let mut hdr = CapHeader { version: 0x2008_0522, pid: 0 };
            let mut data = [CapData::default(); 2];
            if libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) != 0 {
                return false;
            }
            for &cap in caps {
                let (i, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
                data[i].effective &= !bit;
                data[i].permitted &= !bit;
            }
            libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) == 0
        },
        f,
    )
}

/// Run `f` in a forked child whose filesystem uid and gid are `id` (real uid stays 0, as
/// in a file server acting for a client).
pub fn as_fsuid(id: u32, f: impl FnOnce() -> i32) -> i32 {
    in_child(
        || unsafe {
            libc::setfsgid(id);
            libc::setfsuid(id);
            libc::setfsuid(u32::MAX) as u32 == id
        },
        f,
    )
}

/// A syscall's result as 0 / errno.
pub fn rc(r: libc::c_int) -> i32 {
    if r < 0 {
        errno()
    } else {
        0
    }
}

/// The daemon's "mounted" log line says which request transport `uring_opt` (the `uring=`
/// option, or "" for the default) gave: io_uring wherever the kernel has it (Linux ≥ 6.14
/// with CONFIG_FUSE_IO_URING), /dev/fuse otherwise and for `off`.
pub fn assert_transport(m: &Mounted, uring_opt: &str) {
    let pid = m.daemon_pid();
    let kernel_has_it = Path::new("/sys/module/fuse/parameters/enable_uring").exists();
    // the default (no `uring=`) and `uring=on` take the fast path on a kernel that has it,
    // writing Y to enable_uring when it is N
    let want = match uring_opt {
        "" | "uring=on" if kernel_has_it => "requests: io_uring",
        "" => {
            eprintln!("kernel without FUSE over io_uring: the default mount serves /dev/fuse");
            "requests: /dev/fuse"
        }
        "uring=off" => "requests: /dev/fuse",
        other => panic!("assert_transport: {other}"),
    };
    let t = std::time::Instant::now();
    loop {
        let log = std::fs::read_to_string(m.pool.join("squeezefs.log")).unwrap_or_default();
        let line = log.lines().find(|l| l.contains(&format!("pid {pid}]")) && l.contains("mounted"));
        if let Some(line) = line {
            assert!(line.contains(want), "{uring_opt}: expected '{want}' in the daemon log line: {line}");
            return;
        }
        assert!(t.elapsed().as_secs() < 10, "no 'mounted' line for pid {pid} in the daemon log: {log}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `squeezefs ARGS` with only PATH and `env` in its environment (the object-store tests:
/// credentials come from the environment alone).
pub fn run_env(env: &std::collections::HashMap<String, String>, args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).env_clear().env("PATH", std::env::var("PATH").unwrap()).envs(env).output().unwrap()
}

/// The stdout of a command that must have succeeded.
pub fn ok(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Unmounts the mount point when dropped if still mounted: a failed assertion leaves no
/// live mount.
pub struct Unmount(pub String);

impl Drop for Unmount {
    fn drop(&mut self) {
        let mounted = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        if mounted.lines().any(|l| l.split(' ').nth(1) == Some(self.0.as_str())) {
            let _ = run(&["umount", &self.0]);
            let _ = Command::new("fusermount3").args(["-uz", &self.0]).output();
        }
    }
}
