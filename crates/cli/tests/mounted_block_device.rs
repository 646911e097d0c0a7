//! A pool on a block device, mounted with the built binary: its data is written with
//! `O_DIRECT` in whole logical blocks while records are packed byte by byte (sector 512), so
//! every run shares its end blocks with its neighbours. What a mount writes must read back
//! after a remount, and fsck and scrub must find the pool whole.
mod mounted_common;
use mounted_common::*;
use squeezefs_device::doubles::LoopDevice;

/// Unmounts `mnt` when dropped if still mounted: a failed assertion leaves no live mount.
struct Unmount<'a>(&'a str);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let mounted = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        if mounted.lines().any(|l| l.split(' ').nth(1) == Some(self.0)) {
            let _ = run(&["umount", self.0]);
        }
    }
}

/// Text-like bytes that compress to odd lengths, different for every `seed`.
fn content(seed: u64, len: usize) -> Vec<u8> {
    let words = [&b"squeeze "[..], b"block ", b"direct ", b"sector ", b"record ", b"pack "];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 6) as usize]);
        if x.is_multiple_of(5) {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out.truncate(len);
    out
}

#[test]
fn a_pool_on_a_block_device_reads_back_what_a_mount_wrote() {
    if !can_mount() {
        return;
    }
    let backing = tempfile::NamedTempFile::new_in("/tmp").unwrap();
    backing.as_file().set_len(256 << 20).unwrap();
    let lo = match LoopDevice::attach(backing.path(), 512) {
        Ok(l) => l,
        Err(why) => return eprintln!("{why}; skipping"),
    };
    let dir = tempfile::Builder::new().prefix("sqzblk").tempdir_in("/tmp").unwrap();
    let (pool, mnt) = (dir.path().join("pool"), dir.path().join("mnt"));
    std::fs::create_dir(&mnt).unwrap();
    let (p, m, d) = (pool.to_str().unwrap(), mnt.to_str().unwrap(), lo.path().to_str().unwrap());
    run_ok(&["mkfs", p, "--device", d, "--sector", "512"]);
    let _guard = Unmount(m);
    run_ok(&["mount", p, m, "-o", "compress=zstd:1"]);
    // sizes around the record size and far from any block multiple, small files that go
    // inline or into bundles, one file large enough for several device runs
    let sizes: Vec<usize> =
        (0..60u64).map(|i| [1, 700, 4097, 131_071, 131_073, 300_001][(i % 6) as usize] + i as usize * 37).collect();
    for (i, &n) in sizes.iter().enumerate() {
        std::fs::write(mnt.join(format!("f{i}")), content(i as u64, n)).unwrap();
    }
    std::fs::write(mnt.join("big"), content(99, 24 << 20)).unwrap();
    run_ok(&["umount", m]);
    let fsck = run(&["fsck", p]);
    assert!(fsck.status.success(), "fsck: {}", String::from_utf8_lossy(&fsck.stdout));
    let scrub = run(&["scrub", p]);
    assert!(scrub.status.success(), "scrub: {}", String::from_utf8_lossy(&scrub.stdout));
    run_ok(&["mount", p, m]);
    for (i, &n) in sizes.iter().enumerate() {
        assert!(std::fs::read(mnt.join(format!("f{i}"))).unwrap() == content(i as u64, n), "f{i} ({n} bytes)");
    }
    assert!(std::fs::read(mnt.join("big")).unwrap() == content(99, 24 << 20), "big");
    run_ok(&["umount", m]);
}
