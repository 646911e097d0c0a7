//! `squeezefs recompress PATH… [--to SPEC] [--if-different] [-r] [--jobs N] [--json]`:
//! rewrite existing data of files and trees on a mounted squeezefs, record by record, with
//! SPEC (default: each file's effective `compression` property). The mounted daemon does
//! the work (crates/fs recompress.rs) and reports progress over its control socket
//! (crates/ctlsock); this command checks the input, shows a progress bar and prints the
//! summary: bytes stored before and after, time, records skipped and why.
//!
//! Every record is rewritten through the engine's compare-and-swap rewrite: a write to the
//! same file meanwhile is never lost, and a crash leaves each record in its old or new
//! encoding. Interrupting the command (Ctrl-C) stops the job; what it rewrote stays.
use crate::on_mount::{locate, OnMount};
use anyhow::{anyhow, bail, Context, Result};
use squeezefs_ctlsock::proto::{Op, WirePath};
use squeezefs_ctlsock::{Client, Reply};
use squeezefs_fs::recompress::MAX_JOBS;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct RecompressArgs {
    /// Files (and with -r directories) on a squeezefs mount
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Compression to rewrite with (zstd:15, lz4, gzip-6, none, auto:1..9, ...); default:
    /// each file's effective `compression` property
    #[arg(long, value_name = "SPEC")]
    pub to: Option<String>,
    /// With --to: compress every record, skipping the compressibility check
    #[arg(long, requires = "to")]
    pub force: bool,
    /// Leave records already stored the way SPEC asks
    #[arg(long)]
    pub if_different: bool,
    /// Recurse into directories
    #[arg(short, long)]
    pub recursive: bool,
    /// Worker threads in the daemon
    #[arg(short, long, default_value_t = 1, value_name = "N")]
    pub jobs: usize,
    /// Print the summary as JSON (no progress bar)
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: RecompressArgs) -> Result<()> {
    if let Some(t) = &args.to {
        t.parse::<squeezefs_codec::Spec>().map_err(|e| anyhow!("--to {t}: {e}"))?;
    }
    if args.jobs == 0 || args.jobs > MAX_JOBS {
        bail!("--jobs {}: between 1 and {MAX_JOBS} worker threads", args.jobs);
    }
    let mut located: Vec<OnMount> = Vec::new();
    for p in &args.paths {
        located.push(locate(p)?);
    }
    let first = located[0].clone();
    if let Some(other) = located.iter().find(|l| l.root != first.root) {
        bail!(
            "{} and {} lie on different mounts ({} and {}): run one recompress per mount",
            first.path.display(),
            other.path.display(),
            first.root.display(),
            other.root.display()
        );
    }
    let client = Client::connect(&first.pool).with_context(|| format!("recompressing on {}", first.root.display()))?;
    let op = Op::Recompress {
        paths: located.iter().map(|l| WirePath::from_bytes(&l.rel)).collect(),
        to: args.to.clone(),
        force: args.force,
        if_different: args.if_different,
        recursive: args.recursive,
        jobs: args.jobs,
    };
    let bar = if args.json { indicatif::ProgressBar::hidden() } else { progress_bar() };
    let reply = client.call(op, &mut |r| {
        if let Reply::Progress { counts } = r {
            bar.set_length(counts.bytes_total.max(1));
            bar.set_position(counts.bytes_done);
            bar.set_message(format!(
                "{}/{} files, {} records rewritten",
                counts.files_done, counts.files_total, counts.records_rewritten
            ));
        }
        true
    });
    bar.finish_and_clear();
    let Reply::Done { summary } = reply.context("recompress")? else {
        bail!("the daemon answered something else than a summary")
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        let c = &summary.counts;
        let h = crate::cmd_stats::human;
        let change = if c.stored_before > 0 {
            format!(" ({:+.1}%)", (c.stored_after as f64 - c.stored_before as f64) * 100.0 / c.stored_before as f64)
        } else {
            String::new()
        };
        println!(
            "{} {} of {} records in {} files ({} of data) in {:.1} s",
            if summary.cancelled { "Stopped after rewriting" } else { "Rewrote" },
            c.records_rewritten,
            c.records_total,
            c.files_total,
            h(c.bytes_total),
            summary.elapsed_secs,
        );
        println!("Stored: {} before, {} after{change}", h(c.stored_before), h(c.stored_after));
        if !summary.skipped.is_empty() {
            let parts: Vec<String> = summary.skipped.iter().map(|(why, n)| format!("{n} {why}")).collect();
            println!("Left as they were: {}", parts.join(", "));
        }
        for e in &summary.errors {
            eprintln!("damaged record left as it was: {e}");
        }
    }
    if summary.error_count > 0 {
        bail!("{} damaged records were left as they were (run `squeezefs scrub` on the pool)", summary.error_count);
    }
    Ok(())
}

fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(1);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
