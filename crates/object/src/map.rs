//! The durable object map, a redb file in the pool directory (`object.N.redb` for device
//! N): which device ranges live in which segment objects, each segment's size, live bytes
//! and block checksums, the next segment number and the device length. A commit (one redb
//! write transaction, durable when it returns) replays the ops the device made since the
//! last one (extents.rs), adds the segments uploaded since, and adjusts live bytes.
//!
//! INVARIANT: every segment this map references was completely uploaded before the commit
//! that added it; segment numbers at or above `next_segment` are referenced by nothing
//! (a crash between an upload and its commit leaves such objects, swept at open).

use crate::backup::MapDump;
use crate::error::ObjectError;
use crate::extents::{live_deltas, Extent, Extents, Op};
use crate::segment::SegmentRow;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Version of the map's tables and rows.
pub const MAP_VERSION: u64 = 1;

const STATE: TableDefinition<&str, u64> = TableDefinition::new("state");
const STORE: TableDefinition<&str, &str> = TableDefinition::new("store");
const EXTENTS: TableDefinition<u64, (u64, u64, u64)> = TableDefinition::new("extents");
const SEGMENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("segments");

/// What a map holds, loaded at open.
#[derive(Debug, Default)]
pub struct Loaded {
    pub extents: Extents,
    pub segments: BTreeMap<u64, SegmentRow>,
    pub next_segment: u64,
    pub device_len: u64,
}

/// The changes of one commit.
#[derive(Debug, Default)]
pub struct Commit<'a> {
    pub ops: &'a [Op],
    pub new_segments: Vec<(u64, SegmentRow)>,
    /// segments no extent references any more, whose objects were deleted or are about to be
    pub dropped_segments: Vec<u64>,
    pub next_segment: u64,
    pub device_len: u64,
}

/// The backend a crash test put under a map (`testing::arm_map_backend`).
#[derive(Debug)]
struct Hooked(Box<dyn redb::StorageBackend>);

impl redb::StorageBackend for Hooked {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.0.close()
    }
}

pub struct MapStore {
    path: PathBuf,
    db: redb::Database,
}

impl MapStore {
    /// A new, empty map for `spec` at `path` (an existing file is replaced).
    pub fn create(path: &Path, spec: &str) -> Result<MapStore, ObjectError> {
        if path.exists() {
            std::fs::remove_file(path).map_err(|e| ObjectError::map(path, e))?;
        }
        let db = redb::Database::create(path).map_err(|e| ObjectError::map(path, e))?;
        let tx = db.begin_write().map_err(|e| ObjectError::map(path, e))?;
        {
            let mut st = tx.open_table(STATE).map_err(|e| ObjectError::map(path, e))?;
            for (k, v) in [("version", MAP_VERSION), ("next_segment", 1), ("device_len", 0)] {
                st.insert(k, v).map_err(|e| ObjectError::map(path, e))?;
            }
            tx.open_table(STORE)
                .map_err(|e| ObjectError::map(path, e))?
                .insert("spec", spec)
                .map_err(|e| ObjectError::map(path, e))?;
            tx.open_table(EXTENTS).map_err(|e| ObjectError::map(path, e))?;
            tx.open_table(SEGMENTS).map_err(|e| ObjectError::map(path, e))?;
        }
        tx.commit().map_err(|e| ObjectError::map(path, e))?;
        Ok(MapStore { path: path.to_path_buf(), db })
    }

    /// Open the map at `path`, which must belong to `spec`, and load it.
    pub fn open(path: &Path, spec: &str) -> Result<(MapStore, Loaded), ObjectError> {
        let m = |e: &dyn std::fmt::Display| ObjectError::map(path, e);
        let db = match crate::testing::map_backend_for(path) {
            Some(make) => redb::Builder::new().create_with_backend(Hooked(make(path).map_err(|e| m(&e))?)),
            None => redb::Database::open(path),
        }
        .map_err(|e| m(&e))?;
        let rx = db.begin_read().map_err(|e| m(&e))?;
        let st = rx.open_table(STATE).map_err(|e| m(&e))?;
        let get = |k: &str| -> Result<u64, ObjectError> {
            st.get(k).map_err(|e| m(&e))?.map(|v| v.value()).ok_or_else(|| m(&format!("no {k} row")))
        };
        let version = get("version")?;
        if version != MAP_VERSION {
            return Err(ObjectError::MapVersion {
                path: path.display().to_string(),
                found: version,
                known: MAP_VERSION,
            });
        }
        let found = rx
            .open_table(STORE)
            .map_err(|e| m(&e))?
            .get("spec")
            .map_err(|e| m(&e))?
            .map(|v| v.value().to_string())
            .unwrap_or_default();
        if found != spec {
            return Err(ObjectError::MapOfOtherStore {
                path: path.display().to_string(),
                found,
                expected: spec.into(),
            });
        }
        let mut loaded =
            Loaded { next_segment: get("next_segment")?, device_len: get("device_len")?, ..Default::default() };
        for row in rx.open_table(EXTENTS).map_err(|e| m(&e))?.iter().map_err(|e| m(&e))? {
            let (k, v) = row.map_err(|e| m(&e))?;
            let (len, seg, seg_off) = v.value();
            loaded.extents.apply(&Op::Insert { dev_off: k.value(), ext: Extent { len, seg, seg_off } });
        }
        for row in rx.open_table(SEGMENTS).map_err(|e| m(&e))?.iter().map_err(|e| m(&e))? {
            let (k, v) = row.map_err(|e| m(&e))?;
            let seg = SegmentRow::decode(v.value()).map_err(|d| m(&format!("segment {}: {d}", k.value())))?;
            loaded.segments.insert(k.value(), seg);
        }
        drop(st);
        drop(rx);
        Ok((MapStore { path: path.to_path_buf(), db }, loaded))
    }

    /// Make `c` durable; returns the live bytes of every segment it touched, as stored.
    pub fn commit(&self, c: &Commit<'_>) -> Result<BTreeMap<u64, u64>, ObjectError> {
        let path = &self.path;
        let m = |e: &dyn std::fmt::Display| ObjectError::map(path, e);
        let tx = self.db.begin_write().map_err(|e| m(&e))?;
        let mut touched = BTreeMap::new();
        {
            let mut segs = tx.open_table(SEGMENTS).map_err(|e| m(&e))?;
            for (id, row) in &c.new_segments {
                segs.insert(*id, &row.encode()[..]).map_err(|e| m(&e))?;
            }
            let mut ext = tx.open_table(EXTENTS).map_err(|e| m(&e))?;
            for op in c.ops {
                match *op {
                    Op::Insert { dev_off, ext: e } => {
                        ext.insert(dev_off, (e.len, e.seg, e.seg_off)).map_err(|e| m(&e))?;
                    }
                    Op::Remove { dev_off, .. } => {
                        ext.remove(dev_off).map_err(|e| m(&e))?;
                    }
                }
            }
            for (seg, delta) in live_deltas(c.ops) {
                let Some(mut row) = segs.get(seg).map_err(|e| m(&e))?.map(|v| SegmentRow::decode(v.value())) else {
                    return Err(m(&format!("an extent refers to segment {seg}, which the map does not hold")));
                };
                let mut row = row.as_mut().map_err(|d| m(d))?.clone();
                row.live = row
                    .live
                    .checked_add_signed(delta)
                    .ok_or_else(|| m(&format!("segment {seg}: live bytes below 0")))?;
                segs.insert(seg, &row.encode()[..]).map_err(|e| m(&e))?;
                touched.insert(seg, row.live);
            }
            for seg in &c.dropped_segments {
                segs.remove(*seg).map_err(|e| m(&e))?;
            }
            let mut st = tx.open_table(STATE).map_err(|e| m(&e))?;
            st.insert("next_segment", c.next_segment).map_err(|e| m(&e))?;
            st.insert("device_len", c.device_len).map_err(|e| m(&e))?;
        }
        tx.commit().map_err(|e| m(&e))?;
        Ok(touched)
    }

    /// The committed map as rows, for a backup: one read transaction, so the rows are of
    /// one commit.
    pub fn dump(&self) -> Result<MapDump, ObjectError> {
        let path = &self.path;
        let m = |e: &dyn std::fmt::Display| ObjectError::map(path, e);
        let rx = self.db.begin_read().map_err(|e| m(&e))?;
        let st = rx.open_table(STATE).map_err(|e| m(&e))?;
        let get = |k: &str| -> Result<u64, ObjectError> {
            st.get(k).map_err(|e| m(&e))?.map(|v| v.value()).ok_or_else(|| m(&format!("no {k} row")))
        };
        let spec = rx
            .open_table(STORE)
            .map_err(|e| m(&e))?
            .get("spec")
            .map_err(|e| m(&e))?
            .map(|v| v.value().to_string())
            .unwrap_or_default();
        let mut d =
            MapDump { spec, next_segment: get("next_segment")?, device_len: get("device_len")?, ..Default::default() };
        for row in rx.open_table(EXTENTS).map_err(|e| m(&e))?.iter().map_err(|e| m(&e))? {
            let (k, v) = row.map_err(|e| m(&e))?;
            d.extents.push((k.value(), v.value()));
        }
        for row in rx.open_table(SEGMENTS).map_err(|e| m(&e))?.iter().map_err(|e| m(&e))? {
            let (k, v) = row.map_err(|e| m(&e))?;
            d.segments.push((k.value(), v.value().to_vec()));
        }
        Ok(d)
    }

    /// A new map at `path` holding the rows of `dump` (a restore), durable when it returns.
    /// Every row is checked as an open would: a damaged dump makes no map.
    pub fn restore(path: &Path, dump: &MapDump) -> Result<(), ObjectError> {
        let m = |e: &dyn std::fmt::Display| ObjectError::map(path, e);
        for (id, row) in &dump.segments {
            SegmentRow::decode(row).map_err(|d| m(&format!("segment {id}: {d}")))?;
        }
        let store = MapStore::create(path, &dump.spec)?;
        let tx = store.db.begin_write().map_err(|e| m(&e))?;
        {
            let mut st = tx.open_table(STATE).map_err(|e| m(&e))?;
            st.insert("next_segment", dump.next_segment).map_err(|e| m(&e))?;
            st.insert("device_len", dump.device_len).map_err(|e| m(&e))?;
            let mut ext = tx.open_table(EXTENTS).map_err(|e| m(&e))?;
            for (k, v) in &dump.extents {
                ext.insert(*k, *v).map_err(|e| m(&e))?;
            }
            let mut segs = tx.open_table(SEGMENTS).map_err(|e| m(&e))?;
            for (k, v) in &dump.segments {
                segs.insert(*k, &v[..]).map_err(|e| m(&e))?;
            }
        }
        tx.commit().map_err(|e| m(&e))?;
        Ok(())
    }
}
