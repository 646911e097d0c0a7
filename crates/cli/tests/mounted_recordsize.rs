//! `recordsize` per tree on a mounted squeezefs: files created in a tree with `recordsize=1M`
//! and in a subtree with `16K` get those record sizes (and keep them when the trees change),
//! their contents are right after a remount, through copies (copy_file_range), holes and
//! truncation; a file's record size cannot change once it has data; fsck is clean.
mod mounted_common;
use mounted_common::*;
use std::ffi::CString;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// `squeezefs prop get --json PATH recordsize`: (value, source).
fn recordsize(p: &Path) -> (String, String) {
    let out = run(&["prop", "get", "--json", p.to_str().unwrap(), "recordsize"]);
    assert!(out.status.success(), "prop get: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (v[0]["value"].as_str().unwrap().to_string(), v[0]["source"].as_str().unwrap().to_string())
}

fn prop_set(p: &Path, assignment: &str) -> std::process::Output {
    run(&["prop", "set", p.to_str().unwrap(), assignment])
}

fn setx(p: &Path, name: &str, value: &str) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    let r = unsafe { libc::lsetxattr(cstr(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Text that compresses, different in every line.
fn text(seed: u64, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 64);
    let mut i = seed;
    while v.len() < n {
        v.extend_from_slice(format!("{seed}: line {i} of a record size test, {} more\n", i * 7919 % 1013).as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

/// Reads of `p` at record-straddling offsets and lengths match `want`.
fn check_ranges(p: &Path, want: &[u8]) {
    let f = std::fs::File::open(p).unwrap();
    let n = want.len() as u64;
    for (off, len) in [(0, 100), (4095, 2), (16383, 3), (65535, 70_000), (131_071, 5), (1_048_575, 2), (n / 3, 9999)] {
        if off >= n {
            continue;
        }
        let len = len.min(n - off) as usize;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, off).unwrap();
        assert!(buf == want[off as usize..off as usize + len], "{}: bytes {off}+{len}", p.display());
    }
}

struct Files {
    /// (path, content, record size as prop get shows it)
    all: Vec<(std::path::PathBuf, Vec<u8>, &'static str)>,
}

impl Files {
    fn check(&self) {
        for (p, data, rs) in &self.all {
            let got = std::fs::read(p).unwrap();
            assert!(got == *data, "{}: {} bytes read, {} expected", p.display(), got.len(), data.len());
            check_ranges(p, data);
            assert_eq!(recordsize(p).0, *rs, "{}", p.display());
        }
    }
}

#[test]
fn files_in_a_1m_tree_and_a_16k_subtree_get_their_record_sizes() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=zstd:3");
    let big = m.path("big");
    let small = m.path("big/small");
    std::fs::create_dir_all(&small).unwrap();
    assert!(prop_set(&big, "recordsize=1M").status.success());
    assert!(prop_set(&small, "recordsize=16K").status.success());
    let mut files = Files { all: Vec::new() };

    // plain files: several records, a short last one
    let a = big.join("a");
    let b = small.join("b");
    let c = m.path("c");
    for (p, seed, n, rs) in [(&a, 1, 3_300_000, "1M"), (&b, 2, 300_000, "16K"), (&c, 3, 700_000, "128K")] {
        let data = text(seed, n);
        std::fs::write(p, &data).unwrap();
        files.all.push((p.clone(), data, rs));
    }
    assert_eq!(recordsize(&a), ("1M".into(), "inherited".into()));
    assert_eq!(recordsize(&b), ("16K".into(), "inherited".into()));
    assert_eq!(recordsize(&c), ("128K".into(), "default".into()));

    // copies between the trees (copy_file_range, else read/write by the kernel): each copy
    // has the record size of its own directory
    for (from, to, rs) in [(&a, small.join("a-copy"), "16K"), (&b, big.join("b-copy"), "1M")] {
        std::fs::copy(from, &to).unwrap();
        files.all.push((to, std::fs::read(from).unwrap(), rs));
    }

    // a sparse file in each tree: data far past a hole, a hole punched across records, then
    // a truncation inside a record and an extension
    for (dir, rs, unit) in [(&big, "1M", 1u64 << 20), (&small, "16K", 16 << 10)] {
        let p = dir.join("sparse");
        let mut f = std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&p).unwrap();
        let mut model = vec![0u8; 0];
        let put = |f: &mut std::fs::File, off: u64, b: &[u8], model: &mut Vec<u8>| {
            f.write_all_at(b, off).unwrap();
            let end = off as usize + b.len();
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(b);
        };
        put(&mut f, 5 * unit + 123, &text(7, 50_000), &mut model);
        put(&mut f, 10, &text(8, 3 * unit as usize), &mut model);
        let r = unsafe {
            libc::fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (unit / 2) as i64,
                (2 * unit) as i64,
            )
        };
        assert_eq!(r, 0, "punching a hole: errno {}", errno());
        model[(unit / 2) as usize..(unit / 2 + 2 * unit) as usize].fill(0);
        f.set_len(4 * unit + 777).unwrap();
        model.truncate((4 * unit + 777) as usize);
        f.set_len(6 * unit).unwrap();
        model.resize(6 * unit as usize, 0);
        // SEEK_DATA from inside the punched records finds the data after them
        let data_at = unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&f), unit as i64, libc::SEEK_DATA) };
        assert!(data_at >= unit as i64 && data_at <= (3 * unit) as i64, "SEEK_DATA at {data_at}");
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        assert!(back == model, "{}: sparse file content", p.display());
        f.flush().unwrap();
        files.all.push((p, model, rs));
    }
    files.check();

    // the trees change: files made before keep their records (shown as fixed), new ones
    // get the new size
    assert!(prop_set(&big, "recordsize=64K").status.success());
    assert_eq!(recordsize(&a), ("1M".into(), "fixed".into()));
    let a2 = big.join("a2");
    let data = text(9, 500_000);
    std::fs::write(&a2, &data).unwrap();
    assert_eq!(recordsize(&a2), ("64K".into(), "inherited".into()));
    files.all.push((a2, data, "64K"));

    // a file with data refuses another record size: the CLI says why, setxattr is EINVAL;
    // an empty file takes one
    let out = prop_set(&b, "recordsize=1M");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fixed once it has data") && err.contains("16K"), "{err}");
    assert_eq!(setx(&b, "user.squeezefs.recordsize", "1M"), Err(libc::EINVAL));
    assert_eq!(setx(&b, "user.squeezefs.recordsize", "16K"), Ok(()), "the size it has is accepted");
    assert_eq!(recordsize(&b), ("16K".into(), "local".into()));
    let e = small.join("empty-then-4k");
    std::fs::write(&e, b"").unwrap();
    let out = prop_set(&e, "recordsize=4K");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let data = text(10, 90_000);
    std::fs::write(&e, &data).unwrap();
    assert_eq!(recordsize(&e), ("4K".into(), "local".into()));
    files.all.push((e, data, "4K"));
    files.check();

    // after a remount: same contents, same record sizes
    m.remount();
    files.check();
    assert_eq!(recordsize(&a), ("1M".into(), "fixed".into()));
    assert_eq!(recordsize(&small.join("a-copy")), ("16K".into(), "inherited".into()));
    // stats: the per-level breakdown of the tree covers every byte written into it
    let out = run(&["stats", "--json", big.to_str().unwrap()]);
    assert!(out.status.success(), "stats: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["algorithm"] == "zstd" && r["level"] == 3), "{rows:?}");
    m.umount();
    let out = run(&["fsck", m.pool.to_str().unwrap()]);
    assert!(out.status.success(), "fsck: {}", String::from_utf8_lossy(&out.stdout));
    m.mount();
    files.check();
}

#[test]
fn the_mount_option_sets_the_record_size_outside_recordsize_trees() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("recordsize=256K");
    let t = m.path("t");
    std::fs::create_dir(&t).unwrap();
    assert!(prop_set(&t, "recordsize=8K").status.success());
    let top = m.path("top");
    let inner = t.join("inner");
    let d1 = text(11, 1_000_000);
    let d2 = text(12, 100_000);
    std::fs::write(&top, &d1).unwrap();
    std::fs::write(&inner, &d2).unwrap();
    assert_eq!(recordsize(&top), ("256K".into(), "mount option".into()));
    assert_eq!(recordsize(&inner), ("8K".into(), "inherited".into()));
    // mounted without the option the pool's default applies to new files; old ones keep theirs
    m.opts = String::new();
    m.remount();
    assert_eq!(recordsize(&top), ("256K".into(), "fixed".into()));
    assert_eq!(std::fs::read(&top).unwrap(), d1);
    assert_eq!(std::fs::read(&inner).unwrap(), d2);
    std::fs::write(m.path("new"), b"x").unwrap();
    assert_eq!(recordsize(&m.path("new")), ("128K".into(), "default".into()));
    m.umount();
    run_ok(&["fsck", m.pool.to_str().unwrap()]);
}
