/*
 * The attribute overlay: inode attribute changes (chmod, chown, utimens, the kernel's
 * writeback time flush) kept in memory and written to redb by the next txg commit, instead
 * of one redb write transaction per change. A tar extract sends four such SETATTRs per
 * file; each used to cost a full (non-durable) redb commit.
 *
 * State per inode: ABSENT (redb holds the current attributes) or PRESENT (the overlay holds
 * the whole current attribute record; its `size`/`blocks_bytes` are ignored: the data path
 * owns those).
 * Transitions, all under `meta_lock` (the lock every metadata writer takes first, before
 * redb's write lock — `Engine::meta_write`, `Engine::update_attr`, the txg commit):
 *   ABSENT/PRESENT → PRESENT   `update_attr` stores the changed record;
 *   PRESENT → ABSENT           a `meta_write` that wrote or deleted the inode committed (its
 *                              redb record was derived from the overlay's, so nothing is lost);
 *                              the txg commit wrote the overlay into its durable transaction.
 * Readers (`getattr`, `MetaTx::get_inode`) take only the map's own lock: the overlay if
 * PRESENT, else redb. A reader racing a writer sees the state before or after the change,
 * never a mix: entries leave the overlay only after redb holds the same values.
 * Durability: like a non-durable namespace commit, an overlay change is durable when the
 * next txg commits; `fsync`/`sync` wait for that commit (`update_attr` marks the txg dirty).
 */

use parking_lot::Mutex;
use squeezefs_meta::{InodeAttr, Ino};
use std::collections::HashMap;

#[derive(Default)]
pub struct AttrOverlay {
    /// Serializes metadata writers (see above); taken before redb's write lock.
    pub meta_lock: Mutex<()>,
    map: Mutex<HashMap<Ino, InodeAttr>>,
}

impl AttrOverlay {
    /// The overlay's record of `ino`, if it holds one.
    pub fn get(&self, ino: Ino) -> Option<InodeAttr> {
        self.map.lock().get(&ino).cloned()
    }

    /// Caller holds `meta_lock`.
    pub fn put(&self, attr: InodeAttr) {
        self.map.lock().insert(attr.ino, attr);
    }

    /// Caller holds `meta_lock`; redb now holds `ino`'s current record (or none).
    pub fn forget(&self, ino: Ino) {
        self.map.lock().remove(&ino);
    }

    /// Every record, for the txg commit (caller holds `meta_lock` until it has committed
    /// them and called `forget_all`).
    pub fn snapshot(&self) -> Vec<InodeAttr> {
        self.map.lock().values().cloned().collect()
    }

    /// Caller holds `meta_lock`; the records of `snapshot` are committed.
    pub fn forget_all(&self, inos: impl IntoIterator<Item = Ino>) {
        let mut m = self.map.lock();
        for ino in inos {
            m.remove(&ino);
        }
    }
}

/// `overlay`'s attributes with the size and physical bytes of `base` (which knows them).
pub fn with_sizes_of(mut overlay: InodeAttr, base: &InodeAttr) -> InodeAttr {
    overlay.size = base.size;
    overlay.blocks_bytes = base.blocks_bytes;
    overlay
}
