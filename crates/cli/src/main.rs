//! The `squeezefs` command: raw flags → validated config → command.
//! Each subcommand lives in its own module (`cmd_*.rs`).
use clap::{Parser, Subcommand};

mod cmd_fsck;
mod cmd_mkfs;
mod cmd_scrub;

#[derive(Parser)]
#[command(name = "squeezefs", version, about = "A transparently compressing FUSE filesystem")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a pool (a directory with the metadata store and, by default, one data file)
    Mkfs(cmd_mkfs::MkfsArgs),
    /// Verify every checksum of a pool and list damaged files
    Scrub(cmd_scrub::ScrubArgs),
    /// Check a pool's metadata and space map; exit status 1 if not clean
    Fsck(cmd_fsck::FsckArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Command::Mkfs(a) => cmd_mkfs::run(a),
        Command::Scrub(a) => cmd_scrub::run(a),
        Command::Fsck(a) => cmd_fsck::run(a),
    }
}
