//! The compress-queue scheduler with simulated workers: a 100 MB/s tree meets its deadlines
//! while a 10 MB/s tree compresses at zstd:15 next to it; a FIFO queue with the same records
//! does not.

mod sim;

use sim::{figures, Data};
use squeezefs_codec::{Algorithm, Codec};
use squeezefs_control::qos::{CompressScheduler, SchedTunables, TreeId};

const REC: u64 = 128 << 10;
const O: f64 = 1.0;

/// A record: tree, pushed at, bytes, CPU ns.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    tree: TreeId,
    t: f64,
    cost_ns: f64,
}

/// Writes of 1 MiB (8 records) at `rate_mb` MB/s from `start` to `end`, at `codec` on medium data.
fn writes(tree: TreeId, rate_mb: f64, codec: Codec, start: f64, end: f64) -> Vec<Arrival> {
    let ns = 1000.0 / figures(Data::Medium, codec).0 + O;
    let every = (8 * REC) as f64 / (rate_mb * 1e6);
    let mut v = Vec::new();
    let mut t = start;
    while t < end {
        for _ in 0..8 {
            v.push(Arrival { tree, t, cost_ns: ns * REC as f64 });
        }
        t += every;
    }
    v
}

/// A finished record: tree, pushed, finished.
#[derive(Clone, Copy, Debug)]
struct Done {
    tree: TreeId,
    pushed: f64,
    finished: f64,
}

/// Run `arrivals` (sorted by time) through `sched` on `workers` workers of one core each.
fn run(sched: &mut CompressScheduler<Arrival>, arrivals: &[Arrival], workers: usize) -> Vec<Done> {
    let mut free_at = vec![0.0f64; workers];
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        // the earliest a worker frees
        let (w, &t_free) = free_at.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).unwrap();
        // everything pushed by then is in the queue
        while next < arrivals.len() && arrivals[next].t <= t_free {
            let a = arrivals[next];
            sched.push(a.tree, REC, a.cost_ns, a.t, a);
            next += 1;
        }
        if sched.is_empty() {
            if next == arrivals.len() {
                return out;
            }
            free_at[w] = arrivals[next].t;
            continue;
        }
        let j = sched.pop(t_free).unwrap();
        let start = t_free.max(j.pushed);
        let finished = start + j.cost_ns * 1e-9;
        free_at[w] = finished;
        out.push(Done { tree: j.tree, pushed: j.pushed, finished });
    }
}

/// Virtual-clock deadlines of `done` records of a tree at `rate_mb` (F + slack), and lateness.
fn lateness(done: &[Done], tree: TreeId, rate_mb: f64, slack: f64) -> Vec<f64> {
    let mut mine: Vec<&Done> = done.iter().filter(|d| d.tree == tree).collect();
    mine.sort_by(|a, b| a.pushed.total_cmp(&b.pushed));
    let mut f = f64::NEG_INFINITY;
    mine.iter()
        .map(|d| {
            f = f.max(d.pushed) + REC as f64 / (rate_mb * 1e6);
            d.finished - (f + slack)
        })
        .collect()
}

fn mb_s(done: &[Done], tree: TreeId, from: f64, to: f64) -> f64 {
    done.iter().filter(|d| d.tree == tree && d.finished >= from && d.finished < to).count() as f64 * REC as f64
        / (to - from)
        / 1e6
}

const LZ4: Codec = Codec { alg: Algorithm::Lz4, level: 1 };
const ZSTD15: Codec = Codec { alg: Algorithm::Zstd, level: 15 };

#[test]
fn a_fast_tree_is_not_stuck_behind_a_slow_trees_zstd_15() {
    let mut arrivals = writes(1, 100.0, LZ4, 0.0, 10.0);
    arrivals.extend(writes(2, 10.0, ZSTD15, 0.0, 10.0));
    arrivals.sort_by(|a, b| a.t.total_cmp(&b.t));
    let tun = SchedTunables::default();
    let slack = tun.deadline_slack_secs;
    let mut edf = CompressScheduler::new(tun.clone());
    edf.set_rate(1, 100e6);
    edf.set_rate(2, 10e6);
    let done = run(&mut edf, &arrivals, 2);
    // FIFO: the same records in push order (every record unpaced with the same slack)
    let mut fifo = CompressScheduler::new(tun);
    let done_fifo = run(&mut fifo, &arrivals, 2);
    let worst = |v: Vec<f64>| v.into_iter().fold(f64::NEG_INFINITY, f64::max);
    let (fast, slow) = (worst(lateness(&done, 1, 100.0, slack)), worst(lateness(&done, 2, 10.0, slack)));
    let fast_fifo = worst(lateness(&done_fifo, 1, 100.0, slack));
    println!(
        "EDF: fast tree worst lateness {:.1} ms, slow tree {:.1} ms; FIFO: fast tree {:.1} ms",
        fast * 1e3,
        slow * 1e3,
        fast_fifo * 1e3
    );
    assert!(fast <= 0.0, "the 100 MB/s tree missed a deadline by {:.1} ms", fast * 1e3);
    assert!(fast_fifo > 0.0, "FIFO should miss: {:.1} ms", fast_fifo * 1e3);
    // both trees are compressed at their rates
    for s in 1..9 {
        let (from, to) = (s as f64, s as f64 + 1.0);
        let (f, w) = (mb_s(&done, 1, from, to), mb_s(&done, 2, from, to));
        assert!((f - 100.0).abs() < 5.0 && (w - 10.0).abs() < 2.0, "second {s}: fast {f:.1}, slow {w:.1}");
    }
    // and the slow tree's own lateness is bounded by one record's compression time
    let one = figures(Data::Medium, ZSTD15).0;
    assert!(slow <= REC as f64 / (one * 1e6), "slow tree {:.1} ms late", slow * 1e3);
}

#[test]
fn a_tree_over_its_rate_delays_only_itself() {
    // tree 2 claims 10 MB/s but pushes 40 MB/s of zstd:9 records: only its own deadlines slip
    let z9 = Codec { alg: Algorithm::Zstd, level: 9 };
    let mut arrivals = writes(1, 100.0, LZ4, 0.0, 5.0);
    arrivals.extend(writes(2, 40.0, z9, 0.0, 5.0));
    arrivals.sort_by(|a, b| a.t.total_cmp(&b.t));
    let tun = SchedTunables::default();
    let slack = tun.deadline_slack_secs;
    let mut s = CompressScheduler::new(tun);
    s.set_rate(1, 100e6);
    s.set_rate(2, 10e6);
    let done = run(&mut s, &arrivals, 2);
    let fast = lateness(&done, 1, 100.0, slack).into_iter().fold(f64::NEG_INFINITY, f64::max);
    assert!(fast <= 0.0, "{:.1} ms", fast * 1e3);
}

#[test]
fn unpaced_records_get_the_cpu_qos_trees_leave() {
    // a QoS tree needs half the worker; records outside QoS trees get the rest
    let z3 = Codec { alg: Algorithm::Zstd, level: 3 };
    let mut arrivals = writes(1, 100.0, z3, 0.0, 3.0);
    arrivals.extend(writes(0, 50.0, z3, 0.0, 3.0));
    arrivals.sort_by(|a, b| a.t.total_cmp(&b.t));
    let tun = SchedTunables::default();
    let slack = tun.deadline_slack_secs;
    let mut s = CompressScheduler::new(tun);
    s.set_rate(1, 100e6);
    let done = run(&mut s, &arrivals, 1);
    let fast = lateness(&done, 1, 100.0, slack).into_iter().fold(f64::NEG_INFINITY, f64::max);
    assert!(fast <= 0.0, "{:.1} ms", fast * 1e3);
    let worst = done.iter().filter(|d| d.tree == 0).map(|d| d.finished - d.pushed).fold(0.0, f64::max);
    assert!(worst < 0.1, "an unpaced record waited {:.1} ms", worst * 1e3);
    assert!(mb_s(&done, 0, 0.5, 2.5) > 45.0, "{:.1}", mb_s(&done, 0, 0.5, 2.5));
}
