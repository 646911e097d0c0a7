//! The txg driver thread: runs the state machine of txg/state.rs over this engine's dirty data
//! (`TxgWork`): QUIESCING freezes each changed file's open layer, SYNCING runs the stages
//! of sync/stages.rs.

use crate::base::error::PanicSite;
use crate::base::fault::Site;
use crate::engine::inner::Inner;
use crate::txg::dirty::{Layer, Rec};
use crate::txg::state::{Frozen, SyncFailure, TxgWork, SYNC_DIRTY_PERCENT};
use std::sync::Arc;
use std::time::Duration;

/// The driver thread's body (one per writable engine). A panic in it suspends the pool
/// and ends the thread as an exit would, so waiters and `close` see an error instead of
/// waiting for it forever (fault.rs).
pub fn driver(inner: Arc<Inner>) {
    let run = std::panic::AssertUnwindSafe(|| crate::txg::state::drive(&inner.txg, &Work(&inner)));
    if let Err(p) = std::panic::catch_unwind(run) {
        inner.caught_panic(PanicSite::TxgDriver, &*p);
        inner.txg.driver_died();
        inner.throttle.wake_all();
    }
}

struct Work<'a>(&'a Arc<Inner>);

impl TxgWork for Work<'_> {
    fn data_changed(&self) -> bool {
        self.0.dirty.any_changed()
    }

    fn dirty_bytes(&self) -> (u64, u64) {
        (self.0.acct.dirty(), self.0.opts.max_dirty_bytes / 100 * SYNC_DIRTY_PERCENT)
    }

    fn ready_bytes(&self) -> u64 {
        self.0.acct.ready()
    }

    fn txg_timeout(&self) -> Duration {
        self.0.opts.txg_timeout
    }

    fn idle(&self) {
        self.0.early.reclaim(&self.0.space, false);
    }

    fn before_exit(&self) {
        self.0.early.reclaim(&self.0.space, true);
    }

    fn quiesce(&self) -> Frozen {
        quiesce(self.0)
    }

    fn sync(&self, txg: u64, frozen: Frozen) -> Result<(), SyncFailure> {
        let inner = self.0;
        inner.faults.hit(Site::TxgDriver);
        inner.dirty.set_syncing_files(frozen.len());
        // a metadata backup is taken between two commits, never during one (backup.rs)
        let gate = inner.backup.gate.lock();
        let r = crate::sync::stages::sync_txg(inner, txg, frozen);
        drop(gate);
        inner.dirty.set_syncing_files(0);
        r
    }

    fn txg_ended(&self) {
        self.0.throttle.wake_all();
    }
}

/// QUIESCING: freeze the open layer of every dirty file into its syncing layer.
fn quiesce(inner: &Inner) -> Frozen {
    // no record is shared between two files' open layers while they are frozen one by one
    // (write/share.rs)
    let _gate = inner.quiesce_gate.write();
    inner.shared_in_txg.store(0, std::sync::atomic::Ordering::Relaxed);
    let inos = inner.dirty.take_changed();
    let mut out = Vec::with_capacity(inos.len());
    for ino in inos {
        let Some(f) = inner.dirty.files.get(ino) else { continue };
        let mut fd = f.lock();
        if fd.retired || !fd.open_dirty {
            continue;
        }
        debug_assert!(fd.syncing.is_none(), "one txg syncs at a time");
        let mut layer = std::mem::take(&mut fd.open);
        layer.size = fd.size;
        layer.policy = fd.policy;
        layer.rs = fd.rs;
        normalize(&mut layer, inner);
        let layer = Arc::new(layer);
        fd.syncing = Some(layer.clone());
        fd.open_dirty = false;
        // records moved out of the open layer: a write that looked at the open layer before
        // this freeze must redo its read-modify-write decisions (see write/data.rs)
        fd.gen += 1;
        out.push((ino, layer));
    }
    out
}

/// Give every data record exactly its logical length (zeros after a short buffer).
fn normalize(layer: &mut Layer, inner: &Inner) {
    let (size, rs) = (layer.size, layer.rs);
    let (mut grown, mut freed) = (0u64, 0u64);
    for (&idx, rec) in layer.recs.iter_mut() {
        if let Rec::Data(d) = rec {
            let want = crate::base::units::record_len_in_file(idx, size, rs) as usize;
            if want == 0 {
                freed += d.len() as u64;
                *rec = Rec::Hole;
                continue;
            }
            if d.len() != want {
                // changes the bytes: drops any early compression of the old ones. Records
                // held packed are full and set_size cuts them, so they are never here; a
                // failed decode (impossible for our own output) keeps the record as it is
                match d.buf_mut(inner.workspaces()) {
                    Ok(b) => {
                        if want > b.len() {
                            grown += (want - b.len()) as u64;
                        } else {
                            freed += (b.len() - want) as u64;
                        }
                        b.resize(want, 0);
                    }
                    Err(e) => log::error!("record {idx}: cannot resize: {e}"),
                }
            }
        }
    }
    inner.acct.resize_layer(&mut layer.bytes, grown, freed);
}
