//! The `squeezefs` command: raw flags → validated config → command.
//! Each subcommand lives in its own module (`cmd_*.rs`).
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod cmd_bench;
mod cmd_fsck;
mod cmd_generate;
mod cmd_meta_copies;
mod cmd_mkfs;
mod cmd_mount;
mod cmd_plot;
mod cmd_prop;
mod cmd_recompress;
mod cmd_restore;
mod cmd_scrub;
mod cmd_seal;
mod cmd_stats;
mod cmd_umount;
mod error_line;
mod meta_report;
mod mount_helper;
mod on_mount;
mod open_pool;
mod rootdir;
mod version;
mod xattr_io;

#[derive(Parser)]
#[command(name = "squeezefs", version, about = "A transparently compressing FUSE filesystem")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmark the codecs in memory: ratio, speeds and workspace memory per codec/level
    Bench(cmd_bench::BenchArgs),
    /// Create a pool (a directory with the metadata store and, by default, one data file)
    Mkfs(cmd_mkfs::MkfsArgs),
    /// Verify every checksum of a pool and list damaged files
    Scrub(cmd_scrub::ScrubArgs),
    /// Check a pool's metadata and space map; exit status 1 if not clean
    Fsck(cmd_fsck::FsckArgs),
    /// Mount a pool (daemonizes once the mount is live unless --foreground)
    Mount(cmd_mount::MountArgs),
    /// Unmount, waiting until the pool is flushed and closed
    Umount(cmd_umount::UmountArgs),
    /// Compression statistics of a file, a tree or a mount (compsize columns)
    Stats(cmd_stats::StatsArgs),
    /// Draw an auto/QoS trace (mount option trace=FILE) as thesis-style figures in a PNG
    Plot(cmd_plot::PlotArgs),
    /// Get, set, inherit and list properties of files and directories (compression, ...)
    Prop(cmd_prop::PropArgs),
    /// Rewrite existing data of files and trees with another compression (on a mount)
    Recompress(cmd_recompress::RecompressArgs),
    /// Seal a closed pool: its metadata store becomes a compressed dump (meta.seal)
    Seal(cmd_seal::SealArgs),
    /// Unseal a sealed pool: its metadata store becomes meta.redb again
    Unseal(cmd_seal::UnsealArgs),
    /// Create a pool directory from the newest metadata backup in its bucket (s3://...)
    Restore(cmd_restore::RestoreArgs),
    /// Keep one or two checked copies of an unmounted pool's metadata store
    MetaCopies(cmd_meta_copies::MetaCopiesArgs),
}

/// Errors end the process here: one line on stderr, `squeezefs: ` then the context chain
/// joined by ": " (what was being done, then why), and exit status 1. Never a backtrace: these
/// are answers to bad input or a bad pool, and anyhow would otherwise append one whenever
/// RUST_BACKTRACE is set in the user's environment. (Usage errors are clap's: status 2.)
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("squeezefs: {}", error_line::one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The command line as users see it (help, man pages, completions), with the long
/// `--version`.
pub fn command() -> clap::Command {
    Cli::command().long_version(version::long_version())
}

fn run() -> anyhow::Result<()> {
    if let Some(helper) = mount_helper::invoked_as_helper() {
        return mount_helper::run(helper);
    }
    let matches = command().subcommand(cmd_generate::subcommand()).get_matches();
    if let Some((cmd_generate::NAME, m)) = matches.subcommand() {
        return cmd_generate::run(cmd_generate::GenerateArgs::from_arg_matches(m)?, command());
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.cmd {
        Command::Bench(a) => cmd_bench::run(a),
        Command::Mkfs(a) => cmd_mkfs::run(a),
        Command::Scrub(a) => cmd_scrub::run(a),
        Command::Fsck(a) => cmd_fsck::run(a),
        Command::Mount(a) => cmd_mount::run(a),
        Command::Umount(a) => cmd_umount::run(a),
        Command::Stats(a) => cmd_stats::run(a),
        Command::Plot(a) => cmd_plot::run(a),
        Command::Prop(a) => cmd_prop::run(a),
        Command::Recompress(a) => cmd_recompress::run(a),
        Command::Seal(a) => cmd_seal::seal(a),
        Command::Unseal(a) => cmd_seal::unseal(a),
        Command::MetaCopies(a) => cmd_meta_copies::run(a),
        Command::Restore(a) => cmd_restore::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::{cmd_generate, command};
    use crate::error_line::one_line;

    #[test]
    fn every_subcommand_gets_a_man_page() {
        let dir = tempfile::tempdir().unwrap();
        let pages = cmd_generate::write_man_pages(command(), dir.path()).unwrap();
        let names: Vec<String> = pages.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for want in
            ["squeezefs.1", "squeezefs-mount.1", "squeezefs-umount.1", "squeezefs-prop.1", "squeezefs-prop-get.1"]
        {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains(cmd_generate::NAME) || n.contains("help")), "{names:?}");
        let mount = std::fs::read_to_string(dir.path().join("squeezefs-mount.1")).unwrap();
        assert!(mount.contains("compress=SPEC"), "the options' help is in the page");
        assert!(mount.contains("squeezefs mount"), "the synopsis names the command as typed");
    }

    #[test]
    fn a_cause_quoted_by_its_error_is_not_printed_twice() {
        use squeezefs_pipeline::{EngineError, IoError};
        let failed = EngineError::Io(IoError::WriterStopped);
        let e = anyhow::Error::new(EngineError::Suspended(std::sync::Arc::new(failed))).context("closing pool p");
        assert_eq!(
            one_line(&e),
            "closing pool p: pool suspended after a failed transaction group: device I/O: the device writer stopped"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&plain), "outer: inner");
    }
}
