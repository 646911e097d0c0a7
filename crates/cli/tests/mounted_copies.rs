//! Copies inside a mount share stored records (copy_file_range → pipeline write/share.rs):
//! `cp --reflink=auto --sparse=never` of a large file takes a fraction of the time of a copy from outside
//! and barely grows the pool; after changing 1 MiB in the middle of the copy the original
//! reads back unchanged and the pool grows by about that much; overwrites of either side,
//! truncation, punching, unlinking the original and a remount keep both files equal to a
//! model, and fsck and scrub of the pool find everything in order.
mod mounted_common;
use mounted_common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

const MIB: usize = 1 << 20;

/// Text-like data that compresses about 3:1 and differs per MiB.
fn data(mib: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(mib * MIB);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let words: [&[u8]; 8] = [b"squeeze ", b"record ", b"shared ", b"copy ", b"\n", b"fuse ", b"zstd ", b"extent "];
    while v.len() < mib * MIB {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(words[(x % 8) as usize]);
        if x.is_multiple_of(7) {
            v.extend_from_slice(&x.to_le_bytes());
        }
    }
    v.truncate(mib * MIB);
    v
}

/// Bytes the pool's data device file holds on its host (its blocks: freed ranges are
/// punched out, so this is the pool's data bytes).
fn data_bytes(m: &Mounted) -> u64 {
    std::fs::metadata(m.pool.join("data.0")).unwrap().blocks() * 512
}

/// The kernel's dirty pages written back and the pool committed (syncfs alone does not
/// reach the daemon: an fsync does).
fn syncfs(p: &Path) {
    let f = std::fs::File::open(p).unwrap();
    assert_eq!(unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) }, 0);
    f.sync_all().unwrap();
}

/// `cp --reflink=auto` with `extra` arguments; its time in seconds.
fn cp(from: &Path, to: &Path, extra: &[&str]) -> f64 {
    let t = Instant::now();
    let out = Command::new("cp").arg("--reflink=auto").args(extra).arg(from).arg(to).output().unwrap();
    assert!(out.status.success(), "cp: {}", String::from_utf8_lossy(&out.stderr));
    t.elapsed().as_secs_f64()
}

fn read(p: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    std::fs::File::open(p).unwrap().read_to_end(&mut v).unwrap();
    v
}

fn check_pool(m: &Mounted) {
    let p = m.pool.to_str().unwrap();
    for cmd in ["fsck", "scrub"] {
        let out = run(&[cmd, p]);
        assert!(
            out.status.success(),
            "{cmd}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn cp_inside_a_mount_shares_the_data_and_is_fast() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=zstd:1");
    let size_mib = 128;
    let d = data(size_mib);
    let host = m.dir.path().join("host-copy");
    std::fs::write(&host, &d).unwrap();
    // the original, written from outside: the copy from outside, timed with its sync
    let t = Instant::now();
    cp(&host, &m.path("a"), &[]);
    syncfs(&m.path("a"));
    let outside = t.elapsed().as_secs_f64();
    let before = data_bytes(&m);
    // coreutils 9.1 takes a file whose blocks are fewer than its size asks for (every
    // compressed file) for a sparse one and copies it by read and write, never trying
    // copy_file_range; `--sparse=never` skips that guess (docs/usage.md)
    let t = Instant::now();
    cp(&m.path("a"), &m.path("b"), &["--sparse=never"]);
    syncfs(&m.mnt);
    let inside = t.elapsed().as_secs_f64();
    let after = data_bytes(&m);
    let grown = after.saturating_sub(before);
    eprintln!(
        "{size_mib} MiB: copy from outside {outside:.2} s, cp inside {inside:.3} s ({:.1}%); pool data {before} -> {after} (+{grown})",
        inside * 100.0 / outside
    );
    assert!(grown * 100 <= before, "the copy grew the pool by {grown} of {before} bytes");
    assert!(inside * 5.0 <= outside, "cp inside took {inside:.3} s, from outside {outside:.3} s");
    assert!(read(&m.path("b")) == d, "the copy reads back the original's bytes");
    // 1 MiB changed in the middle of the copy: only the copy changes, the pool grows by
    // about that much (stored compressed)
    let patch = data(1).into_iter().rev().collect::<Vec<u8>>();
    let f = std::fs::OpenOptions::new().write(true).open(m.path("b")).unwrap();
    f.write_all_at(&patch, (size_mib / 2 * MIB) as u64).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let changed = data_bytes(&m).saturating_sub(after);
    eprintln!("1 MiB changed in the copy: pool +{changed}");
    assert!(changed <= 2 * MIB as u64, "changing 1 MiB grew the pool by {changed}");
    assert!(read(&m.path("a")) == d, "the original is unchanged");
    let mut db = d.clone();
    db[size_mib / 2 * MIB..size_mib / 2 * MIB + MIB].copy_from_slice(&patch);
    assert!(read(&m.path("b")) == db, "the copy holds the change");
    // cp's default guess copies by read and write: slower, the same bytes
    cp(&m.path("a"), &m.path("c"), &[]);
    assert!(read(&m.path("c")) == d);
    m.remount();
    assert!(read(&m.path("a")) == d);
    assert!(read(&m.path("b")) == db);
    m.umount();
    check_pool(&m);
}

/// A model of two files through copies and every kind of change to either side.
#[test]
fn copies_follow_a_model_through_changes_of_either_side_and_a_remount() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=lz4");
    let rs = 128 * 1024;
    let mut a = data(3);
    a.truncate(3 * MIB - 777);
    std::fs::write(m.path("a"), &a).unwrap();
    // os.copy_file_range, the whole file (Python loops until done)
    let py = format!(
        "import os\nfi=os.open('{}',os.O_RDONLY)\nfo=os.open('{}',os.O_WRONLY|os.O_CREAT,0o644)\nn=0\nwhile True:\n    k=os.copy_file_range(fi,fo,1<<30)\n    if k==0: break\n    n+=k\nprint(n)\n",
        m.path("a").display(),
        m.path("b").display()
    );
    let out = Command::new("python3").arg("-c").arg(&py).output().unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), a.len().to_string());
    let mut b = a.clone();
    assert!(read(&m.path("b")) == b);
    syncfs(&m.mnt);
    // overwrite a part of the original and a whole record of the copy
    let fa = std::fs::OpenOptions::new().read(true).write(true).open(m.path("a")).unwrap();
    fa.write_all_at(b"original changed", 5 * rs as u64 + 3).unwrap();
    a[5 * rs + 3..5 * rs + 19].copy_from_slice(b"original changed");
    let fb = std::fs::OpenOptions::new().read(true).write(true).open(m.path("b")).unwrap();
    fb.write_all_at(&vec![7u8; rs], 2 * rs as u64).unwrap();
    b[2 * rs..3 * rs].fill(7);
    // the copy cut inside a record, a hole punched into it
    fb.set_len(15 * rs as u64 + 5).unwrap();
    b.truncate(15 * rs + 5);
    let r = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&fb),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            8 * rs as i64 + 100,
            2 * rs as i64,
        )
    };
    assert_eq!(r, 0, "punch: {}", std::io::Error::last_os_error());
    b[8 * rs + 100..10 * rs + 100].fill(0);
    // a part of the copy copied into the original at a record boundary, and within b
    let (mut oi, mut oo) = (4 * rs as i64, 20 * rs as i64);
    let n = unsafe {
        libc::copy_file_range(
            std::os::fd::AsRawFd::as_raw_fd(&fb),
            &mut oi,
            std::os::fd::AsRawFd::as_raw_fd(&fa),
            &mut oo,
            3 * rs,
            0,
        )
    };
    assert_eq!(n, 3 * rs as isize, "{}", std::io::Error::last_os_error());
    a.resize(a.len().max(23 * rs), 0);
    a[20 * rs..23 * rs].copy_from_slice(&b[4 * rs..7 * rs]);
    drop((fa, fb));
    assert!(read(&m.path("a")) == a, "a after the changes");
    assert!(read(&m.path("b")) == b, "b after the changes");
    syncfs(&m.mnt);
    m.remount();
    assert!(read(&m.path("a")) == a, "a after a remount");
    assert!(read(&m.path("b")) == b, "b after a remount");
    // the original goes; the copy reads on, across another remount
    std::fs::remove_file(m.path("a")).unwrap();
    syncfs(&m.mnt);
    assert!(read(&m.path("b")) == b);
    m.remount();
    assert!(read(&m.path("b")) == b, "b after the original went");
    let mut f = std::fs::File::open(m.path("b")).unwrap();
    f.seek(SeekFrom::Start(2 * rs as u64)).unwrap();
    let mut one = [0u8; 1];
    f.read_exact(&mut one).unwrap();
    assert_eq!(one[0], 7);
    drop(f);
    std::fs::OpenOptions::new().append(true).open(m.path("b")).unwrap().write_all(b"tail").unwrap();
    m.umount();
    check_pool(&m);
}

/// What a current coreutils `cp` decides from (docs/usage.md "Copies"): a compressed file
/// has fewer blocks than its size, so `cp` asks SEEK_DATA/SEEK_HOLE; with no hole reported
/// it takes the file for transparently compressed and calls `copy_file_range`, which
/// shares. A hole reported where there is data would make `cp` skip that data.
#[test]
fn a_compressed_file_without_holes_shows_none_to_seek_hole() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("compress=zstd:3");
    let d = data(4);
    std::fs::write(m.path("a"), &d).unwrap();
    syncfs(&m.path("a"));
    let f = std::fs::File::open(m.path("a")).unwrap();
    let md = f.metadata().unwrap();
    assert!(md.blocks() * 512 < md.len() / 2, "{} blocks for {} bytes: stored compressed", md.blocks(), md.len());
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    for at in [0i64, 1, 300_000, d.len() as i64 - 1] {
        assert_eq!(unsafe { libc::lseek(fd, at, libc::SEEK_DATA) }, at, "SEEK_DATA from {at}");
        assert_eq!(unsafe { libc::lseek(fd, at, libc::SEEK_HOLE) }, d.len() as i64, "SEEK_HOLE from {at}");
    }
    drop(f);
    let before = data_bytes(&m);
    cp(&m.path("a"), &m.path("b"), &["--sparse=never"]);
    syncfs(&m.mnt);
    assert_eq!(data_bytes(&m), before, "the copy shares every record");
    assert!(read(&m.path("b")) == d);
}
