//! Mount options: the raw `-o` string → a validated [`MountConfig`].
//!
//! Accepted (anything else is refused before anything is mounted):
//! * squeezefs: `compress=SPEC`, `compress-force=SPEC` (codec spec grammar),
//!   `recordsize=SIZE` (power of two, 4K..1M), `remount`,
//!   `uring=auto|on|off` (the FUSE-over-io_uring transport, `crate::uring`: `auto` uses it
//!   when the kernel's `enable_uring` parameter is Y, `on` also sets that parameter (root),
//!   `off` serves /dev/fuse only);
//! * FUSE: `allow_other`, `default_permissions`, `fsname=NAME`;
//! * generic (as in fstab): `ro`, `rw`, `defaults`, `dev`/`nodev`, `suid`/`nosuid`,
//!   `exec`/`noexec`, `atime`/`noatime`/`relatime`/`strictatime`/`nodiratime`,
//!   `sync`/`async`/`dirsync`, and the mount(8)-only `auto`/`noauto`/`user`/`users`/
//!   `nouser`/`nofail`/`_netdev`/`x-*`/`comment=*`, which are ignored.
use squeezefs_codec::Spec;
use squeezefs_fs::Compression;

#[derive(Clone, Debug, PartialEq, Eq, Default)]
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
    pub recordsize: Option<u32>,
    pub read_only: bool,
    pub allow_other: bool,
    pub default_permissions: bool,
    /// change options of a live mount instead of mounting
    pub remount: bool,
    pub fsname: Option<String>,
    pub flags: KernelFlags,
    pub uring: UringMode,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum MountOptionError {
    #[error("unknown mount option '{0}' (accepted: compress=SPEC, compress-force=SPEC, recordsize=SIZE, uring=auto|on|off, ro, rw, allow_other, default_permissions, remount, fsname=, and the generic dev/nodev, suid/nosuid, exec/noexec, atime/noatime/relatime, sync/async, defaults, noauto, nofail, _netdev)")]
    Unknown(String),
    #[error("mount option '{name}={value}': {reason}")]
    BadValue { name: String, value: String, reason: String },
    #[error("mount option '{0}' needs a value ('{0}=...')")]
    MissingValue(String),
    #[error("mount option '{0}' takes no value")]
    UnexpectedValue(String),
    #[error("'{0}' cannot be changed by remount (remount changes compress= and compress-force=)")]
    NotRemountable(String),
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

fn spec(name: &str, v: &str) -> Result<Spec, MountOptionError> {
    v.parse::<Spec>().map_err(|e| MountOptionError::BadValue {
        name: name.into(),
        value: v.into(),
        reason: e.to_string(),
    })
}

impl MountConfig {
    /// Parse comma-separated options (several `-o` strings may be joined with ',').
    pub fn parse(opts: &str) -> Result<MountConfig, MountOptionError> {
        let mut c = MountConfig::default();
        let mut changed_at_remount: Vec<String> = Vec::new();
        for opt in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (name, value) = match opt.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (opt, None),
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
                "comment" => {}
                n if n.starts_with("x-") => {}
                "ro" => {
                    flag(&mut c, &|c| c.read_only = true)?;
                    changed_at_remount.push(name.into());
                }
                "rw" => flag(&mut c, &|c| c.read_only = false)?,
                "allow_other" => {
                    flag(&mut c, &|c| c.allow_other = true)?;
                    changed_at_remount.push(name.into());
                }
                "default_permissions" => {
                    flag(&mut c, &|c| c.default_permissions = true)?;
                    changed_at_remount.push(name.into());
                }
                "remount" => flag(&mut c, &|c| c.remount = true)?,
                "dev" => flag(&mut c, &|c| c.flags.nodev = false)?,
                "nodev" => flag(&mut c, &|c| c.flags.nodev = true)?,
                "suid" => flag(&mut c, &|c| c.flags.nosuid = false)?,
                "nosuid" => flag(&mut c, &|c| c.flags.nosuid = true)?,
                "exec" => flag(&mut c, &|c| c.flags.noexec = false)?,
                "noexec" => flag(&mut c, &|c| c.flags.noexec = true)?,
                "noatime" => flag(&mut c, &|c| c.flags.noatime = true)?,
                "atime" | "relatime" | "strictatime" | "norelatime" | "nodiratime" | "diratime" => {
                    flag(&mut c, &|c| c.flags.noatime = false)?
                }
                "sync" => flag(&mut c, &|c| c.flags.sync = true)?,
                "async" => flag(&mut c, &|c| c.flags.sync = false)?,
                "dirsync" => flag(&mut c, &|c| c.flags.dirsync = true)?,
                "defaults" | "auto" | "noauto" | "user" | "users" | "nouser" | "owner" | "nofail"
                | "_netdev" | "suid_dev" | "loud" | "silent" => flag(&mut c, &|_| {})?,
                _ => return Err(MountOptionError::Unknown(opt.into())),
            }
        }
        if c.remount {
            if let Some(o) = changed_at_remount.into_iter().next() {
                return Err(MountOptionError::NotRemountable(o));
            }
        }
        Ok(c)
    }

    /// The value sent to a live mount for `remount` (see squeezefs_fs xattr docs).
    pub fn remount_request(&self) -> Option<String> {
        self.compression.map(|c| {
            if c.force {
                format!("compress-force={}", c.spec)
            } else {
                format!("compress={}", c.spec)
            }
        })
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
        let c = MountConfig::parse("defaults,noauto,nofail,_netdev,x-systemd.automount,rw,user").unwrap();
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
    fn uring_takes_auto_on_or_off() {
        assert_eq!(MountConfig::parse("").unwrap().uring, UringMode::Auto);
        assert_eq!(MountConfig::parse("uring=on").unwrap().uring, UringMode::On);
        assert_eq!(MountConfig::parse("uring=off").unwrap().uring, UringMode::Off);
        assert!(matches!(MountConfig::parse("uring=yes"), Err(MountOptionError::BadValue { .. })));
        assert_eq!(MountConfig::parse("uring"), Err(MountOptionError::MissingValue("uring".into())));
        assert_eq!(MountConfig::parse("remount,uring=off"), Err(MountOptionError::NotRemountable("uring".into())));
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
        let c = MountConfig::parse("remount,rw,nosuid,relatime").unwrap();
        assert!(c.remount);
        assert_eq!(MountConfig::parse("remount,ro"), Err(MountOptionError::NotRemountable("ro".into())));
        assert_eq!(
            MountConfig::parse("remount,recordsize=8K"),
            Err(MountOptionError::NotRemountable("recordsize".into()))
        );
    }
}
