//! Records the libdeflate version of the header this build compiles against: libdeflate
//! has no run-time version call, and libdeflate-sys (`links = "libdeflate"`) hands its
//! dependents the include directory it built from (`DEP_LIBDEFLATE_INCLUDE`).
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_LIBDEFLATE_INCLUDE");
    let version = std::env::var_os("DEP_LIBDEFLATE_INCLUDE")
        .map(|dir| PathBuf::from(dir).join("libdeflate.h"))
        .and_then(|header| std::fs::read_to_string(header).ok())
        .and_then(|text| version_string(&text))
        // a libdeflate-sys linked against the system library (its `dynamic` feature) names
        // no include directory
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SQUEEZEFS_LIBDEFLATE_VERSION={version}");
}

/// The value of `#define LIBDEFLATE_VERSION_STRING "1.26"`.
fn version_string(header: &str) -> Option<String> {
    header.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define")?.trim_start();
        let value = rest.strip_prefix("LIBDEFLATE_VERSION_STRING")?.trim();
        Some(value.strip_prefix('"')?.strip_suffix('"')?.to_string())
    })
}
