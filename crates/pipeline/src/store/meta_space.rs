//! The metadata reserve: room on the filesystem holding `meta.redb` for the commits to come.
//!
//! Why. Every txg ends in one redb commit; redb writes its changed pages copy-on-write, so a
//! commit takes host space for every leaf it touches (and for inline data of small files).
//! If the host filesystem under the pool directory is full, that commit fails, redb refuses
//! every later transaction until the store is reopened (`PreviousIo`), and the pool is
//! suspended: the open txg's acknowledged changes are lost to the next open (a pool on a
//! 16 MiB filesystem filled with data takes only about 1 000 creates to get there). So
//! changes are admitted only while the commit that will carry them has room, as data writes
//! are (write/data.rs `reserve`).
//!
//! Figures (per pool, for the filesystem of the pool directory; none for a store in memory):
//!   free       statvfs available bytes, refreshed at the start and the end of every txg sync
//!              (space/placement.rs `Space::refresh_host`) — after a commit it holds what redb really took —
//!              and before a metadata change when older than `MAX_AGE`;
//!   reserve    `reserve_for(total)`: 1/64 of the filesystem, within [1 MiB, 64 MiB] (btrfs
//!              keeps a global metadata reserve for the same reason);
//!   pending    charges of changes made since the last `take`, `committing` those of the
//!              txg committing now (zeroed when its commit has been counted in `free`);
//!   data       dirty data bytes bound for growable devices on the same filesystem.
//!
//! Charges (`charge_rows`): a changed row costs at most one leaf page copied (4 KiB) plus its
//! value. Data in flight (`data_meta`) costs an extent row per record (`EXTENT_ROW_CHARGE`)
//! plus `max_inline` per file, computed from the dirty data at each decision. The reserve
//! covers what charges leave out: branch pages, the allocator's state, a commit's fixed cost.
//!
//! Decision (`decide`, pure), for a change of `charge` bytes of kind:
//!   Grows     (new inodes, names, xattrs, symlinks, data): admitted while
//!             free ≥ reserve + pending + committing + data + charge;
//!   NoGrowth  (deletions, renames, attribute updates): admitted while
//!             free ≥ pending + committing + data + charge — it may use the reserve, so a
//!             full pool can still be emptied;
//!   otherwise `CommitFirst` if charges are outstanding (the caller waits for the open txg to
//!   commit, which replaces estimates by the measured figure, and asks again), else `NoSpace`.
//! A metadata change is built under `meta_lock` and cannot wait for a commit then (the commit
//! takes that lock): the engine asks first for a change of `MAX_USUAL_CHARGE` and commits if
//! told to, then decides on the change built; data writes ask before taking any lock.
//!
//! Tunables: `RESERVE_MIN`, `RESERVE_MAX`, `RESERVE_SHARE`, `ROW_CHARGE`, `EXTENT_ROW_CHARGE`,
//! `MAX_USUAL_CHARGE`, `MAX_AGE`.

use crate::base::locks::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub const RESERVE_MIN: u64 = 1 << 20;
pub const RESERVE_MAX: u64 = 64 << 20;
/// The reserve is the filesystem's size divided by this, within [RESERVE_MIN, RESERVE_MAX].
pub const RESERVE_SHARE: u64 = 64;
/// Charge per changed metadata row: one redb leaf page copied on write.
pub const ROW_CHARGE: u64 = 4096;
/// Before a change whose size is not known yet, a commit is made first if a change of
/// this size would not fit beside the outstanding charges: the change itself is then
/// refused only when it does not fit the measured room (one xattr value of 64 KiB and its
/// rows stay below it).
pub const MAX_USUAL_CHARGE: u64 = 128 << 10;
/// A metadata change measures the filesystem again when the last figure is older than this.
pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(1);
/// Charge per data record written: its extent row, amortized over a leaf shared with its
/// neighbours (a file's records have adjacent keys).
pub const EXTENT_ROW_CHARGE: u64 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Grows,
    NoGrowth,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Admit,
    CommitFirst,
    NoSpace,
}

/// The metadata filesystem as last measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFs {
    /// `st_dev` of the pool directory
    pub fs: u64,
    pub free: u64,
    pub total: u64,
}

/// Inputs of one decision.
#[derive(Clone, Copy, Debug)]
pub struct Room {
    pub free: u64,
    pub reserve: u64,
    /// pending + committing charges
    pub charged: u64,
    /// dirty data bound for the same filesystem
    pub data: u64,
}

/// The reserve for a filesystem of `total` bytes.
pub fn reserve_for(total: u64) -> u64 {
    (total / RESERVE_SHARE).clamp(RESERVE_MIN, RESERVE_MAX)
}

/// Charge of a metadata change of `rows` rows carrying `value_bytes` of names and values.
pub fn charge_rows(rows: u64, value_bytes: u64) -> u64 {
    rows.saturating_mul(ROW_CHARGE).saturating_add(value_bytes)
}

/// What the dirty data in flight takes in the store at its commit: an extent row per record,
/// and up to `max_inline` bytes per file (a small file's data lives in the store). Computed
/// from the data in flight rather than charged per write: a stream of small writes to one
/// file charged its inline allowance once per write, far above what one file can take.
pub fn data_meta(files: u64, records: u64, max_inline: u64) -> u64 {
    files.saturating_mul(max_inline).saturating_add(records.saturating_mul(EXTENT_ROW_CHARGE))
}

pub fn decide(room: Room, charge: u64, kind: Kind) -> Decision {
    let floor = match kind {
        Kind::Grows => room.reserve,
        Kind::NoGrowth => 0,
    };
    let need = floor.saturating_add(room.charged).saturating_add(room.data).saturating_add(charge);
    if room.free >= need {
        Decision::Admit
    } else if room.charged > 0 {
        Decision::CommitFirst
    } else {
        Decision::NoSpace
    }
}

/// The per-pool state: the last measurement and the charges since.
#[derive(Default)]
pub struct MetaSpace {
    /// the last measurement and when it was taken
    host: Mutex<Option<(HostFs, std::time::Instant)>>,
    pending: AtomicU64,
    committing: AtomicU64,
}

impl MetaSpace {
    /// Record a fresh measurement (`None`: statvfs failed; the last one is kept).
    pub fn measured(&self, h: Option<HostFs>) {
        if let Some(h) = h {
            *self.host.lock() = Some((h, std::time::Instant::now()));
        }
    }

    pub fn host(&self) -> Option<HostFs> {
        self.host.lock().map(|(h, _)| h)
    }

    /// Whether the last measurement is older than `age` (other programs may have filled the
    /// filesystem since; txgs measure it at their start and end).
    pub fn older_than(&self, age: std::time::Duration) -> bool {
        self.host.lock().is_some_and(|(_, at)| at.elapsed() > age)
    }

    /// Bytes of the metadata filesystem that data of growable devices on it must leave
    /// alone: the reserve plus outstanding charges (0 when unmeasured).
    pub fn held_back(&self) -> u64 {
        self.host().map_or(0, |h| reserve_for(h.total).saturating_add(self.charged()))
    }

    pub fn charged(&self) -> u64 {
        self.pending.load(Ordering::Relaxed).saturating_add(self.committing.load(Ordering::Relaxed))
    }

    /// Inputs for `decide`: `data` dirty bytes bound for this filesystem, `data_meta` what
    /// the data in flight takes in the store (`data_meta`); `None` when the store has no
    /// host filesystem (in memory).
    pub fn room(&self, data: u64, data_meta: u64) -> Option<Room> {
        let h = self.host()?;
        let charged = self.charged().saturating_add(data_meta);
        Some(Room { free: h.free, reserve: reserve_for(h.total), charged, data })
    }

    /// The refusal: names the filesystem and the reserve.
    pub fn refusal(&self, dir: &std::path::Path) -> crate::base::error::EngineError {
        let reserve = self.host().map_or(0, |h| reserve_for(h.total));
        crate::base::error::EngineError::NoMetaSpace { dir: dir.to_path_buf(), reserve }
    }

    pub fn charge(&self, bytes: u64) {
        self.pending.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The commit stage took the open changes: their charges move to `committing`.
    pub fn take(&self) {
        let p = self.pending.swap(0, Ordering::Relaxed);
        self.committing.fetch_add(p, Ordering::Relaxed);
    }

    /// The committed txg is now counted in `free` (measured after its commit).
    pub fn counted(&self) {
        self.committing.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn room(free: u64, charged: u64, data: u64) -> Room {
        Room { free, reserve: MIB, charged, data }
    }

    #[test]
    fn reserve_is_a_share_of_the_filesystem_within_bounds() {
        assert_eq!(reserve_for(0), RESERVE_MIN);
        assert_eq!(reserve_for(16 * MIB), RESERVE_MIN);
        assert_eq!(reserve_for(128 * MIB), 2 * MIB);
        assert_eq!(reserve_for(1 << 40), RESERVE_MAX);
    }

    #[test]
    fn growth_keeps_the_reserve_and_deletions_may_use_it() {
        let r = room(MIB + 8192, 0, 0);
        assert_eq!(decide(r, 8192, Kind::Grows), Decision::Admit);
        assert_eq!(decide(r, 8193, Kind::Grows), Decision::NoSpace);
        assert_eq!(decide(r, MIB, Kind::NoGrowth), Decision::Admit);
        assert_eq!(decide(r, MIB + 8193, Kind::NoGrowth), Decision::NoSpace);
    }

    #[test]
    fn outstanding_charges_ask_for_a_commit_before_refusing() {
        // the estimate may be far above what redb takes: the commit measures it
        let r = room(3 * MIB, MIB, 0);
        assert_eq!(decide(r, MIB, Kind::Grows), Decision::Admit);
        assert_eq!(decide(r, MIB + 1, Kind::Grows), Decision::CommitFirst);
        assert_eq!(decide(room(2 * MIB, 0, 0), MIB + 1, Kind::Grows), Decision::NoSpace);
    }

    #[test]
    fn dirty_data_on_the_same_filesystem_counts_against_the_room() {
        let r = room(3 * MIB, 0, 2 * MIB);
        assert_eq!(decide(r, 1, Kind::Grows), Decision::NoSpace);
        assert_eq!(decide(r, MIB, Kind::NoGrowth), Decision::Admit);
    }

    #[test]
    fn charges_move_to_committing_and_go_once_counted() {
        let m = MetaSpace::default();
        m.measured(Some(HostFs { fs: 1, free: 10 * MIB, total: 16 * MIB }));
        m.charge(100);
        m.take();
        m.charge(7);
        assert_eq!(m.charged(), 107);
        m.counted();
        assert_eq!(m.charged(), 7);
        assert_eq!(m.held_back(), MIB + 7);
        m.measured(None);
        assert_eq!(m.host().unwrap().free, 10 * MIB, "a failed measurement keeps the last one");
    }

    #[test]
    fn no_room_figures_for_a_store_in_memory() {
        assert!(MetaSpace::default().room(0, 0).is_none());
        assert_eq!(MetaSpace::default().held_back(), 0);
    }
}
