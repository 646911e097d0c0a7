//! zstd over libzstd (zstd-safe / zstd-sys). Compression uses a *static* CCtx laid out in a
//! buffer the pool sized with `ZSTD_estimateCCtxSize_usingCParams` (as btrfs does), so the
//! pool's memory accounting is exact and the hot path never allocates: libzstd cannot grow
//! a static context, it fails instead, which the pool's sizing rules out.
//!
//! Frames are what `zstd -b` produces per block: `ZSTD_compress2` with the level set, the
//! source size known (pledged = block length, recorded in the header), no checksum.

use crate::algorithm::Algorithm;
use crate::error::CodecError;
use std::ptr::NonNull;
use zstd_safe::zstd_sys as sys;

fn is_error(code: usize) -> bool {
    // SAFETY: pure function.
    unsafe { sys::ZSTD_isError(code) != 0 }
}

fn error_name(code: usize) -> &'static str {
    zstd_safe::get_error_name(code)
}

fn is_dst_too_small(code: usize) -> bool {
    // SAFETY: pure function.
    unsafe { sys::ZSTD_getErrorCode(code) == sys::ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall }
}

/// Bytes a static CCtx needs to compress sources of up to `block` bytes at `level`
/// (`ZSTD_estimateCCtxSize_usingCParams(ZSTD_getCParams(level, block, 0))`).
pub(crate) fn cctx_bytes(level: i32, block: usize) -> usize {
    // SAFETY: pure functions of their arguments.
    unsafe {
        let params = sys::ZSTD_getCParams(level, block as u64, 0);
        sys::ZSTD_estimateCCtxSize_usingCParams(params)
    }
}

/// Bytes a DCtx owns (`ZSTD_estimateDCtxSize`); single-shot decoding needs no window buffer.
pub(crate) fn dctx_bytes() -> usize {
    // SAFETY: pure function.
    unsafe { sys::ZSTD_estimateDCtxSize() }
}

pub(crate) struct Compressor {
    /// Backing store of the static CCtx; 8-aligned as libzstd requires. Never reallocated.
    _mem: Box<[u64]>,
    cctx: NonNull<sys::ZSTD_CCtx>,
    level: i32,
}

// SAFETY: the CCtx is only touched through &mut self; libzstd contexts may move between
// threads as long as one thread uses them at a time.
unsafe impl Send for Compressor {}

impl Compressor {
    pub(crate) fn new(bytes: usize) -> Result<Compressor, CodecError> {
        let mut mem = vec![0u64; bytes.div_ceil(8)].into_boxed_slice();
        // SAFETY: buffer is 8-aligned, `bytes` long, and outlives the CCtx (same struct).
        let cctx = unsafe { sys::ZSTD_initStaticCCtx(mem.as_mut_ptr().cast(), mem.len() * 8) };
        let cctx = NonNull::new(cctx).ok_or(CodecError::OutOfMemory { alg: Algorithm::Zstd })?;
        Ok(Compressor { _mem: mem, cctx, level: i32::MIN })
    }

    pub(crate) fn compress(&mut self, level: i32, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        if self.level != level {
            // SAFETY: valid context.
            let r = unsafe {
                sys::ZSTD_CCtx_setParameter(
                    self.cctx.as_ptr(),
                    sys::ZSTD_cParameter::ZSTD_c_compressionLevel,
                    level,
                )
            };
            if is_error(r) {
                return Err(CodecError::Unsupported(format!("zstd level {level}: {}", error_name(r))));
            }
            self.level = level;
        }
        // SAFETY: valid context; pointers and lengths come from live slices.
        let r = unsafe {
            sys::ZSTD_compress2(
                self.cctx.as_ptr(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                src.as_ptr().cast(),
                src.len(),
            )
        };
        if !is_error(r) {
            return Ok(r);
        }
        if is_dst_too_small(r) {
            return Err(CodecError::DstTooSmall);
        }
        Err(CodecError::Unsupported(format!("zstd compression failed: {}", error_name(r))))
    }
}

pub(crate) struct Decompressor {
    dctx: zstd_safe::DCtx<'static>,
}

impl Decompressor {
    pub(crate) fn new() -> Result<Decompressor, CodecError> {
        let dctx = zstd_safe::DCtx::try_create().ok_or(CodecError::OutOfMemory { alg: Algorithm::Zstd })?;
        Ok(Decompressor { dctx })
    }

    pub(crate) fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        match self.dctx.decompress(dst, src) {
            Ok(n) => Ok(n),
            Err(code) if is_dst_too_small(code) => Err(CodecError::DstTooSmall),
            Err(code) => Err(CodecError::Corrupt {
                alg: Algorithm::Zstd,
                detail: error_name(code).to_string(),
            }),
        }
    }
}
