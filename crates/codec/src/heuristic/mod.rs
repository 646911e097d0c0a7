//! Is a record worth compressing? Three cheap steps, cheapest first:
//!
//! 1. [`is_zeros`]: an all-zero record becomes a hole (no data stored at all);
//! 2. [`sampler`]: btrfs-style statistics over a small sample (repeated pattern, byte-set
//!    size, core set, entropy) reject data that is random-looking, at a few µs per record;
//! 3. [`probe`]: ZFS-style early abort — one lz4 pass into a buffer one sector shorter than
//!    the record; if even that does not fit, the record cannot save a sector cheaply.
//!
//! [`assess`] runs steps 1 and 2 (what every write pays). The engine may call [`probe`] before
//! an expensive level, and always sizes the real compression's `dst` to
//! [`crate::stored_limit`] so that the codec aborts by itself when the output would not save a
//! sector ([`crate::saves_a_sector`]).

pub mod sampler;
mod zeros;

pub use zeros::is_zeros;

/// What the sampler says about one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// every byte is zero: becomes a hole
    Zeros,
    /// not worth compressing: stored raw
    Incompressible,
    /// worth trying the codec
    Compressible,
}

/// Zero detection plus the btrfs-style sampler; costs a few µs on a 128 KiB record.
pub fn assess(data: &[u8]) -> Verdict {
    if is_zeros(data) {
        return Verdict::Zeros;
    }
    match sampler::judge(data) {
        sampler::Judgement::Incompressible => Verdict::Incompressible,
        sampler::Judgement::Compressible(_) => Verdict::Compressible,
    }
}

/// ZFS-style early-abort probe: compress `data` with lz4 (acceleration 1) into
/// `scratch[..stored_limit(len, sector)]`. If the output does not fit, no fast codec saves a
/// sector on this record and it should be stored raw. `scratch` must hold at least
/// `data.len()` bytes (reuse one buffer per worker: the probe itself never allocates).
///
/// lz4 finds repeats only; data that compresses by entropy coding alone (skewed bytes, no
/// repeats) fails the probe although zstd would shrink it a little — the same trade ZFS makes.
pub fn probe(data: &[u8], sector: usize, scratch: &mut [u8]) -> Verdict {
    if is_zeros(data) {
        return Verdict::Zeros;
    }
    let limit = crate::stored_limit(data.len(), sector).min(scratch.len());
    if limit == 0 {
        return Verdict::Incompressible;
    }
    match crate::backend::lz4::compress_default(data, &mut scratch[..limit]) {
        Some(_) => Verdict::Compressible,
        None => Verdict::Incompressible,
    }
}
