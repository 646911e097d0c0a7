//! `squeezefs restore s3://BUCKET/PREFIX POOL`: a new pool directory from the newest
//! complete metadata backup in the bucket, on a machine that has nothing else of the pool
//! (pipeline engine/restore.rs). Endpoint and credentials come from the standard AWS
//! variables and files, as for mkfs and mount.
use anyhow::{Context, Result};
use squeezefs_pipeline::{Engine, ObjectSettings};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// The object device the pool was made on: s3://BUCKET or s3://BUCKET/PREFIX
    pub device: String,
    /// The pool directory to create (new or empty)
    pub pool: PathBuf,
}

pub fn run(a: RestoreArgs) -> Result<()> {
    let r = Engine::restore(&a.pool, &a.device, &ObjectSettings::default())
        .with_context(|| format!("restoring {} into {}", a.device, a.pool.display()))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    for s in &r.skipped {
        eprintln!("squeezefs: passed over a damaged backup: {s}");
    }
    println!(
        "restored pool {} from {}: backup {} of txg {}, taken {} s ago ({} bytes of metadata, {} extents in {} segments)",
        a.pool.display(),
        a.device,
        r.generation,
        r.txg,
        now.saturating_sub(r.created),
        r.seal_bytes,
        r.extents,
        r.segments
    );
    Ok(())
}
