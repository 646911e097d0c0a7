//! Randomized operation sequences against the fs core WITHOUT mounting, compared with a
//! reference directory on the host's ext4 (/tmp): results (value or errno) of every
//! operation, then the whole trees. Path resolution (what the kernel's VFS would do) is
//! done here by looking up each component, like the kernel does before calling the fs.
//! The root's `recordsize` changes now and then (squeezefs side only; the root's attributes
//! are not compared), so files of several record sizes live side by side.
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use squeezefs_fs::{Creds, FileKind, Fs, FsConfig, FsError, Ino, SetAttr, ROOT_INO};
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const PATHS: [&str; 10] = ["a", "b", "c", "d", "d/a", "d/b", "d/e", "d/e/a", "e", "e/a"];
const XNAMES: [&str; 3] = ["user.a", "user.bb", "user.squeeze"];

#[derive(Clone, Debug)]
enum Op {
    Create(usize, u64, u32),
    WriteAt(usize, u32, u64, u32),
    Truncate(usize, u32),
    Read(usize, u32, u32),
    Mkdir(usize),
    Rmdir(usize),
    Unlink(usize),
    Rename(usize, usize, u32),
    Link(usize, usize),
    Chmod(usize, u32),
    SetXattr(usize, usize, u64, i32),
    GetXattr(usize, usize),
    RemoveXattr(usize, usize),
    Punch(usize, u32, u32),
    Stat(usize),
    ListDir(usize),
    Reopen,
    /// squeezefs only: files created from now on get records of this many bytes
    RootRecordsize(u32),
}

fn bytes(seed: u64, len: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|i| {
            if seed.is_multiple_of(3) {
                (i % 7) as u8 + b'a' // compressible
            } else {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            }
        })
        .collect()
}

fn op() -> impl Strategy<Value = Op> {
    let p = || 0..PATHS.len();
    prop_oneof![
        6 => (p(), any::<u64>(), 0..300_000u32).prop_map(|(a, s, l)| Op::Create(a, s, l)),
        5 => (p(), 0..400_000u32, any::<u64>(), 0..150_000u32).prop_map(|(a, o, s, l)| Op::WriteAt(a, o, s, l)),
        3 => (p(), 0..500_000u32).prop_map(|(a, s)| Op::Truncate(a, s)),
        5 => (p(), 0..500_000u32, 0..200_000u32).prop_map(|(a, o, l)| Op::Read(a, o, l)),
        4 => p().prop_map(Op::Mkdir),
        2 => p().prop_map(Op::Rmdir),
        3 => p().prop_map(Op::Unlink),
        4 => (p(), p(), prop_oneof![Just(0u32), Just(libc::RENAME_NOREPLACE), Just(libc::RENAME_EXCHANGE)])
            .prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        2 => (p(), p()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => (p(), prop_oneof![Just(0o644u32), Just(0o600), Just(0o4755), Just(0o1777)]).prop_map(|(a, m)| Op::Chmod(a, m)),
        3 => (p(), 0..XNAMES.len(), any::<u64>(), prop_oneof![Just(0), Just(libc::XATTR_CREATE), Just(libc::XATTR_REPLACE)])
            .prop_map(|(a, n, s, f)| Op::SetXattr(a, n, s, f)),
        2 => (p(), 0..XNAMES.len()).prop_map(|(a, n)| Op::GetXattr(a, n)),
        1 => (p(), 0..XNAMES.len()).prop_map(|(a, n)| Op::RemoveXattr(a, n)),
        2 => (p(), 0..400_000u32, 1..200_000u32).prop_map(|(a, o, l)| Op::Punch(a, o, l)),
        3 => p().prop_map(Op::Stat),
        2 => p().prop_map(Op::ListDir),
        1 => Just(Op::Reopen),
        2 => prop::sample::select(vec![4096u32, 16384, 65536, 131072, 1 << 20]).prop_map(Op::RootRecordsize),
    ]
}

#[derive(Debug, PartialEq, Eq)]
enum Out {
    Unit,
    Bytes(Vec<u8>),
    Names(Vec<Vec<u8>>),
    Stat { dir: bool, perm: u32, nlink: u64, size: Option<u64> },
    Err(i32),
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

// ---------------------------------------------------------------- reference (ext4)

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn unit(r: i64) -> Out {
    if r < 0 {
        Out::Err(errno())
    } else {
        Out::Unit
    }
}

fn with_fd(p: &Path, flags: i32, f: impl FnOnce(i32) -> Out) -> Out {
    let fd = unsafe { libc::open(c(p).as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        return Out::Err(errno());
    }
    let o = f(fd);
    unsafe { libc::close(fd) };
    o
}

fn host(base: &Path, op: &Op) -> Out {
    let at = |i: usize| base.join(PATHS[i]);
    match op {
        Op::Create(a, s, l) => with_fd(&at(*a), libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY, |fd| {
            let b = bytes(*s, *l);
            unit(unsafe { libc::pwrite(fd, b.as_ptr().cast(), b.len(), 0) } as i64)
        }),
        Op::WriteAt(a, o, s, l) => with_fd(&at(*a), libc::O_WRONLY, |fd| {
            let b = bytes(*s, *l);
            unit(unsafe { libc::pwrite(fd, b.as_ptr().cast(), b.len(), *o as i64) } as i64)
        }),
        Op::Truncate(a, s) => unit(unsafe { libc::truncate(c(&at(*a)).as_ptr(), *s as i64) } as i64),
        Op::Read(a, o, l) => with_fd(&at(*a), libc::O_RDONLY, |fd| {
            let mut buf = vec![0u8; *l as usize];
            let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), *o as i64) };
            if n < 0 {
                return Out::Err(errno());
            }
            buf.truncate(n as usize);
            Out::Bytes(buf)
        }),
        Op::Mkdir(a) => unit(unsafe { libc::mkdir(c(&at(*a)).as_ptr(), 0o755) } as i64),
        Op::Rmdir(a) => unit(unsafe { libc::rmdir(c(&at(*a)).as_ptr()) } as i64),
        Op::Unlink(a) => unit(unsafe { libc::unlink(c(&at(*a)).as_ptr()) } as i64),
        Op::Rename(a, b, f) => unit(unsafe {
            libc::renameat2(libc::AT_FDCWD, c(&at(*a)).as_ptr(), libc::AT_FDCWD, c(&at(*b)).as_ptr(), *f)
        } as i64),
        Op::Link(a, b) => unit(unsafe { libc::link(c(&at(*a)).as_ptr(), c(&at(*b)).as_ptr()) } as i64),
        Op::Chmod(a, m) => unit(unsafe { libc::chmod(c(&at(*a)).as_ptr(), *m) } as i64),
        Op::SetXattr(a, n, s, f) => {
            let name = CString::new(XNAMES[*n]).unwrap();
            let v = bytes(*s, (*s % 200) as u32);
            unit(unsafe { libc::setxattr(c(&at(*a)).as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), *f) } as i64)
        }
        Op::GetXattr(a, n) => {
            let name = CString::new(XNAMES[*n]).unwrap();
            let mut buf = vec![0u8; 1024];
            let r = unsafe { libc::getxattr(c(&at(*a)).as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
            if r < 0 {
                return Out::Err(errno());
            }
            buf.truncate(r as usize);
            Out::Bytes(buf)
        }
        Op::RemoveXattr(a, n) => {
            let name = CString::new(XNAMES[*n]).unwrap();
            unit(unsafe { libc::removexattr(c(&at(*a)).as_ptr(), name.as_ptr()) } as i64)
        }
        Op::Punch(a, o, l) => with_fd(&at(*a), libc::O_WRONLY, |fd| {
            unit(unsafe {
                libc::fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, *o as i64, *l as i64)
            } as i64)
        }),
        Op::Stat(a) => match std::fs::symlink_metadata(at(*a)) {
            Ok(m) => Out::Stat {
                dir: m.is_dir(),
                perm: m.mode() & 0o7777,
                nlink: m.nlink(),
                size: (!m.is_dir()).then_some(m.size()),
            },
            Err(e) => Out::Err(e.raw_os_error().unwrap()),
        },
        Op::ListDir(a) => match std::fs::read_dir(at(*a)) {
            Ok(rd) => {
                let mut v: Vec<Vec<u8>> = rd.map(|e| e.unwrap().file_name().as_bytes().to_vec()).collect();
                v.sort();
                Out::Names(v)
            }
            Err(e) => Out::Err(e.raw_os_error().unwrap()),
        },
        Op::Reopen | Op::RootRecordsize(_) => Out::Unit,
    }
}

// ---------------------------------------------------------------- fs core

struct Core {
    pool: std::path::PathBuf,
    fs: Fs,
    root: Ino,
}

fn fail(e: FsError) -> Out {
    Out::Err(e.errno())
}

impl Core {
    /// Resolve all components but the last (as the VFS does): (parent, last name).
    fn parent(&self, path: &str) -> Result<(Ino, Vec<u8>), i32> {
        let mut comps: Vec<&str> = path.split('/').collect();
        let last = comps.pop().unwrap();
        let mut dir = self.root;
        let c = Creds::root();
        for comp in comps {
            let a = self.fs.lookup(&c, dir, comp.as_bytes()).map_err(|e| e.errno())?;
            self.fs.forget(a.ino, 1);
            if a.kind != FileKind::Dir {
                return Err(libc::ENOTDIR);
            }
            dir = a.ino;
        }
        Ok((dir, last.as_bytes().to_vec()))
    }

    fn resolve(&self, path: &str) -> Result<Ino, i32> {
        let (p, name) = self.parent(path)?;
        let a = self.fs.lookup(&Creds::root(), p, &name).map_err(|e| e.errno())?;
        self.fs.forget(a.ino, 1);
        Ok(a.ino)
    }

    /// open(2) as the kernel would issue it: lookup, then open (or create).
    fn with_open(&self, path: &str, flags: i32, f: impl FnOnce(&Fs, Ino) -> Out) -> Out {
        let c = Creds::root();
        let (p, name) = match self.parent(path) {
            Ok(x) => x,
            Err(e) => return Out::Err(e),
        };
        let opened = match self.fs.lookup(&c, p, &name) {
            Ok(a) => {
                self.fs.forget(a.ino, 1);
                self.fs.open(&c, a.ino, flags).map(|fh| (a.ino, fh))
            }
            Err(FsError::NotFound) if flags & libc::O_CREAT != 0 => {
                self.fs.create(&c, p, &name, 0o644, flags).map(|(a, fh)| {
                    self.fs.forget(a.ino, 1);
                    (a.ino, fh)
                })
            }
            Err(e) => Err(e),
        };
        match opened {
            Ok((ino, fh)) => {
                let o = f(&self.fs, ino);
                self.fs.release(fh).unwrap();
                o
            }
            Err(e) => fail(e),
        }
    }

    fn apply(&self, op: &Op) -> Out {
        let c = Creds::root();
        let r = |x: Result<(), FsError>| x.map_or_else(fail, |_| Out::Unit);
        match op {
            Op::Create(a, s, l) => {
                self.with_open(PATHS[*a], libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY, |fs, ino| {
                    r(fs.write(&c, ino, 0, &bytes(*s, *l), false).map(|_| ()))
                })
            }
            Op::WriteAt(a, o, s, l) => self.with_open(PATHS[*a], libc::O_WRONLY, |fs, ino| {
                r(fs.write(&c, ino, *o as u64, &bytes(*s, *l), false).map(|_| ()))
            }),
            Op::Truncate(a, s) => match self.resolve(PATHS[*a]) {
                Ok(ino) => {
                    r(self.fs.setattr(&c, ino, &SetAttr { size: Some(*s as u64), ..Default::default() }).map(|_| ()))
                }
                Err(e) => Out::Err(e),
            },
            Op::Read(a, o, l) => self.with_open(PATHS[*a], libc::O_RDONLY, |fs, ino| {
                // the kernel answers read(2) on a directory with EISDIR itself
                if fs.getattr(ino).unwrap().kind == FileKind::Dir {
                    return Out::Err(libc::EISDIR);
                }
                fs.read(ino, *o as u64, *l).map_or_else(fail, Out::Bytes)
            }),
            Op::Mkdir(a) => match self.parent(PATHS[*a]) {
                Ok((p, n)) => r(self.fs.mkdir(&c, p, &n, 0o755).map(|a| self.fs.forget(a.ino, 1))),
                Err(e) => Out::Err(e),
            },
            Op::Rmdir(a) => match self.parent(PATHS[*a]) {
                Ok((p, n)) => r(self.fs.rmdir(&c, p, &n)),
                Err(e) => Out::Err(e),
            },
            Op::Unlink(a) => match self.parent(PATHS[*a]) {
                Ok((p, n)) => r(self.fs.unlink(&c, p, &n)),
                Err(e) => Out::Err(e),
            },
            Op::Rename(a, b, f) => match (self.parent(PATHS[*a]), self.parent(PATHS[*b])) {
                (Ok((p, n)), Ok((np, nn))) => r(self.fs.rename(&c, p, &n, np, &nn, *f)),
                (Err(e), _) | (_, Err(e)) => Out::Err(e),
            },
            Op::Link(a, b) => match (self.resolve(PATHS[*a]), self.parent(PATHS[*b])) {
                (Ok(ino), Ok((np, nn))) => r(self.fs.link(&c, ino, np, &nn).map(|a| self.fs.forget(a.ino, 1))),
                (Err(e), _) | (_, Err(e)) => Out::Err(e),
            },
            Op::Chmod(a, m) => match self.resolve(PATHS[*a]) {
                Ok(ino) => r(self.fs.setattr(&c, ino, &SetAttr { mode: Some(*m), ..Default::default() }).map(|_| ())),
                Err(e) => Out::Err(e),
            },
            Op::SetXattr(a, n, s, f) => match self.resolve(PATHS[*a]) {
                Ok(ino) => r(self.fs.setxattr(&c, ino, XNAMES[*n].as_bytes(), &bytes(*s, (*s % 200) as u32), *f)),
                Err(e) => Out::Err(e),
            },
            Op::GetXattr(a, n) => match self.resolve(PATHS[*a]) {
                Ok(ino) => self.fs.getxattr(&c, ino, XNAMES[*n].as_bytes()).map_or_else(fail, Out::Bytes),
                Err(e) => Out::Err(e),
            },
            Op::RemoveXattr(a, n) => match self.resolve(PATHS[*a]) {
                Ok(ino) => r(self.fs.removexattr(&c, ino, XNAMES[*n].as_bytes())),
                Err(e) => Out::Err(e),
            },
            Op::Punch(a, o, l) => self.with_open(PATHS[*a], libc::O_WRONLY, |fs, ino| {
                r(fs.fallocate(&c, ino, *o as u64, *l as u64, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE))
            }),
            Op::Stat(a) => match self.resolve(PATHS[*a]) {
                Ok(ino) => {
                    let at = self.fs.getattr(ino).unwrap();
                    let dir = at.kind == FileKind::Dir;
                    Out::Stat { dir, perm: at.perm, nlink: at.nlink as u64, size: (!dir).then_some(at.size) }
                }
                Err(e) => Out::Err(e),
            },
            Op::ListDir(a) => match self.resolve(PATHS[*a]) {
                Ok(ino) => match self.fs.opendir(&c, ino, 0) {
                    Ok(fh) => {
                        let mut v: Vec<Vec<u8>> = self.list(ino).into_iter().map(|(n, _)| n).collect();
                        self.fs.releasedir(fh).unwrap();
                        v.sort();
                        Out::Names(v)
                    }
                    Err(e) => fail(e),
                },
                Err(e) => Out::Err(e),
            },
            Op::Reopen => Out::Unit,
            Op::RootRecordsize(rs) => {
                let v = format!("{}K", rs >> 10);
                r(self.fs.setxattr(&c, self.root, b"user.squeezefs.recordsize", v.as_bytes(), 0))
            }
        }
    }

    fn list(&self, dir: Ino) -> Vec<(Vec<u8>, Ino)> {
        let mut out = Vec::new();
        let mut off = 0;
        loop {
            let items = self.fs.readdir(dir, off, 100, false).unwrap();
            if items.is_empty() {
                return out;
            }
            for it in items {
                off = it.next_offset;
                if it.name != b"." && it.name != b".." {
                    out.push((it.name, it.ino));
                }
            }
        }
    }

    fn snapshot(&self, dir: Ino, prefix: &str, out: &mut BTreeMap<String, String>) {
        for (name, ino) in self.list(dir) {
            let p = format!("{prefix}{}", String::from_utf8_lossy(&name));
            let a = self.fs.getattr(ino).unwrap();
            let mut d = format!("dir={} perm={:o} nlink={}", a.kind == FileKind::Dir, a.perm, a.nlink);
            if a.kind == FileKind::File {
                let data = self.fs.read(ino, 0, a.size as u32 + 1).unwrap();
                d += &format!(" size={} data={:x}", a.size, fnv(&data));
            }
            let mut names = self.fs.listxattr(&Creds::root(), ino).unwrap();
            names.sort();
            for n in names {
                d += &format!(
                    " {}={:x}",
                    String::from_utf8_lossy(&n),
                    fnv(&self.fs.getxattr(&Creds::root(), ino, &n).unwrap())
                );
            }
            out.insert(p.clone(), d);
            if a.kind == FileKind::Dir {
                self.snapshot(ino, &format!("{p}/"), out);
            }
        }
    }
}

fn host_snapshot(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
        let mut d = format!("dir={} perm={:o} nlink={}", m.is_dir(), m.mode() & 0o7777, m.nlink());
        if m.is_file() {
            let data = std::fs::read(&p).unwrap();
            d += &format!(" size={} data={:x}", data.len(), fnv(&data));
        }
        let mut buf = vec![0u8; 4096];
        let n = unsafe { libc::listxattr(c(&p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        let mut names: Vec<&[u8]> =
            buf[..n.max(0) as usize].split(|&b| b == 0).filter(|s| s.starts_with(b"user.")).collect();
        names.sort();
        for name in names {
            let cn = CString::new(name).unwrap();
            let mut v = vec![0u8; 1024];
            let len = unsafe { libc::getxattr(c(&p).as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
            v.truncate(len as usize);
            d += &format!(" {}={:x}", String::from_utf8_lossy(name), fnv(&v));
        }
        out.insert(rel, d);
        if m.is_dir() {
            host_snapshot(root, &p, out);
        }
    }
}

fn fnv(d: &[u8]) -> u64 {
    d.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

fn open_core(pool: &Path, root: Ino) -> Core {
    let engine = Engine::open(pool, &OpenOptions::default()).unwrap();
    Core { pool: pool.to_path_buf(), fs: Fs::new(engine, FsConfig::default()).unwrap(), root }
}

#[test]
fn fs_core_matches_ext4() {
    let tmp = tempfile::Builder::new().prefix("sqzcore").tempdir_in("/tmp").unwrap();
    let cases: u32 = std::env::var("SQUEEZEFS_REFTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    let mut runner =
        TestRunner::new(Config { cases, max_shrink_iters: 200, failure_persistence: None, ..Config::default() });
    let n = RefCell::new(0u32);
    runner
        .run(&proptest::collection::vec(op(), 1..40), |ops| {
            *n.borrow_mut() += 1;
            let case = tmp.path().join(format!("case{}", n.borrow()));
            std::fs::create_dir(&case).unwrap();
            let reference = case.join("ref");
            std::fs::create_dir(&reference).unwrap();
            let pool = case.join("pool");
            Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
            let mut core = open_core(&pool, ROOT_INO);
            for (i, op) in ops.iter().enumerate() {
                if matches!(op, Op::Reopen) {
                    core.fs.shutdown().unwrap();
                    let pool = core.pool.clone();
                    drop(core); // releases the pool lock
                    core = open_core(&pool, ROOT_INO);
                    continue;
                }
                let expected = host(&reference, op);
                let got = core.apply(op);
                prop_assert!(
                    expected == got,
                    "op {} {:?}: ext4 {:?}, fs core {:?}",
                    i,
                    op,
                    short(&expected),
                    short(&got)
                );
            }
            let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
            host_snapshot(&reference, &reference, &mut a);
            core.snapshot(core.root, "", &mut b);
            prop_assert_eq!(a, b);
            core.fs.shutdown().unwrap();
            Ok(())
        })
        .unwrap();
}

fn short(o: &Out) -> String {
    match o {
        Out::Bytes(b) if b.len() > 64 => format!("Bytes(len {}, hash {:x})", b.len(), fnv(b)),
        other => format!("{other:?}"),
    }
}
