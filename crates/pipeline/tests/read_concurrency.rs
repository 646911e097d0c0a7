//! Concurrent cold readers of one file: sequential small reads (which queue prefetches) racing
//! multi-record reads (which decode on the workers).
mod common;
use common::*;
use squeezefs_pipeline::*;
use std::sync::mpsc;
use std::time::Duration;

/// bench/memory.sh and compare-btrfs hung for good in a cold read: a prefetch claimed its
/// record when it was queued, and a reader's decode job running on a worker waited for that
/// claim while the prefetch sat in the queue behind it, on the same two workers.
#[test]
fn readers_on_workers_never_wait_for_a_queued_prefetch() {
    let d = tempfile::tempdir().unwrap();
    // a small cache keeps evicting, so records are decoded again and again
    let opts = zstd_read_opts(1 << 20);
    let rec: Vec<u8> = (0..128 * 1024u32).map(|i| (i / 7 % 251) as u8).collect();
    let records = 96u64;
    let (pool, ino) = pool_with_file(d.path(), &opts, "big", &rec.repeat(records as usize));

    for round in 0..6 {
        let e = reopen(&pool, &opts);
        let (done_tx, done_rx) = mpsc::channel();
        for t in 0..4u64 {
            let e = e.clone();
            let done_tx = done_tx.clone();
            let rec = rec.clone();
            std::thread::spawn(move || {
                let size = records * rec.len() as u64;
                // even threads: 64 KiB sequential reads (prefetch); odd: 1 MiB reads
                let step = if t % 2 == 0 { 64 * 1024 } else { 1024 * 1024 };
                let mut buf = vec![0u8; step];
                let mut off = (t * 3 * rec.len() as u64) % size;
                let mut ok = true;
                for _ in 0..(size / step as u64) {
                    let n = e.read(ino, off, &mut buf).unwrap();
                    for (i, b) in buf[..n].iter().enumerate() {
                        let pos = ((off + i as u64) % rec.len() as u64) as usize;
                        if *b != rec[pos] {
                            ok = false;
                        }
                    }
                    off = (off + n as u64) % size;
                }
                let _ = done_tx.send(ok);
            });
        }
        drop(done_tx);
        for _ in 0..4 {
            let ok = done_rx
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("round {round}: a reader is stuck (read deadlock)"));
            assert!(ok, "round {round}: a reader saw wrong bytes");
        }
        e.close().unwrap();
    }
}

/// Open the pool again once the previous engine's last reference (held by threads that are
/// finishing) is gone.
fn reopen(pool: &std::path::Path, opts: &OpenOptions) -> std::sync::Arc<Engine> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match Engine::open(pool, opts) {
            Ok(e) => return e,
            Err(squeezefs_pipeline::EngineError::Pool(squeezefs_pipeline::PoolError::Closing { .. }))
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(err) => panic!("reopen: {err}"),
        }
    }
}
