//! `compress=auto` in the engine (docs/design.md §8, levels.rs): records of a file under an
//! auto policy get their level from the auto controller, within the spec's MIN..MAX ladder;
//! incompressible data is stored raw without running a codec; the trace (`OpenOptions::trace`)
//! holds one row per record and reads back.

mod common;
use common::*;
use squeezefs_codec::{Algorithm, Codec, Spec};
use squeezefs_control::ladder::candidates;
use squeezefs_control::{read_trace, Reason, Trace};
use squeezefs_pipeline::*;
use std::path::Path;

const MIB: usize = 1 << 20;

/// Log-like text: varied enough that levels differ in ratio (about 3–5), never all alike.
fn logs(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words = ["GET", "PUT", "POST", "DELETE", "/api/v1/items", "/static/app.js", "/login", "/metrics"];
    let mut v = Vec::with_capacity(n + 200);
    while v.len() < n {
        let r = next();
        v.extend_from_slice(
            format!(
                "2026-11-25T10:{:02}:{:02}.{:03}Z host{} {} {} status={} bytes={} took={}ms id={:x}\n",
                r % 60,
                (r >> 8) % 60,
                (r >> 16) % 1000,
                (r >> 26) % 8,
                words[((r >> 29) % 4) as usize],
                words[4 + ((r >> 31) % 4) as usize],
                [200, 200, 200, 304, 404, 500][((r >> 33) % 6) as usize],
                (r >> 36) % 100_000,
                (r >> 40) % 2000,
                next() % 0xffff_ffff,
            )
            .as_bytes(),
        );
    }
    v.truncate(n);
    v
}

fn open(pool: &Path, spec: &str, trace: &Path) -> std::sync::Arc<Engine> {
    Engine::mkfs(pool, &MkfsOptions::default()).unwrap();
    let opts =
        OpenOptions { compression: spec.parse().unwrap(), workers: 2, trace: Some(trace.to_path_buf()), ..fast_opts() };
    Engine::open(pool, &opts).unwrap()
}

fn write_all(e: &Engine, ino: Ino, data: &[u8]) {
    for (i, chunk) in data.chunks(MIB).enumerate() {
        e.write(ino, (i * MIB) as u64, chunk).unwrap();
    }
}

fn trace_of(path: &Path) -> Trace {
    read_trace(std::io::BufReader::new(std::fs::File::open(path).unwrap())).unwrap()
}

/// The levels `auto:min..max` may use: its candidates and raw.
fn allowed(spec: &str) -> Vec<Codec> {
    let Spec::Auto { min, max } = spec.parse::<Spec>().unwrap() else { panic!("{spec} is not auto") };
    let mut v = candidates(min, max);
    v.push(Codec::NONE);
    v
}

#[test]
fn auto_levels_come_from_the_ladder_and_incompressible_records_cost_no_cpu() {
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("trace.csv");
    let e = open(&d.path().join("pool"), "auto", &trace);
    let text = create(&e, "text");
    let rand = create(&e, "random");
    let text_data = logs(7, 24 * MIB);
    let rand_data = noise(3, 8 * MIB);
    // the first half, then noise until the device has written more than it must before its
    // rate is trusted, then until its drain rate is measured (the controller holds its
    // starting level before), then the rest
    let half = text_data.len() / 2;
    write_all(&e, text, &text_data[..half]);
    let filler = create(&e, "filler");
    write_all(&e, filler, &noise(5, RATE_CONFIRM_BYTES as usize));
    e.sync().unwrap();
    let t0 = std::time::Instant::now();
    while e.device_stats()[0].stats.throughput_bps <= 0.0 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "the device's drain rate never came");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for (i, chunk) in text_data[half..].chunks(MIB).enumerate() {
        e.write(text, (half + i * MIB) as u64, chunk).unwrap();
    }
    write_all(&e, rand, &rand_data);
    e.sync().unwrap();
    assert_eq!(read_all(&e, text), text_data);
    assert_eq!(read_all(&e, rand), rand_data);

    // what the extents say (`squeezefs stats` sums these)
    let allowed = allowed("auto");
    let rows = e.usage(text).unwrap();
    assert_eq!(rows.iter().map(|r| r.uncompressed_bytes).sum::<u64>(), text_data.len() as u64);
    for r in &rows {
        let c = Codec { alg: r.alg, level: r.level };
        assert!(allowed.contains(&c), "text stored with {c}, outside auto's ladder: {rows:?}");
    }
    if std::env::var_os("SQUEEZEFS_TEST_DEBUG").is_some() {
        eprintln!("{rows:?}");
    }
    assert!(e.usage(rand).unwrap().iter().all(|r| r.alg == Algorithm::None), "{:?}", e.usage(rand));
    e.close().unwrap();
    drop(e);

    // the trace: one row per record, each within the ladder, read back
    if let Some(to) = std::env::var_os("SQUEEZEFS_TEST_DEBUG") {
        std::fs::copy(&trace, to).unwrap();
    }
    let t = trace_of(&trace);
    assert_eq!(t.devices, 1);
    let of = |ino| t.rows.iter().filter(move |r| r.inode == ino);
    let records = |n: usize| (n / (128 << 10)) as u64;
    assert_eq!(of(text).count() as u64, records(text_data.len()), "one row per record of the text");
    assert_eq!(of(rand).count() as u64, records(rand_data.len()), "one row per record of the noise");
    assert_eq!(of(text).map(|r| r.input_bytes).sum::<u64>(), text_data.len() as u64);
    for r in of(text) {
        assert!(allowed.contains(&r.codec), "trace row with {}: {r:?}", r.codec);
        assert!(
            matches!(r.reason, Reason::Model | Reason::Guard | Reason::Explore | Reason::Hold | Reason::Probe),
            "auto's records carry auto's reasons: {r:?}"
        );
        assert_eq!(r.cpu_ns == 0, r.codec == Codec::NONE, "CPU is measured exactly when a codec ran: {r:?}");
        assert!(r.stored_bytes <= r.input_bytes);
    }
    // before any device write was measured the controller holds its starting level; once
    // the device's drain rate is known (the second half), its model (or the guard on the
    // queue) chooses, seeing the expected queue delay
    let held = of(text).filter(|r| r.reason == Reason::Hold).count() as u64;
    assert!(held <= records(half), "{held} records held after the device was measured");
    assert!(of(text).any(|r| matches!(r.reason, Reason::Model | Reason::Guard)), "no choice by the model");
    assert!(of(text).any(|r| r.queue_delay_secs.is_some()), "no queue delay seen");
    // incompressible records: raw at once, no codec run, no controller asked
    for r in of(rand) {
        assert_eq!((r.codec, r.reason, r.cpu_ns), (Codec::NONE, Reason::Incompressible, 0), "{r:?}");
        assert_eq!(r.stored_bytes, r.input_bytes);
    }
}

#[test]
fn a_narrow_auto_range_keeps_every_record_inside_it() {
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("trace.csv");
    let spec = "auto:lz4:fast=8..lz4";
    let e = open(&d.path().join("pool"), spec, &trace);
    let f = create(&e, "text");
    let data = logs(11, 16 * MIB);
    write_all(&e, f, &data);
    e.close().unwrap();
    drop(e);
    let allowed = allowed(spec);
    // the range is by speed: lz4 accelerations and what lies between them (zstd:-20)
    assert!(allowed.contains(&Codec { alg: Algorithm::Lz4, level: 8 }), "{allowed:?}");
    assert!(!allowed.iter().any(|c| c.alg == Algorithm::Zstd && c.level > 0), "{allowed:?}");
    let t = trace_of(&trace);
    assert_eq!(t.rows.len() as u64, (data.len() / (128 << 10)) as u64);
    for r in &t.rows {
        assert!(allowed.contains(&r.codec), "{} is outside {spec}: {r:?}", r.codec);
    }
    assert!(t.rows.iter().any(|r| r.codec != Codec::NONE), "text compresses");
}

#[test]
fn compress_force_auto_learns_incompressible_data_and_stops_spending_cpu() {
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("trace.csv");
    let pool = d.path().join("pool");
    let e = open(&pool, "auto", &trace);
    e.set_compression("auto".parse().unwrap(), true);
    let f = create(&e, "random");
    let data = noise(5, 32 * MIB);
    write_all(&e, f, &data);
    e.close().unwrap();
    drop(e);
    let t = trace_of(&trace);
    let n = t.rows.len();
    assert_eq!(n, 256);
    // force skips the heuristic: the controller itself measures that nothing saves space
    // (a rung saving under 3% is no rung) and stores raw from then on
    let compressed: Vec<_> = t.rows.iter().filter(|r| r.cpu_ns > 0).collect();
    assert!(!compressed.is_empty(), "force: the controller measured the data itself");
    assert!(compressed.len() <= 24, "{} of {n} records ran a codec on random data", compressed.len());
    assert!(t.rows.iter().all(|r| r.stored_bytes == r.input_bytes), "nothing saved a sector");
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert!(e.usage(f).unwrap().iter().all(|r| r.alg == Algorithm::None));
    assert_eq!(read_all(&e, f), data);
}

#[test]
fn fixed_levels_are_traced_too_and_a_bad_trace_path_refuses_the_open() {
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("trace.csv");
    let pool = d.path().join("pool");
    let e = open(&pool, "zstd:1", &trace);
    let f = create(&e, "text");
    write_all(&e, f, &logs(1, 2 * MIB));
    e.close().unwrap();
    drop(e);
    let zstd1 = Codec { alg: Algorithm::Zstd, level: 1 };
    let t = trace_of(&trace);
    assert_eq!(t.rows.len(), 16);
    assert!(t.rows.iter().all(|r| r.codec == zstd1 && r.reason == Reason::Fixed && r.cpu_ns > 0), "{:?}", t.rows);

    let bad = d.path().join("no-such-dir").join("t.csv");
    let opts = OpenOptions { trace: Some(bad.clone()), ..fast_opts() };
    let err = match Engine::open(&pool, &opts) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened with a trace in a missing directory"),
    };
    assert!(err.contains("trace file") && err.contains(&bad.display().to_string()), "{err}");
    // the refused open left the pool closed: it opens again
    Engine::open(&pool, &fast_opts()).unwrap().close().unwrap();
}

/// The `auto_start` rows of a closed pool: (range's spec text, codec).
fn auto_starts(pool: &Path) -> Vec<(String, Codec)> {
    use redb::{ReadableDatabase, ReadableTable};
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let Ok(t) = rx.open_table(squeezefs_meta::tables::AUTO_START) else { return Vec::new() };
    t.iter()
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            let a = squeezefs_meta::AutoStart::decode(v.value()).unwrap();
            let c = Codec { alg: Algorithm::from_id(a.alg).unwrap(), level: a.level };
            (String::from_utf8(k.value().to_vec()).unwrap(), c)
        })
        .collect()
}

/// The codec of the first record the auto controller decided in a trace.
fn first_auto_decision(trace: &Path) -> Codec {
    let t = trace_of(trace);
    let r = t.rows.iter().find(|r| r.reason != Reason::Incompressible).expect("an auto decision");
    r.codec
}

/// Reopen `pool` under auto with a trace, write 2 MiB of text, close: the trace's first
/// auto decision.
fn reopen_and_write(pool: &Path, trace: &Path) -> Codec {
    let opts = OpenOptions {
        compression: "auto".parse().unwrap(),
        workers: 2,
        trace: Some(trace.to_path_buf()),
        ..fast_opts()
    };
    let e = Engine::open(pool, &opts).unwrap();
    let f = create(&e, &format!("more-{}", trace.display().to_string().len()));
    write_all(&e, f, &logs(21, 2 * MIB));
    e.close().unwrap();
    drop(e);
    first_auto_decision(trace)
}

#[test]
fn the_rung_a_write_ended_on_is_kept_across_reopens() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let t1 = d.path().join("t1.csv");
    let e = open(&pool, "auto", &t1);
    let f = create(&e, "text");
    write_all(&e, f, &logs(11, 16 * MIB));
    e.close().unwrap();
    drop(e);
    // the commit wrote the controller's rung, with the compat bit
    let rows = auto_starts(&pool);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (key, ended) = rows[0].clone();
    assert_eq!(key, "auto");
    assert!(allowed("auto").contains(&ended), "{ended}");
    let t = trace_of(&t1);
    let last: Vec<Codec> =
        t.rows.iter().filter(|r| r.reason != Reason::Incompressible).rev().take(32).map(|r| r.codec).collect();
    assert!(last.contains(&ended), "{ended} is not among the write's last decisions {last:?}");
    // a reopened engine's first decision is at that rung
    assert_eq!(reopen_and_write(&pool, &d.path().join("t2.csv")), ended);
    // and at whatever rung the store holds: one other than the nominal start
    let other = if ended == Codec::NONE { *candidates_of("auto").last().unwrap() } else { Codec::NONE };
    {
        let db = Engine::open_meta_store(&pool).unwrap();
        let tx = db.begin_write().unwrap();
        let v = squeezefs_meta::AutoStart { alg: other.alg.id(), level: other.level }.encode();
        tx.open_table(squeezefs_meta::tables::AUTO_START).unwrap().insert(&b"auto"[..], &v[..]).unwrap();
        tx.commit().unwrap();
    }
    assert_eq!(reopen_and_write(&pool, &d.path().join("t3-longer.csv")), other);
}

/// `auto:MIN..MAX`'s feedback ladder, fastest first.
fn candidates_of(spec: &str) -> Vec<Codec> {
    let Spec::Auto { min, max } = spec.parse::<Spec>().unwrap() else { panic!("{spec} is not auto") };
    squeezefs_control::feedback::Feedback::new(
        &candidates(min, max),
        Codec { alg: Algorithm::Zstd, level: 1 },
        Default::default(),
    )
    .spine()
    .to_vec()
}
