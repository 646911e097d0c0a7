//! Random operation sequences against an in-memory model: every read matches the model,
//! across syncs, reopens and compression changes; fsck is clean at the end.
mod common;
use common::*;
use proptest::prelude::*;
use squeezefs_pipeline::*;

#[derive(Clone, Debug)]
enum Op {
    Write { f: usize, off: u64, len: usize, seed: u64, zeros: bool },
    SetSize { f: usize, size: u64 },
    Punch { f: usize, off: u64, len: u64 },
    Read { f: usize, off: u64, len: usize },
    Sync,
    Reopen,
    Compress(bool),
}

const MAXOFF: u64 = 70_000;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 0..MAXOFF, 1..20_000usize, any::<u64>(), prop::bool::weighted(0.15))
            .prop_map(|(f, off, len, seed, zeros)| Op::Write { f, off, len, seed, zeros }),
        2 => (0..2usize, 0..MAXOFF).prop_map(|(f, size)| Op::SetSize { f, size }),
        2 => (0..2usize, 0..MAXOFF, 1..30_000u64).prop_map(|(f, off, len)| Op::Punch { f, off, len }),
        4 => (0..2usize, 0..MAXOFF + 5000, 1..40_000usize).prop_map(|(f, off, len)| Op::Read { f, off, len }),
        2 => Just(Op::Sync),
        1 => Just(Op::Reopen),
        1 => any::<bool>().prop_map(Op::Compress),
    ]
}

fn check_read(e: &Engine, ino: Ino, model: &[u8], off: u64, len: usize) {
    let mut buf = vec![0xAAu8; len];
    let n = e.read(ino, off, &mut buf).unwrap();
    let want: &[u8] = if off as usize >= model.len() { &[] } else { &model[off as usize..model.len().min(off as usize + len)] };
    assert_eq!(n, want.len(), "read length at {off}+{len}");
    assert!(buf[..n] == *want, "content at {off}+{len}");
}

fn run(ops: Vec<Op>) {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    // small records and inline limit: many records per file, every code path exercised
    Engine::mkfs(&pool, &MkfsOptions { recordsize: Some(4096), max_inline: Some(1024), ..Default::default() }).unwrap();
    let opts = OpenOptions { txg_timeout: std::time::Duration::from_millis(50), ..Default::default() };
    let mut e = Engine::open(&pool, &opts).unwrap();
    let files = [create(&e, "a"), create(&e, "b")];
    let mut model: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut compress = false;
    for op in ops {
        match op {
            Op::Write { f, off, len, seed, zeros } => {
                let data = if zeros { vec![0u8; len] } else if seed % 3 == 0 { vec![(seed >> 8) as u8; len] } else { noise(seed, len) };
                e.write(files[f], off, &data).unwrap();
                let end = off as usize + len;
                if model[f].len() < end {
                    model[f].resize(end, 0);
                }
                model[f][off as usize..end].copy_from_slice(&data);
            }
            Op::SetSize { f, size } => {
                e.set_size(files[f], size).unwrap();
                model[f].resize(size as usize, 0);
            }
            Op::Punch { f, off, len } => {
                e.punch_hole(files[f], off, len).unwrap();
                let end = (off + len).min(model[f].len() as u64);
                if off < end {
                    model[f][off as usize..end as usize].fill(0);
                }
            }
            Op::Read { f, off, len } => check_read(&e, files[f], &model[f], off, len),
            Op::Sync => e.sync().unwrap(),
            Op::Reopen => {
                e.close().unwrap();
                drop(e);
                e = Engine::open(&pool, &opts).unwrap();
                e.set_compression(if compress { "zstd:1".parse().unwrap() } else { squeezefs_codec::Spec::Off }, false);
            }
            Op::Compress(on) => {
                compress = on;
                e.set_compression(if on { "zstd:1".parse().unwrap() } else { squeezefs_codec::Spec::Off }, false);
            }
        }
        for f in 0..2 {
            assert_eq!(e.getattr(files[f]).unwrap().size, model[f].len() as u64);
        }
    }
    for f in 0..2 {
        assert_eq!(read_all(&e, files[f]), model[f]);
    }
    e.sync().unwrap();
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    for f in 0..2 {
        assert_eq!(read_all(&e, files[f]), model[f]);
        assert_eq!(e.committed_attr(files[f]).unwrap().size, model[f].len() as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn random_ops_match_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}
