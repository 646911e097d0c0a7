//! squeezefs codec layer: pure library, no I/O, no threads.
//!
//! CONTRACT (other crates build against these names; keep them stable):
//! * [`Algorithm`] — on-disk algorithm ids (`id()` / `from_id()`), never renumbered.
//! * [`Codec`] — a concrete (algorithm, level) pair; for lz4 the level is the acceleration.
//! * [`Spec`] — a parsed compression spec (`FromStr` + `Display` round-trip).
//! * [`Workspaces`] — pooled contexts; `compress`/`decompress` into caller-owned buffers.
//! * [`compress_bound`], [`heuristic::assess`], [`saves_a_sector`].
//! * [`CodecError`] — typed, `#[non_exhaustive]`, distinguishes corrupt input from a small buffer.

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
}

/// A concrete codec: algorithm plus level (lz4: acceleration; none/lzo: 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Codec {
    pub alg: Algorithm,
    pub level: i32,
}

/// A parsed compression spec (DESIGN.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Spec {
    /// `none` / `off`
    Off,
    /// a fixed codec, e.g. `zstd:3`
    Fixed(Codec),
    /// `auto` / `auto:MIN..MAX` (zstd levels)
    Auto { min: i32, max: i32 },
    /// `qos:N` MB/s
    Qos { mb_per_s: u32 },
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    #[error("destination buffer too small")]
    DstTooSmall,
    #[error("corrupt compressed data ({alg:?}): {detail}")]
    Corrupt { alg: Algorithm, detail: String },
    #[error("{0}")]
    Unsupported(String),
}

/// Largest output `compress` may produce for `len` input bytes with `codec`.
pub fn compress_bound(_codec: Codec, _len: usize) -> usize {
    todo!("codec helper")
}

/// A stored record must save at least one sector, else it is stored raw.
pub fn saves_a_sector(compressed_len: usize, logical_len: usize, sector: usize) -> bool {
    let sectors = |n: usize| n.div_ceil(sector);
    sectors(compressed_len) < sectors(logical_len)
}

pub mod heuristic {
    /// What the sampler says about one record.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Verdict {
        /// every byte is zero: becomes a hole
        Zeros,
        /// not worth compressing: stored raw
        Incompressible,
        /// worth trying the codec
        Compressible,
    }
    pub fn assess(_data: &[u8]) -> Verdict {
        todo!("codec helper")
    }
}

/// Pooled compression/decompression contexts, bounded memory (DESIGN.md §7).
pub struct Workspaces {}

#[derive(Clone, Debug)]
pub struct WorkspaceConfig {
    /// upper bound on total workspace memory, bytes
    pub max_bytes: usize,
    /// idle workspaces older than this are reclaimed
    pub idle_timeout: std::time::Duration,
}

impl Workspaces {
    pub fn new(_cfg: WorkspaceConfig) -> Workspaces {
        todo!("codec helper")
    }
    /// Compress `src` into `dst`; returns bytes written. `Err(DstTooSmall)` when the output
    /// would not fit (callers use that as the early abort: give `dst` the size you would accept).
    pub fn compress(&self, _codec: Codec, _src: &[u8], _dst: &mut [u8]) -> Result<usize, CodecError> {
        todo!("codec helper")
    }
    /// Decompress `src` into `dst` (sized to the logical length); returns bytes written.
    pub fn decompress(&self, _alg: Algorithm, _src: &[u8], _dst: &mut [u8]) -> Result<usize, CodecError> {
        todo!("codec helper")
    }
}
