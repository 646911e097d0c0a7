//! The caller's credentials. FUSE tells us uid, gid and pid only. What a permission rule
//! needs beyond that is read from the kernel on demand, at most once per request:
//! * supplementary groups from /proc/PID/status, only when the caller is neither the owner
//!   nor in the file's primary group;
//! * capabilities with capget(2), only when the mode bits or the ownership rules have
//!   already refused (the kernel's order: DAC first, then `capable()`), so a process owning
//!   what it touches never pays for the lookup.
//!
//! Invariant: a capability counts only when the caller lives in our user namespace. The
//! kernel honours a capability of a nested namespace only over inodes whose owner and group
//! map into it; we do not model mappings, so such a caller gets the mode bits alone — never
//! more than the kernel would grant.
use std::sync::OnceLock;

/// The capabilities our permission rules consult (numbers of linux/capability.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cap {
    /// chown to another user, chgrp to a group one is not in
    Chown = 0,
    /// read, write and search whatever the mode bits say (exec needs one x bit)
    DacOverride = 1,
    /// read files, read and search directories
    DacReadSearch = 2,
    /// act as the owner: chmod, explicit times, sticky-directory deletes
    Fowner = 3,
    /// keep setuid/setgid on write and chmod
    Fsetid = 4,
    /// trusted.* and security.* attributes
    SysAdmin = 21,
}

/// Every capability (what root holds unless something dropped them).
pub const ALL_CAPS: u64 = u64::MAX;

#[derive(Debug)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pid: u32,
    groups: OnceLock<Vec<u32>>,
    /// effective capability set, bit n = capability n
    caps: OnceLock<u64>,
}

impl Creds {
    pub fn root() -> Creds {
        Creds::with_groups(0, 0, Vec::new())
    }

    /// Credentials with a known supplementary group list (tests, non-FUSE callers): uid 0
    /// holds every capability, any other uid none.
    pub fn with_groups(uid: u32, gid: u32, groups: Vec<u32>) -> Creds {
        Creds::with_caps(uid, gid, groups, if uid == 0 { ALL_CAPS } else { 0 })
    }

    /// Fully specified credentials (tests of confined processes).
    pub fn with_caps(uid: u32, gid: u32, groups: Vec<u32>, caps: u64) -> Creds {
        Creds { uid, gid, pid: 0, groups: OnceLock::from(groups), caps: OnceLock::from(caps) }
    }

    /// Credentials of a FUSE request; groups and capabilities come from `pid` on demand.
    pub fn from_request(uid: u32, gid: u32, pid: u32) -> Creds {
        Creds { uid, gid, pid, groups: OnceLock::new(), caps: OnceLock::new() }
    }

    /// capable(): whether the caller holds `cap` in its effective set.
    pub fn capable(&self, cap: Cap) -> bool {
        let caps = *self.caps.get_or_init(|| proc_caps(self.uid, self.pid));
        caps & (1u64 << cap as u32) != 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        gid == self.gid || self.groups.get_or_init(|| proc_groups(self.pid)).contains(&gid)
    }
}

/// Effective capabilities of thread `pid`. A request without a pid comes from the kernel
/// itself (writeback, release), on behalf of a check the kernel already made: uid 0 then
/// keeps root's powers. A thread that is gone, or lives in another user namespace, gets none.
fn proc_caps(uid: u32, pid: u32) -> u64 {
    if pid == 0 {
        return if uid == 0 { ALL_CAPS } else { 0 };
    }
    match capget_effective(pid) {
        Some(0) | None => 0,
        Some(caps) if same_user_namespace(pid) => caps,
        Some(_) => 0,
    }
}

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

/// _LINUX_CAPABILITY_VERSION_3: 64-bit sets in two 32-bit halves.
const CAP_VERSION_3: u32 = 0x2008_0522;

fn capget_effective(pid: u32) -> Option<u64> {
    let mut hdr = CapHeader { version: CAP_VERSION_3, pid: i32::try_from(pid).ok()? };
    let mut data = [CapData::default(); 2];
    // SAFETY: hdr and data are the kernel's layout for version 3 (two data elements).
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) };
    (r == 0).then(|| u64::from(data[0].effective) | (u64::from(data[1].effective) << 32))
}

/// Whether `pid` is in the daemon's user namespace (compared by namespace inode).
fn same_user_namespace(pid: u32) -> bool {
    static OURS: OnceLock<Option<u64>> = OnceLock::new();
    let ns_ino = |p: &str| std::fs::metadata(p).ok().map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    let ours = *OURS.get_or_init(|| ns_ino("/proc/self/ns/user"));
    match (ours, ns_ino(&format!("/proc/{pid}/ns/user"))) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// Supplementary groups of `pid` ("Groups:" line of /proc/PID/status); empty if unknown.
fn proc_groups(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    parse_groups_line(&status)
}

fn parse_groups_line(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|rest| rest.split_whitespace().filter_map(|g| g.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line_is_parsed() {
        let s = "Name:\tx\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups_line(s), vec![4, 24, 27]);
        assert_eq!(parse_groups_line("Groups:\n"), Vec::<u32>::new());
    }

    #[test]
    fn own_process_groups_are_readable() {
        let c = Creds::from_request(1000, 1000, std::process::id());
        // our own primary group always counts
        assert!(c.in_group(1000));
    }

    /// CapEff of /proc/self/status, the kernel's own rendering of what capget returns.
    fn status_cap_eff() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap().trim();
        u64::from_str_radix(hex, 16).unwrap()
    }

    #[test]
    fn capget_agrees_with_proc_status() {
        assert_eq!(capget_effective(std::process::id()), Some(status_cap_eff()));
        let c = Creds::from_request(0, 0, std::process::id());
        let eff = status_cap_eff();
        assert_eq!(c.capable(Cap::DacOverride), eff & (1 << 1) != 0);
        assert_eq!(c.capable(Cap::SysAdmin), eff & (1 << 21) != 0);
    }

    #[test]
    fn a_gone_process_has_no_capabilities() {
        // pid_max is at most 2^22: this pid cannot exist
        let c = Creds::from_request(0, 0, (1 << 22) + 7);
        assert!(!c.capable(Cap::DacOverride));
        assert!(!c.capable(Cap::Chown));
    }

    #[test]
    fn a_thread_that_dropped_a_capability_is_refused_it() {
        use std::sync::mpsc;
        let (tid_tx, tid_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // drop CAP_DAC_OVERRIDE from this thread's effective set only
            let tid = unsafe { libc::gettid() } as u32;
            let mut hdr = CapHeader { version: CAP_VERSION_3, pid: 0 };
            let mut data = [CapData::default(); 2];
            unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) };
            data[0].effective &= !(1 << Cap::DacOverride as u32);
            let mut hdr = CapHeader { version: CAP_VERSION_3, pid: 0 };
            let r = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) };
            assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
            tid_tx.send((tid, u64::from(data[0].effective))).unwrap();
            done_rx.recv().unwrap();
        });
        let (tid, eff_low) = tid_rx.recv().unwrap();
        let c = Creds::from_request(0, 0, tid);
        assert!(!c.capable(Cap::DacOverride));
        assert_eq!(c.capable(Cap::Chown), eff_low & 1 != 0);
        // the process's other threads keep it
        let own = Creds::from_request(0, 0, std::process::id());
        assert_eq!(own.capable(Cap::DacOverride), status_cap_eff() & (1 << 1) != 0);
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn kernel_requests_keep_root_powers() {
        assert!(Creds::from_request(0, 0, 0).capable(Cap::Fowner));
        assert!(!Creds::from_request(1000, 1000, 0).capable(Cap::Fowner));
    }
}
