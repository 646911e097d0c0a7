//! The namespace delta (crates/pipeline/src/nsdelta.rs): metadata changes of `meta_write`
//! and `update_attr` kept in memory and written by the next txg commit. They must be visible
//! at once through every read path (lookup, getattr, listing, xattrs, symlinks, orphans),
//! durable after sync and all-or-nothing after a crash, merged with each other on the same
//! inode, dropped with the inode, and leave nothing behind when a closure fails; writers
//! must go on while a commit runs.

mod crash_common;

use crash_common::{assert_fsck_clean, create_file, delete_file, read_all, write_new_file};
use squeezefs_pipeline::{Engine, EngineError, FileKind, InodeAttr, MkfsOptions, OpenOptions, Timestamp, ROOT_INO};
use std::collections::BTreeSet;
use std::time::Duration;

fn ts(secs: i64) -> Timestamp {
    Timestamp { secs, nanos: 0 }
}

fn set_mtime(e: &Engine, ino: u64, secs: i64) {
    e.update_attr(ino, |a: &mut InodeAttr| -> Result<((), bool), EngineError> {
        a.mtime = ts(secs);
        Ok(((), true))
    })
    .unwrap();
}

#[test]
fn attribute_changes_are_visible_merged_and_durable() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    let ino = create_file(&e, b"f").unwrap();
    e.write(ino, 0, b"some bytes").unwrap();

    set_mtime(&e, ino, 1_000);
    assert_eq!(e.getattr(ino).unwrap().mtime, ts(1_000), "visible at once");
    assert_eq!(e.getattr(ino).unwrap().size, 10, "size still from the data path");
    assert!(e.committed_attr(ino).is_err(), "the create is not in redb before the commit");

    // a namespace transaction on the same inode sees the attribute change and keeps it
    e.meta_write(|tx| {
        let mut a = tx.get_inode(ino)?;
        assert_eq!(a.mtime, ts(1_000));
        a.uid = 77;
        tx.put_inode(&a)
    })
    .unwrap();
    let a = e.getattr(ino).unwrap();
    assert_eq!((a.mtime, a.uid), (ts(1_000), 77));

    // and an attribute change after it keeps the transaction's change
    e.update_attr(ino, |a: &mut InodeAttr| -> Result<((), bool), EngineError> {
        a.perm = 0o600;
        Ok(((), true))
    })
    .unwrap();
    let a = e.getattr(ino).unwrap();
    assert_eq!((a.mtime, a.uid, a.perm), (ts(1_000), 77, 0o600));

    // a failing closure changes nothing, even what it wrote before failing
    let r = e.update_attr(ino, |a: &mut InodeAttr| -> Result<((), bool), EngineError> {
        a.perm = 0o777;
        Err(EngineError::Aborted)
    });
    assert!(r.is_err());
    assert_eq!(e.getattr(ino).unwrap().perm, 0o600);

    // durable with the txg: sync, close, reopen
    e.sync().unwrap();
    let c = e.committed_attr(ino).unwrap();
    assert_eq!((c.mtime, c.uid, c.perm, c.size), (ts(1_000), 77, 0o600, 10));
    set_mtime(&e, ino, 2_000);
    e.close().unwrap(); // the final txg writes the delta too
    drop(e);
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    let a = e.getattr(ino).unwrap();
    assert_eq!((a.mtime, a.uid, a.perm, a.size), (ts(2_000), 77, 0o600, 10));

    // deleting the inode drops its delta row: the next commit must not resurrect it
    set_mtime(&e, ino, 3_000);
    delete_file(&e, b"f").unwrap();
    e.sync().unwrap();
    assert!(e.getattr(ino).is_err(), "deleted inode is gone");
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    e.close().unwrap();
}

#[test]
fn fsync_makes_an_attribute_change_durable() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    let ino = create_file(&e, b"f").unwrap();
    e.sync().unwrap();
    set_mtime(&e, ino, 4_242);
    e.fsync(ino).unwrap();
    assert_eq!(e.committed_attr(ino).unwrap().mtime, ts(4_242));
    e.close().unwrap();
}

/// Options that keep the txg open unless someone syncs.
fn slow_txg() -> OpenOptions {
    OpenOptions { txg_timeout: Duration::from_secs(3600), ..Default::default() }
}

fn names(e: &Engine, dir: u64, page: usize) -> Vec<String> {
    let (mut after, mut out) = (0, Vec::new());
    loop {
        let p = e.dir_list(dir, after, page).unwrap();
        let Some(last) = p.last() else { break };
        after = last.cookie;
        out.extend(p.iter().map(|d| String::from_utf8(d.name.clone()).unwrap()));
    }
    out
}

#[test]
fn namespace_changes_are_visible_before_the_commit_through_every_read_path() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &slow_txg()).unwrap();
    let synced = e.info().last_txg;
    let inodes_before = e.statfs().unwrap().inodes;
    let (d, l) = e
        .meta_write(|tx| {
            let t = InodeAttr::new(0, FileKind::Dir, 0o755, 0, 0, Timestamp { secs: 1, nanos: 0 });
            let d = tx.alloc_ino()?;
            tx.put_inode(&InodeAttr { ino: d, ..t.clone() })?;
            tx.dir_insert(ROOT_INO, b"d", d, FileKind::Dir)?;
            let mut root = tx.get_inode(ROOT_INO)?;
            root.nlink += 1;
            tx.put_inode(&root)?;
            let l = tx.alloc_ino()?;
            tx.put_inode(&InodeAttr { ino: l, kind: FileKind::Symlink, ..t })?;
            tx.set_symlink_target(l, b"target/of/l")?;
            tx.dir_insert(d, b"l", l, FileKind::Symlink)?;
            tx.set_xattr(l, b"user.a", b"1")?;
            tx.set_xattr(l, b"user.b", b"2")?;
            tx.add_orphan(l)?;
            Ok((d, l))
        })
        .unwrap();
    assert_eq!(e.lookup(ROOT_INO, b"d").unwrap(), Some((d, FileKind::Dir)));
    assert_eq!(e.lookup(d, b"l").unwrap(), Some((l, FileKind::Symlink)));
    assert_eq!(e.getattr(d).unwrap().kind, FileKind::Dir);
    assert_eq!(e.read_link(l).unwrap(), b"target/of/l");
    assert_eq!(e.get_xattr(l, b"user.b").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(e.list_xattr(l).unwrap(), vec![b"user.a".to_vec(), b"user.b".to_vec()]);
    assert_eq!(e.orphans().unwrap(), vec![l]);
    assert_eq!(names(&e, d, 10), vec!["l"]);
    assert_eq!(e.statfs().unwrap().inodes, inodes_before + 2, "statfs counts uncommitted inodes");
    assert!(e.committed_attr(d).is_err() && e.info().last_txg == synced, "nothing committed yet");

    // data written to an inode redb does not hold yet
    e.write(l, 0, b"").unwrap();
    let f = write_new_file(&e, "data", b"bytes of a file created in the delta").unwrap();
    assert_eq!(read_all(&e, f).unwrap(), b"bytes of a file created in the delta");

    e.sync().unwrap();
    assert!(e.info().last_txg > synced);
    assert_eq!(e.committed_attr(d).unwrap().kind, FileKind::Dir);
    assert_eq!(e.statfs().unwrap().inodes, inodes_before + 3);
    // the same answers from redb alone
    assert_eq!(e.lookup(d, b"l").unwrap(), Some((l, FileKind::Symlink)));
    assert_eq!(e.list_xattr(l).unwrap(), vec![b"user.a".to_vec(), b"user.b".to_vec()]);
    assert_eq!(e.orphans().unwrap(), vec![l]);

    // removals: tombstones hide committed rows before their commit
    e.meta_write(|tx| {
        tx.remove_xattr(l, b"user.a")?;
        tx.remove_orphan(l)?;
        tx.dir_remove(d, b"l")?;
        tx.delete_inode(l)
    })
    .unwrap();
    assert_eq!(e.lookup(d, b"l").unwrap(), None);
    assert!(matches!(e.getattr(l), Err(EngineError::NoInode(_))));
    assert!(e.read_link(l).is_err());
    assert!(e.orphans().unwrap().is_empty());
    assert!(names(&e, d, 10).is_empty());
    assert!(e.meta_write(|tx| tx.dir_is_empty(d)).unwrap());
    assert_eq!(e.statfs().unwrap().inodes, inodes_before + 2);
    e.sync().unwrap();
    assert!(e.committed_attr(l).is_err());
    assert_eq!(e.lookup(d, b"l").unwrap(), None);
    assert_fsck_clean(&e, "after the removals");
    e.close().unwrap();
}

#[test]
fn a_failed_transaction_leaves_no_row_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &slow_txg()).unwrap();
    create_file(&e, b"kept").unwrap();
    let r = e.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        tx.put_inode(&InodeAttr::new(ino, FileKind::File, 0o644, 0, 0, Timestamp { secs: 1, nanos: 0 }))?;
        tx.dir_insert(ROOT_INO, b"half", ino, FileKind::File)?;
        tx.dir_remove(ROOT_INO, b"kept")?;
        // a later check fails: everything above must vanish
        tx.dir_insert(ROOT_INO, b"half", ino, FileKind::File)
    });
    assert!(matches!(r, Err(EngineError::Exists)), "{r:?}");
    assert_eq!(e.lookup(ROOT_INO, b"half").unwrap(), None);
    assert!(e.lookup(ROOT_INO, b"kept").unwrap().is_some());
    assert_eq!(names(&e, ROOT_INO, 10), vec!["kept"]);
    e.sync().unwrap();
    assert_eq!(names(&e, ROOT_INO, 10), vec!["kept"]);
    assert_fsck_clean(&e, "after a failed transaction");
    e.close().unwrap();
}

#[test]
fn listing_merges_committed_rows_with_delta_rows_and_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &slow_txg()).unwrap();
    let mut want = BTreeSet::new();
    for i in 0..100 {
        create_file(&e, format!("c{i:03}").as_bytes()).unwrap();
        want.insert(format!("c{i:03}"));
    }
    e.sync().unwrap();
    for i in (0..100).step_by(3) {
        delete_file(&e, format!("c{i:03}").as_bytes()).unwrap();
        want.remove(&format!("c{i:03}"));
    }
    for i in 0..20 {
        create_file(&e, format!("n{i:03}").as_bytes()).unwrap();
        want.insert(format!("n{i:03}"));
    }
    // every page size, including pages ending on a tombstone
    for page in [1, 7, 33, 1000] {
        let got = names(&e, ROOT_INO, page);
        assert_eq!(got.len(), want.len(), "page {page}: no duplicates, nothing missing");
        assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), want, "page {page}");
        // cookie order: committed survivors first, then the new names
        assert!(
            got.iter().position(|n| n.starts_with('n')).unwrap() == want.iter().filter(|n| n.starts_with('c')).count()
        );
    }
    e.sync().unwrap();
    assert_eq!(names(&e, ROOT_INO, 7).into_iter().collect::<BTreeSet<_>>(), want);
    e.close().unwrap();
}

#[test]
fn a_crash_keeps_the_last_commit_and_loses_later_changes_whole() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    {
        let e = Engine::open(&pool, &slow_txg()).unwrap();
        let a = write_new_file(&e, "a", &vec![7u8; 300_000]).unwrap();
        create_file(&e, b"b").unwrap();
        e.sync().unwrap();
        // after the commit: a rename-like move, a delete with data, new files
        e.meta_write(|tx| {
            let (ino, kind) = tx.dir_remove(ROOT_INO, b"b")?;
            tx.dir_insert(ROOT_INO, b"b2", ino, kind)
        })
        .unwrap();
        delete_file(&e, b"a").unwrap();
        for i in 0..50 {
            create_file(&e, format!("late{i}").as_bytes()).unwrap();
        }
        assert!(e.getattr(a).is_err());
        drop(e); // crash: no close
    }
    let e = Engine::open(&pool, &slow_txg()).unwrap();
    assert_eq!(names(&e, ROOT_INO, 100), vec!["a", "b"]);
    let (a, _) = e.lookup(ROOT_INO, b"a").unwrap().unwrap();
    assert_eq!(read_all(&e, a).unwrap(), vec![7u8; 300_000]);
    assert_fsck_clean(&e, "after the crash");
    // the numbers handed out before the crash are not reused by new inodes of an open txg
    let c = create_file(&e, b"c").unwrap();
    assert!(c > a);
    e.close().unwrap();
}

#[test]
fn deleting_a_file_frees_its_space_at_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &OpenOptions { compression: "none".parse().unwrap(), ..slow_txg() }).unwrap();
    let used = |e: &Engine| e.device_stats().iter().map(|d| d.used_bytes).sum::<u64>();
    let base = used(&e);
    write_new_file(&e, "big", &vec![1u8; 4 << 20]).unwrap();
    e.sync().unwrap();
    assert!(used(&e) >= base + (4 << 20));
    delete_file(&e, b"big").unwrap();
    assert!(used(&e) >= base + (4 << 20), "space stays allocated until the delete commits");
    e.sync().unwrap();
    assert!(used(&e) < base + (1 << 20), "freed by the commit: {} vs {}", used(&e), base);
    assert_fsck_clean(&e, "after the delete");
    e.close().unwrap();
}

#[test]
fn creates_go_on_while_commits_run() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = std::sync::Arc::new(
        Engine::open(&pool, &OpenOptions { txg_timeout: Duration::from_millis(5), ..Default::default() }).unwrap(),
    );
    let writer = {
        let e = e.clone();
        std::thread::spawn(move || {
            for i in 0..3000 {
                let ino = create_file(&e, format!("f{i}").as_bytes()).unwrap();
                // read back at once, whatever the commit is doing
                assert_eq!(e.lookup(ROOT_INO, format!("f{i}").as_bytes()).unwrap(), Some((ino, FileKind::File)));
                e.getattr(ino).unwrap();
                if i % 3 == 0 {
                    e.meta_write(|tx| tx.set_xattr(ino, b"user.i", format!("{i}").as_bytes())).unwrap();
                }
            }
        })
    };
    for _ in 0..20 {
        e.sync().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    writer.join().unwrap();
    assert_eq!(names(&e, ROOT_INO, 500).len(), 3000);
    let e = std::sync::Arc::try_unwrap(e).ok().unwrap();
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    assert_eq!(names(&e, ROOT_INO, 500).len(), 3000);
    let (ino, _) = e.lookup(ROOT_INO, b"f2997").unwrap().unwrap();
    assert_eq!(e.get_xattr(ino, b"user.i").unwrap().as_deref(), Some(&b"2997"[..]));
    assert_fsck_clean(&e, "after concurrent creates and commits");
    e.close().unwrap();
}

#[test]
fn a_large_delta_is_committed_without_waiting_for_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    // creates are 3 rows each: 100 rows ask for a commit, 400 make writers wait for one
    let e = Engine::open(&pool, &OpenOptions { max_delta_rows: 100, ..slow_txg() }).unwrap();
    let synced = e.info().last_txg;
    for i in 0..400 {
        create_file(&e, format!("f{i}").as_bytes()).unwrap();
    }
    // without the bound nothing would commit for an hour
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while e.info().last_txg < synced + 2 {
        assert!(std::time::Instant::now() < deadline, "no commit asked for by the delta's size");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(e); // crash: what was committed must be a consistent prefix
    let e = Engine::open(&pool, &slow_txg()).unwrap();
    let n = names(&e, ROOT_INO, 1000).len();
    assert!(n > 0 && n <= 400, "{n} of 400 kept");
    assert_fsck_clean(&e, "after a crash with the delta bounded");
    e.close().unwrap();
}
