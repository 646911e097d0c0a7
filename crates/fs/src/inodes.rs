//! In-memory per-inode state: kernel lookup counts, open handles, and each inode's place
//! in the tree (its parent) with its properties' cache ([`Node`], inherit.rs).
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
//!
//! Nodes: a directory's node lives until the directory goes (rmdir, replaced by a rename);
//! a file's node lives while the kernel or a handle references the file. A file's parent is
//! set only after the reference that reaches it was counted, and its node is removed under
//! the lock that saw the last reference go, so a forget racing with a new lookup of the same
//! file cannot drop the parent the lookup just set.
use crate::props::inherit::Resolved;
use crate::props::LocalProps;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use squeezefs_pipeline::{Ino, ROOT_INO};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const SHARDS: usize = 64;

#[derive(Default, Debug, Clone, Copy)]
struct Refs {
    lookups: u64,
    opens: u64,
}

/// An inode's place in the tree and what inheritance caches for it.
#[derive(Clone, Debug)]
pub struct Node {
    /// a directory's only parent; a file's: the directory of the name it was last reached
    /// by (created, looked up, listed, linked or renamed to). Root's is itself.
    pub parent: Ino,
    pub dir: bool,
    /// its own property values: `None` until read from the pool, then `Some(None)` for none
    pub local: Option<Option<Arc<LocalProps>>>,
    /// bumped whenever `parent` or `local` changes: a resolution that read older ones does
    /// not cache its result
    pub version: u64,
    /// effective properties and the generation they were resolved at
    pub eff: Option<(u64, Arc<Resolved>)>,
}

/// What `set_parent` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParentChange {
    /// the inode had no node yet
    New,
    Same,
    /// it had another parent (the caller bumps the generation: what it inherits may change)
    Moved,
}

pub struct InodeTable {
    shards: Vec<Mutex<FxHashMap<Ino, Refs>>>,
    nodes: Vec<Mutex<FxHashMap<Ino, Node>>>,
    /// inheritance generation: bumped by any change that may change what inodes inherit
    /// (inherit.rs); a cached resolution of an older generation is stale
    gen: AtomicU64,
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
            nodes: (0..SHARDS).map(|_| Mutex::new(FxHashMap::default())).collect(),
            gen: AtomicU64::new(1),
        };
        t.set_parent(ROOT_INO, ROOT_INO, true);
        t
    }

    fn shard(&self, ino: Ino) -> &Mutex<FxHashMap<Ino, Refs>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    pub fn add_lookup(&self, ino: Ino, n: u64) {
        self.shard(ino).lock().entry(ino).or_default().lookups += n;
    }

    /// One lookup reference to `ino`, reached through directory `parent` (a readdirplus
    /// entry): the parent of a file is recorded under the same lock as the reference.
    pub fn add_lookup_in(&self, parent: Ino, ino: Ino, dir: bool) {
        let mut shard = self.shard(ino).lock();
        shard.entry(ino).or_default().lookups += 1;
        self.set_parent(ino, parent, dir);
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
            // a file nothing references is reached again only by a lookup, which sets its
            // parent anew; a directory keeps its node (its parent is needed for `..`)
            let mut nodes = self.node_shard(ino).lock();
            if nodes.get(&ino).is_some_and(|n| !n.dir) {
                nodes.remove(&ino);
            }
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

    fn node_shard(&self, ino: Ino) -> &Mutex<FxHashMap<Ino, Node>> {
        &self.nodes[(ino as usize) % SHARDS]
    }

    /// Record `parent` as the parent of `ino` (a directory if `dir`). A file's parent is
    /// recorded only while something references it (see the module comment).
    pub fn set_parent(&self, ino: Ino, parent: Ino, dir: bool) -> ParentChange {
        let mut m = self.node_shard(ino).lock();
        match m.get_mut(&ino) {
            Some(n) if n.parent == parent => ParentChange::Same,
            Some(n) => {
                n.parent = parent;
                n.dir = dir;
                n.version += 1;
                n.eff = None;
                ParentChange::Moved
            }
            None => {
                m.insert(ino, Node { parent, dir, local: None, version: 0, eff: None });
                ParentChange::New
            }
        }
    }

    /// `set_parent` for an inode that has a node; one without (a file nothing references)
    /// gets none.
    pub fn move_node(&self, ino: Ino, parent: Ino) -> Option<ParentChange> {
        let mut m = self.node_shard(ino).lock();
        let n = m.get_mut(&ino)?;
        if n.parent == parent {
            return Some(ParentChange::Same);
        }
        n.parent = parent;
        n.version += 1;
        n.eff = None;
        Some(ParentChange::Moved)
    }

    pub fn parent(&self, ino: Ino) -> Option<Ino> {
        self.node_shard(ino).lock().get(&ino).map(|n| n.parent)
    }

    pub fn remove_parent(&self, ino: Ino) {
        self.node_shard(ino).lock().remove(&ino);
    }

    /// A copy of `ino`'s node.
    pub fn node(&self, ino: Ino) -> Option<Node> {
        self.node_shard(ino).lock().get(&ino).cloned()
    }

    /// The cached resolution of `ino` if it is of generation `gen`.
    pub fn cached(&self, ino: Ino, gen: u64) -> Option<Arc<Resolved>> {
        match self.node_shard(ino).lock().get(&ino)?.eff {
            Some((g, ref r)) if g == gen => Some(r.clone()),
            _ => None,
        }
    }

    /// Keep local values read from the pool, unless the node changed since `version`.
    pub fn store_local(&self, ino: Ino, version: u64, local: Option<Arc<LocalProps>>) {
        if let Some(n) = self.node_shard(ino).lock().get_mut(&ino) {
            if n.version == version && n.local.is_none() {
                n.local = Some(local);
            }
        }
    }

    /// Cache a resolution made at `gen` from the node as of `version`.
    pub fn store_eff(&self, ino: Ino, version: u64, gen: u64, r: Arc<Resolved>) {
        if let Some(n) = self.node_shard(ino).lock().get_mut(&ino) {
            if n.version == version {
                n.eff = Some((gen, r));
            }
        }
    }

    /// A property of `ino` changed to `local` (`None`: forget what was read; it is read
    /// again when needed).
    pub fn set_local(&self, ino: Ino, local: Option<Option<Arc<LocalProps>>>) {
        if let Some(n) = self.node_shard(ino).lock().get_mut(&ino) {
            n.local = local;
            n.version += 1;
            n.eff = None;
        }
    }

    /// Give a new empty inode its (empty) local values without reading the pool.
    pub fn set_no_local(&self, ino: Ino) {
        if let Some(n) = self.node_shard(ino).lock().get_mut(&ino) {
            if n.local.is_none() {
                n.local = Some(None);
            }
        }
    }

    pub fn gen(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    /// Every cached resolution is stale from now on.
    pub fn bump_gen(&self) {
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// True if `dir` is `ancestor` or lies below it, as far as known parents tell.
    /// Every directory reachable by the kernel was looked up, so its chain is known.
    pub fn is_within(&self, mut dir: Ino, ancestor: Ino) -> bool {
        // only directories are ever ancestors; a file's node points into the tree but no
        // node points at a file
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
        t.set_parent(2, ROOT_INO, true);
        t.set_parent(3, 2, true);
        t.set_parent(4, 3, true);
        assert!(t.is_within(4, 2));
        assert!(t.is_within(2, 2));
        assert!(!t.is_within(2, 4));
        assert!(t.is_within(4, ROOT_INO));
    }

    #[test]
    fn a_file_node_goes_with_the_last_reference_and_a_directory_node_stays() {
        let t = InodeTable::new();
        t.set_parent(2, ROOT_INO, true);
        t.add_lookup(2, 1);
        t.add_lookup_in(2, 7, false);
        assert_eq!(t.parent(7), Some(2));
        t.add_open(7);
        assert_eq!(t.forget(7, 1), Drop::StillReferenced);
        assert_eq!(t.parent(7), Some(2), "an open handle keeps it");
        assert_eq!(t.close(7), Drop::Unreferenced);
        assert_eq!(t.parent(7), None);
        assert_eq!(t.forget(2, 1), Drop::Unreferenced);
        assert_eq!(t.parent(2), Some(ROOT_INO));
    }

    #[test]
    fn moving_a_node_invalidates_what_it_cached() {
        let t = InodeTable::new();
        assert_eq!(t.set_parent(3, ROOT_INO, true), ParentChange::New);
        assert_eq!(t.set_parent(3, ROOT_INO, true), ParentChange::Same);
        let v = t.node(3).unwrap().version;
        t.store_local(3, v, None);
        assert_eq!(t.node(3).unwrap().local, Some(None));
        assert_eq!(t.set_parent(3, 5, true), ParentChange::Moved);
        let n = t.node(3).unwrap();
        assert!(n.version > v);
        // a resolution that started before the move does not store what it read
        t.store_local(9, 0, None);
        t.set_local(3, None);
        t.store_local(3, v, None);
        assert_eq!(t.node(3).unwrap().local, None);
    }
}
