//! Access-time updates decided by a read but not yet written.
//!
//! relatime makes the first read after a change update atime; written inside the READ
//! request, that metadata transaction took about a third of a small file's read time (tree
//! reads: ~55 µs per file). So a read only *decides* the update here, the adapter replies,
//! and then writes it (`Fs::write_atime`). Until the write commits, `Fs::stat` shows the
//! pending value, so a stat right after the read sees the new atime.
//!
//! A decision holds the atime it was based on (`seen`). It applies, and shows, only while
//! the inode's atime is still that one: an explicit atime (utimensat) that came in between
//! wins, as it would after a synchronous update. Timestamps cannot tell the two apart: they
//! come from the tick clock (pipeline `now`), so the setattr's ctime may equal the one the
//! read saw; `Fs::setattr` therefore also forgets the decision under the metadata lock.
//!
//! States per inode: absent → pending (read decided) → absent (written, forgotten by an
//! explicit atime, or skipped because atime changed).
use parking_lot::Mutex;
use squeezefs_pipeline::{Ino, Timestamp};
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PendingAtime {
    /// the new atime
    pub atime: Timestamp,
    /// the inode's atime when the read decided
    pub seen: Timestamp,
}

impl PendingAtime {
    /// The atime to show or write over `current`: the decision's, while `current` is still
    /// the atime it was based on.
    pub fn applies_to(&self, current: Timestamp) -> bool {
        current == self.seen && current < self.atime
    }
}

#[derive(Default)]
pub struct PendingAtimes {
    map: Mutex<HashMap<Ino, PendingAtime>>,
}

impl PendingAtimes {
    pub fn get(&self, ino: Ino) -> Option<PendingAtime> {
        self.map.lock().get(&ino).copied()
    }

    pub fn insert(&self, ino: Ino, p: PendingAtime) {
        self.map.lock().insert(ino, p);
    }

    /// Drop `ino`'s decision (an explicit atime replaces it).
    pub fn forget(&self, ino: Ino) {
        self.map.lock().remove(&ino);
    }

    /// Forget `ino`'s entry if it is still `p` (a newer decision stays for its own write).
    pub fn remove_if(&self, ino: Ino, p: PendingAtime) {
        let mut m = self.map.lock();
        if m.get(&ino) == Some(&p) {
            m.remove(&ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::new_fs;
    use crate::{Creds, SetAttr, TimeSet};
    use squeezefs_pipeline::{Timestamp, ROOT_INO};

    const OLD: Timestamp = Timestamp { secs: 1_000_000_000, nanos: 0 };

    fn old_file(fs: &crate::Fs) -> u64 {
        let c = Creds::root();
        let (a, fh) = fs.create(&c, ROOT_INO, b"f", 0o644, libc::O_RDWR).unwrap();
        fs.write(&c, a.ino, 0, b"data", false).unwrap();
        fs.release(fh).unwrap();
        // all three times in the past, so the read's new atime is newer than mtime and ctime
        // whatever the tick clock reads
        let old = SetAttr {
            atime: Some(TimeSet::At(OLD)),
            mtime: Some(TimeSet::At(OLD)),
            ctime: Some(OLD),
            ..Default::default()
        };
        fs.setattr(&c, a.ino, &old).unwrap();
        a.ino
    }

    #[test]
    fn read_shows_new_atime_before_and_after_the_deferred_write() {
        let (_d, fs) = new_fs();
        let ino = old_file(&fs);
        let mut buf = [0u8; 16];
        assert_eq!(fs.read_into(ino, 0, &mut buf).unwrap(), 4);
        let shown = fs.getattr(ino).unwrap().atime;
        assert!(shown > OLD, "stat after the read must show the new atime");
        assert_eq!(fs.engine.getattr(ino).unwrap().atime, OLD, "not written before write_atime");
        fs.write_atime(ino);
        assert_eq!(fs.engine.getattr(ino).unwrap().atime, shown);
        assert!(fs.atimes.get(ino).is_none());
        // the new atime is newer than ctime: the next read decides nothing
        fs.read_into(ino, 0, &mut buf).unwrap();
        assert!(fs.atimes.get(ino).is_none());
    }

    /// Regression: with tick-clock timestamps an explicit atime set right after a read left
    /// ctime unchanged, so the read's deferred atime overwrote it.
    #[test]
    fn setattr_between_read_and_atime_write_wins() {
        let (_d, fs) = new_fs();
        let ino = old_file(&fs);
        let mut buf = [0u8; 16];
        fs.read_into(ino, 0, &mut buf).unwrap();
        let later = Timestamp { secs: 1_100_000_000, nanos: 0 };
        fs.setattr(&Creds::root(), ino, &SetAttr { atime: Some(TimeSet::At(later)), ..Default::default() }).unwrap();
        assert_eq!(fs.getattr(ino).unwrap().atime, later, "stat shows the explicit atime at once");
        // the read's decision is dropped, the explicit atime stays
        fs.write_atime(ino);
        assert_eq!(fs.engine.getattr(ino).unwrap().atime, later);
        assert_eq!(fs.getattr(ino).unwrap().atime, later);
    }
}
