//! Writing, pruning and finding metadata backups in the bucket (formats: backup.rs), and
//! the protection they give the segments they reference.
//!
//! A backup is taken in two steps. [`ObjectDevice::snapshot_map`] dumps the committed map
//! (under the sync lock: no commit runs meanwhile) and, in the same critical section,
//! protects every segment the dump references, so no later sync deletes one of them
//! before the backup is written. [`ObjectDevice::write_backup`] uploads the `.bak`, then its
//! `.done`, then prunes the backups past the newest `keep`: their protection ends, and
//! segments only they held are deleted at once if the map no longer references them.
//!
//! INVARIANT: a segment that a complete backup in the bucket references is protected from
//! the moment its dump was taken until that backup's manifest is deleted; at open the
//! protection is rebuilt from the manifests in the bucket.

use crate::backup::{
    backup_name, check_image, complete_generations, parse_backup_name, BackupImage, BackupPart, Manifest, MapDump,
    BACKUP_DIR,
};
use crate::config::StoreConfig;
use crate::device::ObjectDevice;
use crate::error::ObjectError;
use crate::segment::SEGMENT_DIR;
use crate::spec::ObjectSpec;
use crate::store::{RequestLimits, Store};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use xxhash_rust::xxh3::xxh3_64;

/// The segments backups hold, and the next generation number.
#[derive(Debug, Default)]
pub(crate) struct Protection {
    /// generation → segments its map references: complete backups in the bucket, and the
    /// one being written
    by_generation: BTreeMap<u64, Vec<u64>>,
    union: BTreeSet<u64>,
    next_generation: u64,
    /// txg of the newest complete backup
    newest_txg: Option<u64>,
}

impl Protection {
    pub(crate) fn covers(&self, segment: u64) -> bool {
        self.union.contains(&segment)
    }

    fn set(&mut self, generation: u64, segments: Vec<u64>) {
        self.by_generation.insert(generation, segments);
        self.rebuild();
    }

    /// End the protection of `generations`; the segments they held that no other
    /// generation holds.
    fn end(&mut self, generations: &[u64]) -> Vec<u64> {
        let mut freed: BTreeSet<u64> = BTreeSet::new();
        for g in generations {
            freed.extend(self.by_generation.remove(g).unwrap_or_default());
        }
        self.rebuild();
        freed.into_iter().filter(|s| !self.union.contains(s)).collect()
    }

    fn rebuild(&mut self) {
        self.union = self.by_generation.values().flatten().copied().collect();
    }

    /// From the backups in the bucket: every readable manifest protects its segments. One
    /// that cannot be read is not a restorable backup and protects nothing (a warning says
    /// so).
    pub(crate) fn load(store: &Store) -> Result<Protection, ObjectError> {
        let names: Vec<String> = store.list(BACKUP_DIR)?.into_iter().map(|(n, _)| n).collect();
        let mut p = Protection {
            next_generation: names.iter().filter_map(|n| parse_backup_name(n)).map(|(g, _)| g + 1).max().unwrap_or(1),
            ..Default::default()
        };
        for g in complete_generations(&names) {
            let name = backup_name(g, BackupPart::Manifest);
            match store.get(&name)?.map(|b| Manifest::decode(&b)) {
                Some(Ok(m)) => {
                    p.newest_txg = Some(p.newest_txg.unwrap_or(0).max(m.txg));
                    p.by_generation.insert(g, m.segments);
                }
                Some(Err(e)) => log::warn!("{}: backup manifest {name}: {e}; it is not a backup", store.spec()),
                None => {}
            }
        }
        p.rebuild();
        Ok(p)
    }
}

/// A dump of the committed map, its segments protected until written or dropped.
#[derive(Debug)]
pub struct MapSnapshot {
    pub generation: u64,
    pub map: MapDump,
}

/// What writing a backup did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupReport {
    pub generation: u64,
    pub txg: u64,
    /// bytes of the `.bak`
    pub bytes: u64,
    /// older backups deleted
    pub pruned: u64,
}

/// The newest complete backup of a prefix, checked, as a restore takes it.
#[derive(Debug)]
pub struct FoundBackup {
    pub image: BackupImage,
    /// newer backups passed over, each with why (damaged)
    pub skipped: Vec<String>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl ObjectDevice {
    /// Dump the committed map for a backup, protecting the segments it references (block
    /// comment). The caller takes it while no engine commit runs, so that the dump and the
    /// metadata store are of the same commit.
    pub fn snapshot_map(&self) -> Result<MapSnapshot, ObjectError> {
        let _g = self.sync_lock.lock();
        let map = self.map.dump()?;
        let mut p = self.protection.lock();
        let generation = p.next_generation;
        p.next_generation += 1;
        p.set(generation, map.referenced());
        Ok(MapSnapshot { generation, map })
    }

    /// Give up a snapshot that will not be written: its protection ends.
    pub fn drop_snapshot(&self, snap: MapSnapshot) {
        self.protection.lock().end(&[snap.generation]);
    }

    /// Upload the backup of `snap` and the metadata store `meta_seal` (of commit `txg`):
    /// the `.bak`, then its manifest; then keep only the newest `keep` backups (at least 1).
    /// A failed upload leaves no manifest (the backup is not one) and ends its protection.
    pub fn write_backup(
        &self,
        snap: MapSnapshot,
        txg: u64,
        meta_seal: Vec<u8>,
        keep: usize,
    ) -> Result<BackupReport, ObjectError> {
        let generation = snap.generation;
        let segments = snap.map.referenced();
        let image = BackupImage { generation, txg, created: now_secs(), meta_seal, map: snap.map };
        let bytes = image.encode();
        let manifest = Manifest {
            generation,
            txg,
            created: image.created,
            image_len: bytes.len() as u64,
            image_xxh3: xxh3_64(&bytes),
            segments,
        };
        let len = bytes.len() as u64;
        let put = self.store.put(&backup_name(generation, BackupPart::Image), Bytes::from(bytes)).and_then(|()| {
            self.store.put(&backup_name(generation, BackupPart::Manifest), Bytes::from(manifest.encode()))
        });
        if let Err(e) = put {
            self.protection.lock().end(&[generation]);
            return Err(e);
        }
        {
            let mut p = self.protection.lock();
            p.newest_txg = Some(p.newest_txg.unwrap_or(0).max(txg));
        }
        let pruned = self.prune(generation, keep.max(1))?;
        Ok(BackupReport { generation, txg, bytes: len, pruned })
    }

    /// Delete backups older than the newest `keep` complete ones, and `.bak` objects older
    /// than `current` that never got a manifest; then the segments that only the pruned
    /// backups held and the map no longer references.
    fn prune(&self, current: u64, keep: usize) -> Result<u64, ObjectError> {
        let names: Vec<String> = self.store.list(BACKUP_DIR)?.into_iter().map(|(n, _)| n).collect();
        let complete = complete_generations(&names);
        let old: Vec<u64> = complete.iter().skip(keep).copied().collect();
        for g in &old {
            // the manifest first: from then on the generation is not a backup
            self.store.delete(&backup_name(*g, BackupPart::Manifest))?;
            self.store.delete(&backup_name(*g, BackupPart::Image))?;
        }
        for n in &names {
            if let Some((g, BackupPart::Image)) = parse_backup_name(n) {
                if g < current && !complete.contains(&g) {
                    self.store.delete(n)?;
                }
            }
        }
        if !old.is_empty() {
            let _g = self.sync_lock.lock();
            let freed = self.protection.lock().end(&old);
            self.delete_dead();
            self.delete_unmapped(&freed)?;
        }
        Ok(old.len() as u64)
    }

    /// Delete the objects of `segments` that the map does not hold (a restored pool's map
    /// holds fewer segments than the older backups it kept): once no backup protects them,
    /// nothing refers to them. Called with the sync lock held.
    fn delete_unmapped(&self, segments: &[u64]) -> Result<(), ObjectError> {
        let doomed: Vec<u64> = {
            let st = self.state.lock();
            segments.iter().copied().filter(|id| !st.holds(*id)).collect()
        };
        if doomed.is_empty() {
            return Ok(());
        }
        let _excl = self.gate.write();
        for id in doomed {
            self.store.delete(&crate::segment::segment_name(id))?;
            self.io.drop_segment(id);
            self.cache.drop_segment(id);
            self.readahead.lock().drop_segment(id);
            self.deleted_segments.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// A new map file at `map_path` holding the map of a found backup (a restore); the
    /// device then opens on it.
    pub fn restore_map(map_path: &std::path::Path, dump: &MapDump) -> Result<(), ObjectError> {
        crate::map::MapStore::restore(map_path, dump)
    }

    /// The txg of the newest complete backup in the bucket, if there is one.
    pub fn newest_backup_txg(&self) -> Option<u64> {
        self.protection.lock().newest_txg
    }

    /// The newest complete, undamaged backup of `spec` (a restore). Errors name the
    /// problem: no credentials, the store or bucket not there, no backup at all.
    pub fn find_backup(spec: &ObjectSpec, cfg: &StoreConfig) -> Result<FoundBackup, ObjectError> {
        let store = Store::connect(spec, cfg, &RequestLimits::default())?;
        let names: Vec<String> = store.list(BACKUP_DIR)?.into_iter().map(|(n, _)| n).collect();
        let complete = complete_generations(&names);
        if complete.is_empty() {
            let segments = store.list(SEGMENT_DIR)?.len();
            let detail = match (names.len(), segments) {
                (0, 0) => "the prefix holds no pool".to_string(),
                (0, n) => format!("{n} segment objects but no backup objects"),
                (n, _) => format!("{n} backup objects, none with its manifest"),
            };
            return Err(ObjectError::NoBackup { spec: spec.to_string(), detail });
        }
        let mut skipped = Vec::new();
        for g in complete {
            let key = spec.key(&backup_name(g, BackupPart::Image));
            let manifest = match store.get(&backup_name(g, BackupPart::Manifest))? {
                Some(b) => Manifest::decode(&b),
                None => continue,
            };
            let checked = manifest.and_then(|m| match store.get(&backup_name(g, BackupPart::Image)) {
                Ok(Some(img)) => check_image(&m, &img),
                Ok(None) => Err("the object is missing".into()),
                Err(e) => Err(e.to_string()),
            });
            match checked {
                Ok(image) => return Ok(FoundBackup { image, skipped }),
                Err(detail) => {
                    log::warn!("{spec}: backup {key} is damaged ({detail}); trying the one before it");
                    skipped.push(format!("{key}: {detail}"));
                }
            }
        }
        Err(ObjectError::BadBackup { spec: spec.to_string(), key: spec.key(BACKUP_DIR), detail: skipped.join("; ") })
    }
}
