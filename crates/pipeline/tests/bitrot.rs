//! Bit rot: bytes flipped in a device file behind the engine's back. Reads of the damaged
//! records fail with `EngineError::Checksum` (never garbage), every other record of every
//! file reads back correctly, and scrub names exactly the damaged files.
//!
//! Two ways to pick the bytes: blindly anywhere in the data area (whatever they hit), and
//! inside extents listed by `Engine::extents`, so the damaged records are known in advance
//! and reads and scrub must name exactly those.

mod crash_common;

use crash_common::{content, create_file, file_name};
use squeezefs_device::doubles::SplitMix64;
use squeezefs_device::DATA_START;
use squeezefs_meta::StoredRecord;
use squeezefs_pipeline::{Engine, EngineError, MkfsOptions, OpenOptions, ROOT_INO};
use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::Path;

const FILES: usize = 24;
const FILE_LEN: u64 = 384 * 1024;
const RECORD: u64 = 128 * 1024;

fn opts() -> OpenOptions {
    OpenOptions { compression: "zstd:1".parse().unwrap(), ..OpenOptions::default() }
}

fn seed_of(i: usize) -> u64 {
    1000 + i as u64 // never ≡ 0 mod 32 for i < 24: no all-zero files
}

fn write_pool(pool: &Path) {
    Engine::mkfs(pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(pool, &opts()).unwrap();
    for i in 0..FILES {
        let ino = create_file(&e, &file_name(i)).unwrap();
        e.write(ino, 0, &content(seed_of(i), FILE_LEN)).unwrap();
    }
    e.sync().unwrap();
    e.close().unwrap();
}

/// Read every file record by record; returns the inodes with a damaged record. Panics on
/// any other error and on wrong content.
fn damaged_by_reading(e: &Engine) -> BTreeSet<u64> {
    damaged_records_by_reading(e).into_iter().map(|(ino, _)| ino).collect()
}

/// (inode, record offset) of every record whose read fails with a checksum error.
fn damaged_records_by_reading(e: &Engine) -> BTreeSet<(u64, u64)> {
    let mut damaged = BTreeSet::new();
    for i in 0..FILES {
        let (ino, _) = e.lookup(ROOT_INO, &file_name(i)).unwrap().expect("file exists");
        let want = content(seed_of(i), FILE_LEN);
        for rec in 0..FILE_LEN.div_ceil(RECORD) {
            let off = rec * RECORD;
            let len = RECORD.min(FILE_LEN - off) as usize;
            let mut buf = vec![0u8; len];
            match e.read(ino, off, &mut buf) {
                Ok(n) => {
                    assert_eq!(n, len, "f{i}: short read at {off}");
                    assert!(
                        buf == want[off as usize..off as usize + len],
                        "f{i}: record at {off} read back wrong data instead of a checksum error"
                    );
                }
                Err(EngineError::Checksum { ino: bad, .. }) => {
                    assert_eq!(bad, ino, "checksum error names another inode");
                    damaged.insert((ino, off));
                }
                Err(other) => panic!("f{i}: record at {off}: unexpected error {other}"),
            }
        }
    }
    damaged
}

fn flip_random_bytes(dev: &Path, n: usize, rng: &mut SplitMix64) -> Vec<u64> {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(dev).unwrap();
    let len = f.metadata().unwrap().len();
    assert!(len > DATA_START + 1024 * 1024, "device holds too little data: {len}");
    let mut offsets = Vec::new();
    for _ in 0..n {
        let off = DATA_START + rng.below(len - DATA_START);
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, off).unwrap();
        b[0] ^= 1 + rng.below(255) as u8;
        f.write_all_at(&b, off).unwrap();
        offsets.push(off);
    }
    f.sync_all().unwrap();
    offsets
}

#[test]
fn clean_pool_reads_and_scrubs_clean() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    write_pool(&pool);
    let e = Engine::open(&pool, &opts()).unwrap();
    assert!(damaged_by_reading(&e).is_empty());
    assert!(scrub_damaged(&e).is_empty());
    e.close().unwrap();
}

#[test]
fn flipped_bytes_fail_cleanly_and_scrub_names_exactly_the_damaged_files() {
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7);
    eprintln!("bitrot seed {seed}");
    let mut rng = SplitMix64::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    write_pool(&pool);
    for round in 0..3 {
        let flipped = flip_random_bytes(&pool.join("data.0"), 4, &mut rng);
        let e = Engine::open(&pool, &opts()).unwrap();
        let by_read = damaged_by_reading(&e);
        assert!(
            !by_read.is_empty(),
            "round {round} (seed {seed}): bytes flipped at {flipped:?} but every record read fine"
        );
        let by_scrub = scrub_damaged(&e);
        assert_eq!(by_scrub, by_read, "round {round} (seed {seed}): scrub vs reads");
        e.close().unwrap();
    }
}

/// Inodes scrub reports as damaged.
fn scrub_damaged(e: &Engine) -> BTreeSet<u64> {
    let report = e.scrub(&|_, _| {}).expect("scrub runs on a damaged pool");
    for d in &report.damaged {
        assert!(d.path.is_some(), "damage reported without a path: {d:?}");
    }
    report.damaged.iter().map(|d| d.ino).collect()
}

/// Flip one byte inside each of `n` random device extents; returns the (inode, record
/// offset) of the records hit.
fn flip_inside_extents(e: &Engine, dev: &Path, n: usize, rng: &mut SplitMix64) -> BTreeSet<(u64, u64)> {
    let mut extents = Vec::new();
    for i in 0..FILES {
        let (ino, _) = e.lookup(ROOT_INO, &file_name(i)).unwrap().expect("file exists");
        for (off, ptr) in e.extents(ino).unwrap() {
            if let StoredRecord::Device(d) = ptr.stored {
                assert_eq!(d.dev, 0, "single-device pool");
                extents.push((ino, off, d.offset, u64::from(d.psize)));
            }
        }
    }
    assert!(extents.len() >= n, "only {} extents", extents.len());
    let f = std::fs::OpenOptions::new().read(true).write(true).open(dev).unwrap();
    let mut hit = BTreeSet::new();
    while hit.len() < n {
        let (ino, off, dev_off, psize) = extents[rng.below(extents.len() as u64) as usize];
        if !hit.insert((ino, off)) {
            continue;
        }
        let at = dev_off + rng.below(psize);
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        b[0] ^= 1 << rng.below(8); // a single bit: the weakest damage xxh3 must still catch
        f.write_all_at(&b, at).unwrap();
    }
    f.sync_all().unwrap();
    hit
}

#[test]
fn flips_inside_known_extents_are_reported_exactly() {
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(11);
    eprintln!("bitrot (extents) seed {seed}");
    let mut rng = SplitMix64::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    write_pool(&pool);
    let e = Engine::open(&pool, &opts()).unwrap();
    let hit = flip_inside_extents(&e, &pool.join("data.0"), 5, &mut rng);
    e.close().unwrap();
    drop(e);
    // Reopen: nothing cached from before the damage.
    let e = Engine::open(&pool, &opts()).unwrap();
    assert_eq!(damaged_records_by_reading(&e), hit, "seed {seed}: records failing to read");
    let report = e.scrub(&|_, _| {}).unwrap();
    let by_scrub: BTreeSet<(u64, u64)> = report.damaged.iter().map(|d| (d.ino, d.offset)).collect();
    assert_eq!(by_scrub, hit, "seed {seed}: scrub");
    for d in &report.damaged {
        let name = d.path.as_deref().unwrap_or("");
        assert!(name.trim_start_matches('/').starts_with('f'), "damage names {name:?}");
    }
    e.close().unwrap();
}
