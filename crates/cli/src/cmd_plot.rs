//! `squeezefs plot TRACE -o FILE.png`: the thesis-style figures of an auto/QoS trace (the
//! `trace=FILE` mount option), four panels in one PNG: queue size over time, compression time
//! against the expected queue delay, level over time, throughput over time (per QoS tree).

use anyhow::{bail, Context, Result};
use clap::Args;
use plotters::prelude::*;
use squeezefs_codec::nominal::nominal;
use squeezefs_codec::Codec;
use squeezefs_control::{read_trace, Reason, Trace, TraceRow};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// Trace file written by the mount option trace=FILE
    pub trace: PathBuf,
    /// The PNG file to draw
    #[arg(short = 'o', long = "output", value_name = "FILE.png")]
    pub output: PathBuf,
    /// Image size in pixels, WIDTHxHEIGHT
    #[arg(long, default_value = "1600x1200")]
    pub size: String,
}

/// Most points one series draws (longer traces are thinned evenly).
const MAX_POINTS: usize = 6000;
/// Bins of the throughput panel.
const THROUGHPUT_BINS: usize = 150;

/// `1600x1200` → (1600, 1200); each side 200..=10000.
pub fn parse_size(text: &str) -> Result<(u32, u32)> {
    let accepted = "accepted: WIDTHxHEIGHT in pixels, each 200 to 10000, e.g. 1600x1200";
    let (w, h) = text.split_once(['x', 'X']).with_context(|| format!("--size {text:?}: {accepted}"))?;
    let side = |s: &str| s.trim().parse::<u32>().ok().filter(|v| (200..=10000).contains(v));
    match (side(w), side(h)) {
        (Some(w), Some(h)) => Ok((w, h)),
        _ => bail!("--size {text:?}: {accepted}"),
    }
}

pub fn run(args: PlotArgs) -> Result<()> {
    if args.output.extension().and_then(|e| e.to_str()).map(|e| e.eq_ignore_ascii_case("png")) != Some(true) {
        bail!("-o {}: the plot is a PNG file, name it FILE.png", args.output.display());
    }
    let size = parse_size(&args.size)?;
    let file = std::fs::File::open(&args.trace).with_context(|| format!("cannot read {}", args.trace.display()))?;
    let trace = read_trace(std::io::BufReader::new(file)).with_context(|| format!("{}", args.trace.display()))?;
    if trace.rows.is_empty() {
        bail!("{} holds no records: nothing to plot", args.trace.display());
    }
    let title = format!(
        "{} — {} records, {:.1} s",
        args.trace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        trace.rows.len(),
        span(&trace.rows).1
    );
    draw(&trace, &title, &args.output, size).with_context(|| format!("cannot draw {}", args.output.display()))
}

/// First and last `time_s`.
fn span(rows: &[TraceRow]) -> (f64, f64) {
    rows.iter().fold((f64::MAX, f64::MIN), |(a, b), r| (a.min(r.time_s), b.max(r.time_s)))
}

/// Every k-th element so that at most `MAX_POINTS` remain.
fn thin<T: Copy>(v: &[T]) -> impl Iterator<Item = T> + '_ {
    let step = v.len().div_ceil(MAX_POINTS).max(1);
    v.iter().step_by(step).copied()
}

/// The value below which `q` of `v` lie (v need not be sorted); 0 for an empty slice.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * q).round() as usize]
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Series colours, dark enough on white.
const COLOURS: [RGBColor; 6] = [
    RGBColor(30, 100, 200),
    RGBColor(40, 150, 70),
    RGBColor(150, 60, 170),
    RGBColor(230, 120, 0),
    RGBColor(0, 140, 140),
    RGBColor(160, 40, 60),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

fn reason_style(r: Reason) -> (RGBColor, &'static str) {
    match r {
        Reason::Model => (RGBColor(30, 100, 200), "model"),
        Reason::Guard => (RGBColor(220, 50, 40), "guard (queue too short)"),
        Reason::Explore => (RGBColor(240, 160, 0), "explore"),
        Reason::Probe => (RGBColor(150, 60, 170), "probe"),
        Reason::Hold => (RGBColor(120, 120, 120), "hold (nothing measured)"),
        Reason::Fixed => (RGBColor(40, 150, 70), "fixed level"),
        Reason::Qos => (RGBColor(0, 140, 140), "qos plan"),
        Reason::Incompressible => (RGBColor(90, 60, 30), "raw (heuristic: incompressible)"),
    }
}

fn draw(trace: &Trace, title: &str, path: &Path, size: (u32, u32)) -> Result<()> {
    let mut rows: Vec<&TraceRow> = trace.rows.iter().collect();
    rows.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
    let (t0, t1) = span(&trace.rows);
    let t1 = if t1 > t0 { t1 } else { t0 + 1e-3 };
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 24)).map_err(err)?;
    let panels = root.split_evenly((2, 2));
    let x = t0..t1;

    // 1. queue size per device
    {
        let ymax = rows.iter().flat_map(|r| r.queued.iter()).copied().max().unwrap_or(0) as f64 / 1e6;
        let mut c = ChartBuilder::on(&panels[0])
            .caption("device queue", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(x.clone(), 0.0..(ymax * 1.1).max(0.1))
            .map_err(err)?;
        c.configure_mesh().x_desc("time (s)").y_desc("queued (MB)").draw().map_err(err)?;
        for d in 0..trace.devices {
            let pts: Vec<(f64, f64)> = rows.iter().map(|r| (r.time_s, r.queued[d] as f64 / 1e6)).collect();
            let colour = colour(d);
            // width 1: plotters joins wider polylines with miters, and a zigzag series then
            // grows spikes far past its values
            c.draw_series(LineSeries::new(thin(&pts), colour.stroke_width(1)))
                .map_err(err)?
                .label(format!("device {d}"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
        }
        c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    }

    // 2. compression time against the expected queue delay (thesis fig. 6.1, bottom)
    {
        let comp: Vec<(f64, f64)> =
            rows.iter().filter(|r| r.cpu_ns > 0).map(|r| (r.time_s, r.cpu_ns as f64 / 1e6)).collect();
        let delay: Vec<(f64, f64)> =
            rows.iter().filter_map(|r| r.queue_delay_secs.map(|q| (r.time_s, q * 1e3))).collect();
        let all: Vec<f64> = comp.iter().chain(&delay).map(|p| p.1).collect();
        let ymax = (quantile(&all, 0.995) * 1.15).max(0.01);
        let mut c = ChartBuilder::on(&panels[1])
            .caption("compression time vs expected queue delay", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(x.clone(), 0.0..ymax)
            .map_err(err)?;
        c.configure_mesh().x_desc("time (s)").y_desc("ms").draw().map_err(err)?;
        let blue = RGBColor(30, 100, 200);
        c.draw_series(LineSeries::new(thin(&delay).map(|(t, v)| (t, v.min(ymax))), blue.stroke_width(1)))
            .map_err(err)?
            .label("expected queue delay")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], blue.stroke_width(2)));
        let red = COLOURS[5];
        c.draw_series(thin(&comp).map(|(t, v)| Circle::new((t, v.min(ymax)), 2, red.filled())))
            .map_err(err)?
            .label("compression time (CPU) per record")
            .legend(move |(x, y)| Circle::new((x + 8, y), 3, red.filled()));
        c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    }

    // 3. level over time, by why it was chosen (QoS levels by tree)
    {
        let mut levels: Vec<Codec> = Vec::new();
        for r in &rows {
            if !levels.contains(&r.codec) {
                levels.push(r.codec);
            }
        }
        levels.sort_by(|a, b| nominal(*b).compress_mb_s.total_cmp(&nominal(*a).compress_mb_s));
        let names: Vec<String> = levels.iter().map(|c| c.to_string()).collect();
        let n = levels.len();
        let mut c = ChartBuilder::on(&panels[2])
            .caption("level", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(90)
            .build_cartesian_2d(x.clone(), -0.5..(n as f64 - 0.5))
            .map_err(err)?;
        let label = |y: &f64| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                names[i as usize].clone()
            } else {
                String::new()
            }
        };
        c.configure_mesh()
            .x_desc("time (s)")
            .y_labels(n.max(2) * 2 - 1)
            .y_label_formatter(&label)
            .disable_y_mesh()
            .draw()
            .map_err(err)?;
        for reason in [
            Reason::Fixed,
            Reason::Incompressible,
            Reason::Hold,
            Reason::Model,
            Reason::Guard,
            Reason::Probe,
            Reason::Explore,
        ] {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.reason == reason)
                .map(|r| (r.time_s, levels.iter().position(|c| *c == r.codec).unwrap_or(0) as f64))
                .collect();
            if pts.is_empty() {
                continue;
            }
            let (colour, name) = reason_style(reason);
            c.draw_series(thin(&pts).map(|p| Circle::new(p, 2, colour.filled())))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 8, y), 3, colour.filled()));
        }
        // levels a QoS plan chose: one colour per tree
        let mut trees: Vec<u64> = rows.iter().filter(|r| r.reason == Reason::Qos).map(|r| r.tree).collect();
        trees.sort_unstable();
        trees.dedup();
        for (i, tree) in trees.iter().enumerate() {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.reason == Reason::Qos && r.tree == *tree)
                .map(|r| (r.time_s, levels.iter().position(|c| *c == r.codec).unwrap_or(0) as f64))
                .collect();
            let colour = colour(i);
            c.draw_series(thin(&pts).map(|p| Circle::new(p, 2, colour.filled())))
                .map_err(err)?
                .label(format!("{}, tree {tree}", reason_style(Reason::Qos).1))
                .legend(move |(x, y)| Circle::new((x + 8, y), 3, colour.filled()));
        }
        c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    }

    // 4. throughput over time: input per QoS tree, and stored bytes
    {
        let bins = THROUGHPUT_BINS;
        let width = (t1 - t0) / bins as f64;
        let mut trees: Vec<u64> = rows.iter().map(|r| r.tree).collect();
        trees.sort_unstable();
        trees.dedup();
        let bin = |t: f64| (((t - t0) / width) as usize).min(bins - 1);
        let mut input = vec![vec![0.0f64; bins]; trees.len()];
        let mut stored = vec![0.0f64; bins];
        for r in &rows {
            let b = bin(r.time_s);
            input[trees.binary_search(&r.tree).expect("collected above")][b] += r.input_bytes as f64;
            stored[b] += r.stored_bytes as f64;
        }
        let rate = |v: &[f64]| -> Vec<(f64, f64)> {
            v.iter().enumerate().map(|(i, b)| (t0 + (i as f64 + 0.5) * width, b / width / 1e6)).collect()
        };
        let total: Vec<f64> = (0..bins).map(|i| input.iter().map(|t| t[i]).sum()).collect();
        let ymax = rate(&total).iter().map(|p| p.1).fold(0.0, f64::max).max(0.01) * 1.1;
        let mut c = ChartBuilder::on(&panels[3])
            .caption("throughput", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(x, 0.0..ymax)
            .map_err(err)?;
        c.configure_mesh().x_desc("time (s)").y_desc("MB/s").draw().map_err(err)?;
        for (i, t) in trees.iter().enumerate() {
            let colour = colour(i);
            let name = if *t == 0 { "written (no QoS tree)".to_string() } else { format!("written, QoS tree {t}") };
            c.draw_series(LineSeries::new(rate(&input[i]), colour.stroke_width(1)))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
        }
        let grey = RGBColor(110, 110, 110);
        c.draw_series(LineSeries::new(rate(&stored), grey.stroke_width(1)))
            .map_err(err)?
            .label("stored on the devices")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], grey.stroke_width(1)));
        c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(parse_size("1600x1200").unwrap(), (1600, 1200));
        assert_eq!(parse_size("800X600").unwrap(), (800, 600));
        for bad in ["", "1600", "x", "100x100", "20000x600", "axb", "1600x-3"] {
            let msg = format!("{:#}", parse_size(bad).unwrap_err());
            assert!(msg.contains("WIDTHxHEIGHT"), "{bad:?}: {msg}");
        }
    }

    #[test]
    fn quantile_and_thinning() {
        assert_eq!(quantile(&[], 0.5), 0.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 1.0), 3.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.0), 1.0);
        let v: Vec<u32> = (0..20_000).collect();
        let t: Vec<u32> = thin(&v).collect();
        assert!(t.len() <= MAX_POINTS && t.len() > MAX_POINTS / 2);
        assert_eq!(thin(&v[..10]).count(), 10);
    }
}
