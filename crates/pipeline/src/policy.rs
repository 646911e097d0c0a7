//! Compression policy and the per-record compress step (runs on a worker).
//!
//! A policy is a [`Spec`] plus `force`: the mount-wide one, or a file's own, which the fs
//! core resolves from properties and states with each write (dirty.rs `FileData::policy`).
//! `Spec::Auto` and `Spec::Qos` map to zstd:3 until the auto/qos controllers land (a later
//! issue): they are accepted and stored, and data is compressed with the controllers'
//! starting level.

use crate::outbuf::{OutBytes, OutPool};
use squeezefs_codec::heuristic::{self, is_zeros};
use squeezefs_codec::{saves_a_sector, Algorithm, Codec, Spec, Workspaces};
use xxhash_rust::xxh3::xxh3_64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub spec: Spec,
    pub force: bool,
}

/// What a write says about its file's compression (`FileData::policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stated {
    /// the file keeps the policy it has (the pool's unless one was set)
    Keep,
    /// from this write on the file's data is compressed with this (`None`: the pool's)
    Is(Option<Policy>),
}

/// The starting codec of the adaptive modes until their controllers exist.
pub const ADAPTIVE_PLACEHOLDER: Codec = Codec { alg: Algorithm::Zstd, level: 3 };

impl Policy {
    /// The codec to try for a record, `None` = store raw.
    pub fn codec(&self) -> Option<Codec> {
        match self.spec {
            Spec::Off => None,
            Spec::Fixed(c) if c.alg == Algorithm::None => None,
            Spec::Fixed(c) => Some(c),
            // controllers are a later issue; see module comment
            _ => Some(ADAPTIVE_PLACEHOLDER),
        }
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

/// Heuristic, compression with early abort (output must save a sector), checksum of what
/// will be stored. Never copies the raw record; the output goes into a buffer of `out`.
pub fn compress_record<'a>(
    data: &[u8],
    policy: Policy,
    sector: usize,
    trust_streak: bool,
    ws: impl FnOnce() -> &'a Workspaces,
    out: &std::sync::Arc<OutPool>,
) -> Compressed {
    if is_zeros(data) {
        return Compressed::Zeros;
    }
    let raw = || Compressed::Raw { hash: xxh3_64(data) };
    let Some(codec) = policy.codec() else { return raw() };
    // the sampler is skipped while the file's previous records kept compressing (the
    // codec's early abort still catches a record that does not save a sector)
    if !policy.force && !trust_streak && heuristic::assess(data) != heuristic::Verdict::Compressible {
        return raw();
    }
    // the largest output that still saves a sector: the codec aborts early beyond it
    let limit = (data.len().div_ceil(sector)).saturating_sub(1) * sector;
    if limit == 0 {
        return raw();
    }
    // compress into this thread's scratch buffer (mapped and warm after the first record)
    // and keep a copy in a recycled buffer of about the output's size (outbuf.rs): no
    // zero fill and no fresh pages per record, and the result held until its txg takes
    // only about the memory it needs
    let packed = SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < limit {
            s.resize(limit, 0);
        }
        ws().compress(codec, data, &mut s[..limit]).map(|n| out.copy_of(&s[..n]))
    });
    match packed {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_policy_stores_raw_and_zeros_become_holes() {
        let p = Policy { spec: Spec::Off, force: false };
        let no_ws = || -> &'static Workspaces { unreachable!("off never compresses") };
        let out = OutPool::new(0);
        assert!(matches!(compress_record(&[0u8; 4096], p, 512, false, no_ws, &out), Compressed::Zeros));
        let data = vec![5u8; 4096];
        match compress_record(&data, p, 512, false, no_ws, &out) {
            Compressed::Raw { hash } => assert_eq!(hash, xxh3_64(&data)),
            _ => panic!("expected raw"),
        }
    }
}
