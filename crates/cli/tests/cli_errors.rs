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
    assert!(!other.join("meta.copy0").exists(), "a refused mkfs left a pool behind");
}

/// A bundle size mkfs does not accept (not a power of two, below the record size, above
/// 4M) is refused in one line naming it, the record size and the accepted range, and leaves
/// no pool; one it accepts is what the new pool reports.
#[test]
fn a_bad_bundle_size_is_refused_naming_what_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (args, bytes, rs)) in [
        (vec!["--bundle-size", "384K"], 393216, 131072),
        (vec!["--bundle-size", "64K"], 65536, 131072),
        (vec!["--bundle-size", "8M"], 8388608, 131072),
        (vec!["--recordsize", "1M", "--bundle-size", "512K"], 524288, 1048576),
    ]
    .into_iter()
    .enumerate()
    {
        let pool = dir.path().join(format!("bad{i}"));
        let mut all = vec!["mkfs", pool.to_str().unwrap()];
        all.extend(args);
        let out = squeezefs(&all);
        assert_one_line_error(
            &out,
            1,
            &[
                &format!("bundle size {bytes} "),
                &format!("record size {rs} "),
                "accepted: a power of two from the record size to 4194304 bytes",
            ],
        );
        assert!(!pool.join("meta.copy0").exists(), "a refused mkfs left a pool behind");
    }
    let pool = dir.path().join("good");
    let out = squeezefs(&["mkfs", pool.to_str().unwrap(), "--recordsize", "64K", "--bundle-size", "4M"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("record size 64 KiB, bundles up to 4096 KiB"), "{text}");
}

#[test]
fn a_usage_error_is_clap_s_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = squeezefs(&["mkfs", dir.path().join("p").to_str().unwrap(), "--sector", "1000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("512") && err.contains("4096"), "accepted values not named: {err}");
}
