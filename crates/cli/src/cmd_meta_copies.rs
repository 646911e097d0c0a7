//! `squeezefs meta-copies POOL 1|2`: give the metadata store of an unmounted pool one or
//! two checked copies (a pool made before checked copies, with one plain `meta.redb`,
//! becomes checked).
use anyhow::{Context, Result};
use squeezefs_pipeline::Engine;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct MetaCopiesArgs {
    /// Pool directory (not mounted)
    pub pool: PathBuf,
    /// Copies to keep: 1 or 2
    #[arg(value_parser = clap::value_parser!(u8).range(1..=2))]
    pub copies: u8,
}

pub fn run(a: MetaCopiesArgs) -> Result<()> {
    let c = Engine::set_meta_copies(&a.pool, a.copies)
        .with_context(|| format!("setting the metadata copies of {}", a.pool.display()))?;
    let was = match c.before {
        0 => "one plain copy (meta.redb)".to_string(),
        n => format!("{n} checked"),
    };
    if c.before == c.after {
        println!("{}: metadata store already has {} checked copies", a.pool.display(), c.after);
    } else {
        println!("{}: metadata store converted from {was} to {} checked copies", a.pool.display(), c.after);
    }
    Ok(())
}
