//! Properties on a mounted squeezefs: inheritance, overrides, moves, validation, durability
//! across remount and SIGKILL, copies with `cp -a`, chattr/lsattr, and what `squeezefs
//! stats` and `squeezefs prop` report.
mod mounted_common;
use mounted_common::*;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

fn setx(p: &Path, name: &str, value: &str) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    let r = unsafe { libc::lsetxattr(cstr(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn local(p: &Path, prop: &str) -> Option<String> {
    xattr_get(p, &format!("user.squeezefs.{prop}")).ok().map(|v| String::from_utf8(v).unwrap())
}

/// `squeezefs prop get --json PATH PROP`: (value, source, inherited_from).
fn prop_get(p: &Path, prop: &str) -> (String, String, Option<String>) {
    let out = run(&["prop", "get", "--json", p.to_str().unwrap(), prop]);
    assert!(out.status.success(), "prop get: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &v[0];
    (
        row["value"].as_str().unwrap().to_string(),
        row["source"].as_str().unwrap().to_string(),
        row["inherited_from"].as_str().map(str::to_string),
    )
}

fn prop_set(p: &Path, assignment: &str) -> std::process::Output {
    run(&["prop", "set", p.to_str().unwrap(), assignment])
}

/// Text that compresses at every level.
fn text(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    let mut i = 0u64;
    while v.len() < n {
        v.extend_from_slice(format!("record {i}: the quick brown fox {} jumps\n", i * 7919 % 1013).as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

/// `squeezefs stats --json PATH`: "alg:level" → uncompressed bytes.
fn stats(p: &Path) -> (Vec<(String, u64)>, serde_json::Value) {
    let out = run(&["stats", "--json", p.to_str().unwrap()]);
    assert!(out.status.success(), "stats: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (format!("{}:{}", r["algorithm"].as_str().unwrap(), r["level"]), r["uncompressed_bytes"].as_u64().unwrap())
        })
        .collect();
    (rows, v)
}

fn mkdirs(m: &Mounted, rel: &str) -> PathBuf {
    let p = m.path(rel);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// SIGKILL the daemon and mount the pool again: what survives is what was durable.
fn kill_daemon_and_remount(m: &mut Mounted) {
    let pid = m.daemon_pid();
    unsafe { libc::kill(pid, libc::SIGKILL) };
    while unsafe { libc::kill(pid, 0) } == 0 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    m.forget_dead_mount();
    m.mount();
}

#[test]
fn three_levels_of_inheritance_a_file_override_and_per_file_levels_in_stats() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("compress=lz4");
    let a = mkdirs(&m, "a");
    let b = mkdirs(&m, "a/b");
    let c = mkdirs(&m, "a/b/c");
    let out = prop_set(&a, "compression=zstd-9");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    setx(&b, "user.squeezefs.compress-force", "on").unwrap();
    let f = c.join("f");
    let g = c.join("g");
    std::fs::write(&g, b"").unwrap();
    // a per-file level: set on the empty file, then written
    setx(&g, "user.squeezefs.compression", "gzip-4").unwrap();
    let data = text(1 << 20);
    std::fs::write(&f, &data).unwrap();
    std::fs::write(&g, &data).unwrap();
    std::fs::write(m.path("top"), &data).unwrap();
    assert_eq!(prop_get(&f, "compression"), ("zstd:9".into(), "inherited".into(), Some(a.display().to_string())));
    assert_eq!(prop_get(&f, "compress-force"), ("on".into(), "inherited".into(), Some(b.display().to_string())));
    assert_eq!(prop_get(&g, "compression"), ("zlib:4".into(), "local".into(), None));
    assert_eq!(prop_get(&m.path("top"), "compression"), ("lz4".into(), "mount option".into(), None));
    assert_eq!(prop_get(&f, "recordsize").1, "default");
    let (rows, v) = stats(&c);
    assert_eq!(rows, vec![("zlib:4".to_string(), 1 << 20), ("zstd:9".to_string(), 1 << 20)]);
    // stats of a directory shows its effective properties
    let props = v["properties"].as_array().unwrap();
    assert_eq!(props[0]["property"], "compression");
    assert_eq!(props[0]["value"], "zstd:9");
    assert_eq!(props[0]["inherited_from"], a.display().to_string());
    assert_eq!(stats(&g).0, vec![("zlib:4".to_string(), 1 << 20)]);
    assert_eq!(stats(&m.path("top")).0, vec![("lz4:1".to_string(), 1 << 20)]);
    let out = run(&["stats", c.to_str().unwrap()]);
    let text_out = String::from_utf8_lossy(&out.stdout);
    assert!(text_out.contains("Properties of") && text_out.contains("inherited from"), "{text_out}");
    assert_eq!(std::fs::read(&f).unwrap(), data);
}

#[test]
fn a_moved_file_and_a_moved_tree_inherit_from_their_new_place() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("");
    let fast = mkdirs(&m, "fast");
    let strong = mkdirs(&m, "strong");
    assert!(prop_set(&fast, "compression=lz4").status.success());
    assert!(prop_set(&strong, "compression=zstd:12").status.success());
    let tree = mkdirs(&m, "fast/tree/sub");
    std::fs::write(fast.join("f"), b"x").unwrap();
    std::fs::write(tree.join("g"), b"x").unwrap();
    assert_eq!(prop_get(&fast.join("f"), "compression").0, "lz4");
    assert_eq!(prop_get(&tree.join("g"), "compression").0, "lz4");
    std::fs::rename(fast.join("f"), strong.join("f")).unwrap();
    std::fs::rename(m.path("fast/tree"), strong.join("tree")).unwrap();
    let (f, g) = (strong.join("f"), strong.join("tree/sub/g"));
    let from_strong = Some(strong.display().to_string());
    assert_eq!(prop_get(&f, "compression"), ("zstd:12".into(), "inherited".into(), from_strong.clone()));
    assert_eq!(prop_get(&g, "compression"), ("zstd:12".into(), "inherited".into(), from_strong));
    let data = text(600_000);
    std::fs::write(&f, &data).unwrap();
    std::fs::write(&g, &data).unwrap();
    assert_eq!(stats(&strong).0, vec![("zstd:12".to_string(), 2 * 600_000)]);
    // the old home's setting is gone from them: changing it changes nothing there
    assert!(prop_set(&fast, "compression=none").status.success());
    assert_eq!(prop_get(&g, "compression").0, "zstd:12");
}

#[test]
fn bad_values_are_refused_and_the_old_value_stays() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("");
    let d = mkdirs(&m, "d");
    let f = d.join("f");
    std::fs::write(&f, b"x").unwrap();
    for (p, v) in [("compression", "zstd:5"), ("compress-force", "on"), ("recordsize", "256K"), ("qos", "qos-50")] {
        setx(&d, &format!("user.squeezefs.{p}"), v).unwrap();
    }
    setx(&d, "user.squeezefs.background_compression", "zstd-15").unwrap();
    let snapshot = |p: &Path| -> Vec<Option<String>> {
        ["compression", "compress-force", "recordsize", "background_compression", "qos"]
            .iter()
            .map(|n| local(p, n))
            .collect()
    };
    let before = snapshot(&d);
    assert_eq!(before[3].as_deref(), Some("zstd:15"), "stored canonically");
    assert_eq!(before[4].as_deref(), Some("50M"));
    for (p, v) in [
        ("compression", "zstd:42"),
        ("compression", "brotli"),
        ("compression", ""),
        ("compress-force", "maybe"),
        ("recordsize", "3K"),
        ("recordsize", "4M"),
        ("background_compression", "auto"),
        ("qos", "fast"),
        ("qos", "0"),
        ("colour", "blue"),
    ] {
        assert_eq!(setx(&d, &format!("user.squeezefs.{p}"), v), Err(libc::EINVAL), "{p}={v}");
    }
    // the wrong kind: qos on a file (EINVAL from the daemon); on a symlink the kernel itself
    // refuses user.* attributes
    assert_eq!(setx(&f, "user.squeezefs.qos", "10M"), Err(libc::EINVAL));
    std::os::unix::fs::symlink("f", d.join("l")).unwrap();
    assert_eq!(setx(&d.join("l"), "user.squeezefs.compression", "lz4"), Err(libc::EPERM));
    // virtual attributes cannot be set
    assert_eq!(setx(&d, "user.squeezefs.effective", "x"), Err(libc::EPERM));
    assert_eq!(snapshot(&d), before);
    assert_eq!(local(&f, "qos"), None);
    // the CLI refuses them before anything is set, naming what is accepted
    for (target, a) in [
        (&d, "compression=zstd:42"),
        (&d, "recordsize=3K"),
        (&d, "qos=fast"),
        (&f, "qos=5M"),
        (&d, "colour=blue"),
        (&d, "compress-force"),
    ] {
        let out = prop_set(target, a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{a}");
        assert!(
            err.contains("accepted")
                || err.contains("properties:")
                || err.contains("applies to")
                || err.contains("NAME=VALUE"),
            "{a}: {err}"
        );
    }
    let out = run(&["prop", "set", d.to_str().unwrap(), "compression=lz4", "recordsize=7K"]);
    assert!(!out.status.success());
    assert_eq!(snapshot(&d), before, "one bad assignment sets none of them");
    let out = run(&["prop", "set", d.join("l").to_str().unwrap(), "compression=lz4"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"));
    // qos=none clears; prop inherit drops
    assert!(prop_set(&d, "qos=none").status.success());
    assert_eq!(local(&d, "qos"), None);
    assert!(run(&["prop", "inherit", d.to_str().unwrap(), "compression", "recordsize"]).status.success());
    assert_eq!(prop_get(&d, "compression"), ("none".into(), "default".into(), None));
    assert_eq!(local(&d, "compress-force").as_deref(), Some("on"));
}

#[test]
fn properties_survive_remount_and_sigkill() {
    if !can_mount() {
        return;
    }
    let mut m = Mounted::new("compress=lz4");
    let d = mkdirs(&m, "keep/deeper");
    std::fs::write(d.join("f"), b"x").unwrap();
    assert!(prop_set(&m.path("keep"), "compression=zstd:7").status.success());
    assert!(prop_set(&d.join("f"), "compress-force=on").status.success());
    m.remount();
    assert_eq!(
        prop_get(&d.join("f"), "compression"),
        ("zstd:7".into(), "inherited".into(), Some(m.path("keep").display().to_string()))
    );
    assert_eq!(prop_get(&d.join("f"), "compress-force").1, "local");
    // made durable by an fsync (any fsync commits the pool), then the daemon is killed
    assert!(prop_set(&d, "compression=zlib:2").status.success());
    assert!(prop_set(&m.path("keep"), "qos=20M").status.success());
    std::fs::File::open(&d).unwrap().sync_all().unwrap();
    kill_daemon_and_remount(&mut m);
    assert_eq!(local(&d, "compression").as_deref(), Some("zlib:2"));
    assert_eq!(local(&m.path("keep"), "qos").as_deref(), Some("20M"));
    assert_eq!(
        prop_get(&d.join("f"), "compression"),
        ("zlib:2".into(), "inherited".into(), Some(d.display().to_string()))
    );
    // and they act after the crash: new data below is stored as they say
    std::fs::write(d.join("g"), text(300_000)).unwrap();
    assert_eq!(stats(&d.join("g")).0, vec![("zlib:2".to_string(), 300_000)]);
    m.umount();
    let out = run(&["fsck", m.pool.to_str().unwrap()]);
    assert!(out.status.success(), "fsck: {}", String::from_utf8_lossy(&out.stdout));
    m.mount();
}

#[test]
fn cp_a_carries_properties() {
    if !can_mount() {
        return;
    }
    let m = Mounted::new("");
    let src = mkdirs(&m, "src/inner");
    assert!(prop_set(&m.path("src"), "compression=zstd:11").status.success());
    assert!(prop_set(&m.path("src"), "qos=100M").status.success());
    std::fs::write(src.join("f"), text(200_000)).unwrap();
    assert!(prop_set(&src.join("f"), "compression=lz4hc:9").status.success());
    let cp = |from: &Path, to: &Path| {
        let out = Command::new("cp").arg("-a").arg(from).arg(to).output().unwrap();
        assert!(out.status.success(), "cp -a: {}", String::from_utf8_lossy(&out.stderr));
    };
    let list = |p: &Path| {
        let out = run(&["prop", "list", "-r", "--json", p.to_str().unwrap()]);
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut rows: Vec<(String, String, String)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let path = r["path"].as_str().unwrap();
                let rel = Path::new(path).strip_prefix(p).unwrap().display().to_string();
                (rel, r["property"].as_str().unwrap().into(), r["value"].as_str().unwrap().into())
            })
            .collect();
        rows.sort();
        rows
    };
    let want = vec![
        ("".to_string(), "compression".to_string(), "zstd:11".to_string()),
        ("".to_string(), "qos".to_string(), "100M".to_string()),
        ("inner/f".to_string(), "compression".to_string(), "lz4hc:9".to_string()),
    ];
    assert_eq!(list(&m.path("src")), want);
    // within the mount
    cp(&m.path("src"), &m.path("copy"));
    assert_eq!(list(&m.path("copy")), want);
    assert_eq!(prop_get(&m.path("copy/inner"), "compression").2, Some(m.path("copy").display().to_string()));
    // out to another filesystem that keeps user.* attributes, and back
    let out_dir = tempfile::Builder::new().prefix("sqzprops").tempdir_in("/tmp").unwrap();
    let probe = out_dir.path().join("probe");
    std::fs::write(&probe, b"").unwrap();
    if setx(&probe, "user.probe", "1").is_ok() {
        cp(&m.path("src"), &out_dir.path().join("src"));
        assert_eq!(local(&out_dir.path().join("src/inner/f"), "compression").as_deref(), Some("lz4hc:9"));
        cp(&out_dir.path().join("src"), &m.path("back"));
        assert_eq!(list(&m.path("back")), want);
    } else {
        eprintln!("/tmp keeps no user.* attributes: copy through it skipped");
    }
    // the copied properties act on later writes
    std::fs::write(m.path("copy/inner/new"), text(300_000)).unwrap();
    assert_eq!(stats(&m.path("copy/inner/new")).0, vec![("zstd:11".to_string(), 300_000)]);
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("-V").output().is_ok()
}

/// chattr/lsattr reach the daemon as FUSE_IOCTL (FS_IOC_GETFLAGS/SETFLAGS) for regular files
/// and directories; `c` and `m` map onto the compression property as on btrfs.
#[test]
fn chattr_c_and_m_set_compression_and_lsattr_shows_them() {
    if !can_mount() {
        return;
    }
    if !have("chattr") || !have("lsattr") {
        eprintln!("skipping: chattr/lsattr (e2fsprogs) not installed");
        return;
    }
    let m = Mounted::new("compress=zstd:2");
    let d = mkdirs(&m, "d");
    let f = m.path("f");
    std::fs::write(&f, b"x").unwrap();
    let chattr = |arg: &str, p: &Path| Command::new("chattr").arg(arg).arg(p).output().unwrap();
    let lsattr = |p: &Path| {
        let out = Command::new("lsattr").arg("-d").arg(p).output().unwrap();
        assert!(out.status.success(), "lsattr: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
    };
    assert!(!lsattr(&f).contains('c'));
    assert!(chattr("+c", &f).status.success());
    assert!(lsattr(&f).contains('c'));
    assert_eq!(local(&f, "compression").as_deref(), Some("zstd:2"), "+c sets the mount's spec");
    // a level set by property survives chattr writing the c flag back (as with +i)
    setx(&f, "user.squeezefs.compression", "zstd:9").unwrap();
    let out = chattr("+A", &f);
    assert!(!out.status.success(), "flags other than c/m are not supported");
    assert!(chattr("+c", &f).status.success());
    assert_eq!(local(&f, "compression").as_deref(), Some("zstd:9"));
    assert!(chattr("-c", &f).status.success());
    assert_eq!(local(&f, "compression"), None);
    assert!(chattr("+m", &d).status.success());
    assert!(lsattr(&d).contains('m'));
    assert_eq!(local(&d, "compression").as_deref(), Some("none"));
    std::fs::write(d.join("g"), text(300_000)).unwrap();
    assert_eq!(stats(&d.join("g")).0, vec![("none:0".to_string(), 300_000)]);
}
