//! The algorithm table: on-disk ids, level ranges and defaults of every codec.

/// On-disk algorithm identifier. The numeric ids are part of the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Algorithm {
    None = 0,
    Lz4 = 1,
    Lz4Hc = 2,
    Deflate = 3,
    Zstd = 4,
    Lzo = 5,
}

/// Every algorithm, in id order.
pub const ALL_ALGORITHMS: [Algorithm; 6] =
    [Algorithm::None, Algorithm::Lz4, Algorithm::Lz4Hc, Algorithm::Deflate, Algorithm::Zstd, Algorithm::Lzo];

/// zstd's strongest-negative ("fastest") level, `ZSTD_minCLevel()` (= -ZSTD_TARGETLENGTH_MAX).
pub const ZSTD_MIN_LEVEL: i32 = -(1 << 17);
/// zstd's strongest level, `ZSTD_maxCLevel()`; 20..=22 are the "ultra" levels.
pub const ZSTD_MAX_LEVEL: i32 = 22;
/// zstd's default level (also what `zstd:0` means, as in btrfs and libzstd).
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;
/// lz4 acceleration range: 1 is plain `LZ4_compress_default`; liblz4 clamps above
/// `LZ4_ACCELERATION_MAX` (65537), so we reject those instead of silently clamping.
pub const LZ4_MAX_ACCELERATION: i32 = 65537;
/// lz4hc levels (`LZ4HC_CLEVEL_MIN`..`LZ4HC_CLEVEL_MAX`), default `LZ4HC_CLEVEL_DEFAULT`.
pub const LZ4HC_MAX_LEVEL: i32 = 12;
pub const LZ4HC_DEFAULT_LEVEL: i32 = 9;
/// libdeflate levels 1..=12 (10..=12 are its near-optimal parser; zlib stops at 9).
pub const DEFLATE_MAX_LEVEL: i32 = 12;
/// btrfs' default zlib level.
pub const ZLIB_DEFAULT_LEVEL: i32 = 3;
/// gzip's (and ZFS `gzip`'s) default level.
pub const GZIP_DEFAULT_LEVEL: i32 = 6;

impl Algorithm {
    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn from_id(id: u8) -> Option<Algorithm> {
        Some(match id {
            0 => Algorithm::None,
            1 => Algorithm::Lz4,
            2 => Algorithm::Lz4Hc,
            3 => Algorithm::Deflate,
            4 => Algorithm::Zstd,
            5 => Algorithm::Lzo,
            _ => return None,
        })
    }

    /// Canonical spec name (what `Display` of a codec starts with).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::None => "none",
            Algorithm::Lz4 => "lz4",
            Algorithm::Lz4Hc => "lz4hc",
            Algorithm::Deflate => "zlib",
            Algorithm::Zstd => "zstd",
            Algorithm::Lzo => "lzo",
        }
    }

    /// Inclusive level range accepted for this algorithm (lz4: acceleration).
    /// zstd's range contains 0, which is not a level of its own: [`crate::Codec::new`] rejects it
    /// (the spec parser maps `zstd:0` to the default level, as btrfs does).
    pub fn level_range(self) -> (i32, i32) {
        match self {
            Algorithm::None | Algorithm::Lzo => (0, 0),
            Algorithm::Lz4 => (1, LZ4_MAX_ACCELERATION),
            Algorithm::Lz4Hc => (1, LZ4HC_MAX_LEVEL),
            Algorithm::Deflate => (1, DEFLATE_MAX_LEVEL),
            Algorithm::Zstd => (ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL),
        }
    }

    /// Default level when a spec names the algorithm without a level.
    pub fn default_level(self) -> i32 {
        match self {
            Algorithm::None | Algorithm::Lzo => 0,
            Algorithm::Lz4 => 1,
            Algorithm::Lz4Hc => LZ4HC_DEFAULT_LEVEL,
            Algorithm::Deflate => ZLIB_DEFAULT_LEVEL,
            Algorithm::Zstd => ZSTD_DEFAULT_LEVEL,
        }
    }

    /// Whether this build can compress and decompress the algorithm.
    pub fn is_built_in(self) -> bool {
        self != Algorithm::Lzo || cfg!(feature = "lzo")
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
