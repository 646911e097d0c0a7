//! Per-device write queues. One writer thread per device drains its queue: it takes every
//! request waiting (up to `MAX_BATCH_BYTES`), sorts them by offset and writes each run of
//! contiguous requests as one gathered write (`Device::write_vectored_at`: `pwritev` on a
//! file device, so records are not copied into a batch buffer), measuring latency and
//! throughput, and the writer's CPU time inside the writes, into the device's [`DeviceStats`].
//!
//! States of a request: queued (counted in `queued_bytes`) → written (stats updated,
//! completion signalled, error recorded if any). The queue closes when the engine drops.
//! A panic in the writer (fault.rs) completes the requests it held with an error (their
//! txg then fails) and the writer goes on with the next batch.
//! Tunables: `MAX_BATCH_BYTES` (8 MiB: the most one batch, and one write, takes).

use crate::base::error::IoError;
use crate::base::fault::Faults;
use crate::base::locks::Mutex;
use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Condvar;
use squeezefs_device::{Device, DeviceStats};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

pub const MAX_BATCH_BYTES: usize = 8 << 20;

/// Bytes to write, shared with their owner until written: compressed output, or the
/// buffer of a record stored raw (a frozen layer's, never changed again).
pub enum Payload {
    Owned(Arc<crate::compress::outbuf::OutBytes>),
    Raw(Arc<Vec<u8>>),
}

impl Payload {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::Raw(v) => v,
        }
    }
}

/// Counts outstanding writes of one txg (or of one open layer's early writes,
/// early_place.rs); the sync driver waits for zero.
#[derive(Default, Debug)]
pub struct Completion {
    state: Mutex<(usize, Option<IoError>)>,
    cv: Condvar,
}

impl Completion {
    pub fn add(&self, n: usize) {
        self.state.lock().0 += n;
    }
    fn done(&self, err: Option<IoError>) {
        let mut s = self.state.lock();
        s.0 -= 1;
        if s.1.is_none() {
            s.1 = err;
        }
        if s.0 == 0 {
            self.cv.notify_all();
        }
    }
    /// No write outstanding (without waiting).
    pub fn is_idle(&self) -> bool {
        self.state.lock().0 == 0
    }

    /// The first error so far, without waiting.
    pub fn error(&self) -> Option<IoError> {
        self.state.lock().1.clone()
    }

    /// Wait for every write; the first error, if any.
    pub fn wait(&self) -> Option<IoError> {
        let mut s = self.state.lock();
        while s.0 > 0 {
            s.wait(&self.cv);
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
    pub fn start(dev: Arc<dyn Device>, index: usize, faults: Arc<Faults>) -> DevQueue {
        let stats = Arc::new(DeviceStats::new());
        // a device that measures how fast it takes data (a device file: its writeback) feeds
        // the throughput figure itself; otherwise the writes' timing below does
        if dev.measure_drain(stats.clone()) {
            stats.drain_measured_by_device();
        }
        let (tx, rx) = unbounded();
        let st = stats.clone();
        let thread = std::thread::Builder::new()
            .name(format!("sqz-dev{index}"))
            .spawn(move || writer_loop(dev, rx, st, faults))
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
                req.done.done(Some(IoError::WriterStopped));
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

/// A request the writer took: completes exactly once, with the write's outcome
/// (`finish`), or with an error if it is dropped unfinished (a panic in the writer).
struct Taken(Option<WriteReq>);

impl Taken {
    fn req(&self) -> &WriteReq {
        self.0.as_ref().expect("a taken request is finished only once")
    }

    fn finish(mut self, err: Option<IoError>) {
        if let Some(r) = self.0.take() {
            r.done.done(err);
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.done.done(Some(IoError::WriterPanicked));
        }
    }
}

fn writer_loop(dev: Arc<dyn Device>, rx: Receiver<WriteReq>, stats: Arc<DeviceStats>, faults: Arc<Faults>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![Taken(Some(first))];
        let mut bytes = batch[0].req().payload.bytes().len();
        while bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(r) => {
                    bytes += r.payload.bytes().len();
                    batch.push(Taken(Some(r)));
                }
                Err(_) => break,
            }
        }
        batch.sort_by_key(|r| r.req().offset);
        let written =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write_batch(&*dev, &stats, &faults, batch)));
        if let Err(p) = written {
            log::error!("panic in the device writer of {}: {}", dev.name(), crate::base::fault::panic_message(&*p));
        }
    }
}

/// Split a sorted batch into runs of contiguous requests (at most `MAX_BATCH_BYTES` each)
/// and write each run as one gathered write.
fn write_batch(dev: &dyn Device, stats: &DeviceStats, faults: &Faults, batch: Vec<Taken>) {
    let mut run: Vec<Taken> = Vec::new();
    let mut run_end = 0u64;
    let mut run_bytes = 0usize;
    for r in batch {
        let len = r.req().payload.bytes().len();
        let contiguous = !run.is_empty() && r.req().offset == run_end;
        if !contiguous || run_bytes + len > MAX_BATCH_BYTES {
            flush_run(dev, stats, faults, std::mem::take(&mut run));
            run_bytes = 0;
        }
        run_end = r.req().offset + len as u64;
        run_bytes += len;
        run.push(r);
    }
    flush_run(dev, stats, faults, run);
}

/// The device's share of a write that took the writer `wall`, of which it waited
/// `run_delay_ns` for a CPU: a writer sharing a core with the compress workers wakes from a
/// finished write to a busy core, and that wait is no part of how fast the device takes
/// data (the rate a device written direct is measured by, whose writes return when the
/// device has the bytes).
fn device_time(wall: std::time::Duration, run_delay_ns: u64) -> std::time::Duration {
    wall.saturating_sub(std::time::Duration::from_nanos(run_delay_ns))
}

fn flush_run(dev: &dyn Device, stats: &DeviceStats, faults: &Faults, run: Vec<Taken>) {
    if run.is_empty() {
        return;
    }
    let offset = run[0].req().offset;
    let total: usize = run.iter().map(|r| r.req().payload.bytes().len()).sum();
    let (t0, cpu0, delay0) = (Instant::now(), squeezefs_codec::thread_cpu_ns(), squeezefs_codec::thread_run_delay_ns());
    faults.hit(crate::base::fault::Site::DeviceWrite);
    let res = if run.len() == 1 {
        dev.write_at(run[0].req().payload.bytes(), offset)
    } else {
        // contiguous records: one large sequential write, gathered from their buffers
        let bufs: Vec<&[u8]> = run.iter().map(|r| r.req().payload.bytes()).collect();
        dev.write_vectored_at(&bufs, offset)
    };
    let wall = t0.elapsed();
    let delay = delay0.zip(squeezefs_codec::thread_run_delay_ns()).map_or(0, |(a, b)| b.saturating_sub(a));
    stats.record_write(total as u64, device_time(wall, delay));
    let wall_ns = u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX);
    stats.record_write_clocks(wall_ns, squeezefs_codec::thread_cpu_ns().saturating_sub(cpu0), delay);
    stats.queued_sub(total as u64);
    let err = res.err().map(|e| IoError::Device(Arc::new(e)));
    if let Some(e) = &err {
        log::error!("write of {total} bytes at {offset} on {} failed: {e}", dev.name());
    }
    for r in run {
        r.finish(err.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_device::doubles::MemDevice;

    /// On one core the writer woke from a finished direct write to a core the compress
    /// workers held, and the time it waited made a 750 MB/s device read 500–570: raw looked
    /// no faster than lz4:fast=8 and auto stayed there at 0.6 of `none`.
    #[test]
    fn a_writers_wait_for_a_cpu_is_no_part_of_the_device_time() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        assert_eq!(device_time(ms(10), 4_000_000), ms(6));
        assert_eq!(device_time(ms(10), 0), ms(10));
        // clocks read at slightly different moments: never a negative time
        assert_eq!(device_time(ms(3), 5_000_000), Duration::ZERO);
    }

    #[test]
    fn writes_land_and_stats_count_them() {
        let mem = Arc::new(MemDevice::new("m"));
        let q = DevQueue::start(mem.clone(), 0, Default::default());
        let done = Arc::new(Completion::default());
        done.add(3);
        for (i, off) in [0u64, 100, 200].into_iter().enumerate() {
            q.submit(WriteReq {
                offset: off,
                payload: Payload::Owned(Arc::new(crate::compress::outbuf::OutBytes::unpooled(vec![i as u8 + 1; 100]))),
                done: done.clone(),
            });
        }
        assert!(done.wait().is_none());
        let snap = mem.snapshot();
        assert_eq!(&snap[0..100], &[1u8; 100][..]);
        assert_eq!(&snap[200..300], &[3u8; 100][..]);
        assert_eq!(q.stats.queued_bytes(), 0);
        assert_eq!(q.stats.snapshot().written_bytes, 300);
    }

    /// Records the (offset, length) of every write; the first write waits for `gate`, so a
    /// backlog forms behind it.
    struct GatedDevice {
        mem: MemDevice,
        writes: std::sync::Mutex<Vec<(u64, usize)>>,
        gate: std::sync::Barrier,
        first: std::sync::atomic::AtomicBool,
    }

    impl Device for GatedDevice {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), squeezefs_device::DeviceError> {
            self.mem.read_at(buf, offset)
        }
        fn write_at(&self, data: &[u8], offset: u64) -> Result<(), squeezefs_device::DeviceError> {
            if self.first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                self.gate.wait();
            }
            self.writes.lock().unwrap().push((offset, data.len()));
            self.mem.write_at(data, offset)
        }
        fn sync(&self) -> Result<(), squeezefs_device::DeviceError> {
            self.mem.sync()
        }
        fn len(&self) -> u64 {
            self.mem.len()
        }
        fn capacity(&self) -> Option<u64> {
            None
        }
        fn name(&self) -> &str {
            "gated"
        }
    }

    /// A backlog of contiguous records, small and large (≥ 64 KiB, once written alone),
    /// goes out as one gathered write in offset order; a gap starts a new write.
    #[test]
    fn a_backlog_of_contiguous_records_is_one_gathered_write() {
        let dev = Arc::new(GatedDevice {
            mem: MemDevice::new("m"),
            writes: Default::default(),
            gate: std::sync::Barrier::new(2),
            first: true.into(),
        });
        let q = DevQueue::start(dev.clone(), 0, Default::default());
        let done = Arc::new(Completion::default());
        let req = |offset: u64, len: usize, fill: u8| WriteReq {
            offset,
            payload: Payload::Owned(Arc::new(crate::compress::outbuf::OutBytes::unpooled(vec![fill; len]))),
            done: done.clone(),
        };
        done.add(6);
        q.submit(req(0, 10, 1)); // taken alone; its write waits at the gate
        while !dev_waiting(&dev) {
            std::thread::yield_now();
        }
        // queued out of order, contiguous from 1000, one of them large; then one past a gap
        q.submit(req(1000 + 3000 + 100_000, 500, 5));
        q.submit(req(1000 + 3000, 100_000, 4));
        q.submit(req(1000, 3000, 3));
        q.submit(req(1_000_000, 7, 6));
        q.submit(req(1000 + 3000 + 100_000 + 500, 1, 7));
        dev.gate.wait();
        assert!(done.wait().is_none());
        let writes = dev.writes.lock().unwrap().clone();
        assert_eq!(writes, vec![(0, 10), (1000, 3000 + 100_000 + 500 + 1), (1_000_000, 7)]);
        let snap = dev.mem.snapshot();
        assert_eq!(&snap[1000..4000], &[3u8; 3000][..]);
        assert_eq!(&snap[4000..104_000], &vec![4u8; 100_000][..]);
        assert_eq!(&snap[104_000..104_500], &[5u8; 500][..]);
        assert_eq!(snap[104_500], 7);
    }

    /// The first write has been taken by the device thread (it waits at the gate).
    fn dev_waiting(dev: &GatedDevice) -> bool {
        !dev.first.load(std::sync::atomic::Ordering::SeqCst)
    }
}
