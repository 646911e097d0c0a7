//! Object devices of a pool (crates/object): a device named `s3://BUCKET/PREFIX` at mkfs is
//! created on the store, recorded with kind `Object` and that name, and opened again from
//! the record; its object map (`object.N.redb`) and read cache (`object.N.cache/`, unless
//! `ObjectSettings::cache_dir` puts it elsewhere) live in the pool directory. Endpoint and
//! credentials come from `ObjectSettings::store`, else the standard AWS environment.

use crate::base::error::{PoolError, Result};
use crate::base::options::ObjectSettings;
use squeezefs_device::Device;
use squeezefs_object::{ObjectDevice, ObjectOptions, ObjectSpec, StoreConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The object device named by `path`, if it names one (`s3://…`); a malformed name is an
/// error naming what is accepted.
pub fn spec_of(path: &Path) -> Result<Option<ObjectSpec>> {
    let Some(s) = path.to_str() else { return Ok(None) };
    if !ObjectSpec::is_object_spec(s) {
        return Ok(None);
    }
    Ok(Some(ObjectSpec::parse(s).map_err(|e| PoolError::ObjectSpec(Box::new(e)))?))
}

/// The object map of device `index`.
pub fn map_path(pool: &Path, index: usize) -> PathBuf {
    pool.join(format!("object.{index}.redb"))
}

fn options(pool: &Path, index: usize, s: &ObjectSettings, read_only: bool) -> ObjectOptions {
    let dir = match &s.cache_dir {
        Some(d) => d.join(format!("object.{index}.cache")),
        None => pool.join(format!("object.{index}.cache")),
    };
    let mut o = ObjectOptions::new(dir);
    if let Some(b) = s.cache_bytes {
        o.cache_bytes = b;
    }
    if let Some(t) = s.stall_timeout {
        o.stall_timeout = t;
    }
    if let Some(b) = s.segment_bytes {
        o.segment_bytes = b;
    }
    if let Some(t) = s.repack_interval {
        o.repack_every = t;
    }
    o.read_only = read_only;
    o
}

pub(crate) fn config(s: &ObjectSettings) -> Result<StoreConfig> {
    match &s.store {
        Some(c) => Ok(c.clone()),
        None => Ok(StoreConfig::from_env().map_err(|e| PoolError::ObjectConfig(Box::new(e)))?),
    }
}

/// A new object device `index` of the pool on `spec` (mkfs).
pub fn create(
    pool: &Path,
    index: usize,
    spec: &ObjectSpec,
    s: &ObjectSettings,
    force: bool,
) -> Result<Arc<dyn Device>> {
    let d = ObjectDevice::create(spec, &config(s)?, &map_path(pool, index), options(pool, index, s, false), force)
        .map_err(|source| PoolError::Object { source: Box::new(source) })?;
    Ok(Arc::new(d))
}

/// Object device `index` of the pool, recorded as `spec` (open).
pub fn open(
    pool: &Path,
    index: usize,
    spec: &ObjectSpec,
    s: &ObjectSettings,
    read_only: bool,
) -> Result<Arc<ObjectDevice>> {
    let d = ObjectDevice::open(spec, &config(s)?, &map_path(pool, index), options(pool, index, s, read_only))
        .map_err(|source| PoolError::Object { source: Box::new(source) })?;
    let d = Arc::new(d);
    d.start_repack();
    Ok(d)
}
