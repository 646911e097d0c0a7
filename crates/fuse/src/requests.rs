//! Requests served since mount, per FUSE opcode: what a workload costs in kernel round trips.
//!
//! Read with `getfattr --only-values -n user.squeezefs.requests MNT` (the mount's root; any
//! user): one `NAME count` line per opcode seen, in opcode order. The operation core
//! (opcore.rs) counts every request of either transport but INIT before handling it, so
//! one that fails or gets ENOSYS is counted too.
//! The FUSE layer answers this attribute itself (the fs core knows no opcodes); like the
//! fs core's virtual attributes it never appears in listxattr.
use crate::abi::op;
use squeezefs_fs::{Creds, Fs, FsError, Ino, ROOT_INO};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

pub const XATTR_REQUESTS: &str = "user.squeezefs.requests";

/// Opcodes are below 64 (`enum fuse_opcode` ends at 53 in protocol 7.40); a larger one is
/// counted in the last slot.
const SLOTS: usize = 64;

pub struct RequestCounts {
    by_opcode: [AtomicU64; SLOTS],
}

impl Default for RequestCounts {
    fn default() -> Self {
        RequestCounts { by_opcode: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

impl RequestCounts {
    fn slot(&self, opcode: u32) -> &AtomicU64 {
        &self.by_opcode[(opcode as usize).min(SLOTS - 1)]
    }

    pub fn count(&self, opcode: u32) {
        // Relaxed: the counts order nothing; a reader sees each increment eventually
        self.slot(opcode).fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, opcode: u32) -> u64 {
        self.slot(opcode).load(Ordering::Relaxed)
    }

    /// The attribute's value: `NAME count` lines for the opcodes seen.
    pub fn report(&self) -> String {
        let mut s = String::new();
        for (opcode, c) in self.by_opcode.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(s, "{} {n}", op_name(opcode as u32));
            }
        }
        s
    }
}

/// getxattr as the operation core answers it: the counts on the root, the fs core otherwise.
pub(crate) fn getxattr(fs: &Fs, counts: &RequestCounts, c: &Creds, ino: Ino, name: &[u8]) -> Result<Vec<u8>, FsError> {
    if ino == ROOT_INO && name == XATTR_REQUESTS.as_bytes() {
        return Ok(counts.report().into_bytes());
    }
    fs.getxattr(c, ino, name)
}

/// The opcode's name in `enum fuse_opcode`, without the `FUSE_` prefix.
pub fn op_name(opcode: u32) -> String {
    let known = match opcode {
        op::LOOKUP => "LOOKUP",
        op::FORGET => "FORGET",
        op::GETATTR => "GETATTR",
        op::SETATTR => "SETATTR",
        op::READLINK => "READLINK",
        op::SYMLINK => "SYMLINK",
        op::MKNOD => "MKNOD",
        op::MKDIR => "MKDIR",
        op::UNLINK => "UNLINK",
        op::RMDIR => "RMDIR",
        op::RENAME => "RENAME",
        op::LINK => "LINK",
        op::OPEN => "OPEN",
        op::READ => "READ",
        op::WRITE => "WRITE",
        op::STATFS => "STATFS",
        op::RELEASE => "RELEASE",
        op::FSYNC => "FSYNC",
        op::SETXATTR => "SETXATTR",
        op::GETXATTR => "GETXATTR",
        op::LISTXATTR => "LISTXATTR",
        op::REMOVEXATTR => "REMOVEXATTR",
        op::FLUSH => "FLUSH",
        op::INIT => "INIT",
        op::OPENDIR => "OPENDIR",
        op::READDIR => "READDIR",
        op::RELEASEDIR => "RELEASEDIR",
        op::FSYNCDIR => "FSYNCDIR",
        op::ACCESS => "ACCESS",
        op::CREATE => "CREATE",
        op::INTERRUPT => "INTERRUPT",
        op::DESTROY => "DESTROY",
        op::IOCTL => "IOCTL",
        op::BATCH_FORGET => "BATCH_FORGET",
        op::FALLOCATE => "FALLOCATE",
        op::READDIRPLUS => "READDIRPLUS",
        op::RENAME2 => "RENAME2",
        op::LSEEK => "LSEEK",
        op::COPY_FILE_RANGE => "COPY_FILE_RANGE",
        _ => return format!("OPCODE_{opcode}"),
    };
    known.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lists_the_opcodes_seen_in_order() {
        let r = RequestCounts::default();
        assert_eq!(r.report(), "");
        r.count(op::SETATTR);
        r.count(op::LOOKUP);
        r.count(op::SETATTR);
        r.count(50);
        r.count(1000);
        assert_eq!(r.report(), "LOOKUP 1\nSETATTR 2\nOPCODE_50 1\nOPCODE_63 1\n");
        assert_eq!(r.get(op::SETATTR), 2);
    }
}
