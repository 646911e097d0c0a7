//! Namespace operations: lookup, create (mknod/mkdir/symlink), link, unlink, rmdir, rename.
//! Each runs its checks and changes in one metadata transaction.
use crate::error::{FsError, Result};
use crate::inodes::ParentChange;
use crate::rules::creds::{Cap, Creds};
use crate::rules::perm::{self, MAY_EXEC, MAY_WRITE, S_ISGID};
use crate::{rules::name, rules::time, Fs};
use squeezefs_pipeline::{FileKind, Ino, InodeAttr, MetaTx, Timestamp};

/// ext4's link limit (EXT4_LINK_MAX).
const LINK_MAX: u32 = 65000;

pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

/// Parent directory, checked for being a live directory.
fn dir_attr(tx: &mut MetaTx<'_>, dir: Ino) -> Result<InodeAttr> {
    let a = tx.get_inode(dir)?;
    if a.kind != FileKind::Dir {
        return Err(FsError::NotDir);
    }
    if a.nlink == 0 {
        return Err(FsError::NotFound);
    }
    Ok(a)
}

fn touch_dir(tx: &mut MetaTx<'_>, dir: &mut InodeAttr, now: Timestamp) -> Result<()> {
    dir.mtime = now;
    dir.ctime = now;
    tx.put_inode(dir)?;
    Ok(())
}

impl Fs {
    /// Look `name` up in `parent`; counts one kernel reference on success.
    pub fn lookup(&self, c: &Creds, parent: Ino, name: &[u8]) -> Result<InodeAttr> {
        name::check_lookup(name)?;
        let pa = self.stat(parent)?;
        if pa.kind != FileKind::Dir {
            return Err(FsError::NotDir);
        }
        self.check_perm(&pa, c, MAY_EXEC)?;
        let a = self.lookup_attr(parent, name)?;
        self.inodes.add_lookup(a.ino, 1);
        if a.kind != FileKind::Dir {
            // counted first: see inodes.rs on file nodes. Reached through another name of a
            // hard-linked file, it inherits from that name's directory from now on
            // (inherit.rs); `set_parent` drops its cached resolution then.
            self.inodes.set_parent(a.ino, parent, false);
        }
        Ok(a)
    }

    fn lookup_attr(&self, parent: Ino, name: &[u8]) -> Result<InodeAttr> {
        if name == b"." {
            return Ok(self.stat(parent)?);
        }
        if name == b".." {
            let p = self.inodes.parent(parent).ok_or(FsError::NotFound)?;
            return Ok(self.stat(p)?);
        }
        let (ino, kind) = self.engine.lookup(parent, name)?.ok_or(FsError::NotFound)?;
        if kind == FileKind::Dir && self.inodes.set_parent(ino, parent, true) == ParentChange::Moved {
            // a directory's parent changes only by a rename, which updated it; if it did not
            // (moved by another path), what the tree below inherits may differ
            self.inodes.bump_gen();
        }
        Ok(self.stat(ino)?)
    }

    /// Create a non-directory node (regular file, device, FIFO, socket); `perm` is already
    /// masked by the caller's umask. Counts one kernel reference.
    pub fn mknod(
        &self,
        c: &Creds,
        parent: Ino,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        rdev: u32,
    ) -> Result<InodeAttr> {
        if kind == FileKind::Dir || kind == FileKind::Symlink {
            return Err(FsError::Invalid("mknod creates files, devices, FIFOs and sockets"));
        }
        self.create_node(c, parent, name, kind, perm, rdev, None)
    }

    pub fn mkdir(&self, c: &Creds, parent: Ino, name: &[u8], perm: u32) -> Result<InodeAttr> {
        self.create_node(c, parent, name, FileKind::Dir, perm, 0, None)
    }

    pub fn symlink(&self, c: &Creds, parent: Ino, name: &[u8], target: &[u8]) -> Result<InodeAttr> {
        name::check_symlink_target(target)?;
        self.create_node(c, parent, name, FileKind::Symlink, 0o777, 0, Some(target))
    }

    #[allow(clippy::too_many_arguments)]
    fn create_node(
        &self,
        c: &Creds,
        parent: Ino,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        rdev: u32,
        target: Option<&[u8]>,
    ) -> Result<InodeAttr> {
        name::check_new(name)?;
        self.check_writable()?;
        let now = time::now();
        // a regular file's record size is fixed now: its directory's effective `recordsize`
        let record_size = match kind {
            FileKind::File => Some(self.new_file_record_size(parent)?),
            _ => None,
        };
        let attr = self.tx(|tx| {
            // VFS order: search permission, name taken (EEXIST), then may_create
            let mut pa = dir_attr(tx, parent)?;
            self.check_perm(&pa, c, MAY_EXEC)?;
            if tx.dir_get(parent, name)?.is_some() {
                return Err(FsError::Exists);
            }
            self.check_perm(&pa, c, MAY_WRITE | MAY_EXEC)?;
            if kind == FileKind::Dir && pa.nlink >= LINK_MAX {
                return Err(FsError::TooManyLinks);
            }
            let ino = tx.alloc_ino()?;
            // inode_init_owner: group from a setgid parent, which directories inherit
            let mut mode = perm & 0o7777;
            let gid = if pa.perm & S_ISGID != 0 {
                if kind == FileKind::Dir {
                    mode |= S_ISGID;
                }
                pa.gid
            } else {
                c.gid
            };
            if kind != FileKind::Dir
                && pa.perm & S_ISGID != 0
                && mode & (S_ISGID | perm::S_IXGRP) == (S_ISGID | perm::S_IXGRP)
                && !c.in_group(gid)
                && !c.capable(Cap::Fsetid)
            {
                mode &= !S_ISGID;
            }
            let attr = InodeAttr {
                size: target.map_or(0, |t| t.len() as u64),
                rdev,
                ..InodeAttr::new(ino, kind, mode, c.uid, gid, now)
            };
            tx.put_inode(&attr)?;
            if let Some(rs) = record_size {
                tx.set_record_size(ino, u64::from(rs))?;
            }
            if let Some(t) = target {
                tx.set_symlink_target(ino, t)?;
            }
            tx.dir_insert(parent, name, ino, kind)?;
            if kind == FileKind::Dir {
                pa.nlink += 1;
            }
            touch_dir(tx, &mut pa, now)?;
            Ok(attr)
        })?;
        if kind == FileKind::Dir {
            self.inodes.set_parent(attr.ino, parent, true);
        }
        self.inodes.add_lookup(attr.ino, 1);
        if kind != FileKind::Dir {
            self.inodes.set_parent(attr.ino, parent, false);
        }
        // a new inode has no properties of its own: nothing to read at its first write
        self.inodes.set_no_local(attr.ino);
        self.dirsync()?;
        // the record just published is the inode's whole state: no dirty data, no pending atime, and a
        // symlink's size is its target's length — no second metadata read per create
        Ok(attr)
    }

    /// Hard link `ino` as `newparent/newname`. Counts one kernel reference.
    pub fn link(&self, c: &Creds, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<InodeAttr> {
        name::check_new(newname)?;
        self.check_writable()?;
        let now = time::now();
        self.tx(|tx| {
            // VFS order: target name taken (EEXIST), may_create (EACCES), directory (EPERM)
            let mut a = tx.get_inode(ino)?;
            let mut pa = dir_attr(tx, newparent)?;
            if tx.dir_get(newparent, newname)?.is_some() {
                return Err(FsError::Exists);
            }
            self.check_perm(&pa, c, MAY_WRITE | MAY_EXEC)?;
            if a.kind == FileKind::Dir {
                return Err(FsError::Perm);
            }
            if a.nlink == 0 {
                return Err(FsError::NotFound);
            }
            if a.nlink >= LINK_MAX {
                return Err(FsError::TooManyLinks);
            }
            tx.dir_insert(newparent, newname, ino, a.kind)?;
            a.nlink += 1;
            a.ctime = now;
            tx.put_inode(&a)?;
            touch_dir(tx, &mut pa, now)
        })?;
        self.inodes.add_lookup(ino, 1);
        // the new name is the one it was reached by last (inherit.rs)
        self.inodes.set_parent(ino, newparent, false);
        self.dirsync()?;
        Ok(self.stat(ino)?)
    }

    pub fn unlink(&self, c: &Creds, parent: Ino, name: &[u8]) -> Result<()> {
        self.remove_entry(c, parent, name, false)
    }

    pub fn rmdir(&self, c: &Creds, parent: Ino, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(FsError::Invalid("rmdir of '.'"));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        self.remove_entry(c, parent, name, true)
    }

    fn remove_entry(&self, c: &Creds, parent: Ino, name: &[u8], want_dir: bool) -> Result<()> {
        name::check_lookup(name)?;
        self.check_writable()?;
        let now = time::now();
        let victim = self.tx(|tx| {
            let mut pa = dir_attr(tx, parent)?;
            self.check_perm(&pa, c, MAY_EXEC)?;
            let (ino, kind) = tx.dir_get(parent, name)?.ok_or(FsError::NotFound)?;
            let va = tx.get_inode(ino)?;
            if self.cfg.check_permissions {
                perm::check_delete(&pa, &va, c)?;
            }
            match (want_dir, kind == FileKind::Dir) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                (true, true) if !tx.dir_is_empty(ino)? => return Err(FsError::NotEmpty),
                _ => {}
            }
            tx.dir_remove(parent, name)?;
            if kind == FileKind::Dir {
                pa.nlink = pa.nlink.saturating_sub(1);
            }
            touch_dir(tx, &mut pa, now)?;
            self.drop_link(tx, va, now)?;
            Ok((ino, kind))
        })?;
        if victim.1 == FileKind::Dir {
            self.inodes.remove_parent(victim.0);
        }
        // a last release/forget between our reference check and the publish saw nlink > 0
        if !self.inodes.is_referenced(victim.0) {
            self.maybe_delete(victim.0)?;
        }
        self.dirsync()
    }

    /// One name of `a` went away: lower nlink; at zero delete it, or keep it as an orphan
    /// while the kernel or an open handle still references it (state machine: inodes.rs).
    fn drop_link(&self, tx: &mut MetaTx<'_>, mut a: InodeAttr, now: Timestamp) -> Result<()> {
        a.nlink = if a.kind == FileKind::Dir { 0 } else { a.nlink.saturating_sub(1) };
        a.ctime = now;
        if a.nlink > 0 {
            tx.put_inode(&a)?;
        } else if self.inodes.is_referenced(a.ino) {
            tx.put_inode(&a)?;
            tx.add_orphan(a.ino)?;
        } else {
            tx.delete_inode(a.ino)?;
        }
        Ok(())
    }

    /// rename/renameat2 with RENAME_NOREPLACE or RENAME_EXCHANGE.
    /// Before a rename that replaces an existing name: have the data of the regular file
    /// moving in (both files, for an exchange) commit no later than the rename
    /// (`Engine::order_data_before_rename`), so a crash after "write new, rename over old"
    /// leaves the old file or the new one, not an empty one. Looked up before the rename
    /// lock because the wait can last a txg commit and must not stall other renames; a name
    /// changed in between only makes this wait for the wrong file (best effort, as ext4's
    /// auto_da_alloc). Lookup errors are left to the rename itself to report.
    fn order_data_before_replacing(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        exchange: bool,
    ) -> Result<()> {
        let lookup = |dir, n| self.engine.lookup(dir, n).ok().flatten();
        let Some((dst, dkind)) = lookup(newparent, newname) else { return Ok(()) };
        let Some((src, skind)) = lookup(parent, name) else { return Ok(()) };
        if src == dst {
            return Ok(());
        }
        if skind == FileKind::File {
            self.engine.order_data_before_rename(src)?;
        }
        if exchange && dkind == FileKind::File {
            self.engine.order_data_before_rename(dst)?;
        }
        Ok(())
    }

    pub fn rename(
        &self,
        c: &Creds,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0 {
            return Err(FsError::Invalid("rename flags: only RENAME_NOREPLACE and RENAME_EXCHANGE"));
        }
        if flags & RENAME_NOREPLACE != 0 && flags & RENAME_EXCHANGE != 0 {
            return Err(FsError::Invalid("RENAME_NOREPLACE with RENAME_EXCHANGE"));
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        name::check_lookup(name)?;
        name::check_lookup(newname)?;
        for n in [name, newname] {
            if n == b"." || n == b".." {
                return Err(FsError::Busy);
            }
        }
        self.check_writable()?;
        if flags & RENAME_NOREPLACE == 0 {
            self.order_data_before_replacing(parent, name, newparent, newname, exchange)?;
        }
        let now = time::now();
        let rename_guard = self.rename_lock.lock();
        let (src, dst) = self.tx(|tx| {
            let mut pa = dir_attr(tx, parent)?;
            let mut npa = if newparent == parent { pa.clone() } else { dir_attr(tx, newparent)? };
            // checks in the VFS order (do_renameat2, vfs_rename, may_delete, may_create)
            self.check_perm(&pa, c, MAY_EXEC)?;
            self.check_perm(&npa, c, MAY_EXEC)?;
            let (sino, skind) = tx.dir_get(parent, name)?.ok_or(FsError::NotFound)?;
            let dst = tx.dir_get(newparent, newname)?;
            if exchange && dst.is_none() {
                return Err(FsError::NotFound);
            }
            if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
                return Err(FsError::Exists);
            }
            let mut sa = tx.get_inode(sino)?;
            let da = match dst {
                Some((dino, _)) => Some(tx.get_inode(dino)?),
                None => None,
            };
            // a directory cannot move below itself; its ancestor cannot be replaced
            if skind == FileKind::Dir && self.inodes.is_within(newparent, sino) {
                return Err(FsError::Invalid("cannot move a directory into its own subtree"));
            }
            if let Some(da) = da.as_ref().filter(|d| d.kind == FileKind::Dir) {
                if self.inodes.is_within(parent, da.ino) {
                    return Err(if exchange {
                        FsError::Invalid("cannot move a directory into its own subtree")
                    } else {
                        FsError::NotEmpty
                    });
                }
            }
            if da.as_ref().is_some_and(|d| d.ino == sino) {
                return Ok((None, None)); // two names of one inode: nothing to do
            }
            if self.cfg.check_permissions {
                perm::check_delete(&pa, &sa, c)?;
            }
            match &da {
                Some(da) => {
                    if self.cfg.check_permissions {
                        perm::check_delete(&npa, da, c)?;
                    }
                    if !exchange {
                        if skind == FileKind::Dir && da.kind != FileKind::Dir {
                            return Err(FsError::NotDir);
                        }
                        if skind != FileKind::Dir && da.kind == FileKind::Dir {
                            return Err(FsError::IsDir);
                        }
                    }
                }
                None => self.check_perm(&npa, c, MAY_WRITE | MAY_EXEC)?,
            }
            if self.cfg.check_permissions && parent != newparent {
                // a directory changing parent rewrites its "..": needs write on it
                if skind == FileKind::Dir {
                    perm::check(&sa, c, MAY_WRITE)?;
                }
                if let Some(da) = da.as_ref().filter(|d| exchange && d.kind == FileKind::Dir) {
                    perm::check(da, c, MAY_WRITE)?;
                }
            }
            if let Some(da) = da.as_ref().filter(|d| !exchange && d.kind == FileKind::Dir) {
                if !tx.dir_is_empty(da.ino)? {
                    return Err(FsError::NotEmpty);
                }
            }
            if parent != newparent {
                // a directory that changes parent adds a link to its new parent, unless it
                // replaces a directory there (whose link goes); in an exchange each side
                // gains what the other loses
                let dst_dir = da.as_ref().is_some_and(|d| d.kind == FileKind::Dir);
                let src_dir = skind == FileKind::Dir;
                let new_gains = src_dir && !dst_dir;
                let old_gains = exchange && dst_dir && !src_dir;
                if (new_gains && npa.nlink >= LINK_MAX) || (old_gains && pa.nlink >= LINK_MAX) {
                    return Err(FsError::TooManyLinks);
                }
            }
            // all checks passed: change the namespace
            tx.dir_remove(parent, name)?;
            if let Some(da) = &da {
                tx.dir_remove(newparent, newname)?;
                if exchange {
                    tx.dir_insert(parent, name, da.ino, da.kind)?;
                } else {
                    if da.kind == FileKind::Dir {
                        npa.nlink = npa.nlink.saturating_sub(1);
                    }
                    self.drop_link(tx, da.clone(), now)?;
                }
            }
            tx.dir_insert(newparent, newname, sino, skind)?;
            if parent != newparent {
                if skind == FileKind::Dir {
                    pa.nlink = pa.nlink.saturating_sub(1);
                    npa.nlink = npa.nlink.saturating_add(1);
                }
                if let Some(da) = da.as_ref().filter(|d| exchange && d.kind == FileKind::Dir) {
                    npa.nlink = npa.nlink.saturating_sub(1);
                    pa.nlink = pa.nlink.saturating_add(1);
                    let _ = da;
                }
            }
            sa.ctime = now;
            tx.put_inode(&sa)?;
            if let Some(da) = da.as_ref().filter(|_| exchange) {
                let mut da = da.clone();
                da.ctime = now;
                tx.put_inode(&da)?;
            }
            if parent == newparent {
                // one directory: merge the nlink changes (none for same-dir renames,
                // except a replaced directory)
                npa.mtime = now;
                npa.ctime = now;
                tx.put_inode(&npa)?;
            } else {
                touch_dir(tx, &mut pa, now)?;
                touch_dir(tx, &mut npa, now)?;
            }
            Ok((Some((sino, skind)), da.map(|d| (d.ino, d.kind))))
        })?;
        // what moved: (from, to), for inheritance (inherit.rs `moved`)
        let mut moved = Vec::new();
        if let Some((sino, skind)) = src {
            match skind {
                FileKind::Dir => {
                    self.inodes.set_parent(sino, newparent, true);
                }
                _ => {
                    self.inodes.move_node(sino, newparent);
                }
            }
            moved.push((parent, newparent));
        }
        if let Some((dino, dkind)) = dst.filter(|_| exchange) {
            if dkind != FileKind::Dir {
                self.inodes.move_node(dino, parent);
            }
            moved.push((newparent, parent));
        }
        if let Some((dino, FileKind::Dir)) = dst {
            if exchange {
                self.inodes.set_parent(dino, parent, true);
            } else {
                self.inodes.remove_parent(dino);
            }
            if !exchange && !self.inodes.is_referenced(dino) {
                self.maybe_delete(dino)?;
            }
        } else if let Some((dino, _)) = dst.filter(|_| !exchange) {
            if !self.inodes.is_referenced(dino) {
                self.maybe_delete(dino)?;
            }
        }
        // other renames need not wait for this one's commit
        drop(rename_guard);
        for (from, to) in moved {
            self.moved(from, to);
        }
        self.dirsync()
    }
}
