//! Devices are written with `O_DIRECT` in whole blocks while the engine writes byte-packed
//! runs: these tests drive a real loop device (512-byte and 4-KiB logical blocks) and device
//! files on the host's filesystems (growable, and of a fixed capacity that is no whole
//! number of blocks) with unaligned writes, sequential streams, writes past the end and
//! writes longer than one direct chunk, against a reference copy of what the device must
//! hold.

use squeezefs_device::doubles::{LoopDevice, SplitMix64};
use squeezefs_device::{Device, FileDevice, FileDeviceOptions};
use std::path::Path;

/// A loop device over a temporary file (kept as long as the device), or `None` with the
/// reason printed where loop devices cannot be set up.
fn loop_device(bytes: u64, block: u64) -> Option<(LoopDevice, tempfile::NamedTempFile)> {
    let backing = tempfile::NamedTempFile::new().unwrap();
    backing.as_file().set_len(bytes).unwrap();
    match LoopDevice::attach(backing.path(), block) {
        Ok(l) => Some((l, backing)),
        Err(why) => {
            eprintln!("{why}; skipping");
            None
        }
    }
}

fn open_direct(path: &Path) -> FileDevice {
    let dev = FileDevice::open(path).unwrap();
    assert!(dev.is_block_device());
    assert!(dev.writes_direct(), "a block device opened read-write writes with O_DIRECT");
    dev
}

/// Write `data` at `offset`, as one slice or split into a few (the device queue's gathered
/// runs), and mirror it in `model`.
fn write(dev: &FileDevice, model: &mut [u8], rng: &mut SplitMix64, offset: u64, data: &[u8]) {
    if data.len() > 2 && rng.below(2) == 0 {
        let a = 1 + rng.below(data.len() as u64 - 1) as usize;
        let b = a + rng.below((data.len() - a) as u64) as usize;
        dev.write_vectored_at(&[&data[..a], &data[a..b], &data[b..]], offset).unwrap();
    } else {
        dev.write_at(data, offset).unwrap();
    }
    model[offset as usize..offset as usize + data.len()].copy_from_slice(data);
}

fn check_whole(dev: &FileDevice, model: &[u8], seed: u64) {
    let mut back = vec![0u8; model.len()];
    dev.read_at(&mut back, 0).unwrap();
    if let Some(i) = back.iter().zip(model).position(|(a, b)| a != b) {
        panic!("seed {seed}: byte {i} reads {} where {} was written", back[i], model[i]);
    }
}

/// Random byte-packed writes to a device of `size` bytes (whose blocks are `block` bytes)
/// that `open` opens, three seeds, each read back around every write, after a sync and from
/// a fresh open; returns the device's final contents.
fn byte_packed_writes_read_back(size: u64, block: u64, open: &dyn Fn() -> FileDevice) -> Vec<u8> {
    let mut model = vec![0u8; size as usize];
    for seed in [1u64, 0x5eed, 0xdead_beef] {
        let mut rng = SplitMix64::new(seed);
        let dev = open();
        // the device starts with whatever the previous seed left: take it as the model's start
        let had = dev.len().min(size) as usize;
        dev.read_at(&mut model[..had], 0).unwrap();
        let mut pos = rng.below(3 * block);
        for _ in 0..300 {
            let len = match rng.below(10) {
                0 => 1 + rng.below(block / 2),
                1 => 9 << 20, // longer than one direct chunk
                _ => 1 + rng.below(40_000),
            };
            let offset = if rng.below(4) == 0 { rng.below(size - len) } else { pos };
            if offset + len > size {
                pos = rng.below(block);
                continue;
            }
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            write(&dev, &mut model, &mut rng, offset, &data);
            pos = offset + len;
            // the write's neighbourhood reads back at once (buffered read after direct write)
            let (a, b) = (offset.saturating_sub(block + 7), (offset + len + block + 7).min(dev.len()));
            let mut back = vec![0u8; (b - a) as usize];
            dev.read_at(&mut back, a).unwrap();
            assert!(back == model[a as usize..b as usize], "seed {seed}: [{a}, {b}) after a write at {offset}+{len}");
        }
        dev.sync().unwrap();
        let len = dev.len() as usize;
        check_whole(&dev, &model[..len], seed);
        drop(dev);
        // and from a fresh open: the bytes are on the device, not only in a cache
        check_whole(&open(), &model[..len], seed);
    }
    model
}

fn loop_writes_read_back(block: u64) {
    const SIZE: u64 = 24 << 20;
    let Some((lo, _backing)) = loop_device(SIZE, block) else { return };
    byte_packed_writes_read_back(SIZE, block, &|| open_direct(lo.path()));
}

#[test]
fn byte_packed_direct_writes_read_back_on_512_byte_blocks() {
    loop_writes_read_back(512);
}

#[test]
fn byte_packed_direct_writes_read_back_on_4k_blocks() {
    loop_writes_read_back(4096);
}

/// A run that starts and ends inside blocks must leave the bytes of those blocks outside it
/// as they were — the neighbouring records of a byte-packed extent — including when the
/// neighbours were written through another descriptor before this device was opened.
#[test]
fn an_unaligned_run_keeps_its_neighbours_in_shared_blocks() {
    let Some((lo, _backing)) = loop_device(1 << 20, 512) else { return };
    let before: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    {
        let f = std::fs::OpenOptions::new().write(true).open(lo.path()).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &before, 4096).unwrap();
        f.sync_all().unwrap();
    }
    let dev = open_direct(lo.path());
    dev.write_at(&[0xAA; 700], 4096 + 300).unwrap();
    dev.write_vectored_at(&[&[0xBB; 5], &[0xCC; 9]], 4096 + 1000).unwrap();
    let mut want = before.clone();
    want[300..1000].fill(0xAA);
    want[1000..1005].fill(0xBB);
    want[1005..1014].fill(0xCC);
    let mut back = vec![0u8; 8192];
    dev.read_at(&mut back, 4096).unwrap();
    assert_eq!(back, want);
}

/// A device opened read-only never opens a second, direct descriptor for writing.
#[test]
fn a_read_only_block_device_does_not_write_direct() {
    let Some((lo, _backing)) = loop_device(1 << 20, 512) else { return };
    let opts = squeezefs_device::FileDeviceOptions { read_only: true, ..Default::default() };
    let dev = FileDevice::open_with(lo.path(), &opts).unwrap();
    assert!(!dev.writes_direct());
}

/// The direct-I/O offset alignment the filesystem holding `path` reports (statx
/// `STATX_DIOALIGN`), `None` where it reports none: there a device file is written through
/// the page cache.
fn dio_offset_align(path: &Path) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: statx fills the zeroed struct; the empty path names the open descriptor.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statx(f.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx) };
    (r == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align != 0)
        .then_some(u64::from(stx.stx_dio_offset_align))
}

/// Device files in a temporary directory of each host filesystem the tests can reach: the
/// default one (a disk's filesystem here) and /dev/shm (tmpfs).
fn host_dirs() -> Vec<tempfile::TempDir> {
    let mut dirs = vec![tempfile::tempdir().unwrap()];
    if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
        dirs.push(d);
    }
    dirs
}

/// A device file opened with `opts`, checked to write direct exactly where its filesystem
/// reports a direct-I/O alignment and opens the file with `O_DIRECT`.
fn open_file(path: &Path, opts: &FileDeviceOptions) -> FileDevice {
    use std::os::unix::fs::OpenOptionsExt;
    let dev = FileDevice::open_with(path, opts).unwrap();
    assert!(!dev.is_block_device());
    let align = dio_offset_align(path);
    let opens = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path).is_ok();
    assert_eq!(dev.writes_direct(), align.is_some() && opens, "{}: alignment {align:?}", path.display());
    dev
}

/// A growable device file: writes extend it, holes read as zeros, and its length stays a
/// whole number of blocks where it is written direct.
#[test]
fn byte_packed_writes_to_a_growable_device_file_read_back() {
    const SIZE: u64 = 24 << 20;
    for dir in host_dirs() {
        let path = dir.path().join("dev");
        let opts = FileDeviceOptions { create: true, ..Default::default() };
        drop(open_file(&path, &opts));
        let align = dio_offset_align(&path);
        eprintln!("{}: direct I/O alignment {align:?}", dir.path().display());
        let block = align.unwrap_or(512).max(4096);
        let model = byte_packed_writes_read_back(SIZE, block, &|| open_file(&path, &opts));
        let file_len = std::fs::metadata(&path).unwrap().len();
        if align.is_some() {
            assert_eq!(file_len % block, 0, "a direct write leaves whole blocks");
        }
        let dev = open_file(&path, &opts);
        assert_eq!(dev.len(), file_len);
        let mut back = vec![0u8; file_len as usize];
        dev.read_at(&mut back, 0).unwrap();
        let written = model.len().min(back.len());
        assert!(back[..written] == model[..written]);
        assert!(back[written..].iter().all(|&b| b == 0), "past the last byte written the file holds zeros");
    }
}

/// A fixed capacity that is no whole number of blocks: writes up to its last byte succeed
/// and read back, the file never grows past it (reopening with it succeeds), and a write
/// past it is refused.
#[test]
fn a_fixed_capacity_of_no_whole_blocks_is_never_exceeded() {
    for dir in host_dirs() {
        let path = dir.path().join("dev");
        let cap = (1 << 20) + 1000;
        let opts = FileDeviceOptions { create: true, capacity: Some(cap), ..Default::default() };
        let dev = open_file(&path, &opts);
        let mut model = vec![0u8; cap as usize];
        let mut rng = SplitMix64::new(7);
        // a stream of records up to the capacity's last byte, then rewrites around the end
        let mut pos = 0;
        while pos < cap {
            let len = (1 + rng.below(30_000)).min(cap - pos);
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            write(&dev, &mut model, &mut rng, pos, &data);
            pos += len;
            assert!(std::fs::metadata(&path).unwrap().len() <= cap, "the file grew past its capacity at {pos}");
        }
        for _ in 0..50 {
            let len = 1 + rng.below(9000);
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let offset = cap - len - rng.below(3000).min(cap - len);
            write(&dev, &mut model, &mut rng, offset, &data);
        }
        assert!(dev.write_at(&[1], cap).is_err(), "a write past the capacity is refused");
        dev.sync().unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() <= cap);
        check_whole(&dev, &model, 7);
        drop(dev);
        check_whole(&open_file(&path, &opts), &model, 7);
    }
}

/// A hole punched over the block the last write ended in: the next write into that block
/// keeps the punched bytes outside it zero, rather than restoring them from the writer's
/// copy of the block.
#[test]
fn a_write_into_a_punched_tail_block_keeps_the_hole() {
    for dir in host_dirs() {
        let path = dir.path().join("dev");
        let opts = FileDeviceOptions { create: true, ..Default::default() };
        let dev = open_file(&path, &opts);
        dev.write_at(&[0x11; 3 * 4096 + 100], 0).unwrap();
        // ends 100 bytes into block 5
        dev.write_at(&[0x22; 8192], 3 * 4096 + 100).unwrap();
        // frees [4·4096, 6·4096 + 100): blocks 4 and 5 are punched
        dev.discard(4 * 4096, 2 * 4096 + 100).unwrap();
        let mut back = vec![0u8; 100];
        dev.read_at(&mut back, 5 * 4096).unwrap();
        if back.iter().any(|&b| b != 0) {
            eprintln!("{}: the filesystem does not punch holes; skipping", dir.path().display());
            continue;
        }
        dev.write_at(&[0x33; 10], 5 * 4096 + 2000).unwrap();
        let mut back = vec![0u8; 2010];
        dev.read_at(&mut back, 5 * 4096).unwrap();
        assert!(back[2000..2010].iter().all(|&b| b == 0x33));
        back[2000..2010].fill(0);
        assert!(back.iter().all(|&b| b == 0), "{}: punched bytes came back", dir.path().display());
    }
}
