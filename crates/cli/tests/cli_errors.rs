//! Bad input to the command line gets one clear line on stderr and a failing exit status,
//! never a backtrace — also when RUST_BACKTRACE is set, as it often is for Rust users.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_squeezefs");

fn squeezefs(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .expect("run squeezefs")
}

/// The stderr of a failed command: exactly one line, starting `squeezefs: `, containing
/// every one of `phrases`.
fn assert_one_line_error(out: &Output, code: i32, phrases: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "exit status; stderr: {err}");
    assert!(!err.contains("backtrace"), "a backtrace was printed: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(lines[0].starts_with("squeezefs: "), "{err}");
    for p in phrases {
        assert!(lines[0].contains(p), "{p:?} missing from {err}");
    }
}

#[test]
fn errors_are_one_line_without_a_backtrace_even_with_rust_backtrace_set() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let pool_s = pool.to_str().unwrap();
    assert!(squeezefs(&["mkfs", pool_s]).status.success());

    // an existing pool is not overwritten without --force
    let out = squeezefs(&["mkfs", pool_s]);
    assert_one_line_error(&out, 1, &[pool_s, "already holds a squeezefs pool", "--force"]);

    // a directory that is not a pool: names the path and how to make one
    let plain = dir.path().to_str().unwrap();
    for cmd in ["fsck", "scrub"] {
        let out = squeezefs(&[cmd, plain]);
        assert_one_line_error(&out, 1, &[plain, "is not a squeezefs pool", "squeezefs mkfs"]);
    }

    // a record size outside what is accepted names the accepted range
    let other = dir.path().join("other");
    let out = squeezefs(&["mkfs", other.to_str().unwrap(), "--recordsize", "3k"]);
    assert_one_line_error(&out, 1, &["record size 3072", "accepted"]);
    assert!(!other.join("meta.redb").exists(), "a refused mkfs left a pool behind");
}

#[test]
fn a_usage_error_is_clap_s_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = squeezefs(&["mkfs", dir.path().join("p").to_str().unwrap(), "--sector", "1000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("512") && err.contains("4096"), "accepted values not named: {err}");
}
