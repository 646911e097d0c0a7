//! Open file and directory handles: fh number → (inode, open flags).
use parking_lot::Mutex;
use squeezefs_pipeline::Ino;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Copy, Debug)]
pub struct Handle {
    pub ino: Ino,
    /// opened for writing: with the kernel writeback cache, the kernel may hold data of this
    /// inode that the fs has not seen yet
    pub write: bool,
}

pub struct Handles {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Handle>>,
    /// striped locks serialising "read size, write at size" of O_APPEND writers
    append: Vec<Mutex<()>>,
}

impl Default for Handles {
    fn default() -> Self {
        Handles {
            next: AtomicU64::new(1),
            map: Mutex::new(HashMap::new()),
            append: (0..64).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl Handles {
    pub fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.map.lock().insert(fh, h);
        fh
    }
    pub fn append_lock(&self, ino: Ino) -> parking_lot::MutexGuard<'_, ()> {
        self.append[(ino as usize) % self.append.len()].lock()
    }
    /// Some open handle of `ino` can write.
    pub fn has_writer(&self, ino: Ino) -> bool {
        self.map.lock().values().any(|h| h.ino == ino && h.write)
    }
    pub fn get(&self, fh: u64) -> Option<Handle> {
        self.map.lock().get(&fh).copied()
    }
    pub fn remove(&self, fh: u64) -> Option<Handle> {
        self.map.lock().remove(&fh)
    }
}
