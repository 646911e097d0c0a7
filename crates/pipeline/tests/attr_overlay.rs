//! `Engine::update_attr`: attribute changes kept in memory (attrs.rs) and written by the next
//! txg commit. They must be visible at once, durable after sync, merged with namespace
//! transactions on the same inode (neither side loses the other's change), dropped with
//! the inode, and leave nothing behind when the closure fails.

mod crash_common;

use crash_common::{create_file, delete_file};
use squeezefs_pipeline::{Engine, EngineError, InodeAttr, MkfsOptions, OpenOptions, Timestamp};

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
    assert_ne!(e.committed_attr(ino).unwrap().mtime, ts(1_000), "not a redb transaction");

    // a namespace transaction on the same inode sees the overlay and keeps it
    e.meta_write(|tx| {
        let mut a = tx.get_inode(ino)?;
        assert_eq!(a.mtime, ts(1_000));
        a.uid = 77;
        tx.put_inode(&a)
    })
    .unwrap();
    let a = e.getattr(ino).unwrap();
    assert_eq!((a.mtime, a.uid), (ts(1_000), 77));

    // and an overlay change after it keeps the transaction's change
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
        Err(EngineError::Invalid("refused".into()))
    });
    assert!(r.is_err());
    assert_eq!(e.getattr(ino).unwrap().perm, 0o600);

    // durable with the txg: sync, close, reopen
    e.sync().unwrap();
    let c = e.committed_attr(ino).unwrap();
    assert_eq!((c.mtime, c.uid, c.perm, c.size), (ts(1_000), 77, 0o600, 10));
    set_mtime(&e, ino, 2_000);
    e.close().unwrap(); // the final txg writes the overlay too
    drop(e);
    let e = Engine::open(&pool, &OpenOptions::default()).unwrap();
    let a = e.getattr(ino).unwrap();
    assert_eq!((a.mtime, a.uid, a.perm, a.size), (ts(2_000), 77, 0o600, 10));

    // deleting the inode drops its overlay entry: the next commit must not resurrect it
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
