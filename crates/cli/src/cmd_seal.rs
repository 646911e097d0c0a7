//! `squeezefs seal POOL [--level N]` and `squeezefs unseal POOL`: keep a closed pool's
//! metadata store as a compressed dump (`meta.seal`) or as the store again (`meta.redb`).
//! A read-write mount unseals by itself; `mount -o ro` reads a sealed pool as it is.
use anyhow::{Context, Result};
use squeezefs_pipeline::{Engine, SEAL_LEVEL};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SealArgs {
    /// Pool directory (not mounted)
    pub pool: PathBuf,
    /// zstd level of the dump, 1 to 22
    #[arg(long, default_value_t = SEAL_LEVEL, value_parser = clap::value_parser!(i32).range(1..=22))]
    pub level: i32,
}

#[derive(clap::Args, Debug)]
pub struct UnsealArgs {
    /// Pool directory (not mounted)
    pub pool: PathBuf,
}

pub fn seal(a: SealArgs) -> Result<()> {
    match Engine::seal(&a.pool, a.level).with_context(|| format!("sealing pool {}", a.pool.display()))? {
        None => println!("pool {} is sealed already", a.pool.display()),
        Some(r) => println!(
            "sealed pool {}: metadata store {} bytes -> {} bytes ({} tables, {} rows) in {:.2} s",
            a.pool.display(),
            r.store_bytes,
            r.seal_bytes,
            r.tables,
            r.rows,
            r.secs
        ),
    }
    Ok(())
}

pub fn unseal(a: UnsealArgs) -> Result<()> {
    match Engine::unseal(&a.pool).with_context(|| format!("unsealing pool {}", a.pool.display()))? {
        None => println!("pool {} is not sealed", a.pool.display()),
        Some(r) => println!(
            "unsealed pool {}: {} bytes -> metadata store {} bytes ({} tables, {} rows) in {:.2} s",
            a.pool.display(),
            r.seal_bytes,
            r.store_bytes,
            r.tables,
            r.rows,
            r.secs
        ),
    }
    Ok(())
}
