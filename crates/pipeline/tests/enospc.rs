//! ENOSPC: a pool on a fixed-size device. Filling it returns `EngineError::NoSpace`,
//! committed data stays readable, the pool stays consistent, and deleting files frees space
//! for new writes (after the commit that freed it).

mod crash_common;

use crash_common::{assert_fsck_clean, delete_file, random_bytes, read_all, write_new_file};
use squeezefs_pipeline::{Engine, EngineError, MkfsOptions, OpenOptions, ROOT_INO};

const MIB: u64 = 1024 * 1024;
const CAPACITY: u64 = 8 * MIB;

fn opts() -> OpenOptions {
    // Random data does not compress: what is written is what is stored.
    OpenOptions { compression: "zstd:1".parse().unwrap(), ..OpenOptions::default() }
}

/// Write `data` to a new file `name` and fsync; `Err` is where it failed.
fn write_file(e: &Engine, name: &str, data: &[u8]) -> Result<u64, EngineError> {
    let ino = write_new_file(e, name, data)?;
    e.fsync(ino)?;
    Ok(ino)
}

#[test]
fn filling_a_fixed_device_returns_no_space_and_recovers_after_delete() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions { device_capacity: Some(CAPACITY), ..MkfsOptions::default() })
        .unwrap();
    let e = Engine::open(&pool, &opts()).unwrap();
    let keep = random_bytes(1, 2 * MIB);
    let keep_ino = write_file(&e, "keep", &keep).unwrap();

    // Fill with 1 MiB files until the pool says NoSpace.
    let mut fillers = Vec::new();
    let mut failed_name = None;
    for k in 0..32u64 {
        let name = format!("fill{k}");
        match write_file(&e, &name, &random_bytes(100 + k, MIB)) {
            Ok(_) => fillers.push(name),
            Err(EngineError::NoSpace) => {
                failed_name = Some(name);
                break;
            }
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
    }
    let failed_name = failed_name.expect("a fixed 8 MiB device took 32 MiB of random data");
    assert!(fillers.len() >= 3, "only {} MiB fitted next to 2 MiB", fillers.len());
    assert!((fillers.len() as u64 + 2) * MIB <= CAPACITY, "more data than capacity fitted");

    // Committed data intact; the pool is consistent.
    assert_eq!(read_all(&e, keep_ino).unwrap(), keep);
    for (k, name) in fillers.iter().enumerate() {
        let (ino, _) = e.lookup(ROOT_INO, name.as_bytes()).unwrap().unwrap();
        assert_eq!(read_all(&e, ino).unwrap(), random_bytes(100 + k as u64, MIB), "{name}");
    }
    assert_fsck_clean(&e, "after ENOSPC");

    // Delete the partial file and the fillers; after the commit that frees them, new data fits.
    delete_file(&e, failed_name.as_bytes()).unwrap();
    for name in &fillers {
        delete_file(&e, name.as_bytes()).unwrap();
    }
    e.sync().unwrap();
    let fresh = random_bytes(2, 3 * MIB);
    let fresh_ino = write_file(&e, "fresh", &fresh).expect("space freed by deletes is reusable");
    assert_eq!(read_all(&e, fresh_ino).unwrap(), fresh);
    assert_fsck_clean(&e, "after delete and rewrite");
    e.close().unwrap();
    drop(e); // releases the pool lock

    // And all of it survives a reopen.
    let e = Engine::open(&pool, &opts()).unwrap();
    assert_eq!(read_all(&e, keep_ino).unwrap(), keep);
    assert_eq!(read_all(&e, fresh_ino).unwrap(), fresh);
    assert_fsck_clean(&e, "after reopen");
    e.close().unwrap();
}

/// Regression (byte packing, ninth session): bytes freed inside sectors that still hold live
/// records were counted as free space, although the allocator hands out only whole free
/// sectors. Writes were accepted that no txg could place: the txg failed with NoSpace and
/// the pool was suspended, losing the accepted data. Now such writes are refused up front.
#[test]
fn free_bytes_in_shared_sectors_are_not_offered_to_new_writes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    // no inline records: every small file is a device record, packed byte by byte
    let mkfs = MkfsOptions { device_capacity: Some(MIB), max_inline: Some(0), ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &OpenOptions { compression: "none".parse().unwrap(), ..OpenOptions::default() }).unwrap();
    let mut names = Vec::new();
    for k in 0..10_000u64 {
        let name = format!("s{k}");
        match write_new_file(&e, &name, &random_bytes(k, 300)) {
            Ok(_) => names.push(name),
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
        if k % 500 == 499 {
            e.sync().unwrap();
        }
    }
    e.sync().unwrap();
    assert!(names.len() > 2000, "only {} files of 300 bytes fitted in 1 MiB", names.len());
    // every other file goes: ~half the bytes are free, but no sector is wholly free
    for name in names.iter().step_by(2) {
        delete_file(&e, name.as_bytes()).unwrap();
    }
    e.sync().unwrap();
    assert_fsck_clean(&e, "after the deletes");
    let big = random_bytes(7, 256 * 1024);
    match write_new_file(&e, "big", &big) {
        Err(EngineError::NoSpace) => {}
        Ok(_) => panic!("256 KiB accepted with no whole sector free"),
        Err(other) => panic!("expected NoSpace, got {other}"),
    }
    // the pool is not suspended: syncs go on, and freeing whole sectors makes room again
    e.sync().unwrap();
    for name in names.iter().skip(1).step_by(2) {
        delete_file(&e, name.as_bytes()).unwrap();
    }
    e.sync().unwrap();
    let ino = write_new_file(&e, "big2", &big).unwrap();
    e.fsync(ino).unwrap();
    assert_eq!(read_all(&e, ino).unwrap(), big);
    assert_fsck_clean(&e, "at the end");
}
