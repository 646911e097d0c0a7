//! One copy of a checked metadata store (docs/format.md §6): redb's file cut into 4 KiB
//! blocks, each with its own xxh3 checksum, so a damaged block is told from a good one
//! without trusting anything else in the copy.
//!
//! Layout, in 4 KiB blocks: block 0 is the copy header; then groups, each one sum block
//! followed by up to `PER_GROUP` (511) data blocks. Logical block `l` of redb's file is data
//! block `l % 511` of group `l / 511`; its checksum is entry `l % 511` of that group's sum
//! block. A sum block checks itself too (its last 8 bytes), so a damaged sum block is not
//! mistaken for 511 damaged data blocks.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// The block size of a copy, and the unit a checksum covers.
pub const BLOCK: usize = 4096;
const BLOCK_U64: u64 = BLOCK as u64;
/// Data blocks per group (the sum entries a sum block holds besides its own checksum).
pub const PER_GROUP: u64 = 511;
pub const COPY_MAGIC: [u8; 8] = *b"SQZMCOPY";
/// Version 2 headers add `seq` and `digest` (docs/format.md); version 1 ones still decode,
/// as `seq` 0 without a digest.
pub const COPY_VERSION: u8 = 2;
/// The most copies a store has.
pub const MAX_COPIES: u8 = 2;

/// What block 0 of a copy says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyHeader {
    /// which copy this is (0 or 1)
    pub index: u8,
    /// how many copies the store has (1 or 2); copy 0's count is the one that holds
    pub copies: u8,
    /// closed cleanly: every block and sum written and synced, both copies equal
    pub clean: bool,
    /// random number written to every copy at a clean close: copies whose headers are clean
    /// with the same stamp hold the same store
    pub stamp: u64,
    /// redb's length of the store in bytes at the clean close
    pub len: u64,
    /// syncs of the store this copy has taken: of two copies that check whole, the one
    /// with the higher `seq` holds the later commit
    pub seq: u64,
    /// [`sums_digest`] of the copy's sums as this header was written: a copy whose sum
    /// blocks and header come from different syncs (a crash inside one) does not match
    pub digest: Option<u64>,
}

impl CopyHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK];
        b[0..8].copy_from_slice(&COPY_MAGIC);
        b[8] = COPY_VERSION;
        b[9] = self.index;
        b[10] = self.copies;
        b[11] = u8::from(self.clean);
        b[12..16].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.stamp.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..40].copy_from_slice(&self.seq.to_le_bytes());
        if let Some(d) = self.digest {
            b[40] = 1;
            b[41..49].copy_from_slice(&d.to_le_bytes());
        }
        let sum = xxh3_64(&b[..BLOCK - 8]);
        b[BLOCK - 8..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// `None` when the block is not an intact copy header of this version.
    pub fn decode(b: &[u8]) -> Option<CopyHeader> {
        if b.len() != BLOCK || b[0..8] != COPY_MAGIC || !(1..=COPY_VERSION).contains(&b[8]) {
            return None;
        }
        let v2 = b[8] >= 2;
        if u64::from_le_bytes(b[BLOCK - 8..].try_into().ok()?) != xxh3_64(&b[..BLOCK - 8]) {
            return None;
        }
        if u32::from_le_bytes(b[12..16].try_into().ok()?) != BLOCK as u32 || b[11] > 1 {
            return None;
        }
        let (index, copies) = (b[9], b[10]);
        if copies == 0 || copies > MAX_COPIES || index >= copies {
            return None;
        }
        Some(CopyHeader {
            index,
            copies,
            clean: b[11] == 1,
            stamp: u64::from_le_bytes(b[16..24].try_into().ok()?),
            len: u64::from_le_bytes(b[24..32].try_into().ok()?),
            seq: if v2 { u64::from_le_bytes(b[32..40].try_into().ok()?) } else { 0 },
            digest: match (v2, b[40]) {
                (false, _) | (true, 0) => None,
                (true, 1) => Some(u64::from_le_bytes(b[41..49].try_into().ok()?)),
                _ => return None,
            },
        })
    }
}

/// Byte offset in a copy of logical block `l`.
pub fn data_offset(l: u64) -> u64 {
    (1 + (l / PER_GROUP) * (PER_GROUP + 1) + 1 + l % PER_GROUP) * BLOCK_U64
}

/// Byte offset in a copy of group `g`'s sum block.
pub fn sum_offset(g: u64) -> u64 {
    (1 + g * (PER_GROUP + 1)) * BLOCK_U64
}

/// The length of a copy holding `blocks` logical blocks.
pub fn copy_len(blocks: u64) -> u64 {
    if blocks == 0 {
        BLOCK_U64
    } else {
        data_offset(blocks - 1) + BLOCK_U64
    }
}

/// The logical blocks a copy of `len` bytes holds whole (a torn tail is left out).
pub fn blocks_in(len: u64) -> u64 {
    let phys = len / BLOCK_U64;
    if phys <= 2 {
        return 0;
    }
    let rest = phys - 1;
    let (groups, tail) = (rest / (PER_GROUP + 1), rest % (PER_GROUP + 1));
    groups * PER_GROUP + tail.saturating_sub(1)
}

/// Groups needed for `blocks` logical blocks.
pub fn groups_for(blocks: u64) -> u64 {
    blocks.div_ceil(PER_GROUP)
}

/// One number for a copy's sums of its blocks in order: what a header's `digest` holds.
pub fn sums_digest(sums: &[u64]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for s in sums {
        h.update(&s.to_le_bytes());
    }
    h.digest()
}

/// The checksum of one block.
pub fn block_sum(b: &[u8]) -> u64 {
    xxh3_64(b)
}

/// The checksum of a block of zeros (a block redb has not written since it grew the file).
pub fn zero_sum() -> u64 {
    static Z: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *Z.get_or_init(|| xxh3_64(&[0u8; BLOCK]))
}

/// A sum block holding `sums` (at most `PER_GROUP`; the rest zero) and its own checksum.
pub fn encode_sums(sums: &[u64]) -> Vec<u8> {
    debug_assert!(sums.len() as u64 <= PER_GROUP);
    let mut b = vec![0u8; BLOCK];
    for (i, s) in sums.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&s.to_le_bytes());
    }
    let own = xxh3_64(&b[..BLOCK - 8]);
    b[BLOCK - 8..].copy_from_slice(&own.to_le_bytes());
    b
}

/// The `PER_GROUP` entries of an intact sum block; `None` when it is damaged.
pub fn decode_sums(b: &[u8]) -> Option<Vec<u64>> {
    if b.len() != BLOCK || u64::from_le_bytes(b[BLOCK - 8..].try_into().ok()?) != xxh3_64(&b[..BLOCK - 8]) {
        return None;
    }
    Some((0..PER_GROUP as usize).map(|i| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap())).collect())
}

/// One copy's file.
#[derive(Debug)]
pub struct CopyFile {
    pub path: PathBuf,
    file: File,
    /// a power cut armed by a test (power_cut.rs)
    cut: Option<Arc<PowerCut>>,
}

impl CopyFile {
    pub fn open(path: &Path, write: bool) -> std::io::Result<CopyFile> {
        let file = std::fs::OpenOptions::new().read(true).write(write).open(path)?;
        Ok(CopyFile { path: path.to_path_buf(), file, cut: None })
    }

    pub fn create(path: &Path) -> std::io::Result<CopyFile> {
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        Ok(CopyFile { path: path.to_path_buf(), file, cut: None })
    }

    /// This file with its writes and syncs going through `cut`.
    pub fn with_cut(mut self, cut: Option<Arc<PowerCut>>) -> CopyFile {
        self.cut = cut;
        self
    }

    fn before_change(&self, change: Change) -> std::io::Result<()> {
        match &self.cut {
            Some(c) => c.record(&self.path, &self.file, change),
            None => Ok(()),
        }
    }

    pub fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.before_change(Change::SetLen(len))?;
        self.file.set_len(len)
    }

    /// The file's length in bytes (header and sum blocks included).
    pub fn len(&self) -> std::io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Whether the file holds no bytes at all (not even its header).
    pub fn is_empty(&self) -> std::io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The block at byte offset `at`; a short read (the copy ends early) is an error.
    pub fn read_at(&self, at: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.file.read_exact_at(out, at)
    }

    pub fn write_at(&self, at: u64, data: &[u8]) -> std::io::Result<()> {
        self.before_change(Change::Write(at, data.len()))?;
        self.file.write_all_at(data, at)
    }

    pub fn header(&self) -> Option<CopyHeader> {
        let mut b = vec![0u8; BLOCK];
        self.read_at(0, &mut b).ok()?;
        CopyHeader::decode(&b)
    }

    pub fn write_header(&self, h: &CopyHeader) -> std::io::Result<()> {
        self.write_at(0, &h.encode())
    }

    /// Group `g`'s sums; `None` when its sum block is damaged or missing.
    pub fn sums(&self, g: u64) -> Option<Vec<u64>> {
        let mut b = vec![0u8; BLOCK];
        self.read_at(sum_offset(g), &mut b).ok()?;
        decode_sums(&b)
    }

    pub fn sync(&self) -> std::io::Result<()> {
        self.before_change(Change::Sync)?;
        self.file.sync_data()
    }
}

/// A change to a copy's file, as a power cut sees it.
pub enum Change {
    Write(u64, usize),
    SetLen(u64),
    Sync,
}

/// A power cut for crash tests of the copies: after a number of changes every write and
/// sync fails (the code under test stops where it stands), and `crash_image` puts each
/// file back as a power loss could leave it, every change since that file's last sync
/// dropped, kept or torn at 512-byte sectors (seeded).
///
/// It also checks the copies' ordering and cost: `most_unsynced` is the largest number of
/// files that were between two syncs at once, `syncs` how many syncs each file took.
#[derive(Debug, Default)]
pub struct PowerCut {
    state: parking_lot::Mutex<CutState>,
}

#[derive(Debug, Default)]
struct CutState {
    left: Option<u64>,
    /// per file, the changes since its last sync: (offset, bytes before) or a length before
    undo: std::collections::BTreeMap<PathBuf, Vec<Undo>>,
    most_unsynced: usize,
    syncs: std::collections::BTreeMap<PathBuf, u64>,
}

#[derive(Debug)]
enum Undo {
    Bytes(u64, Vec<u8>),
    Len(u64, Vec<u8>),
}

impl PowerCut {
    /// Cut the power after `changes` more writes, resizes and syncs.
    pub fn arm(&self, changes: u64) {
        self.state.lock().left = Some(changes);
    }

    fn record(&self, path: &Path, file: &File, change: Change) -> std::io::Result<()> {
        let mut st = self.state.lock();
        match st.left {
            Some(0) => return Err(std::io::Error::other("power cut (test)")),
            Some(ref mut n) => *n -= 1,
            None => {}
        }
        let len = file.metadata()?.len();
        let st = &mut *st;
        let undo = st.undo.entry(path.to_path_buf()).or_default();
        match change {
            Change::Sync => {
                undo.clear();
                *st.syncs.entry(path.to_path_buf()).or_default() += 1;
            }
            Change::Write(at, n) => {
                let end = (at + n as u64).min(len);
                let mut old = vec![0u8; end.saturating_sub(at) as usize];
                file.read_exact_at(&mut old, at)?;
                undo.push(Undo::Len(len, Vec::new()));
                undo.push(Undo::Bytes(at, old));
            }
            Change::SetLen(to) => {
                let mut tail = vec![0u8; len.saturating_sub(to) as usize];
                file.read_exact_at(&mut tail, to.min(len))?;
                undo.push(Undo::Len(len, tail));
            }
        }
        let unsynced = st.undo.values().filter(|u| !u.is_empty()).count();
        st.most_unsynced = st.most_unsynced.max(unsynced);
        Ok(())
    }

    /// The most files that were between two syncs at the same time.
    pub fn most_unsynced(&self) -> usize {
        self.state.lock().most_unsynced
    }

    /// The syncs `path` has taken since the cut was made.
    pub fn syncs(&self, path: &Path) -> u64 {
        self.state.lock().syncs.get(path).copied().unwrap_or(0)
    }

    /// Rewrite every file as the cut leaves it (type comment).
    pub fn crash_image(&self, seed: u64) -> std::io::Result<()> {
        self.image(Some(seed))
    }

    /// Rewrite every file as it was at its last sync: every later change dropped.
    pub fn crash_image_as_synced(&self) -> std::io::Result<()> {
        self.image(None)
    }

    /// `crash_image`, or with no seed every change dropped.
    fn image(&self, seed: Option<u64>) -> std::io::Result<()> {
        let mut st = self.state.lock();
        let drop_all = seed.is_none();
        let mut x = seed.unwrap_or(1) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (path, undo) in std::mem::take(&mut st.undo) {
            let f = std::fs::OpenOptions::new().write(true).open(&path)?;
            for u in undo.iter().rev() {
                match u {
                    Undo::Len(len, tail) => {
                        if drop_all || next() % 2 == 0 {
                            f.set_len(*len)?;
                            if !tail.is_empty() {
                                f.write_all_at(tail, *len - tail.len() as u64)?;
                            }
                        }
                    }
                    Undo::Bytes(at, old) => match if drop_all { 0 } else { next() % 3 } {
                        0 => f.write_all_at(old, *at)?,
                        1 => {}
                        _ => {
                            for (k, sector) in old.chunks(512).enumerate() {
                                if next() % 2 == 0 {
                                    f.write_all_at(sector, at + 512 * k as u64)?;
                                }
                            }
                        }
                    },
                }
            }
        }
        st.left = None;
        Ok(())
    }
}

fn armed_pools() -> &'static parking_lot::Mutex<std::collections::HashMap<PathBuf, Arc<PowerCut>>> {
    static R: std::sync::OnceLock<parking_lot::Mutex<std::collections::HashMap<PathBuf, Arc<PowerCut>>>> =
        std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// From now on, the checked metadata store of the pool directory `pool` opens with its
/// copies' writes and syncs going through `cut` (crash tests of the engine, which opens
/// its store by path; as `squeezefs_device::power_loss::arm` for devices).
pub fn arm_pool(pool: &Path, cut: Arc<PowerCut>) {
    armed_pools().lock().insert(pool.to_path_buf(), cut);
}

/// The store of `pool` opens without a power cut again.
pub fn disarm_pool(pool: &Path) {
    armed_pools().lock().remove(pool);
}

/// The cut armed for `pool` (one lookup in an empty map unless a test armed one).
pub(crate) fn cut_for_pool(pool: &Path) -> Option<Arc<PowerCut>> {
    let r = armed_pools().lock();
    if r.is_empty() {
        return None;
    }
    r.get(pool).cloned()
}

/// A random stamp for a clean close (`getrandom`; the clock if that fails).
pub fn random_stamp() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most the 8 bytes of `v` it is given.
    let n = unsafe { libc::getrandom(std::ptr::addr_of_mut!(v).cast(), 8, 0) };
    if n != 8 {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        v = t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32;
    }
    v | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_maps_blocks_past_the_sum_blocks_and_back() {
        assert_eq!(data_offset(0), 2 * BLOCK_U64);
        assert_eq!(data_offset(510), 512 * BLOCK_U64);
        assert_eq!(sum_offset(1), 513 * BLOCK_U64);
        assert_eq!(data_offset(511), 514 * BLOCK_U64);
        for n in [0u64, 1, 2, 510, 511, 512, 1022, 1023, 5000] {
            assert_eq!(blocks_in(copy_len(n)), n, "{n}");
        }
        // a copy torn inside its last data block holds the blocks before it
        assert_eq!(blocks_in(copy_len(7) - 100), 6);
    }

    #[test]
    fn a_damaged_header_or_sum_block_does_not_decode() {
        let h = CopyHeader { index: 1, copies: 2, clean: true, stamp: 7, len: 8192, seq: 9, digest: Some(5) };
        let mut b = h.encode();
        assert_eq!(CopyHeader::decode(&b), Some(h));
        let none = CopyHeader { digest: None, ..h };
        assert_eq!(CopyHeader::decode(&none.encode()), Some(none));
        // a version 1 header: no seq, no digest
        let mut v1 = CopyHeader { seq: 0, digest: None, ..h }.encode();
        v1[8] = 1;
        let own = xxh3_64(&v1[..BLOCK - 8]);
        v1[BLOCK - 8..].copy_from_slice(&own.to_le_bytes());
        assert_eq!(CopyHeader::decode(&v1), Some(CopyHeader { seq: 0, digest: None, ..h }));
        b[20] ^= 1;
        assert_eq!(CopyHeader::decode(&b), None);
        let s = encode_sums(&[1, 2, 3]);
        assert_eq!(&decode_sums(&s).unwrap()[..4], &[1, 2, 3, 0]);
        let mut s = s;
        s[4000] = 9;
        assert_eq!(decode_sums(&s), None);
    }
}
