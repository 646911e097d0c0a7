//! Endpoint, region and credentials of an object store, taken the way every S3 tool takes
//! them: `AWS_ENDPOINT_URL`, `AWS_REGION` (or `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP=true`, and, when no key is
//! in the environment, the profile `AWS_PROFILE` (default `default`) of
//! `~/.aws/credentials` (`AWS_SHARED_CREDENTIALS_FILE`) and its region in `~/.aws/config`
//! (`AWS_CONFIG_FILE`). Never from the command line or the pool directory: nothing here is
//! written anywhere, and `Debug` shows no secret.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Clone, Default, PartialEq, Eq)]
pub struct StoreConfig {
    /// e.g. `http://127.0.0.1:9000`; `None`: AWS's own endpoint for the region
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    /// plain http allowed (a test endpoint)
    pub allow_http: bool,
    /// where the credentials came from, for messages (`environment`, `profile NAME of FILE`)
    pub source: String,
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id.as_ref().map(|_| "(set)"))
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "(set)"))
            .field("session_token", &self.session_token.as_ref().map(|_| "(set)"))
            .field("allow_http", &self.allow_http)
            .field("source", &self.source)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("reading AWS credentials from {path}: {source}")]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "AWS_PROFILE={profile}: no such profile in {path} (profiles there: {known}); set AWS_PROFILE to one of \
         them, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    )]
    NoProfile { profile: String, path: PathBuf, known: String },
    #[error("AWS_ALLOW_HTTP={value:?} is not a boolean (accepted: true, false, 1, 0)")]
    BadAllowHttp { value: String },
}

impl StoreConfig {
    /// From the process environment and the AWS shared files under `$HOME/.aws`.
    pub fn from_env() -> Result<StoreConfig, ConfigError> {
        let vars: HashMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("AWS_")).collect();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Self::from_vars(&vars, home.as_deref())
    }

    /// From `vars` (the `AWS_*` variables) and the shared files under `home/.aws`.
    pub fn from_vars(vars: &HashMap<String, String>, home: Option<&Path>) -> Result<StoreConfig, ConfigError> {
        let get = |k: &str| vars.get(k).filter(|v| !v.is_empty()).cloned();
        let allow_http = match get("AWS_ALLOW_HTTP").as_deref() {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(v) => return Err(ConfigError::BadAllowHttp { value: v.to_string() }),
        };
        let mut c = StoreConfig {
            endpoint: get("AWS_ENDPOINT_URL").or_else(|| get("AWS_ENDPOINT")),
            region: get("AWS_REGION").or_else(|| get("AWS_DEFAULT_REGION")),
            access_key_id: get("AWS_ACCESS_KEY_ID"),
            secret_access_key: get("AWS_SECRET_ACCESS_KEY"),
            session_token: get("AWS_SESSION_TOKEN"),
            allow_http,
            source: "environment".into(),
        };
        let profile = get("AWS_PROFILE");
        if c.access_key_id.is_some() && profile.is_none() {
            return Ok(c);
        }
        let profile_name = profile.clone().unwrap_or_else(|| "default".into());
        let aws = home.map(|h| h.join(".aws"));
        let cred_path =
            get("AWS_SHARED_CREDENTIALS_FILE").map(PathBuf::from).or(aws.as_ref().map(|a| a.join("credentials")));
        let conf_path = get("AWS_CONFIG_FILE").map(PathBuf::from).or(aws.as_ref().map(|a| a.join("config")));
        if let Some(path) = cred_path {
            match read_ini(&path)? {
                Some(ini) => match ini.get(&profile_name) {
                    Some(sec) => {
                        c.access_key_id = sec.get("aws_access_key_id").cloned();
                        c.secret_access_key = sec.get("aws_secret_access_key").cloned();
                        c.session_token = sec.get("aws_session_token").cloned();
                        c.source = format!("profile {profile_name} of {}", path.display());
                    }
                    None if profile.is_some() => {
                        let mut known: Vec<&str> = ini.keys().map(String::as_str).collect();
                        known.sort();
                        return Err(ConfigError::NoProfile {
                            profile: profile_name,
                            path,
                            known: if known.is_empty() { "none".into() } else { known.join(", ") },
                        });
                    }
                    None => {}
                },
                None if profile.is_some() => {
                    return Err(ConfigError::NoProfile { profile: profile_name, path, known: "none".into() })
                }
                None => {}
            }
        }
        if c.region.is_none() {
            if let Some(path) = conf_path {
                if let Some(ini) = read_ini(&path)? {
                    let section = if profile_name == "default" {
                        "default".to_string()
                    } else {
                        format!("profile {profile_name}")
                    };
                    c.region = ini.get(&section).and_then(|s| s.get("region")).cloned();
                }
            }
        }
        Ok(c)
    }

    /// Whether a key pair is known.
    pub fn has_credentials(&self) -> bool {
        self.access_key_id.is_some() && self.secret_access_key.is_some()
    }
}

type Ini = HashMap<String, HashMap<String, String>>;

/// An AWS shared file (`[section]` headers, `key = value` lines, `#`/`;` comments), or
/// `None` if it does not exist.
fn read_ini(path: &Path) -> Result<Option<Ini>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ConfigError::ReadFile { path: path.to_path_buf(), source }),
    };
    let mut ini = Ini::new();
    let mut section: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim().to_string();
            ini.entry(name.clone()).or_default();
            section = Some(name);
        } else if let (Some(s), Some((k, v))) = (&section, line.split_once('=')) {
            ini.entry(s.clone()).or_default().insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    Ok(Some(ini))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn environment_keys_win_and_debug_hides_secrets() {
        let c = StoreConfig::from_vars(
            &vars(&[
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
                ("AWS_ACCESS_KEY_ID", "AKID"),
                ("AWS_SECRET_ACCESS_KEY", "very-secret"),
                ("AWS_ALLOW_HTTP", "true"),
                ("AWS_DEFAULT_REGION", "eu-west-1"),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(c.region.as_deref(), Some("eu-west-1"));
        assert!(c.allow_http && c.has_credentials());
        let shown = format!("{c:?}");
        assert!(!shown.contains("very-secret") && !shown.contains("AKID"), "{shown}");
        assert!(StoreConfig::from_vars(&vars(&[("AWS_ALLOW_HTTP", "yes")]), None).is_err());
    }

    #[test]
    fn profiles_come_from_the_shared_files() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n# c\n[work]\naws_access_key_id=W\naws_secret_access_key=WS\naws_session_token = T\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[default]\nregion = us-east-2\n[profile work]\nregion=ap-south-1\n",
        )
        .unwrap();
        let d = StoreConfig::from_vars(&vars(&[]), Some(home.path())).unwrap();
        assert_eq!((d.access_key_id.as_deref(), d.region.as_deref()), (Some("D"), Some("us-east-2")));
        let w = StoreConfig::from_vars(&vars(&[("AWS_PROFILE", "work")]), Some(home.path())).unwrap();
        assert_eq!(w.access_key_id.as_deref(), Some("W"));
        assert_eq!(w.session_token.as_deref(), Some("T"));
        assert_eq!(w.region.as_deref(), Some("ap-south-1"));
        assert!(w.source.contains("profile work"));
        let e = StoreConfig::from_vars(&vars(&[("AWS_PROFILE", "nope")]), Some(home.path())).unwrap_err();
        assert!(e.to_string().contains("default, work"), "{e}");
    }
}
