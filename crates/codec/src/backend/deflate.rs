//! Raw deflate over libdeflate (libdeflater), levels 1..=12. A libdeflate compressor is bound
//! to one level at allocation, so deflate workspaces serve exactly their own level.

use crate::algorithm::Algorithm;
use crate::error::CodecError;
use libdeflater::{CompressionError, CompressionLvl, DecompressionError};

pub(crate) struct Compressor {
    inner: libdeflater::Compressor,
}

impl Compressor {
    pub(crate) fn new(level: i32) -> Result<Compressor, CodecError> {
        let lvl = CompressionLvl::new(level).map_err(|_| {
            CodecError::InvalidCodec(crate::SpecError::LevelOutOfRange { alg: Algorithm::Deflate, level: level as i64 })
        })?;
        Ok(Compressor { inner: libdeflater::Compressor::new(lvl) })
    }

    pub(crate) fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        match self.inner.deflate_compress(src, dst) {
            Ok(n) => Ok(n),
            Err(CompressionError::InsufficientSpace) => Err(CodecError::DstTooSmall),
        }
    }
}

pub(crate) struct Decompressor {
    inner: libdeflater::Decompressor,
}

impl Decompressor {
    pub(crate) fn new() -> Decompressor {
        Decompressor { inner: libdeflater::Decompressor::new() }
    }

    pub(crate) fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        match self.inner.deflate_decompress(src, dst) {
            Ok(n) => Ok(n),
            Err(DecompressionError::InsufficientSpace) => Err(CodecError::DstTooSmall),
            Err(DecompressionError::BadData) => {
                Err(CodecError::Corrupt { alg: Algorithm::Deflate, detail: "deflate stream does not decode".into() })
            }
        }
    }
}

/// Bytes a libdeflate compressor of `level` owns, measured by allocating one through a
/// counting allocator (`libdeflate_alloc_compressor_ex`), so the pool accounts real memory.
pub(crate) fn compressor_bytes(level: i32) -> usize {
    measure::compressor(level)
}

/// Bytes a libdeflate decompressor owns (measured the same way).
pub(crate) fn decompressor_bytes() -> usize {
    measure::decompressor()
}

mod measure {
    use libdeflate_sys as sys;
    use std::cell::Cell;
    use std::os::raw::c_void;

    thread_local! {
        static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    }

    unsafe extern "C" fn counting_malloc(size: usize) -> *mut c_void {
        ALLOCATED.with(|a| a.set(a.get() + size));
        // SAFETY: plain libc malloc, freed by counting_free below.
        unsafe { libc_malloc(size) }
    }

    unsafe extern "C" fn counting_free(ptr: *mut c_void) {
        // SAFETY: ptr came from counting_malloc.
        unsafe { libc_free(ptr) }
    }

    extern "C" {
        #[link_name = "malloc"]
        fn libc_malloc(size: usize) -> *mut c_void;
        #[link_name = "free"]
        fn libc_free(ptr: *mut c_void);
    }

    fn options() -> sys::libdeflate_options {
        sys::libdeflate_options {
            sizeof_options: std::mem::size_of::<sys::libdeflate_options>(),
            malloc_func: Some(counting_malloc),
            free_func: Some(counting_free),
        }
    }

    pub(super) fn compressor(level: i32) -> usize {
        ALLOCATED.with(|a| a.set(0));
        // SAFETY: valid options; the compressor is freed right away.
        unsafe {
            let c = sys::libdeflate_alloc_compressor_ex(level, &options());
            if !c.is_null() {
                sys::libdeflate_free_compressor(c);
            }
        }
        ALLOCATED.with(|a| a.get())
    }

    pub(super) fn decompressor() -> usize {
        ALLOCATED.with(|a| a.set(0));
        // SAFETY: valid options; the decompressor is freed right away.
        unsafe {
            let d = sys::libdeflate_alloc_decompressor_ex(&options());
            if !d.is_null() {
                sys::libdeflate_free_decompressor(d);
            }
        }
        ALLOCATED.with(|a| a.get())
    }
}
