//! The `squeezefs` command: raw flags → validated config → command.
//! Each subcommand lives in its own module (`cmd_*.rs`).
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "squeezefs", version, about = "A transparently compressing FUSE filesystem")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {}
}
