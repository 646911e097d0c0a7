//! `squeezefs fsck POOL [--json]`: check the space map against the extents and the
//! namespace (link counts, dirents, orphans), after the state of each copy of the
//! metadata store (every 4 KiB block against its checksum; nothing repaired: scrub does
//! that). Exit status 0 = clean, 1 = problems found.
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
    let meta = crate::meta_report::check(&a.pool, false, a.json)?;
    let meta_clean = meta.as_ref().is_none_or(|m| m.is_clean());
    let wait = std::time::Duration::from_secs(crate::open_pool::DEFAULT_WAIT_SECS);
    let r = crate::meta_report::no_panic("fsck", || {
        let e = crate::open_pool::open_waiting(&a.pool, &OpenOptions { read_only: true, ..Default::default() }, wait)
            .with_context(|| format!("opening pool {}", a.pool.display()))?;
        let r = e.fsck()?;
        e.close()?;
        Ok(r)
    });
    let r = match r {
        Ok(r) => r,
        Err(err) if !meta_clean => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "metadata": meta }))?);
            }
            eprintln!("squeezefs: {}", crate::error_line::one_line(&err));
            std::process::exit(1);
        }
        Err(err) => return Err(err),
    };
    if !meta_clean && !a.json {
        println!(
            "metadata store: damaged or copies differing (above); `squeezefs scrub` repairs what an intact copy holds"
        );
    }
    if a.json {
        let mut v = serde_json::to_value(&r)?;
        v["metadata"] = serde_json::to_value(&meta)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
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
    if !r.is_clean() || !meta_clean {
        std::process::exit(1);
    }
    Ok(())
}
