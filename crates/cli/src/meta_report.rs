//! The metadata store's own check, shared by scrub (repairing) and fsck (reporting): every
//! 4 KiB block of every copy against its checksum (pipeline meta_mirror.rs), printed copy
//! by copy. Run before the pool is opened, so a store damaged in every copy is named, not
//! stumbled over by redb.
use anyhow::{Context, Result};
use squeezefs_pipeline::{Engine, MetaCheck};
use std::path::Path;

/// Check (and with `repair`, repair) the store of `pool`; print the result unless `quiet`.
/// `None`: a plain store, which has no checksums to check.
pub fn check(pool: &Path, repair: bool, quiet: bool) -> Result<Option<MetaCheck>> {
    if sealed_only(pool) {
        // a sealed store is one compressed, checksummed file (docs/format.md): the open
        // that unseals it checks it, and it has no copies to compare
        if !quiet {
            println!("metadata store: sealed ({}), checked as the pool opens", squeezefs_pipeline::SEAL_FILE);
        }
        return Ok(None);
    }
    let c = Engine::check_meta(pool, repair)
        .with_context(|| format!("checking the metadata store of {}", pool.display()))?;
    if quiet {
        return Ok(c);
    }
    let Some(c) = &c else {
        println!(
            "metadata store: one plain copy (meta.redb), no block checksums; `squeezefs meta-copies {} 2` converts it",
            pool.display()
        );
        return Ok(None);
    };
    for (i, cc) in c.copies.iter().enumerate() {
        let state = if !cc.present {
            "missing".to_string()
        } else if cc.bad_blocks.is_empty() && cc.bad_sum_groups.is_empty() && cc.header_ok && cc.stale_blocks == 0 {
            "intact".to_string()
        } else if cc.bad_blocks.is_empty() && cc.bad_sum_groups.is_empty() && cc.header_ok && !cc.clean {
            format!(
                "not closed cleanly, {} blocks behind copy {}: the sync under way when it stopped \
                 (the next read-write open copies it)",
                cc.stale_blocks, c.authority
            )
        } else {
            let mut parts = Vec::new();
            if !cc.header_ok {
                parts.push("header damaged".to_string());
            }
            if !cc.bad_blocks.is_empty() {
                parts.push(format!("{} bad blocks {:?}", cc.bad_blocks.len(), first(&cc.bad_blocks)));
            }
            if !cc.bad_sum_groups.is_empty() {
                parts.push(format!("{} bad sum blocks", cc.bad_sum_groups.len()));
            }
            if cc.stale_blocks > 0 {
                parts.push(format!("{} blocks behind copy {}", cc.stale_blocks, c.authority));
            }
            parts.join(", ")
        };
        println!("metadata copy {i} ({}): {} blocks, {state}", cc.path.display(), cc.blocks);
    }
    for r in &c.repaired {
        println!("  repaired copy {}: {}", r.copy, r.what);
    }
    for l in &c.lost {
        println!("  block {} (bytes {}..{}) is damaged in every copy: {}", l.block, l.offset, l.offset + 4096, l.held);
    }
    Ok(Some(c.clone()))
}

/// The blocks of `pool`'s store lost in every copy and what each held, in one line; `None`
/// when none is (or the store is plain, or the check itself fails).
pub fn lost_blocks(pool: &Path) -> Option<String> {
    let c = Engine::check_meta(pool, false).ok()??;
    if c.lost.is_empty() {
        return None;
    }
    let each: Vec<String> = c.lost.iter().map(|l| format!("block {} ({})", l.block, l.held)).collect();
    Some(format!("the metadata store has blocks damaged in every copy: {}", each.join("; ")))
}

fn first(v: &[u64]) -> Vec<u64> {
    v.iter().take(8).copied().collect()
}

/// Run `f`, turning a panic inside it (redb meeting a damaged page of a plain store, which
/// has no checksums to catch it first) into an error that says so.
pub fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            anyhow::bail!(
                "{what}: the metadata store is damaged: redb stopped on a page it could not read ({msg}); \
                 a store with checked copies (`squeezefs meta-copies POOL 2`) names damaged blocks instead"
            )
        }
    }
}

/// Whether `pool`'s metadata is only its sealed file: no store, plain or checked, beside it.
fn sealed_only(pool: &Path) -> bool {
    pool.join(squeezefs_pipeline::SEAL_FILE).exists()
        && !pool.join(squeezefs_pipeline::META_FILE).exists()
        && !squeezefs_pipeline::COPY_FILES.iter().any(|f| pool.join(f).exists())
}
