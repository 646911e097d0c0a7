//! Sealing and unsealing a pool's metadata store. A closed pool may keep its metadata as
//! `meta.seal` (format: squeezefs-meta `seal.rs`, docs/format.md) instead of `meta.redb`:
//! a compressed dump of every table, several times smaller. `mkfs --rootdir` seals the
//! pool it built; `squeezefs seal` / `unseal` do it for any closed pool. A read-write open
//! unseals first; a read-only open loads the dump into an in-memory store and writes
//! nothing, so a sealed pool mounted `-o ro` keeps its size.
//!
//! States of the pool directory (files present) and what an open does in each:
//!
//! ```text
//!   OPEN      meta.redb                      the store; nothing to do
//!   SEALED    meta.seal                      ro: load into memory; rw: unseal
//!   BOTH      meta.redb + meta.seal          equal stores: meta.redb wins, the seal is removed
//!   (strays)  meta.seal.tmp, meta.redb.unseal   half-written: removed or replaced
//! ```
//!
//! Sealing (lock held, pool closed): OPEN → write `meta.seal.tmp`, fsync, read it back and
//! check it → rename to `meta.seal`, fsync the directory (BOTH) → remove `meta.redb`, fsync
//! the directory (SEALED). A crash before the rename leaves OPEN plus a stray, after it
//! BOTH, which an open settles to OPEN: sealing is only ever undone, never half done.
//!
//! Unsealing (lock held, read-write open or `squeezefs unseal`): SEALED → rebuild the
//! store from the dump into `meta.redb.unseal` (one transaction in key order, compacted,
//! fsynced) → rename to `meta.redb`, fsync the directory (BOTH) → remove `meta.seal`,
//! fsync the directory (OPEN). A crash before the rename leaves SEALED plus a stray the
//! next unseal replaces; after it, BOTH, settled to OPEN.
//!
//! A read-only open writes nothing: in BOTH it reads `meta.redb` and leaves the seal.
//!
//! `squeezefs seal` compresses the dump at zstd level 9 (`SEAL_LEVEL`, chosen by
//! measurement: the table in squeezefs-meta `seal.rs`): the 15.5 MB store of the Linux 6.1
//! source tree seals into 2.05 MB in about 0.2 s of compression (docs/benchmarks.md has the
//! whole commands). `mkfs --rootdir` seals at [`seal_level_for`] its data's codec: the seal
//! is the last step of a build and runs on its own, so a build that asked for a fast codec
//! gets a fast seal (zstd:3 data: level 3, 0.06 s less and 9% more seal bytes, 0.1% of the
//! image).

use crate::base::error::{PoolError, Result};
use crate::base::options::{META_FILE, SEAL_FILE};
use crate::base::pool_lock::{PoolLock, Refusal};
use redb::ReadableDatabase;
use squeezefs_codec::nominal::nominal;
use squeezefs_codec::{Algorithm, Codec, Spec};
use squeezefs_meta::seal::{self, SealError, SEAL_LEVEL};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where a seal is written before it is renamed to `meta.seal`.
pub const SEAL_TMP_FILE: &str = "meta.seal.tmp";
/// Where an unseal rebuilds the store before it is renamed to `meta.redb`.
pub const UNSEAL_TMP_FILE: &str = "meta.redb.unseal";

/// What sealing or unsealing did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SealReport {
    /// length of `meta.redb` (before sealing, after unsealing)
    pub store_bytes: u64,
    /// length of `meta.seal`
    pub seal_bytes: u64,
    pub tables: u32,
    pub rows: u64,
    /// wall seconds of the whole operation
    pub secs: f64,
}

/// The zstd level a pool whose data is written with `spec` is sealed at: the strongest
/// level up to [`SEAL_LEVEL`] that costs no more per byte than the data's codec, by the
/// nominal figures, and at least 1 (`none`, lz4). Adaptive specs seal at `SEAL_LEVEL`:
/// they spend CPU where the device leaves time, and a build ends with no device to wait
/// for.
pub fn seal_level_for(spec: Spec) -> i32 {
    let data = match spec {
        Spec::Off => return 1,
        Spec::Fixed(codec) => codec,
        _ => return SEAL_LEVEL,
    };
    let cost = nominal(data).ns_per_byte();
    let zstd = |level| nominal(Codec { alg: Algorithm::Zstd, level }).ns_per_byte();
    (1..=SEAL_LEVEL).rev().find(|&level| zstd(level) <= cost).unwrap_or(1)
}

/// Whether the pool in `pool` is sealed (its store only as `meta.seal`).
pub fn is_sealed(pool: &Path) -> bool {
    crate::store::meta_files::form(pool).is_none() && pool.join(SEAL_FILE).exists()
}

fn lock(pool: &Path) -> Result<PoolLock> {
    PoolLock::acquire(pool, false).map_err(|r| {
        match r {
            Refusal::InUse(holder) => PoolError::InUse { pool: pool.to_path_buf(), holder },
            Refusal::Closing(holder) => PoolError::Closing { pool: pool.to_path_buf(), holder },
        }
        .into()
    })
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> crate::EngineError + 'a {
    move |source| PoolError::SealIo { op, path: path.to_path_buf(), source }.into()
}

fn seal_err(path: &Path) -> impl FnOnce(SealError) -> crate::EngineError + '_ {
    move |source| PoolError::Seal { path: path.to_path_buf(), source: Box::new(source) }.into()
}

fn sync_dir(pool: &Path) -> Result<()> {
    std::fs::File::open(pool)
        .and_then(|d| d.sync_all())
        .map_err(|source| PoolError::SyncDir { path: pool.to_path_buf(), source }.into())
}

fn remove_if_present(path: &Path) -> Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(PoolError::Remove { path: path.to_path_buf(), source }.into()),
    }
}

/// Give `to` the owner and mode of `from`: a pool built by a user and unsealed by root's
/// mount stays the user's. A process that may not chown keeps its own (it owns both files).
fn same_owner(from: &Path, to: &Path) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata(from) {
        let _ = std::os::unix::fs::chown(to, Some(m.uid()), Some(m.gid()));
        let _ = std::fs::set_permissions(to, m.permissions());
    }
}

/// Seal the closed pool in `pool` at zstd `level` (block comment); `None` when it was
/// sealed already. Refused while the pool is open.
pub fn seal_pool(pool: &Path, level: i32) -> Result<Option<SealReport>> {
    let t0 = Instant::now();
    let (sealed, tmp) = (pool.join(SEAL_FILE), pool.join(SEAL_TMP_FILE));
    if crate::store::meta_files::form(pool).is_none() {
        if sealed.exists() {
            return Ok(None);
        }
        return Err(PoolError::NotAPool { path: pool.to_path_buf() }.into());
    }
    let _lock = lock(pool)?;
    settle(pool)?;
    crate::store::meta_files::settle(pool)?;
    remove_if_present(&tmp)?;
    let meta = crate::store::meta_files::store_file(pool);
    let store_bytes = crate::store::meta_files::store_len(pool);
    // read-write: a store not closed cleanly is repaired before it is dumped
    let db = crate::store::meta_files::open_rw(pool)?;
    let rx = db.begin_read()?;
    let (bytes, summary) = seal::seal(&rx, level).map_err(seal_err(&meta))?;
    drop(rx);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(io_err("cannot create", &tmp))?;
        f.write_all(&bytes).map_err(io_err("cannot write", &tmp))?;
        same_owner(&meta, &tmp);
        f.sync_all().map_err(io_err("cannot write", &tmp))?;
    }
    // what is on disk, not what was meant: the store goes only once its seal reads back
    let back = std::fs::read(&tmp).map_err(io_err("cannot read", &tmp))?;
    seal::open_body(&back).map_err(seal_err(&tmp))?;
    std::fs::rename(&tmp, &sealed).map_err(|source| PoolError::Replace {
        path: sealed.clone(),
        from: tmp.clone(),
        source,
    })?;
    sync_dir(pool)?;
    drop(db);
    crate::store::meta_files::remove_all(pool)?;
    sync_dir(pool)?;
    Ok(Some(SealReport {
        store_bytes,
        seal_bytes: bytes.len() as u64,
        tables: summary.tables,
        rows: summary.rows,
        secs: t0.elapsed().as_secs_f64(),
    }))
}

/// Unseal the closed pool in `pool` (`squeezefs unseal`); `None` when it was not sealed.
/// Refused while the pool is open.
pub fn unseal_pool(pool: &Path) -> Result<Option<SealReport>> {
    if crate::store::meta_files::form(pool).is_none() && !pool.join(SEAL_FILE).exists() {
        return Err(PoolError::NotAPool { path: pool.to_path_buf() }.into());
    }
    let _lock = lock(pool)?;
    settle(pool)
}

/// Bring the pool directory to OPEN (block comment), the holder lock held for writing:
/// BOTH loses its seal, SEALED is unsealed, strays go. What unsealing did, if it did.
pub(crate) fn settle(pool: &Path) -> Result<Option<SealReport>> {
    let sealed = pool.join(SEAL_FILE);
    let mut removed = remove_if_present(&pool.join(SEAL_TMP_FILE))?;
    let report = if crate::store::meta_files::form(pool).is_some() {
        if remove_if_present(&sealed)? {
            log::info!("{}: {} and {} both present; kept the store", pool.display(), META_FILE, SEAL_FILE);
            removed = true;
        }
        removed |= remove_if_present(&pool.join(UNSEAL_TMP_FILE))?;
        None
    } else if sealed.exists() {
        Some(unseal(pool)?)
    } else {
        None
    };
    if removed {
        sync_dir(pool)?;
    }
    Ok(report)
}

/// SEALED → OPEN.
fn unseal(pool: &Path) -> Result<SealReport> {
    let t0 = Instant::now();
    let (meta, sealed, tmp) = (pool.join(META_FILE), pool.join(SEAL_FILE), pool.join(UNSEAL_TMP_FILE));
    let bytes = std::fs::read(&sealed).map_err(io_err("cannot read", &sealed))?;
    remove_if_present(&tmp)?;
    let rebuilt = rebuild(&bytes, &tmp, &sealed);
    if rebuilt.is_err() {
        // a damaged seal leaves the directory as it found it
        let _ = std::fs::remove_file(&tmp);
    }
    let summary = rebuilt.map_err(|e| match e {
        RebuildError::Seal(source) => PoolError::Seal { path: sealed.clone(), source: Box::new(source) },
        RebuildError::Store(source) => {
            PoolError::Rebuild { path: sealed.clone(), into: tmp.clone(), source: Box::new(source) }
        }
        RebuildError::Io(source) => PoolError::SealIo { op: "cannot sync", path: tmp.clone(), source },
    })?;
    // a pool whose superblock says its store has checked copies gets them back
    match meta_copies_of(&tmp) {
        Some(copies) => {
            crate::store::meta_files::install_file(pool, &tmp, copies)?;
            for copy in crate::store::meta_files::copy_paths(pool, copies) {
                same_owner(&sealed, &copy);
            }
        }
        None => {
            std::fs::rename(&tmp, &meta).map_err(|source| PoolError::Replace {
                path: meta.clone(),
                from: tmp.clone(),
                source,
            })?;
            sync_dir(pool)?;
        }
    }
    remove_if_present(&sealed)?;
    sync_dir(pool)?;
    let report = SealReport {
        store_bytes: crate::store::meta_files::store_len(pool),
        seal_bytes: bytes.len() as u64,
        tables: summary.tables,
        rows: summary.rows,
        secs: t0.elapsed().as_secs_f64(),
    };
    // a warning, seen at the default log level: the pool grew, and stays unsealed
    log::warn!(
        "pool {} was sealed: unsealed its metadata store for writing in {:.2} s ({} rows; {} bytes sealed, {} bytes as {META_FILE})",
        pool.display(),
        report.secs,
        report.rows,
        report.seal_bytes,
        report.store_bytes,
    );
    Ok(report)
}

/// The copies the superblock of the plain store `path` asks for (`None`: a plain store).
fn meta_copies_of(path: &Path) -> Option<u8> {
    let db = redb::Database::open(path).ok()?;
    let rx = db.begin_read().ok()?;
    let t = rx.open_table(squeezefs_meta::tables::SUPERBLOCK).ok()?;
    let v = t.get(0u8).ok()??;
    squeezefs_meta::Superblock::decode(v.value()).ok()?.meta_copies
}

enum RebuildError {
    Seal(SealError),
    Store(redb::Error),
    Io(std::io::Error),
}

/// The store of the sealed `bytes` as a new file `to`, compacted, owned like `owner_of`,
/// durable.
fn rebuild(bytes: &[u8], to: &Path, owner_of: &Path) -> std::result::Result<seal::SealSummary, RebuildError> {
    fn st(e: impl Into<redb::Error>) -> RebuildError {
        RebuildError::Store(e.into())
    }
    let mut db = redb::Database::create(to).map_err(st)?;
    let tx = db.begin_write().map_err(st)?;
    let summary = seal::unseal_into(bytes, &tx).map_err(RebuildError::Seal)?;
    tx.commit().map_err(st)?;
    // the load's own transaction leaves some pages free behind it
    while db.compact().map_err(st)? {}
    drop(db);
    same_owner(owner_of, to);
    std::fs::File::open(to).and_then(|f| f.sync_all()).map_err(RebuildError::Io)?;
    Ok(summary)
}

/// The store of the sealed pool in `pool`, loaded into memory (read-only opens: nothing
/// in the pool directory is written).
pub(crate) fn load_in_memory(pool: &Path) -> Result<redb::Database> {
    let t0 = Instant::now();
    let sealed: PathBuf = pool.join(SEAL_FILE);
    let bytes = std::fs::read(&sealed).map_err(io_err("cannot read", &sealed))?;
    let store = |source: redb::Error| PoolError::Rebuild {
        path: sealed.clone(),
        into: PathBuf::from("memory"),
        source: Box::new(source),
    };
    let db = redb::Builder::new()
        .create_with_backend(redb::backends::InMemoryBackend::new())
        .map_err(|e| store(e.into()))?;
    let tx = db.begin_write().map_err(|e| store(e.into()))?;
    let summary = seal::unseal_into(&bytes, &tx).map_err(seal_err(&sealed))?;
    tx.commit().map_err(|e| store(e.into()))?;
    log::info!(
        "{}: sealed metadata store loaded into memory ({} rows) in {:.2} s",
        pool.display(),
        summary.rows,
        t0.elapsed().as_secs_f64()
    );
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level_for(spec: &str) -> i32 {
        seal_level_for(spec.parse().unwrap())
    }

    #[test]
    fn a_build_is_sealed_no_slower_per_byte_than_its_data_is_compressed() {
        for (spec, level) in
            [("zstd:1", 1), ("zstd:3", 3), ("zstd:8", 8), ("zstd:9", 9), ("zstd:15", 9), ("zstd:22", 9)]
        {
            assert_eq!(level_for(spec), level, "{spec}");
        }
        // faster than every zstd level, or nothing to compress: the cheapest level
        for spec in ["none", "lz4", "lz4:fast=17", "zstd:-5"] {
            assert_eq!(level_for(spec), 1, "{spec}");
        }
        // zlib levels cost more than zstd at the same number
        assert!(level_for("zlib:6") >= 6, "{}", level_for("zlib:6"));
        for spec in ["auto", "auto:lz4..zstd:3", "qos:50"] {
            assert_eq!(level_for(spec), SEAL_LEVEL, "{spec}");
        }
    }
}
