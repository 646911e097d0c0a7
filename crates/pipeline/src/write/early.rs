//! Early compression ("compress on fill"): a record filled in the open txg is compressed
//! at once, on the workers, so compression overlaps the writer and the I/O of the txg
//! being synced; the sync stage (sync/stages.rs) then reuses the result instead of compressing.
//! The slots and the queue are compress/queue.rs's; this module creates the background work,
//! runs the queue on the workers and packs finished results into their records.
//!
//! Packing: right after finishing a background job whose result compresses, the worker
//! moves the result into its record if the record still holds the slot in its file's open
//! layer: the record becomes PACKED (dirty.rs) and its raw buffer goes back to the buffer
//! pool at once, so the raw buffers alive are only those of records queued or being
//! filled, and the writer refills warm buffers instead of touching fresh memory. A record
//! packed this way may be placed and written at once (early_place.rs).
//!
//! Running the queue: a worker-pool job runs entries, urgent ones first, until the queue is
//! empty, so a txg being synced never waits behind the next txg's records. A background
//! push submits one job; the sync stage's list submits at most one per worker, because a
//! txg of small files has one record per file and a worker wake-up per record cost more than
//! hashing or compressing it (~50 µs each in a `none` extract). Every entry is run: the last
//! job to find the queue empty exits only after taking everything pushed before that
//! moment, and whatever is pushed later comes with a job.
//!
//! Flow control (accounting.rs): `backlog` = record bytes of background slots not yet
//! compressed; a writer waits while it exceeds `BACKLOG_RECORDS_PER_WORKER` records per
//! worker (`wait_backlog`), so a writer faster than the compressors stays a bounded distance
//! ahead. `ready` = record bytes whose early result is DONE and unclaimed, or held PACKED;
//! reaching `compress::EARLY_SYNC_BYTES` closes the open txg (txg/state.rs), so compressed records
//! reach the disk and their buffers return to the buffer pool (and are refilled by the
//! writer) instead of the writer touching fresh memory for every record of a long stream.
//!
//! Caller-runs: while more than `CALLER_RUNS_RECORDS_PER_WORKER` records per worker wait in
//! the background list, a writer compresses the whole records its write covers itself,
//! straight from its caller's slice (`compress_in_caller`): a record that compresses goes
//! into the open layer PACKED with no copy into a record buffer; one that does not (zeros,
//! or no sector saved) is copied as usual with a DONE slot holding the result, so it is
//! never compressed twice. The writer then works instead of waiting for the queue, and the
//! queue stays short, so the raw buffers in flight are few and reused. (A per-file streak
//! cannot gate this: a writer this far ahead has not seen any result of its current file.)
//!
//! Tunables: `compress::EARLY_SYNC_BYTES` (16 MiB), `BACKLOG_RECORDS_PER_WORKER` (64),
//! `CALLER_RUNS_RECORDS_PER_WORKER` (8); what triggers early compression is decided in
//! write/data.rs (a write that fills a record).

use crate::base::accounting::{Counter, Event};
use crate::base::error::PanicSite;
use crate::base::fault::Site;
use crate::compress::policy::{Compressed, Policy};
use crate::compress::queue::{Slot, Unit, EARLY_SYNC_BYTES};
use crate::engine::inner::Inner;
use crate::txg::dirty::{PackedRec, Rec, RecordHome};
use squeezefs_meta::Ino;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A writer waits while more than this many records per worker wait for early compression.
pub const BACKLOG_RECORDS_PER_WORKER: u64 = 64;
/// A writer compresses whole records itself while more than this many records per worker
/// wait for early compression (caller-runs, see the block comment). 8 records = one 1 MiB
/// write: while the writer compresses its 8 records, each worker has as many queued, so
/// neither side idles (with 3 threads on 2 cores each runs at the same share).
pub const CALLER_RUNS_RECORDS_PER_WORKER: u64 = 8;

/// Queue the background compression of a record of `bytes` bytes filled in the open layer.
pub fn queue_background(inner: &Arc<Inner>, slot: Arc<Slot>, home: RecordHome, bytes: u64) {
    let p = slot.policy;
    let fallback = match p.spec {
        squeezefs_codec::Spec::Fixed(c) => Some(c),
        _ if p.stores_raw() => None,
        _ => Some(crate::compress::policy::ADAPTIVE_PLACEHOLDER),
    };
    let cost = inner.qos.cost_estimate(p.tree, bytes, fallback);
    inner.compress.queue.push_background(slot, home, inner.qos.now(), cost);
    submit(inner, 1);
}

/// Queue one claimed slot ahead of the background work (the sync stage wants it now).
pub fn queue_urgent(inner: &Arc<Inner>, slot: Arc<Slot>) {
    inner.compress.queue.push_urgent([slot]);
    submit(inner, 1);
}

/// Queue the sync stage's own slots ahead of the background work, with at most one
/// worker-pool job per worker.
pub fn queue_urgent_many(inner: &Arc<Inner>, slots: Vec<Arc<Slot>>) {
    if slots.is_empty() {
        return;
    }
    let jobs = slots.len().min(inner.workers.threads().max(1));
    inner.compress.queue.push_urgent(slots);
    submit(inner, jobs);
}

fn submit(inner: &Arc<Inner>, jobs: usize) {
    for _ in 0..jobs {
        let i = inner.clone();
        inner.workers.execute(move || run_queue(&i));
    }
}

/// Run entries, urgent first, until the queue is empty (see the block comment).
fn run_queue(inner: &Inner) {
    while let Some((slot, home)) = inner.compress.queue.pop(inner.qos.now()) {
        let ran = slot.run(|ino, buf, policy, streak, unit| {
            let c = inner.catch(PanicSite::CompressJob, || {
                inner.faults.hit(Site::CompressJob);
                let backlog = !inner.compress.queue.is_empty();
                inner.compress.compress(ino, buf, policy, streak, backlog, unit)
            });
            c.ok()
        });
        if ran.kick {
            inner.txg.kick();
        }
        if let (true, Some(home)) = (ran.packable, home) {
            pack_into_record(inner, &slot, home);
        }
    }
}

/// DONE → TAKEN by packing the result into the record (see the block comment), if the
/// record still holds this slot in its file's open layer (then it still holds the bytes
/// the result was computed from). Lock order: file, then slot.
fn pack_into_record(inner: &Inner, slot: &Arc<Slot>, home: RecordHome) {
    let Some(f) = home.file.upgrade() else { return };
    let mut fd = f.lock();
    if fd.retired {
        return;
    }
    let Some(Rec::Data(rec)) = fd.open.recs.get_mut(&home.idx) else { return };
    if !rec.early().is_some_and(|s| Arc::ptr_eq(s, slot)) {
        return;
    }
    let Some((codec, bytes, hash, ready)) = slot.take_packed() else { return };
    let logical = rec.len();
    let raw = rec.pack(PackedRec { codec, bytes, hash, logical, ready, place: Default::default() });
    fd.open.place_early(&inner.early, &inner.space, &inner.acct, inner.max_inline);
    drop(fd);
    inner.acct.record(Event::PackedByWorker);
    if let Some(b) = raw {
        inner.dirty.bufs.give(b);
    }
}

/// Wait while too many records wait for early compression (see the block comment): for a
/// write into QoS tree `tree`, that tree's own records (qos.rs BACKLOG), else the records
/// outside QoS trees, counted in records of the writer's file (`rs` bytes).
pub fn wait_backlog(inner: &Inner, tree: u64, rs: u64) {
    let give_up = || inner.closed.load(Ordering::Acquire) || inner.txg.suspension().is_some();
    if tree != squeezefs_control::qos::NO_TREE {
        let max = inner.qos.backlog_bound(tree);
        // the tree's lane drains at its rate: a short poll, no wake-up plumbing per lane
        while inner.compress.queue.queued(tree) > max && !give_up() {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        return;
    }
    let max = BACKLOG_RECORDS_PER_WORKER * inner.workers.threads() as u64 * rs;
    inner.acct.wait_backlog(max, give_up);
}

/// Caller-runs (see the block comment): should a writer of a file of `rs`-byte records
/// compress its whole records itself?
pub fn caller_should_run(inner: &Inner, rs: u64) -> bool {
    let over = CALLER_RUNS_RECORDS_PER_WORKER * inner.workers.threads() as u64 * rs;
    inner.acct.backlog() > over
}

/// What caller-runs made of one whole record.
pub enum CallerResult {
    /// it compresses: the record goes into the open layer PACKED
    Packed(PackedRec),
    /// all zeros, or it does not save a sector: the record is stored the usual way (copied
    /// into a buffer), with this DONE slot holding the result, so nobody compresses it again
    Finished(Arc<Slot>),
}

/// Caller-runs: compress one whole record on the calling thread, from the caller's bytes.
pub fn compress_in_caller(inner: &Inner, ino: Ino, data: &[u8], policy: Policy, streak: &AtomicU32) -> CallerResult {
    // the writer runs records itself because the queue is long: saturated by definition
    let c = inner.compress.compress(ino, data, policy, streak, true, Unit::Record);
    let ready = inner.acct.charge(Counter::Ready, 0);
    if ready.add(data.len() as u64) >= EARLY_SYNC_BYTES {
        inner.txg.kick();
    }
    match c {
        Compressed::Packed { codec, bytes, hash } => {
            inner.acct.record(Event::PackedByCaller);
            CallerResult::Packed(PackedRec {
                codec,
                bytes,
                hash,
                logical: data.len(),
                ready,
                place: Default::default(),
            })
        }
        // the slot takes over the ready charge
        other => CallerResult::Finished(Slot::finished(other, policy, ino, ready, &inner.acct)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::queue::Claim;
    use squeezefs_codec::Spec;

    fn test_inner() -> (tempfile::TempDir, Arc<Inner>) {
        let dir = tempfile::tempdir().unwrap();
        let pool = dir.path().join("p");
        crate::engine::pool::mkfs(&pool, &crate::MkfsOptions::default(), None).unwrap();
        let opts = crate::OpenOptions {
            compression: Spec::Fixed(squeezefs_codec::Codec::zstd(1).unwrap()),
            ..Default::default()
        };
        let (inner, _lock) = crate::engine::pool::open(&pool, &opts, None).unwrap();
        (dir, inner)
    }

    fn wait_until(mut f: impl FnMut() -> bool) {
        let t0 = std::time::Instant::now();
        while !f() {
            assert!(t0.elapsed() < std::time::Duration::from_secs(20), "timed out");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A background entry whose record is nowhere (nothing to pack into).
    fn nowhere() -> RecordHome {
        RecordHome { file: std::sync::Weak::new(), idx: 0 }
    }

    fn slot(inner: &Arc<Inner>, fill: u8, len: usize) -> Arc<Slot> {
        let policy = inner.compress.pool_policy();
        Slot::new(Arc::new(vec![fill; len]), policy, 0, Arc::default(), &inner.acct)
    }

    #[test]
    fn done_result_is_charged_until_claimed_and_sent_once() {
        let (_d, inner) = test_inner();
        let before = inner.acct.dirty();
        let s = slot(&inner, 7, 128 << 10);
        queue_background(&inner, s.clone(), nowhere(), 128 << 10);
        wait_until(|| s.is_done());
        assert!(inner.acct.dirty() > before, "a done result is charged");
        let (tx, rx) = crossbeam_channel::unbounded();
        assert!(matches!(s.claim(&tx, 3, 9), Claim::Sent));
        assert_eq!(inner.acct.dirty(), before, "claiming uncharges");
        let (l, i, c) = rx.try_recv().unwrap();
        assert_eq!((l, i), (3, 9));
        assert!(matches!(c, Compressed::Packed { .. }));
        assert!(matches!(s.claim(&tx, 3, 9), Claim::Unusable), "a result is delivered once");
        drop(inner);
    }

    #[test]
    fn claimed_while_queued_runs_once_and_forwards() {
        let (_d, inner) = test_inner();
        let (tx, rx) = crossbeam_channel::unbounded();
        // many background slots, each claimed right away: every result arrives exactly once
        let mut slots = Vec::new();
        for i in 0..64u64 {
            let s = slot(&inner, i as u8, 64 << 10);
            queue_background(&inner, s.clone(), nowhere(), 128 << 10);
            slots.push(s);
        }
        for (i, s) in slots.iter().enumerate() {
            match s.claim(&tx, 0, i as u64) {
                Claim::Queued => queue_urgent(&inner, s.clone()),
                Claim::Running | Claim::Sent => {}
                Claim::Unusable => panic!("fresh slot unusable"),
            }
        }
        let mut got: Vec<u64> =
            (0..64).map(|_| rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap().1).collect();
        got.sort_unstable();
        assert_eq!(got, (0..64).collect::<Vec<_>>());
        assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "no duplicate result");
    }

    #[test]
    fn dropped_done_slot_returns_its_charge() {
        let (_d, inner) = test_inner();
        let before = inner.acct.dirty();
        let s = slot(&inner, 1, 128 << 10);
        queue_background(&inner, s.clone(), nowhere(), 128 << 10);
        wait_until(|| s.is_done());
        drop(s);
        assert_eq!(inner.acct.dirty(), before);
    }

    #[test]
    fn backlog_bounds_the_writer_and_counters_return_to_zero() {
        let (_d, inner) = test_inner();
        let max = BACKLOG_RECORDS_PER_WORKER * inner.workers.threads() as u64 * inner.recordsize;
        let n = (max / (128 << 10)) as usize * 2;
        let slots: Vec<_> = (0..n)
            .map(|i| {
                let s = slot(&inner, i as u8, 128 << 10);
                queue_background(&inner, s.clone(), nowhere(), 128 << 10);
                s
            })
            .collect();
        wait_backlog(&inner, 0, inner.recordsize);
        assert!(inner.acct.backlog() <= max, "wait_backlog returned above the bound");
        wait_until(|| slots.iter().all(|s| s.is_done()));
        assert_eq!(inner.acct.backlog(), 0);
        assert_eq!(inner.acct.ready(), n as u64 * (128 << 10));
        let (tx, _rx) = crossbeam_channel::unbounded();
        for (i, s) in slots.iter().enumerate().take(n / 2) {
            assert!(matches!(s.claim(&tx, 0, i as u64), Claim::Sent));
        }
        drop(slots); // the unclaimed half is dropped while DONE
        assert_eq!(inner.acct.ready(), 0);
    }
}
