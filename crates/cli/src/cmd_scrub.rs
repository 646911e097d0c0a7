//! `squeezefs scrub POOL [--json]`: verify every 4 KiB block of every copy of the metadata
//! store and rewrite bad ones from an intact copy (listing the repairs), then the checksum
//! of every stored record; list the damaged files and offsets. Exit status 0 = clean or
//! repaired, 1 = damage left (a metadata block bad in every copy, a damaged record).
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use squeezefs_pipeline::OpenOptions;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ScrubArgs {
    /// Pool directory (not mounted)
    pub pool: PathBuf,
    /// Machine-readable report
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ScrubArgs) -> Result<()> {
    let meta = crate::meta_report::check(&a.pool, true, a.json)?;
    let lost = meta.as_ref().is_some_and(|m| !m.lost.is_empty());
    if lost && !a.json {
        println!("metadata store: blocks damaged in every copy; the pool may not open");
    }
    let wait = std::time::Duration::from_secs(crate::open_pool::DEFAULT_WAIT_SECS);
    let e = crate::meta_report::no_panic("scrub", || {
        crate::open_pool::open_waiting(&a.pool, &OpenOptions { read_only: true, ..Default::default() }, wait)
            .with_context(|| format!("opening pool {}", a.pool.display()))
    });
    let e = match e {
        Ok(e) => e,
        Err(err) if lost => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "metadata": meta }))?);
            }
            eprintln!("squeezefs: {}", crate::error_line::one_line(&err));
            std::process::exit(1);
        }
        Err(err) => return Err(err),
    };
    let bar = if a.json { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} scrub [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let report = crate::meta_report::no_panic("scrub", || {
        Ok(e.scrub(&|done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })?)
    })?;
    bar.finish_and_clear();
    e.close()?;
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        v["metadata"] = serde_json::to_value(&meta)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "scrubbed {} records, {} bytes stored: {}",
            report.records,
            report.stored_bytes,
            if report.is_clean() { "no damage".to_string() } else { format!("{} damaged", report.damaged.len()) }
        );
        for d in &report.damaged {
            let place = match (d.device, d.device_offset) {
                (Some(dev), Some(off)) => format!("device {dev} offset {off}"),
                _ => "inline".to_string(),
            };
            println!(
                "  {} (inode {}) offset {} length {}: {} [{place}]",
                d.path.as_deref().unwrap_or("<unreachable>"),
                d.ino,
                d.offset,
                d.logical_len,
                d.problem
            );
        }
    }
    if !report.is_clean() || lost {
        std::process::exit(1);
    }
    Ok(())
}
