//! The auto controller driven through a simulated pipeline (tests/sim). The model mode
//! (`Tunables::model`, which QoS reads) must be, at every device speed, core count and kind of
//! data, within 5% of the best fixed level's throughput with a ratio at most 2% below that
//! level's, and within 5% of `none`'s throughput. The default, queue-feedback mode is held to
//! the envelope it keeps where a run is long against its settling time.

mod sim;

use sim::{run, table, Data, Outcome, Policy, Setup};
use squeezefs_codec::{Algorithm, Codec};
use squeezefs_control::{AutoController, Tunables};

const DEVICES: [f64; 6] = [25.0, 50.0, 100.0, 200.0, 400.0, 1100.0];
const DATA: [Data; 3] = [Data::Medium, Data::Incompressible, Data::High];

/// The model-mode controller, with the daemon's `SQUEEZEFS_AUTO_TUNE` overrides if set (a
/// design aid: the same cells for a variant).
fn auto_model() -> AutoController {
    auto_with(Tunables::model())
}

/// The default (queue-feedback) controller, with the same overrides.
fn auto_default() -> AutoController {
    auto_with(Tunables::default())
}

/// The world the model's throughput model assumes: all pipeline CPU beyond the codec per
/// input byte. The default sim world (sim `Setup::new`) is the one measured on the real
/// pipeline, where nearly all of it is per stored byte; the model, kept for QoS, is tested
/// in its own.
fn model_world(s: Setup) -> Setup {
    Setup { overhead_ns: 1.0, store_ns: 0.0, ..s }
}

fn measured_world(s: Setup) -> Setup {
    s
}

fn auto_with(mut tun: Tunables) -> AutoController {
    if let Ok(items) = std::env::var("SQUEEZEFS_AUTO_TUNE") {
        tun.set(&items).expect("SQUEEZEFS_AUTO_TUNE");
    }
    AutoController::new(squeezefs_codec::AUTO_DEFAULT_MIN, squeezefs_codec::AUTO_DEFAULT_MAX, tun)
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

fn cell(s: Setup, auto: fn() -> AutoController) -> Cell {
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
    let auto = run(&s, &mut Policy::Auto(Box::new(auto())), &|_| s.data);
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

/// Every (data, cores, device) cell run with `auto`, each printed as it is done.
fn every_cell(auto: fn() -> AutoController, world: fn(Setup) -> Setup) -> Vec<(Cell, String)> {
    let mut cells = Vec::new();
    for data in DATA {
        for cores in [1.0, 2.0] {
            for dev in DEVICES {
                let c = cell(world(Setup::new(dev, cores, data)), auto);
                let line = describe(&c);
                println!("{line}");
                cells.push((c, line));
            }
        }
    }
    cells
}

#[test]
fn auto_meets_the_targets_in_every_cell() {
    let mut failed = Vec::new();
    for (c, line) in every_cell(auto_model, model_world) {
        for m in misses(&c) {
            failed.push(format!("{line}\n    MISS: {m}"));
        }
    }
    assert!(failed.is_empty(), "{} cell(s) missed:\n{}", failed.len(), failed.join("\n"));
}

/// The default, queue-feedback mode where a simulated run lasts many settling times (devices
/// up to 200 MB/s: at 400 MB/s and more a run of the simulation's size is over in a few
/// seconds and the start dominates): within 15% of the best fixed level's throughput, its
/// ratio within 5%, and never slower than `none`; raw on incompressible data at every speed.
#[test]
fn feedback_stays_near_the_best_level_where_runs_are_long() {
    let mut failed = Vec::new();
    for (c, line) in every_cell(auto_default, measured_world) {
        let (thr, best, none) = (c.auto.mb_s(), c.best.1.mb_s(), c.none.mb_s());
        let long = c.setup.device_mb_s <= 200.0;
        let miss = if c.setup.data == Data::Incompressible {
            thr < 0.99 * none || c.auto.ratio() < 0.999
        } else {
            long && (thr < 0.85 * best || thr < none || c.auto.ratio() < 0.95 * c.best.1.ratio())
        };
        if miss {
            failed.push(line);
        }
    }
    assert!(failed.is_empty(), "{} cell(s) outside the envelope:\n{}", failed.len(), failed.join("\n"));
}

/// Design aid (the default mode; `SQUEEZEFS_AUTO_TUNE=feedback=0` for the model's):
/// `SIM_CELL=medium,400,2 cargo test -p squeezefs-control --test auto_sim show_cell -- --nocapture`
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
    let c = cell(s, auto_default);
    println!("{}", describe(&c));
    if let Ok(path) = std::env::var("SIM_TRACE") {
        sim::write_trace(&c.auto, std::path::Path::new(&path)).unwrap();
    }
    let mut pol = Policy::Auto(Box::new(auto_model()));
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

/// Text, then random data, then highly compressible data in one stream: auto stores the
/// random third raw within a few records of the change and compresses the last third about as
/// well as a run on that data alone.
#[test]
fn auto_follows_data_that_changes_mid_stream() {
    follows_data_that_changes_mid_stream(auto_model, model_world);
}

#[test]
fn feedback_follows_data_that_changes_mid_stream() {
    follows_data_that_changes_mid_stream(auto_default, measured_world);
}

fn follows_data_that_changes_mid_stream(auto: fn() -> AutoController, world: fn(Setup) -> Setup) {
    let s = world(Setup::new(100.0, 2.0, Data::Medium));
    let third = s.total_bytes / 3;
    let phase = move |off: u64| match off / third {
        0 => Data::Medium,
        1 => Data::Incompressible,
        _ => Data::High,
    };
    let mut pol = Policy::Auto(Box::new(auto()));
    let o = run(&s, &mut pol, &phase);
    // records in input order: the i-th decided record covers input offset i × record
    let in_phase =
        |p: u64| o.recs.iter().enumerate().filter(move |(i, _)| *i as u64 * s.record / third == p).map(|(_, r)| r);
    let random: Vec<_> = in_phase(1).collect();
    let compressed_late = random.iter().skip(random.len() / 20).filter(|r| r.codec != Codec::NONE).count();
    assert!(
        compressed_late * 50 <= random.len(),
        "{compressed_late} of {} random records compressed after the first 5%",
        random.len()
    );
    let last: Vec<_> = in_phase(2).collect();
    let tail = &last[last.len() / 2..];
    let ratio = tail.iter().map(|r| r.input).sum::<u64>() as f64 / tail.iter().map(|r| r.stored).sum::<u64>() as f64;
    let alone = run(&Setup { data: Data::High, ..s }, &mut Policy::Auto(Box::new(auto())), &|_| Data::High);
    assert!(
        ratio >= 0.95 * alone.ratio(),
        "ratio {ratio:.2} after the change, {:.2} on that data alone",
        alone.ratio()
    );
}

/// The pipeline's meters are off: overhead reported 30% low, a quarter more cores than the
/// machine gives (or the other way round). The corrections absorb it: still within 10% of
/// the best fixed level and of none. (An overhead not measured at all, 0, makes storing raw
/// look free and is not absorbed on a fast device: the pipeline must feed OverheadMeter.)
#[test]
fn auto_absorbs_wrong_model_inputs() {
    let mut failed = Vec::new();
    for (data, cores, o, k) in [(Data::Medium, 1.0, 0.7, 1.25), (Data::High, 2.0, 1.3, 0.8)] {
        for dev in [50.0, 200.0, 400.0, 1100.0] {
            let mut s = model_world(Setup::new(dev, cores, data));
            s.overhead_reported = o;
            s.cores_reported = cores * k;
            let c = cell(s, auto_model);
            let line = describe(&c);
            println!("{line}");
            if c.auto.mb_s() < 0.9 * c.best.1.mb_s() || c.auto.mb_s() < 0.9 * c.none.mb_s() {
                failed.push(line);
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Data that switches kind every few MiB, as the Silesia corpus does (text, an office binary,
/// a database, XML, each 5–10 MB): every switch is a drift of the rungs' figures. Against the
/// best fixed level on the same stream auto must stay within 5% of its throughput and of its
/// ratio, and explorations under an eighth of the records (re-measuring every rung the
/// decision depends on after each switch made them a fifth to a third). The uniform cells'
/// 2% on ratio is not met here: a fixed level gains from the dirty buffer carrying a
/// CPU-bound stretch of one kind of data over a device-bound stretch of another, which a
/// per-record decision on the current data does not plan for.
#[test]
fn auto_keeps_up_with_data_that_switches_every_few_mib() {
    let mut failed = Vec::new();
    for cores in [1.0, 2.0] {
        for dev in [25.0, 100.0, 400.0] {
            let s = model_world(Setup::new(dev, cores, Data::Medium));
            let kinds = [Data::Medium, Data::High, Data::Medium, Data::High];
            let sizes = [9u64 << 20, 5 << 20, 7 << 20, 6 << 20];
            let period: u64 = sizes.iter().sum();
            let switching = move |off: u64| {
                let mut o = off % period;
                for (k, n) in kinds.iter().zip(sizes) {
                    if o < n {
                        return *k;
                    }
                    o -= n;
                }
                Data::Medium
            };
            let mut levels: Vec<Codec> = table(Data::Medium).into_iter().map(|r| r.0).collect();
            levels.retain(|c| !(c.alg == Algorithm::Zstd && c.level > 15));
            let mut best = (Codec::NONE, run(&s, &mut Policy::Fixed(Codec::NONE), &switching));
            for c in levels {
                let o = run(&s, &mut Policy::Fixed(c), &switching);
                if o.mb_s() > best.1.mb_s() {
                    best = (c, o);
                }
            }
            let auto = run(&s, &mut Policy::Auto(Box::new(auto_model())), &switching);
            let explored = auto.recs.iter().filter(|r| r.reason == squeezefs_control::Reason::Explore).count();
            let mut levels: Vec<(String, usize)> = Vec::new();
            for r in &auto.recs {
                let name = format!("{}/{}", r.codec, r.reason.name());
                match levels.iter_mut().find(|l| l.0 == name) {
                    Some(l) => l.1 += 1,
                    None => levels.push((name, 1)),
                }
            }
            levels.sort_by_key(|l| std::cmp::Reverse(l.1));
            if std::env::var("SIM_LEVELS").is_ok() {
                for (n, k) in levels.iter().take(12) {
                    println!("    {n} {:.1}%", 100.0 * *k as f64 / auto.recs.len() as f64);
                }
            }
            let line = format!(
                "switching {dev:>4} MB/s {cores} core(s): auto {:>6.1} MB/s {:>5.2} | best {:<10} {:>6.1} MB/s {:>5.2} | explored {:.1}%",
                auto.mb_s(),
                auto.ratio(),
                best.0.to_string(),
                best.1.mb_s(),
                best.1.ratio(),
                100.0 * explored as f64 / auto.recs.len() as f64
            );
            println!("{line}");
            if auto.mb_s() < 0.95 * best.1.mb_s()
                || auto.ratio() < 0.95 * best.1.ratio()
                || explored * 8 > auto.recs.len()
            {
                failed.push(line);
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The targets of a cell by every fixed level (bench/auto-eval.sh holds the mount to the
/// same): auto at least 0.95× `none`'s throughput, and at least 0.95× the best fixed level's
/// with a ratio no more than 2% below it, or else no fixed level both 5% faster and 2%
/// stronger. The misses, named.
fn target_misses(s: &Setup, auto: &Outcome) -> Vec<String> {
    let mut m = Vec::new();
    let none = fixed(s, Codec::NONE);
    if auto.mb_s() < 0.95 * none.mb_s() {
        m.push(format!("{:.0} MB/s < 0.95 × none's {:.0}", auto.mb_s(), none.mb_s()));
    }
    let mut levels: Vec<Codec> = table(s.data).into_iter().map(|r| r.0).collect();
    levels.retain(|c| !(c.alg == Algorithm::Zstd && c.level > 15));
    let runs: Vec<(Codec, Outcome)> = levels.into_iter().map(|c| (c, fixed(s, c))).collect();
    let best = runs.iter().max_by(|a, b| a.1.mb_s().total_cmp(&b.1.mb_s())).expect("levels");
    let near_best = auto.mb_s() >= 0.95 * best.1.mb_s() && auto.ratio() >= 0.98 * best.1.ratio();
    let beaten: Vec<String> = runs
        .iter()
        .filter(|(_, o)| o.mb_s() >= 1.05 * auto.mb_s() && o.ratio() >= 1.02 * auto.ratio())
        .map(|(c, o)| format!("{c} {:.0} MB/s {:.2}", o.mb_s(), o.ratio()))
        .collect();
    if !near_best && !beaten.is_empty() {
        m.push(format!("faster and stronger: {}", beaten.join(", ")));
    }
    m
}

/// A fast device on a machine where writing costs CPU no meter of the pipeline sees (1 ns per
/// input byte: the kernel's side of the FUSE round trips, a loop device's worker): the floor,
/// from the meters, rates zstd:1 within 15% of the fastest rung, where the mount writes at
/// 0.6× their speed. The rate check measures the intake and finds the weaker rungs: auto
/// meets the targets on one core and two. Without it (fb_rate 0) it misses on two (on one,
/// the device's half speed hides most of the gap).
#[test]
fn a_cpu_cost_no_meter_sees_is_found_by_the_rate_check() {
    for cores in [2.0, 1.0] {
        let s = Setup { hidden_ns: 1.4, store_ns: 0.5, ..Setup::new(700.0 * cores / 2.0, cores, Data::Medium) };
        let with = run(&s, &mut Policy::Auto(Box::new(auto_default())), &|_| s.data);
        let without =
            run(&s, &mut Policy::Auto(Box::new(auto_with(Tunables { fb_rate: 0, ..Tunables::default() }))), &|_| {
                s.data
            });
        let (m_with, m_without) = (target_misses(&s, &with), target_misses(&s, &without));
        println!(
            "{cores} core(s): with the check {:.0} MB/s {:.2} {m_with:?}; without {:.0} MB/s {:.2} {m_without:?}",
            with.mb_s(),
            with.ratio(),
            without.mb_s(),
            without.ratio()
        );
        assert!(m_with.is_empty(), "{cores} core(s), with the rate check: {m_with:?}");
        if cores == 2.0 {
            assert!(!m_without.is_empty(), "the floor alone should miss on two cores");
        }
    }
}

/// A fast, idle device on a machine where every compressed record costs CPU no meter sees
/// (1 ns per input byte beyond the codec's clock: on a loop device over the host disk `none`
/// wrote 794 MB/s on one core, lz4 310): `none` is the fastest level end to end, by a fifth
/// or more against every codec, and the meters rate the fast lz4 rungs as fast as it. The
/// rate check finds raw: auto converges to it (nine in ten records of the second half raw)
/// and is within 10% of `none`'s throughput over the whole 1.5–3 s write, the descent from
/// the starting rung included.
#[test]
fn on_a_fast_device_where_none_is_fastest_auto_converges_to_none() {
    for cores in [1.0, 2.0] {
        let s = Setup { hidden_compress_ns: 1.0, ..Setup::new(4000.0, cores, Data::Medium) };
        let none = fixed(&s, Codec::NONE);
        for c in table(s.data).into_iter().map(|r| r.0).take(8) {
            let o = fixed(&s, c);
            assert!(o.mb_s() < 0.9 * none.mb_s(), "{c} {:.0} MB/s against none's {:.0}", o.mb_s(), none.mb_s());
        }
        let auto = run(&s, &mut Policy::Auto(Box::new(auto_default())), &|_| s.data);
        let tail = &auto.recs[auto.recs.len() / 2..];
        let raw = tail.iter().filter(|r| r.codec == Codec::NONE).count();
        println!(
            "{cores} core(s): auto {:.0} MB/s {:.2}, none {:.0} MB/s; raw in the second half {raw} of {}",
            auto.mb_s(),
            auto.ratio(),
            none.mb_s(),
            tail.len()
        );
        let within = 0.9;
        assert!(
            auto.mb_s() >= within * none.mb_s(),
            "{cores} core(s): {:.0} < {within} × {:.0}",
            auto.mb_s(),
            none.mb_s()
        );
        assert!(raw * 10 >= tail.len() * 9, "{cores} core(s): {raw} of {} raw", tail.len());
    }
}
