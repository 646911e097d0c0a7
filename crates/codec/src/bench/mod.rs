//! The engine of `squeezefs bench`: cut inputs into independent blocks, compress and
//! decompress every block with each codec, verify the round trips, and time it the way
//! `zstd -b` / `lz4 -b` do (best of several full passes over all blocks, in memory).
//!
//! Pure library: inputs are byte buffers (the CLI reads files and zip members), the only
//! side effect is the progress callback. Threads: a timed pass splits the blocks among
//! `threads` scoped threads that start together; its time is the slowest thread's.

mod sample;

pub use sample::builtin_sample;

use crate::{compress_bound, workspace_bytes, Codec, CodecError, WorkspaceConfig, Workspaces};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// One named input (a file, a zip member, or a built-in sample).
#[derive(Clone, Debug)]
pub struct Input {
    pub name: String,
    pub data: Vec<u8>,
}

/// A validated benchmark configuration.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// bytes per independent block (the last block of each input may be shorter)
    pub block_size: usize,
    pub codecs: Vec<Codec>,
    /// compress/decompress threads (≥ 1)
    pub threads: usize,
    /// timed passes are repeated until this much time has been spent (at least one pass)
    pub min_time: Duration,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig { block_size: 128 << 10, codecs: vec![], threads: 1, min_time: Duration::from_secs(1) }
    }
}

/// What happens, for a progress display.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    /// a codec starts (index into `BenchConfig::codecs`)
    Start { index: usize, codec: Codec },
    /// a codec is done
    Done { index: usize, codec: Codec },
}

/// Results for one codec over all inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub codec: Codec,
    pub blocks: u64,
    pub input_bytes: u64,
    pub compressed_bytes: u64,
    /// seconds of the fastest full compression pass
    pub compress_secs: f64,
    /// seconds of the fastest full decompression pass
    pub decompress_secs: f64,
    /// memory of the workspace serving this codec (0 for none)
    pub workspace_bytes: usize,
}

impl Row {
    pub fn ratio(&self) -> f64 {
        self.input_bytes as f64 / self.compressed_bytes.max(1) as f64
    }
    /// MB/s with MB = 10^6 bytes, as zstd and lz4 report.
    pub fn compress_mb_s(&self) -> f64 {
        self.input_bytes as f64 / 1e6 / self.compress_secs.max(1e-9)
    }
    pub fn decompress_mb_s(&self) -> f64 {
        self.input_bytes as f64 / 1e6 / self.decompress_secs.max(1e-9)
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    #[error("nothing to benchmark: the inputs are empty")]
    NoInput,
    #[error("no codecs to benchmark")]
    NoCodecs,
    #[error("invalid block size {0}: must be 1 byte .. 1 GiB")]
    BadBlockSize(usize),
    #[error("invalid thread count {0}: must be 1..=1024")]
    BadThreads(usize),
    #[error("{codec} failed on block {block}: {source}")]
    Codec { codec: Codec, block: usize, source: CodecError },
    #[error("{codec} round trip of block {block} differs from the input")]
    Mismatch { codec: Codec, block: usize },
}

/// The blocks of all inputs, each input cut separately.
fn blocks(inputs: &[Input], block_size: usize) -> Vec<&[u8]> {
    inputs.iter().flat_map(|i| i.data.chunks(block_size)).collect()
}

/// Blocks reordered so that thread `t`'s contiguous share holds blocks t, t+k, t+2k… of the
/// original order: every thread gets a slice of every input, so a pass is not held up by
/// the thread that drew the slowest file.
fn interleave<T: Copy>(v: &[T], k: usize) -> Vec<T> {
    (0..k).flat_map(|t| v.iter().skip(t).step_by(k).copied()).collect()
}

/// Thread `t`'s range of the interleaved order: blocks t, t+k, … number ceil((n−t)/k).
fn share(n: usize, t: usize, threads: usize) -> std::ops::Range<usize> {
    let count = |u: usize| n.saturating_sub(u).div_ceil(threads);
    let start: usize = (0..t).map(count).sum();
    start..start + count(t)
}

/// Run the benchmark. Every codec compresses every block; the first pass also decompresses
/// and compares every block, later passes are timed.
pub fn run(inputs: &[Input], cfg: &BenchConfig, progress: &(dyn Fn(Event) + Sync)) -> Result<Vec<Row>, BenchError> {
    if cfg.block_size == 0 || cfg.block_size > 1 << 30 {
        return Err(BenchError::BadBlockSize(cfg.block_size));
    }
    if cfg.threads == 0 || cfg.threads > 1024 {
        return Err(BenchError::BadThreads(cfg.threads));
    }
    if cfg.codecs.is_empty() {
        return Err(BenchError::NoCodecs);
    }
    let blocks = blocks(inputs, cfg.block_size);
    if blocks.is_empty() {
        return Err(BenchError::NoInput);
    }
    let blocks = interleave(&blocks, cfg.threads.min(blocks.len()));
    // room for every thread's workspace at the largest level, so the pool never waits
    let ws = Workspaces::new(WorkspaceConfig {
        max_bytes: (cfg.threads + 2) * (64 << 20),
        block_size: cfg.block_size,
        ..WorkspaceConfig::default()
    });
    let mut rows = Vec::with_capacity(cfg.codecs.len());
    for (index, &codec) in cfg.codecs.iter().enumerate() {
        progress(Event::Start { index, codec });
        rows.push(bench_codec(&ws, codec, &blocks, cfg)?);
        progress(Event::Done { index, codec });
    }
    Ok(rows)
}

/// Caller-owned buffers: one compressed slot per block (sized to the codec's bound once, so
/// passes never allocate) and the length of what each holds.
struct Buffers {
    compressed: Vec<Vec<u8>>,
    lens: Vec<usize>,
}

/// One thread's share of the per-block buffers, addressed by global block index, plus its
/// own decompression output buffer.
struct Slots<'a> {
    compressed: &'a mut [Vec<u8>],
    lens: &'a mut [usize],
    offset: usize,
    out: Vec<u8>,
}

impl Slots<'_> {
    fn slot(&mut self, i: usize) -> (&mut [u8], &mut usize) {
        (&mut self.compressed[i - self.offset], &mut self.lens[i - self.offset])
    }
}

type Range = std::ops::Range<usize>;

fn bench_codec(ws: &Workspaces, codec: Codec, blocks: &[&[u8]], cfg: &BenchConfig) -> Result<Row, BenchError> {
    let mut buf = Buffers {
        compressed: blocks.iter().map(|b| vec![0u8; compress_bound(codec, b.len())]).collect(),
        lens: vec![0; blocks.len()],
    };
    // verification pass (also warms the workspaces and the caches)
    let mut out = vec![0u8; cfg.block_size];
    for (i, block) in blocks.iter().enumerate() {
        let err = |source| BenchError::Codec { codec, block: i, source };
        let n = ws.compress(codec, block, &mut buf.compressed[i]).map_err(err)?;
        buf.lens[i] = n;
        let m = ws.decompress(codec.alg, &buf.compressed[i][..n], &mut out[..block.len()]).map_err(err)?;
        if m != block.len() || out[..m] != **block {
            return Err(BenchError::Mismatch { codec, block: i });
        }
    }
    let compressed_bytes: u64 = buf.lens.iter().map(|&n| n as u64).sum();
    let compress_secs = timed(cfg, blocks.len(), &mut buf, |slots, range| {
        for i in range {
            let (dst, len) = slots.slot(i);
            *len =
                ws.compress(codec, blocks[i], dst).map_err(|source| BenchError::Codec { codec, block: i, source })?;
        }
        Ok(())
    })?;
    let decompress_secs =
        timed(cfg, blocks.len(), &mut buf, |slots, range| {
            for i in range {
                let n = slots.lens[i - slots.offset];
                let src = &slots.compressed[i - slots.offset][..n];
                ws.decompress(codec.alg, src, &mut slots.out[..blocks[i].len()])
                    .map_err(|source| BenchError::Codec { codec, block: i, source })?;
            }
            Ok(())
        })?;
    Ok(Row {
        codec,
        blocks: blocks.len() as u64,
        input_bytes: blocks.iter().map(|b| b.len() as u64).sum(),
        compressed_bytes,
        compress_secs,
        decompress_secs,
        workspace_bytes: workspace_bytes(codec, cfg.block_size),
    })
}

/// Run `pass` over all blocks (split among threads) until `min_time` is spent; return the
/// fastest pass's seconds.
fn timed<F>(cfg: &BenchConfig, n: usize, buf: &mut Buffers, pass: F) -> Result<f64, BenchError>
where
    F: Fn(&mut Slots<'_>, Range) -> Result<(), BenchError> + Sync,
{
    let first = run_passes(cfg, n, buf, &pass, 1)?[0];
    let left = cfg.min_time.as_secs_f64() - first;
    let passes = if left <= 0.0 { 0 } else { ((left / first.max(1e-6)).ceil() as usize).clamp(1, 1000) };
    let times = if passes > 0 { run_passes(cfg, n, buf, &pass, passes)? } else { vec![] };
    Ok(times.into_iter().fold(first, f64::min))
}

/// `passes` passes; each starts all threads together (barrier) and lasts until the slowest
/// thread is done. Returns each pass's seconds.
fn run_passes<F>(
    cfg: &BenchConfig,
    n: usize,
    buf: &mut Buffers,
    pass: &F,
    passes: usize,
) -> Result<Vec<f64>, BenchError>
where
    F: Fn(&mut Slots<'_>, Range) -> Result<(), BenchError> + Sync,
{
    let threads = cfg.threads.min(n).max(1);
    let start = Barrier::new(threads);
    let results: Vec<Result<Vec<f64>, BenchError>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        let (mut comp, mut lens) = (&mut buf.compressed[..], &mut buf.lens[..]);
        for t in 0..threads {
            let range = share(n, t, threads);
            let (c_here, c_rest) = std::mem::take(&mut comp).split_at_mut(range.len());
            let (l_here, l_rest) = std::mem::take(&mut lens).split_at_mut(range.len());
            (comp, lens) = (c_rest, l_rest);
            let start = &start;
            let block_size = cfg.block_size;
            handles.push(s.spawn(move || {
                let mut slots =
                    Slots { compressed: c_here, lens: l_here, offset: range.start, out: vec![0u8; block_size] };
                let mut times = Vec::with_capacity(passes);
                for _ in 0..passes {
                    start.wait();
                    let t0 = Instant::now();
                    pass(&mut slots, range.clone())?;
                    times.push(t0.elapsed().as_secs_f64());
                }
                Ok(times)
            }));
        }
        handles.into_iter().map(|h| h.join().expect("bench thread panicked")).collect()
    });
    let per_thread: Vec<Vec<f64>> = results.into_iter().collect::<Result<_, _>>()?;
    Ok((0..passes).map(|p| per_thread.iter().map(|t| t[p]).fold(0.0, f64::max)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_the_interleaved_order_are_the_strided_blocks() {
        for n in 0..40 {
            for k in 1..7 {
                let order = interleave(&(0..n).collect::<Vec<_>>(), k);
                assert_eq!(order.len(), n);
                for t in 0..k {
                    let got: Vec<usize> = order[share(n, t, k)].to_vec();
                    let want: Vec<usize> = (t..n).step_by(k).collect();
                    assert_eq!(got, want, "n {n} k {k} t {t}");
                }
            }
        }
    }

    #[test]
    fn shares_cover_every_block_once_over_whole_range() {
        for n in 0..50 {
            for threads in 1..9 {
                let mut next = 0;
                for t in 0..threads {
                    let r = share(n, t, threads);
                    assert_eq!(r.start, next);
                    assert!(r.len() <= n / threads + 1);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }
}
