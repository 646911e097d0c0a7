//! `squeezefs bench`: in-memory codec benchmark. Flags → validated [`BenchConfig`] → the
//! engine in `squeezefs_codec::bench` → table / JSON / PNG plot.

use anyhow::{bail, Context, Result};
use clap::Args;
use squeezefs_codec::bench::{self, BenchConfig, Event, Input, Row};
use squeezefs_codec::Spec;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default codec list: the rows of the reference table in docs/design.md §14, minus the slowest.
pub const DEFAULT_CODECS: &str = "lz4:fast=17,lz4,zstd:-5,zstd:1,zstd:3,zstd:9,zlib:6";

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Files to benchmark (.zip files are read member by member); none: a built-in sample
    /// of text-like, binary-like and incompressible data
    pub files: Vec<PathBuf>,
    /// Block size: each input is cut into independent blocks of this size (e.g. 4096, 64K, 1M)
    #[arg(long, default_value = "128K")]
    pub block: String,
    /// Comma-separated codecs, ranges allowed: zstd:1..15,lz4,lz4:fast=17,lz4hc:9,zlib:6,none
    #[arg(long, default_value = DEFAULT_CODECS)]
    pub codecs: String,
    /// Compression/decompression threads
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Minimum seconds spent per codec and direction (the fastest pass counts)
    #[arg(long, default_value_t = 1.0)]
    pub time: f64,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also draw ratio against compression speed into this PNG file
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
}

/// Parse a size: a number of bytes with an optional binary suffix K, M, G (also KiB, KB, k…).
pub fn parse_size(text: &str) -> Result<usize> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let accepted = "accepted: a number of bytes with an optional suffix K, M or G (KiB, MiB, GiB), e.g. 4096, 128K, 1M";
    if digits.is_empty() {
        bail!("invalid size {text:?}: {accepted}");
    }
    let n: usize = digits.parse().with_context(|| format!("invalid size {text:?}: {accepted}"))?;
    let unit: usize = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => bail!("invalid size suffix in {text:?}: {accepted}"),
    };
    n.checked_mul(unit).with_context(|| format!("size {text:?} is too large"))
}

/// Flags → validated configuration.
pub fn config(args: &BenchArgs) -> Result<BenchConfig> {
    let block_size = parse_size(&args.block).context("--block")?;
    if block_size == 0 || block_size > 1 << 30 {
        bail!("--block {}: must be between 1 byte and 1G", args.block);
    }
    let codecs = Spec::parse_list(&args.codecs).map_err(|e| anyhow::anyhow!("--codecs {:?}: {e}", args.codecs))?;
    if args.threads == 0 || args.threads > 1024 {
        bail!("--threads {}: must be 1..=1024", args.threads);
    }
    if !(args.time.is_finite() && (0.0..=3600.0).contains(&args.time)) {
        bail!("--time {}: must be 0..=3600 seconds", args.time);
    }
    if let Some(p) = &args.plot {
        if p.extension().and_then(|e| e.to_str()).map(|e| e.eq_ignore_ascii_case("png")) != Some(true) {
            bail!("--plot {}: the plot is a PNG file, name it FILE.png", p.display());
        }
    }
    Ok(BenchConfig { block_size, codecs, threads: args.threads, min_time: Duration::from_secs_f64(args.time) })
}

/// Read the inputs: plain files whole, zip files member by member.
pub fn load_inputs(files: &[PathBuf]) -> Result<Vec<Input>> {
    if files.is_empty() {
        return Ok(bench::builtin_sample());
    }
    let mut inputs = Vec::new();
    for path in files {
        let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        if data.starts_with(b"PK\x03\x04") {
            inputs.extend(unzip(path, &data)?);
        } else {
            inputs.push(Input { name: path.display().to_string(), data });
        }
    }
    Ok(inputs)
}

fn unzip(path: &Path, data: &[u8]) -> Result<Vec<Input>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(data))
        .with_context(|| format!("{}: not a readable zip file", path.display()))?;
    let mut out = Vec::new();
    for i in 0..archive.len() {
        let mut member = archive.by_index(i).with_context(|| format!("{}: member {i}", path.display()))?;
        if member.is_dir() {
            continue;
        }
        let name = format!("{}:{}", path.display(), member.name());
        let mut buf = Vec::with_capacity(member.size() as usize);
        member.read_to_end(&mut buf).with_context(|| format!("cannot unpack {name}"))?;
        out.push(Input { name, data: buf });
    }
    Ok(out)
}

pub fn run(args: BenchArgs) -> Result<()> {
    let cfg = config(&args)?;
    let inputs = load_inputs(&args.files)?;
    let total: usize = inputs.iter().map(|i| i.data.len()).sum();
    if total == 0 {
        bail!("nothing to benchmark: the inputs are empty");
    }
    let bar = indicatif::ProgressBar::new(cfg.codecs.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]").expect("static template"),
    );
    let rows = bench::run(&inputs, &cfg, &|e| match e {
        Event::Start { codec, .. } => bar.set_message(codec.to_string()),
        Event::Done { .. } => bar.inc(1),
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json(&inputs, &cfg, &rows))?);
    } else {
        print!("{}", table(&inputs, &cfg, &rows));
    }
    if let Some(png) = &args.plot {
        plot(png, &cfg, &rows).with_context(|| format!("cannot draw {}", png.display()))?;
    }
    Ok(())
}

pub fn table(inputs: &[Input], cfg: &BenchConfig, rows: &[Row]) -> String {
    let total: usize = inputs.iter().map(|i| i.data.len()).sum();
    let mut s = format!(
        "{} input(s), {:.1} MB, {} KiB blocks, {} thread(s)\n",
        inputs.len(),
        total as f64 / 1e6,
        cfg.block_size / 1024,
        cfg.threads
    );
    s += &format!(
        "{:<14} {:>7} {:>13} {:>15} {:>14}\n",
        "codec", "ratio", "compress MB/s", "decompress MB/s", "workspace KiB"
    );
    for r in rows {
        s += &format!(
            "{:<14} {:>7.3} {:>13.1} {:>15.1} {:>14}\n",
            r.codec.to_string(),
            r.ratio(),
            r.compress_mb_s(),
            r.decompress_mb_s(),
            r.workspace_bytes / 1024
        );
    }
    s
}

fn json(inputs: &[Input], cfg: &BenchConfig, rows: &[Row]) -> serde_json::Value {
    serde_json::json!({
        "block_size": cfg.block_size,
        "threads": cfg.threads,
        "inputs": inputs.iter().map(|i| serde_json::json!({"name": i.name, "bytes": i.data.len()})).collect::<Vec<_>>(),
        "rows": rows.iter().map(|r| serde_json::json!({
            "codec": r.codec.to_string(),
            "ratio": r.ratio(),
            "compress_mb_s": r.compress_mb_s(),
            "decompress_mb_s": r.decompress_mb_s(),
            "workspace_kib": r.workspace_bytes / 1024,
            "input_bytes": r.input_bytes,
            "compressed_bytes": r.compressed_bytes,
            "blocks": r.blocks,
        })).collect::<Vec<_>>(),
    })
}

/// Ratio (y) against compression speed (x, log scale), one labelled point per codec.
pub fn plot(path: &Path, cfg: &BenchConfig, rows: &[Row]) -> Result<()> {
    use plotters::prelude::*;
    let speeds: Vec<f64> = rows.iter().map(|r| r.compress_mb_s().max(0.1)).collect();
    let ratios: Vec<f64> = rows.iter().map(Row::ratio).collect();
    let (xmin, xmax) = speeds.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let (ymin, ymax) = ratios.iter().fold((f64::MAX, f64::MIN), |(a, b), &y| (a.min(y), b.max(y)));
    let root = BitMapBackend::new(path, (1000, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let caption = format!(
        "squeezefs bench: ratio vs compression speed ({} KiB blocks, {} thread(s))",
        cfg.block_size / 1024,
        cfg.threads
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin / 1.5..xmax * 1.5).log_scale(), (ymin * 0.95).min(1.0)..ymax * 1.05)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("compression MB/s (log scale)")
        .y_desc("ratio")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .draw_series(rows.iter().zip(speeds.iter().zip(&ratios)).map(|(r, (&x, &y))| {
            // one colour per algorithm
            let colour = Palette99::pick(r.codec.alg.id() as usize).to_rgba();
            EmptyElement::at((x, y))
                + Circle::new((0, 0), 5, colour.filled())
                + Text::new(r.codec.to_string(), (7, -14), ("sans-serif", 15))
        }))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn args(list: &[&str]) -> BenchArgs {
        Wrap::try_parse_from(std::iter::once("bench").chain(list.iter().copied())).unwrap().args
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("128K").unwrap(), 128 << 10);
        assert_eq!(parse_size("128KiB").unwrap(), 128 << 10);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        for bad in ["", "K", "12Q", "1.5M", "-4", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_flags_get_clear_errors() {
        let msg =
            |a: &[&str]| config(&args(a)).unwrap_err().to_string() + &format!("{:?}", config(&args(a)).unwrap_err());
        assert!(msg(&["--block", "12Q"]).contains("suffix"));
        assert!(msg(&["--block", "0"]).contains("between"));
        assert!(msg(&["--codecs", "zstd:1..99"]).contains("--codecs"));
        assert!(msg(&["--codecs", "auto"]).contains("not a fixed codec"));
        assert!(msg(&["--threads", "0"]).contains("--threads"));
        assert!(msg(&["--plot", "x.jpg"]).contains("PNG"));
        let e = load_inputs(&[PathBuf::from("/nonexistent/file")]).unwrap_err();
        assert!(format!("{e:#}").contains("cannot read /nonexistent/file"), "{e:#}");
    }

    #[test]
    fn zip_members_become_inputs_and_the_plot_is_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let zpath = dir.path().join("two.zip");
        {
            let mut w = zip::ZipWriter::new(std::fs::File::create(&zpath).unwrap());
            let opts = zip::write::SimpleFileOptions::default();
            for (name, byte) in [("a.txt", b'a'), ("b.bin", b'b')] {
                w.start_file(name, opts).unwrap();
                std::io::Write::write_all(&mut w, &vec![byte; 50_000]).unwrap();
            }
            w.finish().unwrap();
        }
        let inputs = load_inputs(std::slice::from_ref(&zpath)).unwrap();
        assert_eq!(inputs.len(), 2);
        assert!(inputs[0].name.ends_with("two.zip:a.txt"));
        assert_eq!(inputs[1].data, vec![b'b'; 50_000]);
        let cfg = config(&args(&["--codecs", "lz4,zstd:1..2", "--time", "0"])).unwrap();
        let rows = bench::run(&inputs, &cfg, &|_| {}).unwrap();
        let text = table(&inputs, &cfg, &rows);
        assert!(text.contains("zstd:2") && text.contains("workspace KiB"), "{text}");
        let png = dir.path().join("p.png");
        plot(&png, &cfg, &rows).unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    }
}
