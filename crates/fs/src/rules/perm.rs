//! POSIX permission rules, as the Linux VFS applies them for ext4 (generic_permission,
//! may_delete, setattr_prepare). Pure functions of (attributes, credentials).
use crate::error::{FsError, Result};
use crate::rules::creds::{Cap, Creds};
use squeezefs_pipeline::{FileKind, InodeAttr};

pub const MAY_EXEC: u32 = 1;
pub const MAY_WRITE: u32 = 2;
pub const MAY_READ: u32 = 4;

pub const S_ISUID: u32 = 0o4000;
pub const S_ISGID: u32 = 0o2000;
pub const S_ISVTX: u32 = 0o1000;
pub const S_IXGRP: u32 = 0o010;

/// generic_permission: `mask` is a combination of MAY_*; EACCES when denied. The mode
/// bits decide first; only when they refuse do capabilities count, as in the kernel (and a
/// caller owning what it touches never has its capabilities looked up).
pub fn check(attr: &InodeAttr, c: &Creds, mask: u32) -> Result<()> {
    let bits = if c.uid == attr.uid {
        (attr.perm >> 6) & 7
    } else if c.in_group(attr.gid) {
        (attr.perm >> 3) & 7
    } else {
        attr.perm & 7
    };
    if bits & mask == mask || dac_overridden(attr, c, mask) {
        Ok(())
    } else {
        Err(FsError::Access)
    }
}

/// The capability half of generic_permission: directories are searchable and readable
/// with CAP_DAC_READ_SEARCH and anything with CAP_DAC_OVERRIDE; files are readable with
/// CAP_DAC_READ_SEARCH, readable and writable with CAP_DAC_OVERRIDE, and executable with
/// it only if some x bit is set.
fn dac_overridden(attr: &InodeAttr, c: &Creds, mask: u32) -> bool {
    if attr.kind == FileKind::Dir {
        return (mask & MAY_WRITE == 0 && c.capable(Cap::DacReadSearch)) || c.capable(Cap::DacOverride);
    }
    if mask == MAY_READ && c.capable(Cap::DacReadSearch) {
        return true;
    }
    (mask & MAY_EXEC == 0 || attr.perm & 0o111 != 0) && c.capable(Cap::DacOverride)
}

/// inode_owner_or_capable: the owner, or CAP_FOWNER.
pub fn is_owner(attr: &InodeAttr, c: &Creds) -> bool {
    c.uid == attr.uid || c.capable(Cap::Fowner)
}

/// may_delete/may_create on the directory plus the sticky-bit rule for the victim.
pub fn check_delete(dir: &InodeAttr, victim: &InodeAttr, c: &Creds) -> Result<()> {
    check(dir, c, MAY_WRITE | MAY_EXEC)?;
    if dir.perm & S_ISVTX != 0 && c.uid != dir.uid && c.uid != victim.uid && !c.capable(Cap::Fowner) {
        return Err(FsError::Perm);
    }
    Ok(())
}

/// Mode bits after a write or truncate by `c` of a file of group `gid`
/// (setattr_should_drop_suidgid): setuid always goes; setgid goes with group-exec, or
/// without it when `c` is not in the file's group; CAP_FSETID keeps both.
pub fn mode_after_write(perm: u32, gid: u32, c: &Creds) -> u32 {
    if perm & (S_ISUID | S_ISGID) == 0 || c.capable(Cap::Fsetid) {
        return perm;
    }
    let mut p = strip_suid_sgid(perm);
    if p & S_ISGID != 0 && !c.in_group(gid) {
        p &= !S_ISGID;
    }
    p
}

/// Mode bits of a non-directory after a chown by `c` (chown_common): setuid always goes,
/// setgid as `setattr_should_drop_sgid` decides from the group the file had before.
pub fn mode_after_chown(perm: u32, old_gid: u32, c: &Creds) -> u32 {
    let mut p = perm & !S_ISUID;
    if p & S_ISGID != 0 && (p & S_IXGRP != 0 || !(c.in_group(old_gid) || c.capable(Cap::Fsetid))) {
        p &= !S_ISGID;
    }
    p
}

/// setuid cleared; setgid cleared if group-executable.
pub fn strip_suid_sgid(perm: u32) -> u32 {
    let mut p = perm & !S_ISUID;
    if p & S_IXGRP != 0 {
        p &= !S_ISGID;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::creds::ALL_CAPS;
    use squeezefs_pipeline::Timestamp;

    fn attr(kind: FileKind, perm: u32, uid: u32, gid: u32) -> InodeAttr {
        InodeAttr {
            ino: 2,
            kind,
            perm,
            uid,
            gid,
            nlink: 1,
            size: 0,
            blocks_bytes: 0,
            rdev: 0,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: Timestamp::default(),
            generation: 0,
        }
    }

    #[test]
    fn owner_group_other_classes_are_exclusive() {
        // owner has no read even though others do: denied (classes do not fall through)
        let a = attr(FileKind::File, 0o044, 1000, 100);
        let owner = Creds::with_groups(1000, 100, vec![]);
        assert!(matches!(check(&a, &owner, MAY_READ), Err(FsError::Access)));
        let member = Creds::with_groups(2000, 5, vec![100]);
        assert!(check(&a, &member, MAY_READ).is_ok());
        let other = Creds::with_groups(3000, 5, vec![]);
        assert!(check(&a, &other, MAY_READ).is_ok());
        assert!(matches!(check(&a, &other, MAY_WRITE), Err(FsError::Access)));
    }

    #[test]
    fn root_needs_an_x_bit_to_exec_files_but_not_dirs() {
        let root = Creds::root();
        assert!(check(&attr(FileKind::File, 0o600, 1, 1), &root, MAY_EXEC).is_err());
        assert!(check(&attr(FileKind::File, 0o601, 1, 1), &root, MAY_EXEC).is_ok());
        assert!(check(&attr(FileKind::Dir, 0o000, 1, 1), &root, MAY_EXEC).is_ok());
        assert!(check(&attr(FileKind::File, 0o000, 1, 1), &root, MAY_READ | MAY_WRITE).is_ok());
    }

    #[test]
    fn root_without_dac_capabilities_gets_the_mode_bits_only() {
        // a confined service: uid 0 but CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped
        let caps = ALL_CAPS & !(1 << Cap::DacOverride as u32) & !(1 << Cap::DacReadSearch as u32);
        let confined = Creds::with_caps(0, 0, vec![], caps);
        let theirs = attr(FileKind::File, 0o600, 1000, 1000);
        assert!(matches!(check(&theirs, &confined, MAY_READ), Err(FsError::Access)));
        assert!(matches!(check(&theirs, &confined, MAY_WRITE), Err(FsError::Access)));
        let private_dir = attr(FileKind::Dir, 0o700, 1000, 1000);
        assert!(matches!(check(&private_dir, &confined, MAY_EXEC), Err(FsError::Access)));
        // its own files still follow the owner bits
        assert!(check(&attr(FileKind::File, 0o600, 0, 0), &confined, MAY_READ | MAY_WRITE).is_ok());
        assert!(matches!(check(&attr(FileKind::File, 0o000, 0, 0), &confined, MAY_READ), Err(FsError::Access)));
    }

    #[test]
    fn dac_read_search_reads_and_searches_but_never_writes() {
        let reader = Creds::with_caps(1000, 1000, vec![], 1 << Cap::DacReadSearch as u32);
        let dir = attr(FileKind::Dir, 0o700, 0, 0);
        assert!(check(&dir, &reader, MAY_READ | MAY_EXEC).is_ok());
        assert!(matches!(check(&dir, &reader, MAY_WRITE | MAY_EXEC), Err(FsError::Access)));
        let file = attr(FileKind::File, 0o600, 0, 0);
        assert!(check(&file, &reader, MAY_READ).is_ok());
        assert!(matches!(check(&file, &reader, MAY_READ | MAY_WRITE), Err(FsError::Access)));
    }

    #[test]
    fn sticky_dir_delete_needs_ownership_or_cap_fowner() {
        let dir = attr(FileKind::Dir, 0o1777, 0, 0);
        let victim = attr(FileKind::File, 0o644, 1000, 1000);
        let no_fowner = Creds::with_caps(0, 0, vec![], ALL_CAPS & !(1 << Cap::Fowner as u32));
        // uid 0 owns the directory here, so the owner rule lets it delete
        assert!(check_delete(&dir, &victim, &no_fowner).is_ok());
        let their_dir = attr(FileKind::Dir, 0o1777, 2000, 2000);
        assert!(matches!(check_delete(&their_dir, &victim, &no_fowner), Err(FsError::Perm)));
        assert!(check_delete(&their_dir, &victim, &Creds::root()).is_ok());
    }

    #[test]
    fn sticky_dir_allows_only_owners_to_delete() {
        let dir = attr(FileKind::Dir, 0o1777, 0, 0);
        let victim = attr(FileKind::File, 0o644, 1000, 1000);
        let stranger = Creds::with_groups(2000, 2000, vec![]);
        assert!(matches!(check_delete(&dir, &victim, &stranger), Err(FsError::Perm)));
        let owner = Creds::with_groups(1000, 1000, vec![]);
        assert!(check_delete(&dir, &victim, &owner).is_ok());
        assert!(check_delete(&dir, &victim, &Creds::root()).is_ok());
    }

    #[test]
    fn write_strips_setuid_and_exec_setgid_for_non_root() {
        let c = Creds::with_groups(1000, 1000, vec![]);
        assert_eq!(mode_after_write(0o6755, 1000, &c), 0o0755);
        // setgid without group exec is mandatory-locking: kept for a member of the group
        assert_eq!(mode_after_write(0o6745, 1000, &c), 0o2745);
        // ... and cleared for anyone else (Linux >= 6.2)
        assert_eq!(mode_after_write(0o6745, 50, &c), 0o0745);
        assert_eq!(mode_after_write(0o6755, 50, &Creds::root()), 0o6755);
    }
}
