//! The object store client: `object_store`'s S3 implementation (signing, retry with
//! backoff on timeouts, 5xx, resets and throttling, multipart uploads, ranged GETs) run on a
//! small tokio runtime owned by the device, so the device's own interface stays blocking.
//! Every call here is bounded in time: `object_store` retries a request until its retry
//! timeout, and the callers above (device.rs) decide whether to try again.

use crate::config::StoreConfig;
use crate::error::ObjectError;
use crate::spec::ObjectSpec;
use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::path::Path as ObjPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig, WriteMultipart,
};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

/// Timeouts and retries of single requests.
#[derive(Clone, Debug)]
pub struct RequestLimits {
    /// One request (connect to last byte).
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// How long `object_store` retries one request before it reports the error.
    pub retry_timeout: Duration,
    pub max_retries: usize,
    /// Whole calls (every retry, every part of an upload) end by then: a request that hangs
    /// without an answer (a store that takes the connection and never replies) fails as
    /// unreachable instead of blocking its caller. An upload gets one more second per
    /// [`MIN_UPLOAD_RATE`] bytes, so a slow but working link is not taken for a dead one.
    /// `None`: only the limits above.
    pub deadline: Option<Duration>,
}

/// The slowest upload rate (bytes/s) a call's deadline allows for.
pub const MIN_UPLOAD_RATE: u64 = 256 << 10;

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            retry_timeout: Duration::from_secs(30),
            max_retries: 8,
            deadline: None,
        }
    }
}

/// One bucket prefix, with the runtime that drives its requests.
pub struct Store {
    spec: ObjectSpec,
    s3: Arc<AmazonS3>,
    rt: tokio::runtime::Runtime,
    deadline: Option<Duration>,
}

/// Objects larger than this go up as a multipart upload of parts this large.
pub const MULTIPART_PART: usize = 8 << 20;

impl Store {
    pub fn connect(spec: &ObjectSpec, cfg: &StoreConfig, limits: &RequestLimits) -> Result<Store, ObjectError> {
        if !cfg.has_credentials() {
            return Err(ObjectError::NoCredentials { spec: spec.to_string() });
        }
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&spec.bucket)
            .with_region(cfg.region.clone().unwrap_or_else(|| "us-east-1".into()))
            .with_access_key_id(cfg.access_key_id.clone().unwrap_or_default())
            .with_secret_access_key(cfg.secret_access_key.clone().unwrap_or_default())
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(5),
                    base: 2.0,
                },
                max_retries: limits.max_retries,
                retry_timeout: limits.retry_timeout,
            })
            .with_http_connector(RangeAnswerConnector)
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(cfg.allow_http)
                    .with_timeout(limits.request_timeout)
                    .with_connect_timeout(limits.connect_timeout),
            );
        if let Some(t) = &cfg.session_token {
            b = b.with_token(t);
        }
        if let Some(e) = &cfg.endpoint {
            // a custom endpoint (MinIO, Ceph, rclone, R2) is addressed path-style
            b = b.with_endpoint(e).with_virtual_hosted_style_request(false);
        }
        let s3 = b.build().map_err(|e| ObjectError::Client { spec: spec.to_string(), detail: e.to_string() })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("squeezefs-s3")
            .enable_all()
            .build()
            .map_err(|source| ObjectError::Runtime { source })?;
        Ok(Store { spec: spec.clone(), s3: Arc::new(s3), rt, deadline: limits.deadline })
    }

    pub fn spec(&self) -> &ObjectSpec {
        &self.spec
    }

    /// Run `f` to its end or to the call's deadline (`extra` added to it), whichever is first.
    fn run<T>(
        &self,
        extra: Duration,
        f: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> object_store::Result<T> {
        let Some(d) = self.deadline else { return self.rt.block_on(f) };
        let limit = d + extra;
        self.rt.block_on(async move {
            tokio::time::timeout(limit, f).await.unwrap_or_else(|_| {
                Err(object_store::Error::Generic {
                    store: "S3",
                    source: format!("no answer within {} s (timed out)", limit.as_secs()).into(),
                })
            })
        })
    }

    fn path(&self, name: &str) -> ObjPath {
        ObjPath::from(self.spec.key(name))
    }

    fn err(&self, what: &str, name: &str, e: object_store::Error) -> ObjectError {
        ObjectError::from_store(&self.spec, what, &self.spec.key(name), e)
    }

    /// Put `data` as `name`, multipart when it is larger than one part.
    pub fn put(&self, name: &str, data: Bytes) -> Result<(), ObjectError> {
        let path = self.path(name);
        let s3 = self.s3.clone();
        let extra = Duration::from_secs(data.len() as u64 / MIN_UPLOAD_RATE);
        let r = self.run(extra, async move {
            if data.len() <= MULTIPART_PART {
                s3.put(&path, PutPayload::from_bytes(data)).await.map(|_| ())
            } else {
                let upload = s3.put_multipart(&path).await?;
                let mut w = WriteMultipart::new_with_chunk_size(upload, MULTIPART_PART);
                let mut at = 0;
                while at < data.len() {
                    w.wait_for_capacity(4).await?;
                    let end = (at + MULTIPART_PART).min(data.len());
                    w.put(data.slice(at..end));
                    at = end;
                }
                w.finish().await.map(|_| ())
            }
        });
        r.map_err(|e| self.err("uploading", name, e))
    }

    /// Bytes `range` of `name`.
    pub fn get_range(&self, name: &str, range: Range<u64>) -> Result<Bytes, ObjectError> {
        let path = self.path(name);
        let s3 = self.s3.clone();
        self.run(Duration::ZERO, async move { s3.get_range(&path, range).await })
            .map_err(|e| self.err("reading", name, e))
    }

    /// The whole object `name`, or `None` if there is none.
    pub fn get(&self, name: &str) -> Result<Option<Bytes>, ObjectError> {
        let path = self.path(name);
        let s3 = self.s3.clone();
        let r = self.run(Duration::ZERO, async move {
            match s3.get(&path).await {
                Ok(g) => g.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        r.map_err(|e| self.err("reading", name, e))
    }

    pub fn delete(&self, name: &str) -> Result<(), ObjectError> {
        let path = self.path(name);
        let s3 = self.s3.clone();
        let r = self.run(Duration::ZERO, async move {
            match s3.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        });
        r.map_err(|e| self.err("deleting", name, e))
    }

    /// Names (relative to the prefix) and sizes of the objects under `dir/`.
    pub fn list(&self, dir: &str) -> Result<Vec<(String, u64)>, ObjectError> {
        let base = self.spec.key(dir);
        let path = ObjPath::from(base.as_str());
        let s3 = self.s3.clone();
        let r: Result<Vec<(String, u64)>, object_store::Error> = self.run(Duration::ZERO, async move {
            let mut out = Vec::new();
            let mut st = s3.list(Some(&path));
            while let Some(m) = st.next().await {
                let m = m?;
                out.push((m.location.to_string(), m.size));
            }
            Ok(out)
        });
        let strip = if self.spec.prefix.is_empty() { 0 } else { self.spec.prefix.len() + 1 };
        Ok(r.map_err(|e| self.err("listing", dir, e))?
            .into_iter()
            .map(|(k, s)| (k.get(strip..).unwrap_or("").to_string(), s))
            .collect())
    }
}

/// Some S3 servers (rclone serve s3, gofakes3) answer a ranged GET with the right bytes and
/// `Content-Range` but status 200 instead of 206, which `object_store` rejects. Such an
/// answer is taken as the partial one it is; a 200 without `Content-Range` (the whole
/// object) is still refused by `object_store`'s own check.
#[derive(Debug)]
struct RangeAnswer(HttpClient);

#[async_trait::async_trait]
impl HttpService for RangeAnswer {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let ranged = req.headers().contains_key(http::header::RANGE);
        let mut resp = self.0.execute(req).await?;
        if ranged && resp.status() == http::StatusCode::OK && resp.headers().contains_key(http::header::CONTENT_RANGE) {
            *resp.status_mut() = http::StatusCode::PARTIAL_CONTENT;
        }
        Ok(resp)
    }
}

#[derive(Debug)]
struct RangeAnswerConnector;

impl HttpConnector for RangeAnswerConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(RangeAnswer(ReqwestConnector::default().connect(options)?)))
    }
}
