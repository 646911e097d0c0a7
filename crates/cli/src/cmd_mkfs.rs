//! `squeezefs mkfs POOL [--device PATH]… [--sector 512|4096] [--recordsize SIZE] [--force]`
use anyhow::{Context, Result};
use squeezefs_pipeline::{Engine, MkfsOptions};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct MkfsArgs {
    /// Pool directory (holds the metadata store and, without --device, the data file)
    pub pool: PathBuf,
    /// A device file or block device for data (repeat for several); default: one growable
    /// file inside the pool directory
    #[arg(long = "device", value_name = "PATH")]
    pub devices: Vec<PathBuf>,
    /// Allocation unit in bytes (default: 4096 with block devices, 512 with files)
    #[arg(long, value_parser = ["512", "4096"])]
    pub sector: Option<String>,
    /// Record size: a power of two from 4K to 1M, e.g. 128K (default 128K)
    #[arg(long, value_parser = parse_size)]
    pub recordsize: Option<u32>,
    /// Largest compressed size of a small file stored inline in the metadata (default 2K)
    #[arg(long, value_parser = parse_size)]
    pub max_inline: Option<u32>,
    /// Overwrite an existing pool or non-empty devices
    #[arg(long)]
    pub force: bool,
}

/// "131072", "128K", "128KiB", "1M" → bytes (binary multiples).
pub fn parse_size(s: &str) -> std::result::Result<u32, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (accepted: a number with an optional K or M suffix, e.g. 128K)"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (accepted: K, M)")),
    };
    n.checked_mul(mult).and_then(|v| u32::try_from(v).ok()).ok_or_else(|| format!("{s:?} is too large"))
}

pub fn run(a: MkfsArgs) -> Result<()> {
    let opts = MkfsOptions {
        devices: a.devices.clone(),
        sector: a.sector.as_deref().map(|s| s.parse().expect("clap allows 512 or 4096 only")),
        recordsize: a.recordsize,
        force: a.force,
        max_inline: a.max_inline,
        device_capacity: None,
    };
    Engine::mkfs(&a.pool, &opts).with_context(|| format!("mkfs {}", a.pool.display()))?;
    let e = Engine::open(&a.pool, &Default::default()).context("opening the new pool")?;
    let info = e.info();
    e.close()?;
    println!(
        "created pool {}: {} device(s), sector {} B, record size {} KiB, inline up to {} B",
        a.pool.display(),
        info.devices,
        info.sector,
        info.recordsize / 1024,
        info.max_inline
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("131072"), Ok(131072));
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("128KiB"), Ok(131072));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert!(parse_size("12Q").unwrap_err().contains("unknown unit"));
        assert!(parse_size("K").is_err());
        assert!(parse_size("9999999M").unwrap_err().contains("too large"));
    }
}
