//! Read-ahead over segment objects: a read that misses the cache right where the last GET
//! of the same segment ended is taken for a sequential stream, and its GET is stretched
//! over the blocks that follow, into the read cache, so a cold sequential read costs one
//! request per window instead of one per record.
//!
//! States per stream (one per segment being read, at most [`STREAMS`], the least recently
//! used replaced): `start..next` the blocks its last GET covered (read-ahead included) and
//! `window` the read-ahead it earned. Transitions, on a miss of blocks `b0..b1`:
//! * `b0` in `start..=next` (the reader reached the end of what was fetched, or a parallel
//!   request of the kernel's read-ahead arrived a little out of order): sequential, the
//!   window doubles up to [`MAX_WINDOW`], and that many blocks past `b1` are fetched too.
//! * anything else: a new stream with no read-ahead (`window` [`FIRST_WINDOW`] / 2, so a
//!   random read costs no extra bytes and the second sequential miss fetches
//!   [`FIRST_WINDOW`] blocks more).
//!
//! Tunables: [`FIRST_WINDOW`], [`MAX_WINDOW`] (in blocks of segment.rs `BLOCK`, 64 KiB:
//! 256 KiB and 4 MiB), [`STREAMS`].

/// Read-ahead of the first sequential miss, in blocks.
pub const FIRST_WINDOW: u64 = 4;
/// The largest read-ahead, in blocks: 4 MiB, JuiceFS's block size.
pub const MAX_WINDOW: u64 = 64;
/// Sequential streams followed at once.
pub const STREAMS: usize = 16;

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
    /// A miss of blocks `b0..b1` of segment `seg`: how many blocks past `b1` to fetch with
    /// it. The caller may fetch fewer (the segment ends, a block is cached already).
    pub fn on_miss(&mut self, seg: u64, b0: u64, b1: u64) -> u64 {
        self.tick += 1;
        let tick = self.tick;
        if let Some(s) = self.streams.iter_mut().find(|s| s.seg == seg && (s.start..=s.next).contains(&b0)) {
            s.window = (s.window * 2).clamp(FIRST_WINDOW, MAX_WINDOW);
            s.start = b0;
            s.next = b1 + s.window;
            s.used = tick;
            return s.window;
        }
        let fresh = Stream { seg, start: b0, next: b1, window: FIRST_WINDOW / 2, used: tick };
        if self.streams.len() < STREAMS {
            self.streams.push(fresh);
        } else if let Some(old) = self.streams.iter_mut().min_by_key(|s| s.used) {
            *old = fresh;
        }
        0
    }

    /// Forget the streams of a deleted segment.
    pub fn drop_segment(&mut self, seg: u64) {
        self.streams.retain(|s| s.seg != seg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_reader_earns_a_window_that_doubles_to_the_cap() {
        let mut ra = ReadAhead::default();
        assert_eq!(ra.on_miss(7, 0, 2), 0, "a first miss fetches only itself");
        let (mut at, mut got) = (2, Vec::new());
        for _ in 0..8 {
            let w = ra.on_miss(7, at, at + 2);
            got.push(w);
            at += 2 + w;
        }
        assert_eq!(got, [4, 8, 16, 32, 64, 64, 64, 64]);
    }

    #[test]
    fn random_misses_fetch_nothing_more() {
        let mut ra = ReadAhead::default();
        for (k, b) in [90u64, 3, 400, 17, 250, 61, 5, 333].into_iter().enumerate() {
            assert_eq!(ra.on_miss(k as u64 % 2, b, b + 1), 0, "miss at {b}");
        }
    }

    #[test]
    fn a_request_a_little_out_of_order_stays_in_its_stream() {
        let mut ra = ReadAhead::default();
        ra.on_miss(1, 10, 12);
        assert_eq!(ra.on_miss(1, 12, 14), 4);
        // the kernel's parallel read-ahead asks for 17 before the reader reaches 18
        assert_eq!(ra.on_miss(1, 17, 18), 8);
        assert_eq!(ra.on_miss(2, 17, 18), 0, "another segment is another stream");
    }

    #[test]
    fn streams_are_bounded_and_the_least_recent_goes() {
        let mut ra = ReadAhead::default();
        for seg in 0..STREAMS as u64 + 1 {
            ra.on_miss(seg, 0, 1);
        }
        assert_eq!(ra.streams.len(), STREAMS);
        assert_eq!(ra.on_miss(0, 1, 2), 0, "stream 0 was the least recently used");
        assert_eq!(ra.on_miss(STREAMS as u64, 1, 2), 4);
        ra.drop_segment(STREAMS as u64);
        assert_eq!(ra.on_miss(STREAMS as u64, 2, 3), 0);
    }
}
