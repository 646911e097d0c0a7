//! The control channel's wire protocol, version 1 (docs/design.md §15.3): one JSON object
//! per line (UTF-8, `\n`-terminated, at most [`MAX_LINE`] bytes). The client sends one
//! request line; the daemon answers with zero or more `progress` lines and then exactly one
//! final line (`hello`, `done`, `background` or `error`), and closes the connection.
//!
//! Every line carries `"v": 1`. A request with another version gets an `error` of kind
//! `unsupported_version`, written in version 1, whatever else it holds. Fields a side does
//! not know are ignored (optional additions keep the version); an unknown `op` is a
//! `bad_request`.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Name of the socket in the pool directory.
pub const SOCKET_NAME: &str = "control.sock";
/// Longest line either side accepts.
pub const MAX_LINE: usize = 1 << 20;

/// A path relative to the mount's root: text when it is UTF-8, else its bytes in hex
/// (`{"hex": "2f61ff"}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WirePath {
    Text(String),
    Hex { hex: String },
}

impl WirePath {
    pub fn from_bytes(b: &[u8]) -> WirePath {
        match std::str::from_utf8(b) {
            Ok(s) => WirePath::Text(s.to_string()),
            Err(_) => WirePath::Hex { hex: b.iter().map(|x| format!("{x:02x}")).collect() },
        }
    }

    /// The path's bytes; `None` for hex that is not hex.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        match self {
            WirePath::Text(s) => Some(s.as_bytes().to_vec()),
            WirePath::Hex { hex } if hex.len() % 2 == 0 => {
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
            }
            WirePath::Hex { .. } => None,
        }
    }
}

/// What a request asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// who serves the pool → `hello`
    Hello,
    /// a recompress job → `progress`… then `done`
    Recompress {
        paths: Vec<WirePath>,
        /// a compression spec; absent: each file's effective `compression`
        #[serde(default)]
        to: Option<String>,
        /// with `to`: compress every record (compress-force)
        #[serde(default)]
        force: bool,
        #[serde(default)]
        if_different: bool,
        #[serde(default)]
        recursive: bool,
        #[serde(default = "one")]
        jobs: usize,
    },
    /// background compression's state, and what is pending below `path` → `background`
    Background { path: WirePath },
}

fn one() -> usize {
    1
}

/// One request line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub v: u32,
    #[serde(flatten)]
    pub op: Op,
}

/// Counters of a recompress job (squeezefs_fs::recompress::JobCounts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub files_total: u64,
    pub files_done: u64,
    pub records_total: u64,
    pub records_done: u64,
    /// logical bytes (in the files)
    pub bytes_total: u64,
    pub bytes_done: u64,
    pub records_rewritten: u64,
    /// stored bytes of every record the job covers, before and after
    pub stored_before: u64,
    pub stored_after: u64,
}

/// What a finished job did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub counts: Counts,
    /// records left as they were, per reason
    pub skipped: BTreeMap<String, u64>,
    /// damaged records met (first ones), and how many in all
    pub errors: Vec<String>,
    pub error_count: u64,
    pub elapsed_secs: f64,
    pub cancelled: bool,
}

/// Background compression's state (squeezefs_fs::background::BgStatus).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Background {
    /// `off`, `waiting`, `held`, `working`, `done`, `stopped`
    pub state: String,
    /// seconds of idle time it waits for; absent: off
    pub idle_after_secs: Option<f64>,
    pub pass_running: bool,
    pub passes: u64,
    /// since mkfs
    pub converted_records: u64,
    pub converted_logical: u64,
    pub converted_before: u64,
    pub converted_after: u64,
    /// since this mount
    pub session_records: u64,
    pub session_logical: u64,
    pub last_error: Option<String>,
}

/// What background compression has still to convert below a path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub files_with_spec: u64,
    pub files_pending: u64,
    pub records: u64,
    pub logical_bytes: u64,
    pub stored_bytes: u64,
}

/// Kinds of error the daemon answers, so a client can tell them apart without parsing
/// messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// not a request of this protocol (bad JSON, unknown op or field, line too long)
    BadRequest,
    UnsupportedVersion,
    /// the peer is neither root nor the pool's owner
    PermissionDenied,
    NoSuchPath,
    NotADirectoryOnPath,
    /// a directory without `recursive`
    IsDirectory,
    /// a path that holds no data (device, fifo, symlink, …)
    NoData,
    BadSpec,
    BadJobs,
    ReadOnly,
    Unmounting,
    /// the job stopped: the pool is full, suspended, or a device failed
    Stopped,
    /// too many connections at once
    Busy,
    Internal,
}

/// What the daemon answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    Hello { daemon_pid: u32, pool: String, version: String, protocol: u32 },
    Progress { counts: Counts },
    Done { summary: Summary },
    Background { status: Background, pending: Pending },
    Error { kind: ErrorKind, message: String },
}

impl Reply {
    /// Whether this is the last line of an answer.
    pub fn is_final(&self) -> bool {
        !matches!(self, Reply::Progress { .. })
    }
}

/// One answer line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplyLine {
    pub v: u32,
    #[serde(flatten)]
    pub reply: Reply,
}

/// A line of `value`, newline-terminated.
pub fn line<T: Serialize>(value: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec(value).expect("protocol types serialize");
    v.push(b'\n');
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_have_their_documented_shape() {
        let r = Request {
            v: 1,
            op: Op::Recompress {
                paths: vec![WirePath::Text("a/b".into())],
                to: Some("zstd:15".into()),
                force: false,
                if_different: true,
                recursive: true,
                jobs: 2,
            },
        };
        let text = String::from_utf8(line(&r)).unwrap();
        assert_eq!(
            text,
            "{\"v\":1,\"op\":\"recompress\",\"paths\":[\"a/b\"],\"to\":\"zstd:15\",\"force\":false,\
             \"if_different\":true,\"recursive\":true,\"jobs\":2}\n"
        );
        assert_eq!(serde_json::from_str::<Request>(text.trim()).unwrap(), r);
        // defaults: a minimal request
        let min: Request = serde_json::from_str(r#"{"v":1,"op":"recompress","paths":["x"]}"#).unwrap();
        assert!(matches!(min.op, Op::Recompress { jobs: 1, recursive: false, if_different: false, to: None, .. }));
        // fields this version does not know are ignored (room for optional additions)
        assert!(serde_json::from_str::<Request>(r#"{"v":1,"op":"recompress","paths":[],"later":1}"#).is_ok());
        assert!(serde_json::from_str::<Request>(r#"{"v":1,"op":"format_disk"}"#).is_err());
        let e = ReplyLine { v: 1, reply: Reply::Error { kind: ErrorKind::NoSuchPath, message: "/x: no".into() } };
        assert_eq!(
            String::from_utf8(line(&e)).unwrap(),
            "{\"v\":1,\"type\":\"error\",\"kind\":\"no_such_path\",\"message\":\"/x: no\"}\n"
        );
    }

    #[test]
    fn paths_that_are_not_utf8_travel_as_hex() {
        let p = WirePath::from_bytes(b"d/\xff\x00x");
        assert_eq!(p, WirePath::Hex { hex: "642fff0078".into() });
        assert_eq!(p.to_bytes().unwrap(), b"d/\xff\x00x");
        let j = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<WirePath>(&j).unwrap(), p);
        assert_eq!(WirePath::Hex { hex: "6".into() }.to_bytes(), None);
        assert_eq!(WirePath::Hex { hex: "zz".into() }.to_bytes(), None);
        assert_eq!(WirePath::from_bytes(b"plain"), WirePath::Text("plain".into()));
    }
}
