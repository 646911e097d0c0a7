//! A block device is written with `O_DIRECT` in whole logical blocks while the engine writes
//! byte-packed runs: these tests drive a real loop device (512-byte and 4-KiB logical
//! blocks) with unaligned writes, sequential streams and writes longer than one direct
//! chunk, against a reference copy of what the device must hold.

use squeezefs_device::doubles::{LoopDevice, SplitMix64};
use squeezefs_device::{Device, FileDevice};
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

fn byte_packed_writes_read_back(block: u64) {
    const SIZE: u64 = 24 << 20;
    let Some((lo, _backing)) = loop_device(SIZE, block) else { return };
    for seed in [1u64, 0x5eed, 0xdead_beef] {
        let mut rng = SplitMix64::new(seed);
        let dev = open_direct(lo.path());
        let mut model = vec![0u8; SIZE as usize];
        // the device starts with whatever the previous seed left: take it as the model's start
        dev.read_at(&mut model, 0).unwrap();
        let mut pos = rng.below(3 * block);
        for _ in 0..300 {
            let len = match rng.below(10) {
                0 => 1 + rng.below(block / 2),
                1 => 9 << 20, // longer than one direct chunk
                _ => 1 + rng.below(40_000),
            };
            let offset = if rng.below(4) == 0 { rng.below(SIZE - len) } else { pos };
            if offset + len > SIZE {
                pos = rng.below(block);
                continue;
            }
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            write(&dev, &mut model, &mut rng, offset, &data);
            pos = offset + len;
            // the write's neighbourhood reads back at once (buffered read after direct write)
            let (a, b) = (offset.saturating_sub(block + 7), (offset + len + block + 7).min(SIZE));
            let mut back = vec![0u8; (b - a) as usize];
            dev.read_at(&mut back, a).unwrap();
            assert!(back == model[a as usize..b as usize], "seed {seed}: [{a}, {b}) after a write at {offset}+{len}");
        }
        dev.sync().unwrap();
        check_whole(&dev, &model, seed);
        drop(dev);
        // and from a fresh open: the bytes are on the device, not only in a cache
        check_whole(&FileDevice::open(lo.path()).unwrap(), &model, seed);
    }
}

#[test]
fn byte_packed_direct_writes_read_back_on_512_byte_blocks() {
    byte_packed_writes_read_back(512);
}

#[test]
fn byte_packed_direct_writes_read_back_on_4k_blocks() {
    byte_packed_writes_read_back(4096);
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
