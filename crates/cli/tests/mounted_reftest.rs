//! Randomized operation sequences run on a MOUNTED squeezefs and on a reference directory
//! on the host's ext4 (/tmp), comparing every result (value or errno), then the whole
//! trees (kinds, modes, link counts, sizes, contents, symlink targets, xattrs); the case
//! directory's `recordsize` changes now and then, so files of several record sizes mix. Once per
//! codec family: none, lz4, zstd, deflate.
mod mounted_common;
use mounted_common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The namespace the operations play in: files and directories share these names, so
/// type clashes (ENOTDIR, EISDIR, ENOTEMPTY...) come up often.
const PATHS: [&str; 10] = ["a", "b", "c", "d", "d/a", "d/b", "d/e", "d/e/a", "e", "e/a"];
const XNAMES: [&str; 3] = ["user.a", "user.bb", "user.squeeze"];

/// Deterministic data: kind 0 zeros, 1 random, 2 text-like (compressible).
#[derive(Clone, Debug)]
struct Data {
    seed: u64,
    len: u32,
    kind: u8,
}

impl Data {
    fn bytes(&self) -> Vec<u8> {
        let mut x = self.seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        match self.kind {
            0 => vec![0; self.len as usize],
            1 => (0..self.len).map(|_| next() as u8).collect(),
            _ => {
                let words = [&b"squeeze "[..], b"fs ", b"compress ", b"record ", b"\n", b"zstd lz4 "];
                let mut v = Vec::with_capacity(self.len as usize);
                while v.len() < self.len as usize {
                    v.extend_from_slice(words[(next() % words.len() as u64) as usize]);
                }
                v.truncate(self.len as usize);
                v
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Create(usize, Data),
    WriteAt(usize, u32, Data),
    Append(usize, Data),
    Truncate(usize, u32),
    Read(usize, u32, u32),
    Mkdir(usize),
    Rmdir(usize),
    Unlink(usize),
    Rename(usize, usize, u32),
    Link(usize, usize),
    Symlink(usize, usize),
    Readlink(usize),
    Chmod(usize, u32),
    SetXattr(usize, usize, Data, i32),
    GetXattr(usize, usize),
    RemoveXattr(usize, usize),
    ListXattr(usize),
    Fallocate(usize, i32, u32, u32),
    Seek(usize, u32, i32),
    Mkfifo(usize),
    ReadUnlinked(usize),
    Stat(usize),
    ListDir(usize),
    Fsync(usize),
    /// copy_file_range(2) from the first file to the second: source offset, target offset,
    /// length (squeezefs shares the records that line up)
    CopyRange(usize, usize, u32, u32, u32),
    Remount,
    /// squeezefs only: the case's directory gets this `recordsize` (files created in the
    /// case from then on get records of this size; the directory itself is not compared)
    Recordsize(u32),
}

fn data(max: u32) -> impl Strategy<Value = Data> {
    (any::<u64>(), 0..=max, 0u8..3).prop_map(|(seed, len, kind)| Data { seed, len, kind })
}

/// An offset for a copy: often on a 16 KiB boundary (so records of up to 16 KiB line up in
/// source and target and are shared), else anywhere.
fn offset() -> impl Strategy<Value = u32> {
    prop_oneof![(0..30u32).prop_map(|k| k * 16384), 0..400_000u32]
}

fn op() -> impl Strategy<Value = Op> {
    let p = || 0..PATHS.len();
    let x = || 0..XNAMES.len();
    prop_oneof![
        6 => (p(), data(300_000)).prop_map(|(a, d)| Op::Create(a, d)),
        5 => (p(), 0..400_000u32, data(150_000)).prop_map(|(a, o, d)| Op::WriteAt(a, o, d)),
        2 => (p(), data(20_000)).prop_map(|(a, d)| Op::Append(a, d)),
        3 => (p(), 0..500_000u32).prop_map(|(a, s)| Op::Truncate(a, s)),
        5 => (p(), 0..500_000u32, 0..200_000u32).prop_map(|(a, o, l)| Op::Read(a, o, l)),
        4 => p().prop_map(Op::Mkdir),
        2 => p().prop_map(Op::Rmdir),
        3 => p().prop_map(Op::Unlink),
        4 => (p(), p(), prop_oneof![Just(0u32), Just(libc::RENAME_NOREPLACE), Just(libc::RENAME_EXCHANGE)])
            .prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        2 => (p(), p()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => (p(), p()).prop_map(|(a, b)| Op::Symlink(a, b)),
        1 => p().prop_map(Op::Readlink),
        2 => (p(), prop_oneof![Just(0o644u32), Just(0o600), Just(0o755), Just(0o4755), Just(0o1777)])
            .prop_map(|(a, m)| Op::Chmod(a, m)),
        3 => (p(), x(), data(200), prop_oneof![Just(0), Just(libc::XATTR_CREATE), Just(libc::XATTR_REPLACE)])
            .prop_map(|(a, n, d, f)| Op::SetXattr(a, n, d, f)),
        2 => (p(), x()).prop_map(|(a, n)| Op::GetXattr(a, n)),
        1 => (p(), x()).prop_map(|(a, n)| Op::RemoveXattr(a, n)),
        1 => p().prop_map(Op::ListXattr),
        3 => (p(), prop_oneof![Just(0), Just(libc::FALLOC_FL_KEEP_SIZE), Just(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)],
              0..400_000u32, 1..200_000u32).prop_map(|(a, m, o, l)| Op::Fallocate(a, m, o, l)),
        2 => (p(), 0..500_000u32, prop_oneof![Just(libc::SEEK_DATA), Just(libc::SEEK_HOLE)]).prop_map(|(a, o, w)| Op::Seek(a, o, w)),
        1 => p().prop_map(Op::Mkfifo),
        1 => p().prop_map(Op::ReadUnlinked),
        3 => p().prop_map(Op::Stat),
        2 => p().prop_map(Op::ListDir),
        1 => p().prop_map(Op::Fsync),
        5 => (p(), p(), offset(), offset(), prop_oneof![(1..40u32).prop_map(|k| k * 16384), 1..300_000u32])
            .prop_map(|(a, b, o, t, l)| Op::CopyRange(a, b, o, t, l)),
        1 => Just(Op::Remount),
        2 => prop::sample::select(vec![4096u32, 16384, 131072, 1 << 20]).prop_map(Op::Recordsize),
    ]
}

/// What an operation returned: a comparable value or an errno.
#[derive(Debug, PartialEq, Eq)]
enum Out {
    Unit,
    Bytes(Vec<u8>),
    Names(Vec<Vec<u8>>),
    Stat {
        kind: u32,
        perm: u32,
        nlink: u64,
        size: Option<u64>,
    },
    /// lseek result: checked against the reference contents, not compared exactly
    Seek(i64),
    Err(i32),
}

fn c(p: &Path) -> CString {
    cstr(p)
}

fn res(r: isize) -> Result<isize, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

fn unit(r: isize) -> Out {
    match res(r) {
        Ok(_) => Out::Unit,
        Err(e) => Out::Err(e),
    }
}

fn with_fd(p: &Path, flags: i32, f: impl FnOnce(i32) -> Out) -> Out {
    // O_NONBLOCK: opening a FIFO must not wait for a partner (no effect on files)
    let fd = unsafe { libc::open(c(p).as_ptr(), flags | libc::O_CLOEXEC | libc::O_NONBLOCK, 0o644) };
    if fd < 0 {
        return Out::Err(errno());
    }
    let o = f(fd);
    unsafe { libc::close(fd) };
    o
}

fn pwrite_all(fd: i32, data: &[u8], off: u64) -> Out {
    let mut done = 0;
    while done < data.len() {
        let n =
            unsafe { libc::pwrite(fd, data[done..].as_ptr().cast(), data.len() - done, (off + done as u64) as i64) };
        if n < 0 {
            return Out::Err(errno());
        }
        done += n as usize;
    }
    Out::Unit
}

fn read_at(fd: i32, off: u64, len: usize) -> Out {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = unsafe { libc::pread(fd, buf[done..].as_mut_ptr().cast(), len - done, (off + done as u64) as i64) };
        if n < 0 {
            return Out::Err(errno());
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    buf.truncate(done);
    Out::Bytes(buf)
}

fn apply(base: &Path, op: &Op) -> Out {
    let at = |i: usize| base.join(PATHS[i]);
    match op {
        Op::Create(a, d) => {
            with_fd(&at(*a), libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY, |fd| pwrite_all(fd, &d.bytes(), 0))
        }
        Op::WriteAt(a, off, d) => with_fd(&at(*a), libc::O_WRONLY, |fd| pwrite_all(fd, &d.bytes(), *off as u64)),
        Op::Append(a, d) => with_fd(&at(*a), libc::O_WRONLY | libc::O_APPEND, |fd| {
            let b = d.bytes();
            unit(unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) })
        }),
        Op::Truncate(a, s) => unit(unsafe { libc::truncate(c(&at(*a)).as_ptr(), *s as i64) } as isize),
        Op::Read(a, off, len) => with_fd(&at(*a), libc::O_RDONLY, |fd| read_at(fd, *off as u64, *len as usize)),
        Op::Mkdir(a) => unit(unsafe { libc::mkdir(c(&at(*a)).as_ptr(), 0o755) } as isize),
        Op::Rmdir(a) => unit(unsafe { libc::rmdir(c(&at(*a)).as_ptr()) } as isize),
        Op::Unlink(a) => unit(unsafe { libc::unlink(c(&at(*a)).as_ptr()) } as isize),
        Op::Rename(a, b, f) => unit(unsafe {
            libc::renameat2(libc::AT_FDCWD, c(&at(*a)).as_ptr(), libc::AT_FDCWD, c(&at(*b)).as_ptr(), *f)
        } as isize),
        Op::Link(a, b) => unit(unsafe { libc::link(c(&at(*a)).as_ptr(), c(&at(*b)).as_ptr()) } as isize),
        Op::Symlink(t, a) => {
            let target = CString::new(PATHS[*t]).unwrap();
            unit(unsafe { libc::symlink(target.as_ptr(), c(&at(*a)).as_ptr()) } as isize)
        }
        Op::Readlink(a) => match std::fs::read_link(at(*a)) {
            Ok(t) => Out::Bytes(t.as_os_str().as_bytes().to_vec()),
            Err(e) => Out::Err(e.raw_os_error().unwrap()),
        },
        Op::Chmod(a, m) => unit(unsafe { libc::chmod(c(&at(*a)).as_ptr(), *m) } as isize),
        Op::SetXattr(a, n, d, f) => {
            let name = CString::new(XNAMES[*n]).unwrap();
            let v = d.bytes();
            unit(unsafe { libc::lsetxattr(c(&at(*a)).as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), *f) } as isize)
        }
        Op::GetXattr(a, n) => match xattr_get(&at(*a), XNAMES[*n]) {
            Ok(v) => Out::Bytes(v),
            Err(e) => Out::Err(e),
        },
        Op::RemoveXattr(a, n) => {
            let name = CString::new(XNAMES[*n]).unwrap();
            unit(unsafe { libc::lremovexattr(c(&at(*a)).as_ptr(), name.as_ptr()) } as isize)
        }
        Op::ListXattr(a) => match list_xattr(&at(*a)) {
            Ok(v) => Out::Names(v),
            Err(e) => Out::Err(e),
        },
        Op::Fallocate(a, m, off, len) => with_fd(&at(*a), libc::O_WRONLY, |fd| {
            unit(unsafe { libc::fallocate(fd, *m, *off as i64, *len as i64) } as isize)
        }),
        Op::Seek(a, off, w) => {
            with_fd(&at(*a), libc::O_RDONLY, |fd| match res(unsafe { libc::lseek(fd, *off as i64, *w) } as isize) {
                Ok(r) => Out::Seek(r as i64),
                Err(e) => Out::Err(e),
            })
        }
        Op::Mkfifo(a) => unit(unsafe { libc::mkfifo(c(&at(*a)).as_ptr(), 0o640) } as isize),
        Op::ReadUnlinked(a) => with_fd(&at(*a), libc::O_RDONLY | libc::O_NONBLOCK, |fd| {
            if let Out::Err(e) = unit(unsafe { libc::unlink(c(&at(*a)).as_ptr()) } as isize) {
                return Out::Err(e);
            }
            read_at(fd, 0, 1 << 20)
        }),
        Op::Stat(a) => stat(&at(*a)),
        Op::ListDir(a) => match std::fs::read_dir(at(*a)) {
            Ok(rd) => {
                let mut v: Vec<Vec<u8>> = rd.map(|e| e.unwrap().file_name().as_bytes().to_vec()).collect();
                v.sort();
                Out::Names(v)
            }
            Err(e) => Out::Err(e.raw_os_error().unwrap()),
        },
        Op::Fsync(a) => {
            with_fd(&at(*a), libc::O_RDONLY | libc::O_NONBLOCK, |fd| unit(unsafe { libc::fsync(fd) } as isize))
        }
        Op::CopyRange(a, b, off, to, len) => with_fd(&at(*a), libc::O_RDONLY, |fin| {
            with_fd(&at(*b), libc::O_WRONLY, |fout| {
                let (mut off_in, mut off_out) = (*off as i64, *to as i64);
                let n = unsafe { libc::copy_file_range(fin, &mut off_in, fout, &mut off_out, *len as usize, 0) };
                match res(n as isize) {
                    Ok(n) => Out::Bytes((n as u64).to_le_bytes().to_vec()),
                    Err(e) => Out::Err(e),
                }
            })
        }),
        Op::Remount | Op::Recordsize(_) => Out::Unit,
    }
}

fn stat(p: &Path) -> Out {
    match std::fs::symlink_metadata(p) {
        Ok(m) => {
            let kind = m.mode() & libc::S_IFMT;
            Out::Stat {
                kind,
                perm: m.mode() & 0o7777,
                nlink: m.nlink(),
                // directory sizes are fs-specific (ext4 counts blocks)
                size: (kind != libc::S_IFDIR).then_some(m.size()),
            }
        }
        Err(e) => Out::Err(e.raw_os_error().unwrap()),
    }
}

fn list_xattr(p: &Path) -> Result<Vec<Vec<u8>>, i32> {
    let mut buf = vec![0u8; 4096];
    let n = unsafe { libc::llistxattr(c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(errno());
    }
    let mut v: Vec<Vec<u8>> =
        buf[..n as usize].split(|&b| b == 0).filter(|s| s.starts_with(b"user.")).map(|s| s.to_vec()).collect();
    v.sort();
    Ok(v)
}

/// SEEK_DATA/SEEK_HOLE granularity differs between filesystems (ext4 blocks, squeezefs
/// records, zero records become holes): check our answer against the reference bytes.
fn check_seek(ours: &Out, reference_file: &Path, off: u64, whence: i32) -> Result<(), String> {
    let content = std::fs::read(reference_file).unwrap_or_default();
    let size = content.len() as u64;
    let zeros = |a: u64, b: u64| content[a as usize..b.min(size) as usize].iter().all(|&x| x == 0);
    match (ours, whence) {
        (Out::Err(libc::ENXIO), _) if off >= size => Ok(()),
        (Out::Err(libc::ENXIO), libc::SEEK_DATA) if zeros(off, size) => Ok(()),
        (Out::Seek(r), libc::SEEK_DATA) if *r as u64 >= off && (*r as u64) < size && zeros(off, *r as u64) => Ok(()),
        (Out::Seek(r), libc::SEEK_HOLE)
            if *r as u64 >= off && *r as u64 <= size && (*r as u64 == size || content[*r as usize] == 0) =>
        {
            Ok(())
        }
        _ => Err(format!("lseek({off}, {whence}) = {ours:?} does not fit the reference (size {size})")),
    }
}

/// Everything observable about a tree, keyed by relative path.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let kind = m.mode() & libc::S_IFMT;
            let mut desc = format!("kind={kind:o} perm={:o} nlink={}", m.mode() & 0o7777, m.nlink());
            if m.file_type().is_symlink() {
                desc += &format!(" -> {:?}", std::fs::read_link(&p).unwrap());
            } else if m.is_file() {
                let data = std::fs::read(&p).unwrap();
                desc += &format!(" size={} hash={:x}", data.len(), fnv(&data));
            }
            if m.is_file() || m.is_dir() {
                for n in list_xattr(&p).unwrap() {
                    let v = xattr_get(&p, std::str::from_utf8(&n).unwrap()).unwrap();
                    desc += &format!(" {}={:x}", String::from_utf8_lossy(&n), fnv(&v));
                }
            }
            out.insert(rel, desc);
            if m.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    walk(root, root, &mut out);
    out
}

fn fnv(d: &[u8]) -> u64 {
    d.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// `transport`: the `uring=` option (empty: the default transport); two codec families run
/// over each request transport.
fn reftest(codec: &str, transport: &str) {
    if !can_mount() {
        return;
    }
    let mounted = RefCell::new(Mounted::new_as_given(&format!("compress-force={codec},{transport}")));
    assert_transport(&mounted.borrow(), transport);
    let host = tempfile::Builder::new().prefix("sqzref").tempdir_in("/tmp").unwrap();
    let cases: u32 = std::env::var("SQUEEZEFS_REFTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    let mut runner =
        TestRunner::new(Config { cases, max_shrink_iters: 200, failure_persistence: None, ..Config::default() });
    let case_no = RefCell::new(0u32);
    let result = runner.run(&proptest::collection::vec(op(), 1..40), |ops| {
        let n = {
            let mut c = case_no.borrow_mut();
            *c += 1;
            *c
        };
        let ours_dir = mounted.borrow().mnt.join(format!("case{n}"));
        let ref_dir = host.path().join(format!("case{n}"));
        for d in [&ours_dir, &ref_dir] {
            seed_tree(d);
        }
        for (i, op) in ops.iter().enumerate() {
            if matches!(op, Op::Remount) {
                mounted.borrow_mut().remount();
                continue;
            }
            if let Op::Recordsize(rs) = op {
                let (name, v) = (CString::new("user.squeezefs.recordsize").unwrap(), format!("{}K", rs >> 10));
                let r = unsafe { libc::lsetxattr(c(&ours_dir).as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
                prop_assert_eq!(r, 0, "recordsize={} on the case directory: errno {}", v, errno());
                continue;
            }
            let expected = apply(&ref_dir, op);
            let got = apply(&ours_dir, op);
            if std::env::var_os("SQUEEZEFS_REFTEST_TRACE").is_some() {
                eprintln!("case {n} op {i} {op:?} -> {}", short(&got));
            }
            match (op, &expected) {
                (Op::Seek(a, off, w), Out::Seek(_) | Out::Err(libc::ENXIO)) => {
                    check_seek(&got, &ref_dir.join(PATHS[*a]), *off as u64, *w)
                        .map_err(|e| TestCaseError::fail(format!("op {i} {op:?}: {e}")))?;
                }
                _ => prop_assert!(
                    expected == got,
                    "op {} {:?}: ext4 {:?}, squeezefs {:?}",
                    i,
                    op,
                    short(&expected),
                    short(&got)
                ),
            }
        }
        let (a, b) = (snapshot(&ref_dir), snapshot(&ours_dir));
        prop_assert_eq!(a, b);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{codec} ({transport}): {e}");
    }
}

/// The starting tree of every case: some of the names exist, others are free.
fn seed_tree(d: &Path) {
    std::fs::create_dir(d).unwrap();
    for dir in ["d", "d/e", "e"] {
        std::fs::create_dir(d.join(dir)).unwrap();
    }
    for (i, f) in ["a", "d/a", "e/a"].iter().enumerate() {
        let data = Data { seed: i as u64 + 1, len: 50_000 * i as u32 + 1000, kind: (i % 3) as u8 }.bytes();
        std::fs::write(d.join(f), data).unwrap();
    }
}

/// Outcomes with long byte strings abbreviated for failure messages.
fn short(o: &Out) -> String {
    match o {
        Out::Bytes(b) if b.len() > 64 => format!("Bytes(len {}, hash {:x})", b.len(), fnv(b)),
        other => format!("{other:?}"),
    }
}

#[test]
fn reftest_none() {
    reftest("none", "");
}

#[test]
fn reftest_lz4() {
    reftest("lz4", "uring=off");
}

#[test]
fn reftest_zstd() {
    reftest("zstd:3", "");
}

#[test]
fn reftest_deflate() {
    reftest("zlib:6", "uring=off");
}
