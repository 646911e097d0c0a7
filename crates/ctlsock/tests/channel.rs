//! The control channel over a real Unix socket and a real fs core (engine in a temporary
//! pool, no mount): hello, a recompress job with progress, typed errors for bad input, a
//! stale socket replaced, a live one refused, the version check, the peer check, and a stop
//! after the pool directory is gone.
use squeezefs_ctlsock::proto::{self, Op, WirePath};
use squeezefs_ctlsock::{Client, ClientError, ErrorKind, Reply, Server};
use squeezefs_fs::{Creds, Fs, FsConfig, ROOT_INO};
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn pool_with_files(dir: &Path) -> (PathBuf, Arc<Fs>) {
    let pool = dir.join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let opts = OpenOptions { compression: "lz4".parse().unwrap(), ..OpenOptions::default() };
    let fs = Arc::new(Fs::new(Engine::open(&pool, &opts).unwrap(), FsConfig::default()).unwrap());
    let d = fs.mkdir(&Creds::root(), ROOT_INO, b"d", 0o755).unwrap().ino;
    for i in 0..3u8 {
        let (a, fh) = fs.create(&Creds::root(), d, &[b'f', b'0' + i], 0o644, libc::O_RDWR).unwrap();
        let data: Vec<u8> = (0..400_000u32).map(|k| b"abcdefgh"[(k % 8) as usize] ^ (k / 1000) as u8).collect();
        fs.write(&Creds::root(), a.ino, 0, &data, false).unwrap();
        fs.release(fh).unwrap();
    }
    fs.sync().unwrap();
    (pool, fs)
}

fn recompress(paths: &[&str], to: Option<&str>, recursive: bool) -> Op {
    Op::Recompress {
        paths: paths.iter().map(|p| WirePath::Text(p.to_string())).collect(),
        to: to.map(str::to_string),
        force: false,
        if_different: true,
        recursive,
        jobs: 2,
    }
}

fn daemon_error(r: Result<Reply, ClientError>) -> (ErrorKind, String) {
    match r {
        Err(ClientError::Daemon { kind, message }) => (kind, message),
        other => panic!("expected a daemon error, got {other:?}"),
    }
}

#[test]
fn a_job_runs_over_the_socket_with_progress_and_bad_input_gets_typed_errors() {
    let d = tempfile::tempdir().unwrap();
    let (pool, fs) = pool_with_files(d.path());
    let server = Server::start(&pool, fs.clone()).unwrap();
    let sock = server.socket_path().to_path_buf();
    assert_eq!(sock, pool.join(proto::SOCKET_NAME));
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);
    match Client::connect(&pool).unwrap().call(Op::Hello, &mut |_| true).unwrap() {
        Reply::Hello { daemon_pid, protocol, pool: p, .. } => {
            assert_eq!(daemon_pid, std::process::id());
            assert_eq!(protocol, 1);
            assert_eq!(Path::new(&p), pool);
        }
        other => panic!("{other:?}"),
    }
    let mut progress = 0;
    let done = Client::connect(&pool)
        .unwrap()
        .call(recompress(&["d"], Some("zstd:9"), true), &mut |r| {
            assert!(matches!(r, Reply::Progress { .. }));
            progress += 1;
            true
        })
        .unwrap();
    let Reply::Done { summary } = done else { panic!("{done:?}") };
    assert!(progress >= 1);
    assert_eq!(summary.counts.files_total, 3);
    assert_eq!(summary.counts.records_rewritten, summary.counts.records_total);
    assert!(summary.counts.stored_after < summary.counts.stored_before, "{summary:?}");
    let again = Client::connect(&pool).unwrap().call(recompress(&["d"], Some("zstd:9"), true), &mut |_| true).unwrap();
    let Reply::Done { summary } = again else { panic!() };
    assert_eq!(summary.counts.records_rewritten, 0);
    assert_eq!(summary.skipped.values().sum::<u64>(), summary.counts.records_total);

    let call = |op| Client::connect(&pool).unwrap().call(op, &mut |_| true);
    let (k, m) = daemon_error(call(recompress(&["nope"], None, true)));
    assert_eq!(k, ErrorKind::NoSuchPath);
    assert!(m.contains("/nope"), "{m}");
    let (k, m) = daemon_error(call(recompress(&["d"], None, false)));
    assert_eq!(k, ErrorKind::IsDirectory);
    assert!(m.contains("-r"), "{m}");
    let (k, m) = daemon_error(call(recompress(&["d"], Some("zstd:99"), true)));
    assert_eq!(k, ErrorKind::BadSpec);
    assert!(m.contains("zstd"), "{m}");
    let bad_jobs = Op::Recompress {
        paths: vec![WirePath::Text("d".into())],
        to: None,
        force: false,
        if_different: false,
        recursive: true,
        jobs: 0,
    };
    assert_eq!(daemon_error(call(bad_jobs)).0, ErrorKind::BadJobs);
    match call(Op::Background { path: WirePath::Text("d".into()) }).unwrap() {
        Reply::Background { status, pending } => {
            assert_eq!(status.state, "off");
            assert_eq!(pending.files_with_spec, 0);
        }
        other => panic!("{other:?}"),
    }

    // raw lines: another version, garbage, an unknown op
    let raw = |text: &str| {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.write_all(text.as_bytes()).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        serde_json::from_str::<serde_json::Value>(&line).unwrap()
    };
    let v = raw("{\"v\":2,\"op\":\"hello\"}\n");
    assert_eq!((v["v"].as_u64(), v["kind"].as_str()), (Some(1), Some("unsupported_version")));
    assert!(v["message"].as_str().unwrap().contains("version 1"));
    assert_eq!(raw("hello\n")["kind"], "bad_request");
    assert_eq!(raw("{\"v\":1,\"op\":\"format\"}\n")["kind"], "bad_request");

    // a second daemon on the same pool is refused while this one answers
    assert!(matches!(Server::start(&pool, fs.clone()), Err(squeezefs_ctlsock::ServerError::InUse { .. })));
    server.stop();
    assert!(!sock.exists(), "the socket goes at stop");
    assert!(matches!(Client::connect(&pool), Err(ClientError::NoSocket { .. })));
    fs.shutdown().unwrap();
}

#[test]
fn a_socket_left_by_a_dead_daemon_is_named_and_replaced() {
    let d = tempfile::tempdir().unwrap();
    let (pool, fs) = pool_with_files(d.path());
    // a socket file nobody listens on (the listener is dropped: a daemon killed)
    drop(UnixListener::bind(pool.join(proto::SOCKET_NAME)).unwrap());
    let e = Client::connect(&pool).err().expect("nobody listens");
    assert!(matches!(e, ClientError::NobodyListens { .. }), "{e:?}");
    assert!(e.to_string().contains("the daemon is gone"), "{e}");
    let server = Server::start(&pool, fs.clone()).unwrap();
    assert!(matches!(Client::connect(&pool).unwrap().call(Op::Hello, &mut |_| true), Ok(Reply::Hello { .. })));
    drop(server);
    fs.shutdown().unwrap();
}

#[test]
fn only_root_and_the_pools_owner_get_answers() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: needs root to act as another user");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (pool, fs) = pool_with_files(d.path());
    // a pool directory others may enter: the socket's own mode is what keeps them out
    std::fs::set_permissions(&pool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = Server::start(&pool, fs.clone()).unwrap();
    let sock = server.socket_path().to_path_buf();
    // another user: the socket's mode keeps them out
    let as_nobody = |f: &dyn Fn() -> i32| -> i32 {
        unsafe {
            match libc::fork() {
                0 => {
                    let ok = libc::setgroups(0, std::ptr::null()) == 0
                        && libc::setresgid(65534, 65534, 65534) == 0
                        && libc::setresuid(65534, 65534, 65534) == 0;
                    libc::_exit(if ok { f() } else { 255 })
                }
                pid => {
                    let mut st = 0;
                    libc::waitpid(pid, &mut st, 0);
                    libc::WEXITSTATUS(st)
                }
            }
        }
    };
    let p = pool.clone();
    let code = as_nobody(&|| match Client::connect(&p) {
        Err(ClientError::PermissionDenied { .. }) => 0,
        _ => 1,
    });
    assert_eq!(code, 0, "the socket's mode refuses another user");
    // with the mode opened (or a descriptor passed on), the daemon still refuses them
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let p = pool.clone();
    let code = as_nobody(&|| match Client::connect(&p).map(|c| c.call(Op::Hello, &mut |_| true)) {
        Ok(Err(ClientError::Daemon { kind: ErrorKind::PermissionDenied, .. })) => 0,
        _ => 1,
    });
    assert_eq!(code, 0, "the daemon checks the peer's uid");
    drop(server);
    fs.shutdown().unwrap();
}

#[test]
fn stop_returns_when_the_pool_directory_is_gone() {
    // the unmount of a pool whose directory was removed while mounted (a test's temporary
    // directory, a pool moved away) stops the control thread all the same
    let d = tempfile::tempdir().unwrap();
    let (pool, fs) = pool_with_files(d.path());
    let server = Server::start(&pool, fs).unwrap();
    std::fs::remove_dir_all(&pool).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        server.stop();
        tx.send(()).unwrap();
    });
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("Server::stop returned");
}

#[test]
fn a_refusal_that_beats_the_request_reaches_the_client() {
    // a daemon refusing a peer answers without reading the request and closes; when that
    // happens before the client has written, the write fails (EPIPE) while the answer waits
    // in the client's socket: the client must report the answer, not the failed write
    let dir = tempfile::tempdir().unwrap();
    let listener = UnixListener::bind(dir.path().join(proto::SOCKET_NAME)).unwrap();
    let refuse = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let reply = Reply::Error { kind: ErrorKind::PermissionDenied, message: "uid 65534 may not".into() };
        s.write_all(&proto::line(&proto::ReplyLine { v: proto::PROTOCOL_VERSION, reply })).unwrap();
    });
    let client = Client::connect(dir.path()).unwrap();
    refuse.join().unwrap();
    let (kind, message) = daemon_error(client.call(Op::Hello, &mut |_| true));
    assert_eq!(kind, ErrorKind::PermissionDenied, "{message}");
}
