//! The QoS thread: one replan round (qos.rs `Qos::replan`, block comment REPLAN) every
//! `replan_secs` over the engine's measurements (device throughput, CPU figures, each
//! tree's lag and queued bytes in the compress queue), the new rates handed to the compress
//! queue's scheduler. It lives apart from qos.rs because it reads the whole engine, which
//! holds the QoS state as one of its parts.

use crate::inner::Inner;
use squeezefs_control::qos::TreeId;
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

/// The QoS thread (qos.rs block comment, REPLAN): replans every `replan_secs` until the
/// engine closes; holds the engine only during a round.
pub fn replan_loop(engine: Weak<Inner>) {
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
