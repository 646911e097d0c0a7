//! The caller's credentials. FUSE tells us uid, gid and pid only; supplementary groups are
//! read from /proc/PID/status when a permission check actually needs them (rarely: only
//! when the caller is neither the owner nor in the file's primary group).
use std::sync::OnceLock;

#[derive(Debug)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pid: u32,
    groups: OnceLock<Vec<u32>>,
}

impl Creds {
    pub fn root() -> Creds {
        Creds::with_groups(0, 0, Vec::new())
    }

    /// Credentials with a known supplementary group list (tests, non-FUSE callers).
    pub fn with_groups(uid: u32, gid: u32, groups: Vec<u32>) -> Creds {
        let cell = OnceLock::new();
        let _ = cell.set(groups);
        Creds { uid, gid, pid: 0, groups: cell }
    }

    /// Credentials of a FUSE request; groups come from /proc/`pid`/status on demand.
    pub fn from_request(uid: u32, gid: u32, pid: u32) -> Creds {
        Creds { uid, gid, pid, groups: OnceLock::new() }
    }

    /// Root has CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN and CAP_FSETID here.
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        gid == self.gid || self.groups.get_or_init(|| proc_groups(self.pid)).contains(&gid)
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
}
