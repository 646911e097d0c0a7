//! The compress queue across trees: QoS records earliest deadline first, deadlines from each
//! tree's rate, so a fast tree's records never queue behind a slow tree's expensive ones; other
//! records get the CPU the QoS trees leave, and never less than a floor share.
//!
//! ```text
//! LANES: one FIFO per tree (records of one tree keep their order). A QoS tree's lane has the
//!   tree's rate r (its admission allotment, `set_rate`); every other record (no QoS tree,
//!   or a tree without a rate yet) is *unpaced*: auto or fixed levels outside QoS trees.
//! DEADLINES (virtual clock): a QoS record of b bytes pushed at `now` into a lane of rate r gets
//!     F = max(F_previous, now) + b / r,   deadline = F + deadline_slack_secs;
//!   F is when the record would be done if the tree's records were compressed exactly at its
//!   rate, one after the other. Unpaced records have no deadline (reported as infinite).
//! POP (`pop(now)`), records are never preempted (a worker runs its record to the end):
//!   1. an unpaced record (the oldest over the unpaced lanes) if no QoS record waits, or if
//!      the unpaced records' share of the CPU handed out (estimated cost of the records
//!      popped, averaged with time constant share_tau_secs) is below unpaced_min_share;
//!   2. else the QoS lane head with the earliest deadline (ties: pushed first).
//! WHY: a FIFO queue puts a fast tree's cheap records behind whatever a slow tree pushed
//!   before them (a 1 MiB write at zstd:15 is 8 records of 20 ms each). Here each QoS tree is
//!   served at its rate: a 100 MB/s tree's records carry deadlines 1.3 ms apart, a 10 MB/s
//!   tree's 13 ms apart, and the fast tree's next record is taken as soon as a worker frees.
//!   Bound: when the planned CPU fits the cores (levels.rs), a record finishes within its
//!   deadline plus one record's compression time at the most expensive level in use (the
//!   worker it waits for). A tree writing faster than its rate (a burst) pushes its own
//!   deadlines into the future and is served after the trees within theirs; the others do
//!   not notice. QoS records go before unpaced ones whatever either has waited: unpaced work
//!   has no rate to be late against, and a flood of it (a writer at zstd:15 going flat out)
//!   must not grow old in the queue and overtake the QoS records that arrive after it. QoS
//!   work is bounded by admission, and the level choice plans QoS trees on the CPU unpaced
//!   work leaves, so unpaced work normally gets all the rest; the floor share only matters
//!   when QoS rates exceed the machine.
//! STATE: per lane its rate, F of its last record, queued records with their bytes and
//!   estimated CPU (for `stats`); `lag` = how far past its deadline a QoS lane's head is (the
//!   level choice plans a lagging tree for more than its rate, so that it catches up); a lane
//!   whose tree lost its rate and whose queue is empty is dropped. The CPU shares handed out.
//!
//! TUNABLES (`SchedTunables`):
//!   deadline_slack_secs 0.05   latency a QoS record may take beyond its virtual finish (one
//!                              zstd:15 record of 128 KiB takes ~20 ms on one core)
//!   unpaced_min_share 0.1      unpaced records get at least this share of the CPU handed out
//!   share_tau_secs 1.0         time constant of that share
//! ```

use super::admission::{TreeId, NO_TREE};
use std::collections::{HashMap, VecDeque};

/// Scheduler tunables (see the block comment).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedTunables {
    pub deadline_slack_secs: f64,
    pub unpaced_min_share: f64,
    pub share_tau_secs: f64,
}

impl Default for SchedTunables {
    fn default() -> SchedTunables {
        SchedTunables { deadline_slack_secs: 0.05, unpaced_min_share: 0.1, share_tau_secs: 1.0 }
    }
}

/// A queued record.
#[derive(Clone, Debug, PartialEq)]
pub struct Job<T> {
    pub item: T,
    pub tree: TreeId,
    pub bytes: u64,
    /// estimated CPU of compressing it, ns
    pub cost_ns: f64,
    pub pushed: f64,
    /// infinite for unpaced records
    pub deadline: f64,
    seq: u64,
}

#[derive(Clone, Debug)]
struct Lane<T> {
    rate: f64,
    finish: f64,
    queue: VecDeque<Job<T>>,
    bytes: u64,
    cost_ns: f64,
}

impl<T> Lane<T> {
    fn new() -> Lane<T> {
        Lane { rate: 0.0, finish: f64::NEG_INFINITY, queue: VecDeque::new(), bytes: 0, cost_ns: 0.0 }
    }
}

/// The compress queue (see the block comment).
#[derive(Clone, Debug)]
pub struct CompressScheduler<T> {
    tun: SchedTunables,
    lanes: HashMap<TreeId, Lane<T>>,
    seq: u64,
    len: usize,
    /// decayed CPU ns handed out: (to unpaced records, to all), as of `share_at`
    share: (f64, f64),
    share_at: f64,
}

impl<T> CompressScheduler<T> {
    pub fn new(tun: SchedTunables) -> CompressScheduler<T> {
        CompressScheduler { tun, lanes: HashMap::new(), seq: 0, len: 0, share: (0.0, 0.0), share_at: 0.0 }
    }

    /// `tree`'s rate in bytes/s (its admission allotment); 0 makes it unpaced.
    pub fn set_rate(&mut self, tree: TreeId, rate_bps: f64) {
        let r = if rate_bps.is_finite() && rate_bps > 0.0 && tree != NO_TREE { rate_bps } else { 0.0 };
        if r == 0.0 {
            if let Some(l) = self.lanes.get_mut(&tree) {
                l.rate = 0.0;
                if l.queue.is_empty() {
                    self.lanes.remove(&tree);
                }
            }
            return;
        }
        self.lanes.entry(tree).or_insert_with(Lane::new).rate = r;
    }

    /// Queue a record of `bytes` of `tree` at `now`; returns its deadline (infinite: unpaced).
    pub fn push(&mut self, tree: TreeId, bytes: u64, cost_ns: f64, now: f64, item: T) -> f64 {
        let slack = self.tun.deadline_slack_secs;
        let cost_ns = if cost_ns.is_finite() { cost_ns.max(0.0) } else { 0.0 };
        let l = self.lanes.entry(tree).or_insert_with(Lane::new);
        let deadline = if l.rate > 0.0 {
            l.finish = l.finish.max(now) + bytes as f64 / l.rate;
            l.finish + slack
        } else {
            f64::INFINITY
        };
        l.bytes += bytes;
        l.cost_ns += cost_ns;
        l.queue.push_back(Job { item, tree, bytes, cost_ns, pushed: now, deadline, seq: self.seq });
        self.seq += 1;
        self.len += 1;
        deadline
    }

    /// The share of the CPU handed out to unpaced records lately (1 before anything was).
    pub fn unpaced_share(&self, now: f64) -> f64 {
        let k = self.decay(now);
        let (u, all) = (self.share.0 * k, self.share.1 * k);
        if all > 0.0 {
            u / all
        } else {
            1.0
        }
    }

    fn decay(&self, now: f64) -> f64 {
        let dt = (now - self.share_at).max(0.0);
        (-dt / self.tun.share_tau_secs.max(1e-9)).exp()
    }

    /// The record to compress next at `now` (block comment, POP).
    pub fn pop(&mut self, now: f64) -> Option<Job<T>> {
        let head = |paced: bool| {
            self.lanes
                .iter()
                .filter(|(_, l)| (l.rate > 0.0) == paced)
                .filter_map(|(t, l)| l.queue.front().map(|j| (*t, (j.deadline, j.seq))))
                .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then(a.1 .1.cmp(&b.1 .1)))
                .map(|x| x.0)
        };
        let (qos, unpaced) = (head(true), head(false));
        // a lane that lost its rate keeps its queued deadlines: it counts as unpaced now
        let tree = match (qos, unpaced) {
            (Some(_), Some(u)) if self.unpaced_share(now) < self.tun.unpaced_min_share => u,
            (Some(q), _) => q,
            (None, Some(u)) => u,
            (None, None) => return None,
        };
        let l = self.lanes.get_mut(&tree).expect("found");
        let paced = l.rate > 0.0;
        let j = l.queue.pop_front().expect("non-empty");
        l.bytes -= j.bytes;
        l.cost_ns = if l.queue.is_empty() { 0.0 } else { (l.cost_ns - j.cost_ns).max(0.0) };
        if l.queue.is_empty() && !paced {
            self.lanes.remove(&tree);
        }
        self.len -= 1;
        let k = self.decay(now);
        let cost = j.cost_ns.max(1.0);
        self.share = (self.share.0 * k + if paced { 0.0 } else { cost }, self.share.1 * k + cost);
        self.share_at = self.share_at.max(now);
        Some(j)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How late `tree`'s oldest queued record is at `now`, seconds (0 when on time or
    /// unpaced): the tree's compression is falling behind its rate.
    pub fn lag(&self, tree: TreeId, now: f64) -> f64 {
        self.lanes
            .get(&tree)
            .and_then(|l| l.queue.front())
            .filter(|j| j.deadline.is_finite())
            .map_or(0.0, |j| (now - j.deadline).max(0.0))
    }

    /// Bytes and estimated CPU ns queued for `tree`.
    pub fn queued(&self, tree: TreeId) -> (u64, f64) {
        self.lanes.get(&tree).map_or((0, 0.0), |l| (l.bytes, l.cost_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_records_by_deadline_then_unpaced() {
        let mut s = CompressScheduler::new(SchedTunables { deadline_slack_secs: 0.0, ..SchedTunables::default() });
        s.set_rate(1, 100e6);
        s.set_rate(2, 10e6);
        let rec = 100_000;
        // unpaced first in time, then eight records each at t = 0: deadlines 1 ms and 10 ms apart
        assert_eq!(s.push(0, rec, 1e6, 0.0, (0, 0)), f64::INFINITY);
        for k in 0..8 {
            assert!((s.push(1, rec, 1e6, 0.0, (1, k)) - (k + 1) as f64 * 1e-3).abs() < 1e-12);
            assert!((s.push(2, rec, 1e6, 0.0, (2, k)) - (k + 1) as f64 * 1e-2).abs() < 1e-12);
        }
        assert_eq!(s.queued(2).0, 8 * rec);
        // QoS by deadline; the unpaced record as soon as its share of the CPU handed out falls
        // below the floor (after the first QoS record: 0 of 1)
        let order: Vec<(u64, i32)> = std::iter::from_fn(|| s.pop(0.0).map(|j| j.item)).collect();
        let mut want = vec![(1, 0), (0, 0)];
        want.extend((1..8).map(|k| (1, k)));
        want.extend((0..8).map(|k| (2, k)));
        assert_eq!(order, want);
        assert!(s.is_empty() && s.queued(2) == (0, 0.0));
        // a lane that was idle starts from now, not from its old virtual finish
        assert!((s.push(2, rec, 0.0, 5.0, (2, 9)) - 5.01).abs() < 1e-12);
        assert!((s.lag(2, 5.5) - 0.49).abs() < 1e-9);
        // a tree without a rate is unpaced
        s.set_rate(2, 0.0);
        assert_eq!(s.push(2, rec, 0.0, 6.0, (2, 10)), f64::INFINITY);
        assert_eq!(s.lag(0, 9.0), 0.0);
    }

    #[test]
    fn unpaced_records_keep_their_floor_share_under_qos_load() {
        let mut s = CompressScheduler::new(SchedTunables::default());
        s.set_rate(1, 1e9);
        let mut t = 0.0;
        let (mut u, mut all) = (0.0f64, 0.0f64);
        for k in 0..20_000 {
            // both always have work queued; one record costs 1 ms
            while s.queued(1).0 < 4 {
                s.push(1, 1, 1e6, t, k);
            }
            while s.queued(0).0 < 4 {
                s.push(0, 1, 1e6, t, k);
            }
            let j = s.pop(t).unwrap();
            if t > 5.0 {
                all += 1.0;
                if j.tree == 0 {
                    u += 1.0;
                }
            }
            t += 1e-3;
        }
        let share = u / all;
        assert!((share - 0.1).abs() < 0.01, "{share}");
    }
}
