//! Dynamic inheritance of properties, ZFS style (docs/design.md §10): an inode's effective value of
//! a property is its own, else its nearest ancestor directory's, else the mount option's,
//! else the built-in default. Changing a directory's property or moving a file or a tree
//! changes what everything below inherits, at once.
//!
//! Which parent counts: a directory has one. A file's is the directory of the name through
//! which it was last reached: created, looked up, listed by readdirplus, linked or renamed
//! to (inodes.rs `Node::parent`). For a file with one name that is always its directory.
//! For a hard-linked file whose names lie in directories with different properties it is the
//! name used last; to pin such a file's compression, set the property on the file itself
//! (properties live on the inode, which all its names share). The pool keeps no parent
//! pointer for files, so after a remount a file's parent is known again once it is looked
//! up, which the kernel does before any open.
//!
//! Cache (one per inode, in its node):
//! * states of a node's entry: *empty* (never resolved or invalidated) → *current* (resolved
//!   at the current generation) → *stale* (the generation moved on);
//! * transitions: `resolve` fills it (*empty*/*stale* → *current*); a property change of any
//!   inode, a rename that moves an inode to a parent with other inherited values, a
//!   remount's compression change and a directory reached under another parent bump the
//!   generation (every entry → *stale*); a file reached through another name empties its own
//!   entry only (nothing inherits from a file);
//! * tunables: none. A node's `version` makes a resolution that read its parent or local
//!   values before a change drop its result instead of caching it.
//!
//! A write asks `resolve` for the file: one sharded-map lookup while its entry is current,
//! no walk up the tree. After a bump, the first write of each file walks up only to the
//! nearest ancestor whose entry is current again (each directory is resolved once per
//! generation), and a directory without values of its own shares its parent's resolution.
//!
//! What the engine gets: `Resolved::policy`, handed with every write
//! (`Engine::write_with_compression`). A change applies to data written after it, as on ZFS
//! and btrfs: data already written keeps the compression of its write (a record written in
//! parts, that of the write that completed it), committed or not. A copy that sets
//! attributes after writing the data (`cp -a` does) therefore carries the properties, whose
//! values apply to the copy's later writes, while the data it copied is compressed as the
//! destination directory says; rewriting existing data is `squeezefs recompress`'s job.
use crate::error::{FsError, Result};
use crate::props::{self, Effective, LocalProps, Prop, Source, Value};
use crate::Fs;
use squeezefs_codec::Spec;
use squeezefs_pipeline::{EngineError, Ino, ROOT_INO};
use std::sync::Arc;

/// Deeper than this, a parent chain is taken to be a cycle (which would be a bug).
const MAX_DEPTH: usize = 100_000;

/// An inode's effective properties and the compression policy they give the engine.
#[derive(Debug, PartialEq, Eq)]
pub struct Resolved {
    pub eff: Effective,
    pub policy: Option<(Spec, bool)>,
}

impl Resolved {
    fn new(eff: Effective) -> Resolved {
        Resolved { policy: eff.engine_policy(), eff }
    }
}

impl Fs {
    /// Values that come from the mount or the defaults (what the root inherits).
    pub(crate) fn mount_level(&self) -> Effective {
        let (compression, force) = match self.compression() {
            Some(c) => ((Value::Spec(c.spec), Source::Mount), (Value::Bool(c.force), Source::Mount)),
            None => {
                let (spec, force) = self.engine.compression();
                ((Value::Spec(spec), Source::Default), (Value::Bool(force), Source::Default))
            }
        };
        Effective {
            values: [
                compression,
                force,
                match self.cfg.recordsize {
                    Some(b) => (Value::Size(b), Source::Mount),
                    None => (Value::Size(self.engine.info().recordsize), Source::Default),
                },
                match self.cfg.background {
                    Some(b) => (Value::Spec(b), Source::Mount),
                    None => (Value::Spec(Spec::Off), Source::Default),
                },
                match self.mount_qos() {
                    Some(r) => (Value::Rate(Some(r)), Source::Mount),
                    None => (Value::Rate(None), Source::Default),
                },
            ],
        }
    }

    /// An inode's own values, read from its `user.squeezefs.*` attributes. A stored value
    /// the parser refuses (written by an older daemon, which stored any value) counts as
    /// unset. A deleted inode has none.
    pub(crate) fn read_local(&self, ino: Ino) -> Result<Option<Arc<LocalProps>>> {
        let names = match self.engine.list_xattr(ino) {
            Ok(n) => n,
            Err(EngineError::NoInode(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut local = LocalProps::default();
        for name in names.iter().filter(|n| n.starts_with(props::XATTR_PREFIX.as_bytes())) {
            let Some(p) = Prop::from_xattr(name) else { continue };
            let Some(v) = self.engine.get_xattr(ino, name)? else { continue };
            match props::parse_bytes(p, &v) {
                Ok(v) => local.set(p, v),
                Err(e) => log::warn!("inode {ino}: stored property ignored: {e}"),
            }
        }
        Ok((!local.is_empty()).then(|| Arc::new(local)))
    }

    /// Effective properties of `ino` (module comment: cached, walks up only when stale).
    pub(crate) fn resolve(&self, ino: Ino) -> Result<Arc<Resolved>> {
        let gen = self.inodes.gen();
        if let Some(r) = self.inodes.cached(ino, gen) {
            return Ok(r);
        }
        struct Step {
            ino: Ino,
            version: Option<u64>,
            local: Option<Arc<LocalProps>>,
        }
        let mut chain: Vec<Step> = Vec::new();
        let mut cur = ino;
        // the resolution of the parent of the chain's last inode (`None`: it is the root)
        let mut top = None;
        loop {
            if !chain.is_empty() {
                if let Some(r) = self.inodes.cached(cur, gen) {
                    top = Some((cur, r));
                    break;
                }
            }
            if chain.len() > MAX_DEPTH {
                return Err(FsError::Invalid("directory chain too deep (a cycle?)"));
            }
            let node = self.inodes.node(cur);
            let local = match node.as_ref().and_then(|n| n.local.clone()) {
                Some(l) => l,
                None => {
                    let l = self.read_local(cur)?;
                    if let Some(n) = &node {
                        self.inodes.store_local(cur, n.version, l.clone());
                    }
                    l
                }
            };
            chain.push(Step { ino: cur, version: node.as_ref().map(|n| n.version), local });
            if cur == ROOT_INO {
                break;
            }
            // an inode whose parent is not known (no node) inherits from the root
            cur = match node {
                Some(n) if n.parent != cur => n.parent,
                _ => ROOT_INO,
            };
        }
        let mut above: Option<(Ino, Arc<Resolved>)> = top;
        for step in chain.iter().rev() {
            let r = match &above {
                None => Arc::new(Resolved::new(match &step.local {
                    Some(l) => self.mount_level().with_local(l),
                    None => self.mount_level(),
                })),
                Some((pino, pr)) => {
                    let parent_sets_nothing = pr.eff.values.iter().all(|(_, s)| *s != Source::Local);
                    match &step.local {
                        None if parent_sets_nothing => pr.clone(),
                        None => Arc::new(Resolved::new(pr.eff.inherited_from(*pino))),
                        Some(l) => Arc::new(Resolved::new(pr.eff.inherited_from(*pino).with_local(l))),
                    }
                }
            };
            if let Some(v) = step.version {
                self.inodes.store_eff(step.ino, v, gen, r.clone());
            }
            above = Some((step.ino, r));
        }
        Ok(above.expect("the chain holds at least the inode itself").1)
    }

    /// Effective properties of `ino` reached as an entry of directory `parent`, whose
    /// resolution is `above`: for walks of the tree from the root (recompress, background
    /// compression), which meet inodes the kernel never looked up and whose parent the
    /// inode table therefore does not know. Nothing is cached.
    pub(crate) fn resolve_below(&self, parent: Ino, above: &Resolved, ino: Ino) -> Result<Arc<Resolved>> {
        let local = match self.inodes.node(ino).and_then(|n| n.local.clone()) {
            Some(l) => l,
            None => self.read_local(ino)?,
        };
        let inherited = above.eff.inherited_from(parent);
        Ok(Arc::new(Resolved::new(match local {
            Some(l) => inherited.with_local(&l),
            None => inherited,
        })))
    }

    /// What a write of `ino` hands the engine (`Engine::write_with_compression`).
    pub(crate) fn write_policy(&self, ino: Ino) -> Result<Option<(Spec, bool)>> {
        Ok(self.resolve(ino)?.policy)
    }

    /// Effective properties of `ino`, for `user.squeezefs.effective` and `squeezefs prop get`.
    /// A regular file's `recordsize` is the size of its records (the engine's): shown with
    /// the source it resolves to while that matches, else as `Fixed` (the file got it when it
    /// was created and keeps it, as ZFS files keep their block size when the dataset's
    /// `recordsize` changes).
    pub fn effective(&self, ino: Ino) -> Result<Effective> {
        let mut eff = self.resolve(ino)?.eff;
        if self.engine.getattr(ino)?.kind == squeezefs_pipeline::FileKind::File {
            let actual = Value::Size(self.engine.record_size(ino)?);
            if eff.get(Prop::Recordsize).0 != actual {
                eff.values[Prop::Recordsize.index()] = (actual, Source::Fixed);
            }
        }
        Ok(eff)
    }

    /// The values `ino` inherits (what it has without values of its own): its parent
    /// directory's effective values, or the mount's for the root and for an inode whose
    /// parent is not known.
    pub(crate) fn inherited_effective(&self, ino: Ino) -> Result<Effective> {
        match self.inodes.parent(ino) {
            Some(p) if p != ino => Ok(self.resolve(p)?.eff.inherited_from(p)),
            _ => Ok(self.mount_level()),
        }
    }

    /// The record size a file created in directory `dir` gets: `dir`'s effective
    /// `recordsize` (cached resolution: no walk up the tree while it is current).
    pub(crate) fn new_file_record_size(&self, dir: Ino) -> Result<u32> {
        match self.resolve(dir)?.eff.get(Prop::Recordsize).0 {
            Value::Size(b) => Ok(b),
            _ => Ok(self.engine.info().recordsize),
        }
    }

    /// After an inode moved from directory `from` to `to`: if what it inherits changed,
    /// every cached resolution is stale (for a directory, its whole tree's).
    pub(crate) fn moved(&self, from: Ino, to: Ino) {
        if from == to {
            return;
        }
        let inherits = |p: Ino| self.resolve(p).map(|r| r.eff.inherited_from(p));
        let (a, b) = (inherits(from), inherits(to));
        let same = matches!((&a, &b), (Ok(a), Ok(b)) if a == b);
        if !same {
            self.inodes.bump_gen();
            let bg = |e: &Effective| e.get(Prop::BackgroundCompression).0;
            if !matches!((&a, &b), (Ok(a), Ok(b)) if bg(a) == bg(b)) {
                // records moved under another background codec (background.rs reset)
                self.bg.reset();
            }
        }
    }
}
