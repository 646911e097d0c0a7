//! A concrete codec, an algorithm at one level, validated against the algorithm table
//! (algorithm.rs).

use crate::algorithm::Algorithm;
use crate::error::SpecError;

/// A concrete codec: algorithm plus level (lz4: acceleration; none/lzo: 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Codec {
    pub alg: Algorithm,
    pub level: i32,
}

impl Codec {
    pub const NONE: Codec = Codec { alg: Algorithm::None, level: 0 };

    /// A validated codec: the level must lie in the algorithm's range (zstd: not 0) and the
    /// algorithm must be built in (lzo needs the `lzo` cargo feature).
    pub fn new(alg: Algorithm, level: i32) -> Result<Codec, SpecError> {
        let (min, max) = alg.level_range();
        if level < min || level > max || (alg == Algorithm::Zstd && level == 0) {
            return Err(SpecError::LevelOutOfRange { alg, level: level as i64 });
        }
        if !alg.is_built_in() {
            return Err(SpecError::NotBuiltIn { alg });
        }
        Ok(Codec { alg, level })
    }

    pub fn zstd(level: i32) -> Result<Codec, SpecError> {
        Codec::new(Algorithm::Zstd, level)
    }

    /// lz4 with the given acceleration (1 = default lz4).
    pub fn lz4(acceleration: i32) -> Result<Codec, SpecError> {
        Codec::new(Algorithm::Lz4, acceleration)
    }

    pub fn lz4hc(level: i32) -> Result<Codec, SpecError> {
        Codec::new(Algorithm::Lz4Hc, level)
    }

    pub fn deflate(level: i32) -> Result<Codec, SpecError> {
        Codec::new(Algorithm::Deflate, level)
    }

    /// Whether `self` satisfies [`Codec::new`]'s rules (callers may build `Codec` literally).
    pub fn validate(self) -> Result<Codec, SpecError> {
        Codec::new(self.alg, self.level)
    }
}
