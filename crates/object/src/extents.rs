//! The translation of device ranges to segment bytes: an interval map from device offset
//! to `(len, segment, offset in segment)`, extents never overlapping. A write or a discard
//! trims, splits or removes the extents it covers and returns the changes it made as
//! [`Op`]s, which the map store replays in the same order (map.rs): the in-memory map is
//! always the durable map with the pending ops applied.

use std::collections::BTreeMap;

/// Where the bytes of one device range live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    pub seg: u64,
    pub seg_off: u64,
}

/// One change to the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Insert { dev_off: u64, ext: Extent },
    Remove { dev_off: u64, ext: Extent },
}

/// A piece of a read: `len` bytes at `dev_off`, either held by a segment or never written
/// (or discarded), which reads as zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    Mapped { dev_off: u64, seg: u64, seg_off: u64, len: u64 },
    Hole { dev_off: u64, len: u64 },
}

#[derive(Default, Debug, Clone)]
pub struct Extents {
    map: BTreeMap<u64, Extent>,
}

impl Extents {
    /// Apply an op without producing further ops (loading, replaying).
    pub fn apply(&mut self, op: &Op) {
        match *op {
            Op::Insert { dev_off, ext } => {
                self.map.insert(dev_off, ext);
            }
            Op::Remove { dev_off, .. } => {
                self.map.remove(&dev_off);
            }
        }
    }

    /// `[off, off+len)` now holds nothing: the extents over it are trimmed or removed.
    /// Returns the ops, appended to `ops`.
    pub fn punch(&mut self, off: u64, len: u64, ops: &mut Vec<Op>) {
        if len == 0 {
            return;
        }
        let end = off + len;
        // the extent starting before `off` that reaches into the range, then those starting inside
        let first = self.map.range(..off).next_back().map(|(&k, &e)| (k, e)).filter(|(k, e)| k + e.len > off);
        let inside: Vec<(u64, Extent)> = self.map.range(off..end).map(|(&k, &e)| (k, e)).collect();
        for (k, e) in first.into_iter().chain(inside) {
            let e_end = k + e.len;
            self.map.remove(&k);
            ops.push(Op::Remove { dev_off: k, ext: e });
            if k < off {
                let head = Extent { len: off - k, ..e };
                self.map.insert(k, head);
                ops.push(Op::Insert { dev_off: k, ext: head });
            }
            if e_end > end {
                let tail = Extent { len: e_end - end, seg: e.seg, seg_off: e.seg_off + (end - k) };
                self.map.insert(end, tail);
                ops.push(Op::Insert { dev_off: end, ext: tail });
            }
        }
    }

    /// `[off, off+ext.len)` now lives at `ext`.
    pub fn write(&mut self, off: u64, ext: Extent, ops: &mut Vec<Op>) {
        if ext.len == 0 {
            return;
        }
        self.punch(off, ext.len, ops);
        self.map.insert(off, ext);
        ops.push(Op::Insert { dev_off: off, ext });
    }

    /// The pieces that make up `[off, off+len)`, in order, holes included.
    pub fn lookup(&self, off: u64, len: u64) -> Vec<Piece> {
        let end = off + len;
        let mut out = Vec::new();
        let mut at = off;
        let first = self.map.range(..off).next_back().map(|(&k, &e)| (k, e)).filter(|(k, e)| k + e.len > off);
        for (k, e) in first.into_iter().chain(self.map.range(off..end).map(|(&k, &e)| (k, e))) {
            let s = k.max(off);
            let t = (k + e.len).min(end);
            if s > at {
                out.push(Piece::Hole { dev_off: at, len: s - at });
            }
            out.push(Piece::Mapped { dev_off: s, seg: e.seg, seg_off: e.seg_off + (s - k), len: t - s });
            at = t;
        }
        if at < end {
            out.push(Piece::Hole { dev_off: at, len: end - at });
        }
        out
    }
}

impl Extents {
    /// Every extent, in device order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Extent)> + '_ {
        self.map.iter().map(|(&k, &e)| (k, e))
    }
}

/// Live bytes per segment changed by `ops`: inserts add, removes subtract.
pub fn live_deltas(ops: &[Op]) -> BTreeMap<u64, i64> {
    let mut d = BTreeMap::new();
    for op in ops {
        let (seg, v) = match op {
            Op::Insert { ext, .. } => (ext.seg, ext.len as i64),
            Op::Remove { ext, .. } => (ext.seg, -(ext.len as i64)),
        };
        *d.entry(seg).or_insert(0) += v;
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(len: u64, seg: u64, seg_off: u64) -> Extent {
        Extent { len, seg, seg_off }
    }

    /// A byte-per-offset model: the (segment, offset in segment) each device byte reads from.
    fn model_of(x: &Extents, upto: u64) -> Vec<Option<(u64, u64)>> {
        let mut m = vec![None; upto as usize];
        for p in x.lookup(0, upto) {
            if let Piece::Mapped { dev_off, seg, seg_off, len } = p {
                for i in 0..len {
                    m[(dev_off + i) as usize] = Some((seg, seg_off + i));
                }
            }
        }
        m
    }

    #[test]
    fn overlapping_writes_split_and_replayed_ops_agree() {
        let mut x = Extents::default();
        let mut ops = Vec::new();
        x.write(10, ext(20, 1, 0), &mut ops);
        x.write(15, ext(5, 2, 100), &mut ops); // splits the first
        x.write(0, ext(12, 3, 0), &mut ops); // trims its head
        x.punch(25, 10, &mut ops); // trims the tail
        let pieces = x.lookup(0, 40);
        assert_eq!(
            pieces,
            vec![
                Piece::Mapped { dev_off: 0, seg: 3, seg_off: 0, len: 12 },
                Piece::Mapped { dev_off: 12, seg: 1, seg_off: 2, len: 3 },
                Piece::Mapped { dev_off: 15, seg: 2, seg_off: 100, len: 5 },
                Piece::Mapped { dev_off: 20, seg: 1, seg_off: 10, len: 5 },
                Piece::Hole { dev_off: 25, len: 15 },
            ]
        );
        let mut replay = Extents::default();
        for op in &ops {
            replay.apply(op);
        }
        assert_eq!(model_of(&replay, 40), model_of(&x, 40));
        let live = live_deltas(&ops);
        assert_eq!(live[&1], 3 + 5);
        assert_eq!(live[&2], 5);
        assert_eq!(live[&3], 12);
    }

    #[test]
    fn random_writes_match_a_byte_model() {
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut x = Extents::default();
        let mut ops = Vec::new();
        let mut model = vec![None; 300];
        let mut seg_off = 0;
        for i in 0..400u64 {
            let off = next(250);
            let len = 1 + next(50);
            if i % 5 == 4 {
                x.punch(off, len, &mut ops);
                for b in off..off + len {
                    model[b as usize] = None;
                }
            } else {
                x.write(off, ext(len, i, seg_off), &mut ops);
                for b in 0..len {
                    model[(off + b) as usize] = Some((i, seg_off + b));
                }
                seg_off += len;
            }
        }
        assert_eq!(model_of(&x, 300), model);
        let mut replay = Extents::default();
        ops.iter().for_each(|o| replay.apply(o));
        assert_eq!(model_of(&replay, 300), model);
        // live bytes per segment equal the bytes the model still maps to it
        let mut live = std::collections::BTreeMap::new();
        for (seg, _) in model.iter().flatten() {
            *live.entry(*seg).or_insert(0i64) += 1;
        }
        let mut d = live_deltas(&ops);
        d.retain(|_, v| *v != 0);
        assert_eq!(d, live);
    }
}
