//! The daemon's side of the control channel: a Unix socket `control.sock` in the pool
//! directory, served by one accepting thread and one thread per connection.
//!
//! ```text
//! socket life: START  a socket file left by a daemon that died is removed (nobody
//!                     answers on it); one that answers belongs to a live daemon and
//!                     START fails; the new socket is bound with mode 0600 and, when the
//!                     daemon runs as root, given to the pool directory's owner.
//!              SERVE  accept → check the peer (below) → read one request line → answer
//!                     → close. At most MAX_CONNECTIONS at once; more get `busy`.
//!              STOP   (unmount) no more connections are accepted; the socket file is
//!                     removed. Jobs still running stop on their own (the fs core's
//!                     shutdown cancels them).
//! peers allowed: uid 0, the pool directory's owner, and the daemon's own uid
//!                (SO_PEERCRED); anyone else gets `permission_denied`. The file mode
//!                already keeps others out; the check also covers a socket reached
//!                through a passed descriptor.
//! ```
//!
//! Tunables: MAX_CONNECTIONS (16).
use crate::proto::{self, Background, Counts, ErrorKind, Op, Pending, Reply, ReplyLine, Request, Summary};
use squeezefs_fs::recompress::{JobCounts, JobError, JobRequest};
use squeezefs_fs::{Compression, Fs, FsError};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// Why the control channel could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("{path}: another squeezefs daemon answers on this control socket (is the pool mounted twice?)")]
    InUse { path: PathBuf },
    #[error("{path}: {what}: {source}")]
    Io { path: PathBuf, what: &'static str, source: std::io::Error },
}

/// The running control channel of one mount.
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    /// the listening socket itself (a clone of the accepting thread's), to wake that thread
    /// by shutting it down: a connect by path cannot once the socket file or the pool
    /// directory is gone, and the unmount would wait for the thread for ever
    listener: Option<UnixListener>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Who may talk to the daemon.
#[derive(Clone, Copy)]
struct Allowed {
    owner: u32,
    daemon: u32,
}

impl Allowed {
    fn admits(&self, uid: u32) -> bool {
        uid == 0 || uid == self.owner || uid == self.daemon
    }
}

/// The uid of the process at the other end of `s`.
fn peer_uid(s: &UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which lives on this frame
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

impl Server {
    /// Start serving `fs` on `pool_dir/control.sock` (module comment: START).
    pub fn start(pool_dir: &Path, fs: Arc<Fs>) -> Result<Server, ServerError> {
        let path = pool_dir.join(proto::SOCKET_NAME);
        let io = |what, source| ServerError::Io { path: path.clone(), what, source };
        if path.symlink_metadata().is_ok() {
            match UnixStream::connect(&path) {
                Ok(_) => return Err(ServerError::InUse { path }),
                // a socket nobody listens on, or not a socket at all: ours to replace
                Err(_) => std::fs::remove_file(&path).map_err(|e| io("removing the stale socket", e))?,
            }
        }
        let owner = std::fs::metadata(pool_dir).map_err(|e| io("reading the pool directory's owner", e))?;
        // SAFETY: geteuid has no preconditions
        let daemon = unsafe { libc::geteuid() };
        let allowed = Allowed { owner: owner.uid(), daemon };
        // bound with a umask that leaves the socket to its owner from the start
        // SAFETY: umask only swaps the process's mask; restored right after the bind
        let old = unsafe { libc::umask(0o177) };
        let listener = UnixListener::bind(&path);
        unsafe { libc::umask(old) };
        let listener = listener.map_err(|e| io("binding the control socket", e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io("setting the socket's mode", e))?;
        if daemon == 0 && owner.uid() != 0 {
            std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid()))
                .map_err(|e| io("giving the socket to the pool's owner", e))?;
        }
        let waker = listener.try_clone().map_err(|e| io("cloning the control socket", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sqz-control".into())
            .spawn(move || accept_loop(listener, fs, allowed, stop2))
            .map_err(|e| io("starting the control thread", e))?;
        Ok(Server { path, stop, listener: Some(waker), thread: Some(thread) })
    }

    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Stop accepting and remove the socket (module comment: STOP).
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        if self.stop.swap(true, Ordering::AcqRel) {
            return;
        }
        // wake the accepting thread: a shut-down listening socket fails its accept at once
        if let Some(l) = self.listener.take() {
            use std::os::fd::AsRawFd;
            // SAFETY: shutdown on a socket this struct owns; no memory is passed
            unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shut();
    }
}

fn accept_loop(listener: UnixListener, fs: Arc<Fs>, allowed: Allowed, stop: Arc<AtomicBool>) {
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut s) = conn else { continue };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            let msg = format!("the daemon serves {MAX_CONNECTIONS} control connections at once; try again");
            let _ = s.write_all(&reply_line(Reply::Error { kind: ErrorKind::Busy, message: msg }));
            continue;
        }
        let (fs, active) = (fs.clone(), active.clone());
        let spawned = std::thread::Builder::new().name("sqz-control-conn".into()).spawn(move || {
            serve(&mut s, &fs, allowed);
            active.fetch_sub(1, Ordering::AcqRel);
        });
        if let Err(e) = spawned {
            log::error!("control channel: starting a connection thread: {e}");
        }
    }
}

fn reply_line(reply: Reply) -> Vec<u8> {
    proto::line(&ReplyLine { v: proto::PROTOCOL_VERSION, reply })
}

fn error(kind: ErrorKind, message: impl Into<String>) -> Reply {
    Reply::Error { kind, message: message.into() }
}

/// One connection: check the peer, read the request, answer.
fn serve(s: &mut UnixStream, fs: &Fs, allowed: Allowed) {
    let final_reply = match peer_uid(s) {
        Ok(uid) if allowed.admits(uid) => match read_request(s) {
            Ok(req) => answer(s, fs, req),
            Err((kind, message)) => Reply::Error { kind, message },
        },
        Ok(uid) => error(
            ErrorKind::PermissionDenied,
            format!("uid {uid} may not control this pool (root and the pool's owner, uid {}, may)", allowed.owner),
        ),
        Err(e) => error(ErrorKind::Internal, format!("reading the peer's credentials: {e}")),
    };
    let _ = s.write_all(&reply_line(final_reply));
}

/// The request line, or the error to answer.
fn read_request(s: &mut UnixStream) -> Result<Request, (ErrorKind, String)> {
    let mut line = Vec::new();
    let mut r = BufReader::new(Read::by_ref(s).take(proto::MAX_LINE as u64 + 1));
    r.read_until(b'\n', &mut line).map_err(|e| (ErrorKind::BadRequest, format!("reading the request: {e}")))?;
    if line.len() > proto::MAX_LINE {
        return Err((ErrorKind::BadRequest, format!("request longer than {} bytes", proto::MAX_LINE)));
    }
    let value: serde_json::Value = serde_json::from_slice(&line)
        .map_err(|e| (ErrorKind::BadRequest, format!("the request is not one JSON object: {e}")))?;
    match value.get("v").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(proto::PROTOCOL_VERSION) => {}
        other => {
            return Err((
                ErrorKind::UnsupportedVersion,
                format!(
                    "protocol version {} requested; this daemon speaks version {}",
                    other.map_or("(none)".to_string(), |v| v.to_string()),
                    proto::PROTOCOL_VERSION
                ),
            ))
        }
    }
    serde_json::from_value(value).map_err(|e| (ErrorKind::BadRequest, format!("not a request of protocol 1: {e}")))
}

/// Answer a request; progress lines go out as they come, the final reply is returned.
fn answer(s: &mut UnixStream, fs: &Fs, req: Request) -> Reply {
    match req.op {
        Op::Hello => Reply::Hello {
            daemon_pid: std::process::id(),
            pool: fs.engine().info().pool_dir.display().to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: proto::PROTOCOL_VERSION,
        },
        Op::Background { path } => {
            let Some(p) = path.to_bytes() else { return error(ErrorKind::BadRequest, "path: bad hex") };
            match fs.background_pending(&p) {
                Ok(pending) => Reply::Background { status: background(fs), pending: pending_of(pending) },
                Err(FsError::NotFound) => {
                    error(ErrorKind::NoSuchPath, format!("{}: no such file or directory", shown(&p)))
                }
                Err(FsError::NotDir) => {
                    error(ErrorKind::NotADirectoryOnPath, format!("{}: not a directory", shown(&p)))
                }
                Err(e) => error(ErrorKind::Internal, format!("{}: {e}", shown(&p))),
            }
        }
        Op::Recompress { paths, to, force, if_different, recursive, jobs } => {
            let to = match to.as_deref().map(str::parse::<squeezefs_codec::Spec>) {
                None => None,
                Some(Ok(spec)) => Some(Compression { spec, force }),
                Some(Err(e)) => return error(ErrorKind::BadSpec, format!("--to: {e}")),
            };
            let mut bytes = Vec::with_capacity(paths.len());
            for p in &paths {
                match p.to_bytes() {
                    Some(b) => bytes.push(b),
                    None => return error(ErrorKind::BadRequest, "a path's hex is not hex"),
                }
            }
            let job = JobRequest { paths: bytes, to, if_different, recursive, jobs };
            // a client that went away cancels the job (its next progress line fails)
            let mut progress = |c: &JobCounts| s.write_all(&reply_line(Reply::Progress { counts: counts(c) })).is_ok();
            match fs.recompress(&job, &mut progress) {
                Ok(sum) => Reply::Done {
                    summary: Summary {
                        counts: counts(&sum.counts),
                        skipped: sum.skipped,
                        errors: sum.errors,
                        error_count: sum.error_count,
                        elapsed_secs: sum.elapsed.as_secs_f64(),
                        cancelled: sum.cancelled,
                    },
                },
                Err(e) => job_error(e),
            }
        }
    }
}

fn shown(p: &[u8]) -> String {
    format!("/{}", String::from_utf8_lossy(p).trim_start_matches('/'))
}

fn job_error(e: JobError) -> Reply {
    let kind = match &e {
        JobError::NoSuchPath { .. } => ErrorKind::NoSuchPath,
        JobError::NotADirectoryOnPath { .. } => ErrorKind::NotADirectoryOnPath,
        JobError::IsDirectory { .. } => ErrorKind::IsDirectory,
        JobError::NoData { .. } => ErrorKind::NoData,
        JobError::BadJobs(_) => ErrorKind::BadJobs,
        JobError::ReadOnly => ErrorKind::ReadOnly,
        JobError::Unmounting => ErrorKind::Unmounting,
        JobError::NoPaths => ErrorKind::BadRequest,
        JobError::Stopped(_) => ErrorKind::Stopped,
        _ => ErrorKind::Internal,
    };
    error(kind, e.to_string())
}

fn counts(c: &JobCounts) -> Counts {
    Counts {
        files_total: c.files_total,
        files_done: c.files_done,
        records_total: c.records_total,
        records_done: c.records_done,
        bytes_total: c.bytes_total,
        bytes_done: c.bytes_done,
        records_rewritten: c.records_rewritten,
        stored_before: c.stored_total_before,
        stored_after: c.stored_total_after(),
    }
}

fn background(fs: &Fs) -> Background {
    let s = fs.background_status();
    Background {
        state: s.state.to_string(),
        idle_after_secs: s.idle_after.map(|d| d.as_secs_f64()),
        pass_running: s.cursor.ceiling_txg != 0,
        passes: s.cursor.passes,
        converted_records: s.cursor.converted_records,
        converted_logical: s.cursor.converted_logical,
        converted_before: s.cursor.converted_before,
        converted_after: s.cursor.converted_after,
        session_records: s.session_records,
        session_logical: s.session_logical,
        last_error: s.last_error,
    }
}

fn pending_of(p: squeezefs_fs::background::BgPending) -> Pending {
    Pending {
        files_with_spec: p.files_with_spec,
        files_pending: p.files_pending,
        records: p.records,
        logical_bytes: p.logical_bytes,
        stored_bytes: p.stored_bytes,
    }
}
