//! Walks of the namespace for the jobs that visit every file of a tree (`squeezefs
//! recompress`, the background worker's pending figure): paths are looked up from the root,
//! and every file comes with its effective properties, resolved along the way
//! (`Fs::resolve_below`), since the kernel may never have looked these inodes up. No
//! permission checks: these jobs come through the control channel, which only root and the
//! pool's owner reach.
use crate::error::{FsError, Result};
use crate::props::inherit::Resolved;
use crate::Fs;
use squeezefs_pipeline::{FileKind, Ino, ROOT_INO};
use std::sync::Arc;

/// Entries listed per engine call.
const LIST_BATCH: usize = 256;

/// A regular file met by a walk.
pub(crate) struct FileVisit {
    pub ino: Ino,
    pub resolved: Arc<Resolved>,
}

impl Fs {
    /// The inodes along `rel`, a path relative to the mount's root (`/`-separated; empty
    /// or `.` components are skipped, `..` is refused): the root first, the named inode
    /// last. `NotFound` when a component is missing, `NotDir` when one before the last is
    /// not a directory.
    pub fn lookup_path(&self, rel: &[u8]) -> Result<Vec<(Ino, FileKind)>> {
        let mut chain = vec![(ROOT_INO, FileKind::Dir)];
        for comp in rel.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".") {
            if comp == b".." {
                return Err(FsError::Invalid("a path for a job may not contain '..'"));
            }
            let &(dir, kind) = chain.last().expect("the root is in the chain");
            if kind != FileKind::Dir {
                return Err(FsError::NotDir);
            }
            match self.engine.lookup(dir, comp)? {
                Some(found) => chain.push(found),
                None => return Err(FsError::NotFound),
            }
        }
        Ok(chain)
    }

    /// Effective properties of the last inode of a chain from `lookup_path`.
    pub(crate) fn resolve_chain(&self, chain: &[(Ino, FileKind)]) -> Result<Arc<Resolved>> {
        let mut res = self.resolve(ROOT_INO)?;
        for w in chain.windows(2) {
            res = self.resolve_below(w[0].0, &res, w[1].0)?;
        }
        Ok(res)
    }

    /// Every regular file below directory `dir` (resolved as `res`), depth first in listing
    /// order. `f` returns `false` to stop the walk; returns whether the walk went to the end.
    pub(crate) fn walk_files(
        &self,
        dir: Ino,
        res: &Arc<Resolved>,
        f: &mut dyn FnMut(FileVisit) -> Result<bool>,
    ) -> Result<bool> {
        // (directory, its resolution, last cookie listed)
        let mut stack: Vec<(Ino, Arc<Resolved>, u64)> = vec![(dir, res.clone(), 0)];
        while let Some((d, dres, after)) = stack.last().cloned() {
            let entries = match self.engine.dir_list(d, after, LIST_BATCH) {
                Ok(e) => e,
                // removed while walked: nothing more below it
                Err(squeezefs_pipeline::EngineError::NoInode(_)) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            let Some(last) = entries.last() else {
                stack.pop();
                continue;
            };
            stack.last_mut().expect("not empty").2 = last.cookie;
            let mut subdirs = Vec::new();
            for e in entries {
                match e.kind {
                    FileKind::File => {
                        let resolved = match self.resolve_below(d, &dres, e.ino) {
                            Ok(r) => r,
                            Err(FsError::NotFound) => continue,
                            Err(err) => return Err(err),
                        };
                        if !f(FileVisit { ino: e.ino, resolved })? {
                            return Ok(false);
                        }
                    }
                    FileKind::Dir => subdirs.push(e.ino),
                    _ => {}
                }
            }
            // the batch's directories, first one on top (listing order)
            for sub in subdirs.into_iter().rev() {
                match self.resolve_below(d, &dres, sub) {
                    Ok(r) => stack.push((sub, r, 0)),
                    Err(FsError::NotFound) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        Ok(true)
    }
}
