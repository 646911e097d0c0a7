//! A synthetic write pipeline to drive the auto controller over time: an application writing
//! as fast as it can, compress workers sharing some cores, one device draining a FIFO queue at
//! a fixed speed, dirty data bounded. Codec figures per data set come from docs/design.md §14
//! (medium), `squeezefs bench` on the corpus xml (highly compressible ratios) and on
//! /dev/urandom (incompressible speeds); levels §14 does not list are interpolated.

#![allow(dead_code)]

use squeezefs_codec::{Algorithm, Codec};
use squeezefs_control::{AutoController, AutoInputs, DeviceMeter, Reason, Sample};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data {
    Medium,
    Incompressible,
    High,
}

impl Data {
    pub fn name(self) -> &'static str {
        match self {
            Data::Medium => "medium",
            Data::Incompressible => "incompressible",
            Data::High => "high",
        }
    }
}

fn c(alg: Algorithm, level: i32) -> Codec {
    Codec { alg, level }
}

/// (codec, MB/s per core, ratio) of every candidate, per data set.
pub fn table(data: Data) -> Vec<(Codec, f64, f64)> {
    use Algorithm::*;
    let rows: &[(Algorithm, i32, f64, f64, f64, f64, f64)] = &[
        // alg, level, medium MB/s, medium ratio, high MB/s, high ratio, random MB/s
        (Lz4, 64, 2400.0, 1.20, 3000.0, 2.00, 15000.0),
        (Lz4, 32, 1800.0, 1.45, 2300.0, 2.48, 14000.0),
        (Lz4, 16, 1130.0, 1.90, 1500.0, 3.03, 8600.0),
        (Lz4, 8, 880.0, 2.20, 1200.0, 3.50, 7100.0),
        (Lz4, 4, 770.0, 2.38, 1050.0, 3.85, 7000.0),
        (Lz4, 2, 710.0, 2.48, 950.0, 4.08, 6100.0),
        (Lz4, 1, 665.0, 2.55, 900.0, 4.21, 6900.0),
        (Zstd, -20, 900.0, 1.80, 1150.0, 2.72, 7600.0),
        (Zstd, -10, 680.0, 2.10, 900.0, 3.40, 6700.0),
        (Zstd, -5, 520.0, 2.46, 700.0, 4.25, 6700.0),
        (Zstd, -3, 480.0, 2.80, 650.0, 4.81, 6400.0),
        (Zstd, -2, 455.0, 3.00, 620.0, 5.12, 5900.0),
        (Zstd, -1, 430.0, 3.20, 580.0, 5.37, 7800.0),
        (Lz4Hc, 1, 190.0, 2.95, 300.0, 4.84, 4600.0),
        (Zstd, 1, 358.0, 3.73, 480.0, 6.61, 5300.0),
        (Zstd, 2, 300.0, 3.83, 400.0, 6.46, 5200.0),
        (Zstd, 3, 255.0, 3.93, 345.0, 6.98, 4900.0),
        (Zstd, 4, 235.0, 3.92, 320.0, 6.89, 4100.0),
        (Deflate, 1, 110.0, 3.30, 160.0, 5.87, 100.0),
        (Zstd, 5, 140.0, 4.02, 190.0, 7.35, 2600.0),
        (Deflate, 3, 85.0, 3.45, 120.0, 6.51, 73.0),
        (Zstd, 6, 110.0, 4.08, 150.0, 7.74, 2600.0),
        (Zstd, 7, 90.0, 4.12, 120.0, 7.93, 2660.0),
        (Deflate, 6, 38.0, 3.62, 55.0, 7.48, 71.0),
        (Lz4Hc, 9, 33.0, 3.30, 45.0, 6.35, 38.0),
        (Zstd, 8, 72.0, 4.17, 97.0, 8.07, 2700.0),
        (Zstd, 9, 57.0, 4.22, 77.0, 8.18, 2575.0),
        (Zstd, 10, 45.0, 4.24, 60.0, 8.27, 2230.0),
        (Deflate, 9, 19.0, 3.66, 25.0, 7.83, 64.0),
        (Zstd, 11, 33.0, 4.25, 45.0, 8.27, 590.0),
        (Zstd, 12, 28.0, 4.26, 38.0, 8.30, 550.0),
        (Zstd, 13, 12.0, 4.36, 16.0, 7.88, 33.0),
        (Zstd, 14, 9.0, 4.41, 12.0, 8.34, 20.0),
        (Zstd, 15, 6.6, 4.44, 9.0, 8.61, 21.0),
        (Zstd, 16, 5.0, 4.46, 6.5, 8.65, 17.0),
        (Zstd, 17, 4.0, 4.48, 5.0, 8.67, 24.0),
        (Zstd, 18, 3.0, 4.49, 4.0, 8.67, 19.0),
        (Zstd, 19, 2.4, 4.50, 3.0, 8.69, 10.0),
    ];
    rows.iter()
        .map(|&(alg, level, mm, mr, hm, hr, rm)| {
            let (mbs, ratio) = match data {
                Data::Medium => (mm, mr),
                Data::High => (hm, hr),
                Data::Incompressible => (rm, 1.0),
            };
            (c(alg, level), mbs, ratio)
        })
        .collect()
}

pub fn figures(data: Data, codec: Codec) -> (f64, f64) {
    if codec.alg == Algorithm::None {
        return (f64::INFINITY, 1.0);
    }
    table(data)
        .into_iter()
        .find(|r| r.0 == codec)
        .map(|r| (r.1, r.2))
        .unwrap_or_else(|| panic!("no simulated figures for {codec}"))
}

#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub device_mb_s: f64,
    pub cores: f64,
    /// cores the controller is told it has (a CPU hog makes this less than `cores`)
    pub cores_reported: f64,
    pub workers: usize,
    /// pipeline CPU outside the codec, ns per input byte…
    pub overhead_ns: f64,
    /// …and per stored byte (copy, checksum, the write's kernel time)
    pub store_ns: f64,
    /// CPU per input byte that no meter of the pipeline sees (the kernel's side of the FUSE
    /// round trips, a loop device's worker, the host filesystem under it), ns
    pub hidden_ns: f64,
    /// CPU per input byte a compressed record (not a raw one) costs that neither the codec's
    /// clock nor any meter sees (the output buffer's allocation and copy, the cache misses
    /// compressing leaves the rest of the pipeline), ns
    pub hidden_compress_ns: f64,
    /// what the controller is told the overhead is, as a factor on the true figure per
    /// input byte (averaged over the records finished, as the pipeline's meter does)
    pub overhead_reported: f64,
    pub data: Data,
    pub total_bytes: u64,
    pub record: u64,
    pub dirty_max: u64,
    /// relative spread of per-record cost and ratio (uniform ±)
    pub cost_noise: f64,
    pub ratio_noise: f64,
    pub seed: u64,
}

impl Setup {
    pub fn new(device_mb_s: f64, cores: f64, data: Data) -> Setup {
        Setup {
            device_mb_s,
            cores,
            cores_reported: cores,
            workers: 2,
            overhead_ns: 0.2,
            store_ns: 2.5,
            overhead_reported: 1.0,
            hidden_ns: 0.0,
            hidden_compress_ns: 0.0,
            data,
            total_bytes: 1 << 30,
            record: 128 << 10,
            dirty_max: 256 << 20,
            cost_noise: 0.15,
            ratio_noise: 0.08,
            seed: 0x5eed,
        }
    }
}

pub enum Policy {
    Fixed(Codec),
    Auto(Box<AutoController>),
}

/// One simulated record, for traces and checks.
#[derive(Clone, Debug)]
pub struct Rec {
    /// when its compression finished, seconds
    pub t: f64,
    /// when its level was chosen, seconds
    pub decided: f64,
    pub codec: Codec,
    pub reason: Reason,
    pub input: u64,
    pub stored: u64,
    pub cpu_ns: u64,
    pub queue_delay: Option<f64>,
    /// bytes queued on the device when its level was chosen
    pub queued: u64,
    /// the controller's queue correction when it decided
    pub gain: f64,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub secs: f64,
    pub input: u64,
    pub stored: u64,
    pub recs: Vec<Rec>,
}

impl Outcome {
    pub fn mb_s(&self) -> f64 {
        self.input as f64 / self.secs / 1e6
    }
    pub fn ratio(&self) -> f64 {
        self.input as f64 / self.stored as f64
    }
}

struct Rng(u64);
impl Rng {
    /// uniform in [-1, 1)
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

struct Job {
    rec: Rec,
    /// CPU nanoseconds of work left (codec + overhead)
    left: f64,
}

/// Run the pipeline until `total_bytes` are written; `data_at` may change the data set over
/// the input offset (for data-change runs).
pub fn run(s: &Setup, policy: &mut Policy, data_at: &dyn Fn(u64) -> Data) -> Outcome {
    let mut rng = Rng(s.seed | 1);
    let dev_bpns = s.device_mb_s * 1e6 / 1e9; // bytes per ns
    let mut t = 0.0f64; // ns
    let mut workers: Vec<Option<Job>> = (0..s.workers).map(|_| None).collect();
    let mut queue: VecDeque<Rec> = VecDeque::new();
    let mut queued_stored = 0u64;
    let mut queued_input = 0u64;
    let mut writing: Option<(Rec, f64, f64)> = None; // record, bytes left, started at
    let mut meter = DeviceMeter::new();
    let (mut issued, mut written_input, mut written_stored) = (0u64, 0u64, 0u64);
    let mut in_flight = 0u64;
    let mut recs = Vec::new();
    // the overhead meter: pipeline CPU beyond the codec per input byte, 0 until a record
    // is done
    let mut overhead_avg = 0.0f64;
    loop {
        // start records on idle workers while dirty data allows
        for w in workers.iter_mut() {
            if w.is_some() || issued >= s.total_bytes || in_flight + queued_input + s.record > s.dirty_max {
                continue;
            }
            let input = s.record.min(s.total_bytes - issued);
            let data = data_at(issued);
            issued += input;
            in_flight += input;
            let views = [meter.view(u64::MAX)];
            let queued_now = views[0].queued_bytes;
            let (codec, reason, qd, gain) = match policy {
                Policy::Fixed(c) => (*c, Reason::Fixed, None, 1.0),
                Policy::Auto(a) => {
                    let d = a.decide(&AutoInputs {
                        now_secs: t * 1e-9,
                        record_bytes: input,
                        devices: &views,
                        range_bps: views[0].throughput_bps,
                        cores: s.cores_reported,
                        workers: s.workers,
                        overhead_ns_per_byte: s.overhead_reported * overhead_avg,
                        store_ns_per_byte: (overhead_avg > 0.0).then_some(s.overhead_reported * s.store_ns),
                        backlog: issued < s.total_bytes,
                        workers_busy: None,
                        cpu_idle: None,
                    });
                    (d.codec, d.reason, d.queue_delay_secs, a.gain())
                }
            };
            let (mbs, ratio) = figures(data, codec);
            let codec_ns = if codec.alg == Algorithm::None {
                0.0
            } else {
                1000.0 / mbs * input as f64 * (1.0 + s.cost_noise * rng.next())
            };
            // noise on the saving: raw and incompressible records stay at ratio 1
            let ratio = 1.0 + (ratio - 1.0) * (1.0 + s.ratio_noise * rng.next()).max(0.0);
            let mut stored = (input as f64 / ratio).round() as u64;
            if stored + 512 > input {
                stored = input; // does not save a sector: stored raw
            }
            let rec = Rec {
                t: 0.0,
                decided: t * 1e-9,
                codec,
                reason,
                input,
                stored,
                cpu_ns: codec_ns as u64,
                queue_delay: qd,
                queued: queued_now,
                gain,
            };
            let overhead = s.overhead_ns * input as f64 + s.store_ns * stored as f64;
            overhead_avg = if overhead_avg == 0.0 {
                overhead / input as f64
            } else {
                0.95 * overhead_avg + 0.05 * overhead / input as f64
            };
            let hidden = s.hidden_ns + if codec.alg == Algorithm::None { 0.0 } else { s.hidden_compress_ns };
            *w = Some(Job { rec, left: codec_ns + overhead + hidden * input as f64 });
        }
        if writing.is_none() {
            if let Some(r) = queue.pop_front() {
                let b = r.stored as f64;
                writing = Some((r, b, t));
            }
        }
        let busy = workers.iter().filter(|w| w.is_some()).count();
        if busy == 0 && writing.is_none() {
            break;
        }
        let speed = if busy == 0 { 0.0 } else { (s.cores / busy as f64).min(1.0) };
        // next event
        let mut dt = f64::INFINITY;
        for j in workers.iter().flatten() {
            dt = dt.min(j.left / speed);
        }
        if let Some((_, left, _)) = &writing {
            dt = dt.min(left / dev_bpns);
        }
        let dt = dt.max(0.0);
        t += dt;
        for w in workers.iter_mut() {
            let done = match w {
                Some(j) => {
                    j.left -= speed * dt;
                    j.left <= 1e-6
                }
                None => false,
            };
            if done {
                let mut job = w.take().unwrap();
                in_flight -= job.rec.input;
                job.rec.t = t * 1e-9;
                if let Policy::Auto(a) = policy {
                    if job.rec.codec.alg != Algorithm::None {
                        a.observe(&Sample {
                            codec: job.rec.codec,
                            input_bytes: job.rec.input,
                            stored_bytes: job.rec.stored,
                            cpu_ns: job.rec.cpu_ns,
                        });
                    }
                }
                queued_stored += job.rec.stored;
                queued_input += job.rec.input;
                meter.set_queued(t * 1e-9, queued_stored);
                recs.push(job.rec.clone());
                queue.push_back(job.rec);
            }
        }
        let mut finished = false;
        if let Some((_, left, _)) = &mut writing {
            *left -= dev_bpns * dt;
            finished = *left <= 1e-6;
        }
        if finished {
            let (r, _, started) = writing.take().unwrap();
            queued_stored -= r.stored;
            queued_input -= r.input;
            written_input += r.input;
            written_stored += r.stored;
            meter.record_write(r.stored, (t - started) * 1e-9);
            meter.set_queued(t * 1e-9, queued_stored);
        }
    }
    Outcome { secs: t * 1e-9, input: written_input, stored: written_stored, recs }
}

/// Write an outcome as a trace file (one device, no QoS tree).
pub fn write_trace(o: &Outcome, path: &std::path::Path) -> std::io::Result<()> {
    use squeezefs_control::{TraceRow, TraceWriter};
    let mut w = TraceWriter::create(path, 1)?;
    for r in &o.recs {
        let q = [r.queued];
        w.write(&TraceRow {
            time_s: r.decided,
            inode: 2,
            tree: 0,
            codec: r.codec,
            reason: r.reason,
            input_bytes: r.input,
            stored_bytes: r.stored,
            cpu_ns: r.cpu_ns,
            queue_delay_secs: r.queue_delay,
            queued: std::borrow::Cow::Borrowed(&q),
        })?;
    }
    w.flush()
}
