//! Worst-case output sizes, so callers can size `dst` for a compression that must succeed.

use crate::algorithm::{Algorithm, Codec};

/// Largest output `compress` may produce for `len` input bytes with `codec`.
pub fn compress_bound(codec: Codec, len: usize) -> usize {
    match codec.alg {
        Algorithm::None => len,
        // LZ4_COMPRESSBOUND(isize) = isize + isize/255 + 16
        Algorithm::Lz4 | Algorithm::Lz4Hc => len + len / 255 + 16,
        // libdeflate_deflate_compress_bound(NULL, n): 5 bytes per stored block of at most
        // MIN_BLOCK_LENGTH (10000) bytes, plus the input, plus its output end padding (8)
        Algorithm::Deflate => len + 5 * len.div_ceil(10_000).max(1) + 8,
        Algorithm::Zstd => zstd_safe::compress_bound(len),
        // lzo1x worst case: n + n/16 + 64 + 3
        Algorithm::Lzo => len + len / 16 + 64 + 3,
    }
}
