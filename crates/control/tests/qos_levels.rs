//! Level choice across QoS trees on synthetic hulls (the simulation's codec figures): one tree
//! gets the strongest mix for its rate, several share the CPU so as to save the most bytes.

mod sim;

use sim::{figures, table, Data};
use squeezefs_codec::{Algorithm, Codec};
use squeezefs_control::ladder::{locate, lower_hull, strongest_for_rate, Point};
use squeezefs_control::qos::{plan, LevelTunables, QosLevels, TreeDemand, TreeLoad};
use squeezefs_control::Sample;

const MB: f64 = 1e6;
const O: f64 = 1.0;

/// The lower hull of raw and every simulated codec on `data` (codecs up to zstd:19).
fn hull(data: Data) -> Vec<(Codec, Point)> {
    let mut all = vec![(Codec::NONE, Point::RAW)];
    all.extend(table(data).into_iter().map(|(c, mbs, ratio)| (c, Point { cost: 1000.0 / mbs, stored: 1.0 / ratio })));
    let pts: Vec<Point> = all.iter().map(|a| a.1).collect();
    lower_hull(&pts).into_iter().map(|k| all[k]).collect()
}

fn load(tree: u64, rate_mb: f64, h: &[(Codec, Point)]) -> TreeLoad<'_> {
    TreeLoad { tree, rate_bps: rate_mb * MB, qos_bps: rate_mb * MB, hull: h, max_cores: f64::INFINITY }
}

/// The best point on `h` for `cpu_ns` per second at `rate` bytes/s: (cost, stored).
fn best_for_cpu(h: &[(Codec, Point)], rate: f64, cpu_ns: f64) -> Point {
    let costs: Vec<f64> = h.iter().map(|x| x.1.cost).collect();
    let c = cpu_ns / rate - O;
    if c < costs[0] {
        return h[0].1;
    }
    let (k, f) = locate(&costs, c);
    let a = h[k].1;
    let b = h.get(k + 1).map_or(a, |x| x.1);
    Point { cost: a.cost + f * (b.cost - a.cost), stored: a.stored + f * (b.stored - a.stored) }
}

#[test]
fn one_tree_gets_the_strongest_mix_for_its_rate() {
    let h = hull(Data::Medium);
    let tun = LevelTunables::default();
    for rate in [1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 300.0, 600.0, 1500.0] {
        for cores in [1.0, 2.0] {
            let p = plan(&[load(1, rate, &h)], cores, O, None, &tun);
            if p.cpu_short {
                // beyond the CPU even raw: planned for what fits (next test)
                continue;
            }
            let want = strongest_for_rate(&h, cores * tun.cpu_utilization, O, rate * MB);
            let got = p.trees[0].mix;
            // a mix with nothing of its stronger rung is its weaker rung alone, however named
            let same_hi = got.hi == want.hi || (got.frac.abs() < 1e-9 && want.frac.abs() < 1e-9);
            assert!(got.lo == want.lo && same_hi, "{rate} MB/s on {cores}: {got:?} vs {want:?}");
            assert!((got.frac - want.frac).abs() < 1e-9, "{rate} MB/s on {cores}: {got:?} vs {want:?}");
            // the plan's CPU fits, and is all used unless the top of the ladder is reached
            assert!(p.cores_used <= cores * tun.cpu_utilization + 1e-9 || p.cpu_short, "{p:?}");
            let top = got.lo == h.last().unwrap().0;
            assert!(top || p.cpu_short || p.cores_used >= cores * tun.cpu_utilization - 1e-6, "{rate}: {p:?}");
        }
    }
    // a slow tree gets zstd:19; one at a gigabyte and a half on one core cannot be met even raw
    let slow = plan(&[load(1, 1.0, &h)], 2.0, O, None, &tun);
    assert_eq!(slow.trees[0].mix.lo, Codec { alg: Algorithm::Zstd, level: 19 });
    let p = plan(&[load(1, 1500.0, &h)], 1.0, O, None, &tun);
    assert!(p.cpu_short && p.trees[0].mix.lo == Codec::NONE && p.trees[0].mix.frac < 1e-6, "{p:?}");
    let raw_mb = tun.cpu_utilization * 1000.0; // raw on one core at 1 ns/B
    assert!((p.scale - raw_mb / 1500.0).abs() < 1e-6, "{}", p.scale);
}

#[test]
fn the_cpu_goes_where_it_saves_the_most_bytes() {
    let tun = LevelTunables::default();
    for (da, db) in [(Data::Medium, Data::Medium), (Data::High, Data::Medium), (Data::Medium, Data::High)] {
        for (ra, rb, cores) in [(100.0, 10.0, 2.0), (50.0, 10.0, 1.0), (300.0, 50.0, 2.0), (20.0, 20.0, 0.5)] {
            let (ha, hb) = (hull(da), hull(db));
            let p = plan(&[load(1, ra, &ha), load(2, rb, &hb)], cores, O, None, &tun);
            assert!(!p.cpu_short);
            let saving = |pa: Point, pb: Point| ra * MB * (1.0 - pa.stored) + rb * MB * (1.0 - pb.stored);
            let (a, b) = (p.trees[0], p.trees[1]);
            let got = saving(Point { cost: a.cost_ns, stored: a.stored }, Point { cost: b.cost_ns, stored: b.stored });
            // every other split of the same CPU between the two trees saves no more
            let budget = cores * tun.cpu_utilization * 1e9;
            let mut best: f64 = 0.0;
            for k in 0..=2000 {
                let x = budget * k as f64 / 2000.0;
                let pa = best_for_cpu(&ha, ra * MB, x);
                let pb = best_for_cpu(&hb, rb * MB, budget - x);
                if ra * MB * (O + pa.cost) + rb * MB * (O + pb.cost) <= budget * (1.0 + 1e-9) {
                    best = best.max(saving(pa, pb));
                }
            }
            println!(
                "{}@{ra} + {}@{rb} on {cores}: {} {:.2} / {} {:.2}, saving {:.1} MB/s (best split {:.1})",
                da.name(),
                db.name(),
                a.mix.lo,
                a.ratio(),
                b.mix.lo,
                b.ratio(),
                got / MB,
                best / MB
            );
            assert!(got >= best * (1.0 - 1e-6), "greedy {got} < best split {best}");
            assert!(p.cores_used <= budget / 1e9 + 1e-9);
            // trees of the same data end at the same marginal saving: the same point
            if da == db {
                assert!((a.cost_ns - b.cost_ns).abs() < 1e-6 * a.cost_ns.max(1.0), "{a:?} {b:?}");
            }
        }
    }
}

#[test]
fn a_tree_that_starts_writing_takes_cpu_from_the_others() {
    let h = hull(Data::Medium);
    let tun = LevelTunables::default();
    let alone = plan(&[load(1, 50.0, &h)], 1.0, O, None, &tun);
    let both = plan(&[load(1, 50.0, &h), load(2, 50.0, &h)], 1.0, O, None, &tun);
    assert!(both.trees[0].cost_ns < alone.trees[0].cost_ns, "{alone:?} then {both:?}");
    assert!((both.trees[0].cost_ns - both.trees[1].cost_ns).abs() < 1e-9, "equal trees, equal levels");
    assert!(both.cores_used <= tun.cpu_utilization + 1e-9);
    // an idle tree takes nothing, yet has a start level for its qos rate
    let idle = TreeLoad { rate_bps: 0.0, ..load(3, 20.0, &h) };
    let p = plan(&[load(1, 50.0, &h), idle], 1.0, O, None, &tun);
    assert_eq!(p.trees[0], alone.trees[0]);
    assert_eq!(p.trees[1].cores, 0.0);
    assert!(p.trees[1].mix != squeezefs_control::Mix::RAW, "{:?}", p.trees[1]);
}

#[test]
fn a_tree_capped_in_cores_stays_within_them() {
    let h = hull(Data::Medium);
    let tun = LevelTunables::default();
    let capped = TreeLoad { max_cores: 0.5, ..load(1, 10.0, &h) };
    let p = plan(&[capped, load(2, 100.0, &h)], 2.0, O, None, &tun);
    assert!(p.trees[0].cores <= 0.5 + 1e-9, "{p:?}");
    // the CPU it could not take goes to the other tree
    let free = plan(&[load(1, 10.0, &h), load(2, 100.0, &h)], 2.0, O, None, &tun);
    assert!(p.trees[1].cost_ns >= free.trees[1].cost_ns, "{p:?} vs {free:?}");
}

#[test]
fn rates_beyond_the_cpu_or_the_device_are_scaled_to_what_fits() {
    let h = hull(Data::Medium);
    let tun = LevelTunables::default();
    let p = plan(&[load(1, 1000.0, &h), load(2, 900.0, &h)], 1.0, O, None, &tun);
    assert!(p.cpu_short);
    assert!(p.trees.iter().all(|t| t.mix.lo == Codec::NONE && t.mix.frac < 1e-6), "raw: {p:?}");
    assert!((p.scale - tun.cpu_utilization * 1000.0 / 1900.0).abs() < 1e-6, "{}", p.scale);
    // 2 × 100 MB/s of medium data on 2 cores store at best ~50 MB/s: a 40 MB/s device is short
    let p = plan(&[load(1, 100.0, &h), load(2, 100.0, &h)], 2.0, O, Some(40.0 * MB), &tun);
    assert!(p.device_short && !p.cpu_short, "{p:?}");
    // the plan is for the largest fraction that fits: the device is just full, the CPU too
    assert!(p.scale < 1.0 && p.scale > 0.5, "{p:?}");
    assert!((p.stored_bps - 40.0 * MB * tun.device_utilization).abs() < 0.01 * MB, "{p:?}");
    assert!(p.cores_used > 2.0 * tun.cpu_utilization * 0.99, "{p:?}");
    let p = plan(&[load(1, 100.0, &h), load(2, 100.0, &h)], 2.0, O, Some(200.0 * MB), &tun);
    assert!(!p.device_short && p.scale == 1.0, "{p:?}");
    // one tree asking for more than the machine can do gets the level of its best throughput
    let p = plan(&[load(1, 5000.0, &h)], 2.0, O, Some(200.0 * MB), &tun);
    let best = h
        .iter()
        .map(|(_, pt)| {
            (2.0 * tun.cpu_utilization * 1e9 / (O + pt.cost)).min(200.0 * MB * tun.device_utilization / pt.stored)
        })
        .fold(0.0, f64::max);
    let got = 5000.0 * MB * p.scale;
    assert!(got >= best * 0.999, "{:.1} MB/s planned, best single level {:.1}", got / MB, best / MB);
}

fn sample(data: Data, c: Codec) -> Sample {
    let (mbs, ratio) = figures(data, c);
    let rec = 128u64 << 10;
    Sample {
        codec: c,
        input_bytes: rec,
        stored_bytes: ((rec as f64 / ratio) as u64).min(rec),
        cpu_ns: (1000.0 / mbs * rec as f64) as u64,
    }
}

#[test]
fn each_tree_is_planned_on_its_own_data() {
    let mut q = QosLevels::new(LevelTunables::default());
    let cands: Vec<Codec> = q.ladder(1).iter().map(|r| r.0).filter(|c| *c != Codec::NONE).collect();
    for c in &cands {
        for _ in 0..16 {
            q.observe(1, &sample(Data::High, *c));
            q.observe(2, &sample(Data::Incompressible, *c));
        }
    }
    let d = |tree| TreeDemand { tree, rate_bps: 50.0 * MB, qos_bps: 50.0 * MB, lag_secs: 0.0, max_cores: 2.0 };
    let p = q.replan(&[d(1), d(2)], 2.0, O, None).clone();
    // incompressible data: nothing saves enough, the tree stores raw and the CPU goes to tree 1
    assert_eq!(p.get(2).unwrap().mix, squeezefs_control::Mix::RAW, "{p:?}");
    let t1 = p.get(1).unwrap();
    assert!(t1.ratio() > 7.0, "{t1:?}");
    // the picks spread the mix's fraction over records
    let n = 1000;
    let hi = (0..n).filter(|_| q.pick(1) == t1.mix.hi).count();
    let want = if t1.mix.hi == t1.mix.lo { n } else { (t1.mix.frac * n as f64).round() as usize };
    assert!(hi.abs_diff(want) <= 1, "{hi} of {n} at {} for {:?}", t1.mix.hi, t1.mix);
    assert_eq!(q.pick(2), Codec::NONE);
    // a tree lagging its deadlines is planned for more than its rate: a cheaper level
    let late = q.replan(&[TreeDemand { lag_secs: 0.5, ..d(1) }, d(2)], 2.0, O, None).clone();
    assert!(late.get(1).unwrap().cost_ns < t1.cost_ns, "{late:?}");
    q.forget(2);
    assert!(q.mix(2).is_none());
}

/// A tree whose writer pauses (idle for admission) keeps the mix it met its rate with: the
/// idle start level assumes all the spare CPU, which a writer coming back does not have, and
/// records compressed at it made the writer wait for its backlog, look idle again, and so on.
#[test]
fn a_tree_going_idle_keeps_its_active_mix() {
    let mut q = QosLevels::new(LevelTunables::default());
    let cands: Vec<Codec> = q.ladder(1).iter().map(|r| r.0).filter(|c| *c != Codec::NONE).collect();
    for c in &cands {
        for _ in 0..16 {
            q.observe(1, &sample(Data::Medium, *c));
            q.observe(2, &sample(Data::Medium, *c));
        }
    }
    let d =
        |tree, rate: f64| TreeDemand { tree, rate_bps: rate * MB, qos_bps: 50.0 * MB, lag_secs: 0.0, max_cores: 2.0 };
    // both trees write at 50 MB/s: each gets its share of the CPU
    let busy = q.replan(&[d(1, 50.0), d(2, 50.0)], 1.0, O, None).clone();
    let mix1 = busy.get(1).unwrap().mix;
    // tree 1 pauses: it keeps its mix, though alone tree 2 could now go stronger
    let p = q.replan(&[d(1, 0.0), d(2, 50.0)], 1.0, O, None).clone();
    assert_eq!(q.mix(1), Some(mix1), "{p:?}");
    assert!(p.get(2).unwrap().cost_ns > busy.get(2).unwrap().cost_ns, "tree 2 takes the CPU: {p:?}");
    // a tree never planned active starts at the idle start level of the plan
    let p = q.replan(&[d(1, 0.0), d(2, 50.0), d(3, 0.0)], 1.0, O, None).clone();
    assert_eq!(q.mix(3), Some(p.get(3).unwrap().mix));
}

/// The share of the cores planned on falls while a tree lags its deadlines (the cores the
/// meter saw were not all there) and comes back while none does; a lagging tree's plan is
/// cheaper for both reasons.
#[test]
fn lagging_trees_lower_the_planned_share_of_the_cores_until_they_catch_up() {
    let tun = LevelTunables::default();
    let mut q = QosLevels::new(tun.clone());
    let d = |lag: f64| TreeDemand { tree: 1, rate_bps: 20.0 * MB, qos_bps: 20.0 * MB, lag_secs: lag, max_cores: 2.0 };
    assert_eq!(q.utilization(), tun.cpu_utilization);
    let on_time = q.replan(&[d(0.0)], 1.0, O, None).get(1).unwrap().cost_ns;
    assert_eq!(q.utilization(), tun.cpu_utilization, "nothing lags: the ceiling");
    for _ in 0..100 {
        q.replan(&[d(0.3)], 1.0, O, None);
    }
    assert_eq!(q.utilization(), tun.min_cpu_utilization, "a lagging tree: down to the floor");
    let late = q.replan(&[d(0.3)], 1.0, O, None).get(1).unwrap().cost_ns;
    assert!(late < on_time, "{late} vs {on_time}");
    // caught up: the share creeps back, slower than it fell
    q.replan(&[d(0.0)], 1.0, O, None);
    let back = q.utilization();
    assert!(back > tun.min_cpu_utilization && back < tun.min_cpu_utilization + tun.utilization_down, "{back}");
    for _ in 0..1000 {
        q.replan(&[d(0.0)], 1.0, O, None);
    }
    assert_eq!(q.utilization(), tun.cpu_utilization);
    // an idle tree's old lag does not count
    q.replan(&[TreeDemand { rate_bps: 0.0, ..d(5.0) }], 1.0, O, None);
    assert_eq!(q.utilization(), tun.cpu_utilization);
}
