//! Typed errors of the codec layer: one for codec operations, one for spec parsing.

use crate::algorithm::Algorithm;

/// The accepted spec forms, quoted by every spec error.
pub const ACCEPTED_FORMS: &str = "none | off | zstd[:N] | zstd-N | zstd-fast-N | zlib[:N] | zlibN | \
gzip[-N] | deflate[:N] | lz4 | lz4:fast=N | lz4fast-N | lz4hc[:N] | lzo | auto | auto:MIN..MAX \
(MIN, MAX fixed codecs, either may be left out) | qos:N | qos-N";

/// Human-readable level range of an algorithm, for error messages.
pub fn level_help(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::None => "none takes no level",
        Algorithm::Lzo => "lzo takes no level",
        Algorithm::Lz4 => "lz4 acceleration is 1..=65537 (lz4:fast=N)",
        Algorithm::Lz4Hc => "lz4hc levels are 1..=12",
        Algorithm::Deflate => "zlib/gzip/deflate levels are 1..=12 (0 means the default)",
        Algorithm::Zstd => "zstd levels are -131072..=-1 and 1..=22 (0 means the default 3)",
    }
}

/// Errors of compression and decompression.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The output would not fit: for compression this is the early abort (the caller sized
    /// `dst` to what it is willing to store), for decompression a too-small `dst`.
    #[error("destination buffer too small")]
    DstTooSmall,
    /// The stored bytes do not decode.
    #[error("corrupt compressed data ({alg:?}): {detail}")]
    Corrupt { alg: Algorithm, detail: String },
    #[error("{0}")]
    Unsupported(String),
    /// The codec's (algorithm, level) pair is not valid or not built in.
    #[error("invalid codec: {0}")]
    InvalidCodec(#[from] SpecError),
    /// `src` is longer than the block size the workspaces were sized for.
    #[error("source of {len} bytes exceeds the workspace block size of {max} bytes")]
    SourceTooLarge { len: usize, max: usize },
    /// The codec library refused to allocate a context (out of memory).
    #[error("could not allocate a {alg:?} context")]
    OutOfMemory { alg: Algorithm },
}

/// Errors of parsing a compression spec or a codec list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    #[error("empty compression spec; accepted forms: {ACCEPTED_FORMS}")]
    Empty,
    #[error("unknown compression algorithm {name:?}; accepted forms: {ACCEPTED_FORMS}")]
    UnknownName { name: String },
    #[error("level {level} out of range for {alg}: {help}; accepted forms: {ACCEPTED_FORMS}", help = level_help(*alg))]
    LevelOutOfRange { alg: Algorithm, level: i64 },
    #[error("{text:?} in spec {spec:?} is not a number; accepted forms: {ACCEPTED_FORMS}")]
    BadNumber { spec: String, text: String },
    #[error("spec {spec:?}: {detail}; accepted forms: {ACCEPTED_FORMS}")]
    Malformed { spec: String, detail: &'static str },
    #[error("{alg} is not built into this squeezefs; rebuild with `--features lzo` (cargo feature `lzo` of squeezefs-codec, GPL)")]
    NotBuiltIn { alg: Algorithm },
    #[error("auto range {min}..{max} runs from slower to faster: write the faster codec first, as in auto:lz4fast-20..zstd:9 (bounds are fixed codecs; a bare number is a zstd level); accepted forms: {ACCEPTED_FORMS}")]
    BadAutoRange { min: String, max: String },
    #[error("auto bound {bound:?} is not a fixed codec: use e.g. lz4, lz4fast-20, zstd:-5, zstd:9, zlib:6, lz4hc:9 or a bare zstd level (storing raw is always open to auto); accepted forms: {ACCEPTED_FORMS}")]
    BadAutoBound { bound: String },
    #[error("qos target {value} MB/s out of range 1..=1000000; accepted forms: {ACCEPTED_FORMS}")]
    QosOutOfRange { value: i64 },
    #[error(
        "{spec:?} is not a fixed codec (a codec list takes fixed codecs and ranges like zstd:1..15, not auto/qos)"
    )]
    NotFixed { spec: String },
}
