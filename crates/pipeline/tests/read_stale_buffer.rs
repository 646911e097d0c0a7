//! `Engine::read` writes every byte it returns: the FUSE adapter reuses one reply buffer per
//! request thread, so holes, sparse gaps and the zero tail of a short record must be written
//! as zeros, never left as the previous request's bytes.
mod common;
use common::*;
use squeezefs_pipeline::*;

const RS: u64 = 128 * 1024;

/// Compare reads into a buffer full of 0xAA against the model at offsets and lengths that
/// start and end inside records, on record boundaries, across holes and past EOF.
fn check_reads(e: &Engine, ino: Ino, model: &[u8], when: &str) {
    let size = model.len() as u64;
    let offs = [0, 1, RS - 1, RS, RS + 7, 2 * RS - 3, 3 * RS, 4 * RS + 100, size - 1, size, size + 5];
    let lens = [1usize, 100, RS as usize, RS as usize + 1, 3 * RS as usize + 17, 1 << 20];
    for &off in &offs {
        for &len in &lens {
            let mut buf = vec![0xAAu8; len];
            let n = e.read(ino, off, &mut buf).unwrap();
            let want = &model[(off.min(size) as usize)..((off + len as u64).min(size) as usize)];
            assert_eq!(n, want.len(), "{when}: length of read at {off}+{len}");
            assert!(buf[..n] == *want, "{when}: bytes of read at {off}+{len} differ from the model");
        }
    }
}

#[test]
fn read_into_stale_buffer_writes_zeros_for_holes_and_short_records() {
    let d = tempfile::tempdir().unwrap();
    let e = new_pool(d.path());
    let ino = create(&e, "sparse");
    // record 0: data; records 1-2: never written (sparse); record 3: data with a punched
    // hole inside; record 4: a short tail record (EOF inside it)
    let mut model = vec![0u8; (4 * RS + 5000) as usize];
    let a = noise(1, RS as usize);
    let b = noise(2, (RS + 5000) as usize);
    e.write(ino, 0, &a).unwrap();
    e.write(ino, 3 * RS, &b).unwrap();
    model[..RS as usize].copy_from_slice(&a);
    model[3 * RS as usize..].copy_from_slice(&b);
    e.punch_hole(ino, 3 * RS + 1000, 2000).unwrap();
    model[(3 * RS + 1000) as usize..(3 * RS + 3000) as usize].fill(0);
    check_reads(&e, ino, &model, "open layer");
    e.sync().unwrap();
    check_reads(&e, ino, &model, "committed");
    // a whole record punched after the commit: a hole in the open layer over committed data
    e.punch_hole(ino, 0, RS).unwrap();
    model[..RS as usize].fill(0);
    check_reads(&e, ino, &model, "hole over committed data");
    e.close().unwrap();
    drop(e);
    let e = Engine::open(d.path(), &fast_opts()).unwrap();
    check_reads(&e, ino, &model, "reopened");
}
