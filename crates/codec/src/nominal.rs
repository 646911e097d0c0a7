//! Nominal figures per codec: typical single-core compression speed and ratio on text-like
//! data in 128 KiB blocks. They order codecs from fast/weak to slow/strong (the `auto:MIN..MAX`
//! bounds are compared with them) and are the adaptive controller's prior before it has
//! measured a codec on the data actually written. They are never used where a measurement
//! exists.
//!
//! Anchors are the figures of docs/design.md §14 (lz4 --fast=17, lz4, zstd --fast=5, zstd 1/3/9/15
//! on the Silesia subset); the other levels are interpolated between them, following the
//! shape `squeezefs bench` shows on the corpus (ratios of neighbouring levels, the lz4
//! acceleration and zstd negative-level curves). deflate is libdeflate's, lz4hc liblz4's.
//!
//! Invariants (tested): within one algorithm, speed falls and ratio rises from the fastest
//! setting to the strongest (lz4: falling acceleration; zstd: from -131072 through -1 to 22).

use crate::algorithm::Algorithm;
use crate::codec::Codec;

/// Typical figures of one codec (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Nominal {
    /// MB/s of input per core (10^6 bytes per CPU-second)
    pub compress_mb_s: f64,
    /// input bytes / stored bytes
    pub ratio: f64,
}

impl Nominal {
    /// CPU nanoseconds per input byte (0 for `none`).
    pub fn ns_per_byte(&self) -> f64 {
        if self.compress_mb_s.is_infinite() {
            0.0
        } else {
            1000.0 / self.compress_mb_s
        }
    }
}

/// zstd levels 1..=22: MB/s and ratio (docs/design.md §14 at 1, 3, 9, 15).
const ZSTD_POSITIVE: [(f64, f64); 22] = [
    (358.0, 3.73),
    (300.0, 3.84),
    (255.0, 3.93),
    (235.0, 3.96),
    (140.0, 4.02),
    (110.0, 4.08),
    (90.0, 4.13),
    (72.0, 4.18),
    (57.0, 4.22),
    (45.0, 4.25),
    (33.0, 4.27),
    (28.0, 4.29),
    (12.0, 4.36),
    (9.0, 4.40),
    (6.6, 4.44),
    (5.0, 4.47),
    (4.0, 4.50),
    (3.0, 4.52),
    (2.4, 4.55),
    (2.0, 4.58),
    (1.7, 4.60),
    (1.4, 4.62),
];

/// libdeflate levels 1..=12.
const DEFLATE: [(f64, f64); 12] = [
    (120.0, 3.30),
    (105.0, 3.40),
    (90.0, 3.50),
    (75.0, 3.55),
    (60.0, 3.60),
    (40.0, 3.65),
    (30.0, 3.67),
    (22.0, 3.69),
    (20.0, 3.70),
    (8.0, 3.75),
    (6.0, 3.78),
    (4.0, 3.80),
];

/// lz4hc levels 1..=12.
const LZ4HC: [(f64, f64); 12] = [
    (200.0, 2.90),
    (150.0, 3.00),
    (100.0, 3.10),
    (70.0, 3.20),
    (55.0, 3.25),
    (45.0, 3.30),
    (40.0, 3.32),
    (37.0, 3.34),
    (35.0, 3.35),
    (20.0, 3.37),
    (15.0, 3.38),
    (10.0, 3.40),
];

fn row(table: &[(f64, f64)], level: i32) -> Nominal {
    let i = (level.max(1) as usize - 1).min(table.len() - 1);
    Nominal { compress_mb_s: table[i].0, ratio: table[i].1 }
}

/// The nominal figures of `codec` (any level its algorithm accepts; out-of-range levels are
/// clamped to the nearest row).
pub fn nominal(codec: Codec) -> Nominal {
    match codec.alg {
        Algorithm::None => Nominal { compress_mb_s: f64::INFINITY, ratio: 1.0 },
        // lz4: 665 MB/s and 2.55 at acceleration 1, 1118 MB/s and 1.92 at 17 (docs/design.md §14); speed grows
        // linearly with the acceleration, the gain (ratio - 1) shrinks exponentially
        Algorithm::Lz4 => {
            let a = codec.level.max(1) as f64 - 1.0;
            Nominal { compress_mb_s: 665.0 * (1.0 + 0.0426 * a), ratio: 1.0 + 1.55 * (-0.0297 * a).exp() }
        }
        // zstd negative levels: 520 MB/s and 2.46 at -5 (docs/design.md §14), 430 MB/s and 3.2 at
        // -1 (placed between -5 and level 1)
        Algorithm::Zstd if codec.level < 0 => {
            let n = (-(codec.level as f64)) - 1.0;
            Nominal { compress_mb_s: 430.0 * (1.0 + 0.0523 * n), ratio: 1.0 + 2.2 * (-0.1025 * n).exp() }
        }
        Algorithm::Zstd => row(&ZSTD_POSITIVE, codec.level),
        Algorithm::Deflate => row(&DEFLATE, codec.level),
        Algorithm::Lz4Hc => row(&LZ4HC, codec.level),
        Algorithm::Lzo => Nominal { compress_mb_s: 600.0, ratio: 2.4 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_design_s_figures() {
        let f = |alg, level| nominal(Codec { alg, level });
        assert_eq!(f(Algorithm::Zstd, 1).compress_mb_s, 358.0);
        assert_eq!(f(Algorithm::Zstd, 9).ratio, 4.22);
        assert!((f(Algorithm::Lz4, 1).compress_mb_s - 665.0).abs() < 1e-9);
        assert!((f(Algorithm::Lz4, 17).compress_mb_s - 1118.0).abs() < 10.0);
        assert!((f(Algorithm::Lz4, 17).ratio - 1.92).abs() < 0.05);
        assert!((f(Algorithm::Zstd, -5).compress_mb_s - 520.0).abs() < 1.0);
        assert!((f(Algorithm::Zstd, -5).ratio - 2.46).abs() < 0.02);
        assert_eq!(f(Algorithm::None, 0).ns_per_byte(), 0.0);
    }

    #[test]
    fn within_an_algorithm_slower_means_stronger() {
        let check = |levels: Vec<Codec>| {
            for w in levels.windows(2) {
                let (a, b) = (nominal(w[0]), nominal(w[1]));
                assert!(a.compress_mb_s > b.compress_mb_s, "{} vs {}", w[0], w[1]);
                assert!(a.ratio < b.ratio, "{} vs {}", w[0], w[1]);
            }
        };
        check((1..=1000).rev().map(|a| Codec { alg: Algorithm::Lz4, level: a }).collect());
        check((-200..=22).filter(|l| *l != 0).map(|l| Codec { alg: Algorithm::Zstd, level: l }).collect());
        check((1..=12).map(|l| Codec { alg: Algorithm::Deflate, level: l }).collect());
        check((1..=12).map(|l| Codec { alg: Algorithm::Lz4Hc, level: l }).collect());
    }
}
