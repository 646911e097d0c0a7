//! Properties and their inheritance on a real engine in a temporary pool (no mounting).
use crate::ops::fileattr::{FS_COMPR_FL, FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_NOCOMP_FL};
use crate::props::{Prop, Source};
use crate::tests::new_fs;
use crate::*;
use squeezefs_codec::Algorithm;
use squeezefs_pipeline::{MkfsOptions, OpenOptions};

fn root() -> Creds {
    Creds::root()
}

fn errno<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    r.expect_err("expected an error").errno()
}

fn set(fs: &Fs, ino: Ino, prop: Prop, value: &str) -> Result<()> {
    fs.setxattr(&root(), ino, prop.xattr().as_bytes(), value.as_bytes(), 0)
}

fn local(fs: &Fs, ino: Ino, prop: Prop) -> Option<String> {
    fs.getxattr(&root(), ino, prop.xattr().as_bytes()).ok().map(|v| String::from_utf8(v).unwrap())
}

fn eff(fs: &Fs, ino: Ino, prop: Prop) -> (String, Source) {
    let (v, s) = fs.effective(ino).unwrap().get(prop);
    (v.to_string(), s)
}

fn mkdir(fs: &Fs, parent: Ino, name: &str) -> Ino {
    fs.mkdir(&root(), parent, name.as_bytes(), 0o755).unwrap().ino
}

fn create(fs: &Fs, parent: Ino, name: &str) -> Ino {
    let (a, fh) = fs.create(&root(), parent, name.as_bytes(), 0o644, libc::O_RDWR).unwrap();
    fs.release(fh).unwrap();
    a.ino
}

/// Text that compresses at every level.
fn text(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    let mut i = 0u64;
    while v.len() < n {
        v.extend_from_slice(format!("line {i} of some text, {} and more\n", i * 7919 % 1013).as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

fn write(fs: &Fs, ino: Ino, data: &[u8]) {
    fs.write(&root(), ino, 0, data, false).unwrap();
}

/// (algorithm, level) of every committed record of `ino`.
fn codecs(fs: &Fs, ino: Ino) -> Vec<(Algorithm, i32)> {
    fs.sync().unwrap();
    let mut v: Vec<_> = fs.engine().usage(ino).unwrap().into_iter().map(|r| (r.alg, r.level)).collect();
    v.sort_by_key(|&(a, l)| (a.id(), l));
    v
}

fn zstd(level: i32) -> Vec<(Algorithm, i32)> {
    vec![(Algorithm::Zstd, level)]
}

#[test]
fn inheritance_through_three_levels_with_a_file_override() {
    let (_d, fs) = new_fs();
    let a = mkdir(&fs, ROOT_INO, "a");
    let b = mkdir(&fs, a, "b");
    let c = mkdir(&fs, b, "c");
    set(&fs, a, Prop::Compression, "zstd-9").unwrap();
    set(&fs, b, Prop::CompressForce, "yes").unwrap();
    let f = create(&fs, c, "f");
    let g = create(&fs, c, "g");
    assert_eq!(eff(&fs, f, Prop::Compression), ("zstd:9".into(), Source::Inherited(a)));
    assert_eq!(eff(&fs, f, Prop::CompressForce), ("on".into(), Source::Inherited(b)));
    assert_eq!(eff(&fs, b, Prop::CompressForce), ("on".into(), Source::Local));
    assert_eq!(eff(&fs, ROOT_INO, Prop::Compression), ("none".into(), Source::Default));
    assert_eq!(eff(&fs, f, Prop::Recordsize), ("128K".into(), Source::Default));
    assert_eq!(eff(&fs, f, Prop::Qos), ("none".into(), Source::Default));
    set(&fs, g, Prop::Compression, "gzip-4").unwrap();
    assert_eq!(eff(&fs, g, Prop::Compression), ("zlib:4".into(), Source::Local));
    write(&fs, f, &text(300_000));
    write(&fs, g, &text(300_000));
    assert_eq!(codecs(&fs, f), zstd(9));
    assert_eq!(codecs(&fs, g), vec![(Algorithm::Deflate, 4)]);
    // stored canonically, listed like any attribute; the virtual table is never listed
    assert_eq!(local(&fs, a, Prop::Compression).as_deref(), Some("zstd:9"));
    assert_eq!(local(&fs, b, Prop::CompressForce).as_deref(), Some("on"));
    let names = fs.listxattr(&root(), a).unwrap();
    assert_eq!(names, vec![b"user.squeezefs.compression".to_vec()]);
    let table = fs.getxattr(&root(), f, xattr_names::EFFECTIVE.as_bytes()).unwrap();
    let rows = props::decode_effective(&table).unwrap();
    assert_eq!(rows[0], (Prop::Compression, "zstd:9".to_string(), Source::Inherited(a)));
    assert!(!fs.listxattr(&root(), f).unwrap().iter().any(|n| n == xattr_names::EFFECTIVE.as_bytes()));
}

#[test]
fn a_directory_change_applies_to_writes_below_it_from_then_on() {
    let (_d, fs) = new_fs();
    let a = mkdir(&fs, ROOT_INO, "a");
    let b = mkdir(&fs, a, "b");
    let f = create(&fs, b, "f");
    let g = create(&fs, b, "g");
    let data = text(400_000);
    write(&fs, f, &data);
    assert_eq!(eff(&fs, f, Prop::Compression).0, "none");
    // written before the change, not committed yet: keeps the compression of its write
    set(&fs, a, Prop::Compression, "zstd:5").unwrap();
    assert_eq!(eff(&fs, f, Prop::Compression), ("zstd:5".into(), Source::Inherited(a)));
    write(&fs, g, &data);
    assert_eq!(codecs(&fs, f), vec![(Algorithm::None, 0)]);
    assert_eq!(codecs(&fs, g), zstd(5));
    // new writes use a new value at once
    set(&fs, a, Prop::Compression, "lz4").unwrap();
    write(&fs, f, &data);
    assert_eq!(codecs(&fs, f), vec![(Algorithm::Lz4, 1)]);
    // dropping the value: the file inherits from the mount again
    fs.removexattr(&root(), a, Prop::Compression.xattr().as_bytes()).unwrap();
    assert_eq!(eff(&fs, f, Prop::Compression), ("none".into(), Source::Default));
    write(&fs, f, &data);
    assert_eq!(codecs(&fs, f), vec![(Algorithm::None, 0)]);
    assert_eq!(fs.read(f, 0, data.len() as u32).unwrap(), data);
}

#[test]
fn a_moved_file_and_a_moved_tree_inherit_from_their_new_place() {
    let (_d, fs) = new_fs();
    let fast = mkdir(&fs, ROOT_INO, "fast");
    let strong = mkdir(&fs, ROOT_INO, "strong");
    set(&fs, fast, Prop::Compression, "lz4").unwrap();
    set(&fs, strong, Prop::Compression, "zstd:12").unwrap();
    let f = create(&fs, fast, "f");
    let t = mkdir(&fs, fast, "t");
    let t2 = mkdir(&fs, t, "t2");
    let g = create(&fs, t2, "g");
    assert_eq!(eff(&fs, f, Prop::Compression).0, "lz4");
    assert_eq!(eff(&fs, g, Prop::Compression).0, "lz4");
    let data = text(200_000);
    write(&fs, f, &data);
    // moved after the write (committed or not, the data keeps its compression); written again
    fs.rename(&root(), fast, b"f", strong, b"f", 0).unwrap();
    assert_eq!(eff(&fs, f, Prop::Compression), ("zstd:12".into(), Source::Inherited(strong)));
    assert_eq!(codecs(&fs, f), vec![(Algorithm::Lz4, 1)]);
    write(&fs, f, &data);
    assert_eq!(codecs(&fs, f), zstd(12));
    fs.rename(&root(), fast, b"t", strong, b"t", 0).unwrap();
    assert_eq!(eff(&fs, g, Prop::Compression), ("zstd:12".into(), Source::Inherited(strong)));
    assert_eq!(eff(&fs, t2, Prop::Compression), ("zstd:12".into(), Source::Inherited(strong)));
    write(&fs, g, &data);
    assert_eq!(codecs(&fs, g), zstd(12));
    // an exchange moves both sides
    let h = create(&fs, fast, "h");
    fs.rename(&root(), strong, b"t", fast, b"h", crate::ops::namespace::RENAME_EXCHANGE).unwrap();
    assert_eq!(eff(&fs, g, Prop::Compression).0, "lz4");
    assert_eq!(eff(&fs, h, Prop::Compression).0, "zstd:12");
}

#[test]
fn a_hard_link_inherits_through_the_name_last_reached() {
    let (_d, fs) = new_fs();
    let x = mkdir(&fs, ROOT_INO, "x");
    let y = mkdir(&fs, ROOT_INO, "y");
    set(&fs, x, Prop::Compression, "zstd:2").unwrap();
    set(&fs, y, Prop::Compression, "zstd:4").unwrap();
    let f = create(&fs, x, "f");
    assert_eq!(eff(&fs, f, Prop::Compression).0, "zstd:2");
    fs.link(&root(), f, y, b"f").unwrap();
    assert_eq!(eff(&fs, f, Prop::Compression).0, "zstd:4");
    fs.lookup(&root(), x, b"f").unwrap();
    assert_eq!(eff(&fs, f, Prop::Compression).0, "zstd:2");
    // its own value wins whatever the name
    set(&fs, f, Prop::Compression, "zstd:7").unwrap();
    fs.lookup(&root(), y, b"f").unwrap();
    assert_eq!(eff(&fs, f, Prop::Compression), ("zstd:7".into(), Source::Local));
}

#[test]
fn bad_values_names_and_kinds_are_refused_and_the_old_value_stays() {
    let (_d, fs) = new_fs();
    let d = mkdir(&fs, ROOT_INO, "d");
    let f = create(&fs, d, "f");
    set(&fs, d, Prop::Compression, "zstd:3").unwrap();
    set(&fs, d, Prop::CompressForce, "on").unwrap();
    set(&fs, d, Prop::Recordsize, "64K").unwrap();
    set(&fs, d, Prop::BackgroundCompression, "zstd:15").unwrap();
    set(&fs, d, Prop::Qos, "qos-50").unwrap();
    let before: Vec<_> = props::ALL.iter().map(|&p| local(&fs, d, p)).collect();
    assert_eq!(before[4].as_deref(), Some("50M"));
    let bad = [
        (Prop::Compression, "zstd:42"),
        (Prop::Compression, "brotli"),
        (Prop::Compression, ""),
        (Prop::Compression, "zstd:"),
        (Prop::CompressForce, "sometimes"),
        (Prop::Recordsize, "3K"),
        (Prop::Recordsize, "2M"),
        (Prop::Recordsize, "big"),
        (Prop::BackgroundCompression, "auto"),
        (Prop::BackgroundCompression, "qos:10"),
        (Prop::Qos, "fast"),
        (Prop::Qos, "0"),
        (Prop::Qos, "5X"),
    ];
    for (p, v) in bad {
        assert_eq!(errno(set(&fs, d, p, v)), libc::EINVAL, "{p}={v}");
    }
    assert_eq!(errno(fs.setxattr(&root(), d, Prop::Compression.xattr().as_bytes(), b"\xff\xfe", 0)), libc::EINVAL);
    assert_eq!(errno(fs.setxattr(&root(), d, b"user.squeezefs.compresion", b"lz4", 0)), libc::EINVAL);
    assert_eq!(errno(fs.setxattr(&root(), d, b"user.squeezefs.effective", b"x", 0)), libc::EPERM);
    assert_eq!(errno(fs.setxattr(&root(), d, b"user.squeezefs.usage", b"x", 0)), libc::EPERM);
    // the wrong kind of inode: qos on a file; any property on a symlink (user.* is for
    // files and directories only, as the VFS has it)
    assert_eq!(errno(set(&fs, f, Prop::Qos, "10M")), libc::EINVAL);
    let l = fs.symlink(&root(), d, b"l", b"f").unwrap();
    assert_eq!(errno(set(&fs, l.ino, Prop::Recordsize, "16K")), libc::EPERM);
    let after: Vec<_> = props::ALL.iter().map(|&p| local(&fs, d, p)).collect();
    assert_eq!(before, after);
    assert_eq!(local(&fs, f, Prop::Qos), None);
    // qos=none clears; the directory then shares its parent's (here: none)
    set(&fs, d, Prop::Qos, "none").unwrap();
    assert_eq!(local(&fs, d, Prop::Qos), None);
    assert_eq!(eff(&fs, d, Prop::Qos), ("none".into(), Source::Default));
    set(&fs, d, Prop::Qos, "none").unwrap();
    // other users need write permission, as for any user.* attribute
    let u = Creds::with_groups(1000, 1000, vec![]);
    assert_eq!(errno(fs.setxattr(&u, d, Prop::Compression.xattr().as_bytes(), b"lz4", 0)), libc::EACCES);
}

#[test]
fn properties_survive_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let (d, f) = {
        let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).unwrap(), FsConfig::default()).unwrap();
        let d = mkdir(&fs, ROOT_INO, "d");
        let f = create(&fs, d, "f");
        set(&fs, d, Prop::Compression, "zlib:7").unwrap();
        set(&fs, f, Prop::CompressForce, "on").unwrap();
        fs.shutdown().unwrap();
        (d, f)
    };
    let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).unwrap(), FsConfig::default()).unwrap();
    assert_eq!(fs.lookup(&root(), ROOT_INO, b"d").unwrap().ino, d);
    assert_eq!(fs.lookup(&root(), d, b"f").unwrap().ino, f);
    assert_eq!(eff(&fs, f, Prop::Compression), ("zlib:7".into(), Source::Inherited(d)));
    assert_eq!(eff(&fs, f, Prop::CompressForce), ("on".into(), Source::Local));
    write(&fs, f, &text(200_000));
    assert_eq!(codecs(&fs, f), vec![(Algorithm::Deflate, 7)]);
}

#[test]
fn mount_option_and_remount_are_the_base_of_inheritance() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let c = Compression { spec: "lz4".parse().unwrap(), force: false };
    let opts = OpenOptions { compression: c.spec, ..OpenOptions::default() };
    let cfg = FsConfig { compression: Some(c), ..FsConfig::default() };
    let fs = Fs::new(Engine::open(&pool, &opts).unwrap(), cfg).unwrap();
    let d = mkdir(&fs, ROOT_INO, "d");
    let f = create(&fs, d, "f");
    assert_eq!(eff(&fs, f, Prop::Compression), ("lz4".into(), Source::Mount));
    assert_eq!(eff(&fs, f, Prop::CompressForce), ("off".into(), Source::Mount));
    set(&fs, d, Prop::CompressForce, "on").unwrap();
    assert_eq!(fs.resolve(f).unwrap().policy, Some(("lz4".parse().unwrap(), true)));
    fs.setxattr(&root(), ROOT_INO, xattr_names::REMOUNT.as_bytes(), b"compress=zstd:1", 0).unwrap();
    assert_eq!(eff(&fs, f, Prop::Compression), ("zstd:1".into(), Source::Mount));
    assert_eq!(fs.resolve(f).unwrap().policy, Some(("zstd:1".parse().unwrap(), true)));
    write(&fs, f, &text(200_000));
    assert_eq!(codecs(&fs, f), zstd(1));
}

#[test]
fn a_write_uses_the_cached_resolution() {
    let (_d, fs) = new_fs();
    let mut dir = ROOT_INO;
    for i in 0..10 {
        dir = mkdir(&fs, dir, &format!("d{i}"));
        set(&fs, dir, Prop::Compression, &format!("zstd:{}", i + 1)).unwrap();
    }
    let f = create(&fs, dir, "f");
    write(&fs, f, b"first");
    let gen = fs.inodes.gen();
    let cached = fs.inodes.cached(f, gen).expect("the write resolved and cached");
    assert_eq!(cached.policy, Some(("zstd:10".parse().unwrap(), false)));
    write(&fs, f, b"second");
    assert!(Arc::ptr_eq(&cached, &fs.inodes.cached(f, fs.inodes.gen()).unwrap()), "no new resolution");
    // a directory without values of its own shares its parent's resolution
    let plain = mkdir(&fs, dir, "plain");
    let r_dir = fs.resolve(dir).unwrap();
    let r_plain = fs.resolve(plain).unwrap();
    assert_eq!(r_plain.eff, r_dir.eff.inherited_from(dir));
    let deeper = mkdir(&fs, plain, "deeper");
    assert!(Arc::ptr_eq(&r_plain, &fs.resolve(deeper).unwrap()));
}

/// chattr writes back every flag it read: `chattr +i` on a file whose compression is
/// zstd:9 sends `c` again, which must not replace zstd:9 by the default (btrfs once did).
#[test]
fn chattr_writing_back_the_c_flag_keeps_the_level_set() {
    let (_d, fs) = new_fs();
    let f = create(&fs, ROOT_INO, "f");
    let get = || u32::from_ne_bytes(fs.ioctl(&root(), f, FS_IOC_GETFLAGS, &[], 4).unwrap().try_into().unwrap());
    let set_flags = |fl: u32| fs.ioctl(&root(), f, FS_IOC_SETFLAGS, &fl.to_ne_bytes(), 0);
    assert_eq!(get(), 0);
    set(&fs, f, Prop::Compression, "zstd:9").unwrap();
    assert_eq!(get(), FS_COMPR_FL);
    set_flags(FS_COMPR_FL).unwrap();
    assert_eq!(local(&fs, f, Prop::Compression).as_deref(), Some("zstd:9"));
    assert_eq!(errno(set_flags(FS_COMPR_FL | 0x10)), libc::EOPNOTSUPP, "+i");
    assert_eq!(local(&fs, f, Prop::Compression).as_deref(), Some("zstd:9"));
    // -c drops the value, +c sets the mount's (none here: zstd:3), +m sets none
    set_flags(0).unwrap();
    assert_eq!(local(&fs, f, Prop::Compression), None);
    set_flags(FS_COMPR_FL).unwrap();
    assert_eq!(local(&fs, f, Prop::Compression).as_deref(), Some("zstd:3"));
    set_flags(FS_NOCOMP_FL).unwrap();
    assert_eq!(local(&fs, f, Prop::Compression).as_deref(), Some("none"));
    assert_eq!(get(), FS_NOCOMP_FL);
    assert_eq!(errno(set_flags(FS_NOCOMP_FL | FS_COMPR_FL)), libc::EINVAL);
    // only the owner (or CAP_FOWNER)
    let u = Creds::with_groups(1000, 1000, vec![]);
    assert_eq!(errno(fs.ioctl(&u, f, FS_IOC_SETFLAGS, &0u32.to_ne_bytes(), 0)), libc::EPERM);
    // unknown ioctls are ENOTTY
    assert_eq!(errno(fs.ioctl(&root(), f, 0x1234, &[], 0)), libc::ENOTTY);
    // a directory's flag works the same and is inherited through its property
    let d = mkdir(&fs, ROOT_INO, "d");
    fs.ioctl(&root(), d, FS_IOC_SETFLAGS, &FS_COMPR_FL.to_ne_bytes(), 0).unwrap();
    let g = create(&fs, d, "g");
    assert_eq!(eff(&fs, g, Prop::Compression), ("zstd:3".into(), Source::Inherited(d)));
}

#[test]
fn an_inode_reached_without_a_known_parent_inherits_from_the_root() {
    let (_d, fs) = new_fs();
    set(&fs, ROOT_INO, Prop::Compression, "zstd:6").unwrap();
    let d = mkdir(&fs, ROOT_INO, "d");
    let f = create(&fs, d, "f");
    // the kernel forgot the file: its node goes, and it is known again by a lookup
    fs.forget(f, 1);
    assert!(fs.inodes.node(f).is_none());
    assert_eq!(eff(&fs, f, Prop::Compression), ("zstd:6".into(), Source::Inherited(ROOT_INO)));
    set(&fs, d, Prop::Compression, "zstd:8").unwrap();
    fs.lookup(&root(), d, b"f").unwrap();
    assert_eq!(eff(&fs, f, Prop::Compression), ("zstd:8".into(), Source::Inherited(d)));
}

/// The record size of `ino`'s records, and what `prop get` shows for it.
fn records(fs: &Fs, ino: Ino) -> u32 {
    fs.engine().record_size(ino).unwrap()
}

#[test]
fn files_take_the_record_size_of_their_directory_when_created_and_keep_it() {
    let (_d, fs) = new_fs();
    let big = mkdir(&fs, ROOT_INO, "big");
    let small = mkdir(&fs, big, "small");
    set(&fs, big, Prop::Recordsize, "1M").unwrap();
    set(&fs, small, Prop::Recordsize, "16K").unwrap();
    let a = create(&fs, big, "a");
    let b = create(&fs, small, "b");
    let c = create(&fs, ROOT_INO, "c");
    assert_eq!((records(&fs, a), records(&fs, b), records(&fs, c)), (1 << 20, 16 << 10, 128 << 10));
    assert_eq!(eff(&fs, a, Prop::Recordsize), ("1M".into(), Source::Inherited(big)));
    assert_eq!(eff(&fs, b, Prop::Recordsize), ("16K".into(), Source::Inherited(small)));
    assert_eq!(eff(&fs, c, Prop::Recordsize), ("128K".into(), Source::Default));
    let data = text(3 << 20);
    for f in [a, b, c] {
        write(&fs, f, &data);
    }
    fs.sync().unwrap();
    for (f, rs) in [(a, 1u64 << 20), (b, 16 << 10), (c, 128 << 10)] {
        let ext = fs.engine().extents(f).unwrap();
        assert_eq!(ext.len() as u64, (3u64 << 20).div_ceil(rs), "inode {f}");
        assert!(ext.iter().all(|(off, x)| off % rs == 0 && u64::from(x.logical) == rs));
        assert_eq!(fs.read(f, 0, 3 << 20).unwrap(), data);
    }
    // the directory changes: new files get the new size, the old ones keep theirs, shown as
    // fixed (what the directory gives now differs)
    set(&fs, big, Prop::Recordsize, "64K").unwrap();
    let a2 = create(&fs, big, "a2");
    assert_eq!(records(&fs, a2), 64 << 10);
    assert_eq!(records(&fs, a), 1 << 20);
    assert_eq!(eff(&fs, a, Prop::Recordsize), ("1M".into(), Source::Fixed));
    assert_eq!(eff(&fs, a2, Prop::Recordsize), ("64K".into(), Source::Inherited(big)));
    // a moved file keeps its records too
    fs.rename(&root(), small, b"b", ROOT_INO, b"b", 0).unwrap();
    assert_eq!(eff(&fs, b, Prop::Recordsize), ("16K".into(), Source::Fixed));
    assert_eq!(fs.read(b, 0, 3 << 20).unwrap(), data);
    // mkdir does not fix anything: directories only pass the value on
    let sub = mkdir(&fs, big, "sub");
    assert_eq!(eff(&fs, sub, Prop::Recordsize), ("64K".into(), Source::Inherited(big)));
}

#[test]
fn a_files_record_size_changes_only_while_it_is_empty() {
    let (_d, fs) = new_fs();
    let d = mkdir(&fs, ROOT_INO, "d");
    set(&fs, d, Prop::Recordsize, "32K").unwrap();
    let f = create(&fs, d, "f");
    // empty: its own value gives it its records
    set(&fs, f, Prop::Recordsize, "256K").unwrap();
    assert_eq!(records(&fs, f), 256 << 10);
    assert_eq!(eff(&fs, f, Prop::Recordsize), ("256K".into(), Source::Local));
    write(&fs, f, &text(600_000));
    // with data: another value is refused and nothing changes; the same value is accepted
    let e = set(&fs, f, Prop::Recordsize, "8K").unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(e.to_string().contains("record size is fixed once it has data"), "{e}");
    assert_eq!(local(&fs, f, Prop::Recordsize).as_deref(), Some("256K"));
    set(&fs, f, Prop::Recordsize, "256K").unwrap();
    fs.sync().unwrap();
    assert_eq!(errno(set(&fs, f, Prop::Recordsize, "8K")), libc::EINVAL);
    assert_eq!(records(&fs, f), 256 << 10);
    // dropping its own value leaves the records as they are
    fs.removexattr(&root(), f, Prop::Recordsize.xattr().as_bytes()).unwrap();
    assert_eq!(local(&fs, f, Prop::Recordsize), None);
    assert_eq!(eff(&fs, f, Prop::Recordsize), ("256K".into(), Source::Fixed));
    // emptied (its old records freed at the next commit: the change syncs first)
    fs.setattr(&root(), f, &SetAttr { size: Some(0), ..Default::default() }).unwrap();
    set(&fs, f, Prop::Recordsize, "8K").unwrap();
    assert_eq!(records(&fs, f), 8 << 10);
    let data = text(100_000);
    write(&fs, f, &data);
    fs.sync().unwrap();
    assert!(fs.engine().extents(f).unwrap().iter().all(|(off, x)| off % 8192 == 0 && x.logical <= 8192));
    assert_eq!(fs.read(f, 0, 200_000).unwrap(), data);
    // emptied again and its own value dropped: it takes what it inherits
    fs.setattr(&root(), f, &SetAttr { size: Some(0), ..Default::default() }).unwrap();
    fs.removexattr(&root(), f, Prop::Recordsize.xattr().as_bytes()).unwrap();
    assert_eq!(records(&fs, f), 32 << 10);
    assert_eq!(eff(&fs, f, Prop::Recordsize), ("32K".into(), Source::Inherited(d)));
    // a directory's value never touches a file: no check on directories with files
    set(&fs, d, Prop::Recordsize, "4K").unwrap();
    assert_eq!(records(&fs, f), 32 << 10);
}

#[test]
fn the_mount_option_gives_files_outside_recordsize_trees_their_size() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    squeezefs_pipeline::Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let engine = squeezefs_pipeline::Engine::open(&pool, &OpenOptions::default()).unwrap();
    let cfg = FsConfig { recordsize: Some(512 << 10), ..FsConfig::default() };
    let fs = Fs::new(engine, cfg).unwrap();
    let t = mkdir(&fs, ROOT_INO, "t");
    set(&fs, t, Prop::Recordsize, "4K").unwrap();
    let f = create(&fs, ROOT_INO, "f");
    let g = create(&fs, t, "g");
    assert_eq!(eff(&fs, f, Prop::Recordsize), ("512K".into(), Source::Mount));
    assert_eq!((records(&fs, f), records(&fs, g)), (512 << 10, 4 << 10));
    let data = text(2 << 20);
    write(&fs, f, &data);
    write(&fs, g, &data);
    fs.shutdown().unwrap();
    drop(fs);
    // without the option the pool's size is the default again; the files keep theirs
    let engine = squeezefs_pipeline::Engine::open(&pool, &OpenOptions::default()).unwrap();
    let fs = Fs::new(engine, FsConfig::default()).unwrap();
    let f2 = fs.lookup(&root(), ROOT_INO, b"f").unwrap().ino;
    assert_eq!(f2, f);
    assert_eq!(eff(&fs, f, Prop::Recordsize), ("512K".into(), Source::Fixed));
    assert_eq!(fs.read(f, 0, 3 << 20).unwrap(), data);
    let t = fs.lookup(&root(), ROOT_INO, b"t").unwrap().ino;
    let g = fs.lookup(&root(), t, b"g").unwrap().ino;
    assert_eq!(fs.read(g, 0, 3 << 20).unwrap(), data);
    assert_eq!(records(&fs, g), 4 << 10);
    assert!(fs.engine().fsck().unwrap().is_clean());
}
