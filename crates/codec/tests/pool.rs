//! Workspace pool: bound, reuse (scan up), reclaim, reserve, and a concurrency stress test.

use squeezefs_codec::*;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

fn sample(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let words: [&[u8]; 6] = [b"alpha ", b"beta ", b"gamma\n", b"delta ", b"\x00\x01\x02\x03", b"zeta "];
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(words[(x % 6) as usize]);
        v.push((x >> 40) as u8);
    }
    v.truncate(len);
    v
}

fn tiny_cfg(extra: usize) -> WorkspaceConfig {
    WorkspaceConfig { max_bytes: extra, idle_timeout: Duration::from_secs(60), ..WorkspaceConfig::default() }
}

#[test]
fn a_bound_below_the_reserves_is_raised_to_them() {
    let ws = Workspaces::new(tiny_cfg(1));
    let s = ws.stats();
    assert_eq!(s.max_bytes, s.reserve_bytes);
    assert!(s.reserve_bytes > 2 << 20, "reserves include a max-level zstd workspace");
}

#[test]
fn a_bigger_workspace_serves_a_smaller_level() {
    let ws = Workspaces::new(WorkspaceConfig::default());
    let src = sample(64 << 10, 7);
    let mut dst = vec![0u8; compress_bound(Codec::zstd(9).unwrap(), src.len())];
    ws.compress(Codec::zstd(9).unwrap(), &src, &mut dst).unwrap();
    assert_eq!(ws.stats().created, 1);
    ws.compress(Codec::zstd(3).unwrap(), &src, &mut dst).unwrap();
    ws.compress(Codec::zstd(-3).unwrap(), &src, &mut dst).unwrap();
    assert_eq!(ws.stats().created, 1, "level 3 and -3 reuse the level-9 workspace");
    ws.compress(Codec::zstd(12).unwrap(), &src, &mut dst).unwrap();
    assert_eq!(ws.stats().created, 2, "level 12 needs a bigger one");
}

#[test]
fn decompression_contexts_are_pooled() {
    let ws = Workspaces::new(WorkspaceConfig::default());
    let src = sample(100_000, 3);
    let codec = Codec::zstd(3).unwrap();
    let mut dst = vec![0u8; compress_bound(codec, src.len())];
    let n = ws.compress(codec, &src, &mut dst).unwrap();
    let mut back = vec![0u8; src.len()];
    for _ in 0..20 {
        assert_eq!(ws.decompress(Algorithm::Zstd, &dst[..n], &mut back).unwrap(), src.len());
    }
    assert_eq!(back, src);
    assert_eq!(ws.stats().created, 2, "one compressor and one decompressor");
}

#[test]
fn idle_workspaces_are_reclaimed_after_the_timeout() {
    let cfg = WorkspaceConfig { idle_timeout: Duration::from_millis(500), ..WorkspaceConfig::default() };
    let ws = Workspaces::new(cfg);
    let src = sample(50_000, 9);
    let mut dst = vec![0u8; src.len() * 2];
    for l in [1, 5, 12] {
        ws.compress(Codec::zstd(l).unwrap(), &src, &mut dst).unwrap();
    }
    ws.compress(Codec::deflate(6).unwrap(), &src, &mut dst).unwrap();
    let before = ws.stats();
    assert!(before.idle >= 2 && before.used_bytes > 0, "{before:?}");
    std::thread::sleep(Duration::from_millis(700));
    ws.reclaim_idle();
    let after = ws.stats();
    assert_eq!(after.idle, 0, "{after:?}");
    assert_eq!(after.used_bytes, 0);
    assert_eq!(after.reclaimed, before.reclaimed + before.idle as u64);
}

#[test]
fn with_only_the_reserves_every_request_still_completes() {
    let ws = Workspaces::new(tiny_cfg(0));
    let src = sample(40_000, 5);
    let mut dst = vec![0u8; 100_000];
    for codec in
        [Codec::zstd(19).unwrap(), Codec::zstd(1).unwrap(), Codec::deflate(12).unwrap(), Codec::lz4hc(9).unwrap()]
    {
        let n = ws.compress(codec, &src, &mut dst).unwrap();
        let mut back = vec![0u8; src.len()];
        ws.decompress(codec.alg, &dst[..n], &mut back).unwrap();
        assert_eq!(back, src);
    }
    let s = ws.stats();
    assert!(s.reserve_lends >= 4, "{s:?}");
    assert!(s.peak_live_bytes <= s.max_bytes);
}

/// Many threads, random levels, a bound that fits only a couple of workspaces beyond the
/// reserves: nobody deadlocks, the bound holds, every round trip is exact.
#[test]
fn many_threads_random_levels_tight_bound_never_deadlock_nor_exceed() {
    let probe = Workspaces::new(tiny_cfg(0));
    let reserves = probe.stats().reserve_bytes;
    drop(probe);
    let ws = Arc::new(Workspaces::new(tiny_cfg(reserves + (3 << 20))));
    let (done_tx, done_rx) = mpsc::channel();
    let threads = 12;
    for t in 0..threads {
        let ws = Arc::clone(&ws);
        let done = done_tx.clone();
        std::thread::spawn(move || {
            let mut x: u64 = 0x1234_5678 + t as u64 * 7919;
            let src = sample(24 << 10, t as u64 + 1);
            let mut dst = vec![0u8; 64 << 10];
            let mut back = vec![0u8; src.len()];
            for _ in 0..40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let codec = match x % 10 {
                    0 => Codec::deflate(1 + ((x >> 8) % 12) as i32).unwrap(),
                    1 => Codec::lz4hc(1 + ((x >> 8) % 12) as i32).unwrap(),
                    2 => Codec::lz4(1 + ((x >> 8) % 100) as i32).unwrap(),
                    3 => Codec::zstd(-1 - ((x >> 8) % 20) as i32).unwrap(),
                    _ => Codec::zstd(1 + ((x >> 8) % 19) as i32).unwrap(),
                };
                let n = ws.compress(codec, &src, &mut dst).unwrap();
                let m = ws.decompress(codec.alg, &dst[..n], &mut back).unwrap();
                assert!(m == src.len() && back == src, "{codec}");
                let s = ws.stats();
                assert!(s.live_bytes <= s.max_bytes, "{s:?}");
            }
            done.send(t).unwrap();
        });
    }
    drop(done_tx);
    for _ in 0..threads {
        done_rx.recv_timeout(Duration::from_secs(120)).expect("a worker is stuck or panicked");
    }
    let s = ws.stats();
    assert!(s.peak_live_bytes <= s.max_bytes, "{s:?}");
    assert_eq!(s.busy, 0);
    assert!(s.reclaimed > 0 || s.reserve_lends > 0, "the bound was actually tight: {s:?}");
}

#[test]
fn compression_work_is_counted_by_calls_bytes_and_thread_cpu() {
    let ws = Workspaces::new(WorkspaceConfig::default());
    let codec = Codec::zstd(9).unwrap();
    let src = sample(128 << 10, 11);
    let mut dst = vec![0u8; compress_bound(codec, src.len())];
    let cpu0 = thread_cpu_ns();
    for _ in 0..20 {
        ws.compress(codec, &src, &mut dst).unwrap();
    }
    // an early abort costs codec work too, so it counts
    assert!(matches!(ws.compress(codec, &src, &mut dst[..64]), Err(CodecError::DstTooSmall)));
    let spent = thread_cpu_ns() - cpu0;
    let counted = ws.stats().compress_cpu_ns;
    // neither decompression nor storing raw reaches a compressor
    let n = ws.compress(codec, &src, &mut dst).unwrap();
    let mut back = vec![0u8; src.len()];
    ws.decompress(Algorithm::Zstd, &dst[..n], &mut back).unwrap();
    ws.compress(Codec { alg: Algorithm::None, level: 0 }, &src, &mut dst).unwrap();
    let s = ws.stats();
    assert_eq!(s.compress_calls, 22);
    assert_eq!(s.compress_src_bytes, 22 * src.len() as u64);
    // every call ran on this thread, mostly inside the codec: the charge is most of what the
    // thread spent and never more (a charge by wall clock or another thread's clock would
    // break one side under load or idle)
    assert!(counted <= spent, "charged {counted} ns, the thread spent {spent} ns");
    assert!(counted >= spent / 2, "charged {counted} ns of the {spent} ns spent compressing");
}

#[test]
fn compress_measured_returns_each_calls_codec_cpu() {
    let ws = Workspaces::new(WorkspaceConfig::default());
    let codec = Codec::zstd(9).unwrap();
    let src = sample(128 << 10, 12);
    let mut dst = vec![0u8; compress_bound(codec, src.len())];
    let mut sum = 0;
    for _ in 0..5 {
        let (cpu0, wall0) = (thread_cpu_ns(), std::time::Instant::now());
        let (r, t) = ws.compress_measured(codec, &src, &mut dst);
        let (spent, wall) = (thread_cpu_ns() - cpu0, wall0.elapsed().as_nanos() as u64);
        assert!(r.is_ok());
        assert!(t.cpu_ns > 0 && t.cpu_ns <= spent, "{} ns charged of {spent} ns spent", t.cpu_ns);
        // the call's wall time spans its CPU time (less a clock tick of rounding) and lies
        // within the caller's
        assert!(t.wall_ns + 1_000_000 >= t.cpu_ns && t.wall_ns <= wall, "{t:?}, caller's wall {wall} ns");
        sum += t.cpu_ns;
    }
    // the early abort is charged too; raw and refused calls cost nothing
    let (r, t) = ws.compress_measured(codec, &src, &mut dst[..64]);
    assert!(matches!(r, Err(CodecError::DstTooSmall)) && t.cpu_ns > 0 && t.wall_ns > 0);
    sum += t.cpu_ns;
    assert_eq!(ws.compress_measured(Codec::NONE, &src, &mut dst).1, CallTime::default());
    let bad = Codec { alg: Algorithm::Zstd, level: 99 };
    assert!(
        matches!(ws.compress_measured(bad, &src, &mut dst), (Err(CodecError::InvalidCodec(_)), t) if t == CallTime::default())
    );
    assert_eq!(ws.stats().compress_cpu_ns, sum, "the pool's counter is the sum of the per-call figures");
}
