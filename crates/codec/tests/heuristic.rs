//! The compressibility heuristic on random, generated and (when present) corpus data.

use rand::{RngCore, SeedableRng};
use squeezefs_codec::heuristic::{self, sampler, Verdict};
use std::io::Read;
use std::path::PathBuf;

const RECORD: usize = 128 << 10;

fn random_records(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let mut v = vec![0u8; RECORD];
            rng.fill_bytes(&mut v);
            v
        })
        .collect()
}

/// English-like text with a Zipf-ish word distribution.
fn text_like(len: usize, seed: u64) -> Vec<u8> {
    let words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "a",
        "is",
        "that",
        "for",
        "it",
        "as",
        "was",
        "with",
        "be",
        "by",
        "on",
        "not",
        "he",
        "compression",
        "record",
        "sector",
        "workspace",
        "filesystem",
        "Dickens",
        "London",
        "morning",
        "said",
        "Mr.",
        "upon",
        "little",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        let r = rng.next_u32() as usize;
        let w = words[(r % words.len()) * (r / words.len() % words.len()) / words.len()];
        out.extend_from_slice(w.as_bytes());
        out.push(if r.is_multiple_of(17) {
            b'\n'
        } else if r.is_multiple_of(11) {
            b','
        } else {
            b' '
        });
    }
    out.truncate(len);
    out
}

/// Binary-like data: fixed-size records of small integers, pointers, floats and flags, as in
/// databases and executables.
fn binary_like(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(len + 64);
    let mut id = 1000u32;
    while out.len() < len {
        let r = rng.next_u64();
        id += 1 + (r % 3) as u32;
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&((r >> 8) % 500).to_le_bytes()[..4]);
        out.extend_from_slice(&(0x0040_0000u64 + (r >> 20) % 0x10000 * 16).to_le_bytes());
        out.extend_from_slice(&((r % 10_000) as f64 / 100.0).to_le_bytes());
        out.extend_from_slice(&[0x8b, 0x45, (r >> 33) as u8 & 0x1f, 0xe8, 0, 0, 0xff, 0xff]);
        out.push((r >> 40) as u8 % 4);
        out.extend_from_slice(&[0u8; 3]);
    }
    out.truncate(len);
    out
}

#[test]
fn random_records_are_declared_incompressible() {
    let records = random_records(300, 42);
    let incompressible = records.iter().filter(|r| heuristic::assess(r) == Verdict::Incompressible).count();
    assert!(incompressible * 100 >= records.len() * 99, "{incompressible}/{}", records.len());
}

#[test]
fn generated_text_and_binaries_are_never_declared_incompressible() {
    for seed in 0..40 {
        for data in [text_like(RECORD, seed), binary_like(RECORD, seed)] {
            assert_eq!(heuristic::assess(&data), Verdict::Compressible, "seed {seed}: {:?}", sampler::stats(&data));
        }
    }
}

#[test]
fn zeros_become_holes_and_one_byte_is_enough_to_not_be_zeros() {
    let mut data = vec![0u8; RECORD];
    assert_eq!(heuristic::assess(&data), Verdict::Zeros);
    data[RECORD - 1] = 1;
    assert_eq!(heuristic::assess(&data), Verdict::Compressible);
    assert_eq!(heuristic::assess(&[]), Verdict::Zeros);
}

#[test]
fn a_repeated_random_block_is_compressible() {
    let half = &random_records(1, 7)[0][..RECORD / 2];
    let data = [half, half].concat();
    assert_eq!(sampler::judge(&data), sampler::Judgement::Compressible(sampler::Reason::RepeatedPattern));
}

#[test]
fn tiny_records_are_left_to_the_codec() {
    let data = &random_records(1, 9)[0][..20];
    assert_eq!(sampler::judge(data), sampler::Judgement::Compressible(sampler::Reason::TooSmall));
}

#[test]
fn the_probe_rejects_random_and_accepts_text() {
    let mut scratch = vec![0u8; RECORD];
    for r in random_records(20, 5) {
        assert_eq!(heuristic::probe(&r, 512, &mut scratch), Verdict::Incompressible);
    }
    assert_eq!(heuristic::probe(&text_like(RECORD, 1), 512, &mut scratch), Verdict::Compressible);
    assert_eq!(heuristic::probe(&binary_like(RECORD, 1), 4096, &mut scratch), Verdict::Compressible);
    assert_eq!(heuristic::probe(&vec![0u8; RECORD], 512, &mut scratch), Verdict::Zeros);
    // a record of one sector can never save one
    assert_eq!(heuristic::probe(&text_like(512, 1), 512, &mut scratch), Verdict::Incompressible);
}

/// The corpus, if this checkout has it beside it (never required).
fn corpus_dir() -> Option<PathBuf> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    [PathBuf::from("/work/shared/corpus"), repo.join("../shared/corpus")]
        .into_iter()
        .find(|p| p.join("dickens.zip").exists())
}

fn unzip_all(path: &std::path::Path) -> Vec<u8> {
    let mut archive = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for i in 0..archive.len() {
        archive.by_index(i).unwrap().read_to_end(&mut out).unwrap();
    }
    out
}

#[test]
fn corpus_text_and_binaries_are_never_declared_incompressible() {
    let Some(dir) = corpus_dir() else {
        eprintln!("corpus not found (/work/shared/corpus or ../shared/corpus): skipping");
        return;
    };
    for name in ["dickens", "ooffice", "osdb", "xml"] {
        let data = unzip_all(&dir.join(format!("{name}.zip")));
        assert!(data.len() > 1 << 20, "{name} unpacked to {} bytes", data.len());
        let mut records = 0;
        for record in data.chunks(RECORD) {
            records += 1;
            let verdict = heuristic::assess(record);
            assert_ne!(verdict, Verdict::Incompressible, "{name} record {records}: {:?}", sampler::stats(record));
        }
        eprintln!("{name}: {records} records judged");
    }
}
