//! Compression policy and the compression of one record with a chosen codec (runs on a
//! worker, or on a writer in caller-runs).
//!
//! A policy is a [`Spec`] plus `force`, and the QoS tree the data belongs to: the
//! mount-wide one, or a file's own, which the fs core resolves from properties and states
//! with each write (dirty.rs `FileData::policy`). Which codec a record gets under its
//! policy is levels.rs's decision (for a QoS tree's record, `tree` ≠ `NO_TREE`, under an
//! adaptive spec: its tree's plan, qos.rs); this module only compresses with it
//! ([`compress_with`]).

use crate::compress::outbuf::{OutBytes, OutPool};
use squeezefs_codec::{saves_a_sector, Algorithm, CallTime, Codec, Spec, Workspaces};
use xxhash_rust::xxh3::xxh3_64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub spec: Spec,
    pub force: bool,
    /// the QoS tree of the data (`squeezefs_control::qos::NO_TREE`: none)
    pub tree: u64,
}

/// What a write says about its file's compression (`FileData::policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stated {
    /// the file keeps the policy it has (the pool's unless one was set)
    Keep,
    /// from this write on the file's data is compressed with this (`None`: the pool's)
    Is(Option<Policy>),
}

/// The codec `qos:N` compresses with until the QoS plan chooses per record (issue 24).
pub const ADAPTIVE_PLACEHOLDER: Codec = Codec { alg: Algorithm::Zstd, level: 3 };

impl Policy {
    /// Every record is stored raw (`off`, `none`): nothing to compress, nothing to decide.
    pub fn stores_raw(&self) -> bool {
        matches!(self.spec, Spec::Off) || matches!(self.spec, Spec::Fixed(c) if c.alg == Algorithm::None)
    }
}

/// Result of compressing one record.
pub enum Compressed {
    /// all zeros: becomes a hole
    Zeros,
    /// store the record's own bytes
    Raw { hash: u64 },
    /// store these bytes (shared: a record held packed in the dirty cache keeps them
    /// readable while its txg writes them)
    Packed { codec: Codec, bytes: std::sync::Arc<OutBytes>, hash: u64 },
}

/// Records of a file that must compress in a row before the sampler is skipped for the
/// file's next records in the same txg.
pub const TRUST_AFTER: u32 = 4;

thread_local! {
    /// Per-worker compression output buffer (grows to the largest record seen).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Compress `data` (not all zeros) with `codec` (not `Codec::NONE`), with early abort
/// (the output must save at least one sector), and hash what will be stored. Never copies
/// the raw record; the output goes into a buffer of `out`. Returns the result and the
/// thread CPU nanoseconds the codec took: what a per-record controller measures (levels.rs).
pub fn compress_with<'a>(
    data: &[u8],
    codec: Codec,
    sector: usize,
    ws: impl FnOnce() -> &'a Workspaces,
    out: &std::sync::Arc<OutPool>,
) -> (Compressed, CallTime) {
    let raw = || Compressed::Raw { hash: xxh3_64(data) };
    // the largest output that still saves a sector: the codec aborts early beyond it
    let limit = (data.len().div_ceil(sector)).saturating_sub(1) * sector;
    if limit == 0 || codec.alg == Algorithm::None {
        return (raw(), CallTime::default());
    }
    // compress into this thread's scratch buffer (mapped and warm after the first record)
    // and keep a copy in a recycled buffer of about the output's size (outbuf.rs): no
    // zero fill and no fresh pages per record, and the result held until its txg takes
    // only about the memory it needs
    let (packed, time) = SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < limit {
            s.resize(limit, 0);
        }
        let (r, time) = ws().compress_measured(codec, data, &mut s[..limit]);
        (r.map(|n| out.copy_of(&s[..n])), time)
    });
    let c = match packed {
        Ok(bytes) if saves_a_sector(bytes.len(), data.len(), sector) => {
            let hash = xxh3_64(&bytes);
            Compressed::Packed { codec, bytes: std::sync::Arc::new(bytes), hash }
        }
        Ok(_) => raw(),
        Err(squeezefs_codec::CodecError::DstTooSmall) => raw(),
        Err(e) => {
            log::warn!("compression with {codec:?} failed ({e}); storing the record raw");
            raw()
        }
    };
    (c, time)
}

/// Raw storage of `data`: its hash.
pub fn raw_of(data: &[u8]) -> Compressed {
    Compressed::Raw { hash: xxh3_64(data) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_that_saves_no_sector_is_stored_raw_and_counted() {
        let ws = Workspaces::new(Default::default());
        let out = OutPool::new(0);
        let zstd1 = Codec { alg: Algorithm::Zstd, level: 1 };
        // one sector: nothing can save a sector
        let small = vec![5u8; 512];
        assert!(matches!(compress_with(&small, zstd1, 512, || &ws, &out).0, Compressed::Raw { .. }));
        let data = vec![5u8; 8192];
        match compress_with(&data, zstd1, 512, || &ws, &out) {
            (Compressed::Packed { codec, bytes, .. }, t) => {
                assert_eq!(codec, zstd1);
                assert!(bytes.len() < 512);
                assert!(t.cpu_ns > 0 && t.wall_ns > 0, "the codec's CPU and wall time are measured: {t:?}");
            }
            _ => panic!("a run of one byte compresses"),
        }
        // noise: no sector saved, stored raw with its hash
        let mut x = 1u64;
        let noise: Vec<u8> = (0..8192)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        match compress_with(&noise, zstd1, 512, || &ws, &out).0 {
            Compressed::Raw { hash } => assert_eq!(hash, xxh3_64(&noise)),
            _ => panic!("noise does not compress"),
        }
        assert!(Policy { spec: Spec::Off, force: false, tree: 0 }.stores_raw());
        assert!(Policy { spec: Spec::Fixed(Codec::NONE), force: true, tree: 0 }.stores_raw());
        assert!(!Policy { spec: "auto".parse().unwrap(), force: false, tree: 0 }.stores_raw());
    }
}
