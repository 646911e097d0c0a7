//! `squeezefs plot` on a generated trace: a PNG of the asked size comes out; bad input gets one
//! clear line.

use squeezefs_codec::{Algorithm, Codec};
use squeezefs_control::{Reason, TraceRow, TraceWriter};
use std::borrow::Cow;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_squeezefs");

fn squeezefs(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run squeezefs")
}

/// Three seconds of a two-device pool: a sawtooth queue per device, the level moving between
/// zstd:1 and zstd:3 with explorations and guard steps, two QoS trees.
fn write_trace(path: &Path) {
    let mut w = TraceWriter::create(path, 2).unwrap();
    let zstd = |l| Codec { alg: Algorithm::Zstd, level: l };
    for i in 0..3000u64 {
        let t = i as f64 * 1e-3;
        let phase = (i % 500) as f64 / 500.0;
        let queued = [(phase * 8e6) as u64, ((1.0 - phase) * 4e6) as u64];
        let (codec, reason) = match i % 50 {
            0 => (zstd(9), Reason::Explore),
            7 => (Codec::NONE, Reason::Guard),
            _ if i % 3 == 0 => (zstd(3), Reason::Model),
            _ => (zstd(1), Reason::Model),
        };
        let stored = if codec == Codec::NONE { 131072 } else { 131072 / (3 + (i % 2)) };
        w.write(&TraceRow {
            time_s: t,
            inode: 100 + i % 4,
            tree: if i % 4 == 0 { 0 } else { 17 },
            codec,
            reason,
            input_bytes: 131072,
            stored_bytes: stored,
            cpu_ns: if codec == Codec::NONE { 0 } else { 300_000 + (i % 7) * 40_000 },
            queue_delay_secs: (i > 5).then_some(phase * 0.08),
            queued: Cow::Borrowed(&queued),
        })
        .unwrap();
    }
    w.flush().unwrap();
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

#[test]
fn plot_draws_a_png_of_the_asked_size() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    write_trace(&trace);
    let png = dir.path().join("trace.png");
    let out = squeezefs(&["plot", trace.to_str().unwrap(), "-o", png.to_str().unwrap(), "--size", "1200x900"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(png_size(&bytes), (1200, 900));
    assert!(bytes.len() > 20_000, "a PNG of four panels with data, not a blank: {} bytes", bytes.len());
    // the default size
    let png2 = dir.path().join("default.png");
    assert!(squeezefs(&["plot", trace.to_str().unwrap(), "-o", png2.to_str().unwrap()]).status.success());
    assert_eq!(png_size(&std::fs::read(&png2).unwrap()), (1600, 1200));
    if let Ok(keep) = std::env::var("SQUEEZEFS_KEEP_PLOT") {
        std::fs::copy(&png, keep).unwrap();
    }
}

#[test]
fn plot_errors_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    write_trace(&trace);
    let png = dir.path().join("p.png");
    let png_s = png.to_str().unwrap();
    let check = |args: &[&str], phrases: &[&str]| {
        let out = squeezefs(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        for p in phrases {
            assert!(err.contains(p), "{p:?} missing from {err}");
        }
    };
    let missing = dir.path().join("nope.csv");
    check(&["plot", missing.to_str().unwrap(), "-o", png_s], &["cannot read", "nope.csv"]);
    let junk = dir.path().join("junk.csv");
    std::fs::write(&junk, "a,b\n1,2\n").unwrap();
    check(&["plot", junk.to_str().unwrap(), "-o", png_s], &["junk.csv", "not a squeezefs trace"]);
    let empty = dir.path().join("empty.csv");
    TraceWriter::create(&empty, 1).unwrap().flush().unwrap();
    check(&["plot", empty.to_str().unwrap(), "-o", png_s], &["no records"]);
    check(&["plot", trace.to_str().unwrap(), "-o", "x.jpg"], &["PNG"]);
    check(&["plot", trace.to_str().unwrap(), "-o", png_s, "--size", "12"], &["WIDTHxHEIGHT"]);
    assert!(!png.exists(), "a refused plot wrote no file");
}
