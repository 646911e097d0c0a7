//! `squeezefs mount POOL MOUNTPOINT [-o OPTS] [--foreground]`
//!
//! Daemon life cycle (states → transitions):
//! * parse: options → MountConfig; bad options exit 1 with nothing mounted.
//! * fork (unless --foreground): the parent waits on a pipe for the child's verdict and
//!   exits 0 once the mount is live, or 1 with the child's error. The fork happens before
//!   any thread exists (the engine starts threads when it opens the pool).
//! * serve: open the pool, mount, answer INIT; report "ok"; detach stdio (stderr, and with it
//!   every log message, goes to the pool's log file, see [`crate::open_pool::LOG_FILE`]); serve requests.
//! * stop: unmount (`squeezefs umount`, `umount`, SIGTERM/SIGINT/SIGHUP) ends the session;
//!   the fs core then frees orphans and closes the engine (flush + commit); exit 0.
//!
//! `-o remount,...` does not fork: it sends the new options to the live mount (see
//! `squeezefs_fs` xattr docs: `trusted.squeezefs.remount` on the mount's root).
use anyhow::{anyhow, bail, Context, Result};
use squeezefs_fs::{Fs, FsConfig};
use squeezefs_fuse::mount_config::LiveMount;
use squeezefs_fuse::{mount, MountConfig};
use squeezefs_pipeline::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// Pool to mount (made by `squeezefs mkfs`)
    pub pool: PathBuf,
    /// Directory to mount it on
    pub mountpoint: PathBuf,
    /// Options, comma-separated: compress=SPEC, compress-force=SPEC, background_compression=SPEC,
    /// bg-idle=DURATION|off (idle time before background compression works, default 30s),
    /// recordsize=SIZE (of files created where no directory sets the recordsize property), ro,
    /// allow_other, default_permissions, remount, uring=auto|on|off (auto, the default: FUSE
    /// over io_uring for root mounts, switching the kernel's enable_uring parameter on when
    /// it is off; off: /dev/fuse), trace=FILE (one CSV row per record compressed, for
    /// `squeezefs plot`; outside the mount), and generic fstab options
    #[arg(short = 'o', value_name = "OPTS")]
    pub options: Vec<String>,
    /// Stay in the foreground (do not daemonize)
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Seconds to wait for the previous daemon of this pool when it is still closing it
    /// (flushing after its unmount) before giving up; a pool in use is refused at once
    #[arg(long, value_name = "SECS", default_value_t = crate::open_pool::DEFAULT_WAIT_SECS)]
    pub wait: u64,
    /// Called by mount(8) as its helper: a remount's options are then the whole resulting
    /// set (mount(8) merged them with the live mount's), not a change to it
    #[arg(skip)]
    pub from_mount8: bool,
}

pub fn run(args: MountArgs) -> Result<()> {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).try_init();
    let mut cfg = MountConfig::parse(&args.options.join(","))?;
    if cfg.remount {
        let cfg = if args.from_mount8 { cfg.with_complete_mount_flags() } else { cfg };
        return remount(&args.mountpoint, &cfg);
    }
    let mountpoint = std::fs::canonicalize(&args.mountpoint)
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    if !mountpoint.is_dir() {
        bail!("mount point {} is not a directory", mountpoint.display());
    }
    let pool = std::fs::canonicalize(&args.pool).with_context(|| format!("pool {}", args.pool.display()))?;
    // before the daemon leaves this directory: a relative trace path is taken from here
    cfg.resolve_trace(&std::env::current_dir().context("the current directory")?, &mountpoint)?;
    if let Some(d) = &cfg.object.cache_dir {
        if !d.is_dir() {
            anyhow::bail!("mount option 's3-cache-dir={}': no such directory (create it first)", d.display());
        }
    }
    if args.foreground {
        return serve(&pool, &mountpoint, &cfg, args.wait, |r| {
            if let Err(e) = &r {
                eprintln!("squeezefs mount: {e}");
            }
        });
    }
    let log = pool.join(crate::open_pool::LOG_FILE);
    daemonize(&log, |report| serve(&pool, &mountpoint, &cfg, args.wait, report))
}

/// A daemon log larger than this moves to `squeezefs.log.1` when the next mount starts.
const LOG_ROTATE_BYTES: u64 = 1 << 20;

/// One line in the daemon log, whatever the log filter says (mount and unmount are rare
/// and always worth a line).
fn log_event(msg: &str) {
    let now = jiff::Timestamp::now().round(jiff::Unit::Second).unwrap_or_else(|_| jiff::Timestamp::now());
    eprintln!("[{now} squeezefs pid {}] {msg}", std::process::id());
}

/// `-o remount,...`: the per-mount flags (dev, suid, exec, atime) change in the kernel
/// (`MS_REMOUNT | MS_BIND`), the compression, `qos` and the atime mode go to the daemon serving
/// `mountpoint`. Options fixed at mount time may be restated (mount(8) repeats the live
/// ones) but not changed.
fn remount(mountpoint: &Path, cfg: &MountConfig) -> Result<()> {
    let canonical =
        std::fs::canonicalize(mountpoint).with_context(|| format!("mount point {}", mountpoint.display()))?;
    let live = LiveMount::from_proc_mounts_options(
        &live_mount_options(&canonical)
            .with_context(|| format!("{} is not the root of a squeezefs mount", mountpoint.display()))?,
    );
    cfg.check_remount(&live)?;
    let flags = cfg.per_mount_flags(&live);
    let mut req: Vec<String> = cfg.remount_request().into_iter().collect();
    if let Some(f) = flags.filter(|f| f.noatime != live.flags.noatime) {
        req.push(if f.noatime { "noatime" } else { "relatime" }.into());
    }
    if let Some(f) = flags {
        remount_mount_flags(&canonical, f, live.read_only)?;
    }
    if req.is_empty() {
        // nothing for the daemon (e.g. a bare `mount -o remount` from a script)
        return Ok(());
    }
    let req = req.join(",");
    crate::cmd_stats::mount_info(mountpoint)
        .with_context(|| format!("{} is not the root of a squeezefs mount", mountpoint.display()))?;
    crate::xattr_io::set_xattr(mountpoint, squeezefs_fs::xattr_names::REMOUNT, req.as_bytes())
        .with_context(|| format!("remount {} with {req}", mountpoint.display()))?;
    Ok(())
}

/// Set the per-mount flags of the mount at `target` to exactly `f` (keeping it read-only if
/// it is): mount(2) with `MS_REMOUNT | MS_BIND` changes the mount, not the filesystem.
fn remount_mount_flags(target: &Path, f: squeezefs_fuse::mount_config::KernelFlags, read_only: bool) -> Result<()> {
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND;
    for (on, bit) in [
        (f.nodev, libc::MS_NODEV),
        (f.nosuid, libc::MS_NOSUID),
        (f.noexec, libc::MS_NOEXEC),
        (read_only, libc::MS_RDONLY),
    ] {
        if on {
            flags |= bit;
        }
    }
    flags |= if f.noatime { libc::MS_NOATIME } else { libc::MS_RELATIME };
    let c = std::ffi::CString::new(target.as_os_str().as_bytes()).context("mount point path holds a NUL byte")?;
    // SAFETY: plain syscall; the path is a valid C string and the other pointers are null,
    // which MS_REMOUNT | MS_BIND allows.
    let r = unsafe { libc::mount(std::ptr::null(), c.as_ptr(), std::ptr::null(), flags, std::ptr::null()) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        bail!("remounting {} with new mount flags: {e}", target.display());
    }
    Ok(())
}

/// The options field of the last /proc/self/mounts line that mounts squeezefs on
/// `mountpoint` (the topmost mount there).
fn live_mount_options(mountpoint: &Path) -> Result<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    mounts
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 3 && f[2] == mount::FS_TYPE && crate::on_mount::unescape_mount_field(f[1]) == mountpoint)
                .then(|| f[3].to_string())
        })
        .ok_or_else(|| anyhow!("/proc/self/mounts lists no {} mount there", mount::FS_TYPE))
}

/// Fork; the parent exits with the child's verdict on the mount.
fn daemonize(log: &Path, child: impl FnOnce(&mut dyn FnMut(Result<(), String>)) -> Result<()>) -> Result<()> {
    let mut fds = [0 as RawFd; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    match unsafe { libc::fork() } {
        -1 => bail!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            drop(rd);
            unsafe { libc::setsid() };
            let mut pipe = Some(std::fs::File::from(wr));
            let mut report = |r: Result<(), String>| {
                if let Some(mut p) = pipe.take() {
                    let msg = match r {
                        Ok(()) => "ok".to_string(),
                        Err(e) => format!("error: {e}"),
                    };
                    let _ = p.write_all(msg.as_bytes());
                    detach_stdio(log);
                }
            };
            let r = child(&mut report);
            // after the mount went live, stderr is the pool log: the error lands there
            if let Err(e) = &r {
                log_event(&format!("exiting after an error: {e:#}"));
            }
            std::process::exit(if r.is_ok() { 0 } else { 1 });
        }
        pid => {
            drop(wr);
            let mut msg = String::new();
            let _ = std::fs::File::from(rd).read_to_string(&mut msg);
            if msg == "ok" {
                return Ok(());
            }
            let mut status = 0;
            unsafe { libc::waitpid(pid, &mut status, 0) };
            match msg.strip_prefix("error: ") {
                Some(e) => Err(anyhow!("{e}")),
                None => Err(anyhow!("the mount daemon exited before the mount was live (status {status})")),
            }
        }
    }
}

/// stdin/stdout → /dev/null, stderr → the pool log (or /dev/null if the log cannot be
/// opened, e.g. a pool on a read-only filesystem mounted `ro`).
fn detach_stdio(log: &Path) {
    if std::fs::metadata(log).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let mut old = log.as_os_str().to_owned();
        old.push(".1");
        let _ = std::fs::rename(log, old);
    }
    let log_c = std::ffi::CString::new(log.as_os_str().as_bytes()).ok();
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        let err = match &log_c {
            Some(p) => libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC, 0o600),
            None => -1,
        };
        let err = if err >= 0 { err } else { null };
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
        }
        if err >= 0 {
            libc::dup2(err, 2);
        }
        for fd in [null, err] {
            if fd > 2 {
                libc::close(fd);
            }
        }
        libc::chdir(c"/".as_ptr());
    }
}

/// Signals that stop the daemon; blocked in every thread, taken by one sigwait thread.
fn stop_signals() -> libc::sigset_t {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

fn serve(
    pool: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    wait: u64,
    report: impl FnOnce(Result<(), String>),
) -> Result<()> {
    let set = stop_signals();
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    let (session, fs, transport) = match open_and_mount(pool, mountpoint, cfg, wait) {
        Ok(s) => s,
        Err(e) => {
            let msg = crate::error_line::one_line(&e);
            report(Err(msg.clone()));
            bail!(msg);
        }
    };
    let mnt = mountpoint.to_path_buf();
    std::thread::Builder::new()
        .name("squeezefs-signals".into())
        .spawn(move || {
            let mut sig = 0;
            unsafe { libc::sigwait(&set, &mut sig) };
            stop_on_signal(&mnt);
        })
        .context("starting the signal thread")?;
    // the control channel (squeezefs recompress, stats): the mount works without it
    let control = match squeezefs_ctlsock::Server::start(pool, fs.clone()) {
        Ok(s) => Some(s),
        Err(e) => {
            log_event(&format!("no control channel (squeezefs recompress and stats cannot reach this mount): {e}"));
            None
        }
    };
    fs.start_background(cfg.bg_idle.unwrap_or(Some(squeezefs_fuse::mount_config::DEFAULT_BG_IDLE)));
    report(Ok(()));
    let spec = cfg.remount_request().unwrap_or_else(|| "pool's compression".into());
    log_event(&format!(
        "mounted {} on {} ({spec}; requests: {})",
        pool.display(),
        mountpoint.display(),
        if transport.uring_queues > 0 { transport.describe() } else { "/dev/fuse".into() }
    ));
    if let Some(why) = &transport.fallback {
        log_event(&format!("requests come through /dev/fuse, not FUSE over io_uring: {why}"));
    }
    let served = session.run().context("serving FUSE requests");
    if let Some(c) = control {
        c.stop();
    }
    // the session ran the flush at unmount before returning
    let flush = fs.shutdown_error();
    write_unmount_report(pool, flush.as_deref());
    served?;
    if let Some(e) = flush {
        bail!("unmounted {}, but flushing the pool failed: {e}", mountpoint.display());
    }
    log_event(&format!("unmounted {}", mountpoint.display()));
    Ok(())
}

/// The daemon's report on its flush at unmount, in the pool directory: `squeezefs umount`
/// cannot see the exit status of a daemon that is not its child, so it reads this file,
/// written (atomically) just before the daemon exits: `pid=N` and `flushed` or `error=…`.
pub const UNMOUNT_REPORT: &str = "squeezefs.unmount";

fn write_unmount_report(pool: &Path, error: Option<&str>) {
    let body = match error {
        None => format!("pid={}\nflushed\n", std::process::id()),
        Some(e) => format!("pid={}\nerror={}\n", std::process::id(), e.replace('\n', " ")),
    };
    let tmp = pool.join(format!("{UNMOUNT_REPORT}.tmp"));
    let r = std::fs::write(&tmp, body).and_then(|()| std::fs::rename(&tmp, pool.join(UNMOUNT_REPORT)));
    if let Err(e) = r {
        log::error!("writing {}: {e}", pool.join(UNMOUNT_REPORT).display());
    }
}

fn open_and_mount(
    pool: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    wait: u64,
) -> Result<(squeezefs_fuse::Session, Arc<Fs>, mount::Transport)> {
    // redb panics on a damaged page of a plain store (no checksums to stop it first); a
    // store with a block lost in every copy is named block by block
    let engine = crate::meta_report::no_panic("mount", || {
        crate::open_pool::open_waiting(pool, &open_options(cfg), std::time::Duration::from_secs(wait))
            .with_context(|| format!("opening pool {}", pool.display()))
    })
    .map_err(|e| match crate::meta_report::lost_blocks(pool) {
        Some(lost) => e.context(lost),
        None => e,
    })?;
    let fs_cfg = FsConfig {
        read_only: cfg.read_only,
        check_permissions: !cfg.default_permissions,
        compression: cfg.compression,
        background: cfg.background,
        qos: cfg.qos.flatten(),
        recordsize: cfg.recordsize,
        noatime: cfg.flags.noatime,
        nodiratime: cfg.nodiratime,
        dirsync: cfg.flags.dirsync,
        sync: cfg.flags.sync,
    };
    let fs = Arc::new(Fs::new(engine.clone(), fs_cfg).context("starting the filesystem")?);
    match mount::mount(fs.clone(), pool, mountpoint, cfg) {
        Ok((s, transport)) => {
            // once this mount is gone, a new mount of the pool waits for this daemon to close
            // it instead of refusing (pipeline pool_lock.rs)
            match mount::mount_device(mountpoint) {
                Some(dev) => engine.record_mount(&dev, mountpoint),
                None => log::warn!("{} is not in /proc/self/mountinfo", mountpoint.display()),
            }
            Ok((s, fs, transport))
        }
        Err(e) => {
            let _ = fs.shutdown();
            Err(anyhow!("mounting {} on {}: {e}", pool.display(), mountpoint.display()))
        }
    }
}

fn open_options(cfg: &MountConfig) -> OpenOptions {
    let mut o = OpenOptions { read_only: cfg.read_only, trace: cfg.trace.clone(), ..OpenOptions::default() };
    if let Some(b) = cfg.qos_burst {
        o.qos_burst = b;
    }
    if let Some(c) = cfg.compression {
        o.compression = c.spec;
        o.force_compression = c.force;
    }
    o.object.stall_timeout = cfg.object.stall_timeout;
    o.object.cache_bytes = cfg.object.cache_bytes;
    o.object.cache_dir = cfg.object.cache_dir.clone();
    o.object.backup_interval = cfg.object.backup_interval;
    o.object.repack_interval = cfg.object.repack_interval;
    o
}

/// SIGTERM & co: unmount; a busy mount is detached and its connection aborted, so the
/// session ends and the pool is flushed and closed either way.
fn stop_on_signal(mnt: &Path) {
    let dev = std::fs::metadata(mnt).map(|m| m.dev()).ok();
    match mount::unmount(mnt, false) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let _ = mount::unmount(mnt, true);
            if let Some(dev) = dev {
                if let Err(e) = mount::abort_connection(dev) {
                    log::error!("aborting the FUSE connection of {}: {e}", mnt.display());
                }
            }
        }
        Err(e) => log::error!("unmounting {}: {e}", String::from_utf8_lossy(mnt.as_os_str().as_bytes())),
    }
}
