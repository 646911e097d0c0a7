//! `squeezefs restore s3://BUCKET/PREFIX POOL`: a new pool directory from the newest
//! complete metadata backup in the bucket (backup.rs), on a machine that has nothing else
//! of the pool.
//!
//! The backup's store seal becomes `meta.seal` and its map dump `object.0.redb`; the read
//! cache starts empty. The pool is then sealed (meta_seal.rs): a read-only mount reads it
//! in memory as it is, a read-write one unseals it first. Its one device is the object
//! device it was backed up from, which must be the prefix named: the store and the map
//! record that name, and the map refuses another store.
//!
//! Order: the directory must be new or empty; the map is written, then the seal as
//! `meta.seal.tmp`, synced, renamed and the directory synced. Until the rename the
//! directory holds no pool (an open refuses it, a second restore may start over).

use crate::base::error::{PoolError, Result};
use crate::base::options::{ObjectSettings, SEAL_FILE};
use redb::ReadableDatabase;
use squeezefs_meta::{tables, DeviceKind, DeviceRecord, Superblock};
use squeezefs_object::{ObjectDevice, ObjectSpec};
use std::path::Path;

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreReport {
    pub generation: u64,
    pub txg: u64,
    /// when the backup was taken, seconds since the Unix epoch
    pub created: u64,
    pub seal_bytes: u64,
    pub extents: u64,
    pub segments: u64,
    /// newer backups passed over as damaged, each with why
    pub skipped: Vec<String>,
}

fn target(pool: &Path, detail: impl Into<String>) -> crate::EngineError {
    PoolError::RestoreTarget { path: pool.to_path_buf(), detail: detail.into() }.into()
}

/// Restore the pool backed up on `spec` into the new directory `pool`.
pub fn restore(pool: &Path, spec: &ObjectSpec, s: &ObjectSettings) -> Result<RestoreReport> {
    match std::fs::read_dir(pool) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(target(pool, "is not empty (restore builds a new pool directory)"));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Err(target(pool, "is not a directory")),
        Err(e) => return Err(target(pool, e.to_string())),
    }
    let cfg = crate::engine::object_dev::config(s)?;
    let found =
        ObjectDevice::find_backup(spec, &cfg).map_err(|source| PoolError::Object { source: Box::new(source) })?;
    let image = &found.image;
    check_backup(spec, &image.meta_seal, &image.map.spec)?;
    std::fs::create_dir_all(pool).map_err(|source| PoolError::CreateDir { path: pool.to_path_buf(), source })?;
    ObjectDevice::restore_map(&crate::engine::object_dev::map_path(pool, 0), &image.map)
        .map_err(|source| PoolError::Object { source: Box::new(source) })?;
    let (tmp, sealed) = (pool.join(crate::store::meta_seal::SEAL_TMP_FILE), pool.join(SEAL_FILE));
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| PoolError::SealIo { op, path, source }
    };
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(io("cannot create", &tmp))?;
        f.write_all(&image.meta_seal).map_err(io("cannot write", &tmp))?;
        f.sync_all().map_err(io("cannot write", &tmp))?;
    }
    std::fs::rename(&tmp, &sealed).map_err(|source| PoolError::Replace {
        path: sealed.clone(),
        from: tmp.clone(),
        source,
    })?;
    let parent = pool.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
    for dir in [Some(pool), parent].into_iter().flatten() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| PoolError::SyncDir { path: dir.to_path_buf(), source })?;
    }
    Ok(RestoreReport {
        generation: image.generation,
        txg: image.txg,
        created: image.created,
        seal_bytes: image.meta_seal.len() as u64,
        extents: image.map.extents.len() as u64,
        segments: image.map.segments.len() as u64,
        skipped: found.skipped.clone(),
    })
}

/// The backup's store must be of a pool whose one device is the object device `spec`,
/// and its map must be that device's.
fn check_backup(spec: &ObjectSpec, seal: &[u8], map_spec: &str) -> Result<()> {
    let bad =
        |detail: String| -> crate::EngineError { PoolError::RestoreBackup { spec: spec.to_string(), detail }.into() };
    let db = redb::Builder::new()
        .create_with_backend(redb::backends::InMemoryBackend::new())
        .map_err(|e| bad(format!("cannot load its metadata store: {e}")))?;
    let tx = db.begin_write().map_err(|e| bad(format!("cannot load its metadata store: {e}")))?;
    squeezefs_meta::seal::unseal_into(seal, &tx).map_err(|e| bad(format!("its metadata store: {e}")))?;
    tx.commit().map_err(|e| bad(format!("cannot load its metadata store: {e}")))?;
    let rx = db.begin_read()?;
    let sb = {
        let t = rx.open_table(tables::SUPERBLOCK)?;
        let v = t.get(0u8)?.ok_or(PoolError::NoSuperblock)?;
        Superblock::decode(v.value())?
    };
    if sb.device_count != 1 {
        return Err(bad(format!(
            "its pool has {} devices; a restore brings back pools of one object device",
            sb.device_count
        )));
    }
    let rec = {
        let t = rx.open_table(tables::DEVICES)?;
        let v = t.get(0u32)?.ok_or(PoolError::DeviceRecordMissing { index: 0 })?;
        DeviceRecord::decode(v.value())?
    };
    let recorded = String::from_utf8_lossy(&rec.path).into_owned();
    if rec.kind != DeviceKind::Object || recorded != spec.to_string() || map_spec != spec.to_string() {
        return Err(bad(format!(
            "it is of a pool on {recorded} (object map of {map_spec}), not on {spec}; restore from the prefix the pool was made on"
        )));
    }
    Ok(())
}
