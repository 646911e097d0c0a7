//! The compress queue across trees: earliest deadline first, deadlines from each tree's rate,
//! so a fast tree's records never queue behind a slow tree's expensive ones.
//!
//! ```text
//! LANES: one FIFO per tree (records of one tree keep their order). A QoS tree's lane has the
//!   tree's rate r (its admission allotment, `set_rate`); every other record (no QoS tree,
//!   or a tree without a rate yet) is *unpaced*.
//! DEADLINES (virtual clock): a record of b bytes pushed at `now` into a lane of rate r gets
//!     F = max(F_previous, now) + b / r,   deadline = F + deadline_slack_secs;
//!   F is when the record would be done if the tree's records were compressed exactly at its
//!   rate, one after the other. An unpaced record gets now + unpaced_slack_secs.
//! POP: the lane head with the earliest deadline (ties: pushed first). Records are never
//!   preempted: a worker runs its record to the end.
//! WHY: a FIFO queue puts a fast tree's cheap records behind whatever the slow tree pushed
//!   before them (a 1 MiB write at zstd:15 is 8 records of 20 ms each). Here each tree is
//!   served at its rate: a 100 MB/s tree's records carry deadlines 1.3 ms apart, a 10 MB/s
//!   tree's 13 ms apart, and the fast tree's next record is taken as soon as a worker frees.
//!   Bound: when the planned CPU fits the cores (levels.rs), a record finishes within its
//!   deadline plus one record's compression time at the most expensive level in use (the
//!   worker it waits for). A tree writing faster than its rate (a burst) pushes its own
//!   deadlines into the future and is served after the trees within theirs; the others do
//!   not notice. Unpaced records (auto or fixed levels outside QoS trees) wait at most
//!   unpaced_slack_secs behind QoS records that are on time.
//! STATE per lane: rate, F of its last record, queued records with their bytes and estimated
//!   CPU (for the level choice's backlog view and `stats`). A lane whose tree lost its rate and
//!   whose queue is empty is dropped.
//!
//! TUNABLES (`SchedTunables`):
//!   deadline_slack_secs 0.05   latency a QoS record may take beyond its virtual finish (one
//!                              zstd:15 record of 128 KiB takes ~20 ms on one core)
//!   unpaced_slack_secs 0.25    how long an unpaced record yields to QoS records
//! ```

use super::admission::{TreeId, NO_TREE};
use std::collections::{HashMap, VecDeque};

/// Scheduler tunables (see the block comment).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedTunables {
    pub deadline_slack_secs: f64,
    pub unpaced_slack_secs: f64,
}

impl Default for SchedTunables {
    fn default() -> SchedTunables {
        SchedTunables { deadline_slack_secs: 0.05, unpaced_slack_secs: 0.25 }
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
}

impl<T> CompressScheduler<T> {
    pub fn new(tun: SchedTunables) -> CompressScheduler<T> {
        CompressScheduler { tun, lanes: HashMap::new(), seq: 0, len: 0 }
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

    /// Queue a record of `bytes` of `tree` at `now`; returns its deadline.
    pub fn push(&mut self, tree: TreeId, bytes: u64, cost_ns: f64, now: f64, item: T) -> f64 {
        let tun = &self.tun;
        let l = self.lanes.entry(tree).or_insert_with(Lane::new);
        let deadline = if l.rate > 0.0 {
            l.finish = l.finish.max(now) + bytes as f64 / l.rate;
            l.finish + tun.deadline_slack_secs
        } else {
            now + tun.unpaced_slack_secs
        };
        let cost_ns = if cost_ns.is_finite() { cost_ns.max(0.0) } else { 0.0 };
        l.bytes += bytes;
        l.cost_ns += cost_ns;
        l.queue.push_back(Job { item, tree, bytes, cost_ns, pushed: now, deadline, seq: self.seq });
        self.seq += 1;
        self.len += 1;
        deadline
    }

    /// The record to compress next: the earliest deadline among the lanes' heads.
    pub fn pop(&mut self) -> Option<Job<T>> {
        let (&tree, _) = self
            .lanes
            .iter()
            .filter_map(|(t, l)| l.queue.front().map(|j| (t, (j.deadline, j.seq))))
            .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then(a.1 .1.cmp(&b.1 .1)))?;
        let l = self.lanes.get_mut(&tree).expect("found");
        let j = l.queue.pop_front().expect("non-empty");
        l.bytes -= j.bytes;
        l.cost_ns = if l.queue.is_empty() { 0.0 } else { (l.cost_ns - j.cost_ns).max(0.0) };
        if l.queue.is_empty() && l.rate == 0.0 {
            self.lanes.remove(&tree);
        }
        self.len -= 1;
        Some(j)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
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
    fn deadlines_follow_each_trees_rate() {
        let mut s = CompressScheduler::new(SchedTunables { deadline_slack_secs: 0.0, unpaced_slack_secs: 1.0 });
        s.set_rate(1, 100e6);
        s.set_rate(2, 10e6);
        let rec = 100_000;
        // eight records each at t = 0: deadlines 1 ms and 10 ms apart
        for k in 0..8 {
            assert!((s.push(1, rec, 0.0, 0.0, (1, k)) - (k + 1) as f64 * 1e-3).abs() < 1e-12);
            assert!((s.push(2, rec, 0.0, 0.0, (2, k)) - (k + 1) as f64 * 1e-2).abs() < 1e-12);
        }
        assert_eq!(s.push(0, rec, 0.0, 0.0, (0, 0)), 1.0);
        assert_eq!(s.queued(2).0, 8 * rec);
        let order: Vec<(u64, i32)> = std::iter::from_fn(|| s.pop().map(|j| j.item)).collect();
        // all of tree 1 first except where tree 2's first deadline (10 ms) falls: after 1's 8 ms
        assert_eq!(&order[..8], &(0..8).map(|k| (1, k)).collect::<Vec<_>>()[..]);
        assert_eq!(&order[8..16], &(0..8).map(|k| (2, k)).collect::<Vec<_>>()[..]);
        assert_eq!(order[16], (0, 0));
        assert!(s.is_empty() && s.queued(2) == (0, 0.0));
        // a lane that was idle starts from now, not from its old virtual finish
        assert!((s.push(2, rec, 0.0, 5.0, (2, 9)) - 5.01).abs() < 1e-12);
        // a tree without a rate is unpaced
        s.set_rate(2, 0.0);
        assert_eq!(s.push(2, rec, 0.0, 6.0, (2, 10)), 7.0);
    }
}
