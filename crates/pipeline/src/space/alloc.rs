//! Space allocator: free ranges per device, packed.
//!
//! State per device: a map of free ranges below the *allocation end* plus the allocation end
//! itself (every byte at or after it is free up to the capacity; a growable device has no
//! capacity), and the *open run* of the syncing txg. Allocation is next-fit from a cursor, so
//! the records of one txg land back to back and the device writers see long sequential runs;
//! when no free range fits, the allocation end moves up.
//!
//! Packing. A txg's records are packed into *runs*: a run starts on a sector boundary in
//! sectors that are wholly free, and its records follow each other at `granule` bytes (1 in
//! pools with the `PACKED_BYTES` feature, the sector in older pools). When a record does not
//! fit the run's remaining sectors, the run grows by whole sectors if the space right after it
//! is free, or a new run starts elsewhere. `close_run` (end of the place stage) returns the
//! unused end of the run's last sector to the free map.
//!
//! States of the open run: none → open (first `alloc_packed`) → open, longer (extended in
//! place) → none (`close_run`, or a new run elsewhere, which closes the old one first).
//!
//! Invariants: free ranges are disjoint, non-adjacent (merged) and lie in
//! `[DATA_START, alloc_end)`; they are byte-granular, but new space is only ever handed out
//! as whole free sectors (`alloc`). So a sector holding bytes of two txgs' records never
//! exists: only records of one run share a sector, and a torn write of that sector can only
//! hurt records of a txg that has not committed. A partial sector left free (a run's unused
//! end, or a freed record beside live ones) is reused only once the whole sector is free.
//!
//! Two images per device (space/placement.rs, early_place.rs). The *live* image (`untracked`) is where
//! every placement is taken: the syncing txg's run, and the runs of open layers placing
//! records early (`alloc_in`, a run held by the layer). The *durable* image is what commits
//! persist: a commit takes exactly the ranges its pointers refer to (`alloc_exact`) and
//! gives back its frees. Freed space reaches the live image only after the commit that
//! freed it is durable, so the live image's free ranges are free in the durable image too,
//! and a placement never overwrites data the last durable commit refers to.
//!
//! Persistence: in the durable image, `dirty` remembers the range starts that changed since
//! the last commit; the commit stage writes exactly those keys of the `free_space` table (and
//! the allocation end).

use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
pub struct DevSpace {
    /// start → length of free ranges below `end`; changed only through `put`/`take` (they
    /// keep `whole_sum` and the placeable cache right)
    free: BTreeMap<u64, u64>,
    /// Σ whole free sectors over `free` (`allocatable_range_bytes`): kept as ranges come and
    /// go, because the place stage asks for it once per record and admission once per write,
    /// and walking every range each time cost O(ranges) on a fragmented device
    whole_sum: u64,
    /// (whole free sectors, start) of every free range holding a whole sector: tells `alloc`
    /// at once whether any range can hold a run, instead of walking every fragment first
    by_whole: BTreeSet<(u64, u64)>,
    /// `placeable_bytes(record)` for the last `record` asked, until `free` changes
    placeable_cache: std::cell::Cell<Option<(u64, u64)>>,
    pub end: u64,
    pub capacity: Option<u64>,
    pub data_start: u64,
    /// allocation alignment of new space (a power of two)
    sector: u64,
    /// record packing unit: 1 (byte-packed pools) or `sector` (pools without PACKED_BYTES)
    granule: u64,
    run: Option<Run>,
    cursor: u64,
    dirty: BTreeSet<u64>,
    end_dirty: bool,
    /// record changed keys for `take_changes` (the durable image); the live image that
    /// allocation uses is never persisted and keeps no change set
    track: bool,
}

/// An open run: `[start, next)` holds its records so far, `[next, end)` is reserved (whole
/// sectors, `end` sector-aligned) and not yet used. The syncing txg's run lives in the
/// `DevSpace`; an open layer's early run (early_place.rs) is held by the layer and passed in.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    next: u64,
    end: u64,
}

impl DevSpace {
    pub fn new(
        data_start: u64,
        end: u64,
        capacity: Option<u64>,
        free: BTreeMap<u64, u64>,
        sector: u64,
        granule: u64,
    ) -> DevSpace {
        debug_assert!(sector.is_power_of_two() && granule >= 1 && sector.is_multiple_of(granule));
        let mut d = DevSpace {
            free: BTreeMap::new(),
            whole_sum: 0,
            by_whole: BTreeSet::new(),
            placeable_cache: std::cell::Cell::new(None),
            end: end.max(data_start),
            capacity,
            data_start,
            sector,
            granule,
            run: None,
            cursor: 0,
            dirty: BTreeSet::new(),
            end_dirty: false,
            track: true,
        };
        for (s, l) in free {
            d.put(s, l);
        }
        d
    }

    /// This image is the live one: allocation only, changes are not recorded.
    pub fn untracked(mut self) -> DevSpace {
        self.track = false;
        self.dirty.clear();
        self.end_dirty = false;
        self
    }

    /// Remember a changed free-range key (durable image only).
    fn mark(&mut self, k: u64) {
        if self.track {
            self.dirty.insert(k);
        }
    }

    /// Whole sectors inside the free range `[s, s+l)`.
    fn whole_in(&self, s: u64, l: u64) -> u64 {
        let lo = crate::base::units::sector_bytes(s, self.sector);
        let hi = s.saturating_add(l) / self.sector * self.sector;
        hi.saturating_sub(lo)
    }

    /// Set the free range at `s` to `l` bytes.
    fn put(&mut self, s: u64, l: u64) {
        if let Some(old) = self.free.insert(s, l) {
            let w = self.whole_in(s, old);
            self.whole_sum -= w;
            self.by_whole.remove(&(w, s));
        }
        let w = self.whole_in(s, l);
        self.whole_sum += w;
        if w > 0 {
            self.by_whole.insert((w, s));
        }
        self.placeable_cache.set(None);
    }

    /// Remove the free range at `s`; its length.
    fn take(&mut self, s: u64) -> Option<u64> {
        let l = self.free.remove(&s)?;
        let w = self.whole_in(s, l);
        self.whole_sum -= w;
        self.by_whole.remove(&(w, s));
        self.placeable_cache.set(None);
        Some(l)
    }

    /// Bytes that new records can still get: the whole sectors inside free ranges plus those
    /// from the first sector boundary at or after the end up to the capacity (`None`:
    /// unbounded). Partial sectors left free beside live bytes do not count: `alloc` never
    /// hands them out, and counting them let writes be accepted that no txg could place.
    pub fn free_bytes(&self) -> Option<u64> {
        Some(self.allocatable_range_bytes() + self.tail_bytes()?)
    }

    /// What records of up to `record` bytes each (a whole number of sectors) are sure to get,
    /// in whatever sizes and order they come: every free range and the space past the end,
    /// each less one record. A record never spans two ranges, so a range whose remainder is
    /// shorter than the next record loses that remainder (under `record`, the partial sector
    /// where a run ends included). Write admission uses this, not `free_bytes`: a write
    /// accepted on whole free sectors that lie in pieces smaller than its records would fail
    /// its txg in placement and suspend the pool.
    pub fn placeable_bytes(&self, record: u64) -> Option<u64> {
        // only ranges of more than `record` whole bytes contribute: the index lists them
        let bigger = || -> u64 { self.by_whole.range((record.saturating_add(1), 0)..).map(|&(w, _)| w - record).sum() };
        let in_ranges = match self.placeable_cache.get() {
            Some((r, v)) if r == record => v,
            _ => {
                let v = bigger();
                self.placeable_cache.set(Some((record, v)));
                v
            }
        };
        debug_assert_eq!(
            in_ranges,
            self.whole_free_sectors().fold(0u64, |sum, (_, len)| sum.saturating_add(len.saturating_sub(record))),
            "placeable bytes from the index and from the free map differ"
        );
        Some(in_ranges + self.tail_bytes()?.saturating_sub(record))
    }

    /// Whole sectors from the first sector boundary at or after the end up to the capacity
    /// (rounded down to a sector: a partial last sector is never handed out); `None` when
    /// the device is growable.
    fn tail_bytes(&self) -> Option<u64> {
        let cap = self.capacity? / self.sector * self.sector;
        Some(cap.saturating_sub(crate::base::units::sector_bytes(self.end, self.sector)))
    }

    /// Whole free sectors inside the free ranges (what `alloc` can hand out of them).
    pub fn allocatable_range_bytes(&self) -> u64 {
        debug_assert_eq!(self.whole_sum, self.whole_free_sectors().fold(0u64, |sum, (_, len)| sum.saturating_add(len)));
        self.whole_sum
    }

    /// (start, length) of the whole free sectors of each free range that has any.
    fn whole_free_sectors(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().filter_map(|(&s, &l)| {
            let lo = crate::base::units::sector_bytes(s, self.sector);
            let hi = s.saturating_add(l) / self.sector * self.sector;
            (hi > lo).then(|| (lo, hi - lo))
        })
    }

    /// Bytes in free ranges, partial sectors included: with the footprints of live extents
    /// they tile `[data_start, end)` (space accounting and fsck).
    pub fn free_range_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// Room left in the open run: a record this small or smaller fits without new sectors.
    pub fn run_room(&self) -> u64 {
        self.run.map_or(0, |r| r.end - r.next)
    }

    /// Bytes a record of `stored` bytes occupies (its footprint): rounded up to the granule.
    pub fn footprint(&self, stored: u64) -> u64 {
        crate::base::units::granule_bytes(stored, self.granule)
    }

    /// Place a record of `stored` bytes in the open run (see the module comment); returns its
    /// offset, or `None` when no space is left. Its footprint is `self.footprint(stored)`.
    pub fn alloc_packed(&mut self, stored: u64) -> Option<u64> {
        let mut run = self.run.take();
        let at = self.alloc_in(&mut run, stored);
        self.run = run;
        at
    }

    /// `alloc_packed` in a run held outside (an open layer's early run, early_place.rs).
    pub fn alloc_in(&mut self, run: &mut Option<Run>, stored: u64) -> Option<u64> {
        let need = self.footprint(stored);
        if let Some(r) = *run {
            if r.next + need <= r.end {
                *run = Some(Run { next: r.next + need, end: r.end });
                return Some(r.next);
            }
            let more = crate::base::units::sector_bytes(r.next + need - r.end, self.sector);
            if self.take_at(r.end, more) {
                *run = Some(Run { next: r.next + need, end: r.end + more });
                return Some(r.next);
            }
        }
        let whole = crate::base::units::sector_bytes(need, self.sector);
        let start = self.alloc(whole)?;
        // only now: a failed allocation leaves the old run open for smaller records
        self.close_run_of(run.take());
        *run = Some(Run { next: start + need, end: start + whole });
        Some(start)
    }

    /// End the open run: the unused end of its last sector goes back to the free map.
    pub fn close_run(&mut self) {
        let run = self.run.take();
        self.close_run_of(run);
    }

    /// End a run held outside (see `alloc_in`).
    pub fn close_run_of(&mut self, run: Option<Run>) {
        if let Some(run) = run {
            if run.end > run.next {
                self.free(run.next, run.end - run.next);
            }
        }
    }

    /// The unused end of a run held outside: (start, length).
    pub fn unused_of(run: &Run) -> (u64, u64) {
        (run.next, run.end - run.next)
    }

    /// Take exactly `[start, start+len)` (byte-granular), which must be free: the durable
    /// image takes the records a commit makes durable, wherever the live image placed them.
    /// Space past the end extends it, the gap below becoming a free range. `false` (nothing
    /// changed) when part of the range is not free.
    pub fn alloc_exact(&mut self, start: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some(stop) = start.checked_add(len) else { return false };
        if start >= self.end {
            if self.capacity.is_some_and(|c| stop > c) {
                return false;
            }
            if start > self.end {
                // no free range ends at the end (`free` lowers the end instead)
                let e = self.end;
                self.put(e, start - e);
                self.mark(e);
            }
            self.end = stop;
            self.end_dirty = true;
            return true;
        }
        let Some((&fs, &fl)) = self.free.range(..=start).next_back() else { return false };
        if fs + fl < stop {
            return false;
        }
        self.take(fs);
        self.mark(fs);
        if start > fs {
            self.put(fs, start - fs);
        }
        if fs + fl > stop {
            self.put(stop, fs + fl - stop);
            self.mark(stop);
        }
        true
    }

    /// Take exactly `[at, at+len)` (`at` sector-aligned) if it is free; used to grow a run.
    fn take_at(&mut self, at: u64, len: u64) -> bool {
        if at == self.end {
            let Some(new_end) = at.checked_add(len) else { return false };
            if self.capacity.is_some_and(|c| new_end > c) {
                return false;
            }
            self.end = new_end;
            self.end_dirty = true;
            return true;
        }
        match self.free.get(&at).copied() {
            Some(flen) if flen >= len => {
                self.take(at);
                self.mark(at);
                if flen > len {
                    self.put(at + len, flen - len);
                    self.mark(at + len);
                }
                self.cursor = at + len;
                true
            }
            _ => false,
        }
    }

    /// Allocate `len` bytes (a multiple of the sector) of wholly free sectors, at a
    /// sector-aligned offset; `None` when nothing fits.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        if len == 0 {
            return Some(self.end);
        }
        let sector = self.sector;
        // the sector-aligned part of a free range that can hold `len`
        let fits = |s: u64, l: u64| {
            let a = crate::base::units::sector_bytes(s, sector);
            (a.checked_add(len)? <= s + l).then_some(a)
        };
        // next fit: first free range at or after the cursor, then from the start; none
        // holds `len` whole sectors (the index says so at once) → at the end
        let any_fits = self.by_whole.range((len, 0)..).next().is_some();
        let found = self
            .free
            .range(self.cursor..)
            .chain(self.free.range(..self.cursor))
            .take_while(|_| any_fits)
            .find_map(|(&s, &l)| fits(s, l).map(|a| (s, l, a)));
        debug_assert_eq!(found.is_some(), any_fits, "the whole-sector index disagrees with the free map");
        if let Some((start, flen, at)) = found {
            self.take(start);
            self.mark(start);
            if at > start {
                // a partial sector before: stays free until its neighbour is freed too
                self.put(start, at - start);
            }
            if start + flen > at + len {
                self.put(at + len, start + flen - at - len);
                self.mark(at + len);
            }
            self.cursor = at + len;
            return Some(at);
        }
        // at the end: from the first sector boundary at or after it (the sector holding the
        // end may hold a record's last bytes)
        let start = crate::base::units::sector_bytes(self.end, sector);
        let new_end = start.checked_add(len)?;
        if let Some(cap) = self.capacity {
            if new_end > cap {
                return None;
            }
        }
        if start > self.end {
            // the skipped partial sector lies below the end now: a free range of its own (no
            // free range ends at the old end: `free` lowers the end instead)
            self.put(self.end, start - self.end);
            self.mark(self.end);
        }
        self.end = new_end;
        self.end_dirty = true;
        Some(start)
    }

    /// Return `[start, start+len)` to the free space, merging with neighbours. Returns the
    /// whole free range now holding it (`(start, len)`; at the tail: from the new end to the
    /// old one), which the caller may discard on the device once the free is durable.
    pub fn free(&mut self, start: u64, len: u64) -> (u64, u64) {
        if len == 0 {
            return (start, 0);
        }
        let mut s = start;
        let mut l = len;
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            debug_assert!(ps.checked_add(pl).is_some_and(|end| end <= s), "double free at {s}");
            if ps.checked_add(pl) == Some(s) {
                self.take(ps);
                self.mark(ps);
                s = ps;
                l += pl;
            }
        }
        // the range right after: a free range there merges (a damaged map may hold one
        // reaching past 2^64: the merged length saturates instead of wrapping)
        if let Some((after, nl)) = start.checked_add(len).and_then(|a| self.free.get(&a).map(|&nl| (a, nl))) {
            self.take(after);
            self.mark(after);
            l = l.saturating_add(nl);
        }
        if s.checked_add(l) == Some(self.end) {
            // the tail shrinks instead of holding a free range at the end
            self.end = s;
            self.end_dirty = true;
            self.mark(s);
        } else {
            self.put(s, l);
            self.mark(s);
        }
        (s, l)
    }

    /// Keys changed since the last call: `(start, Some(len))` to write, `(start, None)` to
    /// delete; plus whether the allocation end changed.
    pub fn take_changes(&mut self) -> (Vec<(u64, Option<u64>)>, bool) {
        let keys = std::mem::take(&mut self.dirty);
        let changes = keys.into_iter().map(|k| (k, self.free.get(&k).copied())).collect();
        (changes, std::mem::replace(&mut self.end_dirty, false))
    }

    /// Does `[start, start+len)` lie inside the data area, `[data_start, end)`? Ranges read
    /// from the metadata store are checked with this before the maps take them: a damaged
    /// row must give an error, not overflow the map's arithmetic.
    pub fn holds_range(&self, start: u64, len: u64) -> bool {
        range_inside(start, len, self.data_start, self.end)
    }

    /// Is `[start, start+len)` entirely allocated (not free)? Used by fsck.
    pub fn is_allocated(&self, start: u64, len: u64) -> bool {
        let Some(stop) = start.checked_add(len).filter(|&stop| start >= self.data_start && stop <= self.end) else {
            return false;
        };
        if let Some((&ps, &pl)) = self.free.range(..=start).next_back() {
            if ps.checked_add(pl).is_none_or(|end| end > start) {
                return false;
            }
        }
        self.free.range(start..stop).next().is_none()
    }
}

/// `[start, start+len)` is non-empty and inside `[lo, hi)`, without overflow.
pub fn range_inside(start: u64, len: u64, lo: u64, hi: u64) -> bool {
    len > 0 && start >= lo && start.checked_add(len).is_some_and(|end| end <= hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn range_inside_over_the_edges_and_overflow() {
        assert!(range_inside(10, 5, 10, 15));
        assert!(!range_inside(10, 0, 10, 15), "empty");
        assert!(!range_inside(9, 5, 10, 15), "starts below");
        assert!(!range_inside(10, 6, 10, 15), "ends past");
        assert!(!range_inside(u64::MAX - 4, 16, 0, u64::MAX), "end overflows");
        assert!(!range_inside(0xffff_ffff_ffff_ff00, 16, 4096, 1 << 40));
        assert!(range_inside(u64::MAX - 16, 16, 0, u64::MAX));
    }

    /// The space map's checks hold at the end of the address space: offsets and lengths
    /// from damaged metadata must give answers, not arithmetic overflows.
    #[test]
    fn checks_near_the_end_of_the_address_space_do_not_overflow() {
        let top = u64::MAX - 1024;
        let mut free = BTreeMap::new();
        free.insert(top, 512);
        let mut d = DevSpace::new(4096, u64::MAX, None, free, 512, 1);
        assert!(!d.is_allocated(u64::MAX - 10, 20), "a range past 2^64 is not allocated space");
        assert!(!d.is_allocated(top + 100, 10), "free");
        assert!(d.is_allocated(top + 512, 512));
        assert!(!d.is_allocated(top + 512, 513), "past the end");
        assert_eq!(d.allocatable_range_bytes(), 0, "no whole sector below 2^64 in that range");
        assert_eq!(d.placeable_bytes(512), None, "growable");
        // freeing the last bytes merges with the free range before them and lowers the end
        assert_eq!(d.free(top + 512, 512), (top, 1024));
        assert_eq!(d.end, top);
        assert!(d.free.is_empty());
        // a sector whose end is representable is handed out; then nothing (the last sector
        // would end at 2^64), without an overflow
        assert_eq!(d.alloc(512), Some(u64::MAX - 1023));
        assert_eq!(d.alloc(512), None);
        assert_eq!(d.alloc(1024), None);
    }

    /// A map handed a range that reaches past 2^64 (what damaged rows would give without
    /// open's checks): freeing inside it is a double free, and the debug check says so
    /// instead of dying of its own addition.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "double free at 9000")]
    fn the_double_free_check_does_not_overflow() {
        let mut free = BTreeMap::new();
        free.insert(8192, u64::MAX - 8000);
        let mut d = DevSpace::new(4096, u64::MAX, None, free, 512, 1);
        d.free(9000, 10);
    }

    #[test]
    fn alloc_exact_takes_a_range_inside_a_free_range_or_past_the_end() {
        let mut free = BTreeMap::new();
        free.insert(5000, 1000);
        let mut d = DevSpace::new(4096, 8192, None, free, 512, 1);
        assert!(d.alloc_exact(5100, 300));
        assert_eq!(d.free.get(&5000), Some(&100));
        assert_eq!(d.free.get(&5400), Some(&600));
        assert!(!d.alloc_exact(5050, 100), "overlaps the range just taken");
        assert!(!d.alloc_exact(4096, 10), "allocated space");
        assert!(!d.alloc_exact(5900, 200), "runs past the free range into allocated space");
        // past the end: the end moves, the gap below becomes a free range
        assert!(d.alloc_exact(9000, 100));
        assert_eq!((d.end, d.free.get(&8192)), (9100, Some(&808)));
        assert!(d.alloc_exact(9100, 50));
        assert_eq!(d.end, 9150);
        let (changes, end_changed) = d.take_changes();
        assert!(end_changed);
        assert!(changes.contains(&(5000, Some(100))) && changes.contains(&(8192, Some(808))));
        // a fixed device: nothing past the capacity
        let mut d = DevSpace::new(4096, 4096, Some(8192), BTreeMap::new(), 512, 1);
        assert!(!d.alloc_exact(8000, 500));
        assert!(d.alloc_exact(8000, 192));
        // the live image records no changes
        let mut d = DevSpace::new(4096, 4096, None, BTreeMap::new(), 512, 1).untracked();
        d.alloc_packed(100);
        d.close_run();
        assert_eq!(d.take_changes(), (vec![], true));
    }

    #[test]
    fn allocations_are_packed_back_to_back() {
        let mut d = DevSpace::new(4096, 4096, None, BTreeMap::new(), 512, 512);
        assert_eq!(d.alloc(512), Some(4096));
        assert_eq!(d.alloc(1024), Some(4608));
        assert_eq!(d.alloc(512), Some(5632));
        assert_eq!(d.end, 6144);
    }

    #[test]
    fn capacity_limits_allocation() {
        let mut d = DevSpace::new(4096, 4096, Some(8192), BTreeMap::new(), 512, 512);
        assert_eq!(d.alloc(4096), Some(4096));
        assert_eq!(d.alloc(512), None);
        assert_eq!(d.free_bytes(), Some(0));
        d.free(4096, 4096);
        assert_eq!(d.end, 4096, "freeing the tail lowers the end");
        assert_eq!(d.free_bytes(), Some(4096));
    }

    #[test]
    fn frees_merge_and_are_reused() {
        let mut d = DevSpace::new(0, 0, None, BTreeMap::new(), 512, 512);
        let a = d.alloc(512).unwrap();
        let b = d.alloc(512).unwrap();
        let c = d.alloc(512).unwrap();
        let _e = d.alloc(512).unwrap();
        d.free(a, 512);
        d.free(c, 512);
        d.free(b, 512);
        assert_eq!(d.free.len(), 1);
        assert_eq!(d.free.get(&0), Some(&1536));
        assert_eq!(d.alloc(1536), Some(0));
    }

    #[test]
    fn records_of_one_run_are_packed_at_byte_granularity() {
        let mut d = DevSpace::new(4096, 4096, None, BTreeMap::new(), 512, 1);
        assert_eq!(d.alloc_packed(100), Some(4096));
        assert_eq!(d.alloc_packed(1000), Some(4196));
        assert_eq!(d.alloc_packed(3), Some(5196));
        assert_eq!(d.end, 4096 + 1536, "the run grew by whole sectors");
        d.close_run();
        assert_eq!(d.end, 5199, "the run's unused end went back: the end is not sector-aligned");
        // the next txg's run starts on the next sector boundary, never in the shared sector
        assert_eq!(d.alloc_packed(10), Some(5632));
        assert_eq!(d.free.get(&5199), Some(&(5632 - 5199)));
        d.close_run();
        assert!(d.is_allocated(4096, 1103) && !d.is_allocated(5199, 1));
    }

    #[test]
    fn a_partial_free_sector_is_reused_only_when_wholly_free() {
        let mut d = DevSpace::new(4096, 4096, None, BTreeMap::new(), 512, 1);
        let a = d.alloc_packed(300).unwrap();
        let b = d.alloc_packed(300).unwrap();
        let c = d.alloc_packed(1024).unwrap();
        d.close_run();
        let end = d.end;
        d.free(a, 300);
        // [4096, 4396) is free but shares its sector with b: a new run must not start there
        assert_eq!(d.alloc_packed(200), Some(crate::base::units::sector_bytes(end, 512)));
        d.close_run();
        d.free(b, 300);
        // now [4096, 4696) is free: the first sector is whole and is used again
        assert_eq!(d.alloc_packed(200), Some(4096));
        d.close_run();
        assert!(d.is_allocated(c, 1024));
    }

    #[test]
    fn sector_packed_pools_keep_whole_sector_footprints() {
        let mut d = DevSpace::new(4096, 4096, None, BTreeMap::new(), 512, 512);
        assert_eq!(d.footprint(100), 512);
        assert_eq!(d.alloc_packed(100), Some(4096));
        assert_eq!(d.alloc_packed(600), Some(4608));
        d.close_run();
        assert_eq!(d.end, 4608 + 1024);
        assert!(d.free.is_empty());
    }

    /// A capacity that is not a multiple of the sector (a fixed device file
    /// of `--capacity` bytes, a block device whose size is not a multiple of 4096) leaves a
    /// partial last sector that `alloc` can never hand out; `free_bytes` counted it.
    #[test]
    fn free_bytes_does_not_count_the_partial_sector_at_an_unaligned_capacity() {
        let mut d = DevSpace::new(4096, 4096, Some(4096 + 1000), BTreeMap::new(), 512, 1);
        assert_eq!(d.alloc(512), Some(4096));
        // 488 bytes remain below the capacity, less than a sector: nothing can be placed
        assert_eq!(d.clone().alloc(512), None);
        assert_eq!(d.clone().alloc_packed(1), None);
        assert_eq!(d.free_bytes(), Some(0), "free_bytes promises space that alloc never gives");
        assert_eq!(d.placeable_bytes(512), Some(0));
    }

    /// Free pieces count for admission only beyond one record each: records of up to that
    /// size, in any order, always find room for that much.
    #[test]
    fn placeable_bytes_leaves_one_record_per_free_piece() {
        // pieces of 2, 8 and 3 sectors, and 16 sectors past the end
        let free = BTreeMap::from([(4096, 1024), (8192, 4096), (16384, 1536)]);
        let d = DevSpace::new(4096, 20480, Some(20480 + 8192), free, 512, 1);
        assert_eq!(d.free_bytes(), Some(1024 + 4096 + 1536 + 8192));
        assert_eq!(d.placeable_bytes(2048), Some(2048 + 6144));
        assert_eq!(d.placeable_bytes(512), Some(512 + 3584 + 1024 + 7680));
        assert_eq!(DevSpace::new(4096, 4096, None, BTreeMap::new(), 512, 1).placeable_bytes(512), None);
    }

    proptest! {
        /// Txgs of packed records with frees between them: no two live records overlap, a
        /// sector never holds records of two runs (a torn write of it could only hurt an
        /// uncommitted txg), and every byte is either a live footprint or free.
        #[test]
        fn runs_never_share_a_sector(
            txgs in proptest::collection::vec(
                (proptest::collection::vec(1u64..3000, 1..12), proptest::collection::vec(any::<prop::sample::Index>(), 0..6)),
                1..40),
            byte_packed in any::<bool>(),
        ) {
            let sector = 512;
            let cap = 4096 + 256 * 512;
            let mut d = DevSpace::new(4096, 4096, Some(cap), BTreeMap::new(), sector, if byte_packed { 1 } else { sector });
            // live records: (start, footprint, run number)
            let mut live: Vec<(u64, u64, usize)> = Vec::new();
            for (run_no, (sizes, frees)) in txgs.into_iter().enumerate() {
                for n in sizes {
                    let Some(s) = d.alloc_packed(n) else { continue };
                    let f = d.footprint(n);
                    for &(ls, lf, lr) in &live {
                        prop_assert!(s + f <= ls || ls + lf <= s, "overlap");
                        let shares = s / sector <= (ls + lf - 1) / sector && ls / sector <= (s + f - 1) / sector;
                        prop_assert!(!shares || lr == run_no, "sector shared by runs {lr} and {run_no}");
                    }
                    prop_assert!(d.is_allocated(s, f));
                    live.push((s, f, run_no));
                }
                d.close_run();
                for pick in frees {
                    if live.is_empty() { break; }
                    let (s, f, _) = live.swap_remove(pick.index(live.len()));
                    d.free(s, f);
                    prop_assert!(!d.is_allocated(s, f));
                }
                let used: u64 = live.iter().map(|x| x.1).sum();
                prop_assert_eq!(used + d.free_range_bytes() + (cap - d.end), cap - 4096);
                // what free_bytes promises, alloc keeps: whole sectors only, and at least one
                // of them can be had whenever it reports any
                let free = d.free_bytes().unwrap();
                prop_assert_eq!(free % sector, 0);
                prop_assert_eq!(free > 0, d.clone().alloc(sector).is_some());
            }
        }

        /// The live and durable images (early_place.rs): records placed in the live image,
        /// in the sync stage's run or in open layers' runs, then committed (the durable image
        /// takes them exactly), given up (the live image gets them back) or freed after
        /// their commit (durable first, live after). A committed range is always free in the
        /// durable image until its commit, the persisted change log replays to the durable
        /// map, and once nothing is in flight both images are the same.
        #[test]
        fn live_and_durable_images_agree(
            ops in proptest::collection::vec((0u8..6, 0usize..4, 1u64..3000, any::<prop::sample::Index>()), 1..150),
            byte_packed in any::<bool>(),
        ) {
            let sector = 512;
            let granule = if byte_packed { 1 } else { sector };
            let mk = || DevSpace::new(4096, 4096, None, BTreeMap::new(), sector, granule);
            let mut live = mk().untracked();
            let mut durable = mk();
            let mut persisted: BTreeMap<u64, u64> = BTreeMap::new();
            let mut persisted_end = 4096;
            // runs of three open layers (3 = the sync stage's run inside `live`)
            let mut runs: [Option<Run>; 3] = [None; 3];
            let mut pending: Vec<(u64, u64)> = Vec::new();
            let mut committed: Vec<(u64, u64)> = Vec::new();
            let free_in = |d: &DevSpace, s: u64, l: u64| {
                s >= d.end || d.free.range(..=s).next_back().is_some_and(|(&fs, &fl)| fs + fl >= s + l)
            };
            for (op, layer, n, pick) in ops {
                match op {
                    0 | 1 => {
                        let at = if layer == 3 { live.alloc_packed(n) } else { live.alloc_in(&mut runs[layer], n) };
                        let Some(s) = at else { continue };
                        let f = live.footprint(n);
                        for &(ps, pf) in pending.iter().chain(committed.iter()) {
                            prop_assert!(s + f <= ps || ps + pf <= s, "overlap");
                        }
                        prop_assert!(free_in(&durable, s, f), "placed over space the durable image holds");
                        pending.push((s, f));
                    }
                    2 if !pending.is_empty() => {
                        // given up: back to the live image only
                        let (s, f) = pending.swap_remove(pick.index(pending.len()));
                        live.free(s, f);
                    }
                    3 => {
                        // a commit: quiesce closes the runs, the durable image takes the ranges
                        for r in runs.iter_mut() {
                            live.close_run_of(r.take());
                        }
                        live.close_run();
                        for (s, f) in pending.drain(..) {
                            prop_assert!(durable.alloc_exact(s, f), "commit of {}+{} refused", s, f);
                            committed.push((s, f));
                        }
                        let (changes, end_changed) = durable.take_changes();
                        for (k, v) in changes {
                            match v { Some(l) => { persisted.insert(k, l); } None => { persisted.remove(&k); } }
                        }
                        if end_changed { persisted_end = durable.end; }
                        prop_assert_eq!(&persisted, &durable.free);
                        prop_assert_eq!(persisted_end, durable.end);
                    }
                    4 if !committed.is_empty() => {
                        // a commit freeing a record: durable now, live after it is durable
                        let (s, f) = committed.swap_remove(pick.index(committed.len()));
                        durable.free(s, f);
                        live.free(s, f);
                    }
                    _ => {}
                }
            }
            for r in runs.iter_mut() {
                live.close_run_of(r.take());
            }
            live.close_run();
            for (s, f) in pending.drain(..) {
                prop_assert!(durable.alloc_exact(s, f));
            }
            prop_assert_eq!(&live.free, &durable.free);
            prop_assert_eq!(live.end, durable.end);
            prop_assert_eq!(live.free_bytes(), durable.free_bytes());
        }

        /// Random alloc/free sequences never hand out overlapping space and account every
        /// byte exactly once.
        #[test]
        fn no_double_allocation(ops in proptest::collection::vec((any::<bool>(), 1u64..8, any::<prop::sample::Index>()), 1..200)) {
            let sector = 512;
            let mut d = DevSpace::new(4096, 4096, Some(4096 + 64 * 512), BTreeMap::new(), 512, 512);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (is_alloc, n, pick) in ops {
                if is_alloc || live.is_empty() {
                    if let Some(s) = d.alloc(n * sector) {
                        for &(ls, ll) in &live {
                            prop_assert!(s + n * sector <= ls || ls + ll <= s, "overlap");
                        }
                        prop_assert!(d.is_allocated(s, n * sector));
                        live.push((s, n * sector));
                    }
                } else {
                    let (s, l) = live.swap_remove(pick.index(live.len()));
                    d.free(s, l);
                    prop_assert!(!d.is_allocated(s, l));
                }
                let used: u64 = live.iter().map(|x| x.1).sum();
                prop_assert_eq!(used + d.free_bytes().unwrap(), 64 * 512);
            }
        }
    }
}
