//! Random operations on a pool of small fixed devices of different sizes: every operation
//! either succeeds or is refused with NoSpace (never a suspended pool), reads match a model,
//! fsck is clean at the end, before and after a reopen. Sector 512 or 4096, pools with and
//! without PACKED_BYTES, one to three devices.
mod crash_common;

use crash_common::{create_file, delete_file};
use proptest::prelude::*;
use squeezefs_device::doubles::MemDevice;
use squeezefs_device::Device;
use squeezefs_pipeline::{Engine, EngineError, MkfsOptions, OpenOptions};
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Op {
    Write { f: usize, off: u64, len: usize, seed: u64, kind: u8 },
    SetSize { f: usize, size: u64 },
    Punch { f: usize, off: u64, len: u64 },
    Delete { f: usize },
    Sync,
    Reopen,
    Compress(bool),
}

const MAXOFF: u64 = 60_000;
const FILES: usize = 3;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..FILES, 0..MAXOFF, 1..24_000usize, any::<u64>(), 0..4u8)
            .prop_map(|(f, off, len, seed, kind)| Op::Write { f, off, len, seed, kind }),
        2 => (0..FILES, 0..MAXOFF).prop_map(|(f, size)| Op::SetSize { f, size }),
        2 => (0..FILES, 0..MAXOFF, 1..30_000u64).prop_map(|(f, off, len)| Op::Punch { f, off, len }),
        2 => (0..FILES).prop_map(|f| Op::Delete { f }),
        3 => Just(Op::Sync),
        1 => Just(Op::Reopen),
        1 => any::<bool>().prop_map(Op::Compress),
    ]
}

fn data(seed: u64, len: usize, kind: u8) -> Vec<u8> {
    match kind {
        0 => vec![0u8; len],
        1 => vec![(seed as u8) | 1; len],
        _ => {
            let mut x = seed | 1;
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        }
    }
}

fn read_back(e: &Engine, ino: u64) -> Vec<u8> {
    let size = e.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0xAAu8; size];
    let mut done = 0;
    while done < size {
        let n = e.read(ino, done as u64, &mut buf[done..]).unwrap();
        assert!(n > 0);
        done += n;
    }
    buf
}

fn clear_packed_bytes(pool: &std::path::Path) {
    use redb::ReadableTable;
    use squeezefs_meta::{tables, Features, Superblock};
    let db = Engine::open_meta_store(pool).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(tables::SUPERBLOCK).unwrap();
        let mut sb = Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
        sb.features.incompat &= !Features::INCOMPAT_PACKED_BYTES;
        t.insert(0u8, &sb.encode()[..]).unwrap();
    }
    tx.commit().unwrap();
}

fn ok_or_nospace(r: Result<(), EngineError>, what: &str) -> bool {
    match r {
        Ok(()) => true,
        Err(EngineError::NoSpace) => false,
        Err(e) => panic!("{what}: {e}"),
    }
}

fn run(caps: Vec<u64>, sector: u32, packed: bool, max_inline: u32, ops: Vec<Op>) {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    let mems: Vec<Arc<MemDevice>> =
        caps.iter().enumerate().map(|(i, &c)| Arc::new(MemDevice::with_capacity(&format!("m{i}"), 4096 + c))).collect();
    let devs = || mems.iter().map(|m| m.clone() as Arc<dyn Device>).collect::<Vec<_>>();
    let mkfs = MkfsOptions {
        sector: Some(sector),
        recordsize: Some(4096),
        max_inline: Some(max_inline),
        ..Default::default()
    };
    Engine::mkfs_with_devices(&pool, devs(), &mkfs).unwrap();
    if !packed {
        clear_packed_bytes(&pool);
    }
    let mut opts = OpenOptions { txg_timeout: std::time::Duration::from_millis(20), ..Default::default() };
    let mut e = Engine::open_with_devices(&pool, devs(), &opts).unwrap();
    let mut names: Vec<String> = (0..FILES).map(|i| format!("f{i}.0")).collect();
    let mut files: Vec<u64> = names.iter().map(|n| create_file(&e, n.as_bytes()).unwrap()).collect();
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); FILES];
    let mut gen = 0;
    for op in ops {
        match op {
            Op::Write { f, off, len, seed, kind } => {
                let b = data(seed, len, kind);
                if ok_or_nospace(e.write(files[f], off, &b), "write") {
                    let end = off as usize + len;
                    if model[f].len() < end {
                        model[f].resize(end, 0);
                    }
                    model[f][off as usize..end].copy_from_slice(&b);
                }
            }
            Op::SetSize { f, size } => {
                if ok_or_nospace(e.set_size(files[f], size), "set_size") {
                    model[f].resize(size as usize, 0);
                }
            }
            Op::Punch { f, off, len } => {
                if !ok_or_nospace(e.punch_hole(files[f], off, len), "punch") {
                    continue;
                }
                let end = (off + len).min(model[f].len() as u64);
                if off < end {
                    model[f][off as usize..end as usize].fill(0);
                }
            }
            Op::Delete { f } => {
                delete_file(&e, names[f].as_bytes()).unwrap();
                gen += 1;
                names[f] = format!("f{f}.{gen}");
                files[f] = create_file(&e, names[f].as_bytes()).unwrap();
                model[f].clear();
            }
            Op::Sync => e.sync().unwrap(),
            Op::Reopen => {
                e.close().unwrap();
                drop(e);
                e = Engine::open_with_devices(&pool, devs(), &opts).unwrap();
            }
            Op::Compress(on) => {
                opts.compression = if on { "zstd:1".parse().unwrap() } else { squeezefs_codec::Spec::Off };
                e.set_compression(opts.compression, false);
            }
        }
    }
    for f in 0..FILES {
        assert!(read_back(&e, files[f]) == model[f], "file {f} before sync");
    }
    e.sync().unwrap();
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    e.close().unwrap();
    drop(e);
    let e = Engine::open_with_devices(&pool, devs(), &opts).unwrap();
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "after reopen: {:?}", r.problems);
    for f in 0..FILES {
        assert!(read_back(&e, files[f]) == model[f], "file {f} after reopen");
    }
    e.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn random_ops_on_small_devices_never_suspend_and_stay_consistent(
        caps in proptest::collection::vec(prop::sample::select(vec![24u64 << 10, 64 << 10, 160 << 10]), 1..4),
        sector in prop::sample::select(vec![512u32, 4096]),
        packed in any::<bool>(),
        max_inline in prop::sample::select(vec![0u32, 1024]),
        ops in proptest::collection::vec(op(), 1..50),
    ) {
        run(caps, sector, packed, max_inline, ops);
    }
}
