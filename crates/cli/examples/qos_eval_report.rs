//! Tables and figures of `bench/qos-eval.sh`: reads its results (JSON lines, one per run)
//! and prints, per part, the achieved throughput of every QoS tree against its target over
//! 10 s windows, the ratio against the strongest fixed level that meets the same target, and
//! the thesis comparison; with `--png-dir` it draws `qos-eval-a.png` (fig. 6.10),
//! `qos-eval-b.png` (fig. 6.11) and `qos-eval-c.png`.
//!
//! ```text
//! cargo run --release --example qos_eval_report -- RESULTS.jsonl [--png-dir DIR]
//! ```
//!
//! One input line (written by the script; unknown keys are ignored):
//! `{"name":"b2-w8","part":"b","settings":["p=qos:20M","p/c=qos:5M","p/s"],"seconds":30.1,
//!   "dirs":{"p/c":{"writers":8,"bytes":…,"per_second":[…]},…},
//!   "trees":[{"path":"p","target_bps":2e7,"ratio":3.1,"levels":[{"codec":"zstd:9",
//!   "input_bytes":…,"stored_bytes":…}],…}],"fixed":{"a":2.1},"load":["9.1 …","…"]}`
//!
//! Verdicts:
//! * a tree *meets* its target when every full 10 s window of the bytes written into its
//!   subtree is within ±[`BAND`] of the target; *over* when a window exceeds target × (1 +
//!   BAND) (a limit broken); *under* otherwise. A tree nested in another may borrow its
//!   parent's unused rate (HTB): above its target it has *met (borrowed)*, and only the
//!   top-level tree's ceiling can be broken;
//! * a target is *feasible* when it is at most the throughput of the part-a run with the
//!   highest target (what the machine does) — ±5% is promised for feasible targets only;
//! * the ratio to beat at a target: the highest ratio among the reference fixed levels
//!   (part a-ref, written unpaced) whose throughput is at least the target.
use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Allowed relative deviation of a 10 s window from the target.
const BAND: f64 = 0.05;
/// Window length, seconds.
const WINDOW: usize = 10;

#[derive(Debug, Clone)]
struct Dir {
    path: String,
    writers: u64,
    bytes: u64,
    per_second: Vec<u64>,
}

#[derive(Debug, Clone)]
struct Tree {
    path: String,
    target: f64,
    ratio: f64,
    /// (codec, input bytes), most used first
    levels: Vec<(String, u64)>,
}

#[derive(Debug, Clone)]
struct Run {
    name: String,
    part: String,
    settings: Vec<String>,
    seconds: f64,
    dirs: Vec<Dir>,
    trees: Vec<Tree>,
    /// directory → ratio, for directories with a fixed compression
    fixed: Vec<(String, f64)>,
    load: String,
}

fn parse_run(line: &str) -> Result<Run> {
    let v: Value = serde_json::from_str(line).context("not a JSON object")?;
    let s =
        |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string).with_context(|| format!("no {k:?}"));
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).with_context(|| format!("no number {k:?}"));
    let seconds = n(&v, "seconds")?;
    if seconds <= 0.0 {
        bail!("seconds must be positive, not {seconds}");
    }
    let mut dirs: Vec<Dir> = v
        .get("dirs")
        .and_then(Value::as_object)
        .context("no \"dirs\"")?
        .iter()
        .map(|(k, d)| {
            Ok(Dir {
                path: k.trim_end_matches('/').to_string(),
                writers: d.get("writers").and_then(Value::as_u64).unwrap_or(1),
                bytes: d.get("bytes").and_then(Value::as_u64).context("no bytes")?,
                per_second: d
                    .get("per_second")
                    .and_then(Value::as_array)
                    .context("no per_second")?
                    .iter()
                    .map(|x| x.as_u64().unwrap_or(0))
                    .collect(),
            })
        })
        .collect::<Result<_>>()?;
    dirs.sort_by(|a, b| a.path.cmp(&b.path));
    let trees = v
        .get("trees")
        .and_then(Value::as_array)
        .context("no \"trees\"")?
        .iter()
        .map(|t| {
            let mut levels: Vec<(String, u64)> = t
                .get("levels")
                .and_then(Value::as_array)
                .map(|l| {
                    l.iter()
                        .filter_map(|x| Some((x.get("codec")?.as_str()?.to_string(), x.get("input_bytes")?.as_u64()?)))
                        .collect()
                })
                .unwrap_or_default();
            levels.sort_by_key(|l| std::cmp::Reverse(l.1));
            Ok(Tree { path: s(t, "path")?, target: n(t, "target_bps")?, ratio: n(t, "ratio")?, levels })
        })
        .collect::<Result<_>>()?;
    let fixed = v
        .get("fixed")
        .and_then(Value::as_object)
        .map(|o| o.iter().filter_map(|(k, r)| Some((k.clone(), r.as_f64()?))).collect())
        .unwrap_or_default();
    let settings = v
        .get("settings")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let load = v.get("load").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str).unwrap_or("?");
    Ok(Run {
        name: s(&v, "name")?,
        part: s(&v, "part")?,
        settings,
        seconds,
        dirs,
        trees,
        fixed,
        load: load.to_string(),
    })
}

/// `dir` lies in the subtree of `tree` ("." is the mount's root).
fn within(dir: &str, tree: &str) -> bool {
    tree == "." || dir == tree || dir.starts_with(&format!("{tree}/"))
}

impl Run {
    /// Bytes per second of the directories under `tree` in each full 10 s window.
    fn windows(&self, tree: &str) -> Vec<f64> {
        let full = (self.seconds.floor() as usize) / WINDOW;
        (0..full)
            .map(|w| {
                let b: u64 = self
                    .dirs
                    .iter()
                    .filter(|d| within(&d.path, tree))
                    .map(|d| d.per_second.iter().skip(w * WINDOW).take(WINDOW).sum::<u64>())
                    .sum();
                b as f64 / WINDOW as f64
            })
            .collect()
    }

    /// Mean bytes per second of the directories under `tree` over the run.
    fn mean(&self, tree: &str) -> f64 {
        self.dirs.iter().filter(|d| within(&d.path, tree)).map(|d| d.bytes).sum::<u64>() as f64 / self.seconds
    }

    fn writers(&self) -> u64 {
        self.dirs.iter().map(|d| d.writers).max().unwrap_or(1)
    }

    /// The spec a fixed directory was set to (`f=compression:zstd:9` → zstd:9).
    fn spec_of(&self, dir: &str) -> Option<String> {
        self.settings.iter().find_map(|s| s.strip_prefix(&format!("{dir}=compression:")).map(str::to_string))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Met,
    Over,
    Under,
}

fn verdict(windows: &[f64], target: f64) -> Verdict {
    if windows.iter().any(|w| *w > target * (1.0 + BAND)) {
        Verdict::Over
    } else if !windows.is_empty() && windows.iter().all(|w| *w >= target * (1.0 - BAND)) {
        Verdict::Met
    } else {
        Verdict::Under
    }
}

fn mbs(b: f64) -> String {
    format!("{:.2}", b / 1e6)
}

fn windows_text(w: &[f64]) -> String {
    w.iter().map(|x| mbs(*x)).collect::<Vec<_>>().join(" / ")
}

fn levels_text(t: &Tree) -> String {
    let total: u64 = t.levels.iter().map(|l| l.1).sum();
    if total == 0 {
        return "-".into();
    }
    t.levels
        .iter()
        .take(3)
        .map(|(c, i)| format!("{c} {:.0}%", *i as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Part a: one row per target.
struct RowA {
    target: f64,
    mean: f64,
    windows: Vec<f64>,
    verdict: Verdict,
    feasible: bool,
    ratio: f64,
    levels: String,
    /// (spec, ratio) of the strongest fixed level meeting the target
    beat: Option<(String, f64)>,
    load: String,
}

fn part_a(runs: &[Run]) -> (Vec<RowA>, Vec<(String, f64, f64)>) {
    let mut refs: Vec<(String, f64, f64)> = runs
        .iter()
        .filter(|r| r.part == "a-ref")
        .filter_map(|r| {
            let (dir, ratio) = r.fixed.first()?;
            Some((r.spec_of(dir)?, r.mean(dir), *ratio))
        })
        .collect();
    refs.sort_by(|a, b| b.1.total_cmp(&a.1));
    let a: Vec<&Run> = runs.iter().filter(|r| r.part == "a").collect();
    let capacity = a
        .iter()
        .filter_map(|r| r.trees.iter().find(|t| t.path == "t").map(|t| (t.target, r.mean("t"))))
        .max_by(|x, y| x.0.total_cmp(&y.0))
        .map_or(0.0, |x| x.1);
    let mut rows: Vec<RowA> = a
        .iter()
        .filter_map(|r| {
            let t = r.trees.iter().find(|t| t.path == "t")?;
            let windows = r.windows("t");
            let beat =
                refs.iter().filter(|f| f.1 >= t.target).max_by(|x, y| x.2.total_cmp(&y.2)).map(|f| (f.0.clone(), f.2));
            Some(RowA {
                target: t.target,
                mean: r.mean("t"),
                verdict: verdict(&windows, t.target),
                windows,
                feasible: t.target <= capacity,
                ratio: t.ratio,
                levels: levels_text(t),
                beat,
                load: r.load.clone(),
            })
        })
        .collect();
    rows.sort_by(|x, y| x.target.total_cmp(&y.target));
    (rows, refs)
}

fn print_a(rows: &[RowA], refs: &[(String, f64, f64)]) {
    println!("## a. one tree per target (1 writer)\n");
    println!("| target MB/s | achieved | 10 s windows | ±5% | ratio | strongest fixed level meeting it | its ratio | ratio ≥ it | levels | load |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let v = match (r.verdict, r.feasible) {
            (Verdict::Met, _) => "met",
            (Verdict::Over, _) => "**over**",
            (Verdict::Under, true) => "**under**",
            (Verdict::Under, false) => "above the machine",
        };
        let (beat, beat_ratio, ok) = match &r.beat {
            Some((s, q)) => (s.clone(), format!("{q:.3}"), if r.ratio >= *q { "yes" } else { "**no**" }),
            None => ("none meets it".into(), "-".into(), "-"),
        };
        println!(
            "| {} | {} | {} | {v} | {:.3} | {beat} | {beat_ratio} | {ok} | {} | {} |",
            mbs(r.target),
            mbs(r.mean),
            windows_text(&r.windows),
            r.ratio,
            r.levels,
            r.load
        );
    }
    if !refs.is_empty() {
        println!("\nReference fixed levels, written unpaced (1 writer, the same data):\n");
        println!("| level | MB/s | ratio |");
        println!("|---|---|---|");
        for (s, t, q) in refs {
            println!("| {s} | {} | {q:.3} |", mbs(*t));
        }
    }
    println!();
}

/// Part b: one row per (run, tree).
fn print_b(runs: &[Run]) -> Vec<(String, String, f64, f64, Verdict)> {
    let mut out = Vec::new();
    println!("## b. concurrent trees\n");
    println!("| run | writers/dir | tree | target MB/s | achieved | 10 s windows | ±5% | ratio | levels | load |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in runs.iter().filter(|r| r.part == "b") {
        for t in &r.trees {
            // a tree's subtree holds its child trees too; a child tree may borrow its
            // parent's unused rate (HTB), so only a top-level tree can break a limit
            let w = r.windows(&t.path);
            let nested = r.trees.iter().any(|p| p.path != t.path && within(&t.path, &p.path));
            let v = match verdict(&w, t.target) {
                Verdict::Over if nested && w.iter().all(|x| *x >= t.target * (1.0 - BAND)) => Verdict::Met,
                v => v,
            };
            let vt = match (v, nested && w.iter().any(|x| *x > t.target * (1.0 + BAND))) {
                (Verdict::Met, true) => "met (borrowed)",
                (Verdict::Met, false) => "met",
                (Verdict::Over, _) => "**over**",
                (Verdict::Under, _) => "**under**",
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {vt} | {:.3} | {} | {} |",
                r.name,
                r.writers(),
                t.path,
                mbs(t.target),
                mbs(r.mean(&t.path)),
                windows_text(&w),
                t.ratio,
                levels_text(t),
                r.load
            );
            out.push((r.name.clone(), t.path.clone(), t.target, r.mean(&t.path), v));
        }
        // directories without a tree of their own: what they got of their tree's bucket
        for d in r.dirs.iter().filter(|d| !r.trees.iter().any(|t| t.path == d.path)) {
            println!(
                "| {} | {} | {} (no own qos) | - | {} | {} | - | - | - | |",
                r.name,
                d.writers,
                d.path,
                mbs(d.bytes as f64 / r.seconds),
                windows_text(&r.windows(&d.path))
            );
        }
    }
    println!();
    out
}

/// Part c, one run: its name, the average MB/s of its directories, the overall ratio, and
/// per directory (path, setting, bytes/s, ratio).
type RowC = (String, f64, f64, Vec<(String, String, f64, f64)>);

fn part_c(runs: &[Run]) -> Vec<RowC> {
    runs.iter()
        .filter(|r| r.part == "c")
        .map(|r| {
            let per: Vec<(String, String, f64, f64)> = r
                .dirs
                .iter()
                .map(|d| {
                    let (what, ratio) = match r.trees.iter().find(|t| t.path == d.path) {
                        Some(t) => (format!("qos {} MB/s", mbs(t.target)), t.ratio),
                        None => (
                            r.spec_of(&d.path).unwrap_or_else(|| "?".into()),
                            r.fixed.iter().find(|f| f.0 == d.path).map_or(1.0, |f| f.1),
                        ),
                    };
                    (d.path.clone(), what, d.bytes as f64 / r.seconds, ratio)
                })
                .collect();
            let avg = per.iter().map(|p| p.2).sum::<f64>() / per.len().max(1) as f64;
            let input: f64 = per.iter().map(|p| p.2).sum();
            let stored: f64 = per.iter().map(|p| p.2 / p.3.max(1e-9)).sum();
            (r.name.clone(), avg, if stored > 0.0 { input / stored } else { 1.0 }, per)
        })
        .collect()
}

fn print_c(rows: &[RowC]) {
    println!("## c. the thesis comparison: qos 10 + qos 50 against fixed lz4 + zlib:9\n");
    println!("| run | directory | setting | MB/s | ratio |");
    println!("|---|---|---|---|---|");
    for (name, avg, ratio, per) in rows {
        for (d, what, t, q) in per {
            println!("| {name} | {d} | {what} | {} | {q:.3} |", mbs(*t));
        }
        println!("| {name} | **both** | | **{} average** | **{ratio:.3}** |", mbs(*avg));
    }
    println!();
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("{e:?}")
}

/// Bars: for each group (label) the values of each series.
fn bars(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    labels: &[String],
    series: &[(&str, RGBColor, Vec<f64>)],
) -> Result<()> {
    let top = series.iter().flat_map(|s| s.2.iter()).copied().fold(0.0, f64::max).max(1e-9) * 1.15;
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)
        .map_err(err)?;
    let labels_c = labels.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.26 && i < labels_c.len() {
                labels_c[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    let k = series.len().max(1) as f64;
    for (j, (name, colour, vals)) in series.iter().enumerate() {
        let c = *colour;
        chart
            .draw_series(vals.iter().enumerate().map(|(i, v)| {
                let x0 = i as f64 + 0.1 + 0.8 * j as f64 / k;
                Rectangle::new([(x0, 0.0), (x0 + 0.8 / k, *v)], c.filled())
            }))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    Ok(())
}

const BLUE_: RGBColor = RGBColor(40, 90, 200);
const GREEN_: RGBColor = RGBColor(40, 150, 70);
const ORANGE_: RGBColor = RGBColor(230, 130, 30);
const GREY_: RGBColor = RGBColor(150, 150, 150);

fn draw_a(path: &Path, rows: &[RowA]) -> Result<()> {
    let root = BitMapBackend::new(path, (1600, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (l, r) = root.split_horizontally(800);
    let labels: Vec<String> = rows.iter().map(|r| format!("qos {}", r.target / 1e6)).collect();
    bars(
        &l,
        "a. throughput: target and achieved (MB/s)",
        "MB/s",
        &labels,
        &[
            ("target", GREY_, rows.iter().map(|r| r.target.min(r.mean * 2.0) / 1e6).collect()),
            ("achieved", BLUE_, rows.iter().map(|r| r.mean / 1e6).collect()),
        ],
    )?;
    bars(
        &r,
        "a. ratio: QoS tree and the strongest fixed level meeting the target",
        "ratio",
        &labels,
        &[
            ("qos tree", GREEN_, rows.iter().map(|r| r.ratio).collect()),
            ("fixed level", ORANGE_, rows.iter().map(|r| r.beat.as_ref().map_or(0.0, |b| b.1)).collect()),
        ],
    )?;
    root.present().map_err(err)?;
    Ok(())
}

fn draw_b(path: &Path, rows: &[(String, String, f64, f64, Verdict)]) -> Result<()> {
    let root = BitMapBackend::new(path, (1800, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let labels: Vec<String> = rows.iter().map(|r| format!("{} {}", r.0, r.1)).collect();
    bars(
        &root,
        "b. concurrent trees: target and achieved per tree (MB/s)",
        "MB/s",
        &labels,
        &[
            ("target", GREY_, rows.iter().map(|r| r.2 / 1e6).collect()),
            ("achieved", BLUE_, rows.iter().map(|r| r.3 / 1e6).collect()),
        ],
    )?;
    root.present().map_err(err)?;
    Ok(())
}

fn draw_c(path: &Path, rows: &[RowC]) -> Result<()> {
    let root = BitMapBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (l, r) = root.split_horizontally(600);
    let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    bars(
        &l,
        "c. average throughput (MB/s)",
        "MB/s",
        &labels,
        &[("average", BLUE_, rows.iter().map(|r| r.1 / 1e6).collect())],
    )?;
    bars(&r, "c. ratio", "ratio", &labels, &[("ratio", GREEN_, rows.iter().map(|r| r.2).collect())])?;
    root.present().map_err(err)?;
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut input = None;
    let mut png_dir: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--png-dir" => png_dir = Some(args.next().context("--png-dir needs a directory")?.into()),
            _ if input.is_none() => input = Some(PathBuf::from(a)),
            other => bail!("unexpected argument {other:?} (usage: qos_eval_report RESULTS.jsonl [--png-dir DIR])"),
        }
    }
    let input = input.context("usage: qos_eval_report RESULTS.jsonl [--png-dir DIR]")?;
    let text = std::fs::read_to_string(&input).with_context(|| format!("reading {}", input.display()))?;
    let runs: Vec<Run> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_run(l).with_context(|| format!("{} line {}", input.display(), i + 1)))
        .collect::<Result<_>>()?;
    let (a, refs) = part_a(&runs);
    if !a.is_empty() || !refs.is_empty() {
        print_a(&a, &refs);
    }
    let b = if runs.iter().any(|r| r.part == "b") { print_b(&runs) } else { Vec::new() };
    let c = part_c(&runs);
    if !c.is_empty() {
        print_c(&c);
    }
    if let Some(dir) = png_dir {
        if !a.is_empty() {
            draw_a(&dir.join("qos-eval-a.png"), &a)?;
        }
        if !b.is_empty() {
            draw_b(&dir.join("qos-eval-b.png"), &b)?;
        }
        if !c.is_empty() {
            draw_c(&dir.join("qos-eval-c.png"), &c)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(name: &str, part: &str, per_second: &[u64], target: f64) -> String {
        let bytes: u64 = per_second.iter().sum();
        serde_json::json!({
            "name": name, "part": part, "settings": ["t=qos:10M"], "seconds": per_second.len() as f64,
            "dirs": {"t": {"writers": 1, "bytes": bytes, "per_second": per_second}},
            "trees": [{"path": "t", "target_bps": target, "ratio": 3.0,
                       "levels": [{"codec": "zstd:9", "input_bytes": 10, "stored_bytes": 3}]}],
            "fixed": {}, "load": ["1.0 1.0 1.0", "1.0 1.0 1.0"],
        })
        .to_string()
    }

    #[test]
    fn windows_and_verdicts() {
        let on = parse_run(&line("a-qos10", "a", &[10_000_000; 20], 10e6)).unwrap();
        assert_eq!(on.windows("t"), vec![10e6, 10e6]);
        assert_eq!(verdict(&on.windows("t"), 10e6), Verdict::Met);
        let mut burst = vec![10_000_000u64; 20];
        burst[3] = 20_000_000;
        let over = parse_run(&line("x", "a", &burst, 10e6)).unwrap();
        assert_eq!(verdict(&over.windows("t"), 10e6), Verdict::Over);
        let under = parse_run(&line("x", "a", &[9_000_000; 20], 10e6)).unwrap();
        assert_eq!(verdict(&under.windows("t"), 10e6), Verdict::Under);
        // a subtree sums its directories; "." is the whole mount
        assert!(within("p/c", "p") && within("p", "p") && !within("pc", "p") && within("x", "."));
    }

    #[test]
    fn the_ratio_to_beat_is_the_strongest_fixed_level_fast_enough() {
        let fixed = |spec: &str, mbs: u64, ratio: f64| {
            serde_json::json!({
                "name": format!("a-ref-{spec}"), "part": "a-ref", "settings": [format!("f=compression:{spec}")],
                "seconds": 10.0, "dirs": {"f": {"writers": 1, "bytes": mbs * 10_000_000, "per_second": []}},
                "trees": [], "fixed": {"f": ratio}, "load": ["0 0 0"],
            })
            .to_string()
        };
        let runs: Vec<Run> = [
            line("a-qos10", "a", &[10_000_000; 20], 10e6),
            line("a-qos1000", "a", &[50_000_000; 20], 1000e6),
            fixed("lz4", 200, 2.0),
            fixed("zstd:9", 30, 3.5),
            fixed("zstd:19", 5, 4.0),
        ]
        .iter()
        .map(|l| parse_run(l).unwrap())
        .collect();
        let (rows, refs) = part_a(&runs);
        assert_eq!(refs.len(), 3);
        assert_eq!(rows[0].beat, Some(("zstd:9".to_string(), 3.5)), "zstd:19 is too slow for 10 MB/s");
        assert!(rows[0].feasible && !rows[1].feasible, "the machine did 50 MB/s");
    }
}
