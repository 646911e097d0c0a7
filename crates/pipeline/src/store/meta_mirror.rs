//! The checked metadata store as redb's `StorageBackend`: one or two copies of redb's file
//! (meta_copy.rs), each 4 KiB block checked against its own checksum before redb sees it.
//! redb trusts the pages it reads, so a damaged block is caught here, below it: a block
//! that fails its checksum in one copy is taken from the other, written back over the bad
//! one (read-write opens), counted and logged; one bad in every copy is an I/O error naming
//! it, never bytes redb could misparse.
//!
//! Crash consistency: the copies take the syncs in turn. Between two syncs every write
//! goes to one copy, the target; the other holds the last sync whole and is not touched.
//! `sync_data` writes the target's changed sums and a header with the next `seq` and the
//! digest of every sum, and syncs the target alone: a commit costs one flush, as with
//! one copy. The target is then the copy holding the last sync, and the other copy gets
//! that sync's blocks (kept in memory up to [`KEPT_MAX`], past it read back and checked)
//! and sums, unsynced: it is the target until the next sync. So at any instant at most
//! one copy is between two syncs, a crash leaves the other whole at the last sync redb
//! was told was durable, and the target holds the newest bytes of every block, which is
//! where reads go. Of copies that check whole after a crash, the one with the higher
//! `seq` holds the later sync; a header whose digest does not match its copy's sums was
//! written by a sync that did not finish, and its copy is not trusted.
//!
//! A clean close writes a header with the same random stamp to every copy. An open that
//! finds every header clean with one stamp trusts the copies to be equal and checks blocks
//! as they are read; any other open (a crash, a damaged header) first checks every block of
//! every copy (`check`) and makes them equal from the one to trust: the whole copy with
//! the later sync (`whole`), else copy 0 with each of its bad blocks taken from a copy
//! where that one holds what copy 0's sum says.

use crate::store::meta_copy::{
    block_sum, copy_len, data_offset, encode_sums, groups_for, random_stamp, sum_offset, sums_digest, zero_sum,
    CopyFile, CopyHeader, BLOCK, PER_GROUP,
};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::BTreeSet;
use std::io::{Error, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A block put right from another copy.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Repair {
    /// the copy that was rewritten (0 or 1)
    pub copy: usize,
    /// what: `block N` (redb's bytes N·4096..), `sums of blocks A..B`, `header`
    pub what: String,
    /// written back to the file (false: a read-only open only read around it)
    pub written: bool,
}

/// A block no copy holds intact.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LostBlock {
    pub block: u64,
    /// redb's byte offset of the block
    pub offset: u64,
    /// what redb keeps there
    pub held: String,
}

/// The state of one copy, as a full check found it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CopyCheck {
    pub path: PathBuf,
    pub present: bool,
    pub header_ok: bool,
    pub clean: bool,
    /// logical blocks the copy holds
    pub blocks: u64,
    /// blocks that fail their checksum (or whose sum block is damaged)
    pub bad_blocks: Vec<u64>,
    /// groups whose sum block is damaged
    pub bad_sum_groups: Vec<u64>,
    /// blocks that differ from the copy trusted: intact, or failing their sums in a copy
    /// left open mid-sync (an interrupted sync the next read-write open copies)
    pub stale_blocks: u64,
}

/// Every block of every copy checked (scrub, fsck, an open after a crash).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StoreCheck {
    pub copies: Vec<CopyCheck>,
    /// the copy trusted
    pub authority: usize,
    /// logical blocks of the store
    pub blocks: u64,
    pub repaired: Vec<Repair>,
    pub lost: Vec<LostBlock>,
    /// the highest `seq` of the copies' headers
    pub seq: u64,
    /// (block, its sum) of the blocks taken as written (`survey`): the sums a read-only
    /// open checks them by, since the copy's own are those of the last sync
    #[serde(skip)]
    pub taken: Vec<(u64, u64)>,
}

impl StoreCheck {
    /// Nothing damaged in any copy, nothing differing but what a crash leaves: copies
    /// left open for writing (not clean) may differ by the sync that was being copied,
    /// which the next read-write open copies (module comment).
    pub fn is_clean(&self) -> bool {
        self.lost.is_empty()
            && self.copies.iter().all(|c| {
                c.present
                    && c.header_ok
                    && c.bad_blocks.is_empty()
                    && c.bad_sum_groups.is_empty()
                    && (c.stale_blocks == 0 || !c.clean)
            })
    }
}

/// What redb keeps in logical block `l`.
pub fn held_by(l: u64) -> String {
    if l == 0 {
        "redb's header (the commit slots and the roots of every table)".to_string()
    } else {
        format!(
            "a page of the metadata B-trees or its free space (bytes {}..{})",
            l * BLOCK as u64,
            (l + 1) * BLOCK as u64
        )
    }
}

fn lost_error(paths: &[PathBuf], l: u64) -> Error {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    Error::new(
        ErrorKind::InvalidData,
        format!(
            "metadata block {l} ({}) is damaged in every copy ({}): no intact copy to read it from",
            held_by(l),
            names.join(", ")
        ),
    )
}

/// Bytes of changed blocks kept in memory between two syncs: a sync's blocks reach the
/// other copy without being read back and hashed again. Past it, the blocks of the
/// largest commits are read back from the copy just synced.
pub const KEPT_MAX: usize = 16 << 20;

struct State {
    /// redb's length in bytes
    len: u64,
    /// the checksum of each logical block
    sums: Vec<u64>,
    /// blocks whose checksum no copy holds intact: unreadable until rewritten
    unknown: BTreeSet<u64>,
    /// groups changed since the last sync
    dirty_groups: BTreeSet<u64>,
    /// blocks changed since the last sync
    dirty_blocks: BTreeSet<u64>,
    /// the bytes of dirty blocks, kept up to [`KEPT_MAX`] while two copies are written,
    /// for the copy that takes them after the sync; a dirty block not here is read back
    kept: std::collections::BTreeMap<u64, Box<[u8]>>,
    /// whether a second copy is written (blocks are kept only then)
    keep: bool,
    /// the copy holding the last sync whole (module comment); a read-only open's copy
    /// trusted
    cur: usize,
    /// the syncs taken: `cur`'s header `seq`
    seq: u64,
    /// copies that may serve a read of a block bad in the first one asked
    usable: Vec<bool>,
    /// why giving a sync to the other copy failed: that copy may hold part of it, so
    /// nothing more is written (the copy synced last stays whole for the next open)
    failed: Option<String>,
}

impl State {
    /// An error once giving a sync to the other copy failed (`failed`).
    fn writable(&self) -> std::io::Result<()> {
        match &self.failed {
            Some(e) => {
                Err(Error::other(format!("the metadata store takes no more changes: copying a sync failed: {e}")))
            }
            None => Ok(()),
        }
    }
}

/// What a `Mirror` and its owner share: the copies, and the counts of what was repaired.
pub struct Shared {
    files: Vec<CopyFile>,
    write: bool,
    /// held by a change (a write, a resize) and through a whole sync, so that no change
    /// reaches the copy being synced after its sums were taken (redb does not change the
    /// store while it syncs it; this keeps the copies right if it ever did), while reads
    /// go on during the flush
    changes: Mutex<()>,
    state: Mutex<State>,
    locks: redb::backends::FileBackend,
    /// the directory lock of [`hold_store`], released with the store
    _held: std::fs::File,
    healed: AtomicU64,
    repairs: Mutex<Vec<Repair>>,
    /// blocks a read found damaged in every copy, until taken (meta_owner.rs)
    lost_reads: Mutex<BTreeSet<u64>>,
    /// what the open found, when it checked every block
    pub opened_after_check: Option<StoreCheck>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("files", &self.files).field("write", &self.write).finish()
    }
}

/// redb's storage backend over the copies.
#[derive(Debug, Clone)]
pub struct Mirror(pub Arc<Shared>);

/// Create the copies of a new, empty store (headers only; redb initialises it once opened).
pub fn create(paths: &[PathBuf]) -> std::io::Result<()> {
    let copies = paths.len() as u8;
    for (i, p) in paths.iter().enumerate() {
        let f = CopyFile::create(p)?;
        let digest = Some(sums_digest(&[]));
        f.write_header(&CopyHeader { index: i as u8, copies, clean: true, stamp: 1, len: 0, seq: 0, digest })?;
        f.sync()?;
    }
    Ok(())
}

fn sums_of_copy(f: &CopyFile, blocks: u64) -> (Vec<Option<u64>>, Vec<u64>) {
    let mut sums = vec![None; blocks as usize];
    let mut bad_groups = Vec::new();
    for g in 0..groups_for(blocks) {
        match f.sums(g) {
            Some(s) => {
                let end = ((g + 1) * PER_GROUP).min(blocks);
                for l in g * PER_GROUP..end {
                    sums[l as usize] = Some(s[(l - g * PER_GROUP) as usize]);
                }
            }
            None => bad_groups.push(g),
        }
    }
    (sums, bad_groups)
}

/// One copy surveyed: its blocks, the checksum of each that verifies (`None`: bad).
struct Survey {
    present: bool,
    header: Option<CopyHeader>,
    blocks: u64,
    good: Vec<Option<u64>>,
    bad_groups: Vec<u64>,
    /// blocks taken as they are though they fail their sums (`survey`'s `as_written`)
    taken: Vec<u64>,
}

/// Copy `f` surveyed. A block whose sum block is damaged is checked against the sum of
/// another copy (`fallback`: the copies' sums are the same while they are equal), so a
/// damaged sum block does not count its 511 blocks lost when the other copy has them.
/// With `as_written` (the only copy of a store left open: a crash stopped it between a
/// write and the sync that writes its sum, and no other copy can tell that from damage)
/// a block failing its sum is taken as it is, as redb would find it in a plain file.
fn survey(
    f: Option<&CopyFile>,
    own: (Vec<Option<u64>>, Vec<u64>),
    fallback: &[Option<u64>],
    as_written: bool,
) -> Survey {
    let Some(f) = f else {
        return Survey {
            present: false,
            header: None,
            blocks: 0,
            good: Vec::new(),
            bad_groups: Vec::new(),
            taken: Vec::new(),
        };
    };
    let header = f.header();
    let (sums, bad_groups) = own;
    let blocks = sums.len() as u64;
    let mut good = vec![None; blocks as usize];
    let mut buf = vec![0u8; BLOCK];
    let mut taken = Vec::new();
    for l in 0..blocks {
        let want = sums[l as usize].or_else(|| fallback.get(l as usize).copied().flatten());
        if f.read_at(data_offset(l), &mut buf).is_err() {
            continue;
        }
        let have = block_sum(&buf);
        if want == Some(have) {
            good[l as usize] = Some(have);
        } else if as_written {
            good[l as usize] = Some(have);
            taken.push(l);
        }
    }
    let bad_groups = if as_written { Vec::new() } else { bad_groups };
    Survey { present: true, header, blocks, good, bad_groups, taken }
}

/// How far copy `s` can be trusted, `None` when not at all: every block verifies against
/// its own sums, and its header's digest matches those sums (a copy stopped inside a sync
/// may verify block by block, yet mix the blocks of two syncs). Of two that can, the one
/// with an intact header, then the higher `seq`, holds the later commit; ties go to the
/// lower index (`max` over `(rank, Reverse(index))`).
fn whole(s: &Survey) -> Option<(bool, u64)> {
    if !s.present || !s.bad_groups.is_empty() || s.good.iter().any(Option::is_none) {
        return None;
    }
    match s.header {
        None => Some((false, 0)),
        Some(h) => {
            let sums: Vec<u64> = s.good.iter().map(|g| g.expect("every block good")).collect();
            // a version 1 header (no digest) says nothing of its copy's state but the close
            let fits = h.digest.is_none_or(|d| h.len.div_ceil(BLOCK as u64) == s.blocks && d == sums_digest(&sums));
            fits.then_some((true, h.seq))
        }
    }
}

/// Check every block of every copy; with `repair`, make every copy equal to the one
/// trusted (module comment) and mark them clean.
pub fn check(paths: &[PathBuf], repair: bool) -> std::io::Result<StoreCheck> {
    let files: Vec<Option<CopyFile>> = paths
        .iter()
        .map(|p| match CopyFile::open(p, repair) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        })
        .collect::<std::io::Result<_>>()?;
    let own: Vec<(Vec<Option<u64>>, Vec<u64>)> = files
        .iter()
        .map(|f| match f {
            Some(f) => sums_of_copy(f, crate::store::meta_copy::blocks_in(f.len().unwrap_or(0))),
            None => (Vec::new(), Vec::new()),
        })
        .collect();
    let surveys: Vec<Survey> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            // the sums of the other copies, where this one's are lost
            let fallback: Vec<Option<u64>> = (0..own[i].0.len())
                .map(|l| (0..own.len()).filter(|&j| j != i).find_map(|j| own[j].0.get(l).copied().flatten()))
                .collect();
            let open = f.as_ref().and_then(|f| f.header()).is_some_and(|h| !h.clean);
            survey(f.as_ref(), own[i].clone(), &fallback, paths.len() == 1 && open)
        })
        .collect();
    let authority = (0..surveys.len())
        .filter_map(|i| whole(&surveys[i]).map(|r| (r, std::cmp::Reverse(i))))
        .max()
        .map_or(0, |(_, std::cmp::Reverse(i))| i);
    let settled = whole(&surveys[authority]).is_some();
    let blocks = surveys[authority].blocks;
    // the store as it is to be: each block's content from the authority, or from another
    // copy where that one holds what the authority's sum says (the copies may differ by a
    // sync after a crash)
    let mut source: Vec<Option<(usize, u64)>> = vec![None; blocks as usize];
    let mut lost = Vec::new();
    for l in 0..blocks {
        let want = surveys[authority].good.get(l as usize).copied().flatten().or(own[authority]
            .0
            .get(l as usize)
            .copied()
            .flatten());
        let from = std::iter::once(authority)
            .chain((0..surveys.len()).filter(|&i| i != authority))
            .filter_map(|i| surveys[i].good.get(l as usize).copied().flatten().map(|s| (i, s)))
            .find(|&(_, s)| want.is_none_or(|w| w == s));
        match from {
            Some(f) => source[l as usize] = Some(f),
            None => lost.push(LostBlock { block: l, offset: l * BLOCK as u64, held: held_by(l) }),
        }
    }
    let mut copies = Vec::new();
    let mut repaired = Vec::new();
    for (i, s) in surveys.iter().enumerate() {
        let mut bad_blocks: Vec<u64> = (0..s.blocks).filter(|&l| s.good[l as usize].is_none()).collect();
        let mut bad_sum_groups = s.bad_groups.clone();
        let mut stale = (0..s.blocks.min(blocks))
            .filter(|&l| matches!((s.good[l as usize], source[l as usize]), (Some(a), Some((_, b))) if a != b))
            .count() as u64
            + s.blocks.abs_diff(blocks)
            + s.taken.len() as u64;
        // A copy left open beside a whole authority was the one between two syncs: the
        // blocks written to it since its last sync get their sums only at its next, so
        // blocks failing their sums there are those writes, not damage. The authority
        // holds every block of the last sync and the next read-write open copies them.
        if i != authority && settled && s.header.is_some_and(|h| !h.clean) {
            stale += bad_blocks.len() as u64;
            bad_blocks.clear();
            bad_sum_groups.clear();
        }
        copies.push(CopyCheck {
            path: paths[i].clone(),
            present: s.present,
            header_ok: s.header.is_some_and(|h| h.index as usize == i),
            clean: s.header.is_some_and(|h| h.clean),
            blocks: s.blocks,
            bad_blocks,
            bad_sum_groups,
            stale_blocks: stale,
        });
    }
    let seq = surveys.iter().filter_map(|s| s.header.map(|h| h.seq)).max().unwrap_or(0);
    if repair {
        repaired = rewrite(paths, files, &surveys, &source, blocks, seq)?;
    }
    let taken = surveys.iter().flat_map(|s| s.taken.iter().map(|&l| (l, s.good[l as usize].expect("taken")))).collect();
    Ok(StoreCheck { copies, authority, blocks, repaired, lost, seq, taken })
}

/// Make every copy hold `source`'s blocks, then mark them all clean with one stamp.
fn rewrite(
    paths: &[PathBuf],
    mut files: Vec<Option<CopyFile>>,
    surveys: &[Survey],
    source: &[Option<(usize, u64)>],
    blocks: u64,
    seq: u64,
) -> std::io::Result<Vec<Repair>> {
    let mut repaired = Vec::new();
    let copies = paths.len() as u8;
    for (i, f) in files.iter_mut().enumerate() {
        if f.is_none() {
            *f = Some(CopyFile::create(&paths[i])?);
            repaired.push(Repair { copy: i, what: "the whole copy (it was missing)".into(), written: true });
        }
    }
    let files: Vec<CopyFile> = files.into_iter().map(|f| f.expect("created above")).collect();
    // every sum as it is to be; a lost block keeps the authority's sum, so it stays bad
    let auth_sums: Vec<u64> = (0..blocks as usize)
        .map(|l| source[l].map(|(_, s)| s).unwrap_or_else(|| lost_sum(&files, surveys, l as u64)))
        .collect();
    let mut buf = vec![0u8; BLOCK];
    // copy 0 first, whole and synced, then copy 1: a crash in between leaves copy 0 to trust
    for (i, f) in files.iter().enumerate() {
        let old = &surveys[i];
        let len = blocks * BLOCK as u64;
        f.write_header(&CopyHeader { index: i as u8, copies, clean: false, stamp: 0, len, seq, digest: None })?;
        f.set_len(copy_len(blocks))?;
        let mut fixed = 0u64;
        for l in 0..blocks {
            let Some((from, sum)) = source[l as usize] else { continue };
            if old.good.get(l as usize).copied().flatten() == Some(sum) {
                continue;
            }
            files[from].read_at(data_offset(l), &mut buf)?;
            if block_sum(&buf) != sum {
                return Err(Error::new(
                    ErrorKind::InvalidData,
                    format!("{}: block {l} changed while it was repaired", paths[from].display()),
                ));
            }
            f.write_at(data_offset(l), &buf)?;
            if fixed < 64 {
                repaired.push(Repair { copy: i, what: format!("block {l}"), written: true });
            }
            fixed += 1;
        }
        if fixed > 64 {
            repaired.push(Repair { copy: i, what: format!("{} more blocks", fixed - 64), written: true });
        }
        for g in 0..groups_for(blocks) {
            let lo = (g * PER_GROUP) as usize;
            let hi = (((g + 1) * PER_GROUP).min(blocks)) as usize;
            let want = encode_sums(&auth_sums[lo..hi]);
            let mut have = vec![0u8; BLOCK];
            if f.read_at(sum_offset(g), &mut have).is_err() || have != want {
                f.write_at(sum_offset(g), &want)?;
                if old.bad_groups.contains(&g) {
                    repaired.push(Repair { copy: i, what: format!("sums of blocks {lo}..{hi}"), written: true });
                }
            }
        }
        f.sync()?;
    }
    let stamp = random_stamp();
    for (i, f) in files.iter().enumerate() {
        if surveys[i].present && surveys[i].header.is_none_or(|h| h.index as usize != i) {
            repaired.push(Repair { copy: i, what: "header".into(), written: true });
        }
        let (len, digest) = (blocks * BLOCK as u64, Some(sums_digest(&auth_sums)));
        f.write_header(&CopyHeader { index: i as u8, copies, clean: true, stamp, len, seq, digest })?;
        f.sync()?;
    }
    Ok(repaired)
}

/// The sum a lost block keeps: its authority's intact sum entry, else one no block matches.
fn lost_sum(files: &[CopyFile], _surveys: &[Survey], l: u64) -> u64 {
    let g = l / PER_GROUP;
    files.iter().find_map(|f| f.sums(g)).map(|s| s[(l % PER_GROUP) as usize]).unwrap_or(!zero_sum())
}

/// The opener's hold on the store: a `flock` of the directory holding the copies, exclusive
/// for a writer, shared for readers, taken before the copies are read. redb's own locks come
/// only when it opens the database, after the open has checked (and may have rewritten)
/// blocks, which only the store's sole writer may do: a daemon still closing the store
/// keeps writing it. Refused: [`ErrorKind::WouldBlock`]. The directory, not a copy, carries
/// the lock, so it never meets redb's locks on copy 0.
fn hold_store(copy0: &Path, write: bool) -> std::io::Result<std::fs::File> {
    let dir = copy0.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let f = std::fs::File::open(dir)?;
    let op = if write { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB;
    match crate::base::pool_lock::flock(&f, op) {
        Ok(()) => Ok(f),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Err(Error::new(
            ErrorKind::WouldBlock,
            format!("the metadata store {} is open in another process", copy0.display()),
        )),
        Err(e) => Err(e),
    }
}

impl Shared {
    /// Open the copies at `paths` (copy 0 first) for redb; `write`: read-write.
    pub fn open(paths: &[PathBuf], write: bool) -> std::io::Result<Arc<Shared>> {
        Self::open_with_cut(paths, write, None)
    }

    /// `open`, the files' writes and syncs going through a test's power cut.
    pub fn open_with_cut(
        paths: &[PathBuf],
        write: bool,
        cut: Option<Arc<crate::store::meta_copy::PowerCut>>,
    ) -> std::io::Result<Arc<Shared>> {
        let held = hold_store(&paths[0], write)?;
        let headers: Vec<Option<CopyHeader>> =
            paths.iter().map(|p| CopyFile::open(p, false).ok().and_then(|f| f.header())).collect();
        let lens: Vec<Option<u64>> = paths.iter().map(|p| std::fs::metadata(p).ok().map(|m| m.len())).collect();
        let trusted = match headers.first().copied().flatten() {
            Some(h0) => headers.iter().zip(&lens).all(|(h, len)| {
                h.is_some_and(|h| h.clean && h.stamp == h0.stamp && h.len == h0.len)
                    && *len == Some(copy_len(h0.len.div_ceil(BLOCK as u64)))
            }),
            None => false,
        };
        let mut after_check = None;
        let mut primary = 0;
        let mut usable = vec![true; paths.len()];
        let mut seq = headers.iter().flatten().map(|h| h.seq).max().unwrap_or(0);
        if !trusted {
            log::warn!(
                "metadata store {}: not closed cleanly or damaged; checking every block of its {} copies",
                paths[0].display(),
                paths.len()
            );
            let c = check(paths, write)?;
            if !write {
                primary = c.authority;
                for (i, cc) in c.copies.iter().enumerate() {
                    usable[i] = cc.present && cc.stale_blocks == 0;
                }
            }
            seq = seq.max(c.seq);
            after_check = Some(c);
        }
        let files: Vec<CopyFile> = paths
            .iter()
            .map(|p| CopyFile::open(p, write).map(|f| f.with_cut(cut.clone())))
            .collect::<std::io::Result<_>>()?;
        let len = match files[primary].header() {
            Some(h) if trusted => h.len,
            _ => crate::store::meta_copy::blocks_in(files[primary].len()?) * BLOCK as u64,
        };
        let blocks = len.div_ceil(BLOCK as u64);
        let mut sums = vec![0u64; blocks as usize];
        let mut unknown = BTreeSet::new();
        let mut repairs = Vec::new();
        for g in 0..groups_for(blocks) {
            let order = std::iter::once(primary).chain((0..files.len()).filter(|&i| i != primary && usable[i]));
            let mut found = None;
            for (n, i) in order.enumerate() {
                if let Some(s) = files[i].sums(g) {
                    found = Some((n, s));
                    break;
                }
            }
            let (lo, hi) = (g * PER_GROUP, ((g + 1) * PER_GROUP).min(blocks));
            match found {
                Some((n, s)) => {
                    for l in lo..hi {
                        sums[l as usize] = s[(l - lo) as usize];
                    }
                    if n > 0 {
                        if write {
                            files[primary].write_at(sum_offset(g), &encode_sums(&sums[lo as usize..hi as usize]))?;
                        }
                        log::warn!(
                            "{}: sums of blocks {lo}..{hi} damaged; taken from another copy",
                            files[primary].path.display()
                        );
                        repairs.push(Repair {
                            copy: primary,
                            what: format!("sums of blocks {lo}..{hi}"),
                            written: write,
                        });
                    }
                }
                None => unknown.extend(lo..hi),
            }
        }
        if let Some(c) = &after_check {
            for &(l, sum) in &c.taken {
                if let Some(s) = sums.get_mut(l as usize) {
                    *s = sum;
                    unknown.remove(&l);
                }
            }
        }
        let locks =
            redb::backends::FileBackend::new(std::fs::OpenOptions::new().read(true).write(write).open(&paths[0])?)
                .map_err(|e| Error::other(e.to_string()))?;
        if write {
            // a crash from here on must not find the copies clean; the copies are equal
            // here (closed cleanly, or made so by the check), each whole at `seq`
            let digest = Some(sums_digest(&sums));
            for (i, f) in files.iter().enumerate() {
                let copies = paths.len() as u8;
                f.write_header(&CopyHeader { index: i as u8, copies, clean: false, stamp: 0, len, seq, digest })?;
                f.sync()?;
            }
        }
        let healed = repairs.len() as u64;
        Ok(Arc::new(Shared {
            write,
            state: Mutex::new(State {
                len,
                sums,
                unknown,
                dirty_groups: BTreeSet::new(),
                dirty_blocks: BTreeSet::new(),
                kept: std::collections::BTreeMap::new(),
                keep: write && files.len() > 1,
                cur: primary,
                seq,
                usable,
                failed: None,
            }),
            changes: Mutex::new(()),
            files,
            locks,
            _held: held,
            healed: AtomicU64::new(healed),
            repairs: Mutex::new(repairs),
            lost_reads: Mutex::new(BTreeSet::new()),
            opened_after_check: after_check,
        }))
    }

    /// Blocks read from another copy since the open (and, read-write, written back).
    pub fn healed(&self) -> u64 {
        self.healed.load(Ordering::Relaxed)
    }

    pub fn repairs(&self) -> Vec<Repair> {
        self.repairs.lock().clone()
    }

    /// The blocks reads found damaged in every copy since the last call.
    pub fn take_lost_reads(&self) -> BTreeSet<u64> {
        std::mem::take(&mut *self.lost_reads.lock())
    }

    pub fn copies(&self) -> usize {
        self.files.len()
    }

    pub fn paths(&self) -> Vec<PathBuf> {
        self.files.iter().map(|f| f.path.clone()).collect()
    }

    /// The copy the writes until the next sync go to (module comment); it holds the newest
    /// bytes of every block. A read-only open reads the copy it trusts.
    fn tgt(&self, st: &State) -> usize {
        if self.write && self.files.len() > 1 {
            1 - st.cur
        } else {
            st.cur
        }
    }

    /// Logical block `l` into `buf`, checked; from another copy when the first one's is bad.
    fn read_block(&self, st: &State, l: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let first = self.tgt(st);
        if !st.unknown.contains(&l) {
            let order = std::iter::once(first).chain((0..self.files.len()).filter(|&i| i != first && st.usable[i]));
            for (n, i) in order.enumerate() {
                // a block changed since the last sync is in the copy being written only
                if n > 0 && st.dirty_blocks.contains(&l) {
                    break;
                }
                if self.files[i].read_at(data_offset(l), buf).is_err() || block_sum(buf) != st.sums[l as usize] {
                    continue;
                }
                if n > 0 {
                    if self.write {
                        self.files[first].write_at(data_offset(l), buf)?;
                    }
                    log::warn!(
                        "{}: metadata block {l} failed its checksum; read from {}{}",
                        self.files[first].path.display(),
                        self.files[i].path.display(),
                        if self.write { " and rewritten" } else { "" }
                    );
                    self.healed.fetch_add(1, Ordering::Relaxed);
                    self.repairs.lock().push(Repair { copy: first, what: format!("block {l}"), written: self.write });
                }
                return Ok(());
            }
        }
        log::error!("{}: metadata block {l} is damaged in every copy", self.files[first].path.display());
        self.lost_reads.lock().insert(l);
        Err(lost_error(&self.paths(), l))
    }

    /// Block `l` now holds `bytes` (in the copy being written): dirty until the next sync.
    fn mark(&self, st: &mut State, l: u64, bytes: &[u8]) {
        st.dirty_groups.insert(l / PER_GROUP);
        st.dirty_blocks.insert(l);
        st.unknown.remove(&l);
        if !st.keep {
            return;
        }
        // a kept block always holds the block's newest bytes, or is dropped
        if let Some(b) = st.kept.get_mut(&l) {
            b.copy_from_slice(bytes);
        } else if (st.kept.len() + 1) * BLOCK <= KEPT_MAX {
            st.kept.insert(l, bytes.into());
        }
    }

    /// After a sync to copy `from`: give copy `to` the sync's changes (its length, the
    /// blocks, kept ones as they are and the others read back from `from` and checked, a
    /// run of consecutive blocks within one group as one write, and the sums of `groups`),
    /// unsynced: `to` is the copy between syncs from here on, and holds the newest bytes
    /// of every block once this returns.
    fn catch_up(&self, st: &mut State, from: usize, to: usize, groups: &[(u64, Vec<u8>)]) -> std::io::Result<()> {
        let (a, b) = (&self.files[from], &self.files[to]);
        let blocks = st.sums.len() as u64;
        if b.len()? != copy_len(blocks) {
            b.set_len(copy_len(blocks))?;
        }
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0u64;
        let mut buf = vec![0u8; BLOCK];
        let mut kept = std::mem::take(&mut st.kept);
        for &l in &st.dirty_blocks {
            let follows = !run.is_empty() && l == run_start + (run.len() / BLOCK) as u64 && l % PER_GROUP != 0;
            if !follows && !run.is_empty() {
                b.write_at(data_offset(run_start), &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = l;
            }
            match kept.remove(&l) {
                Some(k) => run.extend_from_slice(&k),
                None => {
                    a.read_at(data_offset(l), &mut buf)?;
                    if block_sum(&buf) != st.sums[l as usize] {
                        return Err(Error::new(
                            ErrorKind::InvalidData,
                            format!("{}: block {l} does not hold what was synced", a.path.display()),
                        ));
                    }
                    run.extend_from_slice(&buf);
                }
            }
        }
        if !run.is_empty() {
            b.write_at(data_offset(run_start), &run)?;
        }
        for (g, s) in groups {
            b.write_at(sum_offset(*g), s)?;
        }
        Ok(())
    }

    /// The header of copy `i` for a sync (or a close: `clean`, with `stamp`) at `seq`.
    fn header_for(&self, st: &State, i: usize, seq: u64, clean: bool, stamp: u64) -> CopyHeader {
        CopyHeader {
            index: i as u8,
            copies: self.files.len() as u8,
            clean,
            stamp,
            len: st.len,
            seq,
            digest: Some(sums_digest(&st.sums)),
        }
    }
}

impl redb::StorageBackend for Mirror {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.0.state.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let s = &*self.0;
        let st = s.state.lock();
        if offset + out.len() as u64 > st.len {
            return Err(Error::new(ErrorKind::UnexpectedEof, "read past the end of the metadata store"));
        }
        let mut buf = vec![0u8; BLOCK];
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let l = at / BLOCK as u64;
            let skip = (at % BLOCK as u64) as usize;
            let n = (BLOCK - skip).min(out.len() - done);
            if skip == 0 && n == BLOCK {
                s.read_block(&st, l, &mut out[done..done + BLOCK])?;
            } else {
                s.read_block(&st, l, &mut buf)?;
                out[done..done + n].copy_from_slice(&buf[skip..skip + n]);
            }
            done += n;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let s = &*self.0;
        let _change = s.changes.lock();
        let mut st = s.state.lock();
        st.writable()?;
        let t = s.tgt(&st);
        let (old, new) = (st.sums.len() as u64, len.div_ceil(BLOCK as u64));
        if new < old {
            st.sums.truncate(new as usize);
            st.dirty_blocks.retain(|&l| l < new);
            st.kept.retain(|&l, _| l < new);
            st.unknown.retain(|&l| l < new);
            st.dirty_groups.retain(|&g| g < groups_for(new));
            if new > 0 {
                st.dirty_groups.insert((new - 1) / PER_GROUP);
            }
        } else if new > old {
            st.sums.resize(new as usize, zero_sum());
            for g in old / PER_GROUP..groups_for(new) {
                st.dirty_groups.insert(g);
            }
        }
        // a length inside a block: its tail past `len` must read as zeros once regrown
        if !len.is_multiple_of(BLOCK as u64) && new <= old && new > 0 {
            let l = new - 1;
            let mut buf = vec![0u8; BLOCK];
            s.read_block(&st, l, &mut buf)?;
            buf[(len % BLOCK as u64) as usize..].fill(0);
            s.files[t].write_at(data_offset(l), &buf)?;
            st.sums[l as usize] = block_sum(&buf);
            s.mark(&mut st, l, &buf);
        }
        // only the copy being written changes length now; the other takes it after the sync
        s.files[t].set_len(copy_len(new))?;
        st.len = len;
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        let s = &*self.0;
        let _change = s.changes.lock();
        let (t, seq, groups) = {
            let st = s.state.lock();
            st.writable()?;
            let t = s.tgt(&st);
            let blocks = st.sums.len() as u64;
            let mut groups = Vec::new();
            for &g in &st.dirty_groups {
                let (lo, hi) = ((g * PER_GROUP) as usize, (((g + 1) * PER_GROUP).min(blocks)) as usize);
                let b = encode_sums(&st.sums[lo..hi]);
                s.files[t].write_at(sum_offset(g), &b)?;
                groups.push((g, b));
            }
            let seq = st.seq + 1;
            s.files[t].write_header(&s.header_for(&st, t, seq, false, 0))?;
            (t, seq, groups)
        };
        // redb writes nothing while it syncs; reads go on, from `t`
        s.files[t].sync()?;
        let mut st = s.state.lock();
        st.seq = seq;
        if s.files.len() > 1 {
            if let Err(e) = s.catch_up(&mut st, t, 1 - t, &groups) {
                st.failed = Some(format!("{}: {e}", s.files[1 - t].path.display()));
                return Err(e);
            }
        }
        st.cur = t;
        st.dirty_groups.clear();
        st.dirty_blocks.clear();
        st.kept.clear();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let s = &*self.0;
        let _change = s.changes.lock();
        let mut st = s.state.lock();
        st.writable()?;
        if offset + data.len() as u64 > st.len {
            return Err(Error::new(ErrorKind::InvalidInput, "write past the end of the metadata store"));
        }
        let t = s.tgt(&st);
        let mut done = 0usize;
        let mut buf = vec![0u8; BLOCK];
        while done < data.len() {
            let at = offset + done as u64;
            let l = at / BLOCK as u64;
            let skip = (at % BLOCK as u64) as usize;
            if skip == 0 && data.len() - done >= BLOCK {
                // a run of whole blocks within one group is one write
                let room = (PER_GROUP - l % PER_GROUP) as usize;
                let whole = ((data.len() - done) / BLOCK).min(room);
                let run = &data[done..done + whole * BLOCK];
                for (k, b) in run.chunks_exact(BLOCK).enumerate() {
                    st.sums[l as usize + k] = block_sum(b);
                    s.mark(&mut st, l + k as u64, b);
                }
                s.files[t].write_at(data_offset(l), run)?;
                done += whole * BLOCK;
            } else {
                let n = (BLOCK - skip).min(data.len() - done);
                s.read_block(&st, l, &mut buf)?;
                buf[skip..skip + n].copy_from_slice(&data[done..done + n]);
                st.sums[l as usize] = block_sum(&buf);
                s.mark(&mut st, l, &buf);
                s.files[t].write_at(data_offset(l), &buf)?;
                done += n;
            }
        }
        Ok(())
    }

    fn close(&self) -> std::io::Result<()> {
        let s = &*self.0;
        let r = (|| {
            if !s.write {
                return Ok(());
            }
            // the last sync leaves every copy holding every block (the other unsynced)
            self.sync_data()?;
            let st = s.state.lock();
            let stamp = random_stamp();
            let t = s.tgt(&st);
            for i in std::iter::once(t).chain((0..s.files.len()).filter(|&i| i != t)) {
                s.files[i].write_header(&s.header_for(&st, i, st.seq, true, stamp))?;
                s.files[i].sync()?;
            }
            Ok(())
        })();
        let l = s.locks.close();
        r.and(l)
    }

    fn try_lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<bool, redb::BackendError> {
        self.0.locks.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<bool, redb::BackendError> {
        self.0.locks.try_lock_shared_range(start, end)
    }

    fn lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<(), redb::BackendError> {
        self.0.locks.lock_range(start, end)
    }

    fn lock_shared_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<(), redb::BackendError> {
        self.0.locks.lock_shared_range(start, end)
    }

    fn unlock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<(), redb::BackendError> {
        self.0.locks.unlock_range(start, end)
    }

    fn query_lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<bool, redb::BackendError> {
        self.0.locks.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::meta_copy::{blocks_in, PowerCut};
    use redb::{ReadableDatabase, TableDefinition};

    const ROWS: TableDefinition<u64, &[u8]> = TableDefinition::new("rows");

    fn paths(d: &std::path::Path) -> Vec<PathBuf> {
        vec![d.join("meta.copy0"), d.join("meta.copy1")]
    }

    fn value(k: u64, round: u64) -> Vec<u8> {
        format!("row {k} of round {round} ").repeat(1 + (k % 7) as usize).into_bytes()
    }

    fn db(p: &[PathBuf]) -> redb::Database {
        redb::Builder::new().create_with_backend(Mirror(Shared::open(p, true).unwrap())).unwrap()
    }

    /// Rounds `0..rounds` of 300 rows each, one commit per round.
    fn fill(p: &[PathBuf], rounds: u64) {
        create(p).unwrap();
        let db = db(p);
        for r in 0..rounds {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(ROWS).unwrap();
                for k in r * 300..(r + 1) * 300 {
                    t.insert(k, &value(k, r)[..]).unwrap();
                }
            }
            tx.commit().unwrap();
        }
    }

    /// Every row of `rounds` rounds, read through a fresh open.
    fn read_back(p: &[PathBuf], write: bool, rounds: u64) -> std::result::Result<(), String> {
        let shared = Shared::open(p, write).map_err(|e| e.to_string())?;
        let rows = |rx: redb::ReadTransaction| -> std::result::Result<(), String> {
            let t = rx.open_table(ROWS).map_err(|e| e.to_string())?;
            for k in 0..rounds * 300 {
                let v = t.get(k).map_err(|e| e.to_string())?.ok_or(format!("row {k} missing"))?;
                assert_eq!(v.value(), &value(k, k / 300)[..], "row {k}: wrong bytes");
            }
            Ok(())
        };
        if write {
            let db = redb::Builder::new().create_with_backend(Mirror(shared)).map_err(|e| e.to_string())?;
            rows(db.begin_read().map_err(|e| e.to_string())?)
        } else {
            let db = redb::Builder::new().open_read_only_with_backend(Mirror(shared)).map_err(|e| e.to_string())?;
            rows(db.begin_read().map_err(|e| e.to_string())?)
        }
    }

    fn smash(path: &std::path::Path, l: u64, zeros: bool) {
        smash_with(path, l, zeros, 0)
    }

    fn smash_with(path: &std::path::Path, l: u64, zeros: bool, salt: usize) {
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        let b: Vec<u8> =
            if zeros { vec![0; BLOCK] } else { (0..BLOCK).map(|i| (i * 7 + salt + l as usize) as u8).collect() };
        std::os::unix::fs::FileExt::write_all_at(&f, &b, data_offset(l)).unwrap();
    }

    /// A second opener of copies that are open (their headers say "not clean") is refused
    /// before it checks them, leaving every byte of the open store as its holder wrote it:
    /// the check may rewrite blocks, which only the store's holder may do.
    #[test]
    fn a_store_open_elsewhere_is_refused_before_it_is_checked() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        fill(&p, 2);
        let shared = Shared::open(&p, true).unwrap();
        let held = redb::Builder::new().create_with_backend(Mirror(shared.clone())).unwrap();
        // a block of copy 1 that a check would rewrite from copy 0
        smash(&p[1], 3, false);
        let before: Vec<Vec<u8>> = p.iter().map(|f| std::fs::read(f).unwrap()).collect();
        for write in [true, false] {
            let err = Shared::open(&p, write).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::WouldBlock, "write={write}: {err}");
        }
        let after: Vec<Vec<u8>> = p.iter().map(|f| std::fs::read(f).unwrap()).collect();
        assert!(before == after, "a refused open changed the copies");
        drop((held, shared));
        read_back(&p, true, 2).unwrap();
    }

    #[test]
    fn copies_closed_cleanly_are_equal_and_open_without_a_full_check() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        fill(&p, 4);
        assert_eq!(std::fs::read(&p[0]).unwrap()[BLOCK..], std::fs::read(&p[1]).unwrap()[BLOCK..]);
        let s = Shared::open(&p, false).unwrap();
        assert!(s.opened_after_check.is_none());
        drop(s);
        read_back(&p, true, 4).unwrap();
        let c = check(&p, false).unwrap();
        assert!(c.is_clean(), "{c:?}");
    }

    #[test]
    fn a_block_damaged_in_one_copy_is_read_from_the_other_and_rewritten() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        fill(&p, 4);
        let blocks = blocks_in(std::fs::metadata(&p[0]).unwrap().len());
        // every block, each copy in turn: a read-only open reads around it, a read-write
        // one writes the good block back
        for l in 0..blocks {
            let (copy, zeros) = ((l % 2) as usize, l % 3 == 0);
            smash(&p[copy], l, zeros);
            read_back(&p, false, 4).unwrap_or_else(|e| panic!("block {l} of copy {copy}: {e}"));
            read_back(&p, true, 4).unwrap_or_else(|e| panic!("block {l} of copy {copy}: {e}"));
            let c = check(&p, true).unwrap();
            assert!(c.lost.is_empty(), "{c:?}");
            assert!(check(&p, false).unwrap().is_clean(), "block {l} of copy {copy}");
        }
    }

    #[test]
    fn a_damaged_sum_block_or_header_is_repaired_from_the_other_copy() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        fill(&p, 3);
        let f = std::fs::OpenOptions::new().write(true).open(&p[1]).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[0xAB; BLOCK], sum_offset(0)).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[0; 64], 0).unwrap();
        let c = check(&p, false).unwrap();
        assert_eq!((c.copies[1].bad_sum_groups.clone(), c.copies[1].header_ok), (vec![0], false));
        assert!(c.lost.is_empty());
        let c = check(&p, true).unwrap();
        assert!(c.repaired.iter().any(|r| r.copy == 1 && r.what.starts_with("sums")), "{c:?}");
        assert!(c.repaired.iter().any(|r| r.copy == 1 && r.what == "header"), "{c:?}");
        assert!(check(&p, false).unwrap().is_clean());
        // copy 0's sums, put right by a read-write open before redb reads through them
        let f = std::fs::OpenOptions::new().write(true).open(&p[0]).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[0xCD; BLOCK], sum_offset(0)).unwrap();
        read_back(&p, true, 3).unwrap();
        assert!(check(&p, false).unwrap().is_clean());
    }

    /// A block bad in both copies: every read of it fails naming it, no bytes redb could
    /// misparse are handed out, and the check lists it as lost.
    #[test]
    fn a_block_damaged_in_both_copies_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        fill(&p, 3);
        let blocks = blocks_in(std::fs::metadata(&p[0]).unwrap().len());
        let mut failed = 0;
        for l in 0..blocks {
            let d2 = tempfile::tempdir().unwrap();
            let q = paths(d2.path());
            for (a, b) in p.iter().zip(&q) {
                std::fs::copy(a, b).unwrap();
            }
            smash_with(&q[0], l, false, 0);
            smash_with(&q[1], l, false, 1);
            let c = check(&q, false).unwrap();
            assert_eq!(c.lost.iter().map(|b| b.block).collect::<Vec<_>>(), vec![l]);
            // the block may be free space redb never reads; when it reads it, it fails
            let got = std::panic::catch_unwind(|| read_back(&q, false, 3));
            match got {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    failed += 1;
                    assert!(e.contains(&format!("metadata block {l} ")) || e.contains("every copy"), "{e}");
                }
                Err(_) => panic!("block {l}: a panic below redb"),
            }
        }
        assert!(failed > 0, "no block redb reads was found");
    }

    /// Power cut at every point of a run of commits over two copies, each file's unsynced
    /// changes dropped, kept or torn: the reopened store holds every acknowledged commit,
    /// and at most the one in flight besides, and both copies check clean after the open.
    #[test]
    fn a_power_cut_anywhere_leaves_every_acknowledged_commit() {
        let mut cuts = 0;
        for n in (1..400).step_by(7) {
            // seed 0: every file as it was at its last sync
            for seed in [0u64, 1, 2, 3] {
                let d = tempfile::tempdir().unwrap();
                let p = paths(d.path());
                fill(&p, 1);
                let cut = Arc::new(PowerCut::default());
                let mut acked = 1;
                {
                    let shared = Shared::open_with_cut(&p, true, Some(cut.clone())).unwrap();
                    cut.arm(n);
                    let Ok(db) = redb::Builder::new().create_with_backend(Mirror(shared)) else {
                        crash(&cut, seed);
                        check_after(&p, acked);
                        continue;
                    };
                    acked = commit_rounds(&db, 12, true);
                    drop(db);
                }
                assert!(cut.most_unsynced() <= 1, "both copies were between two syncs at once");
                crash(&cut, seed);
                cuts += 1;
                let before = check(&p, false).unwrap();
                assert!(before.is_clean(), "a crash image checked before any open: {before:?}");
                check_after(&p, acked);
            }
        }
        assert!(cuts > 50);
    }

    /// A daemon killed while the worker copies a sync leaves copy 1 open with new blocks
    /// whose sums are not yet written: fsck's check reports them behind copy 0 (which holds
    /// them), not as damage, and the next read-write open copies them; the same bytes in a
    /// copy closed cleanly are damage.
    #[test]
    fn a_daemon_killed_between_copy_1s_blocks_and_sums_is_not_damage() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        fill(&p, 2);
        smash(&p[1], 3, false);
        let c = check(&p, false).unwrap();
        assert!(!c.is_clean() && c.copies[1].bad_blocks == vec![3], "closed cleanly: damage: {c:?}");
        for (i, path) in p.iter().enumerate() {
            let f = CopyFile::open(path, true).unwrap();
            f.write_header(&CopyHeader { clean: false, ..f.header().unwrap() }).unwrap();
            assert_eq!(f.header().unwrap().index as usize, i);
        }
        let c = check(&p, false).unwrap();
        assert!(c.is_clean(), "{c:?}");
        assert_eq!((c.authority, c.copies[1].stale_blocks, c.copies[1].bad_blocks.len()), (0, 1, 0), "{c:?}");
        read_back(&p, true, 2).unwrap();
        let c = check(&p, false).unwrap();
        assert!(c.is_clean() && c.copies.iter().all(|c| c.stale_blocks == 0 && c.clean), "{c:?}");
    }

    /// The blocks of one sync handed to the worker from memory up to KEPT_MAX, read back
    /// from copy 0 past it: either way copy 1 ends with the newest bytes of every block,
    /// those rewritten within the sync (whole and in part) and those past the bound.
    #[test]
    fn a_sync_larger_than_the_kept_blocks_reaches_copy_1_whole() {
        use redb::StorageBackend;
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        create(&p).unwrap();
        let m = Mirror(Shared::open(&p, true).unwrap());
        let blocks = (KEPT_MAX / BLOCK) as u64 + 300;
        m.set_len(blocks * BLOCK as u64).unwrap();
        let fill = |l: u64, round: u8| vec![(l as u8) ^ round; BLOCK];
        for round in 1..=3u8 {
            for l in 0..blocks {
                m.write(l * BLOCK as u64, &fill(l, round)).unwrap();
            }
            // rewritten within the sync: a kept block and one past the bound, in part
            for l in [3, blocks - 5] {
                m.write(l * BLOCK as u64 + 7, &[round; 9]).unwrap();
            }
            m.sync_data().unwrap();
        }
        m.close().unwrap();
        drop(m);
        let c = check(&p, false).unwrap();
        assert!(c.is_clean() && c.copies.iter().all(|c| c.stale_blocks == 0), "{c:?}");
        let f1 = CopyFile::open(&p[1], false).unwrap();
        let mut b = vec![0u8; BLOCK];
        for l in [0, 3, 4, blocks / 2, blocks - 5, blocks - 1] {
            f1.read_at(data_offset(l), &mut b).unwrap();
            let mut want = fill(l, 3);
            if l == 3 || l == blocks - 5 {
                want[7..16].fill(3);
            }
            assert_eq!(b, want, "block {l} of copy 1");
        }
    }

    /// A sync flushes one copy, the two in turn: a commit costs one flush, as with one
    /// copy, and each copy ends a sync holding every commit but at most the last.
    #[test]
    fn a_commit_syncs_one_copy_and_the_copies_take_turns() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        fill(&p, 1);
        let cut = Arc::new(PowerCut::default());
        let db = redb::Builder::new()
            .create_with_backend(Mirror(Shared::open_with_cut(&p, true, Some(cut.clone())).unwrap()))
            .unwrap();
        let opened = [cut.syncs(&p[0]), cut.syncs(&p[1])];
        for r in 1..=10u64 {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(ROWS).unwrap();
                for k in r * 300..(r + 1) * 300 {
                    t.insert(k, &value(k, r)[..]).unwrap();
                }
            }
            tx.commit().unwrap();
            let taken = [cut.syncs(&p[0]) - opened[0], cut.syncs(&p[1]) - opened[1]];
            assert_eq!(taken[0] + taken[1], r, "syncs after {r} commits: {taken:?}");
            assert!(taken[0].abs_diff(taken[1]) <= 1, "the copies take turns: {taken:?}");
        }
        assert_eq!(cut.most_unsynced(), 1, "one copy between syncs at a time");
        drop(db);
        let c = check(&p, false).unwrap();
        assert!(c.is_clean() && c.copies.iter().all(|c| c.stale_blocks == 0 && c.clean), "{c:?}");
        read_back(&p, false, 11).unwrap();
    }

    /// A sync whose blocks cannot be given to the other copy (a power cut right after the
    /// flush) fails, the store then refuses every change (that copy holds part of the
    /// sync), and the copy synced holds the sync whole.
    #[test]
    fn a_copy_failing_after_a_sync_refuses_further_changes() {
        use redb::StorageBackend;
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        create(&p).unwrap();
        let cut = Arc::new(PowerCut::default());
        let m = Mirror(Shared::open_with_cut(&p, true, Some(cut.clone())).unwrap());
        m.set_len(4 * BLOCK as u64).unwrap();
        m.write(0, &vec![7u8; 4 * BLOCK]).unwrap();
        m.sync_data().unwrap();
        m.write(BLOCK as u64, &vec![8u8; BLOCK]).unwrap();
        // the sum block, the header and the flush of the copy synced; then the copy fails
        cut.arm(3);
        assert!(m.sync_data().is_err());
        let e = m.write(2 * BLOCK as u64, &vec![9u8; BLOCK]).unwrap_err();
        assert!(e.to_string().contains("takes no more changes"), "{e}");
        assert!(m.sync_data().is_err());
        drop(m);
        cut.crash_image_as_synced().unwrap();
        let c = check(&p, false).unwrap();
        assert!(c.lost.is_empty() && c.copies[c.authority].bad_blocks.is_empty(), "{c:?}");
        let r = Mirror(Shared::open(&p, false).unwrap());
        let mut b = vec![0u8; BLOCK];
        r.read(BLOCK as u64, &mut b).unwrap();
        assert_eq!(b, vec![8u8; BLOCK], "the sync whose copy failed");
        r.read(2 * BLOCK as u64, &mut b).unwrap();
        assert_eq!(b, vec![7u8; BLOCK]);
    }

    /// A store of one copy stopped between a write and its sync (a killed daemon, a power
    /// cut) opens: with no second copy, the blocks failing their sums are the interrupted
    /// sync's and are taken as written, as redb would find them in a plain file, read-only
    /// and read-write, and every acknowledged commit is there.
    #[test]
    fn a_single_copy_store_stopped_before_its_sync_opens_with_every_acknowledged_commit() {
        use redb::StorageBackend;
        let d = tempfile::tempdir().unwrap();
        let p = vec![d.path().join("meta.copy0")];
        create(&p).unwrap();
        let m = Mirror(Shared::open(&p, true).unwrap());
        m.set_len(4 * BLOCK as u64).unwrap();
        m.write(0, &vec![7u8; 4 * BLOCK]).unwrap();
        m.sync_data().unwrap();
        m.write(0, &vec![8u8; 2 * BLOCK]).unwrap();
        drop(m);
        let c = check(&p, false).unwrap();
        assert!(c.is_clean() && c.lost.is_empty() && c.copies[0].stale_blocks == 2, "{c:?}");
        let mut b = vec![0u8; BLOCK];
        let ro = Mirror(Shared::open(&p, false).unwrap());
        ro.read(BLOCK as u64, &mut b).unwrap();
        assert_eq!(b, vec![8u8; BLOCK]);
        drop(ro);
        let rw = Mirror(Shared::open(&p, true).unwrap());
        rw.read(0, &mut b).unwrap();
        assert_eq!(b, vec![8u8; BLOCK]);
        rw.close().unwrap();
        drop(rw);
        let c = check(&p, false).unwrap();
        assert!(c.is_clean() && c.copies[0].stale_blocks == 0 && c.copies[0].clean, "{c:?}");
        let mut cuts = 0;
        for n in (1..300).step_by(11) {
            for seed in [0u64, 1, 2] {
                let d = tempfile::tempdir().unwrap();
                let p = vec![d.path().join("meta.copy0")];
                fill(&p, 1);
                let cut = Arc::new(PowerCut::default());
                let mut acked = 1;
                {
                    let shared = Shared::open_with_cut(&p, true, Some(cut.clone())).unwrap();
                    cut.arm(n);
                    if let Ok(db) = redb::Builder::new().create_with_backend(Mirror(shared)) {
                        acked = commit_rounds(&db, 8, false);
                    }
                }
                crash(&cut, seed);
                cuts += 1;
                check_after(&p, acked);
            }
        }
        assert!(cuts > 50);
    }

    /// Rounds `1..end` of 300 rows, one commit each, until one fails (`rewrite`: each also
    /// rewrites an earlier row, so pages change in place); the rounds acknowledged, round 0
    /// (`fill`) included.
    fn commit_rounds(db: &redb::Database, end: u64, rewrite: bool) -> u64 {
        let mut acked = 1;
        for r in 1..end {
            let ok = (|| -> std::result::Result<(), redb::Error> {
                let tx = db.begin_write()?;
                {
                    let mut t = tx.open_table(ROWS)?;
                    for k in r * 300..(r + 1) * 300 {
                        t.insert(k, &value(k, r)[..])?;
                    }
                    if rewrite {
                        t.insert(r, &value(r, r)[..])?;
                    }
                }
                tx.commit()?;
                Ok(())
            })();
            if ok.is_err() {
                break;
            }
            acked = r + 1;
        }
        acked
    }

    /// The crash image of `seed`; 0: every file as it was at its last sync.
    fn crash(cut: &PowerCut, seed: u64) {
        match seed {
            0 => cut.crash_image_as_synced().unwrap(),
            s => cut.crash_image(s).unwrap(),
        }
    }

    /// A copy whose blocks all verify but whose header's digest is not that of its sums
    /// (a crash inside a sync landed the header and not every sum block) is not trusted,
    /// though its `seq` is the higher.
    #[test]
    fn a_copy_whose_header_landed_without_its_sums_is_not_trusted() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        fill(&p, 2);
        let f1 = CopyFile::open(&p[1], true).unwrap();
        let h = f1.header().unwrap();
        let blocks = blocks_in(f1.len().unwrap());
        let mut sums: Vec<u64> =
            (0..blocks).map(|l| f1.sums(l / PER_GROUP).unwrap()[(l % PER_GROUP) as usize]).collect();
        sums[3] ^= 1;
        let f0 = CopyFile::open(&p[0], true).unwrap();
        f0.write_header(&CopyHeader { clean: false, ..f0.header().unwrap() }).unwrap();
        let torn = CopyHeader { clean: false, seq: h.seq + 1, digest: Some(sums_digest(&sums)), ..h };
        f1.write_header(&torn).unwrap();
        let c = check(&p, false).unwrap();
        assert_eq!(c.authority, 0, "{c:?}");
        // the same header with its sums' digest: the later copy is trusted
        sums[3] ^= 1;
        f1.write_header(&CopyHeader { digest: Some(sums_digest(&sums)), ..torn }).unwrap();
        assert_eq!(check(&p, false).unwrap().authority, 1);
    }

    fn check_after(p: &[PathBuf], acked: u64) {
        // read-only first, as fsck reads it (redb repairs a copy in memory, metadb.rs): the
        // copy the read-only open trusts holds every acknowledged row
        {
            use redb::StorageBackend;
            let ro = Mirror(Shared::open(p, false).unwrap());
            let mut bytes = vec![0u8; ro.len().unwrap() as usize];
            ro.read(0, &mut bytes).unwrap();
            let mem = redb::backends::InMemoryBackend::new();
            mem.set_len(bytes.len() as u64).unwrap();
            mem.write(0, &bytes).unwrap();
            let db = redb::Builder::new().create_with_backend(mem).unwrap();
            let rx = db.begin_read().unwrap();
            let t = rx.open_table(ROWS).unwrap();
            for k in 300..acked * 300 {
                let v = t.get(k).unwrap().unwrap_or_else(|| panic!("read-only: row {k} lost"));
                assert_eq!(v.value(), &value(k, k / 300)[..]);
            }
        }
        let shared = Shared::open(p, true).unwrap();
        let db = redb::Builder::new().create_with_backend(Mirror(shared)).unwrap();
        let rx = db.begin_read().unwrap();
        let t = rx.open_table(ROWS).unwrap();
        for k in 300..acked * 300 {
            let r = k / 300;
            let v = t.get(k).unwrap().unwrap_or_else(|| panic!("row {k} of acknowledged round {r} lost"));
            assert_eq!(v.value(), &value(k, r)[..]);
        }
        drop((t, rx));
        drop(db);
        let c = check(p, false).unwrap();
        assert!(c.is_clean(), "{c:?}");
    }
}
