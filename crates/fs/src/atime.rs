//! Access-time updates decided by a read but not yet written.
//!
//! relatime makes the first read after a change update atime; written inside the READ
//! request, that metadata transaction took about a third of a small file's read time (tree
//! reads: ~55 µs per file). So a read only *decides* the update here, the adapter replies,
//! and then writes it (`Fs::write_atime`). Until the write commits, `Fs::stat` shows the
//! pending value, so a stat right after the read sees the new atime. The write is skipped
//! when the inode's ctime changed since the decision (a setattr or write came in between:
//! its attributes win, and relatime decides again at the next read).
//!
//! States per inode: absent → pending (read decided) → absent (written, or skipped).
use parking_lot::Mutex;
use squeezefs_pipeline::{Ino, Timestamp};
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PendingAtime {
    /// the new atime
    pub atime: Timestamp,
    /// ctime the decision was based on
    pub ctime: Timestamp,
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
        fs.setattr(&c, a.ino, &SetAttr { atime: Some(TimeSet::At(OLD)), ..Default::default() }).unwrap();
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

    #[test]
    fn setattr_between_read_and_atime_write_wins() {
        let (_d, fs) = new_fs();
        let ino = old_file(&fs);
        let mut buf = [0u8; 16];
        fs.read_into(ino, 0, &mut buf).unwrap();
        let later = Timestamp { secs: 1_100_000_000, nanos: 0 };
        fs.setattr(&Creds::root(), ino, &SetAttr { atime: Some(TimeSet::At(later)), ..Default::default() })
            .unwrap();
        // the setattr changed ctime: the read's decision is dropped, the explicit atime stays
        fs.write_atime(ino);
        assert_eq!(fs.engine.getattr(ino).unwrap().atime, later);
        assert_eq!(fs.getattr(ino).unwrap().atime, later);
    }
}
