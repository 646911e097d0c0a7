//! Space allocator: free ranges per device, sector-granular, packed.
//!
//! State per device: a map of free ranges below the *allocation end* plus the allocation end
//! itself (every byte at or after it is free up to the capacity; a growable device has no
//! capacity). Allocation is next-fit from a cursor, so the records of one txg land back to
//! back and the device writers see long sequential runs; when no free range fits, the
//! allocation end moves up.
//!
//! Invariants: free ranges are sector-aligned, disjoint, non-adjacent (merged), and lie in
//! `[DATA_START, alloc_end)`. Reuse of freed space is safe because frees are applied only in
//! the commit stage of a txg and allocation happens only in the sync stage of the next one,
//! after the durable commit that freed the space (see txg.rs).
//!
//! Persistence: `dirty` remembers the range starts that changed since the last commit; the
//! commit stage writes exactly those keys of the `free_space` table (and the allocation end).

use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
pub struct DevSpace {
    /// start → length of free ranges below `end`
    pub free: BTreeMap<u64, u64>,
    pub end: u64,
    pub capacity: Option<u64>,
    pub data_start: u64,
    cursor: u64,
    dirty: BTreeSet<u64>,
    end_dirty: bool,
}

impl DevSpace {
    pub fn new(data_start: u64, end: u64, capacity: Option<u64>, free: BTreeMap<u64, u64>) -> DevSpace {
        DevSpace {
            free,
            end: end.max(data_start),
            capacity,
            data_start,
            cursor: 0,
            dirty: BTreeSet::new(),
            end_dirty: false,
        }
    }

    /// Free bytes: free ranges plus the tail up to the capacity (`None`: unbounded).
    pub fn free_bytes(&self) -> Option<u64> {
        let ranges: u64 = self.free.values().sum();
        self.capacity.map(|c| ranges + c.saturating_sub(self.end))
    }

    pub fn free_range_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// Allocate `len` bytes (a multiple of the sector); `None` when nothing fits.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        if len == 0 {
            return Some(self.end);
        }
        // next fit: first free range at or after the cursor, then from the start
        let found = self
            .free
            .range(self.cursor..)
            .chain(self.free.range(..self.cursor))
            .find(|(_, &l)| l >= len)
            .map(|(&s, &l)| (s, l));
        if let Some((start, flen)) = found {
            self.free.remove(&start);
            self.dirty.insert(start);
            if flen > len {
                self.free.insert(start + len, flen - len);
                self.dirty.insert(start + len);
            }
            self.cursor = start + len;
            return Some(start);
        }
        let start = self.end;
        let new_end = start.checked_add(len)?;
        if let Some(cap) = self.capacity {
            if new_end > cap {
                return None;
            }
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
            debug_assert!(ps + pl <= s, "double free at {s}");
            if ps + pl == s {
                self.free.remove(&ps);
                self.dirty.insert(ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            self.dirty.insert(start + len);
            l += nl;
        }
        if s + l == self.end {
            // the tail shrinks instead of holding a free range at the end
            self.end = s;
            self.end_dirty = true;
            self.dirty.insert(s);
        } else {
            self.free.insert(s, l);
            self.dirty.insert(s);
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

    /// Is `[start, start+len)` entirely allocated (not free)? Used by fsck.
    pub fn is_allocated(&self, start: u64, len: u64) -> bool {
        if start < self.data_start || start + len > self.end {
            return false;
        }
        if let Some((&ps, &pl)) = self.free.range(..=start).next_back() {
            if ps + pl > start {
                return false;
            }
        }
        self.free.range(start..start + len).next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn allocations_are_packed_back_to_back() {
        let mut d = DevSpace::new(4096, 4096, None, BTreeMap::new());
        assert_eq!(d.alloc(512), Some(4096));
        assert_eq!(d.alloc(1024), Some(4608));
        assert_eq!(d.alloc(512), Some(5632));
        assert_eq!(d.end, 6144);
    }

    #[test]
    fn capacity_limits_allocation() {
        let mut d = DevSpace::new(4096, 4096, Some(8192), BTreeMap::new());
        assert_eq!(d.alloc(4096), Some(4096));
        assert_eq!(d.alloc(512), None);
        assert_eq!(d.free_bytes(), Some(0));
        d.free(4096, 4096);
        assert_eq!(d.end, 4096, "freeing the tail lowers the end");
        assert_eq!(d.free_bytes(), Some(4096));
    }

    #[test]
    fn frees_merge_and_are_reused() {
        let mut d = DevSpace::new(0, 0, None, BTreeMap::new());
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

    proptest! {
        /// Random alloc/free sequences never hand out overlapping space and account every
        /// byte exactly once.
        #[test]
        fn no_double_allocation(ops in proptest::collection::vec((any::<bool>(), 1u64..8, any::<prop::sample::Index>()), 1..200)) {
            let sector = 512;
            let mut d = DevSpace::new(4096, 4096, Some(4096 + 64 * 512), BTreeMap::new());
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
