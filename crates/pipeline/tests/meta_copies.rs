//! The metadata store's checked copies against damage and through their conversions:
//! * a corruption campaign on a closed pool holding a source-tree-like set of small files
//!   and some larger ones: one random 4 KiB block of either copy (any block: header, sums,
//!   data) overwritten with random bytes or zeros, or one block in each copy at different
//!   places; the pool opens, every file reads back identical, the store's check repairs
//!   what it finds, and fsck is clean after. Trials that damage the same block in both
//!   copies either never need it or fail with an error naming it: never wrong bytes, never
//!   a panic;
//! * `set_meta_copies`: a plain single-copy pool (the frozen fixture) becomes checked, two
//!   copies become one and back, the files reading back after each step.
//!
//! Trials: `SQUEEZEFS_META_TRIALS` (default 120). Seed: `SQUEEZEFS_META_SEED`.

mod common;
use common::*;
use squeezefs_device::doubles::SplitMix64;
use squeezefs_pipeline::*;
use std::path::{Path, PathBuf};

type Files = Vec<(Vec<String>, Vec<u8>)>;

fn dir(e: &Engine, parent: Ino, name: &str) -> Ino {
    e.meta_write(|tx| {
        let d = tx.alloc_ino()?;
        tx.put_inode(&InodeAttr { nlink: 2, ..attr(d, FileKind::Dir, 2) })?;
        tx.dir_insert(parent, name.as_bytes(), d, FileKind::Dir)?;
        let mut p = tx.get_inode(parent)?;
        p.nlink += 1;
        tx.put_inode(&p)?;
        Ok(d)
    })
    .unwrap()
}

fn file_in(e: &Engine, parent: Ino, name: &str, data: &[u8]) {
    let ino = e
        .meta_write(|tx| {
            let ino = tx.alloc_ino()?;
            tx.put_inode(&attr(ino, FileKind::File, 1))?;
            tx.dir_insert(parent, name.as_bytes(), ino, FileKind::File)?;
            Ok(ino)
        })
        .unwrap();
    for (k, chunk) in data.chunks(1 << 20).enumerate() {
        e.write(ino, (k << 20) as u64, chunk).unwrap();
    }
}

/// Source-like text: lines of identifiers and numbers, `n` bytes.
fn source_text(rng: &mut SplitMix64, n: usize) -> Vec<u8> {
    const WORDS: [&str; 12] =
        ["static", "int", "struct", "return", "if", "else", "unsigned", "long", "void", "const", "for", "case"];
    let mut v = Vec::with_capacity(n + 64);
    while v.len() < n {
        let w = WORDS[rng.below(WORDS.len() as u64) as usize];
        v.extend(format!("\t{w} x{} = {};\n", rng.below(1000), rng.below(1 << 20)).as_bytes());
    }
    v.truncate(n);
    v
}

/// A pool like a small source tree: 24 directories of 20 small files (100 B to 24 KiB),
/// three larger files (one incompressible), committed by many txgs; closed.
fn build(pool: &Path) -> Files {
    Engine::mkfs(pool, &MkfsOptions::default()).unwrap();
    let opts = OpenOptions { compression: "zstd:1".parse().unwrap(), bundle_small_records: true, ..fast_opts() };
    let e = Engine::open(pool, &opts).unwrap();
    let mut rng = SplitMix64::new(52);
    let mut files = Files::new();
    for d in 0..24 {
        let dname = format!("dir{d:02}");
        let di = dir(&e, ROOT_INO, &dname);
        for f in 0..20 {
            let n = 100 + rng.below(24 << 10) as usize;
            let data = source_text(&mut rng, n);
            let fname = format!("file{f:02}.c");
            file_in(&e, di, &fname, &data);
            files.push((vec![dname.clone(), fname], data));
        }
        if d % 6 == 5 {
            e.sync().unwrap();
        }
    }
    for (k, n) in [(0u64, 3 << 20), (1, 1 << 20), (2, 2 << 20)] {
        let data = if k == 1 { noise(k, n) } else { source_text(&mut rng, n) };
        let name = format!("large{k}");
        file_in(&e, ROOT_INO, &name, &data);
        files.push((vec![name], data));
    }
    e.close().unwrap();
    files
}

/// Every file read back; the first difference or error.
fn read_back(e: &Engine, files: &Files) -> std::result::Result<(), String> {
    for (path, want) in files {
        let mut ino = ROOT_INO;
        for part in path {
            ino = e.lookup(ino, part.as_bytes()).map_err(|x| x.to_string())?.ok_or(format!("{path:?} missing"))?.0;
        }
        let size = e.getattr(ino).map_err(|x| x.to_string())?.size as usize;
        let mut buf = vec![0u8; size];
        let mut done = 0;
        while done < size {
            let n = e.read(ino, done as u64, &mut buf[done..]).map_err(|x| x.to_string())?;
            if n == 0 {
                return Err(format!("{path:?}: short read"));
            }
            done += n;
        }
        // a damaged store may fail; it must never hand out other bytes
        assert!(&buf == want, "{path:?}: wrong bytes read back");
    }
    Ok(())
}

fn copy_pool(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for n in [COPY_FILES[0], COPY_FILES[1], DEFAULT_DEVICE_FILE] {
        std::fs::copy(from.join(n), to.join(n)).unwrap();
    }
}

fn smash(path: &Path, block: u64, rng: &mut SplitMix64) {
    let b: Vec<u8> = if rng.below(2) == 0 { vec![0; 4096] } else { (0..4096).map(|_| rng.below(256) as u8).collect() };
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &b, block * 4096).unwrap();
}

fn blocks(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len() / 4096
}

/// The corruption campaign (module comment).
#[test]
fn a_damaged_block_of_either_copy_is_repaired_and_every_file_reads_back() {
    let trials: u64 = std::env::var("SQUEEZEFS_META_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(120);
    let seed: u64 = std::env::var("SQUEEZEFS_META_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x52);
    let d = tempfile::tempdir().unwrap();
    let base = d.path().join("base");
    let files = build(&base);
    let mut rng = SplitMix64::new(seed);
    let (mut both, mut both_failed) = (0, 0);
    for t in 0..trials {
        let pool = d.path().join(format!("t{t}"));
        copy_pool(&base, &pool);
        let c: Vec<PathBuf> = COPY_FILES.iter().map(|n| pool.join(n)).collect();
        let n = blocks(&c[0]).min(blocks(&c[1]));
        let kind = t % 10;
        let what = match kind {
            0..=3 => {
                let (copy, b) = ((kind % 2) as usize, rng.below(n));
                smash(&c[copy], b, &mut rng);
                format!("copy {copy} block {b}")
            }
            4..=8 => {
                // one block in each copy, never the same one
                let b0 = rng.below(n);
                let b1 = (b0 + 1 + rng.below(n - 1)) % n;
                smash(&c[0], b0, &mut rng);
                smash(&c[1], b1, &mut rng);
                format!("copy 0 block {b0}, copy 1 block {b1}")
            }
            _ => {
                let b = rng.below(n);
                smash(&c[0], b, &mut rng);
                smash(&c[1], b, &mut rng);
                format!("block {b} of both copies")
            }
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> std::result::Result<(), String> {
            let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).map_err(|x| x.to_string())?;
            read_back(&e, &files)?;
            e.close().map_err(|x| x.to_string())?;
            Ok(())
        }));
        let outcome = match outcome {
            Ok(o) => o,
            Err(p) => std::panic::resume_unwind(p),
        };
        let repaired = Engine::check_meta(&pool, true).unwrap().unwrap();
        if kind < 9 {
            outcome.unwrap_or_else(|x| panic!("trial {t} ({what}): {x}"));
            assert!(repaired.lost.is_empty(), "trial {t} ({what}): {repaired:?}");
            let after = Engine::check_meta(&pool, false).unwrap().unwrap();
            assert!(after.is_clean(), "trial {t} ({what}): {after:?}");
            if t % 5 == 0 {
                let e = Engine::open(&pool, &fast_opts()).unwrap();
                read_back(&e, &files).unwrap();
                let r = e.fsck().unwrap();
                assert!(r.is_clean(), "trial {t} ({what}): {:?}", r.problems);
                e.close().unwrap();
            }
        } else {
            both += 1;
            if let Err(x) = outcome {
                both_failed += 1;
                assert!(
                    x.contains("damaged in every copy") || x.contains("metadata store copy"),
                    "trial {t} ({what}): an unclear error: {x}"
                );
                assert!(!repaired.lost.is_empty() || !repaired.repaired.is_empty(), "trial {t} ({what}): {repaired:?}");
            }
        }
        std::fs::remove_dir_all(&pool).unwrap();
    }
    assert!(both > 0);
    eprintln!("{trials} trials; {both} damaged one block in both copies, {both_failed} of those failed to read");
}

const SINGLE_COPY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pool-v1-single-copy-store");

fn text() -> Vec<u8> {
    (0..20000).flat_map(|i| format!("line {i} of the frozen pool\n").into_bytes()).collect()
}

fn fixture_files() -> Files {
    let mut x: u64 = 1;
    let noise: Vec<u8> = (0..6000)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect();
    let mut v = vec![
        (vec!["text".to_string()], text()),
        (vec!["small".to_string()], b"hello frozen pool\n".to_vec()),
        (vec!["noise".to_string()], noise),
    ];
    v.extend((0..60).map(|n| {
        (vec!["many".to_string(), format!("{n:03}")], format!("small file {n}\n").repeat(20 * n + 1).into_bytes())
    }));
    v
}

fn meta_copies_in_superblock(pool: &Path) -> Option<u8> {
    use redb::ReadableDatabase;
    let db = Engine::open_meta_store(pool).unwrap();
    let rx = db.begin_read().unwrap();
    let t = rx.open_table(squeezefs_meta::tables::SUPERBLOCK).unwrap();
    let sb = squeezefs_meta::Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
    sb.meta_copies
}

/// The frozen pool of one plain `meta.redb` opens and reads back as it is; converted to two
/// checked copies, to one and back to two, it reads back after each step, its superblock
/// saying how many, and the checks stay clean.
#[test]
fn a_single_copy_pool_of_an_older_build_opens_and_converts_to_checked_copies() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    std::fs::create_dir_all(&pool).unwrap();
    for name in [META_FILE, DEFAULT_DEVICE_FILE] {
        let z = std::fs::read(Path::new(SINGLE_COPY).join(format!("{name}.zst"))).unwrap();
        std::fs::write(pool.join(name), zstd::decode_all(&z[..]).unwrap()).unwrap();
    }
    let files = fixture_files();
    let check_pool = |want: Option<u8>| {
        let e = Engine::open(&pool, &OpenOptions { read_only: true, ..fast_opts() }).unwrap();
        read_back(&e, &files).unwrap();
        let r = e.fsck().unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
        assert_eq!((r.inodes, r.extents, r.bundles, r.allocated_bytes), (65, 67, 3, 20_395));
        e.close().unwrap();
        drop(e);
        assert_eq!(meta_copies_in_superblock(&pool), want);
    };
    check_pool(None);
    assert!(Engine::check_meta(&pool, false).unwrap().is_none(), "a plain store has nothing to check");
    // written by this build, it stays plain
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    read_back(&e, &files).unwrap();
    e.close().unwrap();
    drop(e);
    assert!(pool.join(META_FILE).exists() && !pool.join(COPY_FILES[0]).exists());

    for (to, before) in [(2u8, 0u8), (1, 2), (2, 1), (2, 2)] {
        let c = Engine::set_meta_copies(&pool, to).unwrap();
        assert_eq!((c.before, c.after), (before, to));
        assert!(!pool.join(META_FILE).exists());
        assert_eq!(pool.join(COPY_FILES[1]).exists(), to == 2);
        check_pool(Some(to));
        let m = Engine::check_meta(&pool, false).unwrap().unwrap();
        assert!(m.is_clean() && m.copies.len() == to as usize, "{m:?}");
    }
    assert!(matches!(
        Engine::set_meta_copies(&pool, 3),
        Err(EngineError::Pool(PoolError::MetaCopiesUnsupported { copies: 3 }))
    ));
}
