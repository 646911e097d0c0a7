//! QoS trees of the fs core (DESIGN.md §6): which tree a file's data belongs to, keeping the
//! engine's trees in step with the `qos` property and the mount option, and pacing writes.
//!
//! ```text
//! TREE OF A FILE: the source of its effective `qos` (inherit.rs, cached like every
//!   property): a directory's own value → that directory; inherited from directory D → D;
//!   the mount option → the root directory (ROOT_INO: the mount's tree); none → NO_TREE,
//!   not paced. A subdirectory without its own `qos` therefore shares its ancestor's tree
//!   (one bucket), one with its own is a tree of its own.
//! PARENT OF A TREE T: the tree of T's parent directory (none for the root): the nesting
//!   admission shares bandwidth along (HTB, control::qos::admission).
//! REGISTRY (`QosReg`, what the engine was told): tree → (parent, rate). States of a tree:
//!   unknown ──first write into it──► registered (its parent first, recursively)
//!   registered ──reconcile finds its rate or parent changed──► registered (set again)
//!   registered ──reconcile finds no `qos` on it any more (cleared, directory removed)──►
//!   unknown (engine remove_tree: its children move to its parent)
//!   Reconcile runs before an admission when the inheritance generation moved (a property
//!   change, a rename changing what a tree inherits, a remount: inherit.rs) or RECONCILE_SECS
//!   passed (a removed directory bumps nothing). Trees are registered lazily: a tree nobody
//!   writes to is idle anyway.
//! PACING (`pace`, every write before it reaches the engine): Go → write; Wait(t) → sleep
//!   until t holding no lock of the fs or the engine, then ask again. Reads never ask. The
//!   FUSE layer keeps such waits off the threads other requests need (crates/fuse).
//! TUNABLE: RECONCILE_SECS 1.
//! ```
use crate::error::{FsError, Result};
use crate::props::{Prop, Source, Value};
use crate::Fs;
use squeezefs_pipeline::{Ino, QosAdmit, QosTree, TreeId, NO_TREE, ROOT_INO};
use std::collections::HashMap;
use std::time::Instant;

/// Reconcile at least this often while trees exist, seconds.
pub const RECONCILE_SECS: f64 = 1.0;

/// What the engine was told about the trees (block comment, REGISTRY).
#[derive(Debug)]
pub struct QosReg {
    /// the inheritance generation of the last reconcile
    gen: u64,
    at: Instant,
    trees: HashMap<TreeId, (Option<TreeId>, u64)>,
}

impl Default for QosReg {
    fn default() -> Self {
        QosReg { gen: u64::MAX, at: Instant::now(), trees: HashMap::new() }
    }
}

/// Deeper than this, a chain of trees is taken to be a cycle (a bug).
const MAX_NESTING: usize = 10_000;

impl Fs {
    /// The QoS tree `ino`'s data belongs to (block comment), `NO_TREE` when none.
    pub fn qos_tree(&self, ino: Ino) -> Result<TreeId> {
        let r = self.resolve(ino)?;
        Ok(match r.eff.get(Prop::Qos) {
            (Value::Rate(Some(_)), Source::Local) => ino,
            (Value::Rate(Some(_)), Source::Inherited(dir)) => dir,
            (Value::Rate(Some(_)), Source::Mount) => ROOT_INO,
            _ => NO_TREE,
        })
    }

    /// Whether writes to `ino` are paced (it lies in a QoS tree). Errors count as no.
    pub fn in_qos_tree(&self, ino: Ino) -> bool {
        self.qos_tree(ino).is_ok_and(|t| t != NO_TREE)
    }

    /// Tree `tree` as it should be: `None` when it holds no `qos` any more, else (its
    /// parent tree, its rate).
    fn qos_wanted(&self, tree: TreeId) -> Result<Option<(Option<TreeId>, u64)>> {
        let r = match self.resolve(tree) {
            Ok(r) => r,
            Err(FsError::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let rate = match r.eff.get(Prop::Qos) {
            (Value::Rate(Some(rate)), Source::Local) => rate,
            (Value::Rate(Some(rate)), Source::Mount) if tree == ROOT_INO => rate,
            _ => return Ok(None),
        };
        if tree == ROOT_INO {
            return Ok(Some((None, rate)));
        }
        let parent_dir = self.inodes.parent(tree).unwrap_or(ROOT_INO);
        let parent = match self.qos_tree(parent_dir)? {
            NO_TREE => None,
            p => Some(p),
        };
        Ok(Some((parent, rate)))
    }

    /// Tell the engine about `tree` (and its ancestors first) if it does not know it yet.
    fn qos_register(&self, reg: &mut QosReg, tree: TreeId, depth: usize) -> Result<()> {
        if reg.trees.contains_key(&tree) {
            return Ok(());
        }
        if depth > MAX_NESTING {
            return Err(FsError::Invalid("qos trees nested too deep (a cycle?)"));
        }
        let Some((parent, rate)) = self.qos_wanted(tree)? else { return Ok(()) };
        if let Some(p) = parent {
            self.qos_register(reg, p, depth + 1)?;
        }
        // a parent that turned out not to be a tree (cleared meanwhile) is no parent
        let parent = parent.filter(|p| reg.trees.contains_key(p));
        self.engine.qos_set_tree(tree, parent, rate as f64).map_err(qos_error)?;
        reg.trees.insert(tree, (parent, rate));
        Ok(())
    }

    /// Bring the engine's trees in step with the properties (block comment, REGISTRY).
    fn qos_reconcile(&self, reg: &mut QosReg) -> Result<()> {
        let gen = self.inodes.gen();
        if gen == reg.gen && reg.at.elapsed().as_secs_f64() < RECONCILE_SECS {
            return Ok(());
        }
        reg.gen = gen;
        reg.at = Instant::now();
        let known: Vec<TreeId> = reg.trees.keys().copied().collect();
        let mut wanted = HashMap::new();
        for t in known {
            wanted.insert(t, self.qos_wanted(t)?);
        }
        // gone first: their children move to their parents (engine admission)
        for (&t, w) in &wanted {
            if w.is_none() {
                reg.trees.remove(&t);
                if let Err(e) = self.engine.qos_remove_tree(t) {
                    log::warn!("qos tree {t}: {e}");
                }
            }
        }
        // then what changed, parents before children
        let mut changed: Vec<(TreeId, Option<TreeId>, u64)> = wanted
            .iter()
            .filter_map(|(&t, w)| w.map(|(p, r)| (t, p, r)))
            .filter(|(t, p, r)| reg.trees.get(t) != Some(&(*p, *r)))
            .collect();
        let depth = |mut t: TreeId| {
            let mut d = 0;
            while let Some(Some((Some(p), _))) = wanted.get(&t) {
                t = *p;
                d += 1;
                if d > MAX_NESTING {
                    break;
                }
            }
            d
        };
        changed.sort_by_key(|c| depth(c.0));
        for (t, parent, rate) in changed {
            if let Some(p) = parent {
                self.qos_register(reg, p, 0)?;
            }
            let parent = parent.filter(|p| reg.trees.contains_key(p));
            if let Err(e) = self.engine.qos_set_tree(t, parent, rate as f64) {
                // a nesting the engine refuses in this order: start the tree afresh
                log::debug!("qos tree {t}: {e}; registered again");
                let _ = self.engine.qos_remove_tree(t);
                self.engine.qos_set_tree(t, parent, rate as f64).map_err(qos_error)?;
            }
            reg.trees.insert(t, (parent, rate));
        }
        Ok(())
    }

    /// Wait until `bytes` may be written to `ino` (block comment, PACING); returns the tree
    /// the data belongs to (the engine compresses and schedules it as that tree's).
    pub(crate) fn qos_pace(&self, ino: Ino, bytes: u64) -> Result<TreeId> {
        let tree = self.qos_tree(ino)?;
        if tree == NO_TREE && !self.qos_any() {
            return Ok(NO_TREE);
        }
        {
            let mut reg = self.qos_reg.lock();
            self.qos_reconcile(&mut reg)?;
            if tree != NO_TREE {
                self.qos_register(&mut reg, tree, 0)?;
            }
        }
        if tree == NO_TREE {
            return Ok(NO_TREE);
        }
        loop {
            match self.engine.qos_admit(tree, bytes) {
                QosAdmit::Go => return Ok(tree),
                QosAdmit::Wait(t) => {
                    let now = Instant::now();
                    if t > now {
                        std::thread::sleep(t - now);
                    }
                }
            }
        }
    }

    /// Whether the engine knows any tree (writes outside trees still reconcile then, so a
    /// cleared property is noticed without waiting for a write into the tree).
    fn qos_any(&self) -> bool {
        !self.qos_reg.lock().trees.is_empty()
    }

    /// The QoS trees the engine knows (after a reconcile), with their stats lines.
    pub fn qos_trees(&self) -> Result<Vec<QosTree>> {
        {
            let mut reg = self.qos_reg.lock();
            self.qos_reconcile(&mut reg)?;
        }
        Ok(self.engine.qos_trees())
    }

    /// The stats line of the tree held by directory `ino` (`user.squeezefs.qos-stats`):
    /// registered if it holds `qos` and nobody wrote to it yet.
    pub(crate) fn qos_stats_line(&self, ino: Ino) -> Result<Vec<u8>> {
        {
            let mut reg = self.qos_reg.lock();
            self.qos_reconcile(&mut reg)?;
            self.qos_register(&mut reg, ino, 0)?;
        }
        match self.engine.qos_trees().into_iter().find(|t| t.tree == ino) {
            Some(t) => Ok(format!("{}\n", t.row).into_bytes()),
            None => Err(FsError::NoXattr),
        }
    }
}

/// Engine refusals of a tree change (a bug if they happen: the fs checks rates and nesting).
fn qos_error(e: squeezefs_pipeline::QosError) -> FsError {
    log::error!("qos: {e}");
    FsError::Invalid("qos tree change refused by the engine")
}
