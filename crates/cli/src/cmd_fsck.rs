//! `squeezefs fsck POOL [--json]`: check the space map against the extents and the
//! namespace (link counts, dirents, orphans). Exit status 0 = clean, 1 = problems found.
use anyhow::{Context, Result};
use squeezefs_pipeline::OpenOptions;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct FsckArgs {
    /// Pool directory (not mounted)
    pub pool: PathBuf,
    /// Machine-readable report
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: FsckArgs) -> Result<()> {
    let wait = std::time::Duration::from_secs(crate::open_pool::DEFAULT_WAIT_SECS);
    let e = crate::open_pool::open_waiting(&a.pool, &OpenOptions { read_only: true, ..Default::default() }, wait)
        .with_context(|| format!("opening pool {}", a.pool.display()))?;
    let r = e.fsck()?;
    e.close()?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{} inodes ({} directories), {} extents, {} bundles, {} bytes allocated, {} bytes in free ranges",
            r.inodes, r.directories, r.extents, r.bundles, r.allocated_bytes, r.free_range_bytes
        );
        if !r.orphans.is_empty() {
            println!("{} orphan inode(s) will be reclaimed at the next mount: {:?}", r.orphans.len(), r.orphans);
        }
        if r.is_clean() {
            println!("pool is clean");
        } else {
            println!("{} problem(s):", r.problems.len());
            for p in &r.problems {
                println!("  {p}");
            }
        }
    }
    if !r.is_clean() {
        std::process::exit(1);
    }
    Ok(())
}
