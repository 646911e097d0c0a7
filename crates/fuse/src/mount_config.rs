//! Mount options: the raw `-o` string → a validated [`MountConfig`].
//!
//! Accepted (anything else is refused before anything is mounted):
//! * squeezefs: `compress=SPEC`, `compress-force=SPEC` (codec spec grammar),
//!   `recordsize=SIZE` (power of two, 4K..1M: the record size of files created where no
//!   directory sets the `recordsize` property; default the pool's), `remount`,
//!   `qos=RATE` (also spelt `qos:RATE`, `qos-RATE`): the whole filesystem is a QoS tree
//!   paced to RATE (the `qos` property's grammar, squeezefs_fs::props: `50` or `50M` =
//!   50 MB/s, `1G`, `500K`, `64MiB`, `1048576B`; `qos=none` = no mount-wide target),
//!   `qos-burst=DURATION` (every QoS tree's bucket depth: `250ms`, `0.5s`, `1`; seconds
//!   when bare; 10 ms … 10 s; default 250 ms: how long a writer held up elsewhere keeps its
//!   tree's rate, and the largest burst above it),
//!   `uring=auto|on|off` (the FUSE-over-io_uring transport, `crate::uring`; `mount::plan_uring`:
//!   `auto` uses it for root mounts on kernels that have it, writing Y to the kernel's
//!   `enable_uring` parameter when it is N, and falls back to /dev/fuse saying why; `on`
//!   refuses to mount instead of falling back; `off` serves /dev/fuse only),
//!   `background_compression=SPEC` (the codec background compression converts data to where
//!   no directory or file sets its own; a fixed codec or `none`), `bg-idle=DURATION|off`
//!   (the idle time it waits for: `500ms`, `5s`, `2m`, `1h`, seconds when bare; 100 ms … 24 h;
//!   default 30 s; `off` stops it),
//!   `s3-timeout=DURATION` (how long a sync waits for an object store that does not take
//!   the data before writes and fsyncs get EIO; 1 s … 24 h, default 120 s), `s3-cache=SIZE`
//!   (the object device's local read cache: `0` for none, else 1M or more, e.g. `512M`,
//!   `4G`; default 1G), `s3-cache-dir=DIR` (an absolute, existing directory to keep it in;
//!   default the pool directory), `s3-backup=DURATION` (the longest time between two
//!   metadata backups into the bucket while writing; 1 s … 24 h, default 30 s),
//!   `s3-repack=DURATION` (how often the background repack looks for segments below half
//!   live; 1 s … 24 h, default 10 s); pools
//!   without an object device ignore them;
//!   `trace=FILE` (one CSV row per record compressed, crates/control trace.rs; a relative
//!   FILE is taken from the mounting process's directory, and FILE must lie in an existing
//!   directory outside the mount itself: [`MountConfig::resolve_trace`]);
//! * FUSE: `allow_other`, `default_permissions`, `fsname=NAME`;
//! * generic (as in fstab): `ro`, `rw`, `defaults`, `dev`/`nodev`, `suid`/`nosuid`,
//!   `exec`/`noexec`, `atime`/`noatime`/`relatime`/`strictatime`/`nodiratime`,
//!   `sync`/`async`/`dirsync`, and the mount(8)-only `auto`/`noauto`/`user`/`users`/
//!   `nouser`/`nofail`/`_netdev`/`x-*`/`comment=*`/`helper=*`, which are ignored.
//!
//! Remount: `compress=`, `compress-force=` and `qos=` change; everything else keeps the value the
//! filesystem was mounted with. `mount -o remount,OPTS MNT` hands the helper the live
//! mount's options from /proc/mounts followed by OPTS, so a remount also accepts the FUSE
//! kernel options only the kernel sets (`user_id=`, `group_id=`, `max_read=`, `blksize=`,
//! `rootmode=`) and restates of `ro`/`rw`, `allow_other`, `default_permissions`, `sync` and
//! `dirsync`; [`MountConfig::check_remount`] refuses those that differ from the live mount.
//! The per-mount flags `nodev`, `nosuid`, `noexec` and `noatime` do change at remount
//! ([`MountConfig::per_mount_flags`]).
//!
//! Atime words: the last of `atime`/`noatime`/`relatime`/`strictatime` wins. The kernel ORs
//! the flags of one string instead, so there `noatime,relatime` stays noatime; we follow
//! the order because the helper gets mount(8)'s merged remount string, live options first
//! and the user's last (`…,noatime,remount,relatime` means "switch to relatime"), and a
//! single mount string naming both is a contradiction either reading accepts.
use squeezefs_codec::Spec;
use squeezefs_fs::Compression;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct KernelFlags {
    pub nodev: bool,
    pub nosuid: bool,
    pub noexec: bool,
    pub noatime: bool,
    pub sync: bool,
    pub dirsync: bool,
}

/// `uring=`: which request transport the daemon serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum UringMode {
    #[default]
    Auto,
    On,
    Off,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MountConfig {
    pub compression: Option<Compression>,
    /// `qos=`: `None` when the string does not name it, `Some(None)` for `qos=none`, else
    /// the mount-wide rate in bytes/s
    pub qos: Option<Option<u64>>,
    /// `qos-burst=`: the QoS trees' bucket depth (the engine's default when `None`)
    pub qos_burst: Option<std::time::Duration>,
    /// `recordsize=`: the record size of new files where no directory sets `recordsize`
    pub recordsize: Option<u32>,
    pub read_only: bool,
    pub allow_other: bool,
    pub default_permissions: bool,
    /// change options of a live mount instead of mounting
    pub remount: bool,
    pub fsname: Option<String>,
    pub flags: KernelFlags,
    pub uring: UringMode,
    /// `nodiratime`: listing a directory leaves its atime alone (the daemon keeps atimes of
    /// a FUSE mount, so the fs core applies it; a remount does not change it)
    pub nodiratime: bool,
    /// options fixed at mount time that this option string names (their values are in the
    /// fields above); a remount may only restate them (`check_remount`)
    pub restated: Restated,
    /// `trace=FILE`: as given until [`MountConfig::resolve_trace`] makes it absolute
    pub trace: Option<PathBuf>,
    /// `background_compression=SPEC`: the codec background compression converts data to
    /// where no directory or file sets its own (a fixed codec; `none`: no default)
    pub background: Option<Spec>,
    /// `bg-idle=DURATION|off`: the idle time background compression waits for; `None`
    /// when the string does not name it ([`DEFAULT_BG_IDLE`]), `Some(None)` for `off`
    pub bg_idle: Option<Option<std::time::Duration>>,
    /// `s3-timeout=`, `s3-cache=`, `s3-cache-dir=`, `s3-backup=`, `s3-repack=` (object devices)
    pub object: ObjectMountOptions,
}

/// Mount options of object devices; `None`: the device's default.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ObjectMountOptions {
    /// `s3-timeout=`: stall timeout of a sync before EIO
    pub stall_timeout: Option<std::time::Duration>,
    /// `s3-cache=`: read cache bytes (0: none)
    pub cache_bytes: Option<u64>,
    /// `s3-cache-dir=`: where the read cache lives (absolute)
    pub cache_dir: Option<PathBuf>,
    /// `s3-backup=`: longest time between two metadata backups while writing
    pub backup_interval: Option<std::time::Duration>,
    /// `s3-repack=`: how often the background repack looks for segments to repack
    pub repack_interval: Option<std::time::Duration>,
}

/// The idle time background compression waits for when `bg-idle=` is not given.
pub const DEFAULT_BG_IDLE: std::time::Duration = std::time::Duration::from_secs(30);
/// Accepted `s3-timeout=`, `s3-backup=` and `s3-repack=` range.
pub const S3_TIME_RANGE: std::ops::RangeInclusive<std::time::Duration> =
    std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(86_400);
/// The smallest read cache `s3-cache=` accepts other than 0.
pub const S3_CACHE_MIN: u64 = 1 << 20;

/// Accepted `bg-idle=` range.
pub const BG_IDLE_RANGE: std::ops::RangeInclusive<std::time::Duration> =
    std::time::Duration::from_millis(100)..=std::time::Duration::from_secs(86_400);

/// Which of the options that a remount cannot change an option string names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Restated {
    pub read_only: bool,
    pub allow_other: bool,
    pub default_permissions: bool,
    /// each field: the string names that flag (in either sense, e.g. `suid` or `nosuid`)
    pub flags: KernelFlags,
}

/// The settings of a live mount that a remount cannot change, as /proc/mounts shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LiveMount {
    pub read_only: bool,
    pub allow_other: bool,
    pub default_permissions: bool,
    pub flags: KernelFlags,
}

impl LiveMount {
    /// From the options field of a /proc/mounts line (`rw,relatime,user_id=0,...`).
    pub fn from_proc_mounts_options(opts: &str) -> LiveMount {
        let mut m = LiveMount::default();
        for o in opts.split(',') {
            match o {
                "ro" => m.read_only = true,
                "rw" => m.read_only = false,
                "allow_other" => m.allow_other = true,
                "default_permissions" => m.default_permissions = true,
                "nodev" => m.flags.nodev = true,
                "nosuid" => m.flags.nosuid = true,
                "noexec" => m.flags.noexec = true,
                "noatime" => m.flags.noatime = true,
                "sync" => m.flags.sync = true,
                "dirsync" => m.flags.dirsync = true,
                _ => {}
            }
        }
        m
    }
}

/// FUSE kernel options: /proc/mounts shows them, only the kernel and the mounting code set them.
const KERNEL_SET_OPTIONS: [&str; 5] = ["user_id", "group_id", "max_read", "blksize", "rootmode"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum MountOptionError {
    #[error("unknown mount option '{0}' (accepted: compress=SPEC, compress-force=SPEC, background_compression=SPEC, bg-idle=DURATION, qos=RATE, qos-burst=DURATION, recordsize=SIZE, s3-timeout=DURATION, s3-cache=SIZE, s3-cache-dir=DIR, s3-backup=DURATION, s3-repack=DURATION, uring=auto|on|off, trace=FILE, ro, rw, allow_other, default_permissions, remount, fsname=, and the generic dev/nodev, suid/nosuid, exec/noexec, atime/noatime/relatime, diratime/nodiratime, sync/async, defaults, noauto, nofail, _netdev)")]
    Unknown(String),
    #[error("mount option '{name}={value}': {reason}")]
    BadValue { name: String, value: String, reason: String },
    #[error("mount option '{0}' needs a value ('{0}=...')")]
    MissingValue(String),
    #[error("mount option '{0}' takes no value")]
    UnexpectedValue(String),
    #[error("'{0}' cannot be changed by remount (remount changes compress=, compress-force=, qos=, dev/nodev, suid/nosuid, exec/noexec and atime/noatime; the other options keep the values the filesystem was mounted with)")]
    NotRemountable(String),
    #[error("mount option '{0}' is set by the FUSE kernel module, not by the user (it is accepted only in a remount, where mount(8) repeats the live mount's options)")]
    KernelSet(String),
}

const MIN_RECORD: u64 = 4 << 10;
const MAX_RECORD: u64 = 1 << 20;

/// `128K`, `1M`, `65536`: bytes, power of two within 4 KiB..=1 MiB.
pub fn parse_recordsize(v: &str) -> Result<u32, String> {
    let (digits, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&v[..v.len() - 1], 1u64 << 20),
        _ => (v, 1),
    };
    let n: u64 = digits.parse().map_err(|_| "expected a size such as 128K or 1M".to_string())?;
    let bytes = n.checked_mul(mult).ok_or("size overflows")?;
    if !bytes.is_power_of_two() || !(MIN_RECORD..=MAX_RECORD).contains(&bytes) {
        return Err("must be a power of two from 4K to 1M".into());
    }
    Ok(bytes as u32)
}

/// `qos=` value: the `qos` property's rate grammar (`None` for `none`/`off`).
fn qos_rate(name: &str, v: &str) -> Result<Option<u64>, MountOptionError> {
    squeezefs_fs::props::parse_rate(v.trim()).map_err(|reason| MountOptionError::BadValue {
        name: name.into(),
        value: v.into(),
        reason: format!("{reason}; accepted: {}", squeezefs_fs::props::Prop::Qos.accepted()),
    })
}

/// `qos-burst=`: `250ms`, `0.5s`, `1` (seconds), within 10 ms … 10 s.
fn qos_burst(name: &str, v: &str) -> Result<std::time::Duration, MountOptionError> {
    let bad = |reason: &str| MountOptionError::BadValue {
        name: name.into(),
        value: v.into(),
        reason: format!("{reason}; accepted: a duration from 10ms to 10s, e.g. 250ms, 0.5s or 1"),
    };
    let t = v.trim().to_ascii_lowercase();
    let (num, scale) = match t.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (t.strip_suffix('s').unwrap_or(&t), 1.0),
    };
    let secs = num.trim().parse::<f64>().ok().filter(|x| x.is_finite()).ok_or_else(|| bad("not a duration"))? * scale;
    let range = squeezefs_fs::QOS_BURST_RANGE;
    let d = std::time::Duration::try_from_secs_f64(secs).map_err(|_| bad("not a duration"))?;
    if !range.contains(&d) {
        return Err(bad("out of range"));
    }
    Ok(d)
}

/// `bg-idle=`: `off`/`none`, or a duration `500ms`, `5s`, `2m`, `1h`, `30` (seconds) within
/// [`BG_IDLE_RANGE`].
fn bg_idle(name: &str, v: &str) -> Result<Option<std::time::Duration>, MountOptionError> {
    let bad = |reason: &str| MountOptionError::BadValue {
        name: name.into(),
        value: v.into(),
        reason: format!("{reason}; accepted: off, or a duration from 100ms to 24h, e.g. 500ms, 5s, 2m, 1h or 30"),
    };
    let t = v.trim().to_ascii_lowercase();
    if t == "off" || t == "none" {
        return Ok(None);
    }
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t.as_str(), 1.0)
    };
    let secs = num.trim().parse::<f64>().ok().filter(|x| x.is_finite()).ok_or_else(|| bad("not a duration"))? * scale;
    let d = std::time::Duration::try_from_secs_f64(secs).map_err(|_| bad("not a duration"))?;
    if !BG_IDLE_RANGE.contains(&d) {
        return Err(bad("out of range"));
    }
    Ok(Some(d))
}

/// A duration `500ms`, `5s`, `2m`, `1h` or `30` (seconds), if `t` is one.
fn duration(t: &str) -> Option<std::time::Duration> {
    let t = t.trim().to_ascii_lowercase();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t.as_str(), 1.0)
    };
    let secs = num.trim().parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0)? * scale;
    std::time::Duration::try_from_secs_f64(secs).ok()
}

/// `s3-timeout=`, `s3-backup=`, `s3-repack=`: a duration within [`S3_TIME_RANGE`].
fn s3_time(name: &str, v: &str) -> Result<std::time::Duration, MountOptionError> {
    let bad = |reason: &str| MountOptionError::BadValue {
        name: name.into(),
        value: v.into(),
        reason: format!("{reason}; accepted: a duration from 1s to 24h, e.g. 30s, 2m, 1h or 90"),
    };
    let d = duration(v).ok_or_else(|| bad("not a duration"))?;
    if !S3_TIME_RANGE.contains(&d) {
        return Err(bad("out of range"));
    }
    Ok(d)
}

/// `s3-cache=`: `0`, or bytes with an optional binary suffix (`512M`, `4G`, `1T`, `64MiB`)
/// of at least [`S3_CACHE_MIN`].
fn s3_cache(name: &str, v: &str) -> Result<u64, MountOptionError> {
    let bad = |reason: &str| MountOptionError::BadValue {
        name: name.into(),
        value: v.into(),
        reason: format!("{reason}; accepted: 0 (no cache) or a size of 1M or more, e.g. 512M, 4G or 1T"),
    };
    let t = v.trim().to_ascii_uppercase();
    let t = t.strip_suffix("IB").or_else(|| t.strip_suffix('B')).unwrap_or(&t);
    let (digits, shift) = match t.as_bytes().last() {
        Some(b'K') => (&t[..t.len() - 1], 10),
        Some(b'M') => (&t[..t.len() - 1], 20),
        Some(b'G') => (&t[..t.len() - 1], 30),
        Some(b'T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad("not a size"))?;
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(|| bad("too large"))?;
    if bytes != 0 && bytes < S3_CACHE_MIN {
        return Err(bad("too small"));
    }
    Ok(bytes)
}

fn spec(name: &str, v: &str) -> Result<Spec, MountOptionError> {
    v.parse::<Spec>().map_err(|e| MountOptionError::BadValue {
        name: name.into(),
        value: v.into(),
        reason: e.to_string(),
    })
}

impl MountConfig {
    /// Whether the kernel checks permissions itself (its `default_permissions`), on every
    /// path component including cached dentries. Asked for, or implied by `allow_other`:
    /// other users reach the mount, and walks through dentries that another user's lookup
    /// cached must be checked too. Without either, only the mounting user's processes
    /// reach the mount (the kernel refuses every other uid); the fs core then checks alone,
    /// which spares the GETATTR of the parent that the kernel sends before each create in
    /// a directory (a create invalidates the parent's attributes, and the kernel refreshes
    /// them for its next check).
    pub fn kernel_checks_permissions(&self) -> bool {
        self.default_permissions || self.allow_other
    }

    /// Parse comma-separated options (several `-o` strings may be joined with ',').
    pub fn parse(opts: &str) -> Result<MountConfig, MountOptionError> {
        let mut c = MountConfig::default();
        let mut changed_at_remount: Vec<String> = Vec::new();
        let mut kernel_set: Option<String> = None;
        for opt in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (name, value) = match opt.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                // `qos:50M` and `qos-50M`, the spellings of the spec grammar
                None => match opt.strip_prefix("qos:").or_else(|| opt.strip_prefix("qos-")) {
                    Some(v) => ("qos", Some(v)),
                    None => (opt, None),
                },
            };
            let flag = |c: &mut MountConfig, set: &dyn Fn(&mut MountConfig)| {
                if value.is_some() {
                    return Err(MountOptionError::UnexpectedValue(name.into()));
                }
                set(c);
                Ok(())
            };
            match name {
                "compress" | "compress-force" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    c.compression = Some(Compression { spec: spec(name, v)?, force: name == "compress-force" });
                }
                "qos" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    c.qos = Some(qos_rate(name, v)?);
                }
                "background_compression" | "background-compression" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    c.background = match squeezefs_fs::props::parse(squeezefs_fs::props::Prop::BackgroundCompression, v)
                    {
                        Ok(Some(val)) => val.spec().filter(|s| *s != Spec::Off),
                        Ok(None) => None,
                        Err(e) => {
                            return Err(MountOptionError::BadValue {
                                name: name.into(),
                                value: v.into(),
                                reason: e.to_string(),
                            })
                        }
                    };
                    changed_at_remount.push(name.into());
                }
                "bg-idle" | "bg_idle" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    c.bg_idle = Some(bg_idle(name, v)?);
                    changed_at_remount.push(name.into());
                }
                "s3-timeout" | "s3-backup" | "s3-repack" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    let d = Some(s3_time(name, v)?);
                    match name {
                        "s3-timeout" => c.object.stall_timeout = d,
                        "s3-backup" => c.object.backup_interval = d,
                        _ => c.object.repack_interval = d,
                    }
                    changed_at_remount.push(name.into());
                }
                "s3-cache" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    c.object.cache_bytes = Some(s3_cache(name, v)?);
                    changed_at_remount.push(name.into());
                }
                "s3-cache-dir" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    if !v.starts_with('/') {
                        return Err(MountOptionError::BadValue {
                            name: name.into(),
                            value: v.into(),
                            reason:
                                "not an absolute path; accepted: an existing directory such as /var/cache/squeezefs"
                                    .into(),
                        });
                    }
                    c.object.cache_dir = Some(PathBuf::from(v));
                    changed_at_remount.push(name.into());
                }
                "qos-burst" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    c.qos_burst = Some(qos_burst(name, v)?);
                    changed_at_remount.push(name.into());
                }
                "recordsize" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    c.recordsize = Some(parse_recordsize(v).map_err(|reason| MountOptionError::BadValue {
                        name: name.into(),
                        value: v.into(),
                        reason,
                    })?);
                    changed_at_remount.push(name.into());
                }
                "uring" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    c.uring = match v {
                        "auto" => UringMode::Auto,
                        "on" => UringMode::On,
                        "off" => UringMode::Off,
                        _ => {
                            return Err(MountOptionError::BadValue {
                                name: name.into(),
                                value: v.into(),
                                reason: "expected auto, on or off".into(),
                            })
                        }
                    };
                    changed_at_remount.push(name.into());
                }
                "trace" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    if v.is_empty() || v.ends_with('/') {
                        return Err(MountOptionError::BadValue {
                            name: name.into(),
                            value: v.into(),
                            reason: "expected the path of a file to write the trace to, e.g. /var/tmp/trace.csv".into(),
                        });
                    }
                    c.trace = Some(PathBuf::from(v));
                    changed_at_remount.push(name.into());
                }
                "fsname" => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    if v.is_empty() || v.contains(',') {
                        return Err(MountOptionError::BadValue {
                            name: name.into(),
                            value: v.into(),
                            reason: "must be non-empty without commas".into(),
                        });
                    }
                    c.fsname = Some(v.into());
                }
                n if KERNEL_SET_OPTIONS.contains(&n) => {
                    let v = value.ok_or_else(|| MountOptionError::MissingValue(name.into()))?;
                    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(MountOptionError::BadValue {
                            name: name.into(),
                            value: v.into(),
                            reason: "expected a number".into(),
                        });
                    }
                    kernel_set.get_or_insert_with(|| name.into());
                }
                // helper=NAME: libmount keeps it in utab and runs umount.NAME at umount
                "comment" | "helper" => {}
                n if n.starts_with("x-") => {}
                "ro" => {
                    flag(&mut c, &|c| c.read_only = true)?;
                    c.restated.read_only = true;
                }
                "rw" => {
                    flag(&mut c, &|c| c.read_only = false)?;
                    c.restated.read_only = true;
                }
                "allow_other" => {
                    flag(&mut c, &|c| c.allow_other = true)?;
                    c.restated.allow_other = true;
                }
                "default_permissions" => {
                    flag(&mut c, &|c| c.default_permissions = true)?;
                    c.restated.default_permissions = true;
                }
                "remount" => flag(&mut c, &|c| c.remount = true)?,
                "dev" | "nodev" => {
                    flag(&mut c, &|c| c.flags.nodev = name == "nodev")?;
                    c.restated.flags.nodev = true;
                }
                "suid" | "nosuid" => {
                    flag(&mut c, &|c| c.flags.nosuid = name == "nosuid")?;
                    c.restated.flags.nosuid = true;
                }
                "exec" | "noexec" => {
                    flag(&mut c, &|c| c.flags.noexec = name == "noexec")?;
                    c.restated.flags.noexec = true;
                }
                "noatime" | "atime" | "relatime" | "strictatime" | "norelatime" => {
                    flag(&mut c, &|c| c.flags.noatime = name == "noatime")?;
                    c.restated.flags.noatime = true;
                }
                // directory-only flags: they never switch noatime on or off (`noatime,nodiratime`)
                "nodiratime" | "diratime" => {
                    flag(&mut c, &|_| {})?;
                    c.nodiratime = name == "nodiratime";
                }
                "sync" | "async" => {
                    flag(&mut c, &|c| c.flags.sync = name == "sync")?;
                    c.restated.flags.sync = true;
                }
                "dirsync" => {
                    flag(&mut c, &|c| c.flags.dirsync = true)?;
                    c.restated.flags.dirsync = true;
                }
                "defaults" | "auto" | "noauto" | "user" | "users" | "nouser" | "owner" | "nofail" | "_netdev"
                | "suid_dev" | "loud" | "silent" => flag(&mut c, &|_| {})?,
                _ => return Err(MountOptionError::Unknown(opt.into())),
            }
        }
        if c.remount {
            if let Some(o) = changed_at_remount.into_iter().next() {
                return Err(MountOptionError::NotRemountable(o));
            }
        } else if let Some(o) = kernel_set {
            return Err(MountOptionError::KernelSet(o));
        }
        Ok(c)
    }

    /// A remount may restate the options fixed at mount time (mount(8) repeats them from
    /// /proc/mounts) but not change them: the first one that differs from `live` is refused.
    pub fn check_remount(&self, live: &LiveMount) -> Result<(), MountOptionError> {
        let r = &self.restated;
        if r.read_only && self.read_only != live.read_only {
            return Err(MountOptionError::NotRemountable(if self.read_only { "ro" } else { "rw" }.into()));
        }
        if r.allow_other && self.allow_other != live.allow_other {
            return Err(MountOptionError::NotRemountable("allow_other".into()));
        }
        if r.default_permissions && !live.default_permissions {
            return Err(MountOptionError::NotRemountable("default_permissions".into()));
        }
        // superblock flags: (mentioned, wanted, live, name when set, name when clear); the
        // per-mount ones (dev, suid, exec, atime) change, see `per_mount_flags`
        let (f, want, have) = (&r.flags, &self.flags, &live.flags);
        let flags = [
            (f.sync, want.sync, have.sync, "sync", "async"),
            (f.dirsync, want.dirsync, have.dirsync, "dirsync", "dirsync"),
        ];
        for (mentioned, want, have, set, clear) in flags {
            if mentioned && want != have {
                return Err(MountOptionError::NotRemountable(if want { set } else { clear }.into()));
            }
        }
        Ok(())
    }

    /// For the option string mount(8) hands its helper at a remount: it is the whole
    /// resulting set, the live mount's options merged with the user's, and a per-mount flag
    /// it leaves out is clear (it writes `noexec` but never `exec`). A string typed to
    /// `squeezefs mount -o remount` is a change instead: what it leaves out keeps its value.
    pub fn with_complete_mount_flags(mut self) -> MountConfig {
        let f = &mut self.restated.flags;
        (f.nodev, f.nosuid, f.noexec, f.noatime) = (true, true, true, true);
        self
    }

    /// The per-mount flags a remount asks for (`nodev`, `nosuid`, `noexec`, `noatime`; the
    /// ones it does not name keep their live values), or `None` when they equal the live ones.
    pub fn per_mount_flags(&self, live: &LiveMount) -> Option<KernelFlags> {
        let (r, want) = (&self.restated.flags, &self.flags);
        let pick = |mentioned: bool, want: bool, have: bool| if mentioned { want } else { have };
        let new = KernelFlags {
            nodev: pick(r.nodev, want.nodev, live.flags.nodev),
            nosuid: pick(r.nosuid, want.nosuid, live.flags.nosuid),
            noexec: pick(r.noexec, want.noexec, live.flags.noexec),
            noatime: pick(r.noatime, want.noatime, live.flags.noatime),
            ..live.flags
        };
        (new != live.flags).then_some(new)
    }

    /// Make `trace=FILE` absolute (relative to `cwd`) and check that it can be a trace file
    /// of a mount on `mountpoint` (canonical): its directory exists, FILE is not a directory,
    /// and it is not on the mount itself (the daemon would write every row through its own
    /// FUSE mount, to itself).
    pub fn resolve_trace(&mut self, cwd: &Path, mountpoint: &Path) -> Result<(), MountOptionError> {
        let Some(given) = self.trace.clone() else { return Ok(()) };
        let bad = |reason: String| MountOptionError::BadValue {
            name: "trace".into(),
            value: given.display().to_string(),
            reason,
        };
        let path = cwd.join(&given);
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(bad("expected the path of a file".into()));
        };
        let dir = std::fs::canonicalize(dir).map_err(|e| bad(format!("its directory {}: {e}", dir.display())))?;
        if !dir.is_dir() {
            return Err(bad(format!("{} is not a directory", dir.display())));
        }
        let path = dir.join(name);
        // the mount point itself counts as on the mount: once mounted it is the mount's root
        if path.starts_with(mountpoint) {
            return Err(bad(format!(
                "the trace file must not be on the mount itself ({}); put it outside, e.g. in /var/tmp",
                mountpoint.display()
            )));
        }
        if path.is_dir() {
            return Err(bad(format!("{} is a directory", path.display())));
        }
        self.trace = Some(path);
        Ok(())
    }

    /// The value sent to a live mount for `remount` (see squeezefs_fs xattr docs): the
    /// compression and the mount-wide `qos`, when named.
    pub fn remount_request(&self) -> Option<String> {
        let compression = self.compression.map(|c| {
            if c.force {
                format!("compress-force={}", c.spec)
            } else {
                format!("compress={}", c.spec)
            }
        });
        let qos = self.qos.map(|q| format!("qos={}", squeezefs_fs::props::Value::Rate(q)));
        let parts: Vec<String> = compression.into_iter().chain(qos).collect();
        (!parts.is_empty()).then(|| parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_options_give_defaults() {
        assert_eq!(MountConfig::parse("").unwrap(), MountConfig::default());
    }

    #[test]
    fn squeezefs_and_fuse_options_are_recognised() {
        let c = MountConfig::parse("ro,allow_other,default_permissions,recordsize=64K,noatime,nodev").unwrap();
        assert!(c.read_only && c.allow_other && c.default_permissions);
        assert_eq!(c.recordsize, Some(65536));
        assert!(c.flags.noatime && c.flags.nodev);
        assert!(!c.remount);
    }

    #[test]
    fn fstab_generic_options_are_accepted() {
        let c = MountConfig::parse("defaults,noauto,nofail,_netdev,x-systemd.automount,rw,user,helper=fuse.squeezefs")
            .unwrap();
        assert!(!c.read_only);
    }

    #[test]
    fn unknown_and_malformed_options_are_refused() {
        assert_eq!(MountConfig::parse("bogus"), Err(MountOptionError::Unknown("bogus".into())));
        assert_eq!(MountConfig::parse("compress"), Err(MountOptionError::MissingValue("compress".into())));
        assert_eq!(MountConfig::parse("ro=1"), Err(MountOptionError::UnexpectedValue("ro".into())));
        assert!(matches!(MountConfig::parse("recordsize=3K"), Err(MountOptionError::BadValue { .. })));
        assert!(matches!(MountConfig::parse("recordsize=2M"), Err(MountOptionError::BadValue { .. })));
        assert!(matches!(MountConfig::parse("recordsize=lots"), Err(MountOptionError::BadValue { .. })));
        let msg = MountConfig::parse("frobnicate").unwrap_err().to_string();
        assert!(msg.contains("frobnicate") && msg.contains("compress=SPEC"), "{msg}");
    }

    #[test]
    fn background_compression_and_its_idle_time_are_parsed_and_checked() {
        use std::time::Duration;
        let c = MountConfig::parse("background_compression=zstd-15,bg-idle=5s").unwrap();
        assert_eq!(c.background, Some("zstd:15".parse().unwrap()));
        assert_eq!(c.bg_idle, Some(Some(Duration::from_secs(5))));
        assert_eq!(MountConfig::parse("").unwrap().bg_idle, None, "the default applies");
        for (v, want) in [("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("30", 30.0), ("0.25s", 0.25)] {
            let c = MountConfig::parse(&format!("bg-idle={v}")).unwrap();
            assert_eq!(c.bg_idle, Some(Some(Duration::from_secs_f64(want))), "{v}");
        }
        assert_eq!(MountConfig::parse("bg-idle=off").unwrap().bg_idle, Some(None));
        assert_eq!(MountConfig::parse("background_compression=none").unwrap().background, None);
        for bad in ["bg-idle=10ms", "bg-idle=2d", "bg-idle=soon", "bg-idle=-1s", "background_compression=auto"] {
            let e = MountConfig::parse(bad).unwrap_err();
            assert!(matches!(e, MountOptionError::BadValue { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("accepted"), "{bad}: {e}");
        }
        assert_eq!(
            MountConfig::parse("background_compression"),
            Err(MountOptionError::MissingValue("background_compression".into()))
        );
        assert!(matches!(MountConfig::parse("remount,bg-idle=1s"), Err(MountOptionError::NotRemountable(_))));
    }

    #[test]
    fn compression_specs_use_the_codec_grammar() {
        let c = MountConfig::parse("compress=zstd:9").unwrap();
        assert_eq!(c.compression, Some(Compression { spec: "zstd:9".parse().unwrap(), force: false }));
        let c = MountConfig::parse("compress=lz4,compress-force=zlib:3").unwrap();
        assert_eq!(c.compression, Some(Compression { spec: "zlib:3".parse().unwrap(), force: true }));
        assert_eq!(c.remount_request(), Some(format!("compress-force={}", c.compression.unwrap().spec)));
        let e = MountConfig::parse("compress=zstd:99").unwrap_err();
        assert!(matches!(e, MountOptionError::BadValue { .. }), "{e}");
        assert!(MountConfig::parse("compress=brotli").is_err());
        let c = MountConfig::parse("remount,compress=zstd:1").unwrap();
        assert!(c.remount && c.compression.is_some());
    }

    #[test]
    fn qos_takes_the_rate_grammar_in_every_spelling() {
        assert_eq!(MountConfig::parse("").unwrap().qos, None);
        for (opts, want) in [
            ("qos=50M", Some(50_000_000)),
            ("qos=50", Some(50_000_000)),
            ("qos:50", Some(50_000_000)),
            ("qos-50M", Some(50_000_000)),
            ("qos=1G", Some(1_000_000_000)),
            ("qos=500K", Some(500_000)),
            ("qos=64MiB", Some(64 << 20)),
            ("qos=1048576B", Some(1 << 20)),
            ("qos=qos:25", Some(25_000_000)),
            ("qos=none", None),
            ("qos=off", None),
        ] {
            assert_eq!(MountConfig::parse(opts).unwrap().qos, Some(want), "{opts}");
        }
        assert_eq!(
            MountConfig::parse("qos-burst=250ms").unwrap().qos_burst,
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(
            MountConfig::parse("qos-burst=0.5s").unwrap().qos_burst,
            Some(std::time::Duration::from_millis(500))
        );
        assert_eq!(MountConfig::parse("qos-burst=2").unwrap().qos_burst, Some(std::time::Duration::from_secs(2)));
        for bad in ["qos-burst=1ms", "qos-burst=11", "qos-burst=fast", "qos-burst=-1", "qos-burst=nan"] {
            let msg = MountConfig::parse(bad).unwrap_err().to_string();
            assert!(msg.contains("10ms to 10s"), "{bad}: {msg}");
        }
        assert_eq!(
            MountConfig::parse("remount,qos-burst=1s"),
            Err(MountOptionError::NotRemountable("qos-burst".into()))
        );
        // the last one named wins, as for every option
        assert_eq!(MountConfig::parse("qos=10M,qos=none").unwrap().qos, Some(None));
        assert_eq!(MountConfig::parse("qos"), Err(MountOptionError::MissingValue("qos".into())));
        for bad in ["qos=fast", "qos=0", "qos=50X", "qos=", "qos:", "qos=-5M", "qos=2000000G"] {
            let e = MountConfig::parse(bad).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, MountOptionError::BadValue { .. }), "{bad}: {msg}");
            assert!(msg.contains("accepted") && msg.contains("50M"), "{bad}: {msg}");
        }
        // a remount changes it, and sends it to the daemon
        let c = MountConfig::parse("remount,qos=20M").unwrap();
        assert_eq!(c.remount_request().as_deref(), Some("qos=20M"));
        let c = MountConfig::parse("remount,compress=lz4,qos=none").unwrap();
        assert_eq!(c.remount_request().as_deref(), Some("compress=lz4,qos=none"));
    }

    #[test]
    fn object_device_options_are_parsed_and_checked() {
        let c = MountConfig::parse("s3-timeout=90,s3-cache=512M,s3-cache-dir=/var/cache/sq,s3-backup=2m").unwrap();
        assert_eq!(c.object.stall_timeout, Some(std::time::Duration::from_secs(90)));
        assert_eq!(c.object.cache_bytes, Some(512 << 20));
        assert_eq!(c.object.cache_dir.as_deref(), Some(Path::new("/var/cache/sq")));
        assert_eq!(c.object.backup_interval, Some(std::time::Duration::from_secs(120)));
        assert_eq!(c.object.repack_interval, None);
        let c = MountConfig::parse("s3-cache=0,s3-timeout=1500ms,s3-backup=1h,s3-repack=5m").unwrap();
        assert_eq!(c.object.repack_interval, Some(std::time::Duration::from_secs(300)));
        assert_eq!(c.object.cache_bytes, Some(0));
        assert_eq!(c.object.stall_timeout, Some(std::time::Duration::from_millis(1500)));
        assert_eq!(c.object.backup_interval, Some(std::time::Duration::from_secs(3600)));
        assert_eq!(MountConfig::parse("s3-cache=4GiB").unwrap().object.cache_bytes, Some(4 << 30));
        assert_eq!(MountConfig::parse("s3-cache=1t").unwrap().object.cache_bytes, Some(1 << 40));
        assert_eq!(MountConfig::parse("").unwrap().object, ObjectMountOptions::default());
        for (bad, why) in [
            ("s3-timeout=0", "out of range"),
            ("s3-timeout=25h", "out of range"),
            ("s3-timeout=soon", "not a duration"),
            ("s3-timeout=-5", "not a duration"),
            ("s3-backup=500ms", "out of range"),
            ("s3-repack=100ms", "out of range"),
            ("s3-repack=often", "not a duration"),
            ("s3-cache=12K", "too small"),
            ("s3-cache=lots", "not a size"),
            ("s3-cache=99999999999T", "too large"),
            ("s3-cache-dir=relative/dir", "not an absolute path"),
        ] {
            let e = MountConfig::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("accepted"), "{bad}: {e}");
        }
        for bare in ["s3-timeout", "s3-cache", "s3-cache-dir", "s3-backup", "s3-repack"] {
            assert!(matches!(MountConfig::parse(bare), Err(MountOptionError::MissingValue(_))), "{bare}");
        }
        // fixed at mount time
        assert!(matches!(MountConfig::parse("remount,s3-cache=2G"), Err(MountOptionError::NotRemountable(_))));
        let unknown = MountConfig::parse("s3-bogus=1").unwrap_err().to_string();
        assert!(unknown.contains("s3-timeout=DURATION"), "{unknown}");
    }

    #[test]
    fn uring_takes_auto_on_or_off() {
        assert_eq!(MountConfig::parse("").unwrap().uring, UringMode::Auto);
        assert_eq!(MountConfig::parse("uring=on").unwrap().uring, UringMode::On);
        assert_eq!(MountConfig::parse("uring=off").unwrap().uring, UringMode::Off);
        assert!(matches!(MountConfig::parse("uring=yes"), Err(MountOptionError::BadValue { .. })));
        assert_eq!(MountConfig::parse("uring"), Err(MountOptionError::MissingValue("uring".into())));
        assert_eq!(MountConfig::parse("remount,uring=off"), Err(MountOptionError::NotRemountable("uring".into())));
    }

    #[test]
    fn trace_names_a_file_outside_the_mount() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let mnt = root.join("mnt");
        std::fs::create_dir_all(mnt.join("sub")).unwrap();
        // relative to the mounting process's directory
        let mut c = MountConfig::parse("compress=auto,trace=t.csv").unwrap();
        assert_eq!(c.trace, Some(PathBuf::from("t.csv")));
        c.resolve_trace(&root, &mnt).unwrap();
        assert_eq!(c.trace, Some(root.join("t.csv")));
        let refused = |opts: &str, want: &str| {
            let e = match MountConfig::parse(opts) {
                Err(e) => e,
                Ok(mut c) => c.resolve_trace(&root, &mnt).unwrap_err(),
            };
            assert!(matches!(e, MountOptionError::BadValue { .. } | MountOptionError::MissingValue(_)), "{e}");
            assert!(e.to_string().contains(want), "{opts}: {e} lacks {want:?}");
        };
        refused("trace", "needs a value");
        refused("trace=", "path of a file");
        refused("trace=dir/", "path of a file");
        refused("trace=nowhere/t.csv", "its directory");
        refused(&format!("trace={}", mnt.join("sub/t.csv").display()), "must not be on the mount itself");
        refused(&format!("trace={}", mnt.display()), "must not be on the mount itself");
        refused(&format!("trace={}", root.join("mnt/../mnt/t.csv").display()), "must not be on the mount itself");
        std::fs::create_dir(root.join("d")).unwrap();
        refused(&format!("trace={}", root.join("d").display()), "is a directory");
        assert_eq!(
            MountConfig::parse("remount,trace=/tmp/x.csv"),
            Err(MountOptionError::NotRemountable("trace".into()))
        );
    }

    #[test]
    fn recordsize_range_is_4k_to_1m() {
        assert_eq!(parse_recordsize("4K"), Ok(4096));
        assert_eq!(parse_recordsize("1M"), Ok(1 << 20));
        assert_eq!(parse_recordsize("131072"), Ok(131072));
        assert!(parse_recordsize("2K").is_err());
        assert!(parse_recordsize("99999999999999999999M").is_err());
    }

    #[test]
    fn remount_changes_only_compression() {
        let rw = LiveMount {
            read_only: false,
            allow_other: false,
            default_permissions: true,
            flags: KernelFlags::default(),
        };
        let c = MountConfig::parse("remount,rw,relatime,dev").unwrap();
        assert!(c.remount);
        assert_eq!(c.check_remount(&rw), Ok(()));
        let c = MountConfig::parse("remount,ro").unwrap();
        assert_eq!(c.check_remount(&rw), Err(MountOptionError::NotRemountable("ro".into())));
        let ro = LiveMount { read_only: true, ..rw };
        assert_eq!(c.check_remount(&ro), Ok(()));
        let c = MountConfig::parse("remount,rw").unwrap();
        assert_eq!(c.check_remount(&ro), Err(MountOptionError::NotRemountable("rw".into())));
        let c = MountConfig::parse("remount,allow_other").unwrap();
        assert_eq!(c.check_remount(&rw), Err(MountOptionError::NotRemountable("allow_other".into())));
        assert_eq!(c.check_remount(&LiveMount { allow_other: true, ..rw }), Ok(()));
        let c = MountConfig::parse("remount,default_permissions").unwrap();
        assert_eq!(
            c.check_remount(&LiveMount { default_permissions: false, ..rw }),
            Err(MountOptionError::NotRemountable("default_permissions".into()))
        );
        assert_eq!(
            MountConfig::parse("remount,recordsize=8K"),
            Err(MountOptionError::NotRemountable("recordsize".into()))
        );
    }

    /// The bug: `mount -o remount,compress=zstd:9 MNT` ran the helper with the live mount's
    /// /proc/mounts options in front of the user's, and the first of them that only the FUSE
    /// kernel module sets failed the remount: "unknown mount option 'user_id=0'".
    #[test]
    fn remount_accepts_the_options_mount8_repeats_from_proc_mounts() {
        let live = "rw,relatime,user_id=0,group_id=0,default_permissions,allow_other,max_read=1048576";
        let c = MountConfig::parse(&format!("{live},remount,compress=zstd:9")).unwrap();
        assert!(c.remount);
        assert_eq!(c.remount_request().as_deref(), Some("compress=zstd:9"));
        assert_eq!(c.check_remount(&LiveMount::from_proc_mounts_options(live)), Ok(()));
        // mount(8) puts `remount` after the live options: order does not matter
        let c = MountConfig::parse("ro,relatime,remount,user_id=0,group_id=0,default_permissions,max_read=1048576")
            .unwrap();
        let live_ro = LiveMount::from_proc_mounts_options("ro,relatime,user_id=0,group_id=0,default_permissions");
        assert!(live_ro.read_only && live_ro.default_permissions && !live_ro.allow_other);
        assert_eq!(c.check_remount(&live_ro), Ok(()));
    }

    /// `mount -o remount,noatime MNT` used to succeed and change nothing: the helper sent
    /// only the compression to the daemon and never applied the flag.
    #[test]
    fn remount_applies_per_mount_flags_and_refuses_superblock_ones() {
        let live = LiveMount::from_proc_mounts_options("rw,nosuid,relatime,user_id=0,group_id=0,default_permissions");
        assert!(live.flags.nosuid && !live.flags.noatime && !live.flags.nodev);
        let echo = "rw,nosuid,relatime,remount,user_id=0,group_id=0,default_permissions";
        let c = MountConfig::parse(echo).unwrap();
        assert_eq!(c.check_remount(&live), Ok(()));
        assert_eq!(c.per_mount_flags(&live), None);
        let c = MountConfig::parse(&format!("{echo},noatime,nodev")).unwrap();
        assert_eq!(c.check_remount(&live), Ok(()));
        let want = KernelFlags { nosuid: true, noatime: true, nodev: true, ..Default::default() };
        assert_eq!(c.per_mount_flags(&live), Some(want));
        // named the other way round, or not named: the live value stays unless named
        let c = MountConfig::parse("remount,suid").unwrap();
        assert_eq!(c.per_mount_flags(&live), Some(KernelFlags::default()));
        let c = MountConfig::parse("remount,compress=lz4").unwrap();
        assert_eq!(c.per_mount_flags(&live), None);
        // mount(8)'s merged string, after `mount -o remount,exec` on a noexec mount: it leaves
        // `noexec` out, which means exec
        let live_noexec = LiveMount::from_proc_mounts_options("rw,noexec,noatime,default_permissions");
        let c = MountConfig::parse("rw,noatime,remount,relatime,default_permissions").unwrap();
        assert_eq!(c.per_mount_flags(&live_noexec), Some(KernelFlags { noexec: true, ..Default::default() }));
        let c = c.with_complete_mount_flags();
        assert_eq!(c.per_mount_flags(&live_noexec), Some(KernelFlags::default()));
        for (extra, name) in [("sync", "sync"), ("dirsync", "dirsync")] {
            let c = MountConfig::parse(&format!("{echo},{extra}")).unwrap();
            assert_eq!(c.check_remount(&live), Err(MountOptionError::NotRemountable(name.into())), "{extra}");
        }
    }

    #[test]
    fn kernel_set_options_are_refused_outside_a_remount() {
        assert_eq!(MountConfig::parse("user_id=0"), Err(MountOptionError::KernelSet("user_id".into())));
        assert_eq!(
            MountConfig::parse("compress=lz4,max_read=4096"),
            Err(MountOptionError::KernelSet("max_read".into()))
        );
        let msg = MountConfig::parse("group_id=5").unwrap_err().to_string();
        assert!(msg.contains("group_id") && msg.contains("remount"), "{msg}");
        assert!(matches!(MountConfig::parse("remount,user_id=root"), Err(MountOptionError::BadValue { .. })));
        assert_eq!(MountConfig::parse("remount,user_id"), Err(MountOptionError::MissingValue("user_id".into())));
    }

    /// `nodiratime` and `diratime` are separate mount flags;
    /// they never switch `noatime` off (checked: `mount -t tmpfs -o noatime,nodiratime`
    /// shows `noatime,nodiratime`, `-o noatime,diratime` shows `noatime`). The parser lets
    /// the last atime-ish word decide, so the common fstab `noatime,nodiratime` mounts with
    /// atime updates, and `remount,nodiratime` switches a live noatime mount to relatime.
    #[test]
    fn nodiratime_after_noatime_keeps_noatime() {
        for opts in ["noatime,nodiratime", "noatime,diratime", "nodiratime,noatime"] {
            assert!(MountConfig::parse(opts).unwrap().flags.noatime, "{opts}");
        }
        let live = LiveMount::from_proc_mounts_options("rw,noatime,default_permissions");
        let c = MountConfig::parse("remount,nodiratime").unwrap();
        assert_eq!(c.per_mount_flags(&live), None, "remount,nodiratime must not clear noatime");
    }

    /// `nodiratime` was accepted and had no effect.
    #[test]
    fn nodiratime_reaches_the_config() {
        assert!(MountConfig::parse("relatime,nodiratime").unwrap().nodiratime);
        assert!(!MountConfig::parse("nodiratime,diratime").unwrap().nodiratime);
        assert!(!MountConfig::parse("noatime").unwrap().nodiratime);
    }
}
