//! The compression-spec grammar (docs/design.md §8): one parser for mount options, properties and
//! the CLI, accepting btrfs, ZFS and thesis spellings; `Display` prints the canonical form and
//! `parse(display(x)) == x` for every spec the parser can produce.
//!
//! | input | result | canonical |
//! |---|---|---|
//! | `none`, `off` | [`Spec::Off`] | `none` |
//! | `zstd`, `zstd:N`, `zstd-N`, `zstd-fast`, `zstd-fast-N`, `zstd:fast=N` | zstd, level N / -N | `zstd:N` |
//! | `zlib`, `zlib:N`, `zlibN`, `gzip`, `gzip-N`, `gzip:N`, `deflate`, `deflate:N` | deflate | `zlib:N` |
//! | `lz4`, `lz4:fast=N`, `lz4fast-N`, `lz4-fast-N` | lz4, acceleration N | `lz4`, `lz4:fast=N` |
//! | `lz4hc`, `lz4hc:N`, `lz4hc-N` | lz4hc | `lz4hc:N` |
//! | `lzo` | lzo1x-1 (cargo feature `lzo`) | `lzo` |
//! | `auto`, `auto:MIN..MAX`, `auto:MIN..`, `auto:..MAX` | adaptive (docs/design.md §9) | `auto`, `auto:MIN..MAX` |
//! | `qos:N`, `qos-N`, `qos=N` | throughput target | `qos:N` |
//!
//! Level 0 means "the default" for zstd (3) and zlib (3), as btrfs does. Names are matched
//! case-insensitively; surrounding blanks are ignored.
//!
//! `auto` bounds: MIN and MAX are fixed codecs in any spelling above (`auto:lz4fast-20..zstd:9`,
//! `auto:zstd:-5..gzip-6`); a bare number is a zstd level (`auto:-5..9` = `auto:zstd:-5..zstd:9`).
//! An omitted bound is the default one ([`AUTO_DEFAULT_MIN`], [`AUTO_DEFAULT_MAX`]); `auto:..`
//! alone is refused (write `auto`). MIN must not be slower than MAX by the nominal speeds of
//! [`crate::nominal`] (the order the controller's ladder runs in); `none` is no bound (storing
//! raw is always open to the controller). The canonical form leaves out default bounds:
//! `auto:lz4:fast=64..zstd:9` prints as `auto:..zstd:9`.

use crate::algorithm::{Algorithm, GZIP_DEFAULT_LEVEL, ZLIB_DEFAULT_LEVEL, ZSTD_DEFAULT_LEVEL};
use crate::codec::Codec;
use crate::error::SpecError;
use crate::nominal::nominal;
use std::fmt;
use std::str::FromStr;

/// Fastest codec of a bare `auto`: lz4 at acceleration 64 still saves a little on most data
/// at several GB/s per core, the step above storing raw when the CPU is the bottleneck.
pub const AUTO_DEFAULT_MIN: Codec = Codec { alg: Algorithm::Lz4, level: 64 };
/// Strongest codec of a bare `auto`: zstd:15 (6.6 MB/s per core in docs/design.md §14) already fits
/// only devices slower than about 25 MB/s; stronger levels gain 1–2% for 3× the CPU.
pub const AUTO_DEFAULT_MAX: Codec = Codec { alg: Algorithm::Zstd, level: 15 };
/// Largest accepted `qos:N` target, MB/s.
pub const QOS_MAX_MB_PER_S: u32 = 1_000_000;
/// Largest number of codecs one codec list may expand to (`lz4:fast=1..65537` is a mistake).
pub const MAX_LIST_LEN: usize = 1000;

/// A parsed compression spec (docs/design.md §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Spec {
    /// `none` / `off`
    Off,
    /// a fixed codec, e.g. `zstd:3` (never `Codec::NONE`: that is [`Spec::Off`])
    Fixed(Codec),
    /// `auto` / `auto:MIN..MAX`: adaptive between the fixed codecs `min` (fastest) and `max`
    /// (strongest), both inclusive; storing raw is always open to the controller
    Auto { min: Codec, max: Codec },
    /// `qos:N` MB/s
    Qos { mb_per_s: u32 },
}

impl Spec {
    /// The spec for a fixed codec; `Codec::NONE` becomes [`Spec::Off`] so that specs compare
    /// by meaning.
    pub fn fixed(codec: Codec) -> Spec {
        if codec.alg == Algorithm::None {
            Spec::Off
        } else {
            Spec::Fixed(codec)
        }
    }

    /// Whether a record stored with `stored` is stored the way this spec asks, so that
    /// rewriting it with the spec would change nothing by choice (`squeezefs recompress
    /// --if-different`, background compression): `none` asks for raw records; a fixed codec
    /// for exactly that codec and level; `auto:MIN..MAX` for any codec of the range, by the
    /// nominal cost order the controller's ladder runs in (`qos:N`: the range of a bare
    /// `auto`). A raw record under a compressing spec never counts: it is raw because it did
    /// not compress at its time, or because it was written uncompressed, and only trying
    /// tells which.
    pub fn stores_as(&self, stored: Codec) -> bool {
        let in_range = |min: Codec, max: Codec| {
            if stored.alg == Algorithm::None || stored.validate().is_err() {
                return false;
            }
            let cost = |c: Codec| nominal(c).ns_per_byte();
            let (lo, hi) = (cost(min).min(cost(max)), cost(min).max(cost(max)));
            (lo..=hi).contains(&cost(stored))
        };
        match *self {
            Spec::Off => stored.alg == Algorithm::None,
            Spec::Fixed(c) => stored == c,
            Spec::Auto { min, max } => in_range(min, max),
            Spec::Qos { .. } => in_range(AUTO_DEFAULT_MIN, AUTO_DEFAULT_MAX),
        }
    }

    /// Parse a comma-separated codec list with level ranges, as `squeezefs bench --codecs`
    /// takes it: `zstd:1..15,lz4,lz4:fast=1..17,zlib:1..9,none`. Ranges run in the written
    /// direction and skip zstd level 0. Only fixed codecs (and `none`) are allowed.
    pub fn parse_list(list: &str) -> Result<Vec<Codec>, SpecError> {
        let mut out = Vec::new();
        for item in list.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(SpecError::Malformed { spec: list.to_string(), detail: "empty item in codec list" });
            }
            match item.find("..") {
                Some(pos) if !item.to_ascii_lowercase().starts_with("auto") => expand_range(item, pos, &mut out)?,
                _ => match item.parse::<Spec>()? {
                    Spec::Off => out.push(Codec::NONE),
                    Spec::Fixed(c) => out.push(c),
                    _ => return Err(SpecError::NotFixed { spec: item.to_string() }),
                },
            }
            if out.len() > MAX_LIST_LEN {
                return Err(SpecError::Malformed {
                    spec: list.to_string(),
                    detail: "codec list expands to more than 1000 codecs",
                });
            }
        }
        Ok(out)
    }
}

/// `HEAD A..B` → codecs HEAD A, …, HEAD B (same algorithm).
fn expand_range(item: &str, pos: usize, out: &mut Vec<Codec>) -> Result<(), SpecError> {
    let (left, right) = (&item[..pos], &item[pos + 2..]);
    let head = strip_trailing_number(left);
    let malformed = |detail| SpecError::Malformed { spec: item.to_string(), detail };
    if head.len() == left.len() || right.is_empty() {
        return Err(malformed("a range needs a level on both sides, e.g. zstd:1..15"));
    }
    let first = fixed_of(left)?;
    let last = fixed_of(&format!("{head}{right}"))?;
    if first.alg != last.alg {
        return Err(malformed("both ends of a range must name the same algorithm"));
    }
    let step = if first.level <= last.level { 1 } else { -1 };
    let mut level = first.level;
    loop {
        if !(first.alg == Algorithm::Zstd && level == 0) {
            out.push(Codec { alg: first.alg, level });
            if out.len() > MAX_LIST_LEN {
                return Err(malformed("codec list expands to more than 1000 codecs"));
            }
        }
        if level == last.level {
            return Ok(());
        }
        level += step;
    }
}

fn fixed_of(s: &str) -> Result<Codec, SpecError> {
    match s.parse::<Spec>()? {
        Spec::Fixed(c) => Ok(c),
        Spec::Off => Ok(Codec::NONE),
        _ => Err(SpecError::NotFixed { spec: s.to_string() }),
    }
}

/// `zstd:-5` → `zstd:`, `lz4:fast=17` → `lz4:fast=`, `zstd-fast-3` → `zstd-fast-`.
fn strip_trailing_number(s: &str) -> &str {
    let digits = s.trim_end_matches(|c: char| c.is_ascii_digit());
    if digits.len() == s.len() {
        return s;
    }
    match digits.strip_suffix('-') {
        Some(rest) if rest.ends_with(':') || rest.ends_with('=') => rest,
        _ => digits,
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Spec::Off => f.write_str("none"),
            Spec::Fixed(c) => write!(f, "{c}"),
            Spec::Auto { min: AUTO_DEFAULT_MIN, max: AUTO_DEFAULT_MAX } => f.write_str("auto"),
            Spec::Auto { min, max: AUTO_DEFAULT_MAX } => write!(f, "auto:{min}.."),
            Spec::Auto { min: AUTO_DEFAULT_MIN, max } => write!(f, "auto:..{max}"),
            Spec::Auto { min, max } => write!(f, "auto:{min}..{max}"),
            Spec::Qos { mb_per_s } => write!(f, "qos:{mb_per_s}"),
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.alg {
            Algorithm::None => f.write_str("none"),
            Algorithm::Lzo => f.write_str("lzo"),
            Algorithm::Lz4 if self.level == 1 => f.write_str("lz4"),
            Algorithm::Lz4 => write!(f, "lz4:fast={}", self.level),
            Algorithm::Lz4Hc => write!(f, "lz4hc:{}", self.level),
            Algorithm::Deflate => write!(f, "zlib:{}", self.level),
            Algorithm::Zstd => write!(f, "zstd:{}", self.level),
        }
    }
}

impl FromStr for Codec {
    type Err = SpecError;
    /// A single fixed codec (`none` included).
    fn from_str(s: &str) -> Result<Codec, SpecError> {
        fixed_of(s)
    }
}

impl FromStr for Spec {
    type Err = SpecError;

    fn from_str(input: &str) -> Result<Spec, SpecError> {
        let s = input.trim().to_ascii_lowercase();
        if s.is_empty() {
            return Err(SpecError::Empty);
        }
        let p = Parser { spec: input.trim() };
        // Longest prefixes first: "zstd-fast" before "zstd", "lz4hc" before "lz4".
        if let Some(rest) = s.strip_prefix("zstd-fast") {
            let n = match rest {
                "" => 1,
                _ => p.unsigned(rest.strip_prefix('-').ok_or_else(|| p.junk(rest))?)?,
            };
            return p.fixed(Algorithm::Zstd, -n);
        }
        if let Some(rest) = s.strip_prefix("zstd:fast=") {
            let n = p.unsigned(rest)?;
            return p.fixed(Algorithm::Zstd, -n);
        }
        if let Some(rest) = s.strip_prefix("zstd") {
            let level = match split_first(rest) {
                None => ZSTD_DEFAULT_LEVEL as i64,
                Some((":", n)) => p.signed(n)?,
                Some(("-", n)) => p.unsigned(n)?,
                _ => return Err(p.junk(rest)),
            };
            let level = if level == 0 { ZSTD_DEFAULT_LEVEL as i64 } else { level };
            return p.fixed(Algorithm::Zstd, level);
        }
        if let Some(rest) = s.strip_prefix("lz4hc") {
            let level = match split_first(rest) {
                None => Algorithm::Lz4Hc.default_level() as i64,
                Some((":" | "-", n)) => p.unsigned(n)?,
                _ => return Err(p.junk(rest)),
            };
            return p.fixed(Algorithm::Lz4Hc, level);
        }
        for prefix in ["lz4:fast=", "lz4fast-", "lz4-fast-"] {
            if let Some(rest) = s.strip_prefix(prefix) {
                let n = p.unsigned(rest)?;
                return p.fixed(Algorithm::Lz4, n);
            }
        }
        if let Some(rest) = s.strip_prefix("lz4") {
            return match rest {
                "" => p.fixed(Algorithm::Lz4, 1),
                _ => Err(SpecError::Malformed {
                    spec: p.spec.to_string(),
                    detail: "lz4 takes an acceleration as lz4:fast=N (for levels use lz4hc:N)",
                }),
            };
        }
        for (prefix, default, seps) in [
            ("zlib", ZLIB_DEFAULT_LEVEL, &[":", ""][..]),
            ("gzip", GZIP_DEFAULT_LEVEL, &["-", ":"][..]),
            ("deflate", GZIP_DEFAULT_LEVEL, &[":"][..]),
        ] {
            if let Some(rest) = s.strip_prefix(prefix) {
                if rest.is_empty() {
                    return p.fixed(Algorithm::Deflate, default as i64);
                }
                let number = seps
                    .iter()
                    .find_map(|sep| rest.strip_prefix(sep).filter(|n| sep.is_empty() || !n.is_empty()))
                    .ok_or_else(|| p.junk(rest))?;
                let level = p.unsigned(number)?;
                let level = if level == 0 { default as i64 } else { level };
                return p.fixed(Algorithm::Deflate, level);
            }
        }
        if let Some(rest) = s.strip_prefix("lzo") {
            return match rest {
                "" => p.fixed(Algorithm::Lzo, 0),
                _ => Err(SpecError::Malformed { spec: p.spec.to_string(), detail: "lzo takes no level" }),
            };
        }
        if s == "none" || s == "off" {
            return Ok(Spec::Off);
        }
        if s.starts_with("none") || s.starts_with("off") {
            return Err(SpecError::Malformed { spec: p.spec.to_string(), detail: "none/off take no level" });
        }
        if let Some(rest) = s.strip_prefix("auto") {
            if rest.is_empty() {
                return Ok(Spec::Auto { min: AUTO_DEFAULT_MIN, max: AUTO_DEFAULT_MAX });
            }
            let range = rest.strip_prefix(':').ok_or_else(|| p.junk(rest))?;
            let (a, b) = range.split_once("..").ok_or(SpecError::Malformed {
                spec: p.spec.to_string(),
                detail: "auto takes a range MIN..MAX of fixed codecs, e.g. auto:lz4fast-20..zstd:9, auto:..zstd:9",
            })?;
            if a.is_empty() && b.is_empty() {
                return Err(SpecError::Malformed {
                    spec: p.spec.to_string(),
                    detail: "auto:.. names no bound; write auto for the default range",
                });
            }
            let min = if a.is_empty() { AUTO_DEFAULT_MIN } else { auto_bound(a)? };
            let max = if b.is_empty() { AUTO_DEFAULT_MAX } else { auto_bound(b)? };
            if nominal(min).compress_mb_s < nominal(max).compress_mb_s {
                return Err(SpecError::BadAutoRange { min: min.to_string(), max: max.to_string() });
            }
            return Ok(Spec::Auto { min, max });
        }
        if let Some(rest) = s.strip_prefix("qos") {
            let n = match split_first(rest) {
                Some((":" | "-" | "=", n)) => p.unsigned(n)?,
                _ => {
                    return Err(SpecError::Malformed {
                        spec: p.spec.to_string(),
                        detail: "qos needs a target in MB/s, e.g. qos:50",
                    })
                }
            };
            if !(1..=QOS_MAX_MB_PER_S as i64).contains(&n) {
                return Err(SpecError::QosOutOfRange { value: n });
            }
            return Ok(Spec::Qos { mb_per_s: n as u32 });
        }
        let name: String = s.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        Err(SpecError::UnknownName { name: if name.is_empty() { s } else { name } })
    }
}

/// One bound of `auto:MIN..MAX`: a bare (signed) number is a zstd level, anything else a
/// fixed codec other than `none`.
fn auto_bound(text: &str) -> Result<Codec, SpecError> {
    let t = text.trim();
    let digits = t.strip_prefix('-').unwrap_or(t);
    let codec = if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        // a bare 0 is refused rather than read as "the default level"
        let level = Parser { spec: t }.signed(t)?;
        let level = i32::try_from(level).map_err(|_| SpecError::LevelOutOfRange { alg: Algorithm::Zstd, level })?;
        Codec::zstd(level)?
    } else {
        match t.parse::<Spec>()? {
            Spec::Fixed(c) => c,
            _ => return Err(SpecError::BadAutoBound { bound: t.to_string() }),
        }
    };
    if codec.alg == Algorithm::None {
        return Err(SpecError::BadAutoBound { bound: t.to_string() });
    }
    Ok(codec)
}

/// `rest` split after its first character (None only when `rest` is empty). Not
/// `split_at_checked(1)`: that is also None when the first character is not ASCII, which
/// made `zstdé` parse as plain `zstd`.
fn split_first(rest: &str) -> Option<(&str, &str)> {
    let c = rest.chars().next()?;
    Some(rest.split_at(c.len_utf8()))
}

/// Number parsing with errors that quote the whole spec.
struct Parser<'a> {
    spec: &'a str,
}

impl Parser<'_> {
    fn bad_number(&self, text: &str) -> SpecError {
        SpecError::BadNumber { spec: self.spec.to_string(), text: text.to_string() }
    }

    fn junk(&self, rest: &str) -> SpecError {
        let _ = rest;
        SpecError::Malformed { spec: self.spec.to_string(), detail: "unexpected text after the algorithm name" }
    }

    /// Digits only (no sign), at most 12 of them so that i64 cannot overflow.
    fn unsigned(&self, text: &str) -> Result<i64, SpecError> {
        if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.bad_number(text));
        }
        text.parse().map_err(|_| self.bad_number(text))
    }

    /// An optional `-` then digits.
    fn signed(&self, text: &str) -> Result<i64, SpecError> {
        match text.strip_prefix('-') {
            Some(digits) => self.unsigned(digits).map(|n| -n).map_err(|_| self.bad_number(text)),
            None => self.unsigned(text),
        }
    }

    fn fixed(&self, alg: Algorithm, level: i64) -> Result<Spec, SpecError> {
        let level = i32::try_from(level).map_err(|_| SpecError::LevelOutOfRange { alg, level })?;
        Codec::new(alg, level).map(Spec::fixed)
    }
}
