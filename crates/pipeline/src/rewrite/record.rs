//! Rewriting one committed record with another compression (docs/design.md §15): the one
//! engine operation under `squeezefs recompress` and background compression.
//!
//! [`rewrite_record`]`(ino, idx, to, if_different)` runs these steps:
//!
//! ```text
//!   LOOK    under the file lock: the open or syncing layer holds the record → Dirty (its
//!           changes are not committed; their own txg stores them, with the compression of
//!           their writes). Else take the file's commit token (which `FileData`, and its
//!           `commits`: the commits that released a syncing layer of it), then look up the
//!           committed extent E: none → Hole; a kind of record this operation does not
//!           handle → Unsupported; stored the way `to` asks and `if_different` →
//!           AlreadyThere. The record's length in the file comes from the file's size and
//!           its own record size (`FileData::rs`), both read under that lock.
//!   ENCODE  no lock held: read E (checksum verified), pad it with zeros to the record's
//!           length in the file, compress it with `to` on the calling thread (the compress
//!           stage's one decision point, levels.rs). Raw before and raw again → NoGain.
//!   ADMIT   as a write of the record's length: the dirty throttle, then room on the
//!           devices and for the metadata (write/data.rs `reserve`).
//!   SWAP    under the file lock, a compare-and-swap on the extent. The token is unchanged,
//!           the open and syncing layers still do not hold the record and its length in the
//!           file is unchanged → the new encoding goes into the open layer as the record's
//!           content: PACKED when the record is whole (a full record of the file's own
//!           record size, as caller-runs does, early.rs), else
//!           RAW with a DONE slot holding the result → Rewritten. The token changed (a commit
//!           of this file released, or its `FileData` was retired and made anew): the layers
//!           hold the record → Dirty; else take the new token under this hold and look E up
//!           again: the same pointer → SWAP again (at most MAX_SWAP_TRIES times in all, then
//!           Busy), another one → LOOK again (at most MAX_LOOKS times, then Busy). The layers
//!           hold the record → Dirty. The length or the file's record size changed → LOOK
//!           again.
//! ```
//!
//! Why E is still the committed extent at the swap when the token did not change: the only
//! writer of extents is the commit stage; a record it stores sits in the file's syncing
//! layer from the freeze until the commit's release, which invalidates the extent cache, then
//! under the file lock drops that layer and counts the commit (sync/stages.rs `release_layers`). A
//! commit storing the record that released after the token was taken changed the token; one
//! not released yet still holds the record in its syncing layer (→ Dirty); one released
//! before the token was taken is what the lookup of E, made after it, saw. Commits of other
//! files do not matter, so a busy pool does not hold rewrites up.
//!
//! Why no write is lost: the bytes the swap puts into the open layer are exactly the
//! record's content at that moment (E's, with nothing above it), and the swap is made under
//! the file lock that every write, truncation and punch takes. A change after the swap
//! changes the open layer's copy like any dirty record; a change before it made a layer
//! hold the record, and the swap does not happen.
//!
//! Crash safety: nothing is written in place. From the swap on the record is an ordinary
//! dirty record of the open txg: placed in free space, written, flushed, checksummed, and
//! its pointer swapped from E to the new extent by that txg's one redb commit, which frees
//! E (commit.rs). A crash before that commit leaves E, after it the new copy.
//!
//! Record kinds: extents on a device and inline extents are rewritten; any other kind of
//! stored record is skipped as `Unsupported` naming it, so that a new kind (records shared
//! between files) stays untouched until this operation learns it.
//!
//! Tunables: `MAX_SWAP_TRIES` (16), `MAX_LOOKS` (4).

use crate::base::accounting::Counter;
use crate::base::error::{EngineError, Result};
use crate::base::units::record_len_in_file;
use crate::compress::policy::{Compressed, Policy};
use crate::compress::queue::{Slot, Unit, EARLY_SYNC_BYTES};
use crate::engine::inner::Inner;
use crate::txg::dirty::{DataRec, LayerView, PackedRec, Rec};
use squeezefs_codec::{Algorithm, Codec, Spec};
use squeezefs_control::qos::NO_TREE;
use squeezefs_meta::{ExtentPtr, Ino, StoredRecord};
use std::sync::atomic::AtomicU32;

/// Swaps tried for one record while commits of its file keep changing its token.
pub const MAX_SWAP_TRIES: u32 = 16;
/// Times the record is looked up afresh because its own extent changed meanwhile.
pub const MAX_LOOKS: u32 = 4;

/// What to rewrite a record with: a compression spec and compress-force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RewriteTo {
    pub spec: Spec,
    /// compress every record, skipping the compressibility check (a record that was stored
    /// compressed skips it anyway: it is known to compress)
    pub force: bool,
}

/// What `rewrite_record` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RewriteOutcome {
    /// The record's new encoding is in the open txg (durable with its commit, which frees
    /// the old copy).
    Rewritten {
        /// bytes of the record in the file
        logical: u64,
        /// stored bytes of the old copy
        old_stored: u64,
        /// stored bytes of the new one (0: the record is all zeros and becomes a hole)
        new_stored: u64,
        old_codec: Codec,
        new_codec: Codec,
    },
    Skipped(RewriteSkip),
}

/// Why a record was left as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RewriteSkip {
    /// no committed data: a hole, or past the end of the file
    Hole,
    /// stored the way the target asks already (`if_different`); `Spec::stores_as`
    AlreadyThere,
    /// stored raw, and raw again with the target (it does not compress)
    NoGain,
    /// the record has changes not committed yet; their txg stores them with the
    /// compression of their writes
    Dirty,
    /// the record kept changing under the swap (commits of it in a row)
    Busy,
    /// the file was deleted
    Gone,
    /// a kind of stored record this operation does not rewrite (named)
    Unsupported(&'static str),
}

impl RewriteSkip {
    /// Short name, for summaries and logs.
    pub fn name(self) -> &'static str {
        match self {
            RewriteSkip::Hole => "hole",
            RewriteSkip::AlreadyThere => "already stored so",
            RewriteSkip::NoGain => "does not compress",
            RewriteSkip::Dirty => "changed, not committed",
            RewriteSkip::Busy => "kept changing",
            RewriteSkip::Gone => "file deleted",
            RewriteSkip::Unsupported(k) => k,
        }
    }
}

/// The codec an extent's bytes were stored with (raw: [`Codec::NONE`]); an algorithm this
/// build does not know counts as raw-less garbage: `None`.
pub fn stored_codec(e: &ExtentPtr) -> Option<Codec> {
    match Algorithm::from_id(e.alg)? {
        Algorithm::None => Some(Codec::NONE),
        alg => Some(Codec { alg, level: e.level }),
    }
}

/// The kinds of stored record this operation rewrites; `Err` names any other (see the
/// module comment). Written with `matches!` so that a kind added to `StoredRecord` is
/// refused here until handled.
fn handled(stored: &StoredRecord) -> std::result::Result<(), &'static str> {
    if matches!(stored, StoredRecord::Device(_) | StoredRecord::Inline(_)) {
        Ok(())
    } else {
        Err("record kind not rewritten")
    }
}

/// Whether the open or syncing layer of `ino` holds record `idx` (or hides it: a truncation
/// or a punched hole).
fn layers_hold(fd: &crate::txg::dirty::FileData, idx: u64) -> bool {
    if !matches!(fd.open.view(idx), LayerView::Below) {
        return true;
    }
    fd.syncing.as_ref().is_some_and(|s| !matches!(s.view(idx), LayerView::Below))
}

/// The file's commit token (module comment): which `FileData` (its unique id), and its
/// commits.
type Token = (u64, u64);

fn token_of(fd: &crate::txg::dirty::FileData) -> Token {
    (fd.id, fd.commits)
}

/// The record as LOOK found it: its extent, the token taken before the lookup, the file's
/// record size and the record's length in the file then.
struct Looked {
    e: ExtentPtr,
    token: Token,
    rs: u64,
    want: u64,
}

/// LOOK (module comment): `Err(skip)` when there is nothing to do.
fn look(
    inner: &Inner,
    ino: Ino,
    idx: u64,
    to: &RewriteTo,
    if_different: bool,
) -> Result<std::result::Result<Looked, RewriteSkip>> {
    // the file's own record size, read with its size (it changes only while the file is
    // empty, and then the record's length below is 0)
    let (size, rs, token) = match inner.file_ref(ino) {
        Ok(f) => {
            let fd = f.lock();
            if layers_hold(&fd, idx) {
                return Ok(Err(RewriteSkip::Dirty));
            }
            (fd.size, fd.rs, token_of(&fd))
        }
        Err(EngineError::NoInode(_)) => return Ok(Err(RewriteSkip::Gone)),
        Err(e) => return Err(e),
    };
    let Some(e) = crate::read::path::extent(inner, ino, idx)? else { return Ok(Err(RewriteSkip::Hole)) };
    if let Err(kind) = handled(&e.stored) {
        return Ok(Err(RewriteSkip::Unsupported(kind)));
    }
    let want = record_len_in_file(idx, size, rs);
    if want == 0 {
        return Ok(Err(RewriteSkip::Hole));
    }
    if u64::from(e.logical) > want {
        // the file was cut inside the record without the layers showing it: not possible
        // while the layers are empty, so the size read above is already stale
        return Ok(Err(RewriteSkip::Dirty));
    }
    if if_different && stored_codec(&e).is_some_and(|c| to.spec.stores_as(c)) {
        return Ok(Err(RewriteSkip::AlreadyThere));
    }
    Ok(Ok(Looked { e, token, rs, want }))
}

/// The record's bytes encoded with `to` (ENCODE): `None` when nothing would change.
fn encode(inner: &Inner, ino: Ino, idx: u64, l: &Looked, to: &RewriteTo) -> Result<Option<(Vec<u8>, Compressed)>> {
    let stored = crate::read::path::load_uncached_unless_cached(inner, ino, idx, l.rs, &l.e)?;
    let mut data = stored.to_vec();
    drop(stored);
    // a record shorter than its length in the file reads as zeros past its end
    data.resize(l.want as usize, 0);
    let was_raw = l.e.alg == Algorithm::None.id();
    let policy = Policy { spec: to.spec, force: to.force || !was_raw, tree: NO_TREE };
    let streak = AtomicU32::new(0);
    let c = inner.compress.compress(ino, &data, policy, &streak, false, Unit::Record);
    if was_raw && matches!(c, Compressed::Raw { .. }) {
        return Ok(None);
    }
    Ok(Some((data, c)))
}

/// SWAP (module comment), under the file lock: `Ok(Some(outcome))` when done, `Ok(None)`
/// when the record must be looked up again.
fn swap(
    inner: &Inner,
    ino: Ino,
    idx: u64,
    l: &Looked,
    data: Vec<u8>,
    c: Compressed,
    to: &RewriteTo,
) -> Result<Option<RewriteOutcome>> {
    let mut token = l.token;
    for _ in 0..MAX_SWAP_TRIES {
        let f = match inner.file_ref(ino) {
            Ok(f) => f,
            Err(EngineError::NoInode(_)) => return Ok(Some(RewriteOutcome::Skipped(RewriteSkip::Gone))),
            Err(e) => return Err(e),
        };
        let mut fd = f.lock();
        if fd.retired {
            continue;
        }
        if token_of(&fd) != token {
            // a commit of this file released since the token was taken (or its FileData is
            // new): is the record's extent still E? The new token comes first, as in LOOK.
            if layers_hold(&fd, idx) {
                return Ok(Some(RewriteOutcome::Skipped(RewriteSkip::Dirty)));
            }
            token = token_of(&fd);
            drop(fd);
            match crate::read::path::extent(inner, ino, idx)? {
                Some(e) if e == l.e => continue,
                _ => return Ok(None),
            }
        }
        if layers_hold(&fd, idx) {
            return Ok(Some(RewriteOutcome::Skipped(RewriteSkip::Dirty)));
        }
        if fd.rs != l.rs || record_len_in_file(idx, fd.size, fd.rs) != l.want {
            return Ok(None);
        }
        let outcome = put(inner, ino, idx, &mut fd, l, data, c, to);
        drop(fd);
        return Ok(Some(outcome));
    }
    Ok(Some(RewriteOutcome::Skipped(RewriteSkip::Busy)))
}

/// The new encoding into the open layer (the caller holds the file lock and checked the
/// swap's conditions).
#[allow(clippy::too_many_arguments)]
fn put(
    inner: &Inner,
    ino: Ino,
    idx: u64,
    fd: &mut crate::txg::dirty::FileData,
    l: &Looked,
    data: Vec<u8>,
    c: Compressed,
    to: &RewriteTo,
) -> RewriteOutcome {
    let len = data.len() as u64;
    let (new_codec, new_stored) = match &c {
        Compressed::Packed { codec, bytes, .. } => (*codec, bytes.len() as u64),
        Compressed::Raw { .. } => (Codec::NONE, len),
        Compressed::Zeros => (Codec::NONE, 0),
    };
    // the record's bytes count as compressed and waiting for a txg, like caller-runs'
    let ready = inner.acct.charge(Counter::Ready, 0);
    let kick = ready.add(len) >= EARLY_SYNC_BYTES;
    let rec = match c {
        Compressed::Packed { codec, bytes, hash } if len == l.rs => {
            DataRec::packed(PackedRec { codec, bytes, hash, logical: len as usize, ready, place: Default::default() })
        }
        other => {
            let policy = Policy { spec: to.spec, force: to.force, tree: NO_TREE };
            let slot = Slot::finished(other, policy, ino, ready, &inner.acct);
            let mut rec = DataRec::new(data);
            rec.set_early(slot);
            rec
        }
    };
    let packed = rec.packed_rec().is_some();
    fd.open.recs.insert(idx, Rec::Data(rec));
    inner.acct.resize_layer(&mut fd.open.bytes, len, 0);
    fd.open_dirty = true;
    inner.dirty.mark_changed(ino);
    if packed {
        fd.open.place_early(&inner.early, &inner.space, &inner.acct, inner.max_inline);
    }
    if kick {
        inner.txg.kick();
    }
    RewriteOutcome::Rewritten {
        logical: len,
        old_stored: l.e.psize(),
        new_stored,
        old_codec: stored_codec(&l.e).unwrap_or(Codec::NONE),
        new_codec,
    }
}

/// Rewrite record `idx` of `ino` with `to` if its committed extent is still the one read
/// (see the module comment); `if_different`: leave records stored that way already.
pub fn rewrite_record(inner: &Inner, ino: Ino, idx: u64, to: RewriteTo, if_different: bool) -> Result<RewriteOutcome> {
    inner.check_writable()?;
    for _ in 0..MAX_LOOKS {
        let l = match look(inner, ino, idx, &to, if_different)? {
            Ok(l) => l,
            Err(skip) => return Ok(RewriteOutcome::Skipped(skip)),
        };
        let Some((data, c)) = encode(inner, ino, idx, &l, &to)? else {
            return Ok(RewriteOutcome::Skipped(RewriteSkip::NoGain));
        };
        inner.throttle.delay(&inner.acct, &inner.txg)?;
        crate::write::data::reserve(inner, data.len() as u64)?;
        if let Some(outcome) = swap(inner, ino, idx, &l, data, c, &to)? {
            return Ok(outcome);
        }
    }
    Ok(RewriteOutcome::Skipped(RewriteSkip::Busy))
}
