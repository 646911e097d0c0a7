//! QoS trees on a mounted squeezefs: writes into a directory holding `qos` are paced per
//! tree whatever the number of writers, while the daemon keeps serving other requests (one
//! tree's pacing holds no thread or ring entry the rest need); nested trees share as HTB
//! classes do, under the mount option's tree; `user.squeezefs.qos-stats` and `squeezefs
//! stats` report each tree. Short runs, generous bounds: the mechanism, not performance
//! (figures are in bench/qos-eval.sh).
mod mounted_common;
use mounted_common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Admission's bucket depth, seconds (control::qos AdmissionTunables::burst_secs).
const BURST_SECS: f64 = 0.25;
const MIB: usize = 1 << 20;

fn text(n: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    let mut i = seed;
    while v.len() < n {
        v.extend_from_slice(format!("line {i}: the quick brown fox {} jumps over\n", i * 7919 % 1013).as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

fn pin_to_cpu0() {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// `n` writer threads (pinned to CPU 0 if `pin`), each creating `dir/PREFIXk` and writing
/// `chunk`-byte writes until `until`; the bytes each wrote.
fn writers(
    dir: &Path,
    prefix: &str,
    n: usize,
    chunk: usize,
    until: Instant,
    pin: bool,
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..n)
        .map(|k| {
            let path = dir.join(format!("{prefix}{k}"));
            let buf = text(chunk, k as u64);
            std::thread::spawn(move || {
                if pin {
                    pin_to_cpu0();
                }
                let mut f = std::fs::File::create(&path).unwrap();
                let mut n = 0u64;
                while Instant::now() < until {
                    f.write_all(&buf).unwrap();
                    n += buf.len() as u64;
                }
                n
            })
        })
        .collect()
}

fn joined(hs: Vec<std::thread::JoinHandle<u64>>) -> u64 {
    hs.into_iter().map(|h| h.join().unwrap()).sum()
}

fn set_qos(dir: &Path, rate: &str) {
    run_ok(&["prop", "set", dir.to_str().unwrap(), &format!("qos={rate}")]);
}

/// The tree's stats line (`user.squeezefs.qos-stats`) as `key=value` pairs.
fn qos_stats(dir: &Path) -> Vec<(String, String)> {
    let v = xattr_get(dir, "user.squeezefs.qos-stats").expect("qos-stats of a tree");
    String::from_utf8(v)
        .unwrap()
        .split_whitespace()
        .filter_map(|f| f.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

fn field(stats: &[(String, String)], key: &str) -> f64 {
    stats.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("{key} in {stats:?}")).1.parse().unwrap()
}

/// Transports to run on: /dev/fuse, and io_uring where the kernel has it.
fn transports() -> Vec<&'static str> {
    let mut t = vec!["uring=off"];
    if Path::new("/sys/module/fuse/parameters/enable_uring").exists() {
        t.push("uring=on");
    }
    t
}

/// Twelve writers (more than the daemon's request threads, and more than one CPU queue's
/// ring entries: all run on CPU 0) into a 2 MB/s tree for 5 s: the tree gets about 2 MB/s
/// in total, and meanwhile requests from the same CPU (an xattr read, a create in another
/// directory) are answered at once, not after the paced writes queued before them.
#[test]
fn writers_in_a_tree_are_paced_together_and_nobody_else_waits() {
    if !can_mount() {
        return;
    }
    for transport in transports() {
        let m = Mounted::new_as_given(transport);
        let tree = m.path("tree");
        let other = m.path("other");
        std::fs::create_dir(&tree).unwrap();
        std::fs::create_dir(&other).unwrap();
        set_qos(&tree, "2M");
        let secs = 5.0;
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs_f64(secs);
        let hs = writers(&tree, "w", 12, MIB, until, true);
        // probe from the same CPU while the writers wait for their tree
        let mnt: PathBuf = m.mnt.clone();
        let probe = std::thread::spawn(move || {
            pin_to_cpu0();
            std::thread::sleep(Duration::from_millis(500));
            let mut worst = Duration::ZERO;
            let mut k = 0;
            while Instant::now() + Duration::from_millis(500) < until {
                let p0 = Instant::now();
                xattr_get(&mnt, "user.squeezefs.effective").unwrap();
                std::fs::File::create(mnt.join("other").join(format!("p{k}"))).unwrap();
                worst = worst.max(p0.elapsed());
                k += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            (worst, k)
        });
        let total = joined(hs);
        let took = t0.elapsed().as_secs_f64();
        let (worst, probes) = probe.join().unwrap();
        let rate = total as f64 / took;
        eprintln!("{transport}: 12 writers into a 2 MB/s tree: {rate:.0} B/s; slowest probe {worst:?} of {probes}");
        // paced per tree: at most the bucket's rate over the run plus one request ahead
        assert!(
            total as f64 <= 2e6 * (took + BURST_SECS) + 2.0 * MIB as f64,
            "{transport}: {total} bytes in {took:.2} s into a 2 MB/s tree"
        );
        assert!(rate > 2e6 * 0.6, "{transport}: only {rate:.0} B/s into a 2 MB/s tree");
        // a probe stuck behind the paced writes would wait several admissions (0.5 s each)
        assert!(probes >= 10, "{transport}: {probes} probes");
        assert!(worst < Duration::from_millis(700), "{transport}: a request waited {worst:?} behind paced writers");
        let s = qos_stats(&tree);
        assert_eq!(field(&s, "target"), 2e6, "{s:?}");
        assert!(field(&s, "mean_bps") < 2e6 * 1.3, "{s:?}");
        assert!(field(&s, "last_bps") > 0.0, "{s:?}");
        // the records were compressed as the tree's, at levels its plan chose
        std::process::Command::new("sync").status().unwrap();
        let s = qos_stats(&tree);
        assert!(field(&s, "ratio") > 1.5, "text compresses: {s:?}");
    }
}

/// The mount option makes the root a 10 MB/s tree; under it p (own 8 MB/s) with a child c
/// (own 2 MB/s) and a subdirectory s without its own rate (p's bucket); plain files at the
/// root share the root's. Two writers each: c keeps its guarantee, s gets the rest of p,
/// the root's own files the rest of the root, and the whole never exceeds 10 MB/s.
#[test]
fn nested_trees_under_the_mount_option_share_as_htb_classes() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("qos=10M");
    let (p, c, s, r) = (m.path("p"), m.path("p/c"), m.path("p/s"), m.path("r"));
    for d in [&p, &c, &s, &r] {
        std::fs::create_dir(d).unwrap();
    }
    set_qos(&p, "8M");
    set_qos(&c, "2M");
    let info = String::from_utf8(xattr_get(&m.mnt, "user.squeezefs.mount").unwrap()).unwrap();
    assert!(info.lines().any(|l| l == "qos=10M"), "{info}");
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs(4);
    let (hc, hs, hr) = (
        writers(&c, "c", 2, 256 << 10, until, false),
        writers(&s, "s", 2, 256 << 10, until, false),
        writers(&r, "r", 2, 256 << 10, until, false),
    );
    let (bc, bs, br) = (joined(hc), joined(hs), joined(hr));
    let took = t0.elapsed().as_secs_f64();
    let rate = |b: u64| b as f64 / took;
    eprintln!("root 10M: c(2M) {:.0}, s(p 8M) {:.0}, root files {:.0} B/s", rate(bc), rate(bs), rate(br));
    assert!(
        (bc + bs + br) as f64 <= 10e6 * (took + BURST_SECS) + 3.0 * (256 << 10) as f64,
        "{bc} + {bs} + {br} bytes in {took:.2} s over the mount's 10 MB/s"
    );
    assert!((bc + bs) as f64 <= 8e6 * (took + BURST_SECS) + 2.0 * (256 << 10) as f64, "p's subtree over 8 MB/s");
    assert!(rate(bc) > 2e6 * 0.7, "c got {:.0} B/s of its 2 MB/s", rate(bc));
    assert!(rate(bs) > 6e6 * 0.6, "s got {:.0} B/s of the 6 MB/s c leaves of p", rate(bs));
    assert!(rate(br) > 2e6 * 0.6, "the root's files got {:.0} B/s of the 2 MB/s p leaves", rate(br));
    // `squeezefs stats` lists the trees below a path with their targets
    let out = run(&["stats", "--json", m.mnt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let trees = v["qos_trees"].as_array().expect("qos_trees in stats --json");
    let target = |path: &Path| {
        trees
            .iter()
            .find(|t| t["path"].as_str() == Some(path.to_str().unwrap()))
            .unwrap_or_else(|| panic!("{} in {trees:?}", path.display()))["target_bps"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(target(&m.mnt), 10e6);
    assert_eq!(target(&p), 8e6);
    assert_eq!(target(&c), 2e6);
    assert_eq!(trees.len(), 3, "s and r are no trees of their own: {trees:?}");
}
