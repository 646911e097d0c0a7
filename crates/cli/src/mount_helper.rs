//! `mount.fuse.squeezefs`: the entry point mount(8) runs for `mount -t fuse.squeezefs`
//! and for fstab lines of that type. Install it as a link to the squeezefs binary:
//!
//! ```text
//! ln -s "$(command -v squeezefs)" /sbin/mount.fuse.squeezefs
//! ```
//!
//! When the binary is called under that name (`argv[0]`) it takes mount(8)'s calling
//! convention, `mount.fuse.squeezefs POOL MOUNTPOINT [-o OPTS] [-n] [-s] [-f] [-v]`,
//! and runs `squeezefs mount POOL MOUNTPOINT -o OPTS`. -n (no mtab), -s (sloppy) and -v
//! are accepted and ignored; -f (fake) exits without mounting.
//!
//! `umount.fuse.squeezefs` (a second link) is what umount(8) runs for a mount of this type
//! when it reads the type from the mount table: with `umount -c`, as systemd's mount units
//! call it, and for mounts with a utab entry (a userspace option such as `helper=`). It runs
//! `squeezefs umount MOUNTPOINT`, which returns once the daemon has flushed and exited; a
//! plain `umount` of the kernel's FUSE mount returns before that.
use anyhow::{bail, Result};

pub const HELPER_NAME: &str = "mount.fuse.squeezefs";
pub const UMOUNT_HELPER_NAME: &str = "umount.fuse.squeezefs";

/// Which helper name the binary was called under (`argv[0]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helper {
    Mount,
    Umount,
}

pub fn invoked_as_helper() -> Option<Helper> {
    let arg0 = std::env::args_os().next()?;
    let name = std::path::Path::new(&arg0).file_name()?.to_str()?.to_string();
    if name.starts_with("umount.fuse") {
        Some(Helper::Umount)
    } else if name.starts_with("mount.fuse") {
        Some(Helper::Mount)
    } else {
        None
    }
}

/// umount(8)'s helper arguments, `MOUNTPOINT [-flnrv] [-t TYPE] [-N NS]`, → `squeezefs umount`
/// arguments. -l detaches (lazy); -n, -r, -v, -f, -t and -N are accepted and ignored.
pub fn translate_umount(args: &[String]) -> Result<crate::cmd_umount::UmountArgs> {
    let mut positional = Vec::new();
    let mut lazy = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-t" | "-N" => i += 1,
            s if s.starts_with('-') && s.len() > 1 => {
                for c in s[1..].chars() {
                    match c {
                        'l' => lazy = true,
                        'f' | 'n' | 'r' | 'v' => {}
                        _ => bail!(
                            "{UMOUNT_HELPER_NAME}: unknown flag '-{c}' (accepted: -l, -f, -n, -r, -v, -t TYPE, -N NS)"
                        ),
                    }
                }
            }
            s => positional.push(s.to_string()),
        }
        i += 1;
    }
    if positional.len() != 1 {
        bail!("usage: {UMOUNT_HELPER_NAME} MOUNTPOINT [-l] [-n] [-r] [-v] [-f] [-t TYPE]");
    }
    Ok(crate::cmd_umount::UmountArgs { mountpoint: positional.remove(0).into(), lazy, timeout: 600 })
}

/// The helper's arguments → `squeezefs mount` arguments (`None`: fake mount, do nothing).
pub fn translate(args: &[String]) -> Result<Option<crate::cmd_mount::MountArgs>> {
    let mut positional = Vec::new();
    let mut opts = Vec::new();
    let mut fake = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-o" => {
                let Some(o) = args.get(i + 1) else { bail!("{HELPER_NAME}: -o needs an option list") };
                opts.push(o.clone());
                i += 1;
            }
            s if s.starts_with("-o") => opts.push(s[2..].to_string()),
            "-n" | "-s" | "-v" => {}
            "-f" => fake = true,
            s if s.starts_with('-') => {
                bail!("{HELPER_NAME}: unknown flag '{s}' (accepted: -o OPTS, -n, -s, -f, -v)")
            }
            s => positional.push(s.to_string()),
        }
        i += 1;
    }
    if positional.len() != 2 {
        bail!("usage: {HELPER_NAME} POOL MOUNTPOINT [-o OPTIONS]");
    }
    if fake {
        return Ok(None);
    }
    // old-style fstab source "squeezefs#POOL"
    let pool = positional[0].strip_prefix("squeezefs#").unwrap_or(&positional[0]).to_string();
    Ok(Some(crate::cmd_mount::MountArgs {
        pool: pool.into(),
        mountpoint: positional[1].clone().into(),
        options: opts,
        foreground: false,
        wait: crate::open_pool::DEFAULT_WAIT_SECS,
        from_mount8: true,
    }))
}

pub fn run(helper: Helper) -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if helper == Helper::Umount {
        return crate::cmd_umount::run(translate_umount(&args)?);
    }
    match translate(&args)? {
        Some(m) => crate::cmd_mount::run(m),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn mount8_arguments_are_translated() {
        let m = translate(&s(&["/pool", "/mnt", "-o", "rw,compress=zstd"])).unwrap().unwrap();
        assert_eq!(m.pool, std::path::PathBuf::from("/pool"));
        assert_eq!(m.mountpoint, std::path::PathBuf::from("/mnt"));
        assert_eq!(m.options, vec!["rw,compress=zstd".to_string()]);
        let m = translate(&s(&["-n", "squeezefs#/p", "/m", "-oro", "-v"])).unwrap().unwrap();
        assert_eq!((m.pool.to_str().unwrap(), m.options[0].as_str()), ("/p", "ro"));
        assert!(translate(&s(&["/p", "/m", "-f"])).unwrap().is_none());
        assert!(translate(&s(&["/p"])).is_err());
        assert!(translate(&s(&["/p", "/m", "-x"])).is_err());
    }

    #[test]
    fn umount8_arguments_are_translated() {
        let u = translate_umount(&s(&["/mnt", "-n", "-t", "fuse.squeezefs"])).unwrap();
        assert_eq!((u.mountpoint.to_str().unwrap(), u.lazy), ("/mnt", false));
        assert!(translate_umount(&s(&["-lv", "/mnt"])).unwrap().lazy);
        assert!(translate_umount(&s(&["/mnt", "-x"])).is_err());
        assert!(translate_umount(&s(&[])).is_err());
    }
}
