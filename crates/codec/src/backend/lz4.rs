//! lz4 (acceleration 1..=65537) and lz4hc (levels 1..=12) over liblz4 (lz4-sys), using the
//! "external state" entry points so that the state is allocated once and pooled (liblz4's
//! plain `LZ4_compress_HC` mallocs its state on every call).

use crate::algorithm::Algorithm;
use crate::error::CodecError;
use std::os::raw::{c_char, c_int, c_void};

// Exported by the liblz4 that lz4-sys builds (lz4.h / lz4hc.h), not bound by lz4-sys itself.
extern "C" {
    fn LZ4_sizeofState() -> c_int;
    fn LZ4_initStream(buffer: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_compress_fast_extState_fastReset(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        acceleration: c_int,
    ) -> c_int;
    fn LZ4_sizeofStateHC() -> c_int;
    fn LZ4_compress_HC_extStateHC(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        level: c_int,
    ) -> c_int;
}

/// Largest input liblz4 accepts (`LZ4_MAX_INPUT_SIZE`).
const LZ4_MAX_INPUT_SIZE: usize = 0x7E00_0000;

fn aligned_state(bytes: usize) -> Box<[u64]> {
    vec![0u64; bytes.div_ceil(8)].into_boxed_slice()
}

fn clamp_len(len: usize) -> c_int {
    len.min(i32::MAX as usize) as c_int
}

/// Bytes of an lz4 fast compression state.
pub(crate) fn fast_state_bytes() -> usize {
    // SAFETY: pure function of the library build.
    unsafe { LZ4_sizeofState() as usize }
}

/// Bytes of an lz4hc compression state.
pub(crate) fn hc_state_bytes() -> usize {
    // SAFETY: pure function of the library build.
    unsafe { LZ4_sizeofStateHC() as usize }
}

pub(crate) struct FastState {
    state: Box<[u64]>,
}

impl FastState {
    pub(crate) fn new() -> FastState {
        let bytes = fast_state_bytes();
        let mut state = aligned_state(bytes);
        // SAFETY: the buffer is 8-aligned and `bytes` long; initStream makes it a valid state,
        // which `_fastReset` requires.
        unsafe { LZ4_initStream(state.as_mut_ptr().cast(), bytes) };
        FastState { state }
    }

    pub(crate) fn compress(&mut self, acceleration: i32, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        if src.len() > LZ4_MAX_INPUT_SIZE {
            return Err(CodecError::Unsupported(format!("lz4 input of {} bytes is too large", src.len())));
        }
        // SAFETY: state initialised in new(); pointers and lengths come from live slices.
        let n = unsafe {
            LZ4_compress_fast_extState_fastReset(
                self.state.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                src.len() as c_int,
                clamp_len(dst.len()),
                acceleration,
            )
        };
        if n <= 0 && !src.is_empty() {
            return Err(CodecError::DstTooSmall);
        }
        if n <= 0 {
            // empty input still produces one token byte; 0 here means dst was empty
            return Err(CodecError::DstTooSmall);
        }
        Ok(n as usize)
    }
}

pub(crate) struct HcState {
    state: Box<[u64]>,
}

impl HcState {
    pub(crate) fn new() -> HcState {
        HcState { state: aligned_state(hc_state_bytes()) }
    }

    pub(crate) fn compress(&mut self, level: i32, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        if src.len() > LZ4_MAX_INPUT_SIZE {
            return Err(CodecError::Unsupported(format!("lz4hc input of {} bytes is too large", src.len())));
        }
        // SAFETY: extStateHC initialises the (8-aligned, sizeofStateHC-long) state itself.
        let n = unsafe {
            LZ4_compress_HC_extStateHC(
                self.state.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                src.len() as c_int,
                clamp_len(dst.len()),
                level,
            )
        };
        if n <= 0 {
            return Err(CodecError::DstTooSmall);
        }
        Ok(n as usize)
    }
}

/// One-shot lz4 block compression with a stack state (used by the heuristic's probe).
pub(crate) fn compress_default(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    if src.len() > LZ4_MAX_INPUT_SIZE {
        return None;
    }
    // SAFETY: pointers and lengths come from live slices.
    let n = unsafe {
        lz4_sys::LZ4_compress_default(
            src.as_ptr().cast(),
            dst.as_mut_ptr().cast(),
            src.len() as c_int,
            clamp_len(dst.len()),
        )
    };
    (n > 0).then_some(n as usize)
}

fn raw_decompress(src: &[u8], dst: &mut [u8]) -> c_int {
    // SAFETY: `_safe` never reads or writes outside the given lengths.
    unsafe {
        lz4_sys::LZ4_decompress_safe(
            src.as_ptr().cast(),
            dst.as_mut_ptr().cast(),
            clamp_len(src.len()),
            clamp_len(dst.len()),
        )
    }
}

/// Decode an lz4 block. liblz4 reports "corrupt" and "dst too small" alike, so on failure the
/// block is decoded again into a scratch buffer of the largest size it could expand to: if
/// that works, the caller's buffer was too small. (Error path only; the hot path allocates
/// nothing.)
pub(crate) fn decompress(alg: Algorithm, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
    if src.len() > LZ4_MAX_INPUT_SIZE {
        return Err(CodecError::Corrupt { alg, detail: "block larger than lz4's input limit".into() });
    }
    let n = raw_decompress(src, dst);
    if n >= 0 {
        return Ok(n as usize);
    }
    // an lz4 block expands at most ~255x; cap the retry at 256 MiB
    let cap = src.len().saturating_mul(255).saturating_add(64).min(256 << 20);
    if cap > dst.len() {
        let mut scratch = vec![0u8; cap];
        if raw_decompress(src, &mut scratch) >= 0 {
            return Err(CodecError::DstTooSmall);
        }
    }
    Err(CodecError::Corrupt { alg, detail: format!("lz4 block does not decode (code {n})") })
}
