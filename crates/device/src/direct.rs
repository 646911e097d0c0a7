//! `DirectWriter`: writes to a block device or a device file with `O_DIRECT`, past the page
//! cache.
//!
//! Why: a buffered write copies every byte into the page cache (for a block device, into
//! per-logical-block buffer heads) before writeback sends it on. On the 2-core guests this
//! project is measured on that copy costs the writing thread 2.3–2.7 ns per byte on a block
//! device and 1.9 on a file on ext4 (`bench/direct-write.sh`): as much CPU as zstd:1 spends
//! compressing the same bytes, taken from the compress workers whenever the writer shares a
//! core with them. An `O_DIRECT` write hands the buffer to the device as it is and costs the
//! thread about 0.05–0.15 ns per byte; its wall time is the device's own service time, so
//! the writes' timing measures the device.
//!
//! `O_DIRECT` wants the offset and the length in whole blocks, and the memory aligned. A
//! block device's block is its logical block (BLKSSZGET); a file's is the host filesystem's
//! direct-I/O alignment (statx `STATX_DIOALIGN`), at least a page, so that no write covers
//! part of a filesystem block (which filesystems serialise and zero around). A filesystem
//! that reports no direct-I/O alignment (tmpfs, FUSE, older kernels) gets buffered writes.
//! Records are byte-packed, so a run of them starts and ends inside blocks it shares with its
//! neighbours. The writer copies the run into an aligned bounce buffer of whole blocks and
//! fills the partial block at either end with the bytes the device holds there
//! (read-modify-write), which it rewrites unchanged. Past a file's end the device holds
//! zeros.
//!
//! Invariants:
//! * every write to the device goes through this writer, under its mutex, so no two
//!   read-modify-writes of a shared block interleave and no buffered write leaves a dirty
//!   page a direct write would race with;
//! * `tail` is the last block the previous write ended in, as the device now holds it: a
//!   sequential stream's next run starts in that block, so it reads nothing from the device;
//! * a write larger than `CHUNK_BYTES` goes out in chunks split at block boundaries, so the
//!   bounce buffer stays bounded and only the first and last chunk have partial blocks;
//! * no direct write reaches past `limit` (a fixed-capacity file whose capacity is not a
//!   whole number of blocks): a run whose last block would, goes through the page cache
//!   (under the same mutex; the kernel writes dirty pages back before a direct write or read
//!   of their range), so the file never grows past its capacity.
//!
//! Reads stay buffered, through the device's other descriptor: the kernel drops the cached
//! pages a direct write overwrote, so a read after a write returns what was written.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;

/// Most bytes one direct `pwrite` takes; a longer write goes out in chunks of this size.
/// 8 MiB: the device queue's largest run (`MAX_BATCH_BYTES` in the pipeline) in one call.
pub const CHUNK_BYTES: usize = 8 << 20;

/// Memory alignment of the bounce buffer: a page, which satisfies every block device's DMA
/// alignment (at most its logical block size) and every filesystem's that this writer takes
/// (`open_file` refuses a larger one).
const MEM_ALIGN: usize = 4096;

/// Largest block a direct writer takes (a filesystem's alignment can exceed a page): the
/// read-modify-write at either end of a run reads at most this much.
const MAX_BLOCK: u64 = 64 << 10;

/// The device offset of the logical block holding byte `offset` (blocks of `block` bytes, a
/// power of two).
pub(crate) fn block_floor(offset: u64, block: u64) -> u64 {
    offset & !(block - 1)
}

/// The first block boundary at or after byte `offset`.
pub(crate) fn block_ceil(offset: u64, block: u64) -> u64 {
    block_floor(offset + block - 1, block)
}

/// The chunks a direct write of `[offset, end)` goes out in: device ranges `[lo, hi)` of
/// whole blocks, each at most `chunk` bytes (a multiple of `block`), together covering every
/// block the write touches, in order.
pub(crate) fn chunk_ranges(offset: u64, end: u64, block: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    let last = block_ceil(end, block);
    let mut lo = block_floor(offset, block);
    std::iter::from_fn(move || {
        if lo >= last || offset >= end {
            return None;
        }
        let hi = last.min(lo + chunk);
        let r = (lo, hi);
        lo = hi;
        Some(r)
    })
}

/// Direct writes to one block device or device file (see the module comment).
pub(crate) struct DirectWriter {
    file: File,
    /// Offsets and lengths of every direct write are multiples of it: a power of two.
    block: u64,
    /// No direct write ends past this offset (see the module comment).
    limit: Option<u64>,
    /// The device's buffered descriptor, for the runs that `limit` keeps from going direct.
    buffered: File,
    state: Mutex<State>,
}

struct State {
    /// Over-allocated by `MEM_ALIGN` so an aligned window of any length up to the chunk fits.
    bounce: Vec<u8>,
    /// The block the last write ended in: its device offset and contents.
    tail: Option<(u64, Vec<u8>)>,
}

impl DirectWriter {
    /// Open `path` (a block device) for direct writes; `None` if the device refuses
    /// `O_DIRECT` or reports a logical block size that is not a power of two between 512 B and
    /// `MEM_ALIGN` (the caller then writes through the page cache). `buffered` is the
    /// device's own descriptor.
    pub(crate) fn open_block_device(path: &Path, buffered: &File) -> Option<DirectWriter> {
        let file = open_direct(path)?;
        let mut block: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one c_int through the pointer, which points at `block`.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut block as *mut libc::c_int) };
        let block = u64::try_from(block).ok().filter(|b| r == 0 && b.is_power_of_two() && (512..=4096).contains(b))?;
        Self::new(file, block, None, buffered)
    }

    /// Open `path` (a regular file) for direct writes, none ending past `limit`; `None` if
    /// its filesystem reports no direct-I/O alignment, one this writer cannot meet, or
    /// refuses `O_DIRECT` (the caller then writes through the page cache).
    pub(crate) fn open_file(path: &Path, limit: Option<u64>, buffered: &File) -> Option<DirectWriter> {
        let (mem, offset) = dio_alignment(buffered)?;
        let block = u64::from(offset).max(MEM_ALIGN as u64);
        // the bounce buffer's page alignment covers the memory alignment, and every block
        // of it starts at a multiple of `block` from there
        let fits = offset.is_power_of_two() && block <= MAX_BLOCK && mem.is_power_of_two() && mem as usize <= MEM_ALIGN;
        if !fits {
            return None;
        }
        Self::new(open_direct(path)?, block, limit, buffered)
    }

    fn new(file: File, block: u64, limit: Option<u64>, buffered: &File) -> Option<DirectWriter> {
        let buffered = buffered.try_clone().ok()?;
        Some(DirectWriter { file, block, limit, buffered, state: Mutex::new(State { bounce: Vec::new(), tail: None }) })
    }

    pub(crate) fn block_size(&self) -> u64 {
        self.block
    }

    /// Write the concatenation of `bufs` at `offset`. The caller checked that the range fits
    /// the device. On an error the device may hold any mix of old and new bytes in the
    /// range (as after a failed buffered write); the blocks around it keep theirs.
    pub(crate) fn write(&self, bufs: &[&[u8]], offset: u64) -> std::io::Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = offset + total;
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if self.limit.is_some_and(|limit| block_ceil(end, self.block) > limit) {
            // the write's last block reaches past the capacity: through the page cache, and
            // the cached tail may no longer be what the device holds
            st.tail = None;
            return crate::file::pwritev_all(&self.buffered, bufs, offset);
        }
        let res = self.write_locked(&mut st, bufs, offset, end);
        if res.is_err() {
            // what the device holds in the last block is unknown now
            st.tail = None;
        }
        res
    }

    fn write_locked(&self, st: &mut State, bufs: &[&[u8]], offset: u64, end: u64) -> std::io::Result<()> {
        let block = self.block;
        let mut src = Gather::new(bufs);
        for (lo, hi) in chunk_ranges(offset, end, block, CHUNK_BYTES as u64) {
            let len = (hi - lo) as usize;
            if st.bounce.len() < len + MEM_ALIGN {
                st.bounce = vec![0; len + MEM_ALIGN];
            }
            let start = st.bounce.as_ptr().align_offset(MEM_ALIGN);
            let State { bounce, tail } = st;
            let buf = &mut bounce[start..start + len];
            // the write's bytes in this chunk: [from, to) on the device
            let (from, to) = (offset.max(lo), end.min(hi));
            if from > lo {
                self.fill_block(tail, &mut buf[..block as usize], lo)?;
            }
            if to < hi && (hi - block > lo || from == lo) {
                let b = buf.len() - block as usize;
                self.fill_block(tail, &mut buf[b..], hi - block)?;
            }
            src.copy_to(&mut buf[(from - lo) as usize..(to - lo) as usize]);
            self.file.write_all_at(buf, lo)?;
            let last = &buf[len - block as usize..];
            match tail {
                Some((off, bytes)) => {
                    *off = hi - block;
                    bytes.copy_from_slice(last);
                }
                None => *tail = Some((hi - block, last.to_vec())),
            }
        }
        Ok(())
    }

    /// Fill `dst` (one block) with what the device holds at `offset`: from the last write's
    /// tail if that is the block, else read past the page cache; zeros past a file's end.
    fn fill_block(&self, tail: &Option<(u64, Vec<u8>)>, dst: &mut [u8], offset: u64) -> std::io::Result<()> {
        match tail {
            Some((off, bytes)) if *off == offset => dst.copy_from_slice(bytes),
            _ => read_block(&self.file, dst, offset)?,
        }
        Ok(())
    }

    /// The device's bytes in `[offset, offset + len)` may have changed behind the writer (a
    /// hole punched): a cached tail block overlapping them is dropped.
    pub(crate) fn forget(&self, offset: u64, len: u64) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.tail.as_ref().is_some_and(|(off, b)| *off < offset + len && offset < *off + b.len() as u64) {
            st.tail = None;
        }
    }
}

fn open_direct(path: &Path) -> Option<File> {
    OpenOptions::new().write(true).read(true).custom_flags(libc::O_DIRECT).open(path).ok()
}

/// A file's direct-I/O alignment as its filesystem reports it (statx `STATX_DIOALIGN`):
/// (memory, offset and length), `None` where it reports none (no direct I/O, or a kernel
/// before 6.1).
fn dio_alignment(file: &File) -> Option<(u32, u32)> {
    // SAFETY: statx fills the zeroed struct it is given; the empty path with AT_EMPTY_PATH
    // names the open descriptor itself.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statx(file.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx) };
    if r != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// Read the block at `offset` into `dst`; what lies past the end of a file reads as zeros.
/// A direct read returns short only at the end of the file, and reading on from there
/// would be an unaligned direct read: one read, the rest zeros.
fn read_block(file: &File, dst: &mut [u8], offset: u64) -> std::io::Result<()> {
    let got = loop {
        match file.read_at(dst, offset) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    dst[got..].fill(0);
    Ok(())
}

/// Reads the concatenation of a list of slices in order, a range at a time.
struct Gather<'a> {
    bufs: &'a [&'a [u8]],
    idx: usize,
    skip: usize,
}

impl<'a> Gather<'a> {
    fn new(bufs: &'a [&'a [u8]]) -> Self {
        Gather { bufs, idx: 0, skip: 0 }
    }

    /// Fill `dst` with the next `dst.len()` bytes; the slices hold at least that many more.
    fn copy_to(&mut self, mut dst: &mut [u8]) {
        while !dst.is_empty() {
            let b = &self.bufs[self.idx][self.skip..];
            let n = b.len().min(dst.len());
            dst[..n].copy_from_slice(&b[..n]);
            dst = &mut dst[n..];
            self.skip += n;
            if self.skip == self.bufs[self.idx].len() {
                self.idx += 1;
                self.skip = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_floor_and_ceil_bracket_every_offset() {
        for block in [512u64, 4096] {
            for off in 0..3 * block + 1 {
                let (f, c) = (block_floor(off, block), block_ceil(off, block));
                assert!(f <= off && off <= c, "{off}: {f} {c}");
                assert_eq!(f % block, 0);
                assert_eq!(c % block, 0);
                assert!(off - f < block && c - off < block);
                assert_eq!(f == c, off % block == 0);
            }
        }
    }

    /// Every range of a device of a few blocks, split in chunks of one and of two blocks:
    /// the chunks are whole blocks, in order, contiguous, at most a chunk long, and cover
    /// exactly the blocks the range touches.
    #[test]
    fn chunk_ranges_cover_the_touched_blocks_in_whole_blocks() {
        let block = 512u64;
        for chunk in [block, 2 * block, 8 * block] {
            for offset in (0..5 * block).step_by(37) {
                for len in (1..4 * block).step_by(41) {
                    let end = offset + len;
                    let chunks: Vec<_> = chunk_ranges(offset, end, block, chunk).collect();
                    assert_eq!(chunks.first().unwrap().0, block_floor(offset, block));
                    assert_eq!(chunks.last().unwrap().1, block_ceil(end, block));
                    for w in chunks.windows(2) {
                        assert_eq!(w[0].1, w[1].0);
                    }
                    for &(lo, hi) in &chunks {
                        assert!(hi > lo && hi - lo <= chunk && lo % block == 0 && hi % block == 0);
                    }
                }
            }
        }
        assert_eq!(chunk_ranges(100, 100, block, block).count(), 0, "an empty write writes nothing");
    }

    #[test]
    fn gather_reads_across_slice_boundaries() {
        let bufs: [&[u8]; 4] = [b"ab", b"", b"cde", b"f"];
        let mut g = Gather::new(&bufs);
        let mut out = [0u8; 6];
        let (a, b) = out.split_at_mut(3);
        g.copy_to(a);
        g.copy_to(b);
        assert_eq!(&out, b"abcdef");
    }
}
