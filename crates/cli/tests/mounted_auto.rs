//! `compress=auto` on a real mount: the levels auto chose show in `squeezefs stats` (per
//! tree and per file, with their share of the data), `trace=FILE` gets one row per record,
//! and `squeezefs plot` draws it; bad `trace=` values refuse the mount.
mod mounted_common;
use mounted_common::*;
use squeezefs_codec::{Codec, AUTO_DEFAULT_MAX, AUTO_DEFAULT_MIN};
use squeezefs_control::ladder::candidates;
use squeezefs_control::{read_trace, Reason};
use std::path::Path;

/// Log-like text (compresses about 2–4 times, differently at each level).
fn logs(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 200);
    let mut x = 0x2545F4914F6CDD1Du64;
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(
            format!(
                "2026-11-25T10:{:02}:{:02} host{} GET /api/v1/items/{} status={} took={}ms\n",
                x % 60,
                (x >> 8) % 60,
                (x >> 16) % 8,
                (x >> 20) % 5000,
                [200, 200, 304, 404, 500][((x >> 34) % 5) as usize],
                (x >> 40) % 900
            )
            .as_bytes(),
        );
    }
    v.truncate(n);
    v
}

fn random(n: usize) -> Vec<u8> {
    let mut x = 88172645463325252u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `squeezefs stats --json PATH`: (spec, uncompressed bytes, share %) per level, and the total.
fn stats(p: &Path) -> (Vec<(String, u64, f64)>, u64) {
    let out = run(&["stats", "--json", p.to_str().unwrap()]);
    assert!(out.status.success(), "stats: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["spec"].as_str().unwrap().to_string(),
                r["uncompressed_bytes"].as_u64().unwrap(),
                r["share_percent"].as_f64().unwrap(),
            )
        })
        .collect();
    (rows, v["total"]["uncompressed_bytes"].as_u64().unwrap())
}

#[test]
fn auto_levels_show_in_stats_and_the_trace_plots() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    let mut m = Mounted::new(&format!("compress=auto,trace={}", trace.display()));
    let text = logs(12 << 20);
    let noise = random(4 << 20);
    std::fs::create_dir(m.path("logs")).unwrap();
    std::fs::write(m.path("logs/app.log"), &text).unwrap();
    std::fs::write(m.path("random.bin"), &noise).unwrap();

    // the whole mount: levels from auto's ladder (and raw), shares adding up to 100%
    let mut allowed: Vec<String> =
        candidates(AUTO_DEFAULT_MIN, AUTO_DEFAULT_MAX).iter().map(|c| c.to_string()).collect();
    allowed.push("none".into());
    let (rows, total) = stats(&m.mnt);
    assert_eq!(total, (text.len() + noise.len()) as u64);
    for (spec, _, _) in &rows {
        assert!(allowed.contains(spec), "{spec} is not a level of auto: {rows:?}");
    }
    let shares: f64 = rows.iter().map(|r| r.2).sum();
    assert!((shares - 100.0).abs() < 0.5, "{rows:?}");
    // the random file: raw only; the log tree: all its bytes, in auto's levels
    let (rows, total) = stats(&m.path("random.bin"));
    assert_eq!((rows.len(), rows[0].0.as_str(), total), (1, "none", noise.len() as u64), "{rows:?}");
    let (rows, total) = stats(&m.path("logs"));
    assert_eq!(total, text.len() as u64);
    assert!(rows.iter().all(|r| allowed.contains(&r.0)), "{rows:?}");
    // the text form shows the same levels with their shares
    let out = run(&["stats", m.mnt.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("compress=auto") && shown.contains("Share"), "{shown}");
    assert_eq!(std::fs::read(m.path("logs/app.log")).unwrap(), text);
    use std::os::unix::fs::MetadataExt;
    let (text_ino, noise_ino) = (
        std::fs::metadata(m.path("logs/app.log")).unwrap().ino(),
        std::fs::metadata(m.path("random.bin")).unwrap().ino(),
    );
    m.umount();

    // the trace: a row per record of both files, auto's reasons for the text, and it plots
    let t = read_trace(std::io::BufReader::new(std::fs::File::open(&trace).unwrap())).unwrap();
    let records = |n: usize| n / (128 << 10);
    assert_eq!(t.rows.len(), records(text.len()) + records(noise.len()));
    let auto_reason =
        |r: Reason| matches!(r, Reason::Model | Reason::Guard | Reason::Explore | Reason::Hold | Reason::Probe);
    let text_rows: Vec<_> = t.rows.iter().filter(|r| r.inode == text_ino).collect();
    assert_eq!(text_rows.len(), records(text.len()));
    for r in &text_rows {
        assert!(auto_reason(r.reason), "a text record's level was not auto's: {r:?}");
        assert!(allowed.contains(&r.codec.to_string()), "{r:?}");
    }
    assert!(text_rows.iter().any(|r| r.codec != Codec::NONE), "auto compressed some text");
    let noise_rows: Vec<_> = t.rows.iter().filter(|r| r.inode == noise_ino).collect();
    assert_eq!(noise_rows.len(), records(noise.len()));
    assert!(noise_rows.iter().all(|r| r.reason == Reason::Incompressible && r.cpu_ns == 0), "{noise_rows:?}");
    let png = dir.path().join("trace.png");
    run_ok(&["plot", trace.to_str().unwrap(), "-o", png.to_str().unwrap()]);
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000, "{} bytes", bytes.len());
}

#[test]
fn a_trace_file_on_the_mount_or_nowhere_refuses_the_mount() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("sqzmnt").tempdir_in("/tmp").unwrap();
    let pool = dir.path().join("pool");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run_ok(&["mkfs", pool.to_str().unwrap()]);
    let refused = |opt: String, want: &str| {
        let out = run(&["mount", pool.to_str().unwrap(), mnt.to_str().unwrap(), "-o", &opt]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "mounted with {opt}");
        assert!(err.contains(want), "{opt}: {err}");
        assert!(!mounted_at(&mnt), "{opt} left a mount");
    };
    refused(format!("compress=auto,trace={}", mnt.join("t.csv").display()), "must not be on the mount itself");
    refused(format!("trace={}", dir.path().join("none/t.csv").display()), "its directory");
    refused("trace=".into(), "path of a file");
    refused(format!("trace={}", dir.path().display()), "is a directory");
}

fn mounted_at(p: &Path) -> bool {
    let canon = std::fs::canonicalize(p).unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(canon.to_str().unwrap()))
}
