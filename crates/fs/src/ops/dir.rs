//! Directory streams. Offsets given to the kernel: 1 after ".", 2 after "..", and
//! `cookie + 2` after an engine entry (engine cookies are stable and increasing, so a
//! listing resumes correctly even while entries are added or removed).
use crate::error::{FsError, Result};
use crate::handles::Handle;
use crate::rules::creds::Creds;
use crate::rules::perm::MAY_READ;
use crate::{inodes, Fs};
use squeezefs_pipeline::{FileKind, Ino, InodeAttr};

const DOT_OFFSETS: u64 = 2;

#[derive(Clone, Debug)]
pub struct DirItem {
    pub ino: Ino,
    pub kind: FileKind,
    pub name: Vec<u8>,
    /// offset of the next entry (what the kernel passes back to continue)
    pub next_offset: u64,
    /// attributes (readdirplus only; not set for "." and "..")
    pub attr: Option<InodeAttr>,
}

/// Engine cookie to resume after, for a kernel offset past the dot entries.
fn cookie_after(offset: u64) -> u64 {
    offset.saturating_sub(DOT_OFFSETS)
}

fn offset_of_cookie(cookie: u64) -> u64 {
    cookie.saturating_add(DOT_OFFSETS)
}

impl Fs {
    pub fn opendir(&self, c: &Creds, ino: Ino, _flags: i32) -> Result<u64> {
        let a = self.stat(ino)?;
        if a.kind != FileKind::Dir {
            return Err(FsError::NotDir);
        }
        self.check_perm(&a, c, MAY_READ)?;
        self.inodes.add_open(ino);
        Ok(self.handles.insert(Handle { ino, write: false }))
    }

    pub fn releasedir(&self, fh: u64) -> Result<()> {
        let h = self.handles.remove(fh).ok_or(FsError::BadHandle)?;
        if self.inodes.close(h.ino) == inodes::Drop::Unreferenced {
            self.maybe_delete(h.ino)?;
        }
        Ok(())
    }

    /// Up to `limit` entries after kernel offset `offset`; `plus` adds attributes.
    /// With `plus`, the caller must `remember_entry` each entry it passes to the kernel.
    pub fn readdir(&self, dir: Ino, offset: u64, limit: usize, plus: bool) -> Result<Vec<DirItem>> {
        let mut out = Vec::new();
        if offset == 0 {
            out.push(DirItem { ino: dir, kind: FileKind::Dir, name: b".".to_vec(), next_offset: 1, attr: None });
        }
        if offset <= 1 {
            let parent = self.inodes.parent(dir).unwrap_or(dir);
            out.push(DirItem { ino: parent, kind: FileKind::Dir, name: b"..".to_vec(), next_offset: 2, attr: None });
        }
        let want = limit.saturating_sub(out.len()).max(1);
        for e in self.engine.dir_list(dir, cookie_after(offset), want)? {
            if e.kind == FileKind::Dir && self.inodes.set_parent(e.ino, dir, true) == inodes::ParentChange::Moved {
                self.inodes.bump_gen();
            }
            let attr = if plus {
                match self.stat(e.ino) {
                    Ok(a) => Some(a),
                    Err(_) => continue, // removed meanwhile
                }
            } else {
                None
            };
            out.push(DirItem { ino: e.ino, kind: e.kind, name: e.name, next_offset: offset_of_cookie(e.cookie), attr });
        }
        // iterate_dir -> file_accessed: relatime decides, at most one write per change
        if !self.cfg.nodiratime {
            self.decide_atime(dir);
            self.write_atime(dir);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_cookies_round_trip() {
        for c in [1u64, 2, 77, 1 << 40] {
            assert_eq!(cookie_after(offset_of_cookie(c)), c);
        }
        assert_eq!(cookie_after(0), 0);
        assert_eq!(cookie_after(1), 0);
        assert_eq!(cookie_after(2), 0);
    }
}
