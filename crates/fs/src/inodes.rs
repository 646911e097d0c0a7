//! In-memory per-inode state: kernel lookup counts, open handles, directory parents.
//!
//! Lifetime state machine of one inode (states by (nlink, refs), refs = lookups + opens):
//! * linked (nlink > 0): kept in the pool whatever the refs.
//! * orphan (nlink == 0, refs > 0): unlinked while referenced; recorded in the engine's
//!   orphan list so a crash cannot leak it; data stays readable through open handles.
//!   Kernel lookup references count too: with the writeback cache the kernel may still
//!   write back pages and times of an unlinked file after its last close, until it
//!   evicts the inode and sends forget (regression: `sync -f` after untar got ENOENT
//!   when unlinked inodes were freed at the last close).
//! * dead (nlink == 0, refs == 0): deleted (unlink when unreferenced, or the last
//!   forget/release of an orphan); freed space becomes reusable after the commit.
//!
//! Transitions: unlink/rmdir/rename-over drop nlink; lookup/open raise refs; forget/release
//! lower them. The table is sharded by inode number so FUSE threads working on different
//! inodes never contend; each critical section is a few map operations.
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use squeezefs_pipeline::{Ino, ROOT_INO};

const SHARDS: usize = 64;

#[derive(Default, Debug, Clone, Copy)]
struct Refs {
    lookups: u64,
    opens: u64,
}

pub struct InodeTable {
    shards: Vec<Mutex<FxHashMap<Ino, Refs>>>,
    /// directory → its parent (directories have exactly one); root maps to itself
    parents: Vec<Mutex<FxHashMap<Ino, Ino>>>,
}

/// What a reference drop found.
#[derive(Debug, PartialEq, Eq)]
pub enum Drop {
    StillReferenced,
    /// the last reference is gone: the caller deletes the inode if its nlink is 0
    Unreferenced,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl InodeTable {
    pub fn new() -> InodeTable {
        let t = InodeTable {
            shards: (0..SHARDS).map(|_| Mutex::new(FxHashMap::default())).collect(),
            parents: (0..SHARDS).map(|_| Mutex::new(FxHashMap::default())).collect(),
        };
        t.set_parent(ROOT_INO, ROOT_INO);
        t
    }

    fn shard(&self, ino: Ino) -> &Mutex<FxHashMap<Ino, Refs>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    pub fn add_lookup(&self, ino: Ino, n: u64) {
        self.shard(ino).lock().entry(ino).or_default().lookups += n;
    }

    pub fn forget(&self, ino: Ino, n: u64) -> Drop {
        self.release_refs(ino, |r| r.lookups = r.lookups.saturating_sub(n))
    }

    pub fn add_open(&self, ino: Ino) {
        self.shard(ino).lock().entry(ino).or_default().opens += 1;
    }

    pub fn close(&self, ino: Ino) -> Drop {
        self.release_refs(ino, |r| r.opens = r.opens.saturating_sub(1))
    }

    fn release_refs(&self, ino: Ino, f: impl FnOnce(&mut Refs)) -> Drop {
        let mut shard = self.shard(ino).lock();
        let Some(r) = shard.get_mut(&ino) else {
            return Drop::StillReferenced;
        };
        f(r);
        if r.lookups == 0 && r.opens == 0 {
            shard.remove(&ino);
            Drop::Unreferenced
        } else {
            Drop::StillReferenced
        }
    }

    pub fn is_referenced(&self, ino: Ino) -> bool {
        self.shard(ino).lock().get(&ino).is_some_and(|r| r.lookups > 0 || r.opens > 0)
    }

    /// Inodes the kernel or open handles still reference (for the final sweep at unmount).
    pub fn referenced(&self) -> Vec<Ino> {
        self.shards.iter().flat_map(|s| s.lock().keys().copied().collect::<Vec<_>>()).collect()
    }

    pub fn set_parent(&self, dir: Ino, parent: Ino) {
        self.parents[(dir as usize) % SHARDS].lock().insert(dir, parent);
    }

    pub fn parent(&self, dir: Ino) -> Option<Ino> {
        self.parents[(dir as usize) % SHARDS].lock().get(&dir).copied()
    }

    pub fn remove_parent(&self, dir: Ino) {
        self.parents[(dir as usize) % SHARDS].lock().remove(&dir);
    }

    /// True if `dir` is `ancestor` or lies below it, as far as known parents tell.
    /// Every directory reachable by the kernel was looked up, so its chain is known.
    pub fn is_within(&self, mut dir: Ino, ancestor: Ino) -> bool {
        for _ in 0..100_000 {
            if dir == ancestor {
                return true;
            }
            match self.parent(dir) {
                Some(p) if p != dir => dir = p,
                _ => return false,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_is_unreferenced_only_after_last_forget_and_release() {
        let t = InodeTable::new();
        t.add_lookup(5, 2);
        t.add_open(5);
        assert_eq!(t.forget(5, 2), Drop::StillReferenced);
        assert!(t.is_referenced(5));
        assert_eq!(t.close(5), Drop::Unreferenced);
        assert!(!t.is_referenced(5));
        // a stray forget for an unknown inode is harmless
        assert_eq!(t.forget(5, 1), Drop::StillReferenced);
    }

    #[test]
    fn ancestry_follows_known_parents() {
        let t = InodeTable::new();
        t.set_parent(2, ROOT_INO);
        t.set_parent(3, 2);
        t.set_parent(4, 3);
        assert!(t.is_within(4, 2));
        assert!(t.is_within(2, 2));
        assert!(!t.is_within(2, 4));
        assert!(t.is_within(4, ROOT_INO));
    }
}
