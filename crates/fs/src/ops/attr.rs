//! getattr / setattr (chmod, chown, truncate, utimensat) with the rules of setattr_prepare.
use crate::error::{FsError, Result};
use crate::rules::creds::{Cap, Creds};
use crate::rules::perm::{self, MAY_WRITE, S_ISGID};
use crate::{rules::time, Fs};
use squeezefs_pipeline::{FileKind, Ino, InodeAttr, Timestamp};

/// Largest file size (ext4 with 4 KiB blocks: s_maxbytes = (2^32 - 1) blocks = 16 TiB - 4 KiB).
pub const MAX_FILE_SIZE: u64 = (16 << 40) - 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    /// UTIME_NOW
    Now,
    At(Timestamp),
}

/// The fields of one setattr request; `None` leaves a field unchanged (UTIME_OMIT).
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    /// explicit ctime (the kernel sends it with the writeback cache)
    pub ctime: Option<Timestamp>,
    /// set when the request came through an open file (ftruncate): no permission check
    pub fh: Option<u64>,
}

impl Fs {
    pub fn getattr(&self, ino: Ino) -> Result<InodeAttr> {
        Ok(self.stat(ino)?)
    }

    pub fn setattr(&self, c: &Creds, ino: Ino, s: &SetAttr) -> Result<InodeAttr> {
        self.check_writable()?;
        let now = time::now();
        let checks = self.cfg.check_permissions;
        // size first: the data path owns it, and a failed truncate must change nothing else
        let cur = self.stat(ino)?;
        if let Some(size) = s.size {
            match cur.kind {
                FileKind::File => {}
                FileKind::Dir => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("truncate of a non-regular file")),
            }
            if size > MAX_FILE_SIZE {
                return Err(FsError::FileTooBig);
            }
            if checks && s.fh.is_none() {
                perm::check(&cur, c, MAY_WRITE)?;
            }
        }
        let attr_change = s.mode.is_some()
            || s.uid.is_some()
            || s.gid.is_some()
            || s.atime.is_some()
            || s.mtime.is_some()
            || s.ctime.is_some();
        if attr_change && s.size.is_some() {
            // validate everything before the size changes (the data path is not transactional)
            self.tx(|tx| {
                let a = tx.get_inode(ino)?;
                if checks {
                    check_setattr(&a, c, s)?;
                }
                Ok(())
            })?;
        }
        if let Some(size) = s.size {
            self.engine.set_size(ino, size)?;
        }
        // attributes only: one record into the engine's namespace delta, durable with the
        // next txg
        self.engine.update_attr(ino, |a: &mut InodeAttr| -> Result<((), bool)> {
            if attr_change && s.size.is_none() && checks {
                check_setattr(a, c, s)?;
            }
            let mut changed = false;
            if s.size.is_some() {
                a.mtime = now;
                a.ctime = now;
                a.perm = perm::mode_after_write(a.perm, a.gid, c);
                changed = true;
            }
            if s.uid.is_some() || s.gid.is_some() {
                let old_gid = a.gid;
                if let Some(uid) = s.uid {
                    a.uid = uid;
                }
                if let Some(gid) = s.gid {
                    a.gid = gid;
                }
                if a.kind != FileKind::Dir {
                    a.perm = perm::mode_after_chown(a.perm, old_gid, c);
                }
                a.ctime = now;
                changed = true;
            }
            if let Some(mode) = s.mode {
                let mut mode = mode & 0o7777;
                if checks && !c.in_group(a.gid) && !c.capable(Cap::Fsetid) {
                    mode &= !S_ISGID;
                }
                a.perm = mode;
                a.ctime = now;
                changed = true;
            }
            if s.atime.is_some() {
                // an explicit atime replaces what a read decided and has not written (atime.rs)
                self.atimes.forget(ino);
            }
            for (t, field) in [(s.atime, &mut a.atime), (s.mtime, &mut a.mtime)] {
                if let Some(t) = t {
                    *field = match t {
                        TimeSet::Now => now,
                        TimeSet::At(ts) => time::clamp(ts),
                    };
                    changed = true;
                }
            }
            if s.atime.is_some() || s.mtime.is_some() {
                a.ctime = now;
            }
            if let Some(ct) = s.ctime {
                a.ctime = time::clamp(ct);
                changed = true;
            }
            Ok(((), changed))
        })?;
        self.attrsync()?;
        Ok(self.stat(ino)?)
    }
}

/// setattr_prepare: who may change what (EPERM for ownership rules, EACCES for
/// UTIME_NOW by a writer who is not the owner). Capabilities are looked up only when the
/// ownership rule refuses.
fn check_setattr(a: &InodeAttr, c: &Creds, s: &SetAttr) -> Result<()> {
    // chown_ok: the owner may "change" the owner to itself; anything else needs CAP_CHOWN
    if let Some(uid) = s.uid {
        let owner_keeps_it = c.uid == a.uid && uid == a.uid;
        if !owner_keeps_it && !c.capable(Cap::Chown) {
            return Err(FsError::Perm);
        }
    }
    // chgrp_ok: the owner may pick one of its own groups
    if let Some(gid) = s.gid {
        let owner_picks_own_group = c.uid == a.uid && (gid == a.gid || c.in_group(gid));
        if !owner_picks_own_group && !c.capable(Cap::Chown) {
            return Err(FsError::Perm);
        }
    }
    if let Some(mode) = s.mode {
        // the kernel clears setuid/setgid after a write by sending the new mode with the
        // writer's credentials (file_remove_privs): allowed whoever the writer is
        // (only for a caller who may write the file, and only when a bit actually goes: a
        // chmod by anyone else, even to the mode the file has, is EPERM)
        let privs = perm::S_ISUID | S_ISGID;
        let mode = mode & 0o7777;
        let only_drops_privs = a.perm & privs != 0
            && mode != a.perm
            && (mode == perm::strip_suid_sgid(a.perm) || mode == a.perm & !privs)
            && perm::check(a, c, MAY_WRITE).is_ok();
        if !only_drops_privs && !perm::is_owner(a, c) {
            return Err(FsError::Perm);
        }
    }
    // With the writeback cache the kernel sends every setattr of a regular file with a
    // ctime, and mtime as a value, never as "now"; its own flush of the times it cached is
    // mtime + ctime alone. atime still tells the two utimensat forms apart: explicit needs
    // the owner (or CAP_FOWNER), "now" the owner or a writer. mtime without atime may be the
    // flush, sent with whatever credentials the flushing task has: allowed.
    // vfs_utimes: only "both now" (times == NULL) is the writer's ATTR_TOUCH; one time
    // now and the other omitted is ATTR_TIMES_SET, which needs the owner.
    let explicit = |t: Option<TimeSet>| matches!(t, Some(TimeSet::At(_)));
    let (set_explicitly, set_to_now) = if s.ctime.is_some() {
        match s.atime {
            Some(TimeSet::At(_)) => (true, false),
            // atime now with mtime (sent as a value): both now
            Some(TimeSet::Now) if s.mtime.is_some() => (false, true),
            Some(TimeSet::Now) => (true, false),
            None => (false, false),
        }
    } else if s.size.is_some() && s.atime.is_none() {
        // truncate(2) sends its own "mtime = now" (ATTR_MTIME without ATTR_MTIME_SET)
        (explicit(s.mtime), false)
    } else {
        let both_now = s.atime == Some(TimeSet::Now) && s.mtime == Some(TimeSet::Now);
        (explicit(s.atime) || explicit(s.mtime) || (s.atime.is_some() != s.mtime.is_some()), both_now)
    };
    if set_explicitly {
        if !perm::is_owner(a, c) {
            return Err(FsError::Perm);
        }
    } else if set_to_now && !perm::is_owner(a, c) {
        perm::check(a, c, MAY_WRITE)?;
    }
    Ok(())
}
