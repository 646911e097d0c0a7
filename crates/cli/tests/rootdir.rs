//! `squeezefs mkfs POOL --rootdir DIR`: a pool built from a generated tree holding every kind
//! of entry, mounted and compared with its source (content, mode, owner, times, xattrs, hard
//! links, holes, devices, FIFOs, sockets, symlink targets); the same run as an ordinary user;
//! per-path errors and --strict; bad input; a copy killed half-way.
mod mounted_common;
use mounted_common::{can_mount, cstr, errno, run, run_ok, BIN};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const RECORD: u64 = 128 * 1024;

fn ok(r: libc::c_int, what: &str) {
    assert!(r == 0, "{what}: {}", std::io::Error::last_os_error());
}

fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let ts =
        [libc::timespec { tv_sec: atime.0, tv_nsec: atime.1 }, libc::timespec { tv_sec: mtime.0, tv_nsec: mtime.1 }];
    let c = cstr(p);
    // SAFETY: valid path and two timespecs
    ok(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) }, "utimensat");
}

fn lchown(p: &Path, uid: u32, gid: u32) {
    let c = cstr(p);
    // SAFETY: valid path
    ok(unsafe { libc::lchown(c.as_ptr(), uid, gid) }, "lchown");
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let c = cstr(p);
    let n = CString::new(name).unwrap();
    // SAFETY: valid path, name and buffer
    let r = unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    ok(r, &format!("setxattr {name} on {}", p.display()));
}

fn mknod(p: &Path, mode: u32, dev: libc::dev_t) {
    let c = cstr(p);
    // SAFETY: valid path
    ok(unsafe { libc::mknod(c.as_ptr(), mode, dev) }, &format!("mknod {}", p.display()));
}

/// Extended attributes of `p` (not following symlinks), by name.
fn xattrs(p: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let c = cstr(p);
    let mut out = BTreeMap::new();
    let mut names = vec![0u8; 65536];
    // SAFETY: buffer valid for its length
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr {}: {}", p.display(), std::io::Error::last_os_error());
    names.truncate(n as usize);
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: buffer valid for its length
        let n = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(n >= 0, "getxattr {:?} of {}: {}", cn, p.display(), std::io::Error::last_os_error());
        v.truncate(n as usize);
        out.insert(name.to_vec(), v);
    }
    out
}

/// What the comparison looks at for one entry.
#[derive(Debug, Clone, PartialEq)]
struct Snap {
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u64,
    /// files and symlinks only (a directory's size is the filesystem's own)
    size: Option<u64>,
    rdev: u64,
    atime: (i64, i64),
    mtime: (i64, i64),
    ctime: (i64, i64),
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    target: Option<Vec<u8>>,
    /// not compared directly: hard links are compared as a mapping
    ino: u64,
}

/// Snapshot one entry. A symlink's target is read first: readlink(2) sets the atime
/// whatever the caller (relatime), so the stat after it shows what every later look sees.
fn snap(p: &Path) -> Snap {
    let target = std::fs::read_link(p).ok().map(|t| t.into_os_string().into_vec());
    let m = std::fs::symlink_metadata(p).unwrap();
    let ft = m.file_type();
    Snap {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        nlink: m.nlink(),
        size: (ft.is_file() || ft.is_symlink()).then_some(m.size()),
        rdev: m.rdev(),
        atime: (m.atime(), m.atime_nsec()),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
        xattrs: xattrs(p),
        target: if ft.is_symlink() { target } else { None },
        ino: m.ino(),
    }
}

/// Every entry under `root` (itself as ""), snapshotted before any content is read: a
/// directory is stat'ed before it is listed.
fn tree(root: &Path) -> BTreeMap<PathBuf, Snap> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let p = root.join(&rel);
        let s = snap(&p);
        let is_dir = s.mode & libc::S_IFMT == libc::S_IFDIR;
        out.insert(rel.clone(), s);
        if is_dir {
            for name in list_noatime(&p) {
                todo.push(rel.join(name));
            }
        }
    }
    out
}

/// The names in a directory, listed without changing its atime (O_NOATIME; the caller is
/// root or the owner), so that snapshots of the source do not change what they look at.
fn list_noatime(dir: &Path) -> Vec<std::ffi::OsString> {
    let c = cstr(dir);
    // SAFETY: open of a valid path
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOATIME | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open {}: {}", dir.display(), std::io::Error::last_os_error());
    // SAFETY: fd is an open directory; the stream owns it from here
    let d = unsafe { libc::fdopendir(fd) };
    assert!(!d.is_null());
    let mut out = Vec::new();
    loop {
        // SAFETY: d is a valid stream until closedir
        let e = unsafe { libc::readdir64(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated
        let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes().to_vec();
        if name != b"." && name != b".." {
            out.push(std::ffi::OsString::from_vec(name));
        }
    }
    // SAFETY: closes the stream once
    unsafe { libc::closedir(d) };
    out
}

/// Which fields of two snapshots differ (an assertion message that does not print whole
/// trees).
fn differences(a: &Snap, b: &Snap) -> Vec<String> {
    let mut v = Vec::new();
    macro_rules! field {
        ($f:ident) => {
            if a.$f != b.$f {
                v.push(format!("{}: {:?} vs {:?}", stringify!($f), a.$f, b.$f));
            }
        };
    }
    field!(mode);
    field!(uid);
    field!(gid);
    field!(nlink);
    field!(size);
    field!(rdev);
    field!(atime);
    field!(mtime);
    field!(ctime);
    field!(target);
    field!(ino);
    if a.xattrs != b.xattrs {
        v.push(format!(
            "xattr names {:?} vs {:?} (or values)",
            a.xattrs.keys().map(|k| String::from_utf8_lossy(k)).collect::<Vec<_>>(),
            b.xattrs.keys().map(|k| String::from_utf8_lossy(k)).collect::<Vec<_>>()
        ));
    }
    v
}

/// The data ranges of a file as SEEK_DATA/SEEK_HOLE give them.
fn data_ranges(p: &Path) -> Vec<(u64, u64)> {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::File::open(p).unwrap();
    let len = f.metadata().unwrap().len();
    let mut out = Vec::new();
    let mut pos = 0i64;
    while (pos as u64) < len {
        // SAFETY: lseek on an open descriptor
        let d = unsafe { libc::lseek(f.as_raw_fd(), pos, libc::SEEK_DATA) };
        if d < 0 {
            assert_eq!(errno(), libc::ENXIO);
            break;
        }
        // SAFETY: as above
        let h = unsafe { libc::lseek(f.as_raw_fd(), d, libc::SEEK_HOLE) };
        assert!(h > d);
        out.push((d as u64, h as u64));
        pos = h;
    }
    out
}

fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = ["squeeze", "pool", "record", "txg", "extent", "inode", "fuse", "zstd", "\n"];
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut v = Vec::with_capacity(len + 16);
    while v.len() < len {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.extend_from_slice(words[(s >> 33) as usize % words.len()].as_bytes());
        v.push(b' ');
    }
    v.truncate(len);
    v
}

fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// Build the tree every test copies: every kind of entry, with owners, modes, times and
/// xattrs set (the special nodes, foreign owners, trusted.* and security.* need root).
fn make_tree(root: &Path, as_root: bool) {
    let p = |rel: &str| root.join(rel);
    std::fs::create_dir_all(p("d/e/f")).unwrap();
    std::fs::create_dir(p("sticky")).unwrap();
    std::fs::set_permissions(p("sticky"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::create_dir(p("sgid")).unwrap();
    std::fs::set_permissions(p("sgid"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    // a deep chain
    let mut deep = p("deep");
    for i in 0..40 {
        deep = deep.join(format!("level{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom"), b"at the bottom").unwrap();

    std::fs::write(p("empty"), b"").unwrap();
    std::fs::write(p("small"), b"hello, squeezefs\n").unwrap();
    std::fs::write(p("d/text"), text(1, 300_000)).unwrap();
    std::fs::write(p("d/e/noise"), noise(2, 200_000)).unwrap();
    std::fs::write(p("d/e/f/tail"), text(3, 3 * RECORD as usize + 777)).unwrap();
    std::fs::write(p("zeros"), vec![0u8; 2 * RECORD as usize]).unwrap();
    // sparse: data in records 0 and 8, a hole between and after; 3 MiB long
    let sparse = std::fs::File::create(p("sparse")).unwrap();
    sparse.write_all_at(&text(4, RECORD as usize), 0).unwrap();
    sparse.write_all_at(&text(5, RECORD as usize), 8 * RECORD).unwrap();
    sparse.set_len(3 << 20).unwrap();
    drop(sparse);
    // a file that is one hole
    std::fs::File::create(p("allhole")).unwrap().set_len(5 << 20).unwrap();
    // a name of 255 bytes and a name that is not UTF-8
    std::fs::write(p(&"n".repeat(255)), b"long name").unwrap();
    let odd = root.join(std::ffi::OsStr::from_bytes(b"odd-\xff\xfe-name"));
    std::fs::write(&odd, b"odd").unwrap();
    // hard links: three names, two directories
    std::fs::write(p("linked"), text(6, 5000)).unwrap();
    std::fs::hard_link(p("linked"), p("d/linked2")).unwrap();
    std::fs::hard_link(p("linked"), p("d/e/linked3")).unwrap();
    // symlinks: relative, absolute, dangling, long target, to a directory
    std::os::unix::fs::symlink("small", p("rel-link")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", p("abs-link")).unwrap();
    std::os::unix::fs::symlink("no/such/target", p("dangling")).unwrap();
    std::os::unix::fs::symlink("x".repeat(2000), p("long-link")).unwrap();
    std::os::unix::fs::symlink("d/e", p("dir-link")).unwrap();
    // FIFO and socket
    let c = cstr(&p("fifo"));
    // SAFETY: valid path
    ok(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, "mkfifo");
    drop(std::os::unix::net::UnixListener::bind(p("socket")).unwrap());
    // modes
    for (name, mode) in [("suid", 0o4755), ("sgid-file", 0o2711), ("private", 0o600), ("nothing", 0o000)] {
        std::fs::write(p(name), name.as_bytes()).unwrap();
        std::fs::set_permissions(p(name), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // xattrs: user.* on files and directories, a compression property on a directory
    set_xattr(&p("small"), "user.note", b"a note");
    set_xattr(&p("small"), "user.empty", b"");
    set_xattr(&p("d"), "user.dir-note", &noise(7, 3000));
    set_xattr(&p("d/e"), "user.squeezefs.compression", b"zstd:9");
    if as_root {
        mknod(&p("null"), libc::S_IFCHR | 0o666, libc::makedev(1, 3));
        mknod(&p("loop"), libc::S_IFBLK | 0o660, libc::makedev(7, 200));
        mknod(&p("wide"), libc::S_IFCHR | 0o600, libc::makedev(4095, 1_048_575));
        set_xattr(&p("small"), "trusted.secret", b"root only");
        set_xattr(&p("d/text"), "security.squeezefs-test", b"lsm label");
        set_xattr(&p("suid"), "security.capability", &[1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        lchown(&p("small"), 1234, 5678);
        lchown(&p("rel-link"), 4321, 8765);
        lchown(&p("d/e"), 1000, 1000);
        lchown(&p("fifo"), 7, 8);
    }
    // times, with nanoseconds, one before 1970; directories last (creating entries moved them)
    set_times(&p("small"), (1_000_000_000, 123_456_789), (999_999_999, 987_654_321));
    set_times(&p("rel-link"), (1_111_111_111, 1), (1_222_222_222, 2));
    set_times(&p("fifo"), (-86_400, 500), (-3_600, 999_999_999));
    set_times(&p("sparse"), (1_500_000_000, 0), (1_400_000_000, 42));
    for d in ["d/e/f", "d/e", "d", "sticky", ""] {
        set_times(&p(d), (1_600_000_000, 7), (1_590_000_000, 8));
    }
}

/// A POSIX access ACL (`system.posix_acl_access`, version 2): owner rw, user 1234 r, group r,
/// mask r, other r.
fn acl_blob() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in
        [(1u16, 6u16, u32::MAX), (2, 4, 1234), (4, 4, u32::MAX), (0x10, 4, u32::MAX), (0x20, 4, u32::MAX)]
    {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// Compare two trees' snapshots: same names, same metadata, hard links as the same mapping.
fn compare(src: &BTreeMap<PathBuf, Snap>, dst: &BTreeMap<PathBuf, Snap>, owner: Option<(u32, u32)>) {
    let names = |t: &BTreeMap<PathBuf, Snap>| t.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(src), names(dst), "the trees hold different names");
    let mut ino_map: BTreeMap<u64, u64> = BTreeMap::new();
    let mut back: BTreeMap<u64, u64> = BTreeMap::new();
    for (rel, s) in src {
        let d = &dst[rel];
        let is_dir = s.mode & libc::S_IFMT == libc::S_IFDIR;
        let want_owner = owner.unwrap_or((s.uid, s.gid));
        assert_eq!(d.mode, s.mode, "{rel:?}: mode {:o} vs {:o}", d.mode, s.mode);
        assert_eq!((d.uid, d.gid), want_owner, "{rel:?}: owner");
        assert_eq!(d.size, s.size, "{rel:?}: size");
        assert_eq!(d.nlink, s.nlink, "{rel:?}: link count");
        assert_eq!(d.rdev, s.rdev, "{rel:?}: device number");
        assert_eq!(d.atime, s.atime, "{rel:?}: atime");
        assert_eq!(d.mtime, s.mtime, "{rel:?}: mtime");
        assert_eq!(d.ctime, s.ctime, "{rel:?}: ctime");
        assert!(d.xattrs == s.xattrs, "{rel:?}: xattrs differ: {:?}", differences(d, s));
        assert_eq!(d.target, s.target, "{rel:?}: symlink target");
        if !is_dir {
            assert_eq!(*ino_map.entry(s.ino).or_insert(d.ino), d.ino, "{rel:?}: hard link split");
            assert_eq!(*back.entry(d.ino).or_insert(s.ino), s.ino, "{rel:?}: hard links merged");
        }
    }
}

/// Regular files' content and data ranges.
fn compare_content(src_root: &Path, dst_root: &Path, src: &BTreeMap<PathBuf, Snap>) {
    for (rel, s) in src {
        if s.mode & libc::S_IFMT != libc::S_IFREG {
            continue;
        }
        let (a, b) = (src_root.join(rel), dst_root.join(rel));
        assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "{rel:?}: content differs");
    }
}

/// Holes: the pool keeps them at record granularity; the source's data ranges here are
/// whole records, so SEEK_DATA/SEEK_HOLE give the same positions.
fn compare_holes(src_root: &Path, dst_root: &Path) {
    for name in ["sparse", "allhole", "zeros"] {
        let (a, b) = (src_root.join(name), dst_root.join(name));
        let want = if name == "zeros" { vec![] } else { data_ranges(&a) };
        assert_eq!(data_ranges(&b), want, "{name}: data ranges");
        let blocks = std::fs::metadata(&b).unwrap().blocks();
        assert!(blocks * 512 <= 2 * RECORD, "{name}: {blocks} blocks stored for holes");
    }
}

/// fsck of the pool (which must be clean): the number of bundles it reports.
fn bundles_in(pool: &Path) -> u64 {
    let out = run(&["fsck", pool.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success() && text.contains("pool is clean"), "fsck: {text}{}", stderr(&out));
    let n = text.split(", ").find_map(|p| p.strip_suffix(" bundles")).unwrap_or_else(|| panic!("fsck said: {text}"));
    n.parse().unwrap()
}

fn mkfs_rootdir(pool: &Path, src: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["mkfs", pool.to_str().unwrap(), "--rootdir", src.to_str().unwrap(), "-q"];
    args.extend_from_slice(extra);
    run(&args)
}

fn mount(pool: &Path, mnt: &Path) -> Mount {
    mount_with(pool, mnt, "noatime")
}

fn mount_with(pool: &Path, mnt: &Path, opts: &str) -> Mount {
    std::fs::create_dir_all(mnt).unwrap();
    run_ok(&["mount", pool.to_str().unwrap(), mnt.to_str().unwrap(), "-o", opts]);
    Mount(mnt.to_path_buf())
}

/// The pool's files and their lengths.
fn pool_files(pool: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(pool)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len())
        })
        .filter(|(n, _)| n.starts_with("meta") || n.starts_with("data"))
        .collect()
}

/// Unmounted on drop, also when an assertion failed.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let out = run(&["umount", self.0.to_str().unwrap()]);
        if !out.status.success() {
            let c = cstr(&self.0);
            // SAFETY: valid path
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn rootdir_copy_mounted_matches_its_source() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("sqzroot").tempdir_in("/tmp").unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    make_tree(&src, true);
    // an attribute the pool does not hold (POSIX ACLs): reported, the file copied without it
    std::fs::write(src.join("with-acl"), b"acl").unwrap();
    set_xattr(&src.join("with-acl"), "system.posix_acl_access", &acl_blob());
    set_times(&src, (1_600_000_000, 7), (1_590_000_000, 8));
    // the snapshot's readlink sets symlink atimes (relatime); past the coarse clock tick of
    // their ctime, so that later readlinks leave them alone
    std::thread::sleep(std::time::Duration::from_millis(50));
    let before = tree(&src);
    let pool = dir.path().join("pool");
    let out = mkfs_rootdir(&pool, &src, &["--jobs", "3"]);
    assert!(out.status.success(), "mkfs failed: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("with-acl: extended attribute system.posix_acl_access"), "{err}");
    assert!(!err.contains("left out"), "{err}");
    assert_eq!(err.lines().count(), 1, "one problem expected: {err}");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("2 hard links") && summary.contains("1 reported above"), "{summary}");
    // the copy read the source without changing it (O_NOATIME as root)
    let after = tree(&src);
    assert_eq!(after.len(), before.len());
    for (rel, b) in &before {
        let d = differences(&after[rel], b);
        assert!(d.is_empty(), "{rel:?} changed in the source: {d:?}");
    }
    // the small files went into bundles
    assert!(bundles_in(&pool) > 0, "no bundles");

    // the metadata store is sealed
    let files = pool_files(&pool);
    assert!(files.contains_key("meta.seal") && !files.contains_key("meta.copy0"), "{files:?}");

    let mut want = before.clone();
    want.get_mut(Path::new("with-acl")).unwrap().xattrs.clear();
    let mnt = dir.path().join("mnt");
    let check_with = |mnt: &Path, want: &BTreeMap<PathBuf, Snap>| {
        let got = tree(mnt);
        compare(want, &got, None);
        compare_content(&src, mnt, want);
        compare_holes(&src, mnt);
        // the device nodes decode to the same numbers
        let wide = std::fs::symlink_metadata(mnt.join("wide")).unwrap().rdev();
        assert_eq!((libc::major(wide), libc::minor(wide)), (4095, 1_048_575));
    };
    let check = |mnt: &Path| check_with(mnt, &want);
    // read-only: served from the seal, the pool left as it is
    {
        let _m = mount_with(&pool, &mnt, "ro,noatime");
        check(&mnt);
    }
    assert_eq!(pool_files(&pool), files, "a read-only mount changed the pool");
    // read-write: unsealed, and it takes writes that outlive a remount
    {
        let _m = mount(&pool, &mnt);
        let now = pool_files(&pool);
        assert!(now.contains_key("meta.copy0") && !now.contains_key("meta.seal"), "{now:?}");
        check(&mnt);
        std::fs::write(mnt.join("written-after"), b"after unsealing").unwrap();
    }
    let _m = mount(&pool, &mnt);
    assert_eq!(std::fs::read(mnt.join("written-after")).unwrap(), b"after unsealing");
    std::fs::remove_file(mnt.join("written-after")).unwrap();
    // the write and the removal changed the root's mtime and ctime, and only those
    let mut changed = want.clone();
    let now = snap(&mnt);
    let root = changed.get_mut(Path::new("")).unwrap();
    (root.mtime, root.ctime) = (now.mtime, now.ctime);
    check_with(&mnt, &changed);
}

/// `--owner me` as root makes root the owner of everything; `--compress auto` is accepted
/// (and compresses: data is stored in fewer bytes than it has).
#[test]
fn rootdir_owner_me_as_root_and_compress_auto() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("sqzroot").tempdir_in("/tmp").unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    make_tree(&src, true);
    set_times(&src, (1_600_000_000, 7), (1_590_000_000, 8));
    std::thread::sleep(std::time::Duration::from_millis(50));
    let before = tree(&src);
    let pool = dir.path().join("pool");
    let out = mkfs_rootdir(&pool, &src, &["--owner", "me", "--compress", "auto"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains(" auto in "), "{summary}");
    assert!(bundles_in(&pool) > 0);
    let mnt = dir.path().join("mnt");
    let _m = mount(&pool, &mnt);
    let got = tree(&mnt);
    compare(&before, &got, Some((0, 0)));
    compare_content(&src, &mnt, &before);
    compare_holes(&src, &mnt);
    let text = std::fs::metadata(mnt.join("d/text")).unwrap();
    assert!(text.blocks() * 512 < text.len() / 2, "d/text stored in {} blocks", text.blocks());
}

/// The uid and gid the unprivileged runs use.
const USER: u32 = 1000;

/// Run squeezefs as `USER` with no supplementary groups and no capabilities.
fn run_as_user(args: &[&str]) -> std::process::Output {
    let uid = USER.to_string();
    Command::new("setpriv")
        .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "--inh-caps=-all", BIN])
        .args(args)
        .output()
        .expect("running setpriv")
}

fn chown_tree(root: &Path, uid: u32) {
    lchown(root, uid, uid);
    for e in std::fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            chown_tree(&p, uid);
        } else {
            lchown(&p, uid, uid);
        }
    }
}

#[test]
fn rootdir_without_root_stores_the_invoking_user_as_owner() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("sqzroot").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    make_tree(&src, false);
    chown_tree(&src, USER);
    // a root-owned file anyone may read, and one only root may read
    std::fs::write(src.join("roots"), b"root's, world-readable").unwrap();
    std::fs::write(src.join("secret"), b"root's only").unwrap();
    std::fs::set_permissions(src.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    set_times(&src, (1_600_000_000, 7), (1_590_000_000, 8));
    let before = tree(&src);

    let pool = dir.path().join("pool");
    let out = run_as_user(&["mkfs", pool.to_str().unwrap(), "--rootdir", src.to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "mkfs as uid {USER} failed: {}", stderr(&out));
    let err = stderr(&out);
    for name in ["secret", "nothing"] {
        assert!(err.contains(&format!("{name}: cannot read")) && err.contains("left out"), "{name}: {err}");
    }
    assert_eq!(err.lines().count(), 2, "{err}");
    for f in ["meta.seal", "data.0"] {
        assert_eq!(std::fs::metadata(pool.join(f)).unwrap().uid(), USER, "{f} is not the user's");
    }
    run_ok(&["fsck", pool.to_str().unwrap()]);
    let mut want = before.clone();
    want.remove(Path::new("secret"));
    want.remove(Path::new("nothing"));
    {
        let mnt = dir.path().join("mnt");
        let _m = mount(&pool, &mnt);
        let got = tree(&mnt);
        // every entry is the invoking user's, root's file included
        compare(&want, &got, Some((USER, USER)));
        compare_content(&src, &mnt, &want);
        compare_holes(&src, &mnt);
    }
    // unsealed by root's mount, the store is still the user's
    for copy in ["meta.copy0", "meta.copy1"] {
        let m = std::fs::metadata(pool.join(copy)).unwrap();
        assert_eq!((m.uid(), m.gid()), (USER, USER), "{copy} after unsealing");
    }

    // --owner keep as a user: the source's owners, root's included, no chown needed
    let pool2 = dir.path().join("pool2");
    let out =
        run_as_user(&["mkfs", pool2.to_str().unwrap(), "--rootdir", src.to_str().unwrap(), "-q", "--owner", "keep"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mnt2 = dir.path().join("mnt2");
    let _m = mount(&pool2, &mnt2);
    let roots = std::fs::metadata(mnt2.join("roots")).unwrap();
    assert_eq!((roots.uid(), roots.gid()), (0, 0));
    assert_eq!(std::fs::metadata(mnt2.join("small")).unwrap().uid(), USER);
}

#[test]
fn rootdir_strict_stops_at_the_first_error_and_leaves_a_consistent_pool() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("sqzroot").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..20 {
        std::fs::write(src.join(format!("a{i:02}")), text(i, 10_000)).unwrap();
    }
    std::fs::write(src.join("m-unreadable"), b"x").unwrap();
    std::fs::set_permissions(src.join("m-unreadable"), std::fs::Permissions::from_mode(0o000)).unwrap();
    for i in 0..20 {
        std::fs::write(src.join(format!("z{i:02}")), text(100 + i, 10_000)).unwrap();
    }
    chown_tree(&src, USER);
    let pool = dir.path().join("pool");
    let out = run_as_user(&["mkfs", pool.to_str().unwrap(), "--rootdir", src.to_str().unwrap(), "-q", "--strict"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("squeezefs: ") && err.contains("--strict") && err.contains("m-unreadable"), "{err}");
    // consistent, holding what came before the error, and nothing after it
    run_ok(&["fsck", pool.to_str().unwrap()]);
    let mnt = dir.path().join("mnt");
    let _m = mount(&pool, &mnt);
    let names: Vec<String> =
        std::fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 20, "{names:?}");
    for i in 0..20 {
        assert_eq!(std::fs::read(mnt.join(format!("a{i:02}"))).unwrap(), text(i, 10_000));
    }
}

/// Bad input: one line naming the problem, status 1, and no pool left behind.
#[test]
fn rootdir_bad_input_is_refused_before_the_pool_exists() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let file = src.join("f");
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    let cases: [(Vec<&str>, &[&str]); 4] = [
        (vec!["--rootdir", "/no/such/dir"], &["--rootdir /no/such/dir", "no such directory"]),
        (vec!["--rootdir", file.to_str().unwrap()], &["not a directory"]),
        (vec!["--rootdir", src.to_str().unwrap(), "--compress", "zstd:99"], &["--compress zstd:99", "accepted forms"]),
        (vec!["--rootdir", src.to_str().unwrap(), "--jobs", "0"], &["--jobs 0", "at least 1"]),
    ];
    for (extra, phrases) in cases {
        let mut args = vec!["mkfs", p];
        args.extend(extra.iter().copied());
        let out = run(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("squeezefs: "), "{err}");
        for ph in phrases {
            assert!(err.contains(ph), "{ph:?} missing: {err}");
        }
        assert!(!pool.exists(), "{args:?} left a pool behind");
    }
    // an existing pool needs --force, with --rootdir as without
    run_ok(&["mkfs", p]);
    let out = run(&["mkfs", p, "--rootdir", src.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    let out = run(&["mkfs", p, "--rootdir", src.to_str().unwrap(), "--force", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // the options of the copy need --rootdir (clap: usage error)
    let out = run(&["mkfs", dir.path().join("other").to_str().unwrap(), "--compress", "zstd:3"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A file growing while it is copied is reported and kept as read; --strict fails on it.
#[test]
fn rootdir_reports_a_file_that_changes_while_copied() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let grow = src.join("growing");
    std::fs::write(&grow, text(9, 64 << 20)).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (grow, stop) = (grow.clone(), stop.clone());
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new().append(true).open(&grow).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                use std::io::Write;
                (&f).write_all(b"more ").unwrap();
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let pool = dir.path().join("pool");
    let out = mkfs_rootdir(&pool, &src, &["--compress", "lz4"]);
    let strict = mkfs_rootdir(&dir.path().join("pool2"), &src, &["--compress", "lz4", "--strict"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("growing: changed while it was copied"), "{}", stderr(&out));
    assert_eq!(strict.status.code(), Some(1));
    assert!(stderr(&strict).contains("growing: changed while it was copied"), "{}", stderr(&strict));
    run_ok(&["fsck", pool.to_str().unwrap()]);
}

/// A copy killed half-way (SIGKILL: no last commit) leaves a pool that opens, passes fsck
/// and scrub, and mounts.
#[test]
fn rootdir_copy_killed_midway_leaves_a_pool_that_passes_fsck() {
    let dir = tempfile::Builder::new().prefix("sqzroot").tempdir_in("/tmp").unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..48u64 {
        let sub = src.join(format!("dir{}", i % 6));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i}")), text(i, 1 << 20)).unwrap();
    }
    let pool = dir.path().join("pool");
    // zstd:19 on one worker: slow enough to be caught half-way
    let mut child = Command::new(BIN)
        .args(["mkfs", pool.to_str().unwrap(), "--rootdir", src.to_str().unwrap(), "-q"])
        .args(["--compress", "zstd:19", "--jobs", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // wait until records reach the device, then a little more, then kill
    let t0 = std::time::Instant::now();
    while std::fs::metadata(pool.join("data.0")).map_or(0, |m| m.len()) < (1 << 20) {
        assert!(t0.elapsed() < std::time::Duration::from_secs(120), "no data written");
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signalling our own child
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let status = child.wait().unwrap();
    assert!(!status.success(), "the copy ended before it was killed; make it slower");
    run_ok(&["fsck", pool.to_str().unwrap()]);
    run_ok(&["scrub", pool.to_str().unwrap()]);
    if can_mount() {
        let mnt = dir.path().join("mnt");
        let _m = mount(&pool, &mnt);
        // whatever got in reads back without errors
        for e in walk_files(&mnt) {
            std::fs::read(&e).unwrap();
        }
    }
}

fn walk_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `mkfs --rootdir --recordsize 1M` of a tree whose source carries `recordsize` properties
/// (a directory's `user.squeezefs.recordsize=16K`, a file's own `64K`): files without a
/// property get the pool's 1 MiB records, the others their own; small files and short
/// tails are bundled by their own record size (a 16K-record file's full records never),
/// every bundle stays within the pool's bundle size (twice its record size, the default);
/// the pool is fsck- and scrub-clean
/// after the store's rebuild and reads back the source, also through a mount.
#[test]
fn rootdir_recordsize_sets_the_pools_and_source_properties_set_their_own() {
    use squeezefs_pipeline::{Engine, OpenOptions, StoredRecord, ROOT_INO};
    let dir = tempfile::Builder::new().prefix("sqzroot").tempdir_in("/tmp").unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("db")).unwrap();
    set_xattr(&src.join("db"), "user.squeezefs.recordsize", b"16K");
    // (path, length, the record size it must get)
    let files: [(&str, usize, u32); 6] = [
        ("big.log", (3 << 20) + 300_000, 1 << 20),
        ("small-a", 2000, 1 << 20),
        ("small-b", 3000, 1 << 20),
        ("db/table", 200 << 10, 16 << 10),
        ("db/tiny", 5000, 16 << 10),
        ("db/mid", 150 << 10, 64 << 10),
    ];
    for (i, (path, len, _)) in files.iter().enumerate() {
        std::fs::write(src.join(path), text(40 + i as u64, *len)).unwrap();
    }
    set_xattr(&src.join("db/mid"), "user.squeezefs.recordsize", b"64K");
    let pool = dir.path().join("pool");
    let out = mkfs_rootdir(&pool, &src, &["--recordsize", "1M", "--compress", "zstd:3", "--jobs", "2"]);
    assert!(out.status.success(), "mkfs failed: {}", stderr(&out));
    assert!(bundles_in(&pool) > 0, "no bundles");
    run_ok(&["scrub", pool.to_str().unwrap()]);
    {
        let e = Engine::open(&pool, &OpenOptions { read_only: true, ..OpenOptions::default() }).unwrap();
        assert_eq!((e.info().recordsize, e.info().bundle_size), (1 << 20, 2 << 20));
        for (id, b) in e.bundles().unwrap() {
            assert!(b.logical <= 2 << 20, "bundle {id}: {} bytes", b.logical);
        }
        let bundled = |x: &squeezefs_pipeline::ExtentPtr| matches!(x.stored, StoredRecord::Bundled(_));
        for (i, (path, len, rs)) in files.iter().enumerate() {
            let ino = path.split('/').fold(ROOT_INO, |d, n| e.lookup(d, n.as_bytes()).unwrap().unwrap().0);
            assert_eq!(e.record_size(ino).unwrap(), *rs, "{path}");
            let ext = e.extents(ino).unwrap();
            let offs: Vec<u64> = ext.iter().map(|(o, _)| *o).collect();
            let want_offs: Vec<u64> = (0..(*len as u64).div_ceil(u64::from(*rs))).map(|k| k * u64::from(*rs)).collect();
            assert_eq!(offs, want_offs, "{path}");
            // whole records on their own; a short tail below the pool's record size bundled
            let (last, whole) = ext.split_last().unwrap();
            assert!(whole.iter().all(|(_, x)| !bundled(x)), "{path}: a full record in a bundle");
            assert!(bundled(&last.1), "{path}: its short last record is not bundled");
            let mut got = vec![0u8; *len];
            assert_eq!(e.read(ino, 0, &mut got).unwrap(), *len);
            assert!(got == text(40 + i as u64, *len), "{path}: contents");
        }
        let r = e.fsck().unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
    }
    if can_mount() {
        let mnt = dir.path().join("mnt");
        let _m = mount(&pool, &mnt);
        for (i, (path, len, _)) in files.iter().enumerate() {
            assert!(std::fs::read(mnt.join(path)).unwrap() == text(40 + i as u64, *len), "{path} through the mount");
        }
        let p = run(&["prop", "get", mnt.join("db/table").to_str().unwrap(), "recordsize"]);
        assert!(String::from_utf8_lossy(&p.stdout).contains("16K"), "{}", String::from_utf8_lossy(&p.stdout));
    }
}

/// `--no-seal` keeps the store (`meta.copy0`, `meta.copy1`); `seal` and `unseal` turn one into the other (refused while
/// the pool is mounted); a damaged `meta.seal` makes fsck fail naming the file and the check.
#[test]
fn rootdir_seal_no_seal_and_a_damaged_seal() {
    let dir = tempfile::Builder::new().prefix("sqzroot").tempdir_in("/tmp").unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..30u64 {
        std::fs::write(src.join(format!("f{i:02}")), text(i, 3000 + 100 * i as usize)).unwrap();
    }
    let pool = dir.path().join("pool");
    let out = mkfs_rootdir(&pool, &src, &["--no-seal"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let files = pool_files(&pool);
    assert!(files.contains_key("meta.copy0") && !files.contains_key("meta.seal"), "{files:?}");
    let p = pool.to_str().unwrap();

    let out = run(&["seal", p]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("sealed pool"), "{said}{}", stderr(&out));
    let files = pool_files(&pool);
    assert!(files.contains_key("meta.seal") && !files.contains_key("meta.copy0"), "{files:?}");
    assert!(String::from_utf8_lossy(&run(&["seal", p]).stdout).contains("sealed already"));
    run_ok(&["fsck", p]);
    assert_eq!(pool_files(&pool), files, "fsck changed a sealed pool");

    if can_mount() {
        let mnt = dir.path().join("mnt");
        let _m = mount(&pool, &mnt);
        let out = run(&["seal", p]);
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("already open"), "{}", stderr(&out));
        assert_eq!(std::fs::read(mnt.join("f07")).unwrap(), text(7, 3700));
    } else {
        run_ok(&["unseal", p]);
    }
    let files = pool_files(&pool);
    assert!(files.contains_key("meta.copy0") && !files.contains_key("meta.seal"), "{files:?}");
    run_ok(&["seal", p]);

    let seal = pool.join("meta.seal");
    let mut bytes = std::fs::read(&seal).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x40;
    std::fs::write(&seal, &bytes).unwrap();
    for cmd in ["fsck", "unseal"] {
        let out = run(&[cmd, p]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        let err = stderr(&out);
        assert!(
            err.contains(seal.to_str().unwrap()) && err.contains("checksum of the compressed body"),
            "{cmd}: {err}"
        );
    }
}

/// `mkfs --rootdir --recordsize 16K --bundle-size 64K`: the small files of a tree share
/// bundles longer than a record and within the bundle size; through a mount every file
/// reads back, one is changed in place (copy on write out of its bundle), one cut and one
/// deleted; the pool stays fsck- and scrub-clean and reads back after the unmount.
#[test]
fn rootdir_bundle_size_bounds_the_bundles_and_the_mount_changes_them() {
    use squeezefs_pipeline::{Engine, OpenOptions};
    let dir = tempfile::Builder::new().prefix("sqzroot").tempdir_in("/tmp").unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    let mut want: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for i in 0..60u64 {
        let path = format!("d/f{i:02}");
        let data = text(500 + i, 700 + (i as usize * 331) % 9000);
        std::fs::write(src.join(&path), &data).unwrap();
        want.insert(path, data);
    }
    let big = text(600, (40 << 10) + 3000);
    std::fs::write(src.join("big"), &big).unwrap();
    want.insert("big".into(), big);
    let pool = dir.path().join("pool");
    let out = mkfs_rootdir(&pool, &src, &["--recordsize", "16K", "--bundle-size", "64K", "--jobs", "2"]);
    assert!(out.status.success(), "mkfs failed: {}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("bundles up to 64 KiB"));
    assert!(bundles_in(&pool) >= 2, "too few bundles");
    {
        let e = Engine::open(&pool, &OpenOptions { read_only: true, ..OpenOptions::default() }).unwrap();
        assert_eq!((e.info().recordsize, e.info().bundle_size), (16 << 10, 64 << 10));
        let b = e.bundles().unwrap();
        assert!(b.iter().all(|(_, b)| b.logical <= 64 << 10), "a bundle past the bundle size");
        assert!(b.iter().any(|(_, b)| b.logical > 16 << 10), "no bundle longer than a record");
    }
    run_ok(&["scrub", pool.to_str().unwrap()]);
    if can_mount() {
        let mnt = dir.path().join("mnt");
        {
            let _m = mount(&pool, &mnt);
            for (path, data) in &want {
                assert!(std::fs::read(mnt.join(path)).unwrap() == *data, "{path} through the mount");
            }
            let f = std::fs::OpenOptions::new().write(true).open(mnt.join("d/f10")).unwrap();
            f.write_all_at(b"CHANGED THROUGH THE MOUNT", 300).unwrap();
            f.sync_all().unwrap();
            want.get_mut("d/f10").unwrap()[300..325].copy_from_slice(b"CHANGED THROUGH THE MOUNT");
            std::fs::OpenOptions::new().write(true).open(mnt.join("d/f20")).unwrap().set_len(100).unwrap();
            want.get_mut("d/f20").unwrap().truncate(100);
            std::fs::remove_file(mnt.join("d/f30")).unwrap();
            want.remove("d/f30");
            for (path, data) in &want {
                assert!(std::fs::read(mnt.join(path)).unwrap() == *data, "{path} after the changes");
            }
        }
        assert!(bundles_in(&pool) >= 2);
        run_ok(&["scrub", pool.to_str().unwrap()]);
        let _m = mount(&pool, &mnt);
        for (path, data) in &want {
            assert!(std::fs::read(mnt.join(path)).unwrap() == *data, "{path} after a remount");
        }
    }
}
