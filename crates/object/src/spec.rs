//! `s3://BUCKET/PREFIX`: where an object device keeps its objects. The bucket name follows
//! the S3 rules (3–63 characters of lower-case letters, digits, `-` and `.`, starting and
//! ending with a letter or digit); the prefix is optional, `/`-separated, without empty,
//! `.` or `..` parts, and is normalised to have no leading or trailing `/`.

use std::fmt;

/// The URL scheme of an object device.
pub const SCHEME: &str = "s3://";

/// A parsed object device location.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectSpec {
    pub bucket: String,
    /// Key prefix without leading or trailing `/`; empty: the bucket's root.
    pub prefix: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecError {
    #[error("{spec:?} is not an object device (accepted: s3://BUCKET or s3://BUCKET/PREFIX)")]
    NotS3 { spec: String },
    #[error("{spec:?} names no bucket (accepted: s3://BUCKET or s3://BUCKET/PREFIX)")]
    NoBucket { spec: String },
    #[error(
        "bucket name {bucket:?} in {spec:?} is not valid: {why} (accepted: 3-63 characters of a-z, 0-9, \
         '-' and '.', starting and ending with a letter or digit)"
    )]
    BadBucket { spec: String, bucket: String, why: &'static str },
    #[error("prefix of {spec:?} has an empty, '.' or '..' part {part:?} (accepted: parts separated by single '/')")]
    BadPrefixPart { spec: String, part: String },
    #[error("{spec:?} has a character that is not allowed in an object key: {ch:?}")]
    BadChar { spec: String, ch: char },
}

impl ObjectSpec {
    /// Whether `s` is meant as an object device (it starts with `s3://`), valid or not.
    pub fn is_object_spec(s: &str) -> bool {
        s.len() >= SCHEME.len() && s[..SCHEME.len()].eq_ignore_ascii_case(SCHEME)
    }

    pub fn parse(s: &str) -> Result<ObjectSpec, SpecError> {
        if !Self::is_object_spec(s) {
            return Err(SpecError::NotS3 { spec: s.to_string() });
        }
        let rest = &s[SCHEME.len()..];
        if let Some(ch) = rest.chars().find(|c| c.is_control() || matches!(c, '\\' | '?' | '#')) {
            return Err(SpecError::BadChar { spec: s.to_string(), ch });
        }
        let (bucket, prefix) = match rest.split_once('/') {
            Some((b, p)) => (b, p),
            None => (rest, ""),
        };
        if bucket.is_empty() {
            return Err(SpecError::NoBucket { spec: s.to_string() });
        }
        if let Err(why) = check_bucket(bucket) {
            return Err(SpecError::BadBucket { spec: s.to_string(), bucket: bucket.to_string(), why });
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty() {
            if let Some(part) = prefix.split('/').find(|p| p.is_empty() || *p == "." || *p == "..") {
                return Err(SpecError::BadPrefixPart { spec: s.to_string(), part: part.to_string() });
            }
        }
        Ok(ObjectSpec { bucket: bucket.to_string(), prefix: prefix.to_string() })
    }

    /// The key of `name` under the prefix.
    pub fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.prefix)
        }
    }
}

fn check_bucket(b: &str) -> Result<(), &'static str> {
    if b.len() < 3 || b.len() > 63 {
        return Err("it must be 3 to 63 characters long");
    }
    if !b.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.') {
        return Err("it may hold only lower-case letters, digits, '-' and '.'");
    }
    let edge_ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !edge_ok(b.as_bytes()[0]) || !edge_ok(b.as_bytes()[b.len() - 1]) {
        return Err("it must start and end with a letter or digit");
    }
    if b.contains("..") {
        return Err("it may not hold two dots in a row");
    }
    Ok(())
}

impl fmt::Display for ObjectSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "{SCHEME}{}", self.bucket)
        } else {
            write!(f, "{SCHEME}{}/{}", self.bucket, self.prefix)
        }
    }
}

impl std::str::FromStr for ObjectSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_and_prefix_parse_and_normalise() {
        let s = ObjectSpec::parse("s3://my-bucket/pools/a/").unwrap();
        assert_eq!(s, ObjectSpec { bucket: "my-bucket".into(), prefix: "pools/a".into() });
        assert_eq!(s.to_string(), "s3://my-bucket/pools/a");
        assert_eq!(s.key("segments/1"), "pools/a/segments/1");
        let root = ObjectSpec::parse("S3://b.1-x").unwrap();
        assert_eq!(root.prefix, "");
        assert_eq!(root.key("k"), "k");
        assert_eq!(root.to_string(), "s3://b.1-x");
        assert_eq!(ObjectSpec::parse("s3://abc/").unwrap().prefix, "");
    }

    #[test]
    fn bad_specs_name_the_problem() {
        assert!(matches!(ObjectSpec::parse("/dev/sdb"), Err(SpecError::NotS3 { .. })));
        assert!(matches!(ObjectSpec::parse("gs://bucket"), Err(SpecError::NotS3 { .. })));
        assert!(matches!(ObjectSpec::parse("s3://"), Err(SpecError::NoBucket { .. })));
        assert!(matches!(ObjectSpec::parse("s3:///p"), Err(SpecError::NoBucket { .. })));
        for b in ["ab", "Upper", "-lead", "trail-", "a..b", "under_score"] {
            let e = ObjectSpec::parse(&format!("s3://{b}/p")).unwrap_err();
            assert!(matches!(e, SpecError::BadBucket { .. }), "{b}: {e}");
            assert!(e.to_string().contains("accepted"), "{e}");
        }
        assert!(ObjectSpec::parse(&format!("s3://{}", "a".repeat(64))).is_err());
        for p in ["a//b", "./x", "a/../b"] {
            assert!(
                matches!(ObjectSpec::parse(&format!("s3://bucket/{p}")), Err(SpecError::BadPrefixPart { .. })),
                "{p}"
            );
        }
        assert!(matches!(ObjectSpec::parse("s3://bucket/a?b"), Err(SpecError::BadChar { ch: '?', .. })));
        assert!(ObjectSpec::is_object_spec("s3://x"));
        assert!(!ObjectSpec::is_object_spec("s3:/x"));
    }
}
