//! Thin, allocation-free wrappers over the codec libraries. Each context is created once (the
//! only allocation) and then compresses/decompresses into caller-owned buffers.

pub(crate) mod deflate;
pub(crate) mod lz4;
#[cfg(feature = "lzo")]
pub(crate) mod lzo;
pub(crate) mod shape;
pub(crate) mod zstd;

use crate::algorithm::Algorithm;
use crate::codec::Codec;
use crate::error::CodecError;
use shape::Shape;

/// What kind of context a workspace holds; a workspace serves only requests of its family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Family {
    ZstdC,
    Lz4C,
    Lz4HcC,
    DeflateC,
    #[cfg_attr(not(feature = "lzo"), allow(dead_code))]
    LzoC,
    ZstdD,
    DeflateD,
}

impl Family {
    /// The family that compresses with `alg` (None for algorithms that need no context).
    pub(crate) fn compressor(alg: Algorithm) -> Option<Family> {
        match alg {
            Algorithm::None => None,
            Algorithm::Zstd => Some(Family::ZstdC),
            Algorithm::Lz4 => Some(Family::Lz4C),
            Algorithm::Lz4Hc => Some(Family::Lz4HcC),
            Algorithm::Deflate => Some(Family::DeflateC),
            Algorithm::Lzo => Some(Family::LzoC),
        }
    }

    /// The family that decompresses `alg` (None when the decoder needs no context).
    pub(crate) fn decompressor(alg: Algorithm) -> Option<Family> {
        match alg {
            Algorithm::Zstd => Some(Family::ZstdD),
            Algorithm::Deflate => Some(Family::DeflateD),
            _ => None,
        }
    }

    pub(crate) fn all() -> impl Iterator<Item = Family> {
        [
            Family::ZstdC,
            Family::Lz4C,
            Family::Lz4HcC,
            Family::DeflateC,
            #[cfg(feature = "lzo")]
            Family::LzoC,
            Family::ZstdD,
            Family::DeflateD,
        ]
        .into_iter()
    }
}

/// One codec context. The memory it owns is what the pool accounts for it.
pub(crate) enum Ctx {
    ZstdC(zstd::Compressor),
    Lz4C(lz4::FastState),
    Lz4HcC(lz4::HcState),
    DeflateC(deflate::Compressor),
    #[cfg(feature = "lzo")]
    LzoC(lzo::Compressor),
    ZstdD(zstd::Decompressor),
    DeflateD(deflate::Decompressor),
}

impl Ctx {
    /// Create a context of `family` able to serve `level` (zstd: any level whose parameters
    /// need at most `bytes`). The only allocation of a context's life.
    pub(crate) fn create(family: Family, level: i32, bytes: usize, shape: Shape) -> Result<Ctx, CodecError> {
        Ok(match family {
            Family::ZstdC => Ctx::ZstdC(zstd::Compressor::new(bytes, shape)?),
            Family::Lz4C => Ctx::Lz4C(lz4::FastState::new()),
            Family::Lz4HcC => Ctx::Lz4HcC(lz4::HcState::new()),
            Family::DeflateC => Ctx::DeflateC(deflate::Compressor::new(level)?),
            #[cfg(feature = "lzo")]
            Family::LzoC => Ctx::LzoC(lzo::Compressor::new()),
            #[cfg(not(feature = "lzo"))]
            Family::LzoC => return Err(CodecError::InvalidCodec(crate::SpecError::NotBuiltIn { alg: Algorithm::Lzo })),
            Family::ZstdD => Ctx::ZstdD(zstd::Decompressor::new()?),
            Family::DeflateD => Ctx::DeflateD(deflate::Decompressor::new()),
        })
    }

    /// Compress with the codec this context's family implements.
    pub(crate) fn compress(&mut self, codec: Codec, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        match self {
            Ctx::ZstdC(c) => c.compress(codec.level, src, dst),
            Ctx::Lz4C(s) => s.compress(codec.level, src, dst),
            Ctx::Lz4HcC(s) => s.compress(codec.level, src, dst),
            Ctx::DeflateC(c) => c.compress(src, dst),
            #[cfg(feature = "lzo")]
            Ctx::LzoC(c) => c.compress(src, dst),
            Ctx::ZstdD(_) | Ctx::DeflateD(_) => unreachable!("pool hands out compressors for compress"),
        }
    }

    pub(crate) fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        match self {
            Ctx::ZstdD(d) => d.decompress(src, dst),
            Ctx::DeflateD(d) => d.decompress(src, dst),
            _ => unreachable!("pool hands out decompressors for decompress"),
        }
    }
}

/// Decompression of the algorithms whose decoders need no context.
pub(crate) fn decompress_stateless(alg: Algorithm, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
    match alg {
        Algorithm::None => {
            let out = dst.get_mut(..src.len()).ok_or(CodecError::DstTooSmall)?;
            out.copy_from_slice(src);
            Ok(src.len())
        }
        Algorithm::Lz4 | Algorithm::Lz4Hc => lz4::decompress(alg, src, dst),
        #[cfg(feature = "lzo")]
        Algorithm::Lzo => lzo::decompress(src, dst),
        #[cfg(not(feature = "lzo"))]
        Algorithm::Lzo => Err(CodecError::InvalidCodec(crate::SpecError::NotBuiltIn { alg })),
        Algorithm::Zstd | Algorithm::Deflate => unreachable!("these decoders are pooled"),
    }
}
