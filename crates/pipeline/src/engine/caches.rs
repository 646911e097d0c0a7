//! Read-side caches ([`ReadCaches`]: everything the read path keeps between reads).
//!
//! * [`ExtentCache`]: (inode, record) → extent pointer (or "none": a hole), bounded by entry
//!   count. Staleness guard: every commit that changes extents bumps `gen`; a lookup done
//!   from the store is inserted only if `gen` did not move since the lookup started, so a
//!   pointer read before a commit can never be cached after it.
//! * [`RecordCache`]: decompressed records keyed by their physical identity (device,
//!   offset, checksum), bounded by bytes, evicted in insertion order (a CLOCK-free FIFO is
//!   enough under the kernel page cache). Identity includes the checksum, so space reused
//!   by a later record can never serve old bytes.
//! * Read-ahead state: the end of each file's last read (sequential detection) and the
//!   records a prefetch job decodes right now, so a reader waits for that decode instead
//!   of doing it twice.

use crate::base::locks::{Mutex, Rank};
use parking_lot::Condvar;
use rustc_hash::FxHashMap;
use squeezefs_meta::{ExtentPtr, Ino};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The read path's caches and read-ahead state.
pub struct ReadCaches {
    pub extents: ExtentCache,
    pub records: RecordCache,
    /// sequential-read detection: inode → end of its last read
    readahead: Mutex<FxHashMap<Ino, u64>>,
    /// prefetches decoding now (record keys), so one record is decoded once
    prefetching: Mutex<HashSet<RecordKey>>,
    /// notified whenever a prefetch finishes
    prefetch_cv: Condvar,
}

impl ReadCaches {
    pub fn new(record_bytes: usize) -> ReadCaches {
        ReadCaches {
            extents: ExtentCache::new(1 << 18),
            records: RecordCache::new(record_bytes),
            readahead: Mutex::new(Rank::Leaf, FxHashMap::default()),
            prefetching: Mutex::new(Rank::Leaf, HashSet::new()),
            prefetch_cv: Condvar::new(),
        }
    }

    /// A read of `[off, end)` of `ino`: whether it continues the file's last read (or
    /// starts the file), i.e. is sequential.
    pub fn note_read(&self, ino: Ino, off: u64, end: u64) -> bool {
        let mut ra = self.readahead.lock();
        if ra.len() > 4096 {
            ra.clear();
        }
        let seq = ra.get(&ino).is_some_and(|&e| e == off) || off == 0;
        ra.insert(ino, end);
        seq
    }

    /// The last read of `ino` ended at or past `pos`.
    pub fn read_past(&self, ino: Ino, pos: u64) -> bool {
        self.readahead.lock().get(&ino).is_some_and(|&e| e >= pos)
    }

    /// A prefetch job claims the decode of `k`; false if another one has it.
    pub fn claim_prefetch(&self, k: RecordKey) -> bool {
        self.prefetching.lock().insert(k)
    }

    /// The prefetch of `k` ended (decoded, failed or panicked): readers waiting go on.
    pub fn end_prefetch(&self, k: &RecordKey) {
        self.prefetching.lock().remove(k);
        self.prefetch_cv.notify_all();
    }

    pub fn is_prefetching(&self, k: &RecordKey) -> bool {
        self.prefetching.lock().contains(k)
    }

    /// Wait while a prefetch decodes `k` (it runs on a worker, which never waits for
    /// anything; queued prefetches are not claimed, so a worker never waits for a job
    /// queued behind itself).
    pub fn wait_prefetch(&self, k: &RecordKey) {
        let mut inflight = self.prefetching.lock();
        while inflight.contains(k) {
            inflight.wait_for(&self.prefetch_cv, std::time::Duration::from_millis(20));
        }
    }
}

pub struct ExtentCache {
    map: Mutex<BTreeMap<(Ino, u64), Option<ExtentPtr>>>,
    max_entries: usize,
    gen: AtomicU64,
}

impl ExtentCache {
    pub fn new(max_entries: usize) -> ExtentCache {
        ExtentCache { map: Mutex::default(), max_entries, gen: AtomicU64::new(0) }
    }

    pub fn gen(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    pub fn get(&self, ino: Ino, idx: u64) -> Option<Option<ExtentPtr>> {
        self.map.lock().get(&(ino, idx)).cloned()
    }

    /// Insert a lookup made when `gen` was `seen_gen`.
    pub fn insert(&self, ino: Ino, idx: u64, e: Option<ExtentPtr>, seen_gen: u64) {
        let mut m = self.map.lock();
        if self.gen.load(Ordering::Acquire) != seen_gen {
            return;
        }
        if m.len() >= self.max_entries {
            m.clear();
        }
        m.insert((ino, idx), e);
    }

    /// Forget records of `ino` (all of them when `idx` is None); bumps the generation.
    pub fn invalidate(&self, ino: Ino, idx: Option<u64>) {
        let mut m = self.map.lock();
        self.gen.fetch_add(1, Ordering::AcqRel);
        match idx {
            Some(i) => {
                m.remove(&(ino, i));
            }
            None => {
                let keys: Vec<_> = m.range((ino, 0)..=(ino, u64::MAX)).map(|(k, _)| *k).collect();
                for k in keys {
                    m.remove(&k);
                }
            }
        }
    }
}

pub type RecordKey = (u32, u64, u64);

/// The bounded cache of decoded records, least recently inserted out first.
///
/// Evicted buffers nobody else holds go to `spare` (at most `SPARE_BYTES`) and are reused
/// by the next decode (`take_buffer`): a fresh 128 KiB buffer is a fresh mapping from the
/// allocator, so every decoded record paid 32 page faults and their zeroing — 17% of the
/// daemon's CPU in a cold sequential read of compressed files.
pub struct RecordCache {
    inner: Mutex<RecInner>,
    max_bytes: usize,
    spare: Mutex<Vec<Vec<u8>>>,
}

/// Bytes of evicted buffers kept for reuse.
const SPARE_BYTES: usize = 8 << 20;

struct RecInner {
    map: HashMap<RecordKey, Arc<Vec<u8>>>,
    order: VecDeque<RecordKey>,
    bytes: usize,
}

impl RecordCache {
    pub fn new(max_bytes: usize) -> RecordCache {
        RecordCache {
            inner: Mutex::new(
                crate::base::locks::Rank::Leaf,
                RecInner { map: HashMap::new(), order: VecDeque::new(), bytes: 0 },
            ),
            max_bytes,
            spare: Mutex::default(),
        }
    }

    /// A buffer of `len` bytes for a decode to overwrite completely: an evicted one when
    /// there is one (its old bytes are still in it: callers must fill all `len` bytes or
    /// drop it), else a fresh zeroed one.
    pub fn take_buffer(&self, len: usize) -> Vec<u8> {
        let reused = {
            let mut sp = self.spare.lock();
            sp.iter().position(|b| b.capacity() >= len).map(|i| sp.swap_remove(i))
        };
        match reused {
            Some(mut b) => {
                b.resize(len, 0);
                b
            }
            None => vec![0u8; len],
        }
    }

    /// Hand back a buffer from `take_buffer` that was used only for a while (a compressed
    /// record's stored bytes): kept as a spare while there is room.
    pub fn give_buffer(&self, b: Vec<u8>) {
        self.keep_spares([b]);
    }

    fn keep_spare(&self, evicted: Vec<Arc<Vec<u8>>>) {
        // a reader still holding the record frees it when done
        self.keep_spares(evicted.into_iter().filter_map(|v| Arc::try_unwrap(v).ok()));
    }

    /// Keep buffers as spares up to `SPARE_BYTES` of capacity; the rest are freed.
    fn keep_spares(&self, bufs: impl IntoIterator<Item = Vec<u8>>) {
        let mut sp = self.spare.lock();
        let mut held: usize = sp.iter().map(|b| b.capacity()).sum();
        for b in bufs {
            if held + b.capacity() <= SPARE_BYTES {
                held += b.capacity();
                sp.push(b);
            }
        }
    }

    pub fn get(&self, k: &RecordKey) -> Option<Arc<Vec<u8>>> {
        self.inner.lock().map.get(k).cloned()
    }

    pub fn contains(&self, k: &RecordKey) -> bool {
        self.inner.lock().map.contains_key(k)
    }

    pub fn insert(&self, k: RecordKey, v: Arc<Vec<u8>>) {
        if v.len() > self.max_bytes {
            return;
        }
        let mut evicted = Vec::new();
        {
            let mut c = self.inner.lock();
            if c.map.contains_key(&k) {
                return;
            }
            c.bytes += v.len();
            c.map.insert(k, v);
            c.order.push_back(k);
            while c.bytes > self.max_bytes {
                let Some(old) = c.order.pop_front() else { break };
                if let Some(v) = c.map.remove(&old) {
                    c.bytes -= v.len();
                    evicted.push(v);
                }
            }
        }
        if !evicted.is_empty() {
            self.keep_spare(evicted);
        }
    }

    /// Drop `k` from the cache (its buffer is reused once nobody holds it).
    pub fn release(&self, k: &RecordKey) {
        let v = {
            let mut c = self.inner.lock();
            let Some(v) = c.map.remove(k) else { return };
            c.bytes -= v.len();
            if let Some(p) = c.order.iter().position(|o| o == k) {
                c.order.remove(p);
            }
            v
        };
        self.keep_spare(vec![v]);
    }

    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_cache_is_bounded() {
        let c = RecordCache::new(1000);
        for i in 0..10u64 {
            c.insert((0, i, 0), Arc::new(vec![0; 300]));
            assert!(c.bytes() <= 1000);
        }
        assert!(c.get(&(0, 9, 0)).is_some());
        assert!(c.get(&(0, 0, 0)).is_none());
    }

    #[test]
    fn evicted_buffers_are_reused_only_when_nobody_holds_them() {
        let c = RecordCache::new(1000);
        let held = Arc::new(vec![7u8; 600]);
        c.insert((0, 0, 0), held.clone());
        c.insert((0, 1, 0), Arc::new(vec![8u8; 600])); // evicts the held one
        c.insert((0, 2, 0), Arc::new(vec![9u8; 600])); // evicts a free one
        assert_eq!(c.spare.lock().len(), 1, "the held buffer is not recycled");
        assert_eq!(*held, vec![7u8; 600], "a reader's record is never handed out again");
        let b = c.take_buffer(500);
        assert_eq!(b.len(), 500);
        assert!(c.spare.lock().is_empty());
        // nothing spare: a fresh zeroed buffer
        assert_eq!(c.take_buffer(100), vec![0u8; 100]);
    }

    #[test]
    fn spare_buffers_are_bounded() {
        let c = RecordCache::new(1 << 20);
        for i in 0..64u64 {
            c.insert((0, i, 0), Arc::new(vec![0; 1 << 20]));
        }
        let held: usize = c.spare.lock().iter().map(|b| b.capacity()).sum();
        assert!(held <= SPARE_BYTES, "{held} bytes kept");
    }

    #[test]
    fn stale_extent_lookup_is_not_cached() {
        let c = ExtentCache::new(10);
        let g = c.gen();
        c.invalidate(1, Some(0));
        c.insert(1, 0, None, g);
        assert!(c.get(1, 0).is_none(), "lookup from before the commit must not be cached");
        let g = c.gen();
        c.insert(1, 0, None, g);
        assert_eq!(c.get(1, 0), Some(None));
        c.invalidate(1, None);
        assert!(c.get(1, 0).is_none());
    }
}
