//! `squeezefs fsck` on pools damaged in ways it did not see before: each test corrupts a
//! closed pool one way and expects exit status 1 with the problem named on stdout.
use redb::ReadableTable;
use squeezefs_device::{read_header, write_header, FileDevice, FileDeviceOptions};
use squeezefs_meta::encode::{decode_inode, encode_inode};
use squeezefs_meta::{tables, Superblock};
use squeezefs_pipeline::{Engine, FileKind, Ino, InodeAttr, MkfsOptions, OpenOptions, DEFAULT_DEVICE_FILE, ROOT_INO};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_squeezefs");

/// A closed pool holding one file of 600 KiB of incompressible bytes (on the device).
fn pool_with_a_file(dir: &Path) -> (PathBuf, Ino) {
    let pool = dir.join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    let ino = e
        .meta_write(|tx| {
            let ino = tx.alloc_ino()?;
            let a = InodeAttr {
                nlink: 1,
                generation: 1,
                ..InodeAttr::new(ino, FileKind::File, 0o644, 0, 0, squeezefs_pipeline::now())
            };
            tx.put_inode(&a)?;
            tx.dir_insert(ROOT_INO, b"f", ino, FileKind::File)?;
            Ok(ino)
        })
        .unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let data: Vec<u8> = (0..600 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    e.write(ino, 0, &data).unwrap();
    e.close().unwrap();
    (pool, ino)
}

/// `squeezefs fsck POOL`: its exit status and stdout.
fn fsck(pool: &Path) -> (Option<i32>, String) {
    let out = Command::new(BIN).args(["fsck", pool.to_str().unwrap()]).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

fn assert_fsck_finds(pool: &Path, phrases: &[&str]) {
    let (code, out) = fsck(pool);
    assert_eq!(code, Some(1), "fsck must exit 1: {out}");
    for p in phrases {
        assert!(out.contains(p), "{p:?} missing from the fsck report: {out}");
    }
}

#[test]
fn an_undamaged_pool_is_clean() {
    let d = tempfile::tempdir().unwrap();
    let (pool, _) = pool_with_a_file(d.path());
    let (code, out) = fsck(&pool);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("pool is clean"), "{out}");
}

/// A growable device file truncated below its allocation end opens (only fixed devices
/// have a recorded size to check at open) but has lost the records past its new end.
#[test]
fn fsck_finds_a_device_file_truncated_below_its_allocation_end() {
    let d = tempfile::tempdir().unwrap();
    let (pool, ino) = pool_with_a_file(d.path());
    let data = pool.join(DEFAULT_DEVICE_FILE);
    let len = std::fs::metadata(&data).unwrap().len();
    assert!(len > 600 * 1024, "the file's records are on the device: {len}");
    std::fs::OpenOptions::new().write(true).open(&data).unwrap().set_len(len - 100 * 1024).unwrap();
    let short = (len - 100 * 1024).to_string();
    assert_fsck_finds(
        &pool,
        &["device 0", &format!("is {short} bytes"), &format!("inode {ino}"), "truncated below its allocation end"],
    );
}

#[test]
fn fsck_finds_a_file_size_above_the_maximum() {
    let d = tempfile::tempdir().unwrap();
    let (pool, ino) = pool_with_a_file(d.path());
    let db = Engine::open_meta_store(&pool).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(tables::INODES).unwrap();
        let mut a = decode_inode(ino, t.get(ino).unwrap().unwrap().value()).unwrap();
        a.size = (1 << 62) + 1;
        t.insert(ino, &encode_inode(&a)[..]).unwrap();
    }
    tx.commit().unwrap();
    drop(db);
    assert_fsck_finds(&pool, &[&format!("inode {ino}: size {}", (1u64 << 62) + 1), "above the largest file size"]);
}

#[test]
fn fsck_finds_header_and_superblock_disagreeing_on_the_device_count() {
    let d = tempfile::tempdir().unwrap();
    let (pool, _) = pool_with_a_file(d.path());
    let dev = FileDevice::open_with(
        &pool.join(DEFAULT_DEVICE_FILE),
        &FileDeviceOptions { read_only: false, create: false, capacity: None },
    )
    .unwrap();
    let mut h = read_header(&dev).unwrap();
    assert_eq!(h.device_count, 1);
    h.device_count = 3;
    write_header(&dev, &h).unwrap();
    drop(dev);
    assert_fsck_finds(&pool, &["device 0", "its header says the pool has 3 devices, the superblock says 1"]);
}

/// The superblock naming fewer devices than the devices table holds (open reads only as
/// many rows as the superblock names).
#[test]
fn fsck_finds_the_superblock_and_the_devices_table_disagreeing() {
    let d = tempfile::tempdir().unwrap();
    let (pool, _) = pool_with_a_file(d.path());
    let db = Engine::open_meta_store(&pool).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut dt = tx.open_table(tables::DEVICES).unwrap();
        let row = dt.get(0u32).unwrap().unwrap().value().to_vec();
        dt.insert(1u32, &row[..]).unwrap();
        let sb =
            Superblock::decode(tx.open_table(tables::SUPERBLOCK).unwrap().get(0u8).unwrap().unwrap().value()).unwrap();
        assert_eq!(sb.device_count, 1);
    }
    tx.commit().unwrap();
    drop(db);
    assert_fsck_finds(&pool, &["the superblock names 1 devices but the devices table holds 2"]);
}
