//! The auto controller's model mode (`Tunables::model`, the ladder QoS reads), each requirement on synthetic inputs: the ladder, stepping up and
//! down, mixing neighbours only, exploring and re-measuring, incompressible data, never slower
//! than `none`, and the QoS entry point.

mod sim;

use sim::{figures, Data};
use squeezefs_codec::{Algorithm, Codec, Spec};
use squeezefs_control::ladder::{lower_hull, Point};
use squeezefs_control::{AutoController, AutoInputs, Decision, DeviceView, Reason, Sample, Tunables};

const REC: u64 = 128 << 10;
const MB: f64 = 1e6;

fn zstd(l: i32) -> Codec {
    Codec { alg: Algorithm::Zstd, level: l }
}
fn lz4(a: i32) -> Codec {
    Codec { alg: Algorithm::Lz4, level: a }
}

fn ctl(spec: &str) -> AutoController {
    AutoController::for_spec(spec.parse::<Spec>().unwrap(), Tunables::model()).unwrap()
}

/// The true (ns per byte, ratio) of a codec on `data`, from the simulation's table.
fn truth(data: Data, c: Codec) -> (f64, f64) {
    let (mbs, ratio) = figures(data, c);
    (1000.0 / mbs, ratio)
}

fn sample(data: Data, c: Codec) -> Sample {
    let (ns, ratio) = truth(data, c);
    Sample {
        codec: c,
        input_bytes: REC,
        stored_bytes: ((REC as f64 / ratio) as u64).min(REC),
        cpu_ns: (ns * REC as f64) as u64,
    }
}

/// Measure every candidate on `data` with enough records to be trusted.
fn measure_all(a: &mut AutoController, data: Data) {
    for c in a.candidates().to_vec() {
        for _ in 0..16 {
            a.observe(&sample(data, c));
        }
    }
}

/// One device of `mb_s` whose queue holds `queue_secs` of writing.
fn device(mb_s: f64, queue_secs: f64) -> [DeviceView; 1] {
    [DeviceView { queued_bytes: (queue_secs * mb_s * MB) as u64, throughput_bps: mb_s * MB, free_bytes: u64::MAX }]
}

struct Env {
    now: f64,
    cores: f64,
    workers: usize,
    overhead: f64,
    /// records wait for compression behind each one
    backlog: bool,
}

impl Env {
    fn new(cores: f64) -> Env {
        Env { now: 0.0, cores, workers: 2, overhead: 1.0, backlog: true }
    }

    /// Decide one record; time advances by one record's worth at `rate` MB/s.
    fn decide(&mut self, a: &mut AutoController, devices: &[DeviceView]) -> Decision {
        self.now += REC as f64 / (400.0 * MB);
        a.decide(&AutoInputs {
            now_secs: self.now,
            record_bytes: REC,
            devices,
            range_bps: 0.0,
            cores: self.cores,
            workers: self.workers,
            overhead_ns_per_byte: self.overhead,
            store_ns_per_byte: None,
            backlog: self.backlog,
            workers_busy: None,
            cpu_idle: None,
        })
    }
}

/// Position of `c` on the controller's current ladder.
fn rung(a: &mut AutoController, c: Codec) -> usize {
    a.ladder().iter().position(|r| r.0 == c).unwrap_or_else(|| panic!("{c} not on the ladder"))
}

#[test]
fn ladder_is_pareto_ordered_on_measured_data_and_bounded_by_the_range() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    assert_eq!(a.candidates().first(), Some(&lz4(64)));
    assert_eq!(a.candidates().last(), Some(&zstd(9)));
    measure_all(&mut a, Data::Medium);
    let ladder = a.ladder();
    assert_eq!(ladder[0].0, Codec::NONE);
    assert!(ladder.iter().all(|r| r.2), "every rung measured: {ladder:?}");
    // each step faster and weaker than the next, and no rung above its neighbours' line
    for w in ladder.windows(2) {
        assert!(w[0].1.cost < w[1].1.cost && w[0].1.stored > w[1].1.stored, "{w:?}");
    }
    for w in ladder.windows(3) {
        let (p, q, r) = (w[0].1, w[1].1, w[2].1);
        let line = p.stored + (r.stored - p.stored) * (q.cost - p.cost) / (r.cost - p.cost);
        assert!(q.stored < line, "{} is above the line of its neighbours", w[1].0);
    }
    let names: Vec<String> = ladder.iter().map(|r| r.0.to_string()).collect();
    // dominated on this data: zstd:-5 (slower and weaker than lz4), zstd:4 (weaker than
    // zstd:3), zlib and lz4hc (slower and weaker than zstd)
    for gone in ["zstd:-5", "zstd:4", "zlib:1", "zlib:6", "lz4hc:1", "lz4hc:9"] {
        assert!(!names.contains(&gone.to_string()), "{gone} should have dropped out: {names:?}");
    }
    // (lz4:fast=64 is measured and Pareto-optimal but above the line from raw to
    // lz4:fast=32: a mix of those two beats it, so it is no rung)
    assert!(!names.contains(&"lz4:fast=64".to_string()));
    for kept in ["lz4:fast=32", "lz4", "zstd:-1", "zstd:1", "zstd:3", "zstd:9"] {
        assert!(names.contains(&kept.to_string()), "{kept} missing: {names:?}");
    }
    // lz4hc stays where it is Pareto-optimal on the measured data
    let mut b = ctl("auto:lz4fast-64..zstd:9");
    let lz4hc1 = Codec { alg: Algorithm::Lz4Hc, level: 1 };
    for c in b.candidates().to_vec().into_iter().filter(|c| *c != lz4hc1) {
        for _ in 0..16 {
            b.observe(&sample(Data::Medium, c));
        }
    }
    // on this data lz4hc:1 runs about as fast as zstd:-1 and nearly matches zstd:1's ratio
    let (ns, _) = truth(Data::Medium, zstd(-1));
    for _ in 0..16 {
        b.observe(&Sample {
            codec: Codec { alg: Algorithm::Lz4Hc, level: 1 },
            input_bytes: REC,
            stored_bytes: (REC as f64 / 3.6) as u64,
            cpu_ns: (ns * 1.05 * REC as f64) as u64,
        });
    }
    assert!(b.ladder().iter().any(|r| r.0.alg == Algorithm::Lz4Hc), "{:?}", b.ladder());
    // the range bounds the candidates by nominal speed
    let z = ctl("auto:zstd:1..zstd:9");
    assert!(z.candidates().iter().all(|c| c.alg != Algorithm::Lz4), "{:?}", z.candidates());
    assert_eq!((z.candidates()[0], *z.candidates().last().unwrap()), (zstd(1), zstd(9)));
}

/// A controller measured on medium data, positioned at zstd:1 by a slow device and a queue
/// that fits nothing stronger.
fn measured_at_zstd1() -> (AutoController, Env) {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut a, Data::Medium);
    let mut env = Env::new(2.0);
    // zstd:1 takes 0.37 ms per record, zstd:2 0.44 ms: a queue delay of 0.40 ms after the
    // two-record margin fits the first only
    let margin = 2.0 * REC as f64 / (25.0 * MB);
    let d = device(25.0, margin + 0.40e-3);
    for _ in 0..20 {
        env.decide(&mut a, &d);
    }
    (a, env)
}

#[test]
fn steps_up_only_when_the_stronger_level_fits_the_queue_delay() {
    let (mut a, mut env) = measured_at_zstd1();
    let margin = 2.0 * REC as f64 / (25.0 * MB);
    let tight = device(25.0, margin + 0.40e-3);
    for _ in 0..10 {
        let d = env.decide(&mut a, &tight);
        assert_eq!(d.codec, zstd(1), "zstd:2 does not fit a 0.40 ms budget");
    }
    // a long queue: one rung up per record, in ladder order, up to where the model wants it
    let long = device(25.0, 0.2);
    let start = rung(&mut a, zstd(1));
    let mut last = start;
    let mut steps = 0;
    for _ in 0..12 {
        let d = env.decide(&mut a, &long);
        let r = rung(&mut a, d.codec);
        assert!(r <= last + 1, "jumped from rung {last} to {r} ({})", d.codec);
        if r == last + 1 {
            steps += 1;
        }
        last = last.max(r);
    }
    assert!(steps >= 4, "climbed only {steps} rungs from zstd:1 towards zstd:9 on a 25 MB/s device");
    assert!(last > start + 3);
}

#[test]
fn steps_down_as_far_as_needed_then_climbs_again() {
    let (mut a, mut env) = measured_at_zstd1();
    let long = device(25.0, 0.2);
    let mut top = Codec::NONE;
    for _ in 0..40 {
        top = env.decide(&mut a, &long).codec;
    }
    let (top_ns, _) = truth(Data::Medium, top);
    assert!(top_ns > 10.0, "a 25 MB/s device with 2 cores wants a strong level, got {top}");
    // now the queue holds time for lz4 only (1.5 ns/B = 0.20 ms per record; zstd:-1 needs 0.30)
    let margin = 2.0 * REC as f64 / (25.0 * MB);
    let short = device(25.0, margin + 0.25e-3);
    let d = env.decide(&mut a, &short);
    assert_eq!(d.reason, Reason::Guard);
    assert_eq!(d.codec, lz4(1), "the strongest level whose time fits 0.25 ms");
    // and back up one rung per record once the queue recovers
    let mut last = rung(&mut a, lz4(1));
    for _ in 0..5 {
        let c = env.decide(&mut a, &long).codec;
        let r = rung(&mut a, c);
        assert!(r <= last + 1, "jumped from rung {last} to {r}");
        last = r;
    }
    assert!(last > rung(&mut a, lz4(1)));
}

/// Where the model puts a mix between rungs `lo` and `hi`: the fraction at `hi` that makes
/// n / (o + c) equal D / s.
fn crossing(lo: Point, hi: Point, n: f64, o: f64, d: f64) -> f64 {
    let (ne, m) = (n * 1e9, (hi.stored - lo.stored) / (hi.cost - lo.cost));
    let c = (d * o - ne * lo.stored + ne * m * lo.cost) / (ne * m - d);
    (c - lo.cost) / (hi.cost - lo.cost)
}

#[test]
fn mixes_only_neighbouring_levels_in_the_modelled_proportion() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut a, Data::Medium);
    let ladder = a.ladder();
    // 2 cores, 1 ns/B overhead, and a device speed where the model crosses well inside a
    // segment whose weaker rung is the best single level (so the answer is a mix)
    let (n, o) = (2.0, 1.0);
    let surplus = |p: Point, dev: f64| n * 1e9 * p.stored - dev * (o + p.cost);
    let w = |p: Point, dev: f64| (n * 1e9 / (o + p.cost)).min(dev / p.stored);
    let (dev, i, want) = [30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 120.0, 150.0, 200.0, 250.0, 300.0]
        .into_iter()
        .map(|mb| mb * MB)
        .find_map(|dev| {
            let i = ladder.windows(2).position(|w| surplus(w[0].1, dev) > 0.0 && surplus(w[1].1, dev) < 0.0)?;
            let f = crossing(ladder[i].1, ladder[i + 1].1, n, o, dev);
            (f > 0.2 && f < 0.8 && w(ladder[i].1, dev) >= w(ladder[i + 1].1, dev)).then_some((dev, i, f))
        })
        .expect("some device speed gives a mix");
    let (lo, hi) = (ladder[i].0, ladder[i + 1].0);
    let mut env = Env::new(2.0);
    // the queue at its 50 ms target: no correction
    let d = device(dev / MB, 0.05);
    let mut counts = std::collections::HashMap::new();
    for i in 0..2000 {
        let c = env.decide(&mut a, &d).codec;
        if i >= 200 {
            *counts.entry(c).or_insert(0u32) += 1;
        }
    }
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(counts.contains_key(&lo), "{counts:?}");
    let got = counts[&hi] as f64 / 1800.0;
    assert!((got - want).abs() < 0.02, "{got} of the records at {hi}, model says {want}");
}

#[test]
fn explores_an_unmeasured_level_one_at_a_time() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    let mut env = Env::new(2.0);
    let d = device(25.0, 0.2);
    // nothing measured: the first decisions hold the start level, then explorations begin
    let mut explored = Vec::new();
    for _ in 0..50 {
        let x = env.decide(&mut a, &d);
        if x.reason == Reason::Explore {
            explored.push(x.codec);
        }
    }
    assert_eq!(explored.len(), 1, "a second exploration before the first came back: {explored:?}");
    // its measurement comes back: the next exploration may start, again only one
    a.observe(&sample(Data::Medium, explored[0]));
    let mut more = Vec::new();
    for _ in 0..50 {
        let x = env.decide(&mut a, &d);
        if x.reason == Reason::Explore {
            more.push(x.codec);
        }
    }
    assert_eq!(more.len(), 1, "{more:?}");
    // a measurement that never comes back is given up after the timeout
    env.now += 1.5;
    let x = env.decide(&mut a, &d);
    assert_eq!(x.reason, Reason::Explore, "{x:?}");
    // fed back every time, the controller ends up at a strong level with its rungs measured
    let mut env = Env::new(2.0);
    let mut b = ctl("auto:lz4fast-64..zstd:9");
    let mut last = Codec::NONE;
    for _ in 0..600 {
        let x = env.decide(&mut b, &d);
        if x.codec != Codec::NONE {
            b.observe(&sample(Data::Medium, x.codec));
        }
        last = x.codec;
    }
    assert!(truth(Data::Medium, last).0 > 10.0, "{last}");
}

/// The ratio a ladder entry has for `c` (None: not on the ladder).
fn ladder_ratio(a: &mut AutoController, c: Codec) -> Option<f64> {
    a.ladder().iter().find(|r| r.0 == c).map(|r| 1.0 / r.1.stored)
}

#[test]
fn a_data_change_carries_the_other_rungs_figures_over() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut a, Data::Medium);
    let before = ladder_ratio(&mut a, zstd(1)).expect("zstd:1 on the ladder");
    // zstd:3 now sees highly compressible data: its figures drift, and every other rung's
    // move with them instead of going stale
    for _ in 0..8 {
        a.observe(&sample(Data::High, zstd(3)));
    }
    let ladder = a.ladder();
    assert!(ladder.iter().all(|r| r.2), "every rung usable without exploring: {ladder:?}");
    let after = ladder_ratio(&mut a, zstd(1)).expect("zstd:1 on the ladder");
    assert!(after > 1.3 * before, "zstd:1 carried from ×{before:.2} to ×{after:.2}");
    // nothing is explored: the position moves on carried figures and measures what it uses
    let mut env = Env::new(2.0);
    let d = device(50.0, 0.1);
    let mut explored = 0;
    for _ in 0..200 {
        let x = env.decide(&mut a, &d);
        if x.codec != Codec::NONE {
            a.observe(&sample(Data::High, x.codec));
        }
        explored += usize::from(x.reason == Reason::Explore);
    }
    assert!(explored <= 2, "{explored} explorations after a carried change");
}

#[test]
fn data_seen_before_gets_its_remembered_figures_back() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut a, Data::Medium);
    let medium = ladder_ratio(&mut a, zstd(9)).unwrap();
    for _ in 0..24 {
        a.observe(&sample(Data::High, zstd(3)));
    }
    assert!(ladder_ratio(&mut a, zstd(9)).unwrap() > 1.3 * medium);
    // back to the first data: zstd:9's figures are its own measurement on it again, not
    // zstd:3's change applied twice
    for _ in 0..24 {
        a.observe(&sample(Data::Medium, zstd(3)));
    }
    let back = ladder_ratio(&mut a, zstd(9)).unwrap();
    assert!((back / medium - 1.0).abs() < 0.01, "zstd:9 ×{medium:.3} on medium data, ×{back:.3} back on it");
}

#[test]
fn rungs_carried_over_too_many_changes_are_measured_again() {
    let tun = Tunables { profiles: 0, ..Tunables::model() };
    let carry_max = tun.carry_max;
    let mut a = AutoController::for_spec("auto:lz4fast-64..zstd:9".parse().unwrap(), tun).unwrap();
    measure_all(&mut a, Data::Medium);
    // zstd:3 alone sees the data change back and forth; the others are never used
    for k in 0..=carry_max {
        let data = if k % 2 == 0 { Data::High } else { Data::Medium };
        for _ in 0..24 {
            a.observe(&sample(data, zstd(3)));
        }
        let usable: Vec<String> =
            a.ladder().iter().filter(|r| r.2 && r.0 != Codec::NONE).map(|r| r.0.to_string()).collect();
        if k < carry_max {
            assert!(usable.len() > 2, "carried over change {}: {usable:?}", k + 1);
        } else {
            assert_eq!(usable, vec!["zstd:3".to_string()], "after {} changes every other rung is stale", k + 1);
        }
    }
    // and the controller measures the ones its decision depends on, one at a time
    let mut env = Env::new(2.0);
    let d = device(50.0, 0.1);
    let mut explored = Vec::new();
    for _ in 0..400 {
        let x = env.decide(&mut a, &d);
        if x.codec != Codec::NONE {
            a.observe(&sample(Data::Medium, x.codec));
        }
        if x.reason == Reason::Explore && !explored.contains(&x.codec) {
            explored.push(x.codec);
        }
    }
    assert!(explored.len() >= 2, "{explored:?}");
}

/// A fast rung that saves nothing on a stretch of binary data (lz4:fast=32 on an office
/// file) is no evidence that zstd:1 saves nothing: the ladder kept zstd:1's estimate scaled to
/// zero and stored everything raw until the next probe, 64 MiB later, with the device queue
/// full (bench/auto-eval.sh, medium data at 100 MB/s: 537 records in a row).
#[test]
fn a_weak_rung_saving_nothing_does_not_make_the_ladder_raw_alone() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut a, Data::Medium);
    let weak = lz4(32);
    for _ in 0..24 {
        a.observe(&Sample { codec: weak, input_bytes: REC, stored_bytes: REC, cpu_ns: REC / 2 });
    }
    let ladder = a.ladder();
    assert!(ladder.len() > 1, "raw alone on lz4:fast=32's evidence: {ladder:?}");
    let z1 = ladder.iter().find(|r| r.0 == zstd(1)).expect("zstd:1 stays on the ladder until measured");
    assert!(!z1.2, "zstd:1 is not measured on the new data yet");
    // a long queue: the controller measures zstd:1 on the new data instead of storing raw
    let mut env = Env::new(2.0);
    let d = device(100.0, 0.3);
    let first: Vec<Decision> = (0..8).map(|_| env.decide(&mut a, &d)).collect();
    assert!(first.iter().any(|x| x.codec == zstd(1) && x.reason == Reason::Explore), "{first:?}");
    // if zstd:1 saves nothing either, the data is incompressible: raw alone
    for _ in 0..4 {
        a.observe(&Sample { codec: zstd(1), input_bytes: REC, stored_bytes: REC, cpu_ns: 3 * REC });
    }
    assert_eq!(a.ladder().len(), 1, "{:?}", a.ladder());
}

#[test]
fn incompressible_data_is_stored_raw_without_burning_cpu() {
    let mut a = ctl("auto");
    let mut env = Env::new(2.0);
    let d = device(100.0, 0.05);
    let (mut compressed, mut probes) = (0u64, 0u64);
    let n = 8192; // 1 GiB of records
    for i in 0..n {
        let x = env.decide(&mut a, &d);
        if x.codec != Codec::NONE {
            // random data: the output does not save space, the record is stored raw
            a.observe(&Sample { codec: x.codec, input_bytes: REC, stored_bytes: REC, cpu_ns: REC / 5 });
            if i > 100 {
                compressed += 1;
            }
            if x.reason == Reason::Probe {
                probes += 1;
            }
        }
    }
    assert!(a.ladder().len() == 1, "raw alone: {:?}", a.ladder());
    assert_eq!(compressed, probes, "after the first records, only probes compress");
    assert!((14..=16).contains(&probes), "one probe per 64 MiB: {probes}");
    // compressible data again: the next probe notices it and auto compresses again
    let mut back = false;
    for _ in 0..1024 {
        let x = env.decide(&mut a, &d);
        if x.codec != Codec::NONE {
            a.observe(&sample(Data::Medium, x.codec));
            back |= x.reason == Reason::Model;
        }
    }
    assert!(back, "{:?}", a.ladder());
}

#[test]
fn never_slower_than_none_when_the_cpu_is_the_bottleneck() {
    let mut a = ctl("auto");
    measure_all(&mut a, Data::Medium);
    // 1 core, 1 ns/B of pipeline work: storing raw already takes the core (1 GB/s) and the
    // device takes 2 GB/s: any compression would slow writing down
    let mut env = Env::new(1.0);
    let fast = device(2000.0, 0.0);
    for _ in 0..200 {
        assert_eq!(env.decide(&mut a, &fast).codec, Codec::NONE);
    }
    // a device at 800 MB/s: raw writes 800 MB/s; a mix of raw and the cheapest level is
    // faster, anything stronger is slower
    let dev = device(800.0, 0.0);
    let mut counts = std::collections::HashMap::new();
    for _ in 0..2000 {
        *counts.entry(env.decide(&mut a, &dev).codec).or_insert(0u32) += 1;
    }
    let ladder = a.ladder();
    assert!(counts.keys().all(|c| *c == Codec::NONE || *c == ladder[1].0), "{counts:?}");
    let f = counts.get(&ladder[1].0).copied().unwrap_or(0) as f64 / 2000.0;
    let p = ladder[1].1;
    let w = (1e9 / (1.0 + f * p.cost)).min(800.0 * MB / (1.0 - f + f * p.stored));
    assert!(w >= 800.0 * MB, "the mix writes {:.0} MB/s, none 800", w / MB);
    // a CPU hog takes one of two cores while auto runs a strong level: it backs off at once
    let mut b = ctl("auto");
    measure_all(&mut b, Data::Medium);
    let mut env = Env::new(2.0);
    let d = device(100.0, 0.05);
    for _ in 0..100 {
        env.decide(&mut b, &d);
    }
    let before = env.decide(&mut b, &d).codec;
    env.cores = 1.0;
    let after = env.decide(&mut b, &d).codec;
    assert!(truth(Data::Medium, after).0 < truth(Data::Medium, before).0, "{before} → {after}");
}

/// The meters can be pessimistic several times over on a shared machine (the CPU meter read
/// 0.3 cores where zstd:1 obtained about one; the device's drain rate read 2× a throttle's
/// limit after idle gaps), so the model stores raw while the device queue is long and no
/// record waits for compression. A long queue is the devices' own evidence that they are the
/// bottleneck: the level goes up, whatever the regime and whether or not records wait.
#[test]
fn a_long_device_queue_raises_the_level_past_a_pessimistic_model() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut a, Data::Medium);
    let mut env = Env::new(0.3);
    env.backlog = false;
    // the meter says 240 MB/s, the device queue holds 0.4 s of it
    let d = device(240.0, 0.4);
    let mut late = Vec::new();
    for i in 0..400 {
        let x = env.decide(&mut a, &d);
        if i >= 300 {
            late.push(x.codec);
        }
    }
    let raw = late.iter().filter(|c| **c == Codec::NONE).count();
    assert_eq!(raw, 0, "{raw} of 100 records raw with the device queue long: {late:?}");
    let weakest = late.iter().map(|c| truth(Data::Medium, *c).0).fold(f64::INFINITY, f64::min);
    assert!(weakest >= truth(Data::Medium, lz4(1)).0, "{late:?}");
    assert!(a.gain() > 2.0, "gain {}", a.gain());
    // the same inputs with the queue at its target: the model's pessimistic answer stands
    let mut b = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut b, Data::Medium);
    let mut env = Env::new(0.3);
    env.backlog = false;
    let at_target = device(240.0, 0.05);
    let picks: Vec<Codec> = (0..400).map(|_| env.decide(&mut b, &at_target).codec).collect();
    assert!(picks[300..].contains(&Codec::NONE), "{:?}", &picks[300..]);
}

/// A queue far above its target (the records decided before the device's first drain
/// measurement wait for a 25 MB/s device) raises g in proportion, and leaves no wound-up
/// integral behind: once the queue is back at its target, so is g.
#[test]
fn a_start_up_queue_does_not_wind_up_the_correction() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut a, Data::Medium);
    // half a core: the model's target lies inside the ladder, not pinned at its top
    let mut env = Env::new(0.5);
    let long = device(25.0, 1.5);
    while env.now < 3.0 {
        env.decide(&mut a, &long);
    }
    assert!(a.gain() >= 4.0, "a queue 30 times its target: gain {}", a.gain());
    let at_target = device(25.0, 0.05);
    let until = env.now + 0.5;
    while env.now < until {
        env.decide(&mut a, &at_target);
    }
    assert!((0.7..1.4).contains(&a.gain()), "gain {} with the queue at its target", a.gain());
}

/// After the data changed every rung is stale; a queue swinging long puts the target far up
/// the ladder for a moment. Exploring there cost zstd:7–15 records on a contended core (a
/// third of the records, bench/auto-eval.sh at 25 MB/s); the rungs explored stay within
/// reach of the position, which walks up through them.
#[test]
fn explorations_stay_within_reach_of_the_position() {
    // new data whose figures cannot be carried over: every other rung goes stale
    let tun = Tunables { carry_max: 0, profiles: 0, ..Tunables::model() };
    let mut a = AutoController::for_spec("auto:lz4fast-64..zstd:19".parse().unwrap(), tun).unwrap();
    measure_all(&mut a, Data::Medium);
    let mut env = Env::new(0.5);
    let d = device(25.0, 0.1);
    for _ in 0..300 {
        let x = env.decide(&mut a, &d);
        if x.codec != Codec::NONE {
            a.observe(&sample(Data::Medium, x.codec));
        }
    }
    // the data changes (highly compressible now): every other rung goes stale
    for _ in 0..24 {
        a.observe(&sample(Data::High, zstd(1)));
    }
    let start = env.decide(&mut a, &d).codec;
    if start != Codec::NONE {
        a.observe(&sample(Data::High, start));
    }
    let long = device(25.0, 2.0);
    // and more CPU than before: the model's target is near the top (zstd:15–19)
    env.cores = 2.0;
    let cost = |c: Codec| if c == Codec::NONE { 0.0 } else { truth(Data::Medium, c).0 };
    let mut explored = Vec::new();
    let mut last = start;
    for _ in 0..12 {
        let x = env.decide(&mut a, &long);
        if x.codec != Codec::NONE {
            a.observe(&sample(Data::High, x.codec));
        }
        if x.reason == Reason::Explore {
            // within reach of where the position was: twice the next rung up (about twice
            // the current one's cost again), or of zstd:1
            let reach = 4.0 * cost(last).max(cost(zstd(1)));
            assert!(cost(x.codec) <= reach, "{} explored from {last}: {explored:?}", x.codec);
            explored.push(x.codec);
        }
        last = x.codec;
    }
    assert!(cost(last) > cost(start), "the position walks up: {start} → {last}, explored {explored:?}");
}

/// Records wait in memory for their txg, which closes after 16 MiB: at 20 MB/s the queue holds
/// 0.8 s by itself. Against a 0.05 s target that read as a device 16 times too slow and drove
/// g to its maximum; the pipeline's batch sets the target's floor.
#[test]
fn a_queue_the_pipeline_holds_by_itself_is_no_sign_of_a_slow_device() {
    let gain_after = |batch_bytes: u64| {
        let tun = Tunables { batch_bytes, ..Tunables::model() };
        let mut a = AutoController::for_spec("auto:lz4fast-64..zstd:9".parse().unwrap(), tun).unwrap();
        measure_all(&mut a, Data::Medium);
        let mut env = Env::new(0.5);
        let d = device(20.0, 16.0 * (1 << 20) as f64 / 20e6);
        for _ in 0..400 {
            env.decide(&mut a, &d);
        }
        a.gain()
    };
    let with = gain_after(16 << 20);
    assert!((0.8..1.25).contains(&with), "gain {with}");
    assert!(gain_after(0) > 4.0, "without the batch floor the same queue reads as a slow device");
}

/// In the CPU-bound regime g follows the compression stage's measured rate; a burst of
/// records decided at once (a txg's queue drained by every thread) read as 8 times the cores
/// the meter gave and sent auto to zstd:13 on a contended core. g·n stays within the workers.
#[test]
fn the_cpu_bound_rate_correction_believes_in_no_more_cores_than_workers() {
    let mut a = ctl("auto:lz4fast-64..zstd:9");
    measure_all(&mut a, Data::Medium);
    let d = device(60.0, 0.0);
    let mut now = 0.0;
    for _ in 0..4000 {
        // 128 KiB records decided every 40 µs: 3.3 GB/s, far beyond half a core
        now += 40e-6;
        a.decide(&AutoInputs {
            now_secs: now,
            record_bytes: REC,
            devices: &d,
            range_bps: 0.0,
            cores: 0.5,
            workers: 2,
            overhead_ns_per_byte: 1.0,
            store_ns_per_byte: None,
            backlog: true,
            workers_busy: None,
            cpu_idle: None,
        });
    }
    assert!(a.gain() > 1.5, "the rate window corrects g: {}", a.gain());
    assert!(a.gain() <= 2.0 / 0.5 + 1e-9, "gain {}", a.gain());
}

#[test]
fn qos_mix_is_the_strongest_that_meets_the_rate() {
    let mut a = ctl("auto");
    measure_all(&mut a, Data::Medium);
    let ladder = a.ladder();
    let hull_pts: Vec<Point> = ladder.iter().map(|r| r.1).collect();
    assert_eq!(lower_hull(&hull_pts).len(), ladder.len(), "a measured ladder is its own hull");
    for (cores, rate_mb) in [(1.0, 10.0), (1.0, 100.0), (2.0, 300.0), (2.0, 700.0), (1.0, 900.0), (1.0, 5000.0)] {
        let m = a.mix_for_rate(cores, 1.0, rate_mb * MB);
        let point = |c: Codec| ladder.iter().find(|r| r.0 == c).unwrap().1;
        let cost = (1.0 - m.frac) * point(m.lo).cost + m.frac * point(m.hi).cost;
        let speed = cores * 1e9 / (1.0 + cost);
        if m.lo == Codec::NONE && m.frac == 0.0 {
            // nothing meets it: raw, the fastest there is
            assert!(rate_mb >= 900.0, "{rate_mb}: {m:?}");
            continue;
        }
        assert!(speed >= rate_mb * MB * 0.999, "{rate_mb} MB/s on {cores}: {m:?} gives {:.1}", speed / MB);
        // the strongest: exactly on the rate, or the top of the ladder
        let top = m.lo == ladder.last().unwrap().0;
        assert!(top || speed <= rate_mb * MB * 1.001, "{rate_mb}: {m:?} leaves {:.1} MB/s unused", speed / MB);
    }
    // the thesis's QoS table: a slow stream gets a strong level, a fast one a fast level
    let slow = a.mix_for_rate(1.0, 1.0, 10.0 * MB);
    let fast = a.mix_for_rate(1.0, 1.0, 500.0 * MB);
    assert!(truth(Data::Medium, slow.lo).1 > truth(Data::Medium, fast.hi).1);
}

#[test]
fn tunable_overrides_set_named_fields_and_reject_bad_items_whole() {
    let mut t = Tunables::default();
    t.set("explore_reach=1, gain_p_up=0.25,confident_bytes=524288,profiles=16").unwrap();
    assert_eq!(t.explore_reach, 1.0);
    assert_eq!(t.gain_p_up, 0.25);
    assert_eq!(t.confident_bytes, 512 << 10);
    assert_eq!(t.profiles, 16);
    let before = t.clone();
    for (bad, names) in [
        ("explore_reach", "name=value"),
        ("nonsense=1", "accepted: queue_target_secs"),
        ("gain_i=-1", "≥ 0"),
        ("gain_i=NaN", "≥ 0"),
        ("profiles=1.5", "whole number"),
        ("explore_reach=3,gain_min=0", "gain_min"),
    ] {
        let e = t.set(bad).unwrap_err();
        assert!(e.contains(names), "{bad}: {e}");
        assert_eq!(t, before, "{bad} changed the tunables");
    }
    t.set("").unwrap();
    assert_eq!(t, before);
}

#[test]
fn every_tunable_name_listed_is_accepted() {
    for name in Tunables::NAMES {
        // a value no default has; gain_min must stay within (0, 1]
        let v = if *name == "gain_min" { "0.5" } else { "7" };
        let mut t = Tunables::default();
        t.set(&format!("{name}={v}")).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_ne!(t, Tunables::default(), "{name}={v} changed nothing");
    }
}
