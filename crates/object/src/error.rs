//! Errors of the object device, each naming the store location and what was being done.
//! A store error is classified ([`StoreFault`]) so that mkfs and mount can say in one line
//! whether the credentials, the bucket or the endpoint is wrong.

use crate::spec::ObjectSpec;

/// What kind of failure a store request met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreFault {
    /// the object does not exist
    NotFound,
    /// the bucket does not exist
    NoBucket,
    /// the key pair is wrong or lacks the permission
    Denied,
    /// no answer: connection refused or reset, timeouts, 5xx after every retry
    Unreachable,
    Other,
}

impl StoreFault {
    fn hint(self) -> &'static str {
        match self {
            StoreFault::NotFound => "no such object",
            StoreFault::NoBucket => "the bucket does not exist (create it first)",
            StoreFault::Denied => {
                "access denied (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the AWS_PROFILE used, and the \
                 bucket's permissions)"
            }
            StoreFault::Unreachable => "the store did not answer (check AWS_ENDPOINT_URL and the network)",
            StoreFault::Other => "the store refused the request",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectError {
    #[error(
        "{spec}: no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile \
         of ~/.aws/credentials)"
    )]
    NoCredentials { spec: String },
    #[error("{spec}: cannot set up the S3 client: {detail}")]
    Client { spec: String, detail: String },
    #[error("cannot start the object store runtime: {source}")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
    #[error("{spec}: {what} {key}: {} ({detail})", fault.hint())]
    Store { spec: String, what: String, key: String, fault: StoreFault, detail: String },
    #[error("{spec}: object {key} is damaged: {detail}")]
    Corrupt { spec: String, key: String, detail: String },
    #[error(
        "{spec}: the store has not taken the data for {secs} s, giving up with an I/O error (the data stays \
         queued and is sent when the store answers again): {last}"
    )]
    Stalled { spec: String, secs: u64, last: String },
    #[error("{spec} already holds {count} objects of a pool (another pool's data?); use --force to overwrite them")]
    PrefixInUse { spec: String, count: usize },
    #[error("object map {path}: {detail}")]
    Map { path: String, detail: String },
    #[error("object map {path} has format version {found}; this build reads version {known}")]
    MapVersion { path: String, found: u64, known: u64 },
    #[error("object map {path} belongs to {found}, not {expected}")]
    MapOfOtherStore { path: String, found: String, expected: String },
    #[error("read cache {path}: {source}")]
    Cache {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{spec}: {detail}")]
    Invalid { spec: String, detail: String },
    #[error("{spec} holds no complete metadata backup ({detail}); nothing to restore")]
    NoBackup { spec: String, detail: String },
    #[error("{spec}: backup {key} is damaged: {detail}")]
    BadBackup { spec: String, key: String, detail: String },
}

impl ObjectError {
    pub fn from_store(spec: &ObjectSpec, what: &str, key: &str, e: object_store::Error) -> ObjectError {
        // servers put XML bodies with line breaks in their answers: one line, for logs and
        // the command line's one-line errors
        let detail = chain(&e).split_whitespace().collect::<Vec<_>>().join(" ");
        let fault = classify(&e, &detail);
        ObjectError::Store { spec: spec.to_string(), what: what.to_string(), key: key.to_string(), fault, detail }
    }

    /// The fault of a store error, if this is one.
    pub fn fault(&self) -> Option<StoreFault> {
        match self {
            ObjectError::Store { fault, .. } => Some(*fault),
            _ => None,
        }
    }

    /// A sync gave up on a store that did not take the data for the stall timeout: the
    /// data is still held, and a later sync may succeed.
    pub fn is_stalled(&self) -> bool {
        matches!(self, ObjectError::Stalled { .. })
    }

    /// `e` (from the `Device` trait) is an object device's stall.
    pub fn is_stall(e: &squeezefs_device::DeviceError) -> bool {
        match e {
            squeezefs_device::DeviceError::Io { source, .. } => {
                source.get_ref().and_then(|x| x.downcast_ref::<ObjectError>()).is_some_and(ObjectError::is_stalled)
            }
            _ => false,
        }
    }

    pub(crate) fn map(path: &std::path::Path, e: impl std::fmt::Display) -> ObjectError {
        ObjectError::Map { path: path.display().to_string(), detail: e.to_string() }
    }
}

/// The error with its sources, one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}

fn classify(e: &object_store::Error, text: &str) -> StoreFault {
    if text.contains("NoSuchBucket") || text.contains("bucket does not exist") {
        return StoreFault::NoBucket;
    }
    match e {
        object_store::Error::NotFound { .. } => StoreFault::NotFound,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            StoreFault::Denied
        }
        // the status as the client words it: a bare "403" also matches a duration ("in 1.2403s")
        _ if text.contains("403 Forbidden")
            || text.contains("status 403")
            || text.contains("status code: 403")
            || text.contains("AccessDenied")
            || text.contains("SignatureDoesNotMatch")
            || text.contains("InvalidAccessKeyId") =>
        {
            StoreFault::Denied
        }
        _ if text.contains("onnection refused")
            || text.contains("error sending request")
            || text.contains("timed out")
            || text.contains("onnection reset")
            || text.contains("dns error")
            || text.contains("Server returned non-2xx status code: 5")
            || text.contains("Retry") =>
        {
            StoreFault::Unreachable
        }
        _ => StoreFault::Other,
    }
}

impl From<ObjectError> for squeezefs_device::DeviceError {
    fn from(e: ObjectError) -> Self {
        let path = match &e {
            ObjectError::Store { spec, .. }
            | ObjectError::Corrupt { spec, .. }
            | ObjectError::Stalled { spec, .. }
            | ObjectError::Invalid { spec, .. } => spec.clone(),
            _ => "object device".into(),
        };
        squeezefs_device::DeviceError::Io { path, source: std::io::Error::other(e) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic { store: "S3", source: text.to_string().into() }
    }

    /// A refused connection whose retry time holds the digits 403 is an unreachable store.
    #[test]
    fn a_retry_time_with_403_in_it_is_not_access_denied() {
        let t = "Error performing GET http://127.0.0.1:1/b in 1.283804036s, after 5 retries - \
                 error sending request: tcp connect error: Connection refused (os error 111)";
        assert_eq!(classify(&generic(t), t), StoreFault::Unreachable);
        let t = "Client error with status 403 Forbidden: <Code>AccessDenied</Code>";
        assert_eq!(classify(&generic(t), t), StoreFault::Denied);
        let t = "Client error with status 403 Forbidden: no body";
        assert_eq!(classify(&generic(t), t), StoreFault::Denied);
    }
}
