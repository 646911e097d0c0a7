//! The local read cache: blocks of segment objects (segment.rs `BLOCK`), one file each
//! (`SSSSSSSSSSSSSSSS.BBBBBBBB`: segment and block number in hex) in a directory, at most
//! a configured number of bytes, least recently used evicted first. Segments never change,
//! so a cached block is never stale; a block file is checked against the map's checksum on
//! every read, so a torn or damaged file is a miss (and removed), never wrong data.
//! Filled when a segment is uploaded (recent writes read back without a GET) and on GETs.

use crate::error::ObjectError;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

type Key = (u64, u64);

#[derive(Default)]
struct Index {
    /// key -> (bytes, last use)
    entries: HashMap<Key, (u64, u64)>,
    by_use: BTreeMap<u64, Key>,
    tick: u64,
    bytes: u64,
}

pub struct ReadCache {
    dir: PathBuf,
    capacity: u64,
    index: Mutex<Index>,
}

/// Counters for stats and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUse {
    pub bytes: u64,
    pub blocks: u64,
}

impl ReadCache {
    /// The cache in `dir` (created if missing), holding at most `capacity` bytes; the blocks
    /// already there are kept, oldest first in line for eviction. `capacity` 0: no cache.
    pub fn open(dir: &Path, capacity: u64) -> Result<ReadCache, ObjectError> {
        let cache = ReadCache { dir: dir.to_path_buf(), capacity, index: Mutex::new(Index::default()) };
        if capacity == 0 {
            return Ok(cache);
        }
        let err = |source| ObjectError::Cache { path: dir.display().to_string(), source };
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir).map_err(err)? {
            let e = e.map_err(err)?;
            let name = e.file_name();
            let Some(key) = name.to_str().and_then(parse_name) else { continue };
            let Ok(md) = e.metadata() else { continue };
            let mtime =
                md.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default();
            found.push((mtime, key, md.len()));
        }
        found.sort();
        {
            let mut ix = cache.index.lock();
            for (_, key, len) in found {
                cache.note(&mut ix, key, len);
            }
        }
        cache.evict();
        Ok(cache)
    }

    fn path(&self, (seg, block): Key) -> PathBuf {
        self.dir.join(format!("{seg:016x}.{block:08x}"))
    }

    fn note(&self, ix: &mut Index, key: Key, len: u64) {
        ix.tick += 1;
        let tick = ix.tick;
        if let Some((old_len, old_tick)) = ix.entries.insert(key, (len, tick)) {
            ix.by_use.remove(&old_tick);
            ix.bytes -= old_len;
        }
        ix.by_use.insert(tick, key);
        ix.bytes += len;
    }

    fn forget(&self, ix: &mut Index, key: Key) {
        if let Some((len, tick)) = ix.entries.remove(&key) {
            ix.by_use.remove(&tick);
            ix.bytes -= len;
        }
    }

    fn evict(&self) {
        let mut victims = Vec::new();
        {
            let mut ix = self.index.lock();
            while ix.bytes > self.capacity {
                let Some((_, key)) = ix.by_use.pop_first() else { break };
                if let Some((len, _)) = ix.entries.remove(&key) {
                    ix.bytes -= len;
                }
                victims.push(key);
            }
        }
        for k in victims {
            let _ = std::fs::remove_file(self.path(k));
        }
    }

    /// Whether blocks are kept at all (capacity above 0).
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Whether block `block` of segment `seg` is in the cache (not checked).
    pub fn contains(&self, seg: u64, block: u64) -> bool {
        self.capacity > 0 && self.index.lock().entries.contains_key(&(seg, block))
    }

    /// Block `block` of segment `seg`, if cached and matching `checksum`.
    pub fn get(&self, seg: u64, block: u64, checksum: u64) -> Option<Vec<u8>> {
        if self.capacity == 0 {
            return None;
        }
        let key = (seg, block);
        if !self.index.lock().entries.contains_key(&key) {
            return None;
        }
        match std::fs::read(self.path(key)) {
            Ok(data) if xxh3_64(&data) == checksum => {
                let mut ix = self.index.lock();
                if ix.entries.contains_key(&key) {
                    self.note(&mut ix, key, data.len() as u64);
                }
                Some(data)
            }
            Ok(_) => {
                log::warn!(
                    "read cache {}: block {block} of segment {seg} is damaged; reading it from the store",
                    self.dir.display()
                );
                self.forget(&mut self.index.lock(), key);
                let _ = std::fs::remove_file(self.path(key));
                None
            }
            Err(_) => {
                self.forget(&mut self.index.lock(), key);
                None
            }
        }
    }

    /// Keep `data` as block `block` of segment `seg`. Best effort: a cache that cannot be
    /// written (disk full) only costs GETs.
    pub fn put(&self, seg: u64, block: u64, data: &[u8]) {
        if self.capacity == 0 || data.len() as u64 > self.capacity {
            return;
        }
        let key = (seg, block);
        if let Err(e) = std::fs::write(self.path(key), data) {
            log::debug!("read cache {}: cannot keep a block: {e}", self.dir.display());
            return;
        }
        self.note(&mut self.index.lock(), key, data.len() as u64);
        self.evict();
    }

    /// Drop block `block` of segment `seg`, if cached.
    pub fn remove(&self, seg: u64, block: u64) {
        self.forget(&mut self.index.lock(), (seg, block));
        let _ = std::fs::remove_file(self.path((seg, block)));
    }

    /// Drop every block of segment `seg` (its object is deleted).
    pub fn drop_segment(&self, seg: u64) {
        let keys: Vec<Key> = self.index.lock().entries.keys().filter(|k| k.0 == seg).copied().collect();
        for k in keys {
            self.forget(&mut self.index.lock(), k);
            let _ = std::fs::remove_file(self.path(k));
        }
    }

    /// Drop every block (the cache is emptied, e.g. before a cold-read measurement).
    pub fn clear(&self) {
        let keys: Vec<Key> = self.index.lock().entries.keys().copied().collect();
        for k in keys {
            self.forget(&mut self.index.lock(), k);
            let _ = std::fs::remove_file(self.path(k));
        }
    }

    pub fn usage(&self) -> CacheUse {
        let ix = self.index.lock();
        CacheUse { bytes: ix.bytes, blocks: ix.entries.len() as u64 }
    }
}

fn parse_name(name: &str) -> Option<Key> {
    let (s, b) = name.split_once('.')?;
    if s.len() != 16 || b.len() != 8 {
        return None;
    }
    Some((u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_evicts_least_recent_and_rejects_damaged_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let c = ReadCache::open(dir.path(), 300).unwrap();
        let blocks: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 100]).collect();
        c.put(1, 0, &blocks[0]);
        c.put(1, 1, &blocks[1]);
        c.put(2, 0, &blocks[2]);
        assert_eq!(c.get(1, 0, xxh3_64(&blocks[0])), Some(blocks[0].clone())); // now most recent
        c.put(2, 1, &blocks[3]); // evicts (1,1), the least recently used
        assert_eq!(c.usage(), CacheUse { bytes: 300, blocks: 3 });
        assert_eq!(c.get(1, 1, xxh3_64(&blocks[1])), None);
        assert!(c.get(1, 0, xxh3_64(&blocks[0])).is_some());
        // a damaged file is a miss and leaves the cache
        std::fs::write(dir.path().join(format!("{:016x}.{:08x}", 2, 0)), b"torn").unwrap();
        assert_eq!(c.get(2, 0, xxh3_64(&blocks[2])), None);
        assert_eq!(c.usage().blocks, 2);
        // reopened, the blocks on disk are found again
        drop(c);
        let c = ReadCache::open(dir.path(), 300).unwrap();
        assert_eq!(c.usage().blocks, 2);
        assert!(c.get(2, 1, xxh3_64(&blocks[3])).is_some());
        c.clear();
        assert_eq!(c.usage().blocks, 0);
    }
}
