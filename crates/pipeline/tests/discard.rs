//! Freed space goes back to the host: a pool's device file is a growable sparse file, and
//! space freed by a commit is punched out of it (`Device::discard`), so deleting data
//! shrinks what the pool occupies on the host filesystem: without it a deleted 1.36 GB
//! tarball would keep its 1.36 GB on the host, and only new writes could reuse it.

mod crash_common;

use crash_common::{assert_fsck_clean, delete_file, random_bytes, read_all, write_new_file};
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions, DEFAULT_DEVICE_FILE};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const MIB: u64 = 1024 * 1024;

/// Bytes the host filesystem holds for the device file.
fn host_bytes(pool: &Path) -> u64 {
    std::fs::metadata(pool.join(DEFAULT_DEVICE_FILE)).unwrap().blocks() * 512
}

#[test]
fn deleted_files_kept_their_host_space() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    // random data does not compress: stored bytes = written bytes
    let opts = OpenOptions { compression: "zstd:1".parse().unwrap(), ..OpenOptions::default() };
    let e = Engine::open(&pool, &opts).unwrap();
    let keep = random_bytes(1, 3 * MIB + 777);
    let keep_ino = write_new_file(&e, "keep", &keep).unwrap();
    let victims: Vec<Vec<u8>> = (0..3).map(|i| random_bytes(10 + i, 6 * MIB + i * 4099)).collect();
    for (i, v) in victims.iter().enumerate() {
        write_new_file(&e, &format!("victim{i}"), v).unwrap();
    }
    e.sync().unwrap();
    let full = host_bytes(&pool);
    assert!(full >= 21 * MIB, "device file holds only {full} bytes after 21 MiB of writes");

    for i in 0..3 {
        delete_file(&e, format!("victim{i}").as_bytes()).unwrap();
    }
    e.sync().unwrap();
    let after = host_bytes(&pool);
    // what is left: the kept file, its partial pages, the device header
    assert!(after <= 3 * MIB + 777 + MIB, "deleting 18 MiB left {after} of {full} bytes on the host");
    assert_eq!(read_all(&e, keep_ino).unwrap(), keep, "kept file after the discard");
    assert_fsck_clean(&e, "after delete");

    // the punched space is reusable and reads back what is written into it
    let fresh = random_bytes(99, 10 * MIB);
    let fresh_ino = write_new_file(&e, "fresh", &fresh).unwrap();
    e.sync().unwrap();
    assert_eq!(read_all(&e, fresh_ino).unwrap(), fresh);
    e.close().unwrap();
    drop(e);

    let e = Engine::open(&pool, &opts).unwrap();
    assert_eq!(read_all(&e, keep_ino).unwrap(), keep);
    assert_eq!(read_all(&e, fresh_ino).unwrap(), fresh);
    assert_fsck_clean(&e, "after reopen");
    assert!(e.scrub(&|_, _| {}).unwrap().is_clean(), "scrub after reopen");
    e.close().unwrap();
}

/// On a growable pool, statfs' total counted the free ranges inside the
/// device file on top of the host's free space, which already holds them (they were punched
/// back to the host). `df`'s Used (total - free) therefore kept a deleted file's bytes for
/// as long as its range stayed below the allocation end: deleting 8 MiB freed them on the
/// host and in the space map, yet `df` went on showing them used.
#[test]
fn deleted_data_stays_used_in_statfs_on_a_growable_pool() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let opts = OpenOptions { compression: "zstd:1".parse().unwrap(), ..OpenOptions::default() };
    let e = Engine::open(&pool, &opts).unwrap();
    // the victim first, so that its records lie below the kept file's: freeing them makes a
    // free range inside the device file instead of moving the allocation end back
    write_new_file(&e, "victim", &random_bytes(3, 8 * MIB)).unwrap();
    write_new_file(&e, "keep", &random_bytes(4, 2 * MIB)).unwrap();
    e.sync().unwrap();
    delete_file(&e, b"victim").unwrap();
    e.sync().unwrap();
    let live: u64 = e.device_stats().iter().map(|d| d.used_bytes).sum();
    assert!(live < 3 * MIB, "{live} bytes live after deleting the victim");
    // one statfs: the host's free figure is read once into it, so this holds however the
    // host's free space moves meanwhile
    let st = e.statfs().unwrap();
    let df_used = st.total_bytes - st.free_bytes;
    assert_eq!(df_used, live, "df's Used is {df_used} bytes with {live} bytes of live data");
    e.close().unwrap();
}
