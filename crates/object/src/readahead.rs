//! Read-ahead over segment objects, asynchronous: a sequential stream of reads of one
//! segment has the blocks ahead of it fetched in the background into the read cache while
//! it consumes what it has, so a cold sequential read waits for about one GET's latency
//! once, not once per window.
//!
//! **Streams** (the decision, [`ReadAhead::on_read`], a pure function of the reads it is
//! shown): one per segment being read, at most [`STREAMS`], the least recently used
//! replaced. A stream has `start` (the first block of its last read), `next` (its frontier:
//! the first block not yet read or asked for) and `window` (the blocks of the last
//! read-ahead it issued). Every read of blocks `b0..b1` of a committed segment goes through
//! it, hit or miss (after the first windows the reader hits the cache, and the hits are what
//! move the stream on). `missed`: some of `b0..b1` was neither cached nor in flight.
//! * `b0` outside every stream of the segment (a random read, or a stream's first read): a
//!   new stream, `next = b1`, `window` [`FIRST_WINDOW`] / 2; nothing is fetched ahead, so a
//!   random read costs no extra bytes — except at block 0: a read of a segment's first
//!   block is where a reader of a whole file written into it starts (as the kernel's page
//!   cache takes a read at offset 0 for the start of a sequential one), and it has
//!   `b1..b1 + FIRST_WINDOW` fetched ahead at once (`window` FIRST_WINDOW).
//! * `b0` in `start..=next` of a stream (sequential; "a little out of order" included: the
//!   kernel's and the engine's parallel reads arrive so) and `missed` (the reader outran
//!   the read-ahead, or a prefetch failed or was never issued): the window grows [`GROWTH`]
//!   times (at least [`FIRST_WINDOW`], at most [`MAX_WINDOW`]) and `b1..b1 + window` is
//!   fetched ahead; `next = b1 + window`.
//! * sequential, not missed, and `b1 + window >= next` (the reader has entered the last
//!   window asked for): the window grows likewise and `next..next + window` is fetched
//!   ahead; `next` moves to its end. So one to two windows are always ahead of the reader:
//!   reading from the cache is many times faster than a GET, and a reader let into the
//!   last window before the next is asked for catches up with it and waits a GET's latency
//!   at every window.
//! * sequential otherwise: nothing.
//!
//! **Prefetches** ([`Prefetcher`]): a window to fetch ahead is cut into parts of at most
//! [`PART_BLOCKS`] blocks (one GET each, in parallel: one S3 connection's throughput is
//! limited), skipping blocks cached or already in flight, each part on its own thread.
//! A part is *in flight* from the moment it is registered (before its thread starts, so
//! a reader arriving next finds it) until its GET ended; then *done*: its blocks checked
//! against their xxh3 like any GET's, put in the read cache and kept for the readers
//! waiting on it, or *failed*. A reader that needs a block in flight waits for its part
//! instead of asking for it again; a failed part (error, bad checksum, cancelled) is only
//! a miss to its waiters, who GET the blocks themselves with the usual retry and error
//! handling: a prefetch never fails a read. Bytes reach a reader or the cache only after
//! their checksum matched. At most [`MAX_PARTS_IN_FLIGHT`] parts are in flight (memory:
//! that many × [`PART_BLOCKS`] × 64 KiB, 8 MiB); blocks past the bound are not asked for
//! (the reader's miss there re-issues the read-ahead). Deleting a segment
//! ([`Prefetcher::drop_segment`], before the cache drops the segment's blocks) cancels its
//! parts: their waiters fetch themselves, a part not yet started asks the store nothing, and
//! a part that ends later takes its blocks back out of the cache. A part that ends after its
//! device is gone keeps nothing.
//!
//! Tunables: [`FIRST_WINDOW`], [`MAX_WINDOW`] (blocks of segment.rs `BLOCK`, 64 KiB: 256 KiB
//! and 4 MiB), [`GROWTH`] (4: the cap in two steps; a file of a few MiB, one segment when
//! written and fsynced on its own, is read in a few windows), [`STREAMS`], [`PART_BLOCKS`]
//! (1 MiB), [`MAX_PARTS_IN_FLIGHT`].

use crate::cache::ReadCache;
use crate::error::ObjectError;
use crate::segment::{segment_name, SegmentRow, BLOCK};
use crate::store::Store;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// Read-ahead of the first sequential miss, in blocks.
pub const FIRST_WINDOW: u64 = 4;
/// The largest read-ahead window, in blocks: 4 MiB, JuiceFS's block size.
pub const MAX_WINDOW: u64 = 64;
/// How many times a window grows at each step of a stream.
pub const GROWTH: u64 = 4;
/// Sequential streams followed at once.
pub const STREAMS: usize = 16;
/// Blocks of one prefetch GET: 1 MiB, so that a full window is four GETs in parallel.
pub const PART_BLOCKS: u64 = 16;
/// Prefetch GETs in flight at once, over every stream of the device.
pub const MAX_PARTS_IN_FLIGHT: usize = 8;

#[derive(Clone, Copy, Debug)]
struct Stream {
    seg: u64,
    start: u64,
    next: u64,
    window: u64,
    used: u64,
}

/// The streams being followed (module comment).
#[derive(Debug, Default)]
pub struct ReadAhead {
    streams: Vec<Stream>,
    tick: u64,
}

impl ReadAhead {
    /// A read of blocks `b0..b1` of segment `seg` (`missed`: some of them neither cached nor
    /// in flight): the blocks to fetch ahead, if any. The caller may fetch fewer (the
    /// segment ends, blocks are cached or in flight already, the in-flight bound).
    pub fn on_read(&mut self, seg: u64, b0: u64, b1: u64, missed: bool) -> Option<Range<u64>> {
        self.tick += 1;
        let tick = self.tick;
        if let Some(s) = self.streams.iter_mut().find(|s| s.seg == seg && (s.start..=s.next).contains(&b0)) {
            s.start = b0;
            s.used = tick;
            let from = if missed {
                b1
            } else if b1 + s.window >= s.next {
                s.next.max(b1)
            } else {
                return None;
            };
            s.window = (s.window * GROWTH).clamp(FIRST_WINDOW, MAX_WINDOW);
            s.next = from + s.window;
            return Some(from..s.next);
        }
        let at_start = b0 == 0 && b1 > b0;
        let (window, next) = if at_start { (FIRST_WINDOW, b1 + FIRST_WINDOW) } else { (FIRST_WINDOW / 2, b1) };
        let fresh = Stream { seg, start: b0, next, window, used: tick };
        if self.streams.len() < STREAMS {
            self.streams.push(fresh);
        } else if let Some(old) = self.streams.iter_mut().min_by_key(|s| s.used) {
            *old = fresh;
        }
        at_start.then_some(b1..next)
    }

    /// Forget the streams of a deleted segment.
    pub fn drop_segment(&mut self, seg: u64) {
        self.streams.retain(|s| s.seg != seg);
    }
}

/// The checked blocks of a part that came back.
type Blocks = Arc<Vec<Vec<u8>>>;

/// One prefetch GET: blocks `b0..b1` of segment `seg` (module comment).
pub(crate) struct Part {
    seg: u64,
    b0: u64,
    b1: u64,
    /// `None` while in flight; then the checked blocks, or `Some(None)`: failed or cancelled
    done: Mutex<Option<Option<Blocks>>>,
    cv: Condvar,
    cancelled: AtomicBool,
}

impl Part {
    /// Wait for the GET; block `b` of the segment if it came back checked.
    pub(crate) fn wait_block(&self, b: u64) -> Option<Vec<u8>> {
        let mut d = self.done.lock();
        while d.is_none() {
            self.cv.wait(&mut d);
        }
        let blocks = d.as_ref().and_then(|r| r.clone())?;
        blocks.get((b - self.b0) as usize).cloned()
    }

    fn finish(&self, r: Option<Blocks>) {
        *self.done.lock() = Some(r);
        self.cv.notify_all();
    }
}

#[derive(Default)]
struct InFlight {
    by_block: HashMap<(u64, u64), Arc<Part>>,
    parts: usize,
}

/// GETs of segment blocks, checked, for the readers (their own, waiting) and the
/// read-ahead (in the background); shared with the prefetch threads.
pub(crate) struct Prefetcher {
    pub(crate) store: Arc<Store>,
    pub(crate) cache: Arc<ReadCache>,
    name: String,
    pub(crate) gets: AtomicU64,
    pub(crate) get_bytes: AtomicU64,
    /// prefetch GETs issued, and blocks readers got from one in flight
    pub(crate) prefetches: AtomicU64,
    pub(crate) waited: AtomicU64,
    inflight: Mutex<InFlight>,
    /// the device is gone: parts not yet started do nothing
    closed: AtomicBool,
    /// tests: every prefetch fails as a GET would
    fail: AtomicBool,
    /// tests: prefetch threads wait before their GET while this is set
    hold: Mutex<bool>,
    released: Condvar,
}

impl Prefetcher {
    pub(crate) fn new(store: Arc<Store>, cache: Arc<ReadCache>, name: String) -> Prefetcher {
        Prefetcher {
            store,
            cache,
            name,
            gets: AtomicU64::new(0),
            get_bytes: AtomicU64::new(0),
            prefetches: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            inflight: Mutex::new(InFlight::default()),
            closed: AtomicBool::new(false),
            fail: AtomicBool::new(false),
            hold: Mutex::new(false),
            released: Condvar::new(),
        }
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Relaxed);
    }

    pub(crate) fn set_fail(&self, fail: bool) {
        self.fail.store(fail, Relaxed);
    }

    /// Tests: hold every prefetch before its GET (true) until released (false).
    pub(crate) fn set_hold(&self, hold: bool) {
        *self.hold.lock() = hold;
        self.released.notify_all();
    }

    fn wait_while_held(&self) {
        let mut h = self.hold.lock();
        while *h {
            self.released.wait(&mut h);
        }
    }

    /// The part in flight that covers block `b` of `seg`, if any.
    pub(crate) fn in_flight(&self, seg: u64, b: u64) -> Option<Arc<Part>> {
        self.inflight.lock().by_block.get(&(seg, b)).cloned()
    }

    /// Fetch `range` of `seg` (whose row is `row`) ahead, in the background: the blocks
    /// not cached and not in flight, in parts, within the in-flight bound.
    pub(crate) fn issue(self: &Arc<Self>, seg: u64, row: &Arc<SegmentRow>, range: Range<u64>) {
        let n = row.checksums.len() as u64;
        let (mut b, end) = (range.start.min(n), range.end.min(n));
        let mut parts = Vec::new();
        {
            let mut ix = self.inflight.lock();
            let free = |ix: &InFlight, b: u64| !ix.by_block.contains_key(&(seg, b)) && !self.cache.contains(seg, b);
            while b < end && ix.parts < MAX_PARTS_IN_FLIGHT {
                if !free(&ix, b) {
                    b += 1;
                    continue;
                }
                let mut e = b + 1;
                while e < end && e - b < PART_BLOCKS && free(&ix, e) {
                    e += 1;
                }
                let part = Arc::new(Part {
                    seg,
                    b0: b,
                    b1: e,
                    done: Mutex::new(None),
                    cv: Condvar::new(),
                    cancelled: AtomicBool::new(false),
                });
                for k in b..e {
                    ix.by_block.insert((seg, k), part.clone());
                }
                ix.parts += 1;
                parts.push(part);
                b = e;
            }
        }
        for part in parts {
            self.prefetches.fetch_add(1, Relaxed);
            let (this, row, p) = (self.clone(), row.clone(), part.clone());
            let spawned = std::thread::Builder::new().name("squeezefs-s3-ahead".into()).spawn(move || {
                this.wait_while_held();
                // a part cancelled before it started (its segment was deleted) asks nothing
                let r = if this.closed.load(Relaxed) || p.cancelled.load(Relaxed) {
                    None
                } else if this.fail.load(Relaxed) {
                    log::debug!("{}: segment {}: prefetch failed (injected)", this.name, p.seg);
                    None
                } else {
                    this.get_checked(p.seg, &row, p.b0, p.b1)
                        .map_err(|e| log::debug!("{}: prefetch of segment {}: {e}", this.name, p.seg))
                        .ok()
                };
                this.complete(&p, r);
            });
            if let Err(e) = spawned {
                log::debug!("{}: cannot start a prefetch thread ({e})", self.name);
                self.complete(&part, None);
            }
        }
    }

    /// A part's GET ended (`r`: its checked blocks, already in the cache).
    fn complete(&self, part: &Arc<Part>, r: Option<Vec<Vec<u8>>>) {
        let cancelled = {
            let mut ix = self.inflight.lock();
            for k in part.b0..part.b1 {
                if ix.by_block.get(&(part.seg, k)).is_some_and(|p| Arc::ptr_eq(p, part)) {
                    ix.by_block.remove(&(part.seg, k));
                }
            }
            ix.parts -= 1;
            part.cancelled.load(Relaxed)
        };
        if cancelled {
            // the segment's blocks may have left the cache before these went in
            if r.is_some() {
                for k in part.b0..part.b1 {
                    self.cache.remove(part.seg, k);
                }
            }
            part.finish(None);
        } else {
            part.finish(r.map(Arc::new));
        }
    }

    /// Cancel the parts of segment `seg` (its object is being deleted). Called before the
    /// cache drops the segment's blocks (module comment).
    pub(crate) fn drop_segment(&self, seg: u64) {
        let mut ix = self.inflight.lock();
        ix.by_block.retain(|k, p| {
            if k.0 == seg {
                p.cancelled.store(true, Relaxed);
            }
            k.0 != seg
        });
    }

    /// Blocks `b0..b1` of segment `seg` from the store, each checked against its xxh3 (one
    /// retry of a damaged GET), and kept in the read cache.
    pub(crate) fn get_checked(
        &self,
        seg: u64,
        row: &SegmentRow,
        b0: u64,
        b1: u64,
    ) -> Result<Vec<Vec<u8>>, ObjectError> {
        let name = segment_name(seg);
        let range = b0 * BLOCK..(b1 * BLOCK).min(row.size);
        let mut tries = 0;
        loop {
            self.gets.fetch_add(1, Relaxed);
            // a range covering the whole object is a plain GET: some servers answer it with
            // the whole object (200) rather than a partial one (206)
            let bytes = if range.start == 0 && range.end == row.size {
                self.store.get(&name)?.ok_or_else(|| ObjectError::Corrupt {
                    spec: self.name.clone(),
                    key: self.store.spec().key(&name),
                    detail: "the object is missing".into(),
                })?
            } else {
                self.store.get_range(&name, range.clone())?
            };
            self.get_bytes.fetch_add(bytes.len() as u64, Relaxed);
            let mut out = Vec::new();
            let mut bad = None;
            if bytes.len() as u64 != range.end - range.start {
                bad = Some(format!("a GET of bytes {range:?} returned {} bytes", bytes.len()));
            } else {
                for (k, b) in (b0..b1).enumerate() {
                    let s = k * BLOCK as usize;
                    let chunk = &bytes[s..s + row.block_len(b) as usize];
                    if xxh3_64(chunk) != row.checksums[b as usize] {
                        bad = Some(format!("block {b} does not match its checksum"));
                        break;
                    }
                    out.push(chunk.to_vec());
                }
            }
            match bad {
                None => {
                    for (k, data) in out.iter().enumerate() {
                        self.cache.put(seg, b0 + k as u64, data);
                    }
                    return Ok(out);
                }
                Some(detail) if tries > 0 => {
                    return Err(ObjectError::Corrupt {
                        spec: self.name.clone(),
                        key: self.store.spec().key(&name),
                        detail,
                    })
                }
                Some(detail) => {
                    log::warn!("{}: {name}: {detail}; reading it again", self.name);
                    tries += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads of `n` blocks each, in order from `at`, all hits unless in `misses`: what each
    /// read fetched ahead.
    fn run(ra: &mut ReadAhead, seg: u64, mut at: u64, n: u64, reads: usize, misses: &[u64]) -> Vec<Option<Range<u64>>> {
        let mut out = Vec::new();
        for _ in 0..reads {
            out.push(ra.on_read(seg, at, at + n, misses.contains(&at)));
            at += n;
        }
        out
    }

    #[test]
    fn a_sequential_reader_gets_windows_ahead_that_grow_to_the_cap() {
        let mut ra = ReadAhead::default();
        // a read of a segment's first block: the first window at once
        assert_eq!(ra.on_read(7, 0, 2, true), Some(2..6));
        // then hits: each window is asked for as the reader enters the one before, and
        // grows fourfold to the cap
        let got = run(&mut ra, 7, 2, 2, 60, &[]);
        let issued: Vec<(u64, Range<u64>)> =
            got.into_iter().enumerate().filter_map(|(k, r)| r.map(|r| (2 + 2 * k as u64, r))).collect();
        assert_eq!(
            issued,
            [(2, 6..22), (4, 22..86), (20, 86..150), (84, 150..214)],
            "(block read, blocks fetched ahead)"
        );
        // the window stays at the cap, one to two windows ahead
        assert_eq!(ra.on_read(7, 160, 162, false), Some(214..278));
        assert_eq!(ra.on_read(7, 162, 164, false), None);
    }

    #[test]
    fn a_first_read_elsewhere_than_block_0_fetches_nothing_ahead() {
        let mut ra = ReadAhead::default();
        assert_eq!(ra.on_read(7, 1, 3, true), None);
        assert_eq!(ra.on_read(8, 0, 0, true), None, "an empty read is no start");
        // its second read misses: the first window, past it
        assert_eq!(ra.on_read(7, 3, 5, true), Some(5..13));
    }

    #[test]
    fn a_miss_inside_a_stream_restarts_the_read_ahead_at_the_reader() {
        let mut ra = ReadAhead::default();
        ra.on_read(1, 10, 12, true);
        assert_eq!(ra.on_read(1, 12, 14, true), Some(14..22));
        assert_eq!(ra.on_read(1, 14, 16, false), Some(22..54));
        // the prefetch of 22..54 failed: the reader misses at 22, and the next window starts
        // past its read (the caller skips what is cached or in flight)
        assert_eq!(ra.on_read(1, 22, 24, true), Some(24..88));
        assert_eq!(ra.on_read(1, 24, 26, false), Some(88..152));
        assert_eq!(ra.on_read(1, 26, 28, false), None);
    }

    #[test]
    fn random_reads_fetch_nothing_ahead() {
        let mut ra = ReadAhead::default();
        for (k, b) in [90u64, 3, 400, 17, 250, 61, 5, 333].into_iter().enumerate() {
            assert_eq!(ra.on_read(k as u64 % 2, b, b + 1, true), None, "read at {b}");
            assert_eq!(ra.on_read(k as u64 % 2, b + 40, b + 41, false), None, "hit at {}", b + 40);
        }
    }

    #[test]
    fn a_request_a_little_out_of_order_stays_in_its_stream() {
        let mut ra = ReadAhead::default();
        ra.on_read(1, 10, 12, true);
        assert_eq!(ra.on_read(1, 12, 14, true), Some(14..22));
        // a parallel request for 17 arrives before the one for 14: still the stream, and
        // it has entered the last window
        assert_eq!(ra.on_read(1, 17, 18, false), Some(22..54));
        assert_eq!(ra.on_read(1, 14, 16, false), None);
        assert_eq!(ra.on_read(2, 17, 18, true), None, "another segment is another stream");
    }

    #[test]
    fn streams_are_bounded_and_the_least_recent_goes() {
        let mut ra = ReadAhead::default();
        for seg in 0..STREAMS as u64 + 1 {
            ra.on_read(seg, 0, 1, true);
        }
        assert_eq!(ra.streams.len(), STREAMS);
        assert_eq!(ra.on_read(0, 1, 2, true), None, "stream 0 was the least recently used");
        assert_eq!(ra.on_read(STREAMS as u64, 1, 2, true), Some(2..18));
        ra.drop_segment(STREAMS as u64);
        assert_eq!(ra.on_read(STREAMS as u64, 6, 7, true), None);
    }
}
