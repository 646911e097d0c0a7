//! `squeezefs fsck`, `scrub` and `mount` on damaged metadata stores, through the binary:
//! one checked copy with smashed blocks, two copies with one damaged, both copies of the
//! same blocks damaged, and a plain (pre-copies) store with a smashed page. None panics;
//! damage no copy can repair ends in exit status 1 naming the blocks and the table each
//! belonged to.
mod mounted_common;
use mounted_common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The bytes every file name of the test trees starts with: the blocks holding them are
/// pages of the directory tables.
const MARK: &[u8] = b"marker-of-the-damage-test-";

/// A closed pool made by `mkfs --rootdir` from 300 small files with marked names, its
/// store kept unsealed in `copies` checked copies.
fn pool_with_files(dir: &Path, copies: u8) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..300 {
        let name = format!("{}{i:04}", std::str::from_utf8(MARK).unwrap());
        std::fs::write(src.join(name), format!("file {i}\n").repeat(i % 7 + 1)).unwrap();
    }
    let pool = dir.join("pool");
    let c = copies.to_string();
    run_ok(&[
        "mkfs",
        pool.to_str().unwrap(),
        "--rootdir",
        src.to_str().unwrap(),
        "--meta-copies",
        &c,
        "--no-seal",
        "-q",
    ]);
    pool
}

/// Where a copy holds redb's logical block `l` (docs/format.md §6): after the header
/// block, groups of one sum block and 511 data blocks.
fn data_offset(l: u64) -> u64 {
    (1 + (l / 511) * 512 + 1 + l % 511) * 4096
}

/// The logical blocks of the copy at `path` whose bytes hold `MARK`.
fn marked_blocks(path: &Path) -> Vec<u64> {
    let bytes = std::fs::read(path).unwrap();
    let mut found = Vec::new();
    let mut l = 0u64;
    while data_offset(l) + 4096 <= bytes.len() as u64 {
        let at = data_offset(l) as usize;
        if bytes[at..at + 4096].windows(MARK.len()).any(|w| w == MARK) {
            found.push(l);
        }
        l += 1;
    }
    assert!(!found.is_empty(), "no block of {} holds a file name", path.display());
    found
}

/// Overwrite logical block `l` of the copy at `path`: zeros, or bytes that are not.
fn smash(path: &Path, l: u64, zeros: bool) {
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut old = vec![0u8; 4096];
    f.seek(SeekFrom::Start(data_offset(l))).unwrap();
    f.read_exact(&mut old).unwrap();
    let new: Vec<u8> = if zeros { vec![0; 4096] } else { old.iter().map(|b| !b).collect() };
    f.seek(SeekFrom::Start(data_offset(l))).unwrap();
    f.write_all(&new).unwrap();
}

/// `squeezefs ARGS`: exit status and stdout + stderr.
fn squeezefs(args: &[&str]) -> (Option<i32>, String) {
    let out = run(args);
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

fn assert_no_panic(what: &str, out: &str) {
    assert!(!out.contains("panicked") && !out.contains("RUST_BACKTRACE"), "{what} panicked: {out}");
}

/// The report names every block of `lost` as damaged in every copy, and the directory
/// table one of them belonged to.
fn assert_names_lost_blocks(what: &str, out: &str, lost: &[u64]) {
    for l in lost {
        assert!(out.contains(&format!("block {l} ")), "{what} does not name block {l}: {out}");
    }
    assert!(out.contains("damaged in every copy"), "{what}: {out}");
    assert!(
        out.contains("a page of the `dirents` table") || out.contains("a page of the `dir_cookies` table"),
        "{what} does not name the table of the lost blocks: {out}"
    );
}

/// fsck and scrub exit 1 naming `lost` and its table; a mount fails naming them too, or,
/// if the open does not need those pages, mounts and a walk of the tree meets EIO.
fn assert_lost_everywhere(pool: &Path, lost: &[u64]) {
    let p = pool.to_str().unwrap();
    for cmd in ["fsck", "scrub"] {
        let (code, out) = squeezefs(&[cmd, p]);
        assert_no_panic(cmd, &out);
        assert_eq!(code, Some(1), "{cmd} must exit 1: {out}");
        assert_names_lost_blocks(cmd, &out, lost);
    }
    if !can_mount() {
        return;
    }
    let mnt = pool.parent().unwrap().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (code, out) = squeezefs(&["mount", p, mnt.to_str().unwrap()]);
    assert_no_panic("mount", &out);
    if code == Some(0) {
        let walk = std::fs::read_dir(&mnt).and_then(|d| d.map(|e| e.map(|e| e.path())).collect::<Result<Vec<_>, _>>());
        let found = match walk {
            Err(e) => e.raw_os_error(),
            Ok(files) => files.iter().find_map(|f| std::fs::read(f).err().and_then(|e| e.raw_os_error())),
        };
        let (_, umount) = squeezefs(&["umount", mnt.to_str().unwrap()]);
        assert_eq!(found, Some(libc::EIO), "reading the tree over lost blocks: {umount}");
        let log = std::fs::read_to_string(pool.join("squeezefs.log")).unwrap_or_default();
        assert_no_panic("the mount daemon", &log);
    } else {
        assert_eq!(code, Some(1), "{out}");
        assert!(!out.contains("exited before the mount was live"), "the daemon died: {out}");
        assert_names_lost_blocks("mount", &out, lost);
    }
}

#[test]
fn smashed_blocks_of_a_single_copy_store_are_named_with_their_table() {
    let d = tempfile::tempdir().unwrap();
    let pool = pool_with_files(d.path(), 1);
    let copy0 = pool.join("meta.copy0");
    let lost = marked_blocks(&copy0);
    for &l in &lost {
        smash(&copy0, l, false);
    }
    assert_lost_everywhere(&pool, &lost);
}

#[test]
fn scrub_repairs_one_damaged_copy_and_fsck_is_clean_after() {
    let d = tempfile::tempdir().unwrap();
    let pool = pool_with_files(d.path(), 2);
    let p = pool.to_str().unwrap();
    let (copy0, copy1) = (pool.join("meta.copy0"), pool.join("meta.copy1"));
    let marked = marked_blocks(&copy0);
    // the first marked block inverted in copy 0, the others zeroed in copy 1 (all of
    // them when there is one): each block stays intact in one copy
    let (in0, in1) = match marked.split_first() {
        Some((first, rest)) if !rest.is_empty() => (vec![*first], rest.to_vec()),
        _ => (Vec::new(), marked.clone()),
    };
    for &l in &in0 {
        smash(&copy0, l, false);
    }
    for &l in &in1 {
        smash(&copy1, l, true);
    }
    let (code, out) = squeezefs(&["fsck", p]);
    assert_no_panic("fsck", &out);
    assert_eq!(code, Some(1), "fsck before the repair: {out}");
    assert!(out.contains(&format!("metadata copy 1 ({}): ", copy1.display())) && out.contains("bad blocks"), "{out}");
    let (code, out) = squeezefs(&["scrub", p]);
    assert_no_panic("scrub", &out);
    assert_eq!(code, Some(0), "scrub must repair from the other copy: {out}");
    for (copy, blocks) in [(0, &in0), (1, &in1)] {
        for l in blocks {
            assert!(
                out.contains(&format!("repaired copy {copy}: block {l}\n")),
                "repair of copy {copy} block {l} not listed: {out}"
            );
        }
    }
    assert!(!out.contains("damaged in every copy"), "{out}");
    let (code, out) = squeezefs(&["fsck", p]);
    assert_eq!(code, Some(0), "fsck after scrub: {out}");
    assert!(
        out.contains("metadata copy 0") && out.contains("metadata copy 1") && out.contains("pool is clean"),
        "{out}"
    );
    assert_eq!(out.matches(", intact").count(), 2, "both copies intact after scrub: {out}");
}

#[test]
fn blocks_damaged_in_both_copies_are_named_with_their_table() {
    let d = tempfile::tempdir().unwrap();
    let pool = pool_with_files(d.path(), 2);
    let (copy0, copy1) = (pool.join("meta.copy0"), pool.join("meta.copy1"));
    let lost = marked_blocks(&copy0);
    for &l in &lost {
        smash(&copy0, l, false);
        smash(&copy1, l, true);
    }
    assert_lost_everywhere(&pool, &lost);
}

/// A pool made before checked copies (frozen fixture): its one plain `meta.redb` with a
/// page smashed, which redb meets as it opens the store.
#[test]
fn a_damaged_plain_store_fails_fsck_scrub_and_mount_with_an_error_not_a_panic() {
    let d = tempfile::tempdir().unwrap();
    let pool = d.path().join("pool");
    std::fs::create_dir(&pool).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipeline/tests/fixtures/pool-v1-single-copy-store");
    for f in ["meta.redb", "data.0"] {
        let z = std::fs::read(fixture.join(format!("{f}.zst"))).unwrap();
        std::fs::write(pool.join(f), zstd::decode_all(&z[..]).unwrap()).unwrap();
    }
    let p = pool.to_str().unwrap();
    let (code, out) = squeezefs(&["fsck", p]);
    assert_eq!(code, Some(0), "the fixture is clean before the damage: {out}");
    {
        let mut f = std::fs::OpenOptions::new().write(true).open(pool.join("meta.redb")).unwrap();
        f.seek(SeekFrom::Start(4096)).unwrap();
        f.write_all(&[0x5a; 4096]).unwrap();
    }
    for cmd in ["fsck", "scrub"] {
        let (code, out) = squeezefs(&[cmd, p]);
        assert_no_panic(cmd, &out);
        assert_eq!(code, Some(1), "{cmd}: {out}");
        assert!(out.contains("the metadata store is damaged"), "{cmd}: {out}");
    }
    if !can_mount() {
        return;
    }
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (code, out) = squeezefs(&["mount", p, mnt.to_str().unwrap()]);
    assert_no_panic("mount", &out);
    assert_eq!(code, Some(1), "mount: {out}");
    assert!(
        out.contains("mount: the metadata store is damaged: redb stopped on a page it could not read"),
        "mount must say why, not that its daemon died: {out}"
    );
}
