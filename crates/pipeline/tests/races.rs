//! Races between the dirty cache's writers, readers, seeks and a txg driver that syncs without
//! pause: each test runs for `STRESS` and checks every result against a model. The first
//! pins a bug: a hole punch lost to a concurrent retire of the file's record.
mod common;
use common::*;
use squeezefs_pipeline::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long each race runs. The punch race failed within 0.6 s before its fix.
const STRESS: Duration = Duration::from_secs(3);

/// punch_hole takes its FileData with `file_ref` and then locks it again without checking
/// `retired`: a `seek_data` (which creates and retires clean FileData) or a commit's
/// `retire_if_clean` in between makes the punch land in a FileData nobody sees any more:
/// the punched record keeps its data.
#[test]
fn punch_hole_racing_seek_is_not_lost() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let cur = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let seeker = {
        let (e, cur, stop) = (e.clone(), cur.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let ino = cur.load(Ordering::Relaxed);
                if ino != 0 {
                    let _ = e.seek_data(ino, 0);
                }
            }
        })
    };
    let t0 = Instant::now();
    let mut lost = None;
    let mut tries = 0u64;
    'outer: for round in 0..1000u64 {
        if t0.elapsed() > STRESS {
            break;
        }
        let inos: Vec<Ino> = (0..200).map(|i| create(&e, &format!("f{round}-{i}"))).collect();
        for &ino in &inos {
            e.write(ino, 0, &noise(ino, 4096)).unwrap();
        }
        e.sync().unwrap();
        for &ino in &inos {
            cur.store(ino, Ordering::Relaxed);
            // let the seeker get going on this file
            for _ in 0..200 {
                std::hint::spin_loop();
            }
            e.punch_hole(ino, 0, 4096).unwrap();
            tries += 1;
            let mut buf = vec![0u8; 4096];
            let n = e.read(ino, 0, &mut buf).unwrap();
            if buf[..n].iter().any(|&b| b != 0) {
                lost = Some((round, ino));
                break 'outer;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    seeker.join().unwrap();
    assert!(
        lost.is_none(),
        "punch_hole lost (round, ino) {lost:?} after {tries} punches: the punched range still reads data"
    );
}

/// One thread changes a file (writes of compressible text, zeros and noise; truncations;
/// hole punches) and checks reads against a model, while another thread syncs without
/// pause: every change races a quiesce, a sync or a commit, and early compression.
#[test]
fn ops_racing_continuous_syncs_match_the_model() {
    use squeezefs_device::doubles::SplitMix64;
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions { recordsize: Some(16384), max_inline: Some(1024), ..Default::default() })
        .unwrap();
    let opts = OpenOptions {
        compression: "zstd:1".parse().unwrap(),
        workers: 2,
        txg_timeout: Duration::from_millis(20),
        record_cache_bytes: 256 << 10,
        ..Default::default()
    };
    let e = Engine::open(&pool, &opts).unwrap();
    let ino = create(&e, "m");
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (e, stop) = (e.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                e.sync().unwrap();
            }
        })
    };
    let text = |seed: u64, n: usize| -> Vec<u8> {
        let mut r = SplitMix64::new(seed);
        let w: [&[u8]; 4] = [b"alpha ", b"beta ", b"gamma ", b"delta "];
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(w[(r.next_u64() % 4) as usize]);
        }
        v.truncate(n);
        v
    };
    let mut rng = SplitMix64::new(42);
    let mut model: Vec<u8> = Vec::new();
    const MAX: u64 = 1_500_000;
    let t0 = Instant::now();
    let mut ops = 0u64;
    while t0.elapsed() < STRESS {
        ops += 1;
        let r = rng.next_u64() % 100;
        let what;
        if r < 50 {
            let off = rng.next_u64() % MAX;
            let len =
                1 + (rng.next_u64() % if rng.next_u64().is_multiple_of(8) { 1_000_000 } else { 100_000 }) as usize;
            let kind = rng.next_u64() % 4;
            let data = match kind {
                0 => vec![0u8; len],
                1 => noise(rng.next_u64(), len),
                _ => text(rng.next_u64(), len),
            };
            e.write(ino, off, &data).unwrap();
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
            what = format!("write {off}+{len} kind {kind}");
        } else if r < 62 {
            let size = rng.next_u64() % MAX;
            e.set_size(ino, size).unwrap();
            model.resize(size as usize, 0);
            what = format!("set_size {size}");
        } else if r < 75 {
            let off = rng.next_u64() % MAX;
            let len = 1 + rng.next_u64() % 100_000;
            e.punch_hole(ino, off, len).unwrap();
            let end = ((off + len) as usize).min(model.len());
            if (off as usize) < end {
                model[off as usize..end].fill(0);
            }
            what = format!("punch {off}+{len}");
        } else {
            what = "read".into();
        }
        // check: a random range and the size
        assert_eq!(e.getattr(ino).unwrap().size, model.len() as u64, "size after op {ops} ({what})");
        let off = rng.next_u64() % (MAX + 20_000);
        let len = 1 + (rng.next_u64() % 80_000) as usize;
        let mut buf = vec![0xEEu8; len];
        let n = e.read(ino, off, &mut buf).unwrap();
        let want: &[u8] =
            if off as usize >= model.len() { &[] } else { &model[off as usize..model.len().min(off as usize + len)] };
        assert_eq!(n, want.len(), "read length at {off}+{len} after op {ops} ({what})");
        if buf[..n] != *want {
            let i = (0..n).find(|&i| buf[i] != want[i]).unwrap();
            panic!(
                "content differs at byte {} (read {off}+{len}) after op {ops} ({what}): got {} want {}",
                off as usize + i,
                buf[i],
                want[i]
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    syncer.join().unwrap();
    // everything once more, after a final sync
    e.sync().unwrap();
    let all = read_all(&e, ino);
    assert!(all == model, "final content differs from the model after {ops} ops");
    eprintln!("{ops} ops, {:?}", e.early_stats());
}

/// Two threads change disjoint halves of one file (writes, punches; records never shared),
/// each checking its half against its own model, while a third syncs without pause.
#[test]
fn two_writers_on_one_file_racing_syncs() {
    use squeezefs_device::doubles::SplitMix64;
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions { recordsize: Some(16384), max_inline: Some(1024), ..Default::default() })
        .unwrap();
    let opts = OpenOptions {
        compression: "zstd:1".parse().unwrap(),
        workers: 2,
        txg_timeout: Duration::from_millis(20),
        record_cache_bytes: 256 << 10,
        ..Default::default()
    };
    let e = Engine::open(&pool, &opts).unwrap();
    let ino = create(&e, "m");
    const H: u64 = 1 << 20;
    e.set_size(ino, 2 * H).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (e, stop) = (e.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                e.sync().unwrap();
            }
        })
    };
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            let e = e.clone();
            std::thread::spawn(move || {
                let base = t * H;
                let mut model = vec![0u8; H as usize];
                let mut rng = SplitMix64::new(100 + t);
                let t0 = Instant::now();
                let mut ops = 0u64;
                while t0.elapsed() < STRESS {
                    ops += 1;
                    let off = rng.next_u64() % H;
                    let len = 1 + rng.next_u64() % (H - off).min(200_000);
                    let r = rng.next_u64() % 10;
                    let what = if r < 7 {
                        let data: Vec<u8> = if r == 0 {
                            vec![0u8; len as usize]
                        } else if r == 1 {
                            noise(rng.next_u64(), len as usize)
                        } else {
                            let s = rng.next_u64() % 200;
                            (0..len).map(|i| (((i + s) / 13) % 7) as u8 + b'a').collect()
                        };
                        e.write(ino, base + off, &data).unwrap();
                        model[off as usize..(off + len) as usize].copy_from_slice(&data);
                        format!("write {}+{len}", base + off)
                    } else {
                        e.punch_hole(ino, base + off, len).unwrap();
                        model[off as usize..(off + len) as usize].fill(0);
                        format!("punch {}+{len}", base + off)
                    };
                    let off = rng.next_u64() % H;
                    let len = 1 + rng.next_u64() % (H - off).min(100_000);
                    let mut buf = vec![0xEEu8; len as usize];
                    let n = e.read(ino, base + off, &mut buf).unwrap();
                    assert_eq!(n, len as usize);
                    let want = &model[off as usize..(off + len) as usize];
                    if buf[..] != *want {
                        let i = (0..n).find(|&i| buf[i] != want[i]).unwrap();
                        panic!(
                            "thread {t}: byte {} differs after op {ops} ({what}): got {} want {}",
                            base + off + i as u64,
                            buf[i],
                            want[i]
                        );
                    }
                }
                model
            })
        })
        .collect();
    let models: Vec<Vec<u8>> = workers.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    syncer.join().unwrap();
    e.sync().unwrap();
    let all = read_all(&e, ino);
    assert!(all[..H as usize] == models[0][..] && all[H as usize..] == models[1][..], "final content differs");
}

/// A writer rewrites whole records with increasing versions while syncs run without pause;
/// readers check that a record reads as one version (never a mix) and never older than the
/// version whose write had returned before the read started.
#[test]
fn readers_never_see_stale_or_mixed_records_during_syncs() {
    versions_race(false);
}

/// Like the test above, but the writer changes one record at a time and pauses, so the file
/// goes clean (its dirty state retired) and a reader reads sequentially (prefetch, cold path).
#[test]
fn cold_sequential_readers_never_see_stale_records() {
    versions_race(true);
}

/// The race of the two tests above; `cold` picks the writer's pace and the readers' pattern.
fn versions_race(cold: bool) {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    const RS: usize = 16384;
    const N: usize = 24;
    Engine::mkfs(&pool, &MkfsOptions { recordsize: Some(RS as u32), max_inline: Some(1024), ..Default::default() })
        .unwrap();
    let opts = OpenOptions {
        compression: "zstd:1".parse().unwrap(),
        workers: 2,
        txg_timeout: Duration::from_millis(10),
        record_cache_bytes: 128 << 10,
        ..Default::default()
    };
    let e = Engine::open(&pool, &opts).unwrap();
    let ino = create(&e, "v");
    let rec = |k: usize, v: u32, noisy: bool| -> Vec<u8> {
        let mut out = Vec::with_capacity(RS);
        let mut x = (v as u64) << 32 | k as u64 | 1;
        for i in 0..RS / 8 {
            out.extend_from_slice(&v.to_le_bytes());
            let pad: u32 = if noisy {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u32
            } else {
                (i % 5) as u32
            };
            out.extend_from_slice(&pad.to_le_bytes());
        }
        out
    };
    for k in 0..N {
        e.write(ino, (k * RS) as u64, &rec(k, 1, false)).unwrap();
    }
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..N).map(|_| AtomicU64::new(1)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    {
        let (e, stop) = (e.clone(), stop.clone());
        hs.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                e.sync().unwrap();
            }
            String::new()
        }));
    }
    for t in 0..2u64 {
        let (e, stop, done) = (e.clone(), stop.clone(), done.clone());
        hs.push(std::thread::spawn(move || {
            let mut x = 7 + t;
            let mut buf = vec![0u8; RS];
            let mut seq = N - 1;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let k = (x >> 33) as usize % N;
                seq = (seq + 1) % N;
                // cold: reader 0 reads sequentially (prefetch, the cold path)
                let k = if cold && t == 0 { seq } else { k };
                let v0 = done[k].load(Ordering::Acquire);
                let n = e.read(ino, (k * RS) as u64, &mut buf).unwrap();
                assert_eq!(n, RS);
                let first = u32::from_le_bytes(buf[0..4].try_into().unwrap());
                for (i, w) in buf.chunks(8).enumerate() {
                    let got = u32::from_le_bytes(w[0..4].try_into().unwrap());
                    if got != first {
                        return format!("record {k}: mixed versions {first} and {got} (word {i})");
                    }
                }
                if (first as u64) < v0 {
                    return format!("record {k}: read version {first} after version {v0} was written");
                }
            }
            String::new()
        }));
    }
    let t0 = Instant::now();
    let mut v = 1u32;
    let mut x = 99u64;
    while t0.elapsed() < STRESS && !hs.iter().any(|h| h.is_finished()) {
        v += 1;
        for k in 0..N {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // hot: two records in three change per round; cold: one in eight, with pauses,
            // so the file goes clean (its dirty state retired) between changes
            let skip = if cold { !(x >> 40).is_multiple_of(8) } else { (x >> 40).is_multiple_of(3) };
            if skip {
                continue;
            }
            e.write(ino, (k * RS) as u64, &rec(k, v, (x >> 20).is_multiple_of(4))).unwrap();
            done[k].store(v as u64, Ordering::Release);
            if cold {
                std::thread::sleep(Duration::from_micros((x >> 10) % 3000));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let errs: Vec<String> = hs.into_iter().map(|h| h.join().unwrap()).filter(|s| !s.is_empty()).collect();
    assert!(errs.is_empty(), "after {v} versions: {errs:?}");
    eprintln!("{v} versions, {:?}", e.early_stats());
}
