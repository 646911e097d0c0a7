//! The compression libraries linked into this build and their versions: as zstd and lz4
//! report them at run time, and for libdeflate (no run-time version call; linked
//! statically) as stated by the header it was compiled from (build.rs).

/// One linked compression library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryVersion {
    /// The library's own name (`libzstd`, `lz4`, `libdeflate`, `lzo1x`).
    pub name: &'static str,
    /// Its version (`1.5.7`), or why there is none (`not built: ...`).
    pub version: String,
}

/// The libraries behind the algorithms, in [`crate::Algorithm`] order of their ids.
pub fn library_versions() -> Vec<LibraryVersion> {
    vec![
        LibraryVersion { name: "libzstd", version: zstd_safe::version_string().to_string() },
        LibraryVersion { name: "lz4", version: lz4_version(lz4_version_number()) },
        LibraryVersion { name: "libdeflate", version: env!("SQUEEZEFS_LIBDEFLATE_VERSION").to_string() },
        LibraryVersion { name: "lzo1x", version: lzo_version() },
    ]
}

fn lz4_version_number() -> i32 {
    // SAFETY: LZ4_versionNumber takes no arguments and reads no state
    unsafe { lz4_sys::LZ4_versionNumber() }
}

/// lz4's `LZ4_versionNumber()` is `major * 10000 + minor * 100 + release`.
fn lz4_version(n: i32) -> String {
    format!("{}.{}.{}", n / 10000, n / 100 % 100, n % 100)
}

fn lzo_version() -> String {
    if cfg!(feature = "lzo") {
        "built in (pure Rust port of lzo1x-1)".to_string()
    } else {
        "not built (the codec crate's `lzo` feature)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dotted(v: &str, parts: usize) -> bool {
        let p: Vec<&str> = v.split('.').collect();
        p.len() == parts && p.iter().all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()))
    }

    #[test]
    fn lz4_version_number_is_decoded() {
        assert_eq!(lz4_version(11000), "1.10.0");
        assert_eq!(lz4_version(10904), "1.9.4");
    }

    #[test]
    fn every_linked_library_names_its_version() {
        let v = library_versions();
        let get = |name: &str| v.iter().find(|l| l.name == name).map(|l| l.version.clone()).unwrap();
        assert!(dotted(&get("libzstd"), 3), "{v:?}");
        assert!(dotted(&get("lz4"), 3), "{v:?}");
        // build.rs found the header: the statically built libdeflate is always there
        assert!(dotted(&get("libdeflate"), 2), "{v:?}");
        assert_eq!(get("libzstd"), zstd_safe::version_string());
    }
}
