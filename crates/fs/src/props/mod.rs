//! Properties of files and directories (docs/design.md §10): their names, the grammar of their
//! values, the canonical text a value is stored as, and which kinds of inode take them.
//! Pure functions, no I/O; the CLI uses the same parser to refuse a bad value before it
//! reaches the daemon, and the daemon refuses it again (EINVAL) whatever sent it.
//!
//! | property | values | on |
//! |---|---|---|
//! | `compression` | the compression-spec grammar (`zstd:9`, `gzip-6`, `lz4`, `none`, …) | files, directories |
//! | `compress-force` | `on` / `off` (also `yes`/`no`, `true`/`false`, `1`/`0`) | files, directories |
//! | `recordsize` | power of two 4K … 1M (`128K`, `1M`, `65536`) | files, directories |
//! | `background_compression` | a fixed codec of the spec grammar, or `none` | files, directories |
//! | `qos` | a rate: `50` or `50M` (MB/s), `1G`, `500K`, `1048576B`, `64MiB`; `qos:N`, `qos-N`; `none` clears | directories |
//!
//! Rates use decimal units (`M` = 10⁶ bytes/s, as MB/s is quoted everywhere else in
//! squeezefs); `KiB`/`MiB`/`GiB` are binary; a bare number is MB/s.
//!
//! A value is stored as the extended attribute `user.squeezefs.NAME` holding its canonical
//! text (`Value`'s `Display`; `parse(display(v)) == v`), so `zstd-9` is stored as `zstd:9`.

#[cfg(test)]
mod engine_tests;
pub(crate) mod inherit;
pub(crate) mod qos;
use squeezefs_codec::Spec;
use squeezefs_pipeline::FileKind;
use std::fmt;

/// Prefix of the extended attributes that hold properties.
pub const XATTR_PREFIX: &str = "user.squeezefs.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prop {
    Compression,
    CompressForce,
    Recordsize,
    BackgroundCompression,
    Qos,
}

/// Every property, in the order `prop get` lists them.
pub const ALL: [Prop; 5] =
    [Prop::Compression, Prop::CompressForce, Prop::Recordsize, Prop::BackgroundCompression, Prop::Qos];

/// The names, for messages.
pub const NAMES: &str = "compression, compress-force, recordsize, background_compression, qos";

const MIN_RECORD: u64 = 4 << 10;
const MAX_RECORD: u64 = 1 << 20;
/// Rates below one page per second or above 1 TB/s are mistakes.
const MIN_RATE: u64 = 4096;
const MAX_RATE: u64 = 1_000_000_000_000;

impl Prop {
    pub fn name(self) -> &'static str {
        match self {
            Prop::Compression => "compression",
            Prop::CompressForce => "compress-force",
            Prop::Recordsize => "recordsize",
            Prop::BackgroundCompression => "background_compression",
            Prop::Qos => "qos",
        }
    }

    /// The extended attribute holding the property's local value.
    pub fn xattr(self) -> &'static str {
        match self {
            Prop::Compression => "user.squeezefs.compression",
            Prop::CompressForce => "user.squeezefs.compress-force",
            Prop::Recordsize => "user.squeezefs.recordsize",
            Prop::BackgroundCompression => "user.squeezefs.background_compression",
            Prop::Qos => "user.squeezefs.qos",
        }
    }

    /// Position in [`ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// By name; `compress_force` and `background-compression` are accepted too.
    pub fn from_name(name: &str) -> Option<Prop> {
        let n = name.trim().to_ascii_lowercase().replace('_', "-");
        ALL.into_iter().find(|p| p.name().replace('_', "-") == n)
    }

    /// The property an extended-attribute name holds, if it is one.
    pub fn from_xattr(name: &[u8]) -> Option<Prop> {
        ALL.into_iter().find(|p| p.xattr().as_bytes() == name)
    }

    /// Accepted values, for messages.
    pub fn accepted(self) -> &'static str {
        match self {
            Prop::Compression => squeezefs_codec::ACCEPTED_FORMS,
            Prop::CompressForce => "on | off (or yes/no, true/false, 1/0)",
            Prop::Recordsize => "a power of two from 4K to 1M, e.g. 16K, 128K, 1M or 131072",
            Prop::BackgroundCompression => "none, or a fixed codec such as zstd:15, zlib:9, lz4 (not auto or qos)",
            Prop::Qos => "none, or a rate: 50 (MB/s), 50M, 1G, 500K, 64MiB, 1048576B, qos:50, qos-50",
        }
    }

    /// What the property does, for `prop list`.
    pub fn describe(self) -> &'static str {
        match self {
            Prop::Compression => "codec and level of data written from now on",
            Prop::CompressForce => "compress every record, skipping the compressibility check",
            Prop::Recordsize => "record size of files created from now on (a file's own is fixed once it holds data)",
            Prop::BackgroundCompression => {
                "codec that background compression converts data to while the mount is idle (bg-idle=)"
            }
            Prop::Qos => "write-rate target of a directory tree: writes paced to it, levels chosen to meet it",
        }
    }

    /// Whether an inode of `kind` may carry the property. `qos` paces a directory tree
    /// (one token bucket per tree), so only directories take it.
    pub fn applies_to(self, kind: FileKind) -> bool {
        match self {
            Prop::Qos => kind == FileKind::Dir,
            _ => kind == FileKind::File || kind == FileKind::Dir,
        }
    }

    /// The kinds of inode that take the property, for messages.
    pub fn kinds(self) -> &'static str {
        match self {
            Prop::Qos => "directories",
            _ => "regular files and directories",
        }
    }
}

impl fmt::Display for Prop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A property value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// `compression`, `background_compression`
    Spec(Spec),
    /// `compress-force`
    Bool(bool),
    /// `recordsize`, bytes
    Size(u32),
    /// `qos`, bytes per second; `None` = no target
    Rate(Option<u64>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Value::Spec(s) => write!(f, "{s}"),
            Value::Bool(true) => f.write_str("on"),
            Value::Bool(false) => f.write_str("off"),
            Value::Size(b) if b % (1 << 20) == 0 => write!(f, "{}M", b >> 20),
            Value::Size(b) => write!(f, "{}K", b >> 10),
            Value::Rate(None) => f.write_str("none"),
            Value::Rate(Some(r)) => {
                for (unit, m) in [("G", 1_000_000_000u64), ("M", 1_000_000), ("K", 1_000)] {
                    if r % m == 0 {
                        return write!(f, "{}{unit}", r / m);
                    }
                }
                write!(f, "{r}B")
            }
        }
    }
}

impl Value {
    pub fn spec(self) -> Option<Spec> {
        match self {
            Value::Spec(s) => Some(s),
            _ => None,
        }
    }

    pub fn flag(self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
}

/// Errors of property names, values and targets (the daemon answers them with EINVAL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PropError {
    #[error("unknown property '{0}' (properties: {NAMES})")]
    Unknown(String),
    /// `accepted` is `None` when `reason` already lists the accepted forms (spec errors do)
    #[error("{prop}={value:?}: {reason}{}", accepted.map(|a| format!("; accepted: {a}")).unwrap_or_default())]
    BadValue { prop: Prop, value: String, reason: String, accepted: Option<&'static str> },
    #[error("{prop} applies to {kinds}, not to a {kind}")]
    WrongKind { prop: Prop, kinds: &'static str, kind: &'static str },
}

/// Name of an inode kind, for messages.
pub fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "regular file",
        FileKind::Dir => "directory",
        FileKind::Symlink => "symbolic link",
        _ => "special file",
    }
}

/// Refuse `prop` on an inode of `kind`.
pub fn check_kind(prop: Prop, kind: FileKind) -> Result<(), PropError> {
    if prop.applies_to(kind) {
        Ok(())
    } else {
        Err(PropError::WrongKind { prop, kinds: prop.kinds(), kind: kind_name(kind) })
    }
}

/// Parse a value of `prop` from an extended attribute's bytes.
pub fn parse_bytes(prop: Prop, value: &[u8]) -> Result<Option<Value>, PropError> {
    match std::str::from_utf8(value) {
        Ok(s) if !s.contains('\0') => parse(prop, s),
        _ => Err(bad(prop, &String::from_utf8_lossy(value), "not UTF-8 text")),
    }
}

fn bad(prop: Prop, value: &str, reason: impl Into<String>) -> PropError {
    PropError::BadValue { prop, value: value.to_string(), reason: reason.into(), accepted: Some(prop.accepted()) }
}

/// A spec error, whose text names the accepted forms already.
fn bad_spec(prop: Prop, value: &str, e: squeezefs_codec::SpecError) -> PropError {
    PropError::BadValue { prop, value: value.to_string(), reason: e.to_string(), accepted: None }
}

/// Parse a value of `prop`. `Ok(None)` means "no local value" (`qos=none` clears it: a tree
/// below a rate limit cannot leave it, so `none` on a subdirectory is the same as inheriting).
pub fn parse(prop: Prop, text: &str) -> Result<Option<Value>, PropError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(bad(prop, text, "empty value (to drop a local value use `squeezefs prop inherit` or setfattr -x)"));
    }
    match prop {
        Prop::Compression => t.parse::<Spec>().map(|s| Some(Value::Spec(s))).map_err(|e| bad_spec(prop, text, e)),
        Prop::BackgroundCompression => match t.parse::<Spec>() {
            Ok(s @ (Spec::Off | Spec::Fixed(_))) => Ok(Some(Value::Spec(s))),
            Ok(_) => Err(bad(prop, text, "rewriting at idle time needs one fixed codec")),
            Err(e) => Err(bad_spec(prop, text, e)),
        },
        Prop::CompressForce => match t.to_ascii_lowercase().as_str() {
            "on" | "yes" | "true" | "1" => Ok(Some(Value::Bool(true))),
            "off" | "no" | "false" | "0" => Ok(Some(Value::Bool(false))),
            _ => Err(bad(prop, text, "not a switch")),
        },
        Prop::Recordsize => parse_recordsize(t).map(|b| Some(Value::Size(b))).map_err(|r| bad(prop, text, r)),
        Prop::Qos => parse_rate(t).map(|r| r.map(|r| Value::Rate(Some(r)))).map_err(|r| bad(prop, text, r)),
    }
}

/// Split `12.5MiB` into (`12.5`, `mib`), lowercased unit.
fn number_and_unit(t: &str) -> (String, String) {
    let t = t.to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    (t[..split].to_string(), t[split..].trim().to_string())
}

/// `128K`, `1M`, `131072`, `64KiB`: a power of two within 4 KiB..=1 MiB, in bytes.
pub fn parse_recordsize(t: &str) -> Result<u32, String> {
    let (num, unit) = number_and_unit(t);
    let mult: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        _ => return Err(format!("unknown unit '{unit}'")),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || num.len() > 12 {
        return Err("not a whole number of bytes, KiB or MiB".into());
    }
    let n: u64 = num.parse().map_err(|_| "not a number".to_string())?;
    let bytes = n.saturating_mul(mult);
    if !bytes.is_power_of_two() || !(MIN_RECORD..=MAX_RECORD).contains(&bytes) {
        return Err(format!("{bytes} bytes is not a power of two from 4K to 1M"));
    }
    Ok(bytes as u32)
}

/// A rate in bytes per second; `None` for `none`/`off`.
pub fn parse_rate(t: &str) -> Result<Option<u64>, String> {
    let l = t.to_ascii_lowercase();
    let body = ["qos:", "qos-", "qos="].iter().find_map(|p| l.strip_prefix(p)).unwrap_or(&l);
    if body == "none" || body == "off" {
        return Ok(None);
    }
    let body = body.strip_suffix("/s").unwrap_or(body);
    let (num, unit) = number_and_unit(body);
    let mult: f64 = match unit.as_str() {
        "" | "m" | "mb" => 1e6,
        "b" => 1.0,
        "k" | "kb" => 1e3,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1048576.0,
        "gib" => 1073741824.0,
        _ => return Err(format!("unknown unit '{unit}'")),
    };
    let well_formed = !num.is_empty() && num.len() <= 16 && num.matches('.').count() <= 1 && num != ".";
    let n: f64 = match num.parse() {
        Ok(n) if well_formed => n,
        _ => return Err("not a number".into()),
    };
    let bytes = (n * mult).round();
    if !(MIN_RATE as f64..=MAX_RATE as f64).contains(&bytes) {
        return Err(format!("{bytes} bytes/s is outside 4096 bytes/s … 1 TB/s"));
    }
    Ok(Some(bytes as u64))
}

/// The values an inode carries itself (its `user.squeezefs.*` attributes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalProps {
    pub values: [Option<Value>; 5],
}

impl LocalProps {
    pub fn get(&self, p: Prop) -> Option<Value> {
        self.values[p.index()]
    }

    pub fn set(&mut self, p: Prop, v: Option<Value>) {
        self.values[p.index()] = v;
    }

    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }
}

/// Where an effective value comes from (`zfs get`'s SOURCE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Local,
    /// set on this ancestor directory
    Inherited(squeezefs_pipeline::Ino),
    /// the mount's option (`compress=`, `compress-force=`, `recordsize=`, `qos=`)
    Mount,
    Default,
    /// `recordsize` of a regular file whose records have another size than it would get
    /// now: the size it was given when it was created (or last emptied and set), which its
    /// data keeps (inherit.rs `effective`)
    Fixed,
}

/// Effective values of every property of one inode, with their sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effective {
    pub values: [(Value, Source); 5],
}

impl Effective {
    pub fn get(&self, p: Prop) -> (Value, Source) {
        self.values[p.index()]
    }

    /// What an inode below `dir` inherits from `dir` (whose effective values are `self`):
    /// `dir`'s own values become "inherited from dir", the rest stays as it is.
    pub fn inherited_from(&self, dir: squeezefs_pipeline::Ino) -> Effective {
        let mut e = *self;
        for (_, src) in e.values.iter_mut() {
            if *src == Source::Local {
                *src = Source::Inherited(dir);
            }
        }
        e
    }

    /// These values with an inode's own laid over them.
    pub fn with_local(&self, local: &LocalProps) -> Effective {
        let mut e = *self;
        for p in ALL {
            if let Some(v) = local.get(p) {
                e.values[p.index()] = (v, Source::Local);
            }
        }
        e
    }

    /// The compression policy handed to the engine: `None` when neither `compression` nor
    /// `compress-force` is set on the inode or an ancestor (the engine's mount-wide policy
    /// applies, which a remount changes).
    pub fn engine_policy(&self) -> Option<(Spec, bool)> {
        let (c, cs) = self.get(Prop::Compression);
        let (f, fs) = self.get(Prop::CompressForce);
        let from_tree = |s: Source| matches!(s, Source::Local | Source::Inherited(_));
        if !from_tree(cs) && !from_tree(fs) {
            return None;
        }
        Some((c.spec().unwrap_or(Spec::Off), f.flag().unwrap_or(false)))
    }
}

/// Text of the `user.squeezefs.effective` virtual attribute: a header line, then one line
/// per property, `NAME<TAB>VALUE<TAB>SOURCE` with SOURCE `local`, `inherited INO`, `mount`,
/// `default` or (a file's `recordsize` only) `fixed`.
pub const EFFECTIVE_HEADER: &str = "squeezefs-props 1";

pub fn encode_effective(e: &Effective) -> Vec<u8> {
    let mut s = String::from(EFFECTIVE_HEADER);
    s.push('\n');
    for p in ALL {
        let (v, src) = e.get(p);
        let src = match src {
            Source::Local => "local".to_string(),
            Source::Inherited(ino) => format!("inherited {ino}"),
            Source::Mount => "mount".to_string(),
            Source::Default => "default".to_string(),
            Source::Fixed => "fixed".to_string(),
        };
        s.push_str(&format!("{}\t{v}\t{src}\n", p.name()));
    }
    s.into_bytes()
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EffectiveDecodeError {
    #[error("property table does not start with '{EFFECTIVE_HEADER}' (daemon of another version?)")]
    BadHeader,
    #[error("malformed property row '{0}' (expected 'NAME<TAB>VALUE<TAB>SOURCE')")]
    BadRow(String),
}

/// Rows of `user.squeezefs.effective`: (property, canonical value text, source).
pub fn decode_effective(bytes: &[u8]) -> Result<Vec<(Prop, String, Source)>, EffectiveDecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|_| EffectiveDecodeError::BadHeader)?;
    let mut lines = text.lines();
    if lines.next() != Some(EFFECTIVE_HEADER) {
        return Err(EffectiveDecodeError::BadHeader);
    }
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let bad = || EffectiveDecodeError::BadRow(l.to_string());
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() != 3 {
                return Err(bad());
            }
            let prop = Prop::from_name(f[0]).ok_or_else(bad)?;
            let src = match f[2] {
                "local" => Source::Local,
                "mount" => Source::Mount,
                "default" => Source::Default,
                "fixed" => Source::Fixed,
                s => Source::Inherited(s.strip_prefix("inherited ").and_then(|n| n.parse().ok()).ok_or_else(bad)?),
            };
            Ok((prop, f[1].to_string(), src))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_codec::{Algorithm, Codec};

    fn ok(p: Prop, t: &str) -> Value {
        parse(p, t).unwrap_or_else(|e| panic!("{p}={t}: {e}")).unwrap()
    }

    #[test]
    fn names_round_trip_and_alternate_spellings() {
        for p in ALL {
            assert_eq!(Prop::from_name(p.name()), Some(p));
            assert_eq!(Prop::from_xattr(p.xattr().as_bytes()), Some(p));
            assert_eq!(p.xattr(), format!("{XATTR_PREFIX}{}", p.name()));
            assert_eq!(ALL[p.index()], p);
        }
        assert_eq!(Prop::from_name("compress_force"), Some(Prop::CompressForce));
        assert_eq!(Prop::from_name("background-compression"), Some(Prop::BackgroundCompression));
        assert_eq!(Prop::from_name("compress"), None);
        assert_eq!(Prop::from_xattr(b"user.squeezefs.usage"), None);
    }

    #[test]
    fn compression_takes_the_whole_spec_grammar_and_stores_it_canonically() {
        for (text, canon) in [
            ("zstd-9", "zstd:9"),
            ("ZSTD:19", "zstd:19"),
            ("zstd-fast-5", "zstd:-5"),
            ("gzip-6", "zlib:6"),
            ("zlib9", "zlib:9"),
            ("lz4fast-8", "lz4:fast=8"),
            ("lz4hc:9", "lz4hc:9"),
            ("off", "none"),
            (" auto ", "auto"),
            ("qos-50", "qos:50"),
        ] {
            let v = ok(Prop::Compression, text);
            assert_eq!(v.to_string(), canon, "{text}");
            assert_eq!(ok(Prop::Compression, canon), v, "canonical text parses back");
        }
        for bad in ["zstd:99", "zstd:", "brotli", "", "   ", "lz4:9"] {
            let e = parse(Prop::Compression, bad).unwrap_err();
            assert!(e.to_string().contains("accepted"), "{bad}: {e}");
        }
    }

    #[test]
    fn background_compression_takes_one_fixed_codec() {
        assert_eq!(
            ok(Prop::BackgroundCompression, "zstd-15"),
            Value::Spec(Spec::Fixed(Codec { alg: Algorithm::Zstd, level: 15 }))
        );
        assert_eq!(ok(Prop::BackgroundCompression, "none"), Value::Spec(Spec::Off));
        assert!(parse(Prop::BackgroundCompression, "auto").is_err());
        assert!(parse(Prop::BackgroundCompression, "qos:5").is_err());
    }

    #[test]
    fn switches() {
        for t in ["on", "YES", "true", "1"] {
            assert_eq!(ok(Prop::CompressForce, t), Value::Bool(true));
        }
        for t in ["off", "no", "False", "0"] {
            assert_eq!(ok(Prop::CompressForce, t), Value::Bool(false));
        }
        assert!(parse(Prop::CompressForce, "maybe").is_err());
        assert_eq!(Value::Bool(true).to_string(), "on");
    }

    #[test]
    fn record_sizes_over_the_whole_range() {
        let mut good = 0;
        for shift in 0..=24u32 {
            let b = 1u64 << shift;
            let r = parse_recordsize(&b.to_string());
            if (12..=20).contains(&shift) {
                assert_eq!(r, Ok(b as u32));
                let v = Value::Size(b as u32);
                assert_eq!(ok(Prop::Recordsize, &v.to_string()), v, "canonical {v}");
                good += 1;
            } else {
                assert!(r.is_err(), "{b}");
            }
        }
        assert_eq!(good, 9);
        assert_eq!(parse_recordsize("128K"), Ok(131072));
        assert_eq!(parse_recordsize("128kib"), Ok(131072));
        assert_eq!(parse_recordsize("1M"), Ok(1 << 20));
        for bad in ["3K", "2M", "128Q", "1.5M", "-4K", "K", "99999999999999999K"] {
            assert!(parse_recordsize(bad).is_err(), "{bad}");
        }
        assert_eq!(Value::Size(131072).to_string(), "128K");
        assert_eq!(Value::Size(1 << 20).to_string(), "1M");
    }

    #[test]
    fn rates_units_and_spellings() {
        assert_eq!(parse_rate("50"), Ok(Some(50_000_000)));
        assert_eq!(parse_rate("50M"), Ok(Some(50_000_000)));
        assert_eq!(parse_rate("50MB/s"), Ok(Some(50_000_000)));
        assert_eq!(parse_rate("qos:50"), Ok(Some(50_000_000)));
        assert_eq!(parse_rate("qos-50"), Ok(Some(50_000_000)));
        assert_eq!(parse_rate("qos=25M"), Ok(Some(25_000_000)));
        assert_eq!(parse_rate("1G"), Ok(Some(1_000_000_000)));
        assert_eq!(parse_rate("1.5g"), Ok(Some(1_500_000_000)));
        assert_eq!(parse_rate("500K"), Ok(Some(500_000)));
        assert_eq!(parse_rate("64MiB"), Ok(Some(64 << 20)));
        assert_eq!(parse_rate("1048576B"), Ok(Some(1 << 20)));
        assert_eq!(parse_rate("none"), Ok(None));
        assert_eq!(parse_rate("off"), Ok(None));
        assert_eq!(parse_rate("qos:none"), Ok(None));
        for bad in ["", "fast", "50X", "0", "1B", "2000000G", "1..5M", ".", "qos:", "-5M"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(parse(Prop::Qos, "none"), Ok(None), "none clears the local value");
        for r in [4096u64, 500_000, 50_000_000, 1_000_000_000, 1 << 20, 123_456_789] {
            let v = Value::Rate(Some(r));
            assert_eq!(ok(Prop::Qos, &v.to_string()), v, "canonical {v}");
        }
        assert_eq!(Value::Rate(Some(50_000_000)).to_string(), "50M");
        assert_eq!(Value::Rate(Some(1 << 20)).to_string(), "1048576B");
    }

    #[test]
    fn kinds() {
        for p in ALL {
            assert!(p.applies_to(FileKind::Dir));
            assert!(!p.applies_to(FileKind::Symlink));
            assert_eq!(p.applies_to(FileKind::File), p != Prop::Qos);
        }
        let e = check_kind(Prop::Qos, FileKind::File).unwrap_err();
        assert_eq!(e.to_string(), "qos applies to directories, not to a regular file");
    }

    #[test]
    fn values_that_are_not_text_are_refused() {
        assert!(parse_bytes(Prop::Compression, b"zstd\0").is_err());
        assert!(parse_bytes(Prop::Compression, &[0xff, 0xfe]).is_err());
        assert_eq!(parse_bytes(Prop::Compression, b"lz4\n").unwrap(), Some(Value::Spec("lz4".parse().unwrap())));
    }

    #[test]
    fn effective_table_round_trips() {
        let mut e = Effective {
            values: [
                (Value::Spec("zstd:9".parse().unwrap()), Source::Local),
                (Value::Bool(false), Source::Default),
                (Value::Size(131072), Source::Mount),
                (Value::Spec(Spec::Off), Source::Inherited(77)),
                (Value::Rate(None), Source::Default),
            ],
        };
        let rows = decode_effective(&encode_effective(&e)).unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0], (Prop::Compression, "zstd:9".to_string(), Source::Local));
        assert_eq!(rows[3], (Prop::BackgroundCompression, "none".to_string(), Source::Inherited(77)));
        assert!(decode_effective(b"nope").is_err());
        assert!(decode_effective(b"squeezefs-props 1\ncompression\tzstd\n").is_err());
        // inheritance: local values become "inherited from" the directory
        e = e.inherited_from(9);
        assert_eq!(e.get(Prop::Compression).1, Source::Inherited(9));
        assert_eq!(e.get(Prop::BackgroundCompression).1, Source::Inherited(77));
        assert_eq!(e.get(Prop::Recordsize).1, Source::Mount);
    }

    #[test]
    fn engine_policy_only_when_the_tree_sets_compression() {
        let base = Effective {
            values: [
                (Value::Spec("lz4".parse().unwrap()), Source::Mount),
                (Value::Bool(false), Source::Default),
                (Value::Size(131072), Source::Default),
                (Value::Spec(Spec::Off), Source::Default),
                (Value::Rate(None), Source::Default),
            ],
        };
        assert_eq!(base.engine_policy(), None);
        let mut l = LocalProps::default();
        l.set(Prop::CompressForce, Some(Value::Bool(true)));
        assert_eq!(base.with_local(&l).engine_policy(), Some(("lz4".parse().unwrap(), true)));
        l.set(Prop::Compression, Some(Value::Spec("zstd:7".parse().unwrap())));
        let child = base.with_local(&l).inherited_from(5);
        assert_eq!(child.engine_policy(), Some(("zstd:7".parse().unwrap(), true)));
    }
}
