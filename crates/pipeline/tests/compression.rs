mod common;
use common::*;
use squeezefs_codec::{Algorithm, Spec};
use squeezefs_pipeline::*;

fn text(n: usize) -> Vec<u8> {
    let words = ["squeeze ", "record ", "sector ", "txg ", "zstd ", "pool ", "extent\n"];
    let mut v = Vec::with_capacity(n);
    let mut i = 0usize;
    while v.len() < n {
        v.extend_from_slice(words[(i * 7 + i / 3) % words.len()].as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

#[test]
fn compressed_records_round_trip_and_usage_reports_them() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let opts = OpenOptions { compression: "zstd:3".parse().unwrap(), ..fast_opts() };
    let e = Engine::open(&pool, &opts).unwrap();
    let f = create(&e, "text");
    let data = text(1_000_000);
    e.write(f, 0, &data).unwrap();
    e.sync().unwrap();
    assert_eq!(read_all(&e, f), data);
    let rows = e.usage(f).unwrap();
    let z = rows.iter().find(|r| r.alg == Algorithm::Zstd).expect("zstd row");
    assert_eq!(z.level, 3);
    assert!(z.disk_bytes * 4 < z.uncompressed_bytes, "{rows:?}");
    assert_eq!(rows.iter().map(|r| r.uncompressed_bytes).sum::<u64>(), 1_000_000);
    // incompressible data goes raw even with compression on
    let g = create(&e, "noise");
    e.write(g, 0, &noise(9, 300_000)).unwrap();
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &fast_opts()).unwrap();
    assert_eq!(read_all(&e, f), data);
    assert_eq!(read_all(&e, g), noise(9, 300_000));
    let rows = e.usage(g).unwrap();
    assert!(rows.iter().all(|r| r.alg == Algorithm::None), "{rows:?}");
    assert!(e.fsck().unwrap().is_clean());
}

/// Records longer than the codec workspaces' default block size (128 KiB) were refused by
/// the codec and stored raw: a 1 MiB-record pool compressed only files shorter than 128 KiB.
#[test]
fn records_longer_than_128k_are_compressed() {
    for recordsize in [256 * 1024, 1024 * 1024] {
        let d = tempfile::tempdir().unwrap();
        let pool = d.path().join("pool");
        Engine::mkfs(&pool, &MkfsOptions { recordsize: Some(recordsize), ..MkfsOptions::default() }).unwrap();
        let opts = OpenOptions { compression: "zstd:3".parse().unwrap(), ..fast_opts() };
        let e = Engine::open(&pool, &opts).unwrap();
        let f = create(&e, "text");
        let data = text(3 * recordsize as usize + 1000);
        e.write(f, 0, &data).unwrap();
        e.sync().unwrap();
        assert_eq!(read_all(&e, f), data);
        let rows = e.usage(f).unwrap();
        assert!(rows.iter().all(|r| r.alg == Algorithm::Zstd), "record size {recordsize}: {rows:?}");
        let disk: u64 = rows.iter().map(|r| r.disk_bytes).sum();
        assert!(disk * 4 < data.len() as u64, "record size {recordsize}: {disk} bytes on disk");
        e.close().unwrap();
    }
}

#[test]
fn compress_force_and_lz4_and_deflate_round_trip() {
    for spec in ["lz4", "zlib:6", "zstd:-3", "auto"] {
        let d = tempfile::tempdir().unwrap();
        let e = new_pool(&d.path().join("pool"));
        e.set_compression(spec.parse::<Spec>().unwrap(), true);
        let f = create(&e, "x");
        let data = text(400_000);
        e.write(f, 0, &data).unwrap();
        e.sync().unwrap();
        assert_eq!(read_all(&e, f), data, "{spec}");
        let disk: u64 = e.usage(f).unwrap().iter().map(|r| r.disk_bytes).sum();
        assert!(disk < 200_000, "{spec}: {disk}");
    }
}

#[test]
fn small_compressible_file_goes_inline_compressed() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    e.set_compression("zstd".parse().unwrap(), false);
    let f = create(&e, "t");
    let data = text(20_000);
    e.write(f, 0, &data).unwrap();
    e.sync().unwrap();
    assert_eq!(read_all(&e, f), data);
    assert_eq!(e.device_stats()[0].used_bytes, 0, "20 kB of text compresses below 2 KiB: inline");
}

#[test]
fn compressed_records_of_a_txg_are_packed_byte_by_byte() {
    // PACKED_BYTES: a record compressed to N bytes occupies N bytes, right after the previous
    // record of its txg; only the run as a whole starts on a sector boundary
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    e.set_compression("zstd:3".parse().unwrap(), false);
    let f = create(&e, "t");
    let data = text(1 << 20);
    e.write(f, 0, &data).unwrap();
    e.sync().unwrap();
    let used = e.device_stats()[0].used_bytes;
    let disk: u64 = e.usage(f).unwrap().iter().map(|r| r.disk_bytes).sum();
    assert_eq!(used, disk);
    assert!(used < (1 << 20) / 4);
    let exts: Vec<DeviceExtent> = e
        .extents(f)
        .unwrap()
        .into_iter()
        .map(|(_, x)| match x.stored {
            StoredRecord::Device(dx) => dx,
            StoredRecord::Inline(_) | StoredRecord::Bundled(_) => panic!("a 1 MiB file has only whole records"),
        })
        .collect();
    assert_eq!(exts.len(), 8);
    let stored: u64 = exts.iter().map(|x| u64::from(x.psize)).sum();
    assert_eq!(used, stored, "no sector rounding per record");
    assert_eq!(exts[0].offset % 512, 0, "a run starts on a sector boundary");
    for w in exts.windows(2) {
        assert_eq!(w[1].offset, w[0].offset + u64::from(w[0].psize), "records of one txg back to back");
    }
    assert!(exts.iter().any(|x| x.offset % 512 != 0));
    assert!(e.fsck().unwrap().problems.is_empty());
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&d.path().join("pool"), &fast_opts()).unwrap();
    assert_eq!(read_all(&e, f), data);
}

#[test]
fn per_file_compression_overrides_the_mount_setting() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let a = create(&e, "a");
    let b = create(&e, "b");
    let zstd5 = Some(("zstd:5".parse::<Spec>().unwrap(), false));
    let data = text(500_000);
    e.write_with_compression(a, 0, &data, zstd5).unwrap();
    e.write(b, 0, &data).unwrap();
    e.sync().unwrap();
    assert!(e.usage(a).unwrap().iter().all(|r| r.alg == Algorithm::Zstd && r.level == 5));
    assert!(e.usage(b).unwrap().iter().all(|r| r.alg == Algorithm::None));
    // a write stating the pool's policy goes back to it
    e.write_with_compression(a, 0, &data[..131072], None).unwrap();
    e.sync().unwrap();
    let rows = e.usage(a).unwrap();
    assert!(rows.iter().any(|r| r.alg == Algorithm::None) && rows.iter().any(|r| r.alg == Algorithm::Zstd), "{rows:?}");
    assert_eq!(read_all(&e, a), data);
}

#[test]
fn a_record_written_in_parts_takes_the_policy_of_the_write_that_filled_it() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    let a = create(&e, "a");
    let data = text(131072 * 2);
    let (zlib4, zstd6) = ("zlib:4".parse::<Spec>().unwrap(), "zstd:6".parse::<Spec>().unwrap());
    // record 0 half written under zlib:4, completed under zstd:6; record 1 (written whole
    // under zlib:4) keeps zlib:4
    e.write_with_compression(a, 0, &data[..65536], Some((zlib4, false))).unwrap();
    e.write_with_compression(a, 131072, &data[131072..], Some((zlib4, false))).unwrap();
    e.write_with_compression(a, 65536, &data[65536..131072], Some((zstd6, false))).unwrap();
    e.sync().unwrap();
    let mut rows: Vec<_> = e.usage(a).unwrap().into_iter().map(|r| (r.alg, r.level, r.uncompressed_bytes)).collect();
    rows.sort_by_key(|r| r.0.id());
    assert_eq!(rows, vec![(Algorithm::Deflate, 4, 131072), (Algorithm::Zstd, 6, 131072)]);
    // the file is clean: the engine forgot its policy, a plain write uses the pool's
    e.write(a, 0, &data[..131072]).unwrap();
    e.sync().unwrap();
    assert!(e.usage(a).unwrap().iter().any(|r| r.alg == Algorithm::None));
    assert_eq!(read_all(&e, a), data);
    assert!(e.fsck().unwrap().problems.is_empty());
}

#[test]
fn noise_after_a_compressible_streak_is_still_stored_raw() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(&d.path().join("pool"));
    e.set_compression("zstd:1".parse().unwrap(), false);
    let f = create(&e, "mixed");
    let mut data = text(8 * 131072);
    data.extend(noise(77, 8 * 131072));
    e.write(f, 0, &data).unwrap();
    e.sync().unwrap();
    assert_eq!(read_all(&e, f), data);
    let raw: u64 = e.usage(f).unwrap().iter().filter(|r| r.alg == Algorithm::None).map(|r| r.uncompressed_bytes).sum();
    assert_eq!(raw, 8 * 131072, "every noise record stays raw (early abort), every text record compresses");
}
