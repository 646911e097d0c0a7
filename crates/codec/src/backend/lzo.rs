//! LZO1X-1 (btrfs' `lzo`) through the `lzo1x` crate (GPL-2.0, hence the off-by-default cargo
//! feature `lzo`). That crate returns a fresh `Vec` per call, so unlike the other codecs lzo
//! allocates per record; it exists for btrfs parity, not as a recommended codec.

use crate::algorithm::Algorithm;
use crate::error::CodecError;

/// LZO1X-1's dictionary: 2^14 entries (`D_BITS` = 14, `lzo1x::CompressLevel` 3), of 2 bytes.
pub(crate) const WORK_MEM_BYTES: usize = (1 << 14) * 2;

pub(crate) struct Compressor;

impl Compressor {
    pub(crate) fn new() -> Compressor {
        Compressor
    }

    pub(crate) fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        let out = lzo1x::compress(src, lzo1x::CompressLevel::new(3));
        let slot = dst.get_mut(..out.len()).ok_or(CodecError::DstTooSmall)?;
        slot.copy_from_slice(&out);
        Ok(out.len())
    }
}

/// lzo1x needs `dst` to be exactly the decoded length (the record's logical length); any
/// other outcome is reported as corruption since the format cannot tell the two apart.
pub(crate) fn decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
    match lzo1x::decompress(src, dst) {
        Ok(()) => Ok(dst.len()),
        Err(e) => Err(CodecError::Corrupt {
            alg: Algorithm::Lzo,
            detail: format!("lzo1x: {e} (the buffer must be exactly the logical length)"),
        }),
    }
}
