//! The auto controller driven through a simulated pipeline (tests/sim): at every device speed,
//! core count and kind of data, auto must be within 5% of the best fixed level's throughput
//! with a ratio at most 2% below that level's, and within 5% of `none`'s throughput.

mod sim;

use sim::{run, table, Data, Outcome, Policy, Setup};
use squeezefs_codec::{Algorithm, Codec};
use squeezefs_control::{AutoController, Tunables};

const DEVICES: [f64; 6] = [25.0, 50.0, 100.0, 200.0, 400.0, 1100.0];
const DATA: [Data; 3] = [Data::Medium, Data::Incompressible, Data::High];

fn auto_default() -> AutoController {
    AutoController::new(squeezefs_codec::AUTO_DEFAULT_MIN, squeezefs_codec::AUTO_DEFAULT_MAX, Tunables::default())
}

fn fixed(s: &Setup, c: Codec) -> Outcome {
    run(s, &mut Policy::Fixed(c), &|_| s.data)
}

struct Cell {
    setup: Setup,
    auto: Outcome,
    best: (Codec, Outcome),
    none: Outcome,
}

fn cell(s: Setup) -> Cell {
    let mut levels: Vec<Codec> = table(s.data).into_iter().map(|r| r.0).collect();
    levels.retain(|c| !(c.alg == Algorithm::Zstd && c.level > 15));
    let none = fixed(&s, Codec::NONE);
    let mut best = (Codec::NONE, none.clone());
    for c in levels {
        let o = fixed(&s, c);
        if o.mb_s() > best.1.mb_s() {
            best = (c, o);
        }
    }
    let auto = run(&s, &mut Policy::Auto(Box::new(auto_default())), &|_| s.data);
    Cell { setup: s, auto, best, none }
}

fn describe(c: &Cell) -> String {
    let mut levels: Vec<(String, usize)> = Vec::new();
    for r in &c.auto.recs {
        let name = r.codec.to_string();
        match levels.iter_mut().find(|l| l.0 == name) {
            Some(l) => l.1 += 1,
            None => levels.push((name, 1)),
        }
    }
    levels.sort_by_key(|l| std::cmp::Reverse(l.1));
    let top: Vec<String> = levels
        .iter()
        .take(3)
        .map(|(n, k)| format!("{n} {:.0}%", 100.0 * *k as f64 / c.auto.recs.len() as f64))
        .collect();
    format!(
        "{:>14} {:>6.0} MB/s {} core(s): auto {:>7.1} MB/s {:>5.2} | best {:<12} {:>7.1} MB/s {:>5.2} | none {:>7.1} | {}",
        c.setup.data.name(),
        c.setup.device_mb_s,
        c.setup.cores,
        c.auto.mb_s(),
        c.auto.ratio(),
        c.best.0.to_string(),
        c.best.1.mb_s(),
        c.best.1.ratio(),
        c.none.mb_s(),
        top.join(", ")
    )
}

fn misses(c: &Cell) -> Vec<String> {
    let mut m = Vec::new();
    if c.auto.mb_s() < 0.95 * c.best.1.mb_s() {
        m.push(format!("throughput {:.1} < 0.95 × best {:.1}", c.auto.mb_s(), c.best.1.mb_s()));
    }
    if c.auto.mb_s() < 0.95 * c.none.mb_s() {
        m.push(format!("throughput {:.1} < 0.95 × none {:.1}", c.auto.mb_s(), c.none.mb_s()));
    }
    if c.auto.ratio() < 0.98 * c.best.1.ratio() {
        m.push(format!("ratio {:.3} < 0.98 × best's {:.3}", c.auto.ratio(), c.best.1.ratio()));
    }
    m
}

#[test]
fn auto_meets_the_targets_in_every_cell() {
    let mut failed = Vec::new();
    for data in DATA {
        for cores in [1.0, 2.0] {
            for dev in DEVICES {
                let c = cell(Setup::new(dev, cores, data));
                let line = describe(&c);
                println!("{line}");
                for m in misses(&c) {
                    failed.push(format!("{line}\n    MISS: {m}"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{} cell(s) missed:\n{}", failed.len(), failed.join("\n"));
}

/// Design aid: `SIM_CELL=medium,400,2 cargo test -p squeezefs-control --test auto_sim show_cell -- --nocapture`
/// prints one cell's records over time.
#[test]
fn show_cell() {
    let Ok(spec) = std::env::var("SIM_CELL") else { return };
    let f: Vec<&str> = spec.split(',').collect();
    let data = match f[0] {
        "medium" => Data::Medium,
        "high" => Data::High,
        _ => Data::Incompressible,
    };
    let s = Setup::new(f[1].parse().unwrap(), f[2].parse().unwrap(), data);
    let c = cell(s);
    println!("{}", describe(&c));
    let mut pol = Policy::Auto(Box::new(auto_default()));
    run(&s, &mut pol, &|_| s.data);
    if let Policy::Auto(a) = &mut pol {
        for (codec, p, m) in a.ladder() {
            println!(
                "  rung {:<14} {:7.3} ns/B ratio {:6.3} {}",
                codec.to_string(),
                p.cost,
                1.0 / p.stored,
                if m { "measured" } else { "" }
            );
        }
        println!("  gain {:.3}", a.gain());
    }
    let every: usize = std::env::var("SIM_EVERY").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    for r in c.auto.recs.iter().step_by(every) {
        println!(
            "{:8.4} {:<14} {:<8} ratio {:5.2} qd {:>8} queued {:>10} gain {:.3}",
            r.t,
            r.codec.to_string(),
            r.reason.name(),
            r.input as f64 / r.stored as f64,
            r.queue_delay.map_or("-".into(), |q| format!("{:.2}ms", q * 1e3)),
            r.queued,
            r.gain
        );
    }
}
