//! The bench engine on the built-in sample (small slices so it stays fast).

use squeezefs_codec::bench::{self, BenchConfig, BenchError, Input};
use squeezefs_codec::{Codec, Spec};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn small_sample() -> Vec<Input> {
    bench::builtin_sample()
        .into_iter()
        .map(|i| Input { name: i.name, data: i.data[..(300 << 10) + 17].to_vec() })
        .collect()
}

#[test]
fn rows_match_direct_compression_and_threads_agree() {
    let inputs = small_sample();
    let codecs = Spec::parse_list("none,lz4,zstd:1,zstd:-3,zlib:1,lz4hc:4").unwrap();
    let events = AtomicUsize::new(0);
    let cfg1 = BenchConfig { block_size: 64 << 10, codecs: codecs.clone(), threads: 1, min_time: Duration::ZERO };
    let rows1 = bench::run(&inputs, &cfg1, &|_| {
        events.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(events.load(Ordering::Relaxed), 2 * codecs.len());
    let cfg3 = BenchConfig { threads: 3, ..cfg1.clone() };
    let rows3 = bench::run(&inputs, &cfg3, &|_| {}).unwrap();
    let total: u64 = inputs.iter().map(|i| i.data.len() as u64).sum();
    // 4 full blocks + one of 17 bytes per input
    for (r1, r3) in rows1.iter().zip(&rows3) {
        assert_eq!(r1.codec, r3.codec);
        assert_eq!(r1.input_bytes, total);
        assert_eq!(r1.blocks, 3 * 5);
        assert_eq!(r1.compressed_bytes, r3.compressed_bytes, "{}", r1.codec);
        assert!(r1.compress_secs > 0.0 && r1.decompress_secs > 0.0);
    }
    let none = &rows1[0];
    assert_eq!(none.compressed_bytes, total);
    assert_eq!(none.workspace_bytes, 0);
    let zstd1 = rows1.iter().find(|r| r.codec == Codec::zstd(1).unwrap()).unwrap();
    assert!(zstd1.ratio() > 1.5, "{}", zstd1.ratio());
    assert!(zstd1.workspace_bytes > 100 << 10);
}

#[test]
fn bad_configurations_are_rejected() {
    let inputs = small_sample();
    let ok = BenchConfig { codecs: vec![Codec::zstd(1).unwrap()], min_time: Duration::ZERO, ..BenchConfig::default() };
    let cases = [
        BenchConfig { block_size: 0, ..ok.clone() },
        BenchConfig { threads: 0, ..ok.clone() },
        BenchConfig { codecs: vec![], ..ok.clone() },
    ];
    for cfg in cases {
        assert!(bench::run(&inputs, &cfg, &|_| {}).is_err());
    }
    let empty = [Input { name: "empty".into(), data: vec![] }];
    assert!(matches!(bench::run(&empty, &ok, &|_| {}), Err(BenchError::NoInput)));
}
