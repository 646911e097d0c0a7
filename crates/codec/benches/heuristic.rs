//! Cost of the heuristic on incompressible 128 KiB records, against zstd:3 on the same
//! records (the acceptance bar: assess ≤ 5% of zstd:3's time).
//! `cargo bench -p squeezefs-codec --bench heuristic`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{RngCore, SeedableRng};
use squeezefs_codec::{heuristic, stored_limit, Codec, WorkspaceConfig, Workspaces};
use std::hint::black_box;

const RECORD: usize = 128 << 10;

fn random_record() -> Vec<u8> {
    let mut v = vec![0u8; RECORD];
    rand::rngs::StdRng::seed_from_u64(1).fill_bytes(&mut v);
    v
}

fn bench(c: &mut Criterion) {
    let data = random_record();
    let ws = Workspaces::new(WorkspaceConfig::default());
    let mut dst = vec![0u8; RECORD * 2];
    let mut g = c.benchmark_group("random-128K");
    g.throughput(Throughput::Bytes(RECORD as u64));
    g.bench_function("assess", |b| b.iter(|| heuristic::assess(black_box(&data))));
    g.bench_function("probe-lz4", |b| b.iter(|| heuristic::probe(black_box(&data), 512, &mut dst)));
    let zstd3 = Codec::zstd(3).unwrap();
    g.bench_function("zstd3-full-dst", |b| b.iter(|| ws.compress(zstd3, black_box(&data), &mut dst).unwrap()));
    let limit = stored_limit(RECORD, 512);
    g.bench_function("zstd3-early-abort", |b| {
        b.iter(|| ws.compress(zstd3, black_box(&data), &mut dst[..limit]).is_err())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
