//! Extended attributes (user., trusted., security.) with the VFS rules of
//! xattr_permission; properties; and virtual attributes answered by the fs itself.
//!
//! Properties (props.rs) are stored as the attributes `user.squeezefs.NAME`: a set is
//! validated (a bad value, an unknown `user.squeezefs.*` name or a property on an inode
//! that does not take it is EINVAL and changes nothing) and stored in canonical form;
//! removing one returns the inode to inheriting it; `getfattr -d` lists them like any
//! attribute, so tools that copy attributes carry them. A change applies to writes made
//! after it returns (inherit.rs).
//!
//! Virtual attributes (never listed, so copies ignore them; setting one is EPERM):
//! * `user.squeezefs.usage` (get, any file or directory): compsize rows, see [`crate::ops::usage`];
//!   on the root directory it first commits all dirty data (a sync);
//! * `user.squeezefs.effective` (get, any file or directory): every property's effective
//!   value and source (props.rs `encode_effective`), what `squeezefs prop get` shows;
//! * `user.squeezefs.mount` (get, root directory): the mount's settings, daemon pid and
//!   request transport;
//! * `user.squeezefs.qos-stats` (get, a directory holding `qos`, or the root of a mount
//!   with `qos=`): the tree's stats line (control::qos::stats TEXT: target, allotment,
//!   achieved throughput over the last 10 s and since the tree was first seen, ratio and
//!   levels of its records), what `squeezefs stats` shows per tree; ENODATA elsewhere;
//! * `trusted.squeezefs.remount` (set, root directory, root only): comma-separated
//!   `compress=SPEC` or `compress-force=SPEC` (applied to data written from now on),
//!   `qos=RATE` or `qos=none` (the mount-wide tree, writes from now on) and `noatime` or
//!   `relatime` (reads from now on); what `squeezefs mount -o remount` sends.
//!
//! (The transport answers a fourth, `user.squeezefs.requests` on the root: FUSE requests
//! served per opcode; squeezefs-fuse `requests.rs`.)
//!
use crate::error::{FsError, Result};
use crate::props::{self, Prop, PropError, Value};
use crate::rules::creds::{Cap, Creds};
use crate::rules::perm::{self, MAY_READ, MAY_WRITE, S_ISVTX};
use crate::{ops::usage, rules::time, Compression, Fs};
use squeezefs_codec::Spec;
use squeezefs_pipeline::{FileKind, Ino, InodeAttr, ROOT_INO};

pub const XATTR_CREATE: i32 = 1;
pub const XATTR_REPLACE: i32 = 2;
/// XATTR_NAME_MAX and XATTR_SIZE_MAX of Linux.
const NAME_MAX: usize = 255;
const SIZE_MAX: usize = 65536;

pub const XATTR_MOUNT: &str = "user.squeezefs.mount";
pub const XATTR_EFFECTIVE: &str = "user.squeezefs.effective";
pub const XATTR_QOS_STATS: &str = "user.squeezefs.qos-stats";
/// Answered by the transport (squeezefs-fuse `requests.rs`).
const XATTR_REQUESTS: &str = "user.squeezefs.requests";
/// Names in the properties' namespace that are not properties.
const VIRTUAL: [&str; 5] = [usage::XATTR_USAGE, XATTR_MOUNT, XATTR_EFFECTIVE, XATTR_REQUESTS, XATTR_QOS_STATS];
pub const XATTR_REMOUNT: &str = "trusted.squeezefs.remount";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ns {
    User,
    Trusted,
    Security,
}

fn namespace(name: &[u8]) -> Result<Ns> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(FsError::Range);
    }
    if [&b"user."[..], b"trusted.", b"security."].contains(&name) {
        return Err(FsError::Invalid("extended attribute name is only a namespace prefix"));
    }
    if name.starts_with(b"user.") && name.len() > 5 {
        Ok(Ns::User)
    } else if name.starts_with(b"trusted.") && name.len() > 8 {
        Ok(Ns::Trusted)
    } else if name.starts_with(b"security.") && name.len() > 9 {
        Ok(Ns::Security)
    } else if name.starts_with(b"system.") {
        Err(FsError::NotSupported("system.* attributes (POSIX ACLs are not supported)"))
    } else {
        Err(FsError::NotSupported("xattr namespace: use user., trusted. or security."))
    }
}

impl Fs {
    /// xattr_permission (+ the LSM rule that only CAP_SYS_ADMIN writes security.*).
    fn check_xattr(&self, a: &InodeAttr, c: &Creds, ns: Ns, write: bool) -> Result<()> {
        let denied = if write { FsError::Perm } else { FsError::NoXattr };
        match ns {
            Ns::Trusted if !c.capable(Cap::SysAdmin) => return Err(denied),
            Ns::Trusted => return Ok(()),
            Ns::Security if write && !c.capable(Cap::SysAdmin) => return Err(FsError::Perm),
            Ns::Security => return Ok(()),
            Ns::User => {
                if a.kind != FileKind::File && a.kind != FileKind::Dir {
                    return Err(denied);
                }
                if write && a.kind == FileKind::Dir && a.perm & S_ISVTX != 0 && !perm::is_owner(a, c) {
                    return Err(FsError::Perm);
                }
            }
        }
        self.check_perm(a, c, if write { MAY_WRITE } else { MAY_READ })
    }

    pub fn getxattr(&self, c: &Creds, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        let ns = namespace(name)?;
        let a = self.stat(ino)?;
        self.check_xattr(&a, c, ns, false)?;
        if name == usage::XATTR_USAGE.as_bytes() {
            if ino == ROOT_INO && !self.read_only() {
                // asking the root commits dirty data first, so the rows that follow
                // describe everything written so far (what `squeezefs stats` does)
                self.engine.sync()?;
            }
            return self.usage_table(ino);
        }
        if name == XATTR_MOUNT.as_bytes() && ino == ROOT_INO {
            return Ok(self.mount_info().into_bytes());
        }
        if name == XATTR_EFFECTIVE.as_bytes() {
            return Ok(props::encode_effective(&self.effective(ino)?));
        }
        if name == XATTR_QOS_STATS.as_bytes() {
            return self.qos_stats_line(ino);
        }
        self.engine.get_xattr(ino, name)?.ok_or(FsError::NoXattr)
    }

    fn usage_table(&self, ino: Ino) -> Result<Vec<u8>> {
        let rows: Vec<usage::Row> = self
            .engine
            .usage(ino)?
            .into_iter()
            .map(|r| usage::Row {
                alg: r.alg,
                level: r.level,
                disk_bytes: r.disk_bytes,
                uncompressed_bytes: r.uncompressed_bytes,
                referenced_bytes: r.referenced_bytes,
            })
            .collect();
        Ok(usage::encode(&rows))
    }

    /// `key=value` lines describing this mount (read by `squeezefs stats` and `umount`).
    pub fn mount_info(&self) -> String {
        let mut s = format!("pid={}\n", std::process::id());
        // `squeezefs umount` reads the daemon's exit report there (a path holding a newline
        // would be cut; the line is informational otherwise)
        s.push_str(&format!("pool={}\n", self.engine.info().pool_dir.display()));
        match self.compression() {
            Some(Compression { spec, force: true }) => s.push_str(&format!("compress-force={spec}\n")),
            Some(Compression { spec, force: false }) => s.push_str(&format!("compress={spec}\n")),
            None => s.push_str("compress=none\n"),
        }
        if let Some(r) = self.mount_qos() {
            s.push_str(&format!("qos={}\n", Value::Rate(Some(r))));
        }
        s.push_str(if self.read_only() { "ro\n" } else { "rw\n" });
        s.push_str(if self.noatime() { "noatime\n" } else { "relatime\n" });
        if !self.cfg.check_permissions {
            s.push_str("default_permissions\n");
        }
        let transport = self.transport();
        if !transport.is_empty() {
            s.push_str(&format!("transport={transport}\n"));
        }
        s
    }

    pub fn listxattr(&self, c: &Creds, ino: Ino) -> Result<Vec<Vec<u8>>> {
        let _ = self.stat(ino)?;
        let mut names = self.engine.list_xattr(ino)?;
        let trusted = |n: &Vec<u8>| n.starts_with(b"trusted.");
        if names.iter().any(trusted) && !c.capable(Cap::SysAdmin) {
            names.retain(|n| !trusted(n));
        }
        Ok(names)
    }

    pub fn setxattr(&self, c: &Creds, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        let ns = namespace(name)?;
        if value.len() > SIZE_MAX {
            return Err(FsError::TooBig);
        }
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(FsError::Invalid("setxattr flags"));
        }
        if name == XATTR_REMOUNT.as_bytes() {
            if ino != ROOT_INO {
                return Err(FsError::Invalid("trusted.squeezefs.remount is set on the mount's root"));
            }
            if !c.capable(Cap::SysAdmin) {
                return Err(FsError::Perm);
            }
            return self.remount(value);
        }
        if VIRTUAL.iter().any(|v| v.as_bytes() == name) {
            return Err(FsError::Perm);
        }
        if name.starts_with(props::XATTR_PREFIX.as_bytes()) {
            let prop = Prop::from_xattr(name).ok_or_else(|| {
                PropError::Unknown(String::from_utf8_lossy(&name[props::XATTR_PREFIX.len()..]).into_owned())
            });
            let parsed = prop.clone().and_then(|p| props::parse_bytes(p, value));
            if let Err(e) = &parsed {
                log::debug!("inode {ino}: refused {}: {e}", String::from_utf8_lossy(name));
            }
            return self.set_property(Some(c), ino, prop?, parsed?, flags);
        }
        self.check_writable()?;
        let now = time::now();
        self.tx(|tx| {
            let mut a = tx.get_inode(ino)?;
            self.check_xattr(&a, c, ns, true)?;
            let exists = tx.get_xattr(ino, name)?.is_some();
            if flags & XATTR_CREATE != 0 && exists {
                return Err(FsError::Exists);
            }
            if flags & XATTR_REPLACE != 0 && !exists {
                return Err(FsError::NoXattr);
            }
            tx.set_xattr(ino, name, value)?;
            a.ctime = now;
            tx.put_inode(&a)?;
            Ok(())
        })?;
        self.attrsync()
    }

    pub fn removexattr(&self, c: &Creds, ino: Ino, name: &[u8]) -> Result<()> {
        let ns = namespace(name)?;
        self.check_writable()?;
        let now = time::now();
        let prop = Prop::from_xattr(name);
        let inherited = match prop {
            Some(Prop::Recordsize) => Some(self.inherited_effective(ino)?),
            _ => None,
        };
        self.retry_after_sync(|| {
            self.tx(|tx| {
                let mut a = tx.get_inode(ino)?;
                self.check_xattr(&a, c, ns, true)?;
                match tx.remove_xattr(ino, name) {
                    Ok(()) => {}
                    Err(squeezefs_pipeline::EngineError::NoEntry) => return Err(FsError::NoXattr),
                    Err(e) => return Err(e.into()),
                }
                if let Some(eff) = &inherited {
                    self.refix_record_size(tx, &a, None, eff)?;
                }
                a.ctime = now;
                tx.put_inode(&a)?;
                Ok(())
            })
        })?;
        if let Some(p) = Prop::from_xattr(name) {
            self.property_changed(ino, p);
        }
        self.attrsync()
    }

    /// Set property `prop` of `ino` to `value` (`None`: drop the local value), as a setxattr
    /// with `flags` by `c` (`None`: the caller checked permissions, chattr's ioctl).
    pub(crate) fn set_property(
        &self,
        c: Option<&Creds>,
        ino: Ino,
        prop: Prop,
        value: Option<Value>,
        flags: i32,
    ) -> Result<()> {
        self.check_writable()?;
        let name = prop.xattr().as_bytes();
        let now = time::now();
        let inherited = match prop {
            Prop::Recordsize => Some(self.inherited_effective(ino)?),
            _ => None,
        };
        let changed = self.retry_after_sync(|| {
            self.tx(|tx| {
                let mut a = tx.get_inode(ino)?;
                if let Some(c) = c {
                    self.check_xattr(&a, c, Ns::User, true)?;
                }
                props::check_kind(prop, a.kind)?;
                let exists = tx.get_xattr(ino, name)?.is_some();
                if flags & XATTR_CREATE != 0 && exists {
                    return Err(FsError::Exists);
                }
                if flags & XATTR_REPLACE != 0 && !exists {
                    return Err(FsError::NoXattr);
                }
                if let Some(eff) = &inherited {
                    self.refix_record_size(tx, &a, value, eff)?;
                }
                match value {
                    Some(v) => tx.set_xattr(ino, name, v.to_string().as_bytes())?,
                    None if exists => tx.remove_xattr(ino, name)?,
                    None => return Ok(false), // `qos=none` where none is set: nothing changes
                }
                a.ctime = now;
                tx.put_inode(&a)?;
                Ok(true)
            })
        })?;
        if changed {
            self.property_changed(ino, prop);
        }
        self.attrsync()
    }

    /// A regular file's `recordsize` becomes `value` (`None`: what it inherits, `inherited`):
    /// its records take that size while it is empty. A file holding data keeps its records:
    /// setting another value is refused (`RecordsizeFixed`), dropping its own value leaves
    /// the records as they are (`prop get` shows their size as `fixed`). Directories only
    /// store the value (for files created below them later).
    fn refix_record_size(
        &self,
        tx: &mut squeezefs_pipeline::MetaTx<'_>,
        a: &InodeAttr,
        value: Option<Value>,
        inherited: &props::Effective,
    ) -> Result<()> {
        if a.kind != FileKind::File {
            return Ok(());
        }
        let want = match value.unwrap_or(inherited.get(Prop::Recordsize).0) {
            Value::Size(b) => u64::from(b),
            _ => return Err(FsError::Invalid("recordsize takes a size")),
        };
        let now = tx.record_size(a.ino)?;
        if want == now {
            return Ok(());
        }
        if a.size > 0 {
            return match value {
                Some(_) => Err(FsError::RecordsizeFixed { size: a.size, recordsize: now }),
                None => Ok(()),
            };
        }
        Ok(tx.set_record_size(a.ino, want)?)
    }

    /// Run `f`; when it fails because an emptied file's old records still wait for a commit
    /// (`RecordSizeBusy`), sync and run it once more.
    fn retry_after_sync<T>(&self, f: impl Fn() -> Result<T>) -> Result<T> {
        match f() {
            Err(FsError::Engine(squeezefs_pipeline::EngineError::RecordSizeBusy { .. })) => {
                self.engine.sync()?;
                f()
            }
            r => r,
        }
    }

    /// Property `prop` of `ino` changed: its own values are read again when needed, and
    /// what it and everything below inherits is resolved anew (a write after this returns
    /// uses it); a background codec changed: background compression looks at every record
    /// again (background.rs reset).
    fn property_changed(&self, ino: Ino, prop: Prop) {
        self.inodes.set_local(ino, None);
        self.inodes.bump_gen();
        if prop == Prop::BackgroundCompression {
            self.bg.reset();
        }
    }

    /// Apply `compress=SPEC` / `compress-force=SPEC` (comma-separated) to new writes.
    fn remount(&self, value: &[u8]) -> Result<()> {
        let text = std::str::from_utf8(value).map_err(|_| FsError::Invalid("remount options are not UTF-8"))?;
        let mut new = None;
        let mut noatime = None;
        let mut qos = None;
        for opt in text.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (force, spec) = if let Some(s) = opt.strip_prefix("compress-force=") {
                (true, s)
            } else if let Some(s) = opt.strip_prefix("compress=") {
                (false, s)
            } else if opt == "noatime" || opt == "relatime" {
                noatime = Some(opt == "noatime");
                continue;
            } else if let Some(r) = opt.strip_prefix("qos=") {
                qos = Some(props::parse_rate(r).map_err(|_| FsError::Invalid("bad qos rate"))?);
                continue;
            } else {
                return Err(FsError::Invalid(
                    "remount accepts compress=SPEC, compress-force=SPEC, qos=RATE, noatime and relatime",
                ));
            };
            let spec: Spec = spec.parse().map_err(|_| FsError::Invalid("bad compression spec"))?;
            new = Some(Compression { spec, force });
        }
        if new.is_none() && noatime.is_none() && qos.is_none() {
            return Err(FsError::Invalid("empty remount option list"));
        }
        if let Some(q) = qos {
            self.set_mount_qos(q);
        }
        if let Some(c) = new {
            // commit what was written under the old setting first, so the new one
            // applies exactly to writes made after the remount
            if !self.read_only() {
                self.engine.sync()?;
            }
            self.set_compression(c);
        }
        if let Some(n) = noatime {
            self.noatime.store(n, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}
