//! What one auto decision costs the compress stage: `decide` + `observe` per record, on one
//! thread and on two threads sharing the controller behind one mutex (as the engine's
//! workers do, pipeline levels.rs), against the codec time of a 128 KiB record.
//!
//! ```text
//! cargo run --release -p squeezefs-control --example auto_decide_cost [-- RECORDS]
//! ```
//!
//! Inputs follow a steady device-bound pipeline (100 MB/s device, queue around its target,
//! medium data: the ladder is measured and the position mixes two rungs), so the figure is
//! that of the common path: target on the hull, guard, pick, a meter update and a ladder
//! rebuild per record.

use squeezefs_codec::{Algorithm, Codec, AUTO_DEFAULT_MAX, AUTO_DEFAULT_MIN};
use squeezefs_control::{AutoController, AutoInputs, DeviceView, Sample, Tunables};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const RECORD: u64 = 128 << 10;

/// A codec's nominal figures (medium data): (ns per byte, stored per byte).
fn figures(c: Codec) -> (f64, f64) {
    let n = squeezefs_codec::nominal::nominal(c);
    (1e3 / n.compress_mb_s, 1.0 / n.ratio)
}

fn run(ctl: &Mutex<AutoController>, records: u64, t0: f64, step: f64) -> f64 {
    let dev = [DeviceView { queued_bytes: 8 << 20, throughput_bps: 100e6, free_bytes: u64::MAX }];
    let start = Instant::now();
    for i in 0..records {
        let now = t0 + i as f64 * step;
        let inp = AutoInputs {
            now_secs: now,
            record_bytes: RECORD,
            devices: &dev,
            range_bps: 0.0,
            cores: 2.0,
            workers: 2,
            overhead_ns_per_byte: 1.0,
            store_ns_per_byte: None,
            backlog: i % 3 != 0,
            workers_busy: None,
            cpu_idle: None,
        };
        let d = ctl.lock().unwrap().decide(&inp);
        if d.codec != Codec::NONE {
            let (cost, stored) = figures(d.codec);
            let s = Sample {
                codec: d.codec,
                input_bytes: RECORD,
                stored_bytes: (RECORD as f64 * stored) as u64,
                cpu_ns: (RECORD as f64 * cost) as u64,
            };
            ctl.lock().unwrap().observe(&s);
        }
    }
    start.elapsed().as_nanos() as f64 / records as f64
}

fn main() {
    let records: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let new = || Mutex::new(AutoController::new(AUTO_DEFAULT_MIN, AUTO_DEFAULT_MAX, Tunables::default()));
    // warm up: the ladder measured, the position settled
    let ctl = new();
    run(&ctl, 20_000, 0.0, 1e-3);
    let one = run(&ctl, records, 20.0, 1e-3);
    let ctl = Arc::new(ctl);
    let two: Vec<f64> = (0..2)
        .map(|k| {
            let c = ctl.clone();
            std::thread::spawn(move || run(&c, records, 1000.0 + k as f64 * 1e-4, 1e-3))
        })
        .map(|h| h.join().unwrap())
        .collect();
    // decide alone (no measurement in between: the ladder is not rebuilt)
    let dev = [DeviceView { queued_bytes: 8 << 20, throughput_bps: 100e6, free_bytes: u64::MAX }];
    let t = Instant::now();
    {
        let mut c = ctl.lock().unwrap();
        for i in 0..records {
            let inp = AutoInputs {
                now_secs: 5000.0 + i as f64 * 1e-3,
                record_bytes: RECORD,
                devices: &dev,
                range_bps: 0.0,
                cores: 2.0,
                workers: 2,
                overhead_ns_per_byte: 1.0,
                store_ns_per_byte: None,
                backlog: true,
                workers_busy: None,
                cpu_idle: None,
            };
            std::hint::black_box(c.decide(&inp));
        }
    }
    let decide_only = t.elapsed().as_nanos() as f64 / records as f64;
    let ladder: Vec<String> = ctl.lock().unwrap().ladder().iter().map(|(c, _, _)| c.to_string()).collect();
    let lz4 = RECORD as f64 * figures(Codec { alg: Algorithm::Lz4, level: 1 }).0;
    let zstd1 = RECORD as f64 * figures(Codec { alg: Algorithm::Zstd, level: 1 }).0;
    println!("ladder: {}", ladder.join(" < "));
    println!("one thread:  {one:>7.0} ns per record (decide + observe); decide alone {decide_only:.0} ns");
    println!("two threads: {:>7.0} / {:>7.0} ns per record each, sharing one mutex", two[0], two[1]);
    println!(
        "against the codec time of a 128 KiB record (nominal): lz4 {:.0} µs ({:.2}%), zstd:1 {:.0} µs ({:.2}%)",
        lz4 / 1e3,
        100.0 * one / lz4,
        zstd1 / 1e3,
        100.0 * one / zstd1
    );
}
