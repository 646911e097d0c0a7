//! `squeezefs generate man DIR` and `squeezefs generate completions SHELL`: man pages and
//! shell completions made from the command-line definition (the binary's `command()`, passed
//! in so that this module does not import the crate root), so they list exactly the subcommands and options the binary parses. Hidden from help, man pages
//! and completions: scripts/install.sh and the Debian package install what it writes.
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The hidden subcommand's name.
pub const NAME: &str = "generate";

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Write squeezefs.1 and a page per subcommand (squeezefs-mount.1, squeezefs-prop-get.1,
    /// ...) into DIR, printing each file's path
    Man { dir: PathBuf },
    /// Print the completion script for SHELL
    Completions { shell: clap_complete::Shell },
}

/// The hidden subcommand, to add to the parser.
pub fn subcommand() -> clap::Command {
    use clap::Args;
    GenerateArgs::augment_args(clap::Command::new(NAME).hide(true))
}

/// Run it on `cli`, the command line as users see it.
pub fn run(args: GenerateArgs, mut cli: clap::Command) -> Result<()> {
    match args.what {
        What::Man { dir } => {
            for page in write_man_pages(cli, &dir)? {
                println!("{}", page.display());
            }
        }
        What::Completions { shell } => {
            use std::io::Write;
            // into memory first: clap_complete panics on a failed write (a closed pipe)
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cli, "squeezefs", &mut script);
            std::io::stdout().write_all(&script).context("writing the completion script")?;
        }
    }
    Ok(())
}

/// One page per command and subcommand, nested ones too (`squeezefs-prop-get.1`); the
/// paths written, parents first.
pub fn write_man_pages(cli: clap::Command, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // the release alone in each page's VERSION section (the long version is many lines)
    let mut cmd = cli.long_version(None::<&str>).disable_help_subcommand(true);
    // names the subcommands' pages (display name `squeezefs-mount`) and their synopses
    // (bin name `squeezefs mount`)
    cmd.build();
    let source = format!("squeezefs {}", env!("CARGO_PKG_VERSION"));
    let mut written = Vec::new();
    write_pages(&cmd, dir, &source, &mut written)?;
    Ok(written)
}

fn write_pages(cmd: &clap::Command, dir: &Path, source: &str, written: &mut Vec<PathBuf>) -> Result<()> {
    let page = clap_mangen::Man::new(cmd.clone()).source(source).manual("squeezefs manual");
    written.push(
        page.generate_to(dir).with_context(|| format!("writing {} into {}", page.get_filename(), dir.display()))?,
    );
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, source, written)?;
    }
    Ok(())
}
