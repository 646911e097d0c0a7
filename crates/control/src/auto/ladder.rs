//! The auto ladder's geometry: candidate codecs between `auto:MIN..MAX`, the points they make
//! in (CPU per byte, stored per byte) space, and the lower convex hull that keeps only the
//! rungs worth using.
//!
//! Why a convex hull and not just the Pareto front: the controller mixes neighbouring rungs
//! (a fraction of records at the stronger one). A mix of two rungs lies on the straight line
//! between their points, because both CPU and stored bytes add up per record. A rung above
//! that line — even one that is Pareto-optimal by itself — is beaten by a mix of its two
//! neighbours in both speed and size, so it drops out. On the hull every step is faster *and*
//! weaker than the next and mixing neighbours is never worse than mixing distant rungs (the
//! thesis's eq. 7.1: lz4 and gzip-6 half and half lost to gzip-1 in both speed and ratio,
//! because gzip-1 lies below their line).

use squeezefs_codec::nominal::nominal;
use squeezefs_codec::{Algorithm, Codec};

/// The codecs auto may use, fastest first (nominally). zlib and lz4hc are in the list so that
/// data on which they beat zstd can find them; on typical data they are measured once and
/// drop out. lzo is not (slower and weaker than lz4 on everything squeezefs was measured on).
pub const CANDIDATES: &[Codec] = &[
    lz4(64),
    lz4(32),
    lz4(16),
    lz4(8),
    lz4(4),
    lz4(2),
    lz4(1),
    zstd(-20),
    zstd(-10),
    zstd(-5),
    zstd(-3),
    zstd(-2),
    zstd(-1),
    lz4hc(1),
    zstd(1),
    zstd(2),
    zstd(3),
    zstd(4),
    deflate(1),
    zstd(5),
    deflate(3),
    zstd(6),
    zstd(7),
    deflate(6),
    lz4hc(9),
    zstd(8),
    zstd(9),
    zstd(10),
    deflate(9),
    zstd(11),
    zstd(12),
    zstd(13),
    zstd(14),
    zstd(15),
    zstd(16),
    zstd(17),
    zstd(18),
    zstd(19),
];

const fn lz4(a: i32) -> Codec {
    Codec { alg: Algorithm::Lz4, level: a }
}
const fn zstd(l: i32) -> Codec {
    Codec { alg: Algorithm::Zstd, level: l }
}
const fn deflate(l: i32) -> Codec {
    Codec { alg: Algorithm::Deflate, level: l }
}
const fn lz4hc(l: i32) -> Codec {
    Codec { alg: Algorithm::Lz4Hc, level: l }
}

/// A codec's figures: CPU nanoseconds per input byte and stored bytes per input byte.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub cost: f64,
    pub stored: f64,
}

impl Point {
    pub const RAW: Point = Point { cost: 0.0, stored: 1.0 };

    /// The nominal point of a codec (before it is measured).
    pub fn nominal(codec: Codec) -> Point {
        let n = nominal(codec);
        Point { cost: n.ns_per_byte(), stored: 1.0 / n.ratio }
    }
}

/// Candidates between `min` and `max` by nominal speed (both included even when not in
/// [`CANDIDATES`]), fastest first.
pub fn candidates(min: Codec, max: Codec) -> Vec<Codec> {
    let (fast, slow) = (nominal(min).compress_mb_s, nominal(max).compress_mb_s);
    let mut v: Vec<Codec> = CANDIDATES
        .iter()
        .copied()
        .filter(|c| {
            let s = nominal(*c).compress_mb_s;
            s <= fast && s >= slow
        })
        .collect();
    for c in [min, max] {
        if c.alg != Algorithm::None && !v.contains(&c) {
            v.push(c);
        }
    }
    v.sort_by(|a, b| nominal(*b).compress_mb_s.total_cmp(&nominal(*a).compress_mb_s));
    v
}

/// Indices into `points` of the lower convex hull from the cheapest point to the one storing
/// least, ordered by cost: cost strictly rising, stored strictly falling, and every point
/// strictly below the line between its neighbours. Ties in cost keep the point storing less
/// (then the earlier one).
pub fn lower_hull(points: &[Point]) -> Vec<usize> {
    let mut order: Vec<usize> =
        (0..points.len()).filter(|&i| points[i].cost.is_finite() && points[i].stored.is_finite()).collect();
    order.sort_by(|&a, &b| {
        points[a].cost.total_cmp(&points[b].cost).then(points[a].stored.total_cmp(&points[b].stored)).then(a.cmp(&b))
    });
    let mut hull: Vec<usize> = Vec::with_capacity(order.len());
    for i in order {
        let p = points[i];
        if let Some(&last) = hull.last() {
            if points[last].cost == p.cost {
                continue; // same cost, stores no less
            }
        }
        while hull.len() >= 2 {
            let (a, b) = (points[hull[hull.len() - 2]], points[hull[hull.len() - 1]]);
            let cross = (b.cost - a.cost) * (p.stored - a.stored) - (b.stored - a.stored) * (p.cost - a.cost);
            if cross <= 0.0 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(i);
    }
    // past the point storing least the hull rises again: those cost more and store more
    if let Some(best) =
        (0..hull.len()).min_by(|&a, &b| points[hull[a]].stored.total_cmp(&points[hull[b]].stored).then(a.cmp(&b)))
    {
        hull.truncate(best + 1);
    }
    hull
}

/// A mix of two neighbouring rungs: `frac` of the records at `hi`, the rest at `lo`
/// (`Codec::NONE` = store raw; `hi == lo` at the top of the ladder).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    pub lo: Codec,
    pub hi: Codec,
    pub frac: f64,
}

impl Mix {
    pub const RAW: Mix = Mix { lo: Codec::NONE, hi: Codec::NONE, frac: 0.0 };

    /// The level of the next record, spreading `frac` evenly over records (error diffusion
    /// through `acc`, which the caller keeps between records).
    pub fn pick(&self, acc: &mut f64) -> Codec {
        *acc += self.frac.clamp(0.0, 1.0);
        if *acc >= 1.0 {
            *acc -= 1.0;
            self.hi
        } else {
            self.lo
        }
    }
}

/// Where cost `c` falls on a ladder (points sorted by rising cost): the rung at or below it
/// and the fraction of the way to the next one.
pub fn locate(costs: &[f64], c: f64) -> (usize, f64) {
    debug_assert!(!costs.is_empty());
    let k = costs.iter().rposition(|&x| x <= c).unwrap_or(0);
    match costs.get(k + 1) {
        Some(&next) if next > costs[k] => (k, ((c - costs[k]) / (next - costs[k])).clamp(0.0, 1.0)),
        _ => (k, 0.0),
    }
}

/// The strongest mix on `hull` (points ordered by rising cost, as [`lower_hull`] returns them)
/// whose compression throughput on `cores` cores, with `overhead_ns` of other pipeline CPU per
/// byte, is at least `rate_bps` input bytes per second: cost per byte ≤ cores / rate −
/// overhead. The QoS level choice (docs/design.md §9); raw when even storing raw cannot keep up.
pub fn strongest_for_rate(hull: &[(Codec, Point)], cores: f64, overhead_ns: f64, rate_bps: f64) -> Mix {
    let positive = |x: f64| x > 0.0 && x.is_finite();
    if hull.is_empty() || !positive(cores) || !positive(rate_bps) {
        return Mix::RAW;
    }
    let budget = cores * 1e9 / rate_bps - overhead_ns.max(0.0);
    let costs: Vec<f64> = hull.iter().map(|(_, p)| p.cost).collect();
    if budget < costs[0] {
        return Mix { lo: hull[0].0, hi: hull[0].0, frac: 0.0 };
    }
    let (k, f) = locate(&costs, budget);
    let hi = hull.get(k + 1).map_or(hull[k].0, |h| h.0);
    Mix { lo: hull[k].0, hi, frac: f }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(cost: f64, stored: f64) -> Point {
        Point { cost, stored }
    }

    #[test]
    fn candidates_are_bounded_by_nominal_speed() {
        let all = candidates(Codec { alg: Algorithm::Lz4, level: 64 }, zstd(19));
        assert_eq!(all.len(), CANDIDATES.len());
        for w in all.windows(2) {
            assert!(nominal(w[0]).compress_mb_s >= nominal(w[1]).compress_mb_s, "{} {}", w[0], w[1]);
        }
        let z = candidates(zstd(1), zstd(15));
        assert_eq!(z.first(), Some(&zstd(1)));
        assert_eq!(z.last(), Some(&zstd(15)));
        assert!(z.iter().all(|c| c.alg != Algorithm::Lz4), "{z:?}");
        assert!(z.contains(&deflate(6)), "other families inside the range are candidates");
        // bounds that are not candidates themselves are added
        let odd = candidates(lz4(20), zstd(7));
        assert_eq!(odd[0], lz4(20));
        assert!(odd.contains(&lz4(8)) && !odd.contains(&lz4(32)) && !odd.contains(&zstd(8)));
        assert_eq!(candidates(zstd(3), zstd(3)), vec![zstd(3)]);
    }

    #[test]
    fn hull_keeps_the_convex_pareto_front() {
        let pts = [
            Point::RAW,
            p(1.5, 0.40),  // lz4
            p(1.9, 0.41),  // zstd -5: slower and weaker than lz4 → out
            p(2.8, 0.268), // zstd 1
            p(2.5, 0.35),  // above the lz4–zstd:1 line → out
            p(3.9, 0.254), // zstd 3
            p(8.3, 0.30),  // zlib 1: dominated → out
            p(17.5, 0.237),
            p(17.5, 0.236),  // same cost, stores less: this one stays
            p(150.0, 0.236), // no gain for more CPU → out
        ];
        let h = lower_hull(&pts);
        assert_eq!(h, vec![0, 1, 3, 5, 8]);
        for w in h.windows(2) {
            assert!(pts[w[0]].cost < pts[w[1]].cost && pts[w[0]].stored > pts[w[1]].stored);
        }
        // thesis eq. 7.1: lz4 (452 MB/s, 2.1) and gzip-6 (20 MB/s, 3.1) around gzip-1 (66 MB/s,
        // 2.74): gzip-1 stays, and a half/half mix of the outer two is slower and bigger
        let t = |mbs: f64, r: f64| p(1000.0 / mbs, 1.0 / r);
        let th = [Point::RAW, t(452.0, 2.1), t(66.0, 2.74), t(20.0, 3.1)];
        assert_eq!(lower_hull(&th), vec![0, 1, 2, 3]);
        let mix = p((th[1].cost + th[3].cost) / 2.0, (th[1].stored + th[3].stored) / 2.0);
        assert!(mix.cost > th[2].cost && mix.stored > th[2].stored);
        // nothing but raw, or nothing at all
        assert_eq!(lower_hull(&[Point::RAW, p(1.0, 1.0)]), vec![0]);
        assert!(lower_hull(&[]).is_empty());
    }

    #[test]
    fn locate_and_pick_spread_a_fraction_over_records() {
        let costs = [0.0, 1.0, 3.0];
        assert_eq!(locate(&costs, 0.0), (0, 0.0));
        assert_eq!(locate(&costs, 0.5), (0, 0.5));
        assert_eq!(locate(&costs, 2.5), (1, 0.75));
        assert_eq!(locate(&costs, 9.0), (2, 0.0));
        let m = Mix { lo: zstd(1), hi: zstd(3), frac: 0.25 };
        let mut acc = 0.0;
        let picks: Vec<Codec> = (0..8).map(|_| m.pick(&mut acc)).collect();
        assert_eq!(picks.iter().filter(|c| **c == zstd(3)).count(), 2);
        assert_eq!(picks[3], zstd(3), "spread evenly, not bunched");
    }

    #[test]
    fn strongest_mix_for_a_rate() {
        // raw, lz4 at 1.5 ns/B, zstd:1 at 2.8, zstd:3 at 3.9
        let hull = [(Codec::NONE, Point::RAW), (lz4(1), p(1.5, 0.4)), (zstd(1), p(2.8, 0.27)), (zstd(3), p(3.9, 0.25))];
        // 2 cores, 0.5 ns/B overhead: 50 MB/s leaves 40 - 0.5 ns/B: the top
        assert_eq!(strongest_for_rate(&hull, 2.0, 0.5, 50e6), Mix { lo: zstd(3), hi: zstd(3), frac: 0.0 });
        // 600 MB/s on 2 cores: 3.333 - 0.5 = 2.833 ns/B → between zstd:1 and zstd:3
        let m = strongest_for_rate(&hull, 2.0, 0.5, 600e6);
        assert_eq!((m.lo, m.hi), (zstd(1), zstd(3)));
        assert!((m.frac - (2.8333333 - 2.8) / 1.1).abs() < 1e-6, "{m:?}");
        // the mix's throughput meets the rate exactly
        let cost = (1.0 - m.frac) * 2.8 + m.frac * 3.9;
        assert!((2.0e9 / (0.5 + cost) - 600e6).abs() < 1e3);
        // 1 core at 1.2 GB/s: 0.833 - 0.5 = 0.333 ns/B → mostly raw, some lz4
        let m = strongest_for_rate(&hull, 1.0, 0.5, 1.2e9);
        assert_eq!((m.lo, m.hi), (Codec::NONE, lz4(1)));
        assert!((m.frac - 0.3333333 / 1.5).abs() < 1e-6);
        // beyond what even raw can do: raw
        assert_eq!(strongest_for_rate(&hull, 1.0, 0.5, 5e9), Mix { lo: Codec::NONE, hi: Codec::NONE, frac: 0.0 });
        assert_eq!(strongest_for_rate(&[], 1.0, 0.5, 5e6), Mix::RAW);
        assert_eq!(strongest_for_rate(&hull, 0.0, 0.5, 5e6), Mix::RAW);
    }
}
