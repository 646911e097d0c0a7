//! The dirty cache: per-file, per-record data not yet committed, in two layers.
//!
//! Each file with uncommitted changes has a [`FileData`] holding
//! * `open`: the layer of the open txg, which `write`/`set_size`/`punch_hole` modify;
//! * `syncing`: the frozen layer of the txg being synced (read-only, shared with the sync
//!   stages through an `Arc`, so record bytes are never copied to sync them).
//!
//! A read resolves a record top-down: open layer, then syncing layer, then the committed
//! extent. Within a layer, `trunc_floor` hides every lower-layer record at or above it (a
//! truncation), and a `Rec::Hole` hides one record (a punched hole).
//!
//! Lifetime: created on the first data change of a file (from the committed size), retired by
//! the commit stage once both layers are empty, and purged when the inode is deleted. A
//! retired `FileData` is never used again: users re-look it up (`retired` flag).

use crate::base::accounting::{Accounting, Charge, LayerBytes};
use crate::base::error::Corruption;
use crate::base::locks::{Mutex, Rank};
use crate::compress::policy::Policy;
use crate::compress::queue::Slot;
use crate::space::placement::Space;
use crate::txg::early_place::{EarlyPlace, EarlyPlacement, EarlyRun};
use rustc_hash::{FxHashMap, FxHashSet};
use squeezefs_codec::{Codec, Workspaces};
use squeezefs_meta::Ino;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One dirty record.
#[derive(Debug)]
pub enum Rec {
    /// Bytes from the start of the record; shorter than the record means zeros follow.
    Data(DataRec),
    /// The whole record is a hole (punched).
    Hole,
    /// The whole record is the committed device record this extent points to, shared with
    /// the file it was copied from (write/share.rs): nothing is compressed or written, the
    /// commit points the file's extent row at the same stored bytes and counts a reference
    /// (commit.rs). Always a full record of the file's record size. A change of part of it
    /// loads its bytes first, like a committed record's (write/data.rs).
    Shared(squeezefs_meta::ExtentPtr),
}

/// The bytes of a dirty record, in one of two forms, plus, optionally, the
/// early-compression slot started on exactly these bytes (compress/queue.rs, early.rs).
///
/// Forms (`Body`):
///   RAW     the bytes themselves, in a record buffer;
///   PACKED  only the compressed form ([`PackedRec`]): a full record whose compression
///           finished while it was still in the open layer (the worker released its
///           buffer to the buffer pool, early.rs), or that the writer compressed straight
///           from its caller's slice (caller-runs, write/data.rs). The sync stage stores these
///           bytes as they are; a read decodes them; a change ([`DataRec::buf_mut`])
///           decodes them back into RAW first (rare: overwrite of a record already full).
/// Transitions: RAW → PACKED (`pack`, only with a result of exactly the current bytes),
/// PACKED → RAW (`buf_mut`). The logical length of both forms is [`DataRec::len`], which
/// is what the dirty accounting counts either way.
///
/// Invariant (crash safety): `early`, when set, belongs to the bytes `buf` holds now. The
/// buffer is private and every mutation goes through [`DataRec::buf_mut`], which drops the
/// slot first, so a compression result of older bytes can never reach a txg; likewise a
/// PACKED body is only ever built from a result of the RAW bytes it replaces.
/// The buffer is an `Arc` so that a compress job can read it without the file lock; a
/// mutation while a job still holds it copies the buffer (copy on write, rare).
#[derive(Debug, Default)]
pub struct DataRec {
    body: Body,
    early: Option<Arc<Slot>>,
}

#[derive(Debug)]
enum Body {
    Raw(Arc<Vec<u8>>),
    Packed(Arc<PackedRec>),
}

impl Default for Body {
    fn default() -> Self {
        Body::Raw(Arc::default())
    }
}

/// A full record held only compressed, with everything the sync stage stores.
#[derive(Debug)]
pub struct PackedRec {
    pub codec: Codec,
    /// the stored bytes (shared with the device write of the txg that stores them)
    pub bytes: Arc<crate::compress::outbuf::OutBytes>,
    /// xxh3-64 of `bytes`
    pub hash: u64,
    /// length of the decoded record
    pub logical: usize,
    /// counts the record in the early-compression `ready` bytes until its txg takes it
    pub ready: Charge,
    /// where the record was placed and written while its layer was open (early_place.rs);
    /// dropping a placement its txg did not commit gives the space back
    pub place: std::sync::OnceLock<EarlyPlace>,
}

impl PackedRec {
    /// The record's bytes (a read, or a change that must start from them).
    pub fn decode(&self, ws: &Workspaces) -> crate::Result<Vec<u8>> {
        let mut out = vec![0u8; self.logical];
        let n = ws.decompress(self.codec.alg, &self.bytes, &mut out).map_err(Corruption::DirtyRecordUndecodable)?;
        if n != self.logical {
            return Err(Corruption::DirtyRecordLength { got: n, want: self.logical }.into());
        }
        Ok(out)
    }
}

impl DataRec {
    pub fn new(buf: Vec<u8>) -> DataRec {
        DataRec { body: Body::Raw(Arc::new(buf)), early: None }
    }

    /// A record held only compressed.
    pub fn packed(p: PackedRec) -> DataRec {
        DataRec { body: Body::Packed(Arc::new(p)), early: None }
    }

    /// The bytes, if held raw.
    pub fn raw(&self) -> Option<&[u8]> {
        match &self.body {
            Body::Raw(b) => Some(b),
            Body::Packed(_) => None,
        }
    }

    /// The compressed form, if held packed.
    pub fn packed_rec(&self) -> Option<&Arc<PackedRec>> {
        match &self.body {
            Body::Raw(_) => None,
            Body::Packed(p) => Some(p),
        }
    }

    /// Logical length (the record's bytes, however held).
    pub fn len(&self) -> usize {
        match &self.body {
            Body::Raw(b) => b.len(),
            Body::Packed(p) => p.logical,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer for modification: forgets any early compression of the old bytes; a
    /// packed record is decoded into a buffer first.
    pub fn buf_mut(&mut self, ws: &Workspaces) -> crate::Result<&mut Vec<u8>> {
        self.early = None;
        if let Body::Packed(p) = &self.body {
            let v = p.decode(ws)?;
            self.body = Body::Raw(Arc::new(v));
        }
        match &mut self.body {
            Body::Raw(b) => Ok(Arc::make_mut(b)),
            Body::Packed(_) => unreachable!("decoded above"),
        }
    }

    /// A shared handle on the raw bytes (for a compress job); `None` when packed.
    pub fn shared(&self) -> Option<Arc<Vec<u8>>> {
        match &self.body {
            Body::Raw(b) => Some(b.clone()),
            Body::Packed(_) => None,
        }
    }

    pub fn early(&self) -> Option<&Arc<Slot>> {
        self.early.as_ref()
    }

    /// Attach a slot started on the current bytes (the caller holds the file lock and
    /// took `shared()` under the same hold).
    pub fn set_early(&mut self, slot: Arc<Slot>) {
        self.early = Some(slot);
    }

    /// RAW → PACKED with `p`, a compression result of exactly the current bytes (the
    /// caller checked that under the file lock). Returns the raw buffer if nobody else
    /// holds it (for the buffer pool).
    pub fn pack(&mut self, p: PackedRec) -> Option<Vec<u8>> {
        self.early = None;
        match std::mem::replace(&mut self.body, Body::Packed(Arc::new(p))) {
            Body::Raw(b) => Arc::try_unwrap(b).ok(),
            Body::Packed(_) => None,
        }
    }

    /// The raw buffer, if nobody else holds it (for recycling).
    pub fn into_vec(self) -> Option<Vec<u8>> {
        match self.body {
            Body::Raw(b) => Arc::try_unwrap(b).ok(),
            Body::Packed(_) => None,
        }
    }
}

#[derive(Debug)]
pub struct Layer {
    pub recs: BTreeMap<u64, Rec>,
    /// Lower-layer records with index >= this are gone (truncation).
    pub trunc_floor: Option<u64>,
    /// File size (set when the layer is frozen).
    pub size: u64,
    /// Bytes of record buffers held by this layer (accounting.rs: changed there only).
    pub bytes: LayerBytes,
    /// The run this layer's records are placed early into (early_place.rs); the sync stage
    /// places the layer's other records after them in it, then closes it. Locked only in
    /// the frozen layer (the open one is reached through the file lock, `get_mut`).
    pub early_run: Mutex<Option<EarlyRun>>,
    /// records below this index were considered for early placement (`place_early`)
    pub early_next: u64,
    /// the file's compression when the layer was frozen (`FileData::policy`); `None`: the
    /// pool's
    pub policy: Option<Policy>,
    /// The file's record size (bytes) when the layer was frozen (`FileData::rs`; 0 in an
    /// open layer, which the file's own field describes).
    pub rs: u64,
}

/// What a layer says about one record.
pub enum LayerView<'a> {
    Data(&'a [u8]),
    /// data held compressed (decode outside the file lock)
    Packed(&'a Arc<PackedRec>),
    /// a committed record shared into this layer (read it through its extent)
    Shared(&'a squeezefs_meta::ExtentPtr),
    Hole,
    /// This layer does not know; look below.
    Below,
}

impl Default for Layer {
    fn default() -> Self {
        Layer {
            recs: BTreeMap::new(),
            trunc_floor: None,
            size: 0,
            bytes: LayerBytes::default(),
            early_run: Mutex::new(Rank::FrozenRun, None),
            early_next: 0,
            policy: None,
            rs: 0,
        }
    }
}

impl Layer {
    /// Place and write the records of this open layer held PACKED and not placed yet
    /// (early_place.rs), in file order: from `early_next`, through the packed records that
    /// follow, up to the first record that is not held packed (raw, being filled,
    /// compressed by nobody yet). A record packed out of order waits for the ones before
    /// it, so one txg's records of a file lie on the device in file order (sequential
    /// reads), as the sync stage places them. Records not placed here are placed by the
    /// sync stage. The caller holds the file lock.
    pub fn place_early(&mut self, early: &EarlyPlacement, space: &Space, acct: &Arc<Accounting>, max_inline: u64) {
        if !early.allowed() {
            return;
        }
        let mut next = self.early_next;
        let mut todo: Vec<Arc<PackedRec>> = Vec::new();
        // a small first record may go inline while it is the file's only one: it waits (and
        // the records after it) until the layer holds a later record
        let only_first = self.recs.range(1..).next().is_none();
        for (&i, rec) in self.recs.range(self.early_next..) {
            match rec {
                // stored already: nothing to place
                Rec::Hole | Rec::Shared(_) => {}
                Rec::Data(d) => match d.packed_rec() {
                    Some(p) if i == 0 && only_first && p.bytes.len() as u64 <= max_inline => break,
                    Some(p) => {
                        if p.place.get().is_none() {
                            todo.push(p.clone());
                        }
                    }
                    None => break,
                },
            }
            next = i + 1;
        }
        self.early_next = next;
        if todo.is_empty() {
            return;
        }
        let cells: Vec<_> = todo.iter().map(|p| (&p.bytes, &p.place)).collect();
        early.place(space, acct, self.early_run.get_mut(), &cells);
    }

    pub fn view(&self, idx: u64) -> LayerView<'_> {
        match self.recs.get(&idx) {
            Some(Rec::Data(d)) => match d.packed_rec() {
                Some(p) => LayerView::Packed(p),
                None => LayerView::Data(d.raw().unwrap_or_default()),
            },
            Some(Rec::Hole) => LayerView::Hole,
            Some(Rec::Shared(e)) => LayerView::Shared(e),
            None => match self.trunc_floor {
                Some(f) if idx >= f => LayerView::Hole,
                _ => LayerView::Below,
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.recs.is_empty() && self.trunc_floor.is_none()
    }

    /// The layer holds record `idx` in a form a change modifies in place (bytes or a
    /// hole); a shared record's bytes must be loaded first, like a committed one's.
    pub fn holds_in_place(&self, idx: u64) -> bool {
        matches!(self.recs.get(&idx), Some(Rec::Data(_) | Rec::Hole))
    }
}

#[derive(Debug)]
pub struct FileData {
    /// Current logical size (what getattr reports).
    pub size: u64,
    pub open: Layer,
    /// The open layer or the size changed since the last freeze.
    pub open_dirty: bool,
    pub syncing: Option<Arc<Layer>>,
    /// Bumped by truncation, hole punching and by freezing the open layer (quiesce): a
    /// decision taken under an earlier lock hold ("record k is in the open layer", "record k
    /// loaded from below") is stale if this changed meanwhile.
    pub gen: u64,
    pub retired: bool,
    /// Unique among every `FileData` this process made: a `FileData` made anew for the same
    /// file (after retirement) is told apart from the old one, whatever its address.
    pub id: u64,
    /// Commits that stored a syncing layer of this file and released it (sync/stages.rs
    /// `release_layers`, under the file lock). Unchanged between two lock holds, together
    /// with the same `FileData`, means no commit changed the file's extents in between
    /// unless its syncing layer still holds the records it stores (rewrite/record.rs relies on it).
    pub commits: u64,
    /// Committed physical bytes (from the inode) for getattr.
    pub committed_blocks: u64,
    /// Early compression: records of this file that compressed in a row (policy::TRUST_AFTER).
    pub streak: Arc<std::sync::atomic::AtomicU32>,
    /// Compression of this file's data not yet frozen for a txg: what its last write stated
    /// (`Engine::write_with_compression`); `None`: the pool's. Dropped with the FileData
    /// once the file is clean, so the engine keeps no per-file state beyond dirty files.
    pub policy: Option<Policy>,
    /// The file's record size in bytes (its `recordsizes` row, else the pool's), read once
    /// when the FileData is made, so no write looks it up. It changes only while the file
    /// holds no data anywhere (metatx.rs `set_record_size`), under this lock, with `gen`
    /// bumped: a write that computed its records with the old size redoes them.
    pub rs: u64,
}

impl FileData {
    pub fn new(size: u64, committed_blocks: u64, rs: u64) -> FileData {
        FileData {
            rs,
            size,
            open: Layer::default(),
            open_dirty: false,
            syncing: None,
            gen: 0,
            retired: false,
            id: NEXT_FILE_ID.fetch_add(1, Ordering::Relaxed),
            commits: 0,
            committed_blocks,
            streak: Arc::default(),
            policy: None,
        }
    }

    /// Physical bytes for `st_blocks`: committed bytes plus dirty buffers (an upper bound
    /// until the txg commits).
    pub fn blocks_bytes(&self) -> u64 {
        self.committed_blocks + self.open.bytes.get() + self.syncing.as_ref().map_or(0, |l| l.bytes.get())
    }
}

pub type FileRef = Arc<Mutex<FileData>>;

/// `FileData::id` of the next one made.
static NEXT_FILE_ID: AtomicU64 = AtomicU64::new(1);

/// Where a record lives: its file and record index (a background compression job packs its
/// result there, early.rs).
pub struct RecordHome {
    pub file: std::sync::Weak<Mutex<FileData>>,
    pub idx: u64,
}

const SHARDS: usize = 16;

/// Inode → FileData, sharded so that writers to different files rarely share a lock.
pub struct FileTable {
    shards: Vec<Mutex<FxHashMap<Ino, FileRef>>>,
}

impl Default for FileTable {
    fn default() -> Self {
        FileTable { shards: (0..SHARDS).map(|_| Mutex::new(Rank::FileShard, FxHashMap::default())).collect() }
    }
}

impl FileTable {
    fn shard(&self, ino: Ino) -> &Mutex<FxHashMap<Ino, FileRef>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    pub fn get(&self, ino: Ino) -> Option<FileRef> {
        self.shard(ino).lock().get(&ino).cloned()
    }

    /// The FileData of `ino`, created with `init()` (size, blocks, record size) if absent.
    /// `init` runs under the shard lock so that no commit can slip between reading the
    /// committed size and publishing the FileData.
    pub fn get_or_create<E>(&self, ino: Ino, init: impl FnOnce() -> Result<(u64, u64, u64), E>) -> Result<FileRef, E> {
        self.with_file(ino, init, |f| f.clone())
    }

    /// Run `f` on `ino`'s FileData (created with `init()` if absent) while holding its
    /// shard lock: nobody can create, retire or purge that FileData meanwhile.
    pub fn with_file<T, E>(
        &self,
        ino: Ino,
        init: impl FnOnce() -> Result<(u64, u64, u64), E>,
        f: impl FnOnce(&FileRef) -> T,
    ) -> Result<T, E> {
        let mut m = self.shard(ino).lock();
        if let Some(fr) = m.get(&ino) {
            return Ok(f(fr));
        }
        let (size, blocks, rs) = init()?;
        let fr = Arc::new(Mutex::new(Rank::File, FileData::new(size, blocks, rs)));
        m.insert(ino, fr.clone());
        Ok(f(&fr))
    }

    /// Drop `ino`'s FileData if it is clean (called after a commit). Takes the shard lock,
    /// then the file lock (the same order as every other path).
    pub fn retire_if_clean(&self, ino: Ino) {
        let mut m = self.shard(ino).lock();
        if let Some(f) = m.get(&ino) {
            let mut fd = f.lock();
            if !fd.open_dirty && fd.open.is_empty() && fd.syncing.is_none() {
                fd.retired = true;
                drop(fd);
                m.remove(&ino);
            }
        }
    }

    /// Remove `ino` (deleted inode): its open layer's dirty bytes leave the accounting.
    pub fn purge(&self, ino: Ino, acct: &Accounting) {
        let f = self.shard(ino).lock().remove(&ino);
        if let Some(f) = f {
            let mut fd = f.lock();
            fd.retired = true;
            let open = std::mem::take(&mut fd.open);
            fd.open_dirty = false;
            drop(fd);
            acct.drop_layer(open.bytes);
        }
    }

    pub fn all(&self) -> Vec<(Ino, FileRef)> {
        let mut v = Vec::new();
        for s in &self.shards {
            v.extend(s.lock().iter().map(|(k, f)| (*k, f.clone())));
        }
        v
    }
}

/// The pool's dirty data: every file's layers, the inodes changed in the open txg, how many
/// files the syncing txg holds, and the record buffers kept for reuse. Its bytes are
/// counted in accounting.rs.
pub struct DirtyData {
    pub files: FileTable,
    /// inodes with changes in the open txg
    changed: Mutex<FxHashSet<Ino>>,
    /// files whose layers the syncing txg holds (0 between txgs): write admission bounds the
    /// short last records in flight with it
    syncing_files: AtomicU64,
    pub bufs: BufPool,
}

impl DirtyData {
    /// `buf_bytes`: full-record buffers kept for reuse.
    pub fn new(buf_bytes: usize) -> DirtyData {
        DirtyData {
            files: FileTable::default(),
            changed: Mutex::new(Rank::DirtySet, FxHashSet::default()),
            syncing_files: AtomicU64::new(0),
            bufs: BufPool::new(buf_bytes),
        }
    }

    /// `ino` changed in the open txg.
    pub fn mark_changed(&self, ino: Ino) {
        self.changed.lock().insert(ino);
    }

    /// Some inode changed in the open txg.
    pub fn any_changed(&self) -> bool {
        !self.changed.lock().is_empty()
    }

    pub fn is_changed(&self, ino: Ino) -> bool {
        self.changed.lock().contains(&ino)
    }

    /// The inodes changed in the open txg, in order; the set starts empty again (quiesce).
    pub fn take_changed(&self) -> Vec<Ino> {
        let set = std::mem::take(&mut *self.changed.lock());
        let mut v: Vec<Ino> = set.into_iter().collect();
        v.sort_unstable();
        v
    }

    /// The syncing txg holds `n` files' layers (0: no txg syncs).
    pub fn set_syncing_files(&self, n: usize) {
        self.syncing_files.store(n as u64, Ordering::Relaxed);
    }

    /// Files with data in flight, plus one for a file about to be written: the open txg's
    /// changed files and the syncing txg's (for bounds per file in flight).
    pub fn files_in_flight(&self) -> u64 {
        self.changed.lock().len() as u64 + self.syncing_files.load(Ordering::Relaxed) + 1
    }
}

/// Record buffers of committed txgs kept for reuse: a full-record buffer taken from here is
/// already mapped, so filling it costs one copy and no page faults (glibc serves 128 KiB
/// allocations with fresh mmaps). Buffers are kept per record size (files differ: each
/// buffer's capacity is one record of its file), only at exactly a supported record size's
/// capacity, up to `max_bytes` in all; a size that runs out takes a spare of another size
/// out of the pool first, so the bound holds whatever mix of sizes is written.
pub struct BufPool {
    bufs: Mutex<PooledBufs>,
    max_bytes: usize,
}

#[derive(Default)]
struct PooledBufs {
    /// record size → buffers of that capacity
    by_size: BTreeMap<usize, Vec<Vec<u8>>>,
    bytes: usize,
}

impl BufPool {
    pub fn new(max_bytes: usize) -> BufPool {
        BufPool { bufs: Mutex::new(Rank::Leaf, PooledBufs::default()), max_bytes }
    }

    /// An empty buffer with room for one record of `record` bytes.
    pub fn take(&self, record: usize) -> Vec<u8> {
        let mut p = self.bufs.lock();
        match p.by_size.get_mut(&record).and_then(Vec::pop) {
            Some(mut b) => {
                p.bytes -= record;
                drop(p);
                b.clear();
                b
            }
            None => {
                drop(p);
                Vec::with_capacity(record)
            }
        }
    }

    pub fn give(&self, b: Vec<u8>) {
        let cap = b.capacity();
        if !crate::base::options::recordsize_supported(cap as u64) {
            return;
        }
        let mut p = self.bufs.lock();
        // room for it: buffers of other sizes go first (the sizes in use change over time)
        while p.bytes + cap > self.max_bytes {
            let Some((&size, v)) = p.by_size.iter_mut().find(|(&s, v)| s != cap && !v.is_empty()) else { break };
            v.pop();
            p.bytes -= size;
        }
        if p.bytes + cap <= self.max_bytes {
            p.bytes += cap;
            p.by_size.entry(cap).or_default().push(b);
        }
    }
    /// Return the buffers of a layer nobody else references.
    pub fn give_layer(&self, layer: Layer) {
        for (_, r) in layer.recs {
            if let Some(b) = match r {
                Rec::Data(d) => d.into_vec(),
                Rec::Hole | Rec::Shared(_) => None,
            } {
                self.give(b);
            }
        }
    }
}
