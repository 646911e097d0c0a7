//! The QoS thread (qos.rs block comment, REPLAN): replans the QoS trees' levels and the
//! compress queue's lane rates every `replan_secs` until the engine closes. Apart from
//! qos.rs because it drives the engine's state (`Inner`), which holds the `Qos`.

use crate::inner::Inner;
use squeezefs_control::qos::TreeId;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The thread's body; holds the engine only during a round.
pub fn replan_loop(engine: std::sync::Weak<Inner>) {
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
            q.replan_secs()
        };
        std::thread::sleep(Duration::from_secs_f64(period.max(0.01)));
    }
}
