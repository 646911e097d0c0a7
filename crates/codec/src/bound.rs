//! Worst-case output sizes, so callers can size `dst` for a compression that must succeed.

use crate::algorithm::Algorithm;
use crate::codec::Codec;

/// Largest output `compress` may produce for `len` input bytes with `codec`.
pub fn compress_bound(codec: Codec, len: usize) -> usize {
    match codec.alg {
        Algorithm::None => len,
        // LZ4_COMPRESSBOUND(isize) = isize + isize/255 + 16
        Algorithm::Lz4 | Algorithm::Lz4Hc => len + len / 255 + 16,
        // SAFETY: libdeflate documents a NULL compressor as valid here (a bound for all levels)
        Algorithm::Deflate => unsafe { libdeflate_sys::libdeflate_deflate_compress_bound(std::ptr::null_mut(), len) },
        Algorithm::Zstd => zstd_safe::compress_bound(len),
        // lzo1x worst case: n + n/16 + 64 + 3
        Algorithm::Lzo => len + len / 16 + 64 + 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random bytes are the worst case: every codec's output must fit its bound.
    #[test]
    fn incompressible_input_fits_the_bound_at_every_length_class() {
        let ws = crate::Workspaces::new(crate::WorkspaceConfig::default());
        let src = crate::test_data::noise(0x2545_F491_4F6C_DD1D, 128 << 10);
        let codecs =
            [Codec::zstd(1), Codec::zstd(-50), Codec::lz4(1), Codec::lz4hc(9), Codec::deflate(1), Codec::deflate(12)];
        for codec in codecs.map(Result::unwrap) {
            for len in [0, 1, 100, 4999, 5000, 5001, 10_001, 65_536, 128 << 10] {
                let mut dst = vec![0u8; compress_bound(codec, len)];
                let n = ws.compress(codec, &src[..len], &mut dst).unwrap_or_else(|e| panic!("{codec} {len}: {e}"));
                assert!(n <= dst.len());
            }
        }
    }
}
