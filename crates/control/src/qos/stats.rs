//! What `squeezefs stats` shows per QoS tree: target, allotment, achieved throughput over the
//! last interval and since the tree was seen first, levels chosen and the ratio.
//!
//! ```text
//! STATE per tree (`TreeStats`): bytes admitted in each of the last INTERVAL_SECS one-second
//!   buckets (a ring indexed by whole seconds of `now`) and in total since `since`; per codec,
//!   input and stored bytes of the tree's records written (fed after compression).
//! ROW (`TreeStats::row`): achieved over the last interval = the ring's bytes over the seconds
//!   it covers (fewer while the tree is younger than the interval); since mount = total over
//!   the time since `since`; ratio = Σ input / Σ stored; levels by input bytes, most used first.
//! TEXT (`StatsRow` Display / `parse`): one line of `key=value` fields, the form the daemon
//!   serves as the virtual xattr `user.squeezefs.qos` of the tree's directory and the CLI
//!   parses back:
//!     tree=42 target=50000000 allotted=50000000 last_bps=49800000 mean_bps=49950000
//!     ratio=4.212 levels=zstd:9/123456/29311,zstd:8/2345/561
//!   (rates in bytes/s; levels as codec/input/stored). Unknown keys are ignored by `parse`
//!   (a newer daemon may add some); a missing or malformed known key is an error naming it.
//! TUNABLE: INTERVAL_SECS 10 (the issue's 10 s windows).
//! ```

use super::admission::TreeId;
use squeezefs_codec::Codec;
use std::fmt;

/// The "last interval" of the stats, seconds.
pub const INTERVAL_SECS: usize = 10;

/// Counters of one tree (see the block comment).
#[derive(Clone, Debug)]
pub struct TreeStats {
    since: f64,
    ring: [u64; INTERVAL_SECS],
    /// the whole second each ring slot holds
    ring_sec: [i64; INTERVAL_SECS],
    total: u64,
    levels: Vec<(Codec, u64, u64)>,
}

/// One tree's line of `squeezefs stats`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsRow {
    pub tree: TreeId,
    pub target_bps: f64,
    pub allotted_bps: f64,
    /// achieved over the last interval
    pub last_bps: f64,
    /// achieved since the tree was first seen (mount, or the property was set)
    pub mean_bps: f64,
    pub ratio: f64,
    /// (codec, input bytes, stored bytes), most input first
    pub levels: Vec<(Codec, u64, u64)>,
}

impl TreeStats {
    pub fn new(now: f64) -> TreeStats {
        TreeStats {
            since: now,
            ring: [0; INTERVAL_SECS],
            ring_sec: [i64::MIN; INTERVAL_SECS],
            total: 0,
            levels: vec![],
        }
    }

    /// `bytes` were admitted into the tree at `now`.
    pub fn admitted(&mut self, bytes: u64, now: f64) {
        let sec = now.floor() as i64;
        let i = sec.rem_euclid(INTERVAL_SECS as i64) as usize;
        if self.ring_sec[i] != sec {
            self.ring_sec[i] = sec;
            self.ring[i] = 0;
        }
        self.ring[i] += bytes;
        self.total += bytes;
    }

    /// A record of the tree was written: `input` bytes stored as `stored` with `codec`.
    pub fn written(&mut self, codec: Codec, input: u64, stored: u64) {
        match self.levels.iter_mut().find(|l| l.0 == codec) {
            Some(l) => {
                l.1 += input;
                l.2 += stored;
            }
            None => self.levels.push((codec, input, stored)),
        }
    }

    /// The tree's line at `now`.
    pub fn row(&self, tree: TreeId, target_bps: f64, allotted_bps: f64, now: f64) -> StatsRow {
        let sec = now.floor() as i64;
        // the last full seconds plus the current one, not before the tree was first seen
        let first = (sec - INTERVAL_SECS as i64 + 1).max(self.since.floor() as i64);
        let bytes: u64 = (0..INTERVAL_SECS)
            .filter(|&i| self.ring_sec[i] >= first && self.ring_sec[i] <= sec)
            .map(|i| self.ring[i])
            .sum();
        let span = (now - (first as f64).max(self.since)).max(1e-9);
        let age = (now - self.since).max(1e-9);
        let mut levels = self.levels.clone();
        levels.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.to_string().cmp(&b.0.to_string())));
        let (input, stored) = levels.iter().fold((0u64, 0u64), |(i, s), l| (i + l.1, s + l.2));
        StatsRow {
            tree,
            target_bps,
            allotted_bps,
            last_bps: bytes as f64 / span,
            mean_bps: self.total as f64 / age,
            ratio: if stored == 0 { 1.0 } else { input as f64 / stored as f64 },
            levels,
        }
    }
}

impl StatsRow {
    /// This row with `levels` (codec, input, stored) as the tree's records written, and the
    /// ratio they give: for callers that count the records apart from the admitted bytes.
    pub fn with_levels(mut self, mut levels: Vec<(Codec, u64, u64)>) -> StatsRow {
        levels.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.to_string().cmp(&b.0.to_string())));
        let (input, stored) = levels.iter().fold((0u64, 0u64), |(i, s), l| (i + l.1, s + l.2));
        self.ratio = if stored == 0 { 1.0 } else { input as f64 / stored as f64 };
        self.levels = levels;
        self
    }
}

impl fmt::Display for StatsRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tree={} target={:.0} allotted={:.0} last_bps={:.0} mean_bps={:.0} ratio={:.3} levels=",
            self.tree, self.target_bps, self.allotted_bps, self.last_bps, self.mean_bps, self.ratio
        )?;
        for (k, (c, i, s)) in self.levels.iter().enumerate() {
            write!(f, "{}{c}/{i}/{s}", if k > 0 { "," } else { "" })?;
        }
        Ok(())
    }
}

/// Errors of reading a stats line back.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StatsParseError {
    #[error("qos stats line lacks {0}=")]
    Missing(&'static str),
    #[error("qos stats field {key}: {value:?} is not {what}")]
    Bad { key: &'static str, value: String, what: &'static str },
}

impl StatsRow {
    /// Read a line written by `Display`.
    pub fn parse(line: &str) -> Result<StatsRow, StatsParseError> {
        let fields: Vec<(&str, &str)> = line.split_ascii_whitespace().filter_map(|f| f.split_once('=')).collect();
        let get =
            |key: &'static str| fields.iter().find(|f| f.0 == key).map(|f| f.1).ok_or(StatsParseError::Missing(key));
        let num = |key: &'static str| -> Result<f64, StatsParseError> {
            let v = get(key)?;
            v.parse::<f64>().ok().filter(|x| x.is_finite()).ok_or_else(|| StatsParseError::Bad {
                key,
                value: v.to_string(),
                what: "a number",
            })
        };
        let tree = get("tree")?;
        let tree = tree.parse::<TreeId>().map_err(|_| StatsParseError::Bad {
            key: "tree",
            value: tree.to_string(),
            what: "an inode number",
        })?;
        let mut levels = Vec::new();
        let lv = get("levels")?;
        for item in lv.split(',').filter(|s| !s.is_empty()) {
            let bad = || StatsParseError::Bad { key: "levels", value: item.to_string(), what: "codec/input/stored" };
            let mut p = item.rsplitn(3, '/');
            let (s, i, c) = (p.next().ok_or_else(bad)?, p.next().ok_or_else(bad)?, p.next().ok_or_else(bad)?);
            let codec: Codec = c.parse().map_err(|_| bad())?;
            levels.push((codec, i.parse().map_err(|_| bad())?, s.parse().map_err(|_| bad())?));
        }
        Ok(StatsRow {
            tree,
            target_bps: num("target")?,
            allotted_bps: num("allotted")?,
            last_bps: num("last_bps")?,
            mean_bps: num("mean_bps")?,
            ratio: num("ratio")?,
            levels,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_codec::Algorithm;

    const Z9: Codec = Codec { alg: Algorithm::Zstd, level: 9 };
    const Z8: Codec = Codec { alg: Algorithm::Zstd, level: 8 };

    #[test]
    fn last_interval_and_since_the_start() {
        let mut s = TreeStats::new(100.0);
        // 5 MB/s for 20 s, then 20 MB/s for 10 s
        for k in 0..200 {
            s.admitted(500_000, 100.0 + k as f64 * 0.1);
        }
        for k in 0..100 {
            s.admitted(2_000_000, 120.0 + k as f64 * 0.1);
        }
        let r = s.row(7, 20e6, 20e6, 130.0);
        assert!((r.last_bps - 20e6).abs() < 0.25e6, "{r:?}");
        assert!((r.mean_bps - 10e6).abs() < 0.1e6, "{r:?}");
        // a young tree: the interval is its age
        let mut y = TreeStats::new(50.0);
        y.admitted(1_000_000, 50.5);
        y.admitted(1_000_000, 51.5);
        let r = y.row(1, 1e6, 1e6, 52.0);
        assert!((r.last_bps - 1e6).abs() < 1.0 && (r.mean_bps - 1e6).abs() < 1.0, "{r:?}");
        // nothing lately: the ring forgets
        let r = y.row(1, 1e6, 1e6, 80.0);
        assert_eq!(r.last_bps, 0.0);
    }

    #[test]
    fn rows_round_trip_and_bad_lines_name_the_field() {
        let mut s = TreeStats::new(0.0);
        s.admitted(10_000_000, 0.5);
        s.written(Z8, 1000, 300);
        s.written(Z9, 4000, 1000);
        s.written(Z8, 1000, 200);
        let r = s.row(42, 50e6, 45e6, 1.0);
        assert_eq!(r.levels, vec![(Z9, 4000, 1000), (Z8, 2000, 500)]);
        assert!((r.ratio - 4.0).abs() < 1e-9);
        let text = r.to_string();
        assert_eq!(
            text,
            "tree=42 target=50000000 allotted=45000000 last_bps=10000000 mean_bps=10000000 ratio=4.000 \
             levels=zstd:9/4000/1000,zstd:8/2000/500"
        );
        assert_eq!(StatsRow::parse(&text).unwrap(), r);
        assert_eq!(StatsRow::parse(&format!("{text} future=1")).unwrap(), r, "unknown keys are ignored");
        assert_eq!(StatsRow::parse("tree=1 target=5"), Err(StatsParseError::Missing("levels")));
        let e = StatsRow::parse(&text.replace("ratio=4.000", "ratio=lots")).unwrap_err();
        assert_eq!(e.to_string(), "qos stats field ratio: \"lots\" is not a number");
        let e = StatsRow::parse(&text.replace("zstd:8/2000/500", "zstd:99/2/1")).unwrap_err();
        assert!(e.to_string().contains("levels"), "{e}");
        let again = TreeStats::new(0.0).row(42, 50e6, 45e6, 1.0).with_levels(vec![(Z8, 2000, 500), (Z9, 4000, 1000)]);
        assert_eq!((again.levels, again.ratio), (r.levels.clone(), r.ratio), "with_levels sorts and sums");
        let empty = TreeStats::new(0.0).row(3, 1e6, 0.0, 0.0);
        assert_eq!(StatsRow::parse(&empty.to_string()).unwrap(), empty);
    }
}
