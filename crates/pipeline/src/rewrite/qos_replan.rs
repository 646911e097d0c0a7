//! The QoS thread: replans the QoS trees' levels and the compress queue's lane rates every
//! `LevelTunables::replan_secs` (qos.rs, block comment REPLAN). It sits above the engine
//! state it reads (`Inner`), so qos.rs itself never depends on the engine.
//!
//! States: not started (no tree yet) → running (spawned by the first `qos_set_tree`) →
//! ended (the engine closed or was dropped). Between rounds it holds only a weak reference,
//! so it never keeps a closed engine alive.

use squeezefs_control::qos::TreeId;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The QoS thread (block comment, REPLAN): replans every `replan_secs` until the engine
/// closes; holds the engine only during a round.
pub fn replan_loop(engine: std::sync::Weak<crate::engine::inner::Inner>) {
    let mut rates: Vec<(TreeId, f64)> = Vec::new();
    loop {
        let period = {
            let Some(inner) = engine.upgrade() else { return };
            if inner.closed.load(Ordering::Acquire) {
                return;
            }
            let q = &inner.qos;
            let device: f64 = inner.space.device_status().iter().map(|d| d.stats.throughput_bps).sum();
            let now = q.now();
            let cpu = inner.compress.levels.cpu_figures();
            let new = q.replan(inner.workers.threads(), cpu, (device > 0.0).then_some(device), |t| {
                (inner.compress.queue.lag(t, now), inner.compress.queue.queued(t))
            });
            // trees gone since the last round lose their lanes' rates
            let mut set: Vec<(TreeId, f64)> =
                rates.iter().filter(|(t, _)| !new.iter().any(|n| n.0 == *t)).map(|(t, _)| (*t, 0.0)).collect();
            set.extend(new.iter().copied());
            inner.compress.queue.set_rates(&set);
            rates = new;
            q.replan_period_secs()
        };
        std::thread::sleep(Duration::from_secs_f64(period.max(0.01)));
    }
}
