//! The client's side of the control channel (what `squeezefs recompress` and `squeezefs
//! stats` use): connect to a pool's socket, send one request, read the answer's lines.
use crate::proto::{self, ErrorKind, Op, Reply, ReplyLine, Request};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// What went wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("no squeezefs daemon serves the pool {pool}: {socket} does not exist (is the pool mounted?)")]
    NoSocket { pool: PathBuf, socket: PathBuf },
    #[error("no squeezefs daemon serves the pool {pool}: nobody answers on {socket} (the daemon is gone)")]
    NobodyListens { pool: PathBuf, socket: PathBuf },
    #[error("{socket}: permission denied (the control socket is for root and the pool's owner)")]
    PermissionDenied { socket: PathBuf },
    #[error("{socket}: {what}: {source}")]
    Io { socket: PathBuf, what: &'static str, source: std::io::Error },
    #[error("the daemon closed the connection before answering (was it stopped?)")]
    Closed,
    #[error("unexpected answer from the daemon: {0}")]
    Protocol(String),
    /// the daemon's typed refusal; its message says what and why
    #[error("{message}")]
    Daemon { kind: ErrorKind, message: String },
}

/// One connection to a daemon.
pub struct Client {
    socket: PathBuf,
    stream: UnixStream,
}

impl Client {
    /// Connect to the daemon serving the pool in `pool_dir`.
    pub fn connect(pool_dir: &Path) -> Result<Client, ClientError> {
        let socket = pool_dir.join(proto::SOCKET_NAME);
        match UnixStream::connect(&socket) {
            Ok(stream) => Ok(Client { socket, stream }),
            Err(e) => Err(match e.raw_os_error() {
                Some(libc::ENOENT) => ClientError::NoSocket { pool: pool_dir.to_path_buf(), socket },
                Some(libc::ECONNREFUSED) => ClientError::NobodyListens { pool: pool_dir.to_path_buf(), socket },
                Some(libc::EACCES) | Some(libc::EPERM) => ClientError::PermissionDenied { socket },
                _ => ClientError::Io { socket, what: "connecting", source: e },
            }),
        }
    }

    /// Send `op`; every `progress` line goes to `on_progress` (which returns `false` to stop
    /// reading: the connection closes and the daemon cancels the job); returns the final
    /// reply, a daemon's `error` as [`ClientError::Daemon`].
    pub fn call(self, op: Op, on_progress: &mut dyn FnMut(&Reply) -> bool) -> Result<Reply, ClientError> {
        let Client { socket, mut stream } = self;
        let io = |what, source| ClientError::Io { socket: socket.clone(), what, source };
        // A daemon refusing the peer answers without reading the request and closes, which
        // can beat the request's write (EPIPE): its answer is queued on our side all the same,
        // so a failed send still reads, and reports the send only if nothing came back.
        let sent = stream.write_all(&proto::line(&Request { v: proto::PROTOCOL_VERSION, op }));
        let mut r = BufReader::new(stream);
        let mut line = String::new();
        loop {
            line.clear();
            let got = r.read_line(&mut line);
            if !matches!(got, Ok(n) if n > 0) {
                if let Err(e) = sent {
                    return Err(io("sending the request", e));
                }
                return match got {
                    Ok(_) => Err(ClientError::Closed),
                    Err(e) => Err(io("reading the answer", e)),
                };
            }
            if line.len() > proto::MAX_LINE {
                return Err(ClientError::Protocol(format!("a line of {} bytes", line.len())));
            }
            let reply: ReplyLine = serde_json::from_str(line.trim_end())
                .map_err(|e| ClientError::Protocol(format!("{e}: {}", line.trim_end())))?;
            if reply.v != proto::PROTOCOL_VERSION {
                return Err(ClientError::Protocol(format!(
                    "protocol version {} (this client speaks {})",
                    reply.v,
                    proto::PROTOCOL_VERSION
                )));
            }
            match reply.reply {
                Reply::Error { kind, message } => return Err(ClientError::Daemon { kind, message }),
                r if r.is_final() => return Ok(r),
                progress => {
                    if !on_progress(&progress) {
                        return Err(ClientError::Closed);
                    }
                }
            }
        }
    }
}
