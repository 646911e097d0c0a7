//! Per-device write queues. One writer thread per device drains its queue: it takes every
//! request waiting (up to `MAX_BATCH_BYTES`), sorts them by offset, coalesces contiguous small
//! requests into one buffer and issues large sequential writes, measuring latency and
//! throughput into the device's [`DeviceStats`].
//!
//! States of a request: queued (counted in `queued_bytes`) → written (stats updated,
//! completion signalled, error recorded if any). The queue closes when the engine drops.
//! Tunables: `MAX_BATCH_BYTES` (8 MiB), `COALESCE_BELOW` (records smaller than this are
//! copied into a batch buffer; larger ones are written from their own buffer, uncopied).

use crate::dirty::{Layer, Rec};
use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use squeezefs_device::{Device, DeviceStats};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

pub const MAX_BATCH_BYTES: usize = 8 << 20;
pub const COALESCE_BELOW: usize = 64 << 10;

/// Bytes to write: owned (compressed output) or a raw record inside a frozen layer.
pub enum Payload {
    Owned(Arc<crate::outbuf::OutBytes>),
    LayerRec { layer: Arc<Layer>, idx: u64 },
}

impl Payload {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::LayerRec { layer, idx } => match layer.recs.get(idx) {
                // sync.rs queues raw payloads of raw records only (place() checks)
                Some(Rec::Data(d)) => d.raw().unwrap_or_default(),
                _ => &[],
            },
        }
    }
}

/// Counts outstanding writes of one txg; the sync driver waits for zero.
#[derive(Default)]
pub struct Completion {
    state: Mutex<(usize, Option<String>)>,
    cv: Condvar,
}

impl Completion {
    pub fn add(&self, n: usize) {
        self.state.lock().0 += n;
    }
    fn done(&self, err: Option<String>) {
        let mut s = self.state.lock();
        s.0 -= 1;
        if s.1.is_none() {
            s.1 = err;
        }
        if s.0 == 0 {
            self.cv.notify_all();
        }
    }
    /// Wait for every write; the first error, if any.
    pub fn wait(&self) -> Option<String> {
        let mut s = self.state.lock();
        while s.0 > 0 {
            self.cv.wait(&mut s);
        }
        s.1.clone()
    }
}

pub struct WriteReq {
    pub offset: u64,
    pub payload: Payload,
    pub done: Arc<Completion>,
}

pub struct DevQueue {
    tx: Option<Sender<WriteReq>>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<DeviceStats>,
}

impl DevQueue {
    pub fn start(dev: Arc<dyn Device>, index: usize) -> DevQueue {
        let stats = Arc::new(DeviceStats::new());
        let (tx, rx) = unbounded();
        let st = stats.clone();
        let thread = std::thread::Builder::new()
            .name(format!("sqz-dev{index}"))
            .spawn(move || writer_loop(dev, rx, st))
            .expect("spawn device writer");
        DevQueue { tx: Some(tx), thread: Some(thread), stats }
    }

    pub fn submit(&self, req: WriteReq) {
        let n = req.payload.bytes().len() as u64;
        self.stats.queued_add(n);
        if let Some(tx) = &self.tx {
            if let Err(e) = tx.send(req) {
                // writer gone: complete with an error rather than hang the txg
                let req = e.0;
                self.stats.queued_sub(n);
                req.done.done(Some("device writer stopped".into()));
            }
        }
    }
}

impl Drop for DevQueue {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

fn writer_loop(dev: Arc<dyn Device>, rx: Receiver<WriteReq>, stats: Arc<DeviceStats>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        let mut bytes = batch[0].payload.bytes().len();
        while bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(r) => {
                    bytes += r.payload.bytes().len();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        batch.sort_by_key(|r| r.offset);
        write_batch(&*dev, &stats, batch);
    }
}

/// Split a sorted batch into runs of contiguous requests and write each run.
fn write_batch(dev: &dyn Device, stats: &DeviceStats, batch: Vec<WriteReq>) {
    let mut run: Vec<WriteReq> = Vec::new();
    let mut run_end = 0u64;
    let mut run_bytes = 0usize;
    for r in batch {
        let len = r.payload.bytes().len();
        let big = len >= COALESCE_BELOW;
        let contiguous = !run.is_empty() && r.offset == run_end && !big;
        if !contiguous || run_bytes + len > MAX_BATCH_BYTES {
            flush_run(dev, stats, std::mem::take(&mut run));
            run_bytes = 0;
        }
        run_end = r.offset + len as u64;
        run_bytes += len;
        let single = big;
        run.push(r);
        if single {
            flush_run(dev, stats, std::mem::take(&mut run));
            run_bytes = 0;
        }
    }
    flush_run(dev, stats, run);
}

fn flush_run(dev: &dyn Device, stats: &DeviceStats, run: Vec<WriteReq>) {
    if run.is_empty() {
        return;
    }
    let offset = run[0].offset;
    let total: usize = run.iter().map(|r| r.payload.bytes().len()).sum();
    let t0 = Instant::now();
    let res = if run.len() == 1 {
        dev.write_at(run[0].payload.bytes(), offset)
    } else {
        // small records: one copy into a batch buffer buys one large sequential write
        let mut buf = Vec::with_capacity(total);
        for r in &run {
            buf.extend_from_slice(r.payload.bytes());
        }
        dev.write_at(&buf, offset)
    };
    stats.record_write(total as u64, t0.elapsed());
    stats.queued_sub(total as u64);
    let err = res.err().map(|e| match e {
        squeezefs_device::DeviceError::Full { .. } => "no space".to_string(),
        e => e.to_string(),
    });
    if let Some(e) = &err {
        log::error!("write of {total} bytes at {offset} on {} failed: {e}", dev.name());
    }
    for r in run {
        r.done.done(err.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_device::doubles::MemDevice;

    #[test]
    fn writes_land_and_stats_count_them() {
        let mem = Arc::new(MemDevice::new("m"));
        let q = DevQueue::start(mem.clone(), 0);
        let done = Arc::new(Completion::default());
        done.add(3);
        for (i, off) in [0u64, 100, 200].into_iter().enumerate() {
            q.submit(WriteReq { offset: off, payload: Payload::Owned(Arc::new(crate::outbuf::OutBytes::unpooled(vec![i as u8 + 1; 100]))), done: done.clone() });
        }
        assert_eq!(done.wait(), None);
        let snap = mem.snapshot();
        assert_eq!(&snap[0..100], &[1u8; 100][..]);
        assert_eq!(&snap[200..300], &[3u8; 100][..]);
        assert_eq!(q.stats.queued_bytes(), 0);
        assert_eq!(q.stats.snapshot().written_bytes, 300);
    }
}
