//! btrfs-style compressibility sampler.
//!
//! **Quick look first.** Random-looking records are the ones to reject fast: on them libzstd
//! itself runs at ~6 GB/s (it detects incompressible blocks), so a check worth having must
//! cost a few percent of that, ~1 µs per 128 KiB. A first sample of `QUICK_READS` reads of
//! `READ_SIZE` bytes (1 KiB), half spread over each half of the record at the same offsets
//! (so that the repeated-pattern test still lines up), is tested for the strict
//! "incompressible" rule below only, in its small-sample form: the core set of 1 KiB of
//! uniform bytes is only ~190 (the statistic shrinks with the sample), so the quick look asks
//! for at least `CORE_SET_HIGH` *distinct* byte values instead, and corrects the entropy for
//! the small sample (Miller–Madow: + (distinct − 1) / (2 · n · ln 2) bits). Anything that
//! does not pass goes on to the full look.
//!
//! **Full look.** A record is sampled as `READ_SIZE` bytes every `INTERVAL` bytes (at most
//! `MAX_SAMPLE` bytes: the interval grows for records larger than 128 KiB), and four
//! statistics are taken over the sample, cheapest first; the first conclusive one decides:
//!
//! 1. **repeated pattern** — the first half of the sample equals the second half (e.g. a file
//!    made of one repeated block): compressible.
//! 2. **byte-set size** — fewer than `BYTE_SET_THRESHOLD` distinct byte values (text, tables
//!    of small numbers): compressible.
//! 3. **Shannon entropy** of the sample's byte histogram, in percent of 8 bits/byte: at most
//!    `ENTROPY_ACCEPTABLE` is compressible.
//! 4. **core set** — how many of the most frequent byte values cover `CORE_SET_COVERAGE`
//!    percent of the sample: at most `CORE_SET_LOW` is compressible.
//!
//! A record is declared **incompressible only when** there is no repeated pattern, the byte
//! set is large, the core set is at least `CORE_SET_HIGH` *and* the entropy is at least
//! `ENTROPY_INCOMPRESSIBLE`. btrfs gives up earlier (core set ≥ 200 alone, or entropy ≥ 80%),
//! which also rejects x86 code and packed databases that zstd still shrinks by a third; the
//! extra entropy condition keeps those and still rejects random, encrypted and already
//! compressed data (their sampled entropy is ≥ 99%). Everything in between is left to the
//! codec, whose output buffer is one sector short of the record (early abort).

/// Bytes read at each sampling position (btrfs: `SAMPLING_READ_SIZE`).
pub const READ_SIZE: usize = 16;
/// Reads of the quick look (1 KiB sample); enough that uniform random bytes estimate at
/// ~99.8% entropy after the small-sample correction (σ ≈ 0.3%), far above
/// `ENTROPY_INCOMPRESSIBLE`, while text and code stay below 85%.
pub const QUICK_READS: usize = 64;
/// Distance between sampling positions for records up to 128 KiB (btrfs: `SAMPLING_INTERVAL`).
pub const INTERVAL: usize = 256;
/// Largest sample: 16 bytes every 256 over 128 KiB = 8 KiB (btrfs: `MAX_SAMPLE_SIZE`).
pub const MAX_SAMPLE: usize = 128 * 1024 * READ_SIZE / INTERVAL;
/// Fewer distinct byte values than this → compressible (btrfs: `BYTE_SET_THRESHOLD`).
pub const BYTE_SET_THRESHOLD: u32 = 64;
/// The core set covers this percentage of the sample (btrfs uses 90%).
pub const CORE_SET_COVERAGE: u32 = 90;
/// Core set at most this → compressible (btrfs: `BYTE_CORE_SET_LOW`).
pub const CORE_SET_LOW: u32 = 64;
/// Core set at least this is one condition of "incompressible" (btrfs: `BYTE_CORE_SET_HIGH`).
pub const CORE_SET_HIGH: u32 = 200;
/// Entropy (percent of 8 bits) at most this → compressible (btrfs: `ENTROPY_LVL_ACEPTABLE`).
pub const ENTROPY_ACCEPTABLE: u32 = 65;
/// Entropy at least this is the other condition of "incompressible". Uniform random bytes
/// sample at ~99.7% (an 8 KiB sample under-estimates 8 bits by ~0.02); order-0 coding can
/// save at most 3% of a record above this line, which the early abort would catch anyway.
pub const ENTROPY_INCOMPRESSIBLE: u32 = 97;

/// Why the sampler let a record through (for tests and statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// sample too small to judge (records under `2 * READ_SIZE` bytes)
    TooSmall,
    RepeatedPattern,
    SmallByteSet,
    LowEntropy,
    SmallCoreSet,
    /// no statistic conclusive: let the codec (with early abort) decide
    Undecided,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    Compressible(Reason),
    Incompressible,
}

/// The sample's statistics (all of them, for diagnostics; [`judge`] stops early).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    pub sample_len: usize,
    pub repeated: bool,
    pub byte_set: u32,
    pub core_set: u32,
    pub entropy_pct: u32,
}

/// The sampling positions: `(interval, count)` such that `count` reads of `READ_SIZE` bytes
/// at multiples of `interval` stay within `len` and the sample within `MAX_SAMPLE`.
fn layout(len: usize) -> (usize, usize) {
    if len <= MAX_SAMPLE {
        // small records: the whole record is the sample
        return (READ_SIZE, len / READ_SIZE);
    }
    // grow the interval (in READ_SIZE units) for records above 128 KiB
    let interval = INTERVAL.max((len * READ_SIZE / MAX_SAMPLE).next_multiple_of(READ_SIZE));
    let count = (len - READ_SIZE) / interval + 1;
    (interval, count.min(MAX_SAMPLE / READ_SIZE))
}

/// `count` reads; read `i` is at `(i / per_half) * half + (i % per_half) * interval`
/// (the full look: one run, `half` = 0; the quick look: one run per half of the record).
struct Sample<'a> {
    data: &'a [u8],
    interval: usize,
    count: usize,
    per_half: usize,
    half: usize,
}

impl Sample<'_> {
    fn chunk(&self, i: usize) -> &[u8] {
        let at = (i / self.per_half) * self.half + (i % self.per_half) * self.interval;
        &self.data[at..at + READ_SIZE]
    }

    fn len(&self) -> usize {
        self.count * READ_SIZE
    }

    /// First half of the sample equals the second half (compared in place, no copy).
    fn repeated(&self) -> bool {
        let half = self.count / 2;
        half > 0 && (0..half).all(|i| self.chunk(i) == self.chunk(i + half))
    }

    /// Byte histogram; four interleaved tables avoid store-to-load stalls on equal bytes.
    fn histogram(&self) -> [u32; 256] {
        let mut h = [[0u32; 256]; 4];
        for i in 0..self.count {
            for quad in self.chunk(i).chunks_exact(4) {
                h[0][quad[0] as usize] += 1;
                h[1][quad[1] as usize] += 1;
                h[2][quad[2] as usize] += 1;
                h[3][quad[3] as usize] += 1;
            }
        }
        let mut out = [0u32; 256];
        for (b, slot) in out.iter_mut().enumerate() {
            *slot = h[0][b] + h[1][b] + h[2][b] + h[3][b];
        }
        out
    }
}

fn byte_set(hist: &[u32; 256]) -> u32 {
    hist.iter().filter(|&&c| c > 0).count() as u32
}

/// Shannon entropy of the histogram in percent of 8 bits per byte (rounded down).
fn entropy_pct(hist: &[u32; 256], total: usize) -> u32 {
    let total = total as f64;
    let bits: f64 = hist
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / total;
            -p * p.log2()
        })
        .sum();
    (bits * 100.0 / 8.0) as u32
}

/// Number of most-frequent byte values that together cover `CORE_SET_COVERAGE`% of the sample.
fn core_set(hist: &[u32; 256], total: usize) -> u32 {
    let mut sorted = *hist;
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let threshold = (total as u64 * CORE_SET_COVERAGE as u64).div_ceil(100);
    let mut covered = 0u64;
    for (i, &c) in sorted.iter().enumerate() {
        covered += c as u64;
        if covered >= threshold {
            return i as u32 + 1;
        }
    }
    256
}

/// `c · log2(c)` for every count a sample can hold, computed once.
fn c_log2_c(c: u32) -> f32 {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    let t = TABLE
        .get_or_init(|| (0..=MAX_SAMPLE).map(|c| if c == 0 { 0.0 } else { c as f32 * (c as f32).log2() }).collect());
    t[c as usize]
}

/// Miller–Madow corrected entropy in percent of 8 bits: log2(n) − Σ c·log2(c) / n plus the
/// small-sample bias (distinct − 1) / (2 n ln 2).
fn corrected_entropy_pct(hist: &[u32; 256], n: usize, distinct: u32) -> u32 {
    // eight partial sums: a single chain of dependent float adds would dominate the cost
    let mut lanes = [0f32; 8];
    for group in hist.chunks_exact(8) {
        for (lane, &c) in lanes.iter_mut().zip(group) {
            *lane += c_log2_c(c);
        }
    }
    let sum: f32 = lanes.iter().sum();
    let nf = n as f32;
    let bits = nf.log2() - sum / nf + (distinct.saturating_sub(1)) as f32 / (2.0 * nf * std::f32::consts::LN_2);
    (bits.min(8.0) * 100.0 / 8.0) as u32
}

/// The quick look: true only if a 2 KiB sample already meets the strict incompressible rule.
fn quick_incompressible(data: &[u8]) -> bool {
    if data.len() < QUICK_READS * INTERVAL {
        return false;
    }
    let per_half = QUICK_READS / 2;
    let half = data.len() / 2;
    let interval = (half - READ_SIZE) / (per_half - 1);
    let s = Sample { data, interval, count: QUICK_READS, per_half, half };
    if s.repeated() {
        return false;
    }
    // one table: on random-looking data equal bytes are rare, so no store-to-load stalls
    let mut hist = [0u32; 256];
    for i in 0..s.count {
        for &b in s.chunk(i) {
            hist[b as usize] += 1;
        }
    }
    let distinct = byte_set(&hist);
    distinct >= CORE_SET_HIGH && corrected_entropy_pct(&hist, s.len(), distinct) >= ENTROPY_INCOMPRESSIBLE
}

fn sample(data: &[u8]) -> Sample<'_> {
    let (interval, count) = layout(data.len());
    Sample { data, interval, count, per_half: count.max(1), half: 0 }
}

/// Every statistic of `data`'s sample (diagnostics; [`judge`] is what the write path runs).
pub fn stats(data: &[u8]) -> Stats {
    let s = sample(data);
    let hist = s.histogram();
    Stats {
        sample_len: s.len(),
        repeated: s.repeated(),
        byte_set: byte_set(&hist),
        core_set: core_set(&hist, s.len()),
        entropy_pct: entropy_pct(&hist, s.len()),
    }
}

/// The sampler's decision: quick look, then the full look, cheapest statistic first.
pub fn judge(data: &[u8]) -> Judgement {
    if quick_incompressible(data) {
        return Judgement::Incompressible;
    }
    let s = sample(data);
    if s.count < 2 {
        return Judgement::Compressible(Reason::TooSmall);
    }
    if s.repeated() {
        return Judgement::Compressible(Reason::RepeatedPattern);
    }
    let hist = s.histogram();
    if byte_set(&hist) < BYTE_SET_THRESHOLD {
        return Judgement::Compressible(Reason::SmallByteSet);
    }
    let entropy = entropy_pct(&hist, s.len());
    if entropy <= ENTROPY_ACCEPTABLE {
        return Judgement::Compressible(Reason::LowEntropy);
    }
    let core = core_set(&hist, s.len());
    if core <= CORE_SET_LOW {
        return Judgement::Compressible(Reason::SmallCoreSet);
    }
    if core >= CORE_SET_HIGH && entropy >= ENTROPY_INCOMPRESSIBLE {
        return Judgement::Incompressible;
    }
    Judgement::Compressible(Reason::Undecided)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_stays_inside_the_record_and_the_sample_bound_over_whole_range() {
        let lens = (0..4096).chain((4096..(2 << 20)).step_by(4093)).chain([128 << 10, 1 << 20, 8 << 20]);
        for len in lens {
            let (interval, count) = layout(len);
            assert!(count * READ_SIZE <= MAX_SAMPLE, "len {len}");
            if count > 0 {
                assert!((count - 1) * interval + READ_SIZE <= len, "len {len}");
            }
            if len >= 2 * READ_SIZE {
                assert!(count >= 2, "len {len}");
            }
        }
        assert_eq!(layout(128 << 10), (INTERVAL, MAX_SAMPLE / READ_SIZE));
    }

    #[test]
    fn entropy_of_uniform_and_constant_histograms() {
        let uniform = [32u32; 256];
        assert_eq!(entropy_pct(&uniform, 8192), 100);
        let mut one = [0u32; 256];
        one[7] = 8192;
        assert_eq!(entropy_pct(&one, 8192), 0);
        assert_eq!(core_set(&uniform, 8192), 231);
        assert_eq!(core_set(&one, 8192), 1);
    }

    #[test]
    fn corrected_entropy_of_uniform_small_samples_is_near_eight_bits() {
        let mut x: u64 = 7;
        let mut hist = [0u32; 256];
        for _ in 0..2048 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            hist[(x & 255) as usize] += 1;
        }
        let pct = corrected_entropy_pct(&hist, 2048, byte_set(&hist));
        assert!(pct >= 99, "{pct}");
        assert!(entropy_pct(&hist, 2048) < pct);
    }
}
