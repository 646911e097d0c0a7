//! Namespace and attribute changes into the open txg, as `Engine::meta_write` and
//! `Engine::update_attr` make them: room in the metadata store first (store/meta_space.rs),
//! then one published delta under `meta_lock`, with the delta's memory bounded by commits.

use crate::base::error::{EngineError, Result};
use crate::engine::inner::Inner;
use crate::store;
use crate::txg;
use crate::write::metatx::MetaTx;
use crate::{base, space};
use squeezefs_meta::{Ino, InodeAttr};

/// The work of `Engine::meta_write`, whose doc states the contract.
pub(crate) fn meta_write<T>(inner: &Inner, f: impl FnOnce(&mut MetaTx<'_>) -> Result<T>) -> Result<T> {
    inner.check_writable()?;
    inner.bg.touch();
    make_meta_room(inner, store::meta_space::Kind::Grows)?;
    let writer = inner.ns.meta_lock.lock();
    let mut mtx = MetaTx::new(inner);
    let v = f(&mut mtx)?; // dropping `mtx` on error drops its changes
    let (d, rs_change) = (mtx.d, mtx.rs_change);
    if d.is_empty() {
        return Ok(v);
    }
    let kind = if d.grows() { store::meta_space::Kind::Grows } else { store::meta_space::Kind::NoGrowth };
    admit_meta(inner, d.charge(), kind)?; // refused: `d` is dropped, nothing changed
    let deleted = d.deleted.clone();
    let rows = match rs_change {
        None => inner.ns.publish(d),
        Some((ino, rs)) => publish_record_size(inner, d, ino, rs)?,
    };
    inner.txg.note_meta_change();
    drop(writer);
    bound_delta(inner, rows)?;
    for ino in deleted {
        inner.dirty.files.purge(ino, &inner.acct);
        inner.cache.extents.invalidate(ino, None);
    }
    Ok(v)
}

/// The work of `Engine::update_attr`, whose doc states the contract.
pub(crate) fn update_attr<T, E: From<EngineError>>(
    inner: &Inner,
    ino: Ino,
    f: impl FnOnce(&mut InodeAttr) -> std::result::Result<(T, bool), E>,
) -> std::result::Result<T, E> {
    inner.check_writable()?;
    inner.bg.touch();
    make_meta_room(inner, store::meta_space::Kind::NoGrowth)?;
    let writer = inner.ns.meta_lock.lock();
    let mut a = crate::read::namespace::getattr(inner, ino)?;
    let (v, changed) = f(&mut a)?;
    if changed {
        let mut d = store::nsdelta::Delta::default();
        d.inodes.insert(ino, Some(a));
        d.rows = 1;
        admit_meta(inner, d.charge(), store::meta_space::Kind::NoGrowth)?;
        let rows = inner.ns.publish(d);
        inner.txg.note_meta_change();
        drop(writer);
        bound_delta(inner, rows)?;
    }
    Ok(v)
}

/// Before a metadata change (meta_space.rs): when a change of `MAX_USUAL_CHARGE` bytes
/// would not fit the metadata filesystem beside the outstanding charges, commit the
/// open txg first, which replaces those estimates by what redb really took. Called
/// without `meta_lock` (the commit takes it); the change is admitted or refused after,
/// by `admit_meta`, once its size is known.
/// `kind` is what the change is known to be before it is built: an attribute update never
/// grows the store (so an atime update after a read does not force a commit while the
/// reserve is untouched), any other change may.
pub(crate) fn make_meta_room(inner: &Inner, kind: store::meta_space::Kind) -> Result<()> {
    if inner.meta_space.older_than(store::meta_space::MAX_AGE) {
        inner.meta_space.measured(space::placement::host_fs_of(&inner.pool_dir));
    }
    let room = inner.meta_room(0);
    if room.is_some_and(|r| {
        store::meta_space::decide(r, store::meta_space::MAX_USUAL_CHARGE, kind)
            == store::meta_space::Decision::CommitFirst
    }) {
        inner.txg.sync_and_wait(&inner.dirty)?;
    }
    Ok(())
}

/// Admit a metadata change of `charge` bytes and charge it, or refuse it with NoSpace
/// (a store whose filesystem fills fails its commit and suspends the pool).
pub(crate) fn admit_meta(inner: &Inner, charge: u64, kind: store::meta_space::Kind) -> Result<()> {
    let decide = || {
        let room = inner.meta_room(0);
        room.map_or(store::meta_space::Decision::Admit, |r| store::meta_space::decide(r, charge, kind))
    };
    let mut decision = decide();
    if decision != store::meta_space::Decision::Admit {
        // before refusing, a fresh figure: another program may have freed space
        inner.meta_space.measured(space::placement::host_fs_of(&inner.pool_dir));
        decision = decide();
    }
    if decision != store::meta_space::Decision::Admit {
        return Err(inner.meta_space.refusal(&inner.pool_dir));
    }
    inner.meta_space.charge(charge);
    Ok(())
}

/// Keep the namespace delta's memory bounded: past `max_delta_rows` rows ask for a
/// commit; past four times that (writers outrunning the commits) wait for one, as the
/// write throttle does for dirty data. Called without `meta_lock` (the commit takes it).
pub(crate) fn bound_delta(inner: &Inner, rows: usize) -> Result<()> {
    let max = inner.opts.max_delta_rows.max(1);
    if rows > max {
        inner.txg.request_commit();
    }
    if rows > max.saturating_mul(4) {
        inner.txg.sync_and_wait(&inner.dirty)?;
    }
    Ok(())
}

/// Publish `d`, which changes existing file `ino`'s record size to `rs`: the file's data
/// path takes the new size in the same step, and only if the file holds no data anywhere
/// (open or syncing layer, committed records). Holding the file's shard lock, the delta's
/// rows lock and the file lock together (the lock order of locks.rs), no write can land
/// records of the old size after the check, no reader of the delta or FileData can see
/// one size where the other is already new, and the commit cannot take the delta in
/// between (`meta_lock` is held): the row commits no later than the first data of the new
/// size, and no earlier than the last data of the old size left the file.
fn publish_record_size(inner: &Inner, d: store::nsdelta::Delta, ino: Ino, rs: u64) -> Result<usize> {
    inner
        .with_file(ino, |f| {
            inner.ns.publish_checked(d, || {
                let mut fd = f.lock();
                let holds_data = |l: &txg::dirty::Layer| {
                    l.recs.values().any(|r| matches!(r, txg::dirty::Rec::Data(_) | txg::dirty::Rec::Shared(_)))
                };
                if fd.size > 0 || holds_data(&fd.open) {
                    return Err(base::error::InvalidArg::RecordSizeOfFileWithData {
                        ino,
                        size: fd.size,
                        recordsize: fd.rs,
                    }
                    .into());
                }
                if fd.committed_blocks > 0 || fd.syncing.as_deref().is_some_and(holds_data) {
                    return Err(EngineError::RecordSizeBusy { ino });
                }
                fd.rs = rs;
                // a write that computed its records with the old size redoes them (write/data.rs)
                fd.gen += 1;
                Ok(())
            })
        })?
        .inspect(|_| inner.note_record_size(rs))
}
