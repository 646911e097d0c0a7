//! Where background compression stands: the durable cursor of its walk and its totals
//! (table `background`, key 0; docs/format.md "background"). Written by the fs core's
//! background worker through the engine, committed with the next txg; a pool without the
//! row has never run background compression.

use crate::encode::{Reader, Writer};
use crate::error::MetaError;
use crate::records::Ino;

pub const BG_CURSOR_VERSION: u8 = 1;
/// Deeper walks than this are damage (a directory cycle), not a tree.
const MAX_DEPTH: u32 = 100_000;
/// Longest mount-level spec text kept.
const MAX_SPEC_TEXT: u32 = 4096;

/// One directory of the walk's current path, from the root down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BgFrame {
    pub dir: Ino,
    /// the directory's cookie in its parent (0 for the root)
    pub cookie_in_parent: u64,
    /// every entry with a cookie up to this one is done
    pub done_through: u64,
}

/// The background walk's position and totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BgCursor {
    /// records born after this txg were not considered by a finished pass
    pub floor_txg: u64,
    /// the pool's txg when the running pass started; a pass considers records born in
    /// (floor, ceiling]; 0: no pass is running
    pub ceiling_txg: u64,
    /// the running pass's path (empty: it starts at the root)
    pub path: Vec<BgFrame>,
    /// the mount's background spec (canonical text) the floor holds for: another one
    /// starts again from txg 0
    pub mount_spec: String,
    /// passes finished since the pool was made
    pub passes: u64,
    /// records converted since the pool was made
    pub converted_records: u64,
    /// their bytes in the files
    pub converted_logical: u64,
    /// their stored bytes before and after
    pub converted_before: u64,
    pub converted_after: u64,
}

impl BgCursor {
    /// version, floor, ceiling, passes, converted records, logical, before, after, spec
    /// length (u32) and text, path length (u32) and per frame dir, cookie in parent,
    /// done through (u64 each).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(80 + self.mount_spec.len() + 24 * self.path.len());
        w.u8(BG_CURSOR_VERSION)
            .u64(self.floor_txg)
            .u64(self.ceiling_txg)
            .u64(self.passes)
            .u64(self.converted_records)
            .u64(self.converted_logical)
            .u64(self.converted_before)
            .u64(self.converted_after)
            .u32(self.mount_spec.len() as u32)
            .bytes(self.mount_spec.as_bytes())
            .u32(self.path.len() as u32);
        for f in &self.path {
            w.u64(f.dir).u64(f.cookie_in_parent).u64(f.done_through);
        }
        w.finish()
    }

    pub fn decode(v: &[u8]) -> Result<BgCursor, MetaError> {
        let mut r = Reader::new(v, "background cursor");
        r.version(BG_CURSOR_VERSION)?;
        let floor_txg = r.u64()?;
        let ceiling_txg = r.u64()?;
        let passes = r.u64()?;
        let converted_records = r.u64()?;
        let converted_logical = r.u64()?;
        let converted_before = r.u64()?;
        let converted_after = r.u64()?;
        let n = r.u32()?;
        if n > MAX_SPEC_TEXT {
            return Err(r.corrupt(format!("spec text of {n} bytes")));
        }
        let mount_spec = std::str::from_utf8(r.bytes(n as usize)?)
            .map_err(|_| r.corrupt("spec text is not UTF-8".into()))?
            .to_string();
        let depth = r.u32()?;
        if depth > MAX_DEPTH {
            return Err(r.corrupt(format!("path of {depth} directories")));
        }
        let mut path = Vec::with_capacity(depth as usize);
        for _ in 0..depth {
            path.push(BgFrame { dir: r.u64()?, cookie_in_parent: r.u64()?, done_through: r.u64()? });
        }
        if !r.rest().is_empty() {
            return Err(MetaError::Corrupt { what: "background cursor", detail: "trailing bytes".into() });
        }
        Ok(BgCursor {
            floor_txg,
            ceiling_txg,
            path,
            mount_spec,
            passes,
            converted_records,
            converted_logical,
            converted_before,
            converted_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cursor_round_trips(floor: u64, ceiling: u64, passes: u64, recs: u64, l: u64, b: u64, a: u64,
                              spec in "[a-z0-9:]{0,20}",
                              path in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>()), 0..8)) {
            let c = BgCursor {
                floor_txg: floor,
                ceiling_txg: ceiling,
                path: path.into_iter().map(|(dir, cookie_in_parent, done_through)| BgFrame { dir, cookie_in_parent, done_through }).collect(),
                mount_spec: spec,
                passes,
                converted_records: recs,
                converted_logical: l,
                converted_before: b,
                converted_after: a,
            };
            prop_assert_eq!(BgCursor::decode(&c.encode()).unwrap(), c);
        }
    }

    #[test]
    fn damaged_cursors_are_refused() {
        let c = BgCursor { mount_spec: "zstd:15".into(), ..Default::default() };
        let good = c.encode();
        assert!(matches!(BgCursor::decode(&good[..good.len() - 1]), Err(MetaError::Corrupt { .. })));
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(BgCursor::decode(&long), Err(MetaError::Corrupt { .. })));
        let mut newer = good;
        newer[0] = 9;
        assert!(matches!(BgCursor::decode(&newer), Err(MetaError::Version { .. })));
    }
}
