//! Records the git commit this binary is built from (`squeezefs --version`).
//!
//! `SQUEEZEFS_GIT_COMMIT` set in the environment wins (a build from a source tarball that
//! knows its commit); otherwise git is asked about the checkout holding this crate, and a
//! build outside any checkout says `unknown`. The script reruns when HEAD moves (a commit,
//! a checkout, a rebase), not on every edit: an uncommitted change is not flagged.
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SQUEEZEFS_GIT_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let commit = match std::env::var("SQUEEZEFS_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            for f in head_files(&dir) {
                println!("cargo:rerun-if-changed={}", f.display());
            }
            git(&dir, &["-c", "log.showSignature=false", "log", "-1", "--abbrev=12", "--format=%h (%cs)", "HEAD"])
                .unwrap_or_else(|| "unknown".to_string())
        }
    };
    println!("cargo:rustc-env=SQUEEZEFS_GIT_COMMIT={commit}");
}

/// The output of `git ARGS` run in `dir`, trimmed; `None` when git is missing, `dir` is no
/// checkout or git refuses it (e.g. a checkout owned by another user).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

/// The files whose change moves HEAD: HEAD itself (of this worktree), the branch it names
/// and packed-refs. Only existing ones: cargo reruns a script at every build while a file
/// it watches is missing.
fn head_files(dir: &Path) -> Vec<PathBuf> {
    let mut names = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        names.push(branch);
    }
    names
        .iter()
        .filter_map(|n| git(dir, &["rev-parse", "--path-format=absolute", "--git-path", n]))
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect()
}
