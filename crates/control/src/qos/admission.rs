//! Hierarchical admission of writes into QoS trees: token buckets nested like Linux HTB.
//!
//! ```text
//! CLASSES: one per directory holding `qos` (a *tree*, keyed by its inode number). A
//!   directory without its own `qos` is no class: its writes charge the nearest ancestor's.
//!   A class's parent is the class of the nearest ancestor directory holding `qos`; a class
//!   without one is *top-level*. Its traffic is the bytes written to files whose nearest `qos`
//!   directory is the class's own, the *self* leaf; its subtree's traffic adds its child
//!   classes'. Only leaves have buckets (HTB: only leaves carry packets, inner classes lend).
//!
//! RATES (HTB semantics):
//!   top-level class T: its rate r_T is a hard ceiling on its whole subtree;
//!   child class C of X: guaranteed r_C, may borrow X's unused rate, so its subtree gets
//!     anything between r_C and what X gets (at most X's ceiling: ultimately r_T). Children
//!     together never exceed the parent: everything X's subtree admits comes out of X's share;
//!   self leaf of X: guaranteed r_X − Σ r_C, at least min_self_share × r_X (else files written
//!     straight into X could wait for ever behind busy children); when the children's rates
//!     leave less than that (or exceed r_X: an overcommitted parent) the children's guarantees
//!     are scaled down so that guarantees always sum to the parent's (the parent's rate is a
//!     ceiling, never exceeded to honour an impossible guarantee);
//!   nested guarantees scale with their parent's: a child of a class whose own guarantee was
//!     scaled by k gets k × its nominal guarantee.
//!
//! LEAF STATES (what its demand is, below):
//!   idle ──request──► unmeasured ──(a period of realloc_secs measured)──► measured
//!   unmeasured/measured ──told to wait──► backlogged ──(its wait ended backlog_hold_secs
//!   ago)──► measured;  any state ──(no request for idle_secs, none waiting)──► idle.
//!
//! ALLOCATION (recomputed every realloc_secs, and at once when a leaf wakes from idle or is
//!   first told to wait): a leaf's *demand* is
//!     idle       no request for idle_secs and none waiting: 0 (its guarantee is lent out);
//!     backlogged a request is waiting (told to come back at a time not yet past), or was
//!                within backlog_hold_secs, or the leaf is not measured yet: unbounded;
//!     otherwise  its admitted rate (averaged with time constant demand_tau_secs) ×
//!                demand_headroom (room to grow before it has to wait and ask).
//!   From the top (allotment r_T) down, a class's allotment A is split among its self leaf and
//!   its children (demand of a child = sum over its subtree):
//!     1. each gets min(demand, guarantee);
//!     2. the rest of A goes to those wanting more, by water-filling weighted by guarantee
//!        (HTB's quantum ∝ rate), capped at their demand: this is *borrowing*;
//!     3. what is still left goes to the active ones (a request within idle_secs), weighted by
//!        guarantee (work conserving: a lone writer gets the whole ceiling).
//!   Each leaf's bucket then fills at its allotment. Σ allotments ≤ r_T at every moment, so
//!   the ceiling holds by construction; borrowing is weighted by rate, not by who asks most
//!   often, so the number of writers in a tree does not change its share.
//!
//! BUCKET (per leaf; tokens in bytes, may be negative = a *deficit*):
//!   tokens grow at the leaf's allotment up to cap = allotment × burst_secs;
//!   admit(n): tokens ≥ 0 → Go, tokens −= n (a request larger than the cap still passes once
//!     the deficit is paid: no request size can deadlock); tokens < 0 → WaitUntil(now +
//!     deficit / allotment), nothing charged: the caller asks again then. Many writers asking
//!     at the same moment get one Go and the others a later time, so the tree's total rate
//!     is the same with 1 or 100 writers;
//!   a change of allotment first advances the tokens at the old rate, then clamps them to the
//!     new cap: a deficit is kept (a borrower whose share shrinks pays its debt at the new
//!     rate), surplus above the cap is dropped (that is what the cap means).
//!   Over any interval of length t a top-level subtree admits at most
//!     r_T × (t + burst_secs) + (number of leaves) × (largest request),
//!   a leaf that keeps asking gets at least its guarantee × t − cap − one request.
//!
//! TREE CHANGES (property set or cleared, directories renamed; `set_tree`, `remove_tree`,
//!   `move_tree`): every bucket of the trees involved is first advanced to `now` at its old
//!   rate; then
//!     new class under X: starts at 0 tokens (X's self leaf keeps its own: no tokens made);
//!     removed class: its children move to its parent; its tokens (and deficit) fold into the
//!       parent's self leaf, which now carries its traffic (no tokens made or lost, except
//!       surplus above the cap); a removed top-level class's traffic is no longer paced;
//!     moved class: keeps its own tokens and its subtree;
//!     rate change: as a change of allotment.
//!   Then both old and new top-level trees are reallocated.
//!
//! TIME: every call takes `now` (monotonic seconds, any origin). No clocks, no threads, no
//!   sleeping: `WaitUntil(t)` tells the caller when to ask again, so it can wait outside any
//!   lock or defer the request. A `now` earlier than one already seen is treated as that one.
//!
//! READS are never paced: only writes (data entering the dirty cache) are admitted.
//!
//! TUNABLES (`AdmissionTunables`):
//!   burst_secs 0.25         bucket depth in seconds of rate: credit a writer held up
//!                           elsewhere (a txg's fdatasync on a busy disk) keeps, so a stall
//!                           up to 0.25 s costs the tree no rate; bounds a burst to 2.5% of
//!                           a 10 s window (squeezefs: mount option qos-burst=)
//!   realloc_secs 0.1        demands are re-measured this often (and on wake-up/first wait)
//!   demand_tau_secs 0.5     time constant of a leaf's admitted-rate average
//!   backlog_hold_secs 0.3   a leaf stays unbounded this long after its last wait ended (the
//!                           writer's next request), so it does not flap between shares
//!   idle_secs 1.0           after this without a request a leaf lends its whole guarantee
//!   demand_headroom 1.1     a leaf below its share keeps 10% above its rate before it must ask
//!   min_self_share 1/32     floor of a self leaf's guarantee, as a share of its class's rate
//! ```

use std::collections::HashMap;

/// A QoS tree: the inode number of the directory holding `qos`.
pub type TreeId = u64;

/// The tree id of data written outside any QoS tree (trace column `tree` = 0).
pub const NO_TREE: TreeId = 0;

/// Slack on the token test, bytes (float rounding when a caller comes back exactly on time).
const TOLERANCE_BYTES: f64 = 1.0;

/// Admission tunables (see the block comment).
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionTunables {
    pub burst_secs: f64,
    pub realloc_secs: f64,
    pub demand_tau_secs: f64,
    pub backlog_hold_secs: f64,
    pub idle_secs: f64,
    pub demand_headroom: f64,
    pub min_self_share: f64,
}

impl Default for AdmissionTunables {
    fn default() -> AdmissionTunables {
        AdmissionTunables {
            burst_secs: 0.25,
            realloc_secs: 0.1,
            demand_tau_secs: 0.5,
            backlog_hold_secs: 0.3,
            idle_secs: 1.0,
            demand_headroom: 1.1,
            min_self_share: 1.0 / 32.0,
        }
    }
}

/// The answer to a write asking to enter its tree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admit {
    /// Go ahead; the bytes were charged.
    Go,
    /// Nothing was charged: ask again at this time (seconds, the clock of `now`).
    WaitUntil(f64),
}

/// Errors of changing the set of trees.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QosError {
    #[error("qos tree {0} is not known")]
    UnknownTree(TreeId),
    #[error("tree id 0 means \"no qos tree\" and cannot carry a rate")]
    ReservedId,
    #[error("qos rate of tree {tree} must be a positive, finite number of bytes per second, not {rate}")]
    BadRate { tree: TreeId, rate: f64 },
    #[error("qos tree {tree} cannot go under tree {parent}: {parent} is inside it")]
    Cycle { tree: TreeId, parent: TreeId },
}

/// What one tree's admission looks like (for `squeezefs stats` and the level choice).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreeInfo {
    /// the `qos` property, bytes/s
    pub rate_bps: f64,
    pub parent: Option<TreeId>,
    /// the top-level tree this one is in (itself when top-level)
    pub top: TreeId,
    /// the self leaf's guarantee after scaling, bytes/s
    pub guaranteed_bps: f64,
    /// the self leaf's current allotment (guarantee + borrowed), bytes/s
    pub allocated_bps: f64,
    /// tokens in the self leaf's bucket (negative: a deficit), bytes
    pub tokens: f64,
    /// bytes admitted since the tree was created
    pub admitted_bytes: u64,
    /// requests told to wait since the tree was created
    pub waits: u64,
    /// a request is waiting, or was within backlog_hold_secs
    pub backlogged: bool,
    /// no request within idle_secs
    pub idle: bool,
    /// the averaged admitted rate, bytes/s, once measured
    pub measured_bps: Option<f64>,
}

#[derive(Clone, Debug)]
struct Leaf {
    tokens: f64,
    /// allotment, bytes/s
    rate: f64,
    guaranteed: f64,
    /// the tokens are as of this time
    at: f64,
    period_start: Option<f64>,
    period_bytes: u64,
    rate_avg: Option<f64>,
    last_request: Option<f64>,
    /// the latest time a waiting request was told to come back (it waits until then)
    wait_until: Option<f64>,
    admitted: u64,
    waits: u64,
}

impl Leaf {
    fn new(now: f64) -> Leaf {
        Leaf {
            tokens: 0.0,
            rate: 0.0,
            guaranteed: 0.0,
            at: now,
            period_start: None,
            period_bytes: 0,
            rate_avg: None,
            last_request: None,
            wait_until: None,
            admitted: 0,
            waits: 0,
        }
    }

    fn cap(&self, tun: &AdmissionTunables) -> f64 {
        self.rate * tun.burst_secs
    }

    /// Tokens at `now` at the current allotment.
    fn advance(&mut self, now: f64, tun: &AdmissionTunables) {
        if now > self.at {
            let cap = self.cap(tun);
            if self.tokens < cap {
                self.tokens = (self.tokens + self.rate * (now - self.at)).min(cap);
            }
            self.at = now;
        }
    }

    /// No request for idle_secs and none waiting.
    fn idle(&self, now: f64, tun: &AdmissionTunables) -> bool {
        self.last_request.is_none_or(|t| now - t > tun.idle_secs) && !self.backlogged(now, tun)
    }

    fn backlogged(&self, now: f64, tun: &AdmissionTunables) -> bool {
        self.wait_until.is_some_and(|t| now - t <= tun.backlog_hold_secs)
    }

    /// Demand in bytes/s (infinite = unbounded) and whether the leaf is active.
    fn demand(&self, now: f64, tun: &AdmissionTunables) -> (f64, bool) {
        if self.idle(now, tun) {
            return (0.0, false);
        }
        if self.backlogged(now, tun) {
            return (f64::INFINITY, true);
        }
        match self.rate_avg {
            Some(r) => (r * tun.demand_headroom, true),
            None => (f64::INFINITY, true),
        }
    }

    /// Fold the bytes admitted since the last period into the rate average.
    fn measure(&mut self, now: f64, tun: &AdmissionTunables) {
        let Some(start) = self.period_start else {
            self.period_start = Some(now);
            return;
        };
        let dt = now - start;
        // the first figure needs a period of some length (one request over a millisecond is
        // no rate); later ones are weighted by their length, so short periods average out
        if dt <= 0.0 || (self.rate_avg.is_none() && dt < tun.realloc_secs) {
            return;
        }
        let sample = self.period_bytes as f64 / dt;
        self.rate_avg = Some(match self.rate_avg {
            None => sample,
            Some(old) => old + (1.0 - (-dt / tun.demand_tau_secs).exp()) * (sample - old),
        });
        self.period_start = Some(now);
        self.period_bytes = 0;
    }

    /// A request after an idle spell: the old rate says nothing about the new writer.
    fn wake(&mut self, now: f64) {
        self.rate_avg = None;
        self.period_start = Some(now);
        self.period_bytes = 0;
    }
}

#[derive(Clone, Debug)]
struct Class {
    rate: f64,
    parent: Option<TreeId>,
    children: Vec<TreeId>,
    leaf: Leaf,
    /// last allocation of the subtree (meaningful for top-level classes)
    realloc_at: f64,
}

fn later(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

/// One share-taker under a class: its guarantee (the weight), demand, whether active.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Claim {
    pub guaranteed: f64,
    pub demand: f64,
    pub active: bool,
}

/// Split `total` among `claims` (block comment, ALLOCATION steps 1–3).
pub fn split(total: f64, claims: &[Claim]) -> Vec<f64> {
    let total = total.max(0.0);
    let weight = |c: &Claim| c.guaranteed.max(total * 1e-9).max(1e-12);
    let mut give: Vec<f64> = claims.iter().map(|c| c.demand.min(c.guaranteed).max(0.0)).collect();
    let base: f64 = give.iter().sum();
    if base > total {
        // cannot happen when guarantees fit the allotment; stay within it regardless
        let k = if base > 0.0 { total / base } else { 0.0 };
        give.iter_mut().for_each(|g| *g *= k);
        return give;
    }
    let mut left = total - base;
    // 2: water-filling of unmet demand, weighted by guarantee
    let mut open: Vec<usize> = (0..claims.len()).filter(|&i| claims[i].demand > give[i]).collect();
    while left > total * 1e-12 && !open.is_empty() {
        let w: f64 = open.iter().map(|&i| weight(&claims[i])).sum();
        let full: Vec<usize> =
            open.iter().copied().filter(|&i| claims[i].demand - give[i] <= left * weight(&claims[i]) / w).collect();
        if full.is_empty() {
            for &i in &open {
                give[i] += left * weight(&claims[i]) / w;
            }
            left = 0.0;
            break;
        }
        for &i in &full {
            left -= claims[i].demand - give[i];
            give[i] = claims[i].demand;
        }
        left = left.max(0.0);
        open.retain(|i| !full.contains(i));
    }
    // 3: what nobody asked for goes to the active claims
    if left > 0.0 {
        let w: f64 = claims.iter().filter(|c| c.active).map(weight).sum();
        if w > 0.0 {
            for (i, c) in claims.iter().enumerate().filter(|(_, c)| c.active) {
                give[i] += left * weight(c) / w;
            }
        }
    }
    give
}

/// All QoS trees of a mount and their buckets (see the block comment).
#[derive(Clone, Debug)]
pub struct Admission {
    tun: AdmissionTunables,
    classes: HashMap<TreeId, Class>,
    /// the latest `now` seen
    now: f64,
    /// allocations that were not periodic (see `changes`)
    changes: u64,
}

impl Admission {
    pub fn new(tun: AdmissionTunables) -> Admission {
        Admission { tun, classes: HashMap::new(), now: f64::NEG_INFINITY, changes: 0 }
    }

    /// Counts the allocations that were not periodic: a tree woke up or started waiting, or
    /// the trees changed. A caller planning levels on the allotments replans when it moves.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    pub fn tunables(&self) -> &AdmissionTunables {
        &self.tun
    }

    fn clock(&mut self, now: f64) -> f64 {
        if now.is_finite() && now > self.now {
            self.now = now;
        }
        self.now.max(0.0)
    }

    /// The trees, in no particular order.
    pub fn trees(&self) -> impl Iterator<Item = TreeId> + '_ {
        self.classes.keys().copied()
    }

    pub fn contains(&self, tree: TreeId) -> bool {
        self.classes.contains_key(&tree)
    }

    /// The top-level tree `tree` is in.
    pub fn top_of(&self, tree: TreeId) -> Option<TreeId> {
        let mut t = tree;
        loop {
            match self.classes.get(&t)?.parent {
                Some(p) => t = p,
                None => return Some(t),
            }
        }
    }

    /// `tree` and every class below it, parents before children.
    fn subtree(&self, tree: TreeId) -> Vec<TreeId> {
        let mut out = vec![tree];
        let mut i = 0;
        while i < out.len() {
            if let Some(c) = self.classes.get(&out[i]) {
                out.extend(c.children.iter().copied());
            }
            i += 1;
        }
        out
    }

    fn inside(&self, tree: TreeId, maybe_descendant: TreeId) -> bool {
        let mut t = Some(maybe_descendant);
        while let Some(x) = t {
            if x == tree {
                return true;
            }
            t = self.classes.get(&x).and_then(|c| c.parent);
        }
        false
    }

    /// Set tree `tree`'s rate (creating it) under `parent` (the class of the nearest
    /// ancestor directory holding `qos`, or None). Moving an existing tree is allowed here too.
    pub fn set_tree(&mut self, tree: TreeId, parent: Option<TreeId>, rate_bps: f64, now: f64) -> Result<(), QosError> {
        if tree == NO_TREE {
            return Err(QosError::ReservedId);
        }
        if !(rate_bps.is_finite() && rate_bps > 0.0) {
            return Err(QosError::BadRate { tree, rate: rate_bps });
        }
        if let Some(p) = parent {
            if !self.classes.contains_key(&p) {
                return Err(QosError::UnknownTree(p));
            }
            if self.inside(tree, p) {
                return Err(QosError::Cycle { tree, parent: p });
            }
        }
        let now = self.clock(now);
        self.changes += 1;
        if self.classes.contains_key(&tree) {
            self.settle(tree, now);
            self.classes.get_mut(&tree).expect("checked").rate = rate_bps;
            if self.classes[&tree].parent != parent {
                self.move_tree(tree, parent, now)?;
            } else {
                let top = self.top_of(tree).expect("known");
                self.realloc(top, now);
            }
            return Ok(());
        }
        if let Some(p) = parent {
            self.settle(p, now);
            self.classes.get_mut(&p).expect("checked").children.push(tree);
        }
        self.classes.insert(
            tree,
            Class { rate: rate_bps, parent, children: Vec::new(), leaf: Leaf::new(now), realloc_at: now },
        );
        let top = self.top_of(tree).expect("inserted");
        self.realloc(top, now);
        Ok(())
    }

    /// `tree` loses its `qos`: its traffic goes to its parent's self leaf (with its tokens or
    /// deficit), its child classes to its parent.
    pub fn remove_tree(&mut self, tree: TreeId, now: f64) -> Result<(), QosError> {
        if !self.classes.contains_key(&tree) {
            return Err(QosError::UnknownTree(tree));
        }
        let now = self.clock(now);
        self.changes += 1;
        self.settle(tree, now);
        let gone = self.classes.remove(&tree).expect("checked");
        let parent = gone.parent;
        if let Some(p) = parent {
            let tun = self.tun.clone();
            let pc = self.classes.get_mut(&p).expect("parents are known");
            pc.children.retain(|&c| c != tree);
            pc.children.extend(gone.children.iter().copied());
            let l = &mut pc.leaf;
            l.tokens = (l.tokens + gone.leaf.tokens).min(l.cap(&tun).max(l.tokens));
            l.rate_avg = match (l.rate_avg, gone.leaf.rate_avg) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
            l.period_bytes += gone.leaf.period_bytes;
            l.last_request = later(l.last_request, gone.leaf.last_request);
            l.wait_until = later(l.wait_until, gone.leaf.wait_until);
        }
        for &c in &gone.children {
            self.classes.get_mut(&c).expect("children are known").parent = parent;
        }
        match parent {
            Some(p) => {
                let top = self.top_of(p).expect("known");
                self.realloc(top, now);
            }
            None => {
                for &c in &gone.children {
                    self.realloc(c, now);
                }
            }
        }
        Ok(())
    }

    /// `tree` (with its subtree) now sits under `parent` (a directory holding `qos` was moved).
    pub fn move_tree(&mut self, tree: TreeId, parent: Option<TreeId>, now: f64) -> Result<(), QosError> {
        if !self.classes.contains_key(&tree) {
            return Err(QosError::UnknownTree(tree));
        }
        if let Some(p) = parent {
            if !self.classes.contains_key(&p) {
                return Err(QosError::UnknownTree(p));
            }
            if self.inside(tree, p) {
                return Err(QosError::Cycle { tree, parent: p });
            }
        }
        let now = self.clock(now);
        self.changes += 1;
        self.settle(tree, now);
        if let Some(p) = parent {
            self.settle(p, now);
        }
        let old_top = self.top_of(tree).expect("known");
        if let Some(old) = self.classes[&tree].parent {
            self.classes.get_mut(&old).expect("parents are known").children.retain(|&c| c != tree);
        }
        if let Some(p) = parent {
            self.classes.get_mut(&p).expect("checked").children.push(tree);
        }
        self.classes.get_mut(&tree).expect("checked").parent = parent;
        let new_top = self.top_of(tree).expect("known");
        if old_top != new_top && self.classes.contains_key(&old_top) {
            self.realloc(old_top, now);
        }
        self.realloc(new_top, now);
        Ok(())
    }

    /// Advance every bucket of the top-level tree holding `tree` to `now` at its current rate.
    fn settle(&mut self, tree: TreeId, now: f64) {
        let Some(top) = self.top_of(tree) else { return };
        let tun = self.tun.clone();
        for id in self.subtree(top) {
            self.classes.get_mut(&id).expect("subtree ids are known").leaf.advance(now, &tun);
        }
    }

    /// Recompute the allotments of the top-level tree `top` (block comment, ALLOCATION).
    fn realloc(&mut self, top: TreeId, now: f64) {
        let tun = self.tun.clone();
        let ids = self.subtree(top);
        let mut demand: HashMap<TreeId, (f64, bool)> = HashMap::with_capacity(ids.len());
        for &id in &ids {
            let l = &mut self.classes.get_mut(&id).expect("subtree ids are known").leaf;
            l.advance(now, &tun);
            l.measure(now, &tun);
        }
        // subtree demands, children before parents
        for &id in ids.iter().rev() {
            let c = &self.classes[&id];
            let (mut d, mut a) = c.leaf.demand(now, &tun);
            for k in &c.children {
                let (kd, ka) = demand[k];
                d += kd;
                a |= ka;
            }
            demand.insert(id, (d, a));
        }
        let top_rate = self.classes[&top].rate;
        let mut stack = vec![(top, top_rate, top_rate)];
        while let Some((x, allot, guaranteed)) = stack.pop() {
            let c = &self.classes[&x];
            let k = if c.rate > 0.0 { guaranteed / c.rate } else { 0.0 };
            let kids_nominal: f64 = c.children.iter().map(|k| self.classes[k].rate).sum();
            let floor = tun.min_self_share.clamp(0.0, 1.0) * c.rate;
            let (self_nominal, kid_scale) = if c.rate - kids_nominal >= floor {
                (c.rate - kids_nominal, 1.0)
            } else {
                (floor, ((c.rate - floor) / kids_nominal).max(0.0))
            };
            let mut claims = Vec::with_capacity(c.children.len() + 1);
            let (sd, sa) = c.leaf.demand(now, &tun);
            claims.push(Claim { guaranteed: self_nominal * k, demand: sd, active: sa });
            for kid in &c.children {
                let (d, a) = demand[kid];
                claims.push(Claim { guaranteed: self.classes[kid].rate * kid_scale * k, demand: d, active: a });
            }
            let shares = split(allot, &claims);
            let children = c.children.clone();
            let l = &mut self.classes.get_mut(&x).expect("known").leaf;
            l.rate = shares[0];
            l.guaranteed = claims[0].guaranteed;
            l.tokens = l.tokens.min(l.cap(&tun));
            for (i, kid) in children.into_iter().enumerate() {
                stack.push((kid, shares[i + 1], claims[i + 1].guaranteed));
            }
        }
        self.classes.get_mut(&top).expect("known").realloc_at = now;
    }

    /// May `bytes` be written into `tree` at `now`? A tree not known here is not paced.
    pub fn admit(&mut self, tree: TreeId, bytes: u64, now: f64) -> Admit {
        if bytes == 0 || !self.classes.contains_key(&tree) {
            return Admit::Go;
        }
        let now = self.clock(now);
        let top = self.top_of(tree).expect("known");
        let tun = &self.tun;
        let l = &mut self.classes.get_mut(&tree).expect("checked").leaf;
        let woke = l.idle(now, tun);
        if woke {
            l.wake(now);
        }
        l.last_request = Some(now);
        if woke || now - self.classes[&top].realloc_at >= self.tun.realloc_secs {
            self.changes += u64::from(woke);
            self.realloc(top, now);
        }
        let tun = &self.tun;
        let l = &mut self.classes.get_mut(&tree).expect("checked").leaf;
        l.advance(now, tun);
        if l.tokens > -TOLERANCE_BYTES {
            l.tokens -= bytes as f64;
            l.admitted += bytes;
            l.period_bytes += bytes;
            return Admit::Go;
        }
        let first = !l.backlogged(now, tun);
        l.waits += 1;
        l.wait_until = Some(now);
        if first {
            self.changes += 1;
            self.realloc(top, now);
        }
        let realloc_secs = self.tun.realloc_secs;
        let l = &mut self.classes.get_mut(&tree).expect("checked").leaf;
        let at = if l.rate <= 0.0 { now + realloc_secs } else { now + (-l.tokens) / l.rate };
        l.wait_until = later(l.wait_until, Some(at));
        Admit::WaitUntil(at)
    }

    /// The state of `tree` at `now` (buckets advanced to it; nothing else changes).
    pub fn info(&self, tree: TreeId, now: f64) -> Option<TreeInfo> {
        let c = self.classes.get(&tree)?;
        let mut l = c.leaf.clone();
        let now = now.max(self.now).max(l.at);
        l.advance(now, &self.tun);
        Some(TreeInfo {
            rate_bps: c.rate,
            parent: c.parent,
            top: self.top_of(tree)?,
            guaranteed_bps: l.guaranteed,
            allocated_bps: l.rate,
            tokens: l.tokens,
            admitted_bytes: l.admitted,
            waits: l.waits,
            backlogged: l.backlogged(now, &self.tun),
            idle: l.idle(now, &self.tun),
            measured_bps: l.rate_avg,
        })
    }

    /// The input rate the level choice should plan `tree`'s compression for: its current
    /// allotment (what it may write), 0 while idle.
    pub fn expected_rate(&self, tree: TreeId, now: f64) -> f64 {
        self.info(tree, now).map_or(0.0, |i| if i.idle { 0.0 } else { i.allocated_bps })
    }

    /// Tokens held over the whole top-level tree of `tree` at `now` (deficits count negative).
    pub fn tokens_in_top(&self, tree: TreeId, now: f64) -> f64 {
        let Some(top) = self.top_of(tree) else { return 0.0 };
        self.subtree(top).iter().filter_map(|&t| self.info(t, now)).map(|i| i.tokens).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(g: f64, d: f64) -> Claim {
        Claim { guaranteed: g, demand: d, active: d > 0.0 }
    }

    #[test]
    fn split_gives_guarantees_then_borrowing_by_weight_then_leftover() {
        let inf = f64::INFINITY;
        // both want more than they are guaranteed: exactly the guarantees
        assert_eq!(split(20.0, &[claim(15.0, inf), claim(5.0, inf)]), vec![15.0, 5.0]);
        // one idle: the other borrows all
        assert_eq!(split(20.0, &[claim(15.0, 0.0), claim(5.0, inf)]), vec![0.0, 20.0]);
        // one uses 3 of its 15: the other gets the 12 it leaves
        let s = split(20.0, &[claim(15.0, 3.0), claim(5.0, inf)]);
        assert!((s[0] - 3.0).abs() < 1e-9 && (s[1] - 17.0).abs() < 1e-9, "{s:?}");
        // borrowing of what a third leaves is weighted by guarantee: 3:1
        let s = split(40.0, &[claim(15.0, inf), claim(5.0, inf), claim(20.0, 0.0)]);
        assert!((s[0] - 30.0).abs() < 1e-9 && (s[1] - 10.0).abs() < 1e-9 && s[2] == 0.0, "{s:?}");
        // a borrower capped by its demand leaves the rest to the others
        let s = split(40.0, &[claim(15.0, inf), claim(5.0, 6.0), claim(20.0, 0.0)]);
        assert!((s[1] - 6.0).abs() < 1e-9 && (s[0] - 34.0).abs() < 1e-9, "{s:?}");
        // nobody wants it all: the leftover goes to the active claims by weight
        let s = split(20.0, &[claim(15.0, 3.0), claim(5.0, 1.0)]);
        assert!((s[0] - 3.0 - 12.0).abs() < 1e-9 && (s[1] - 1.0 - 4.0).abs() < 1e-9, "{s:?}");
        // nothing active: nothing handed out
        assert_eq!(split(20.0, &[claim(15.0, 0.0), claim(5.0, 0.0)]), vec![0.0, 0.0]);
        // the sum never exceeds the total
        for total in [0.0, 1.0, 7.5, 100.0] {
            let s = split(total, &[claim(3.0, 2.0), claim(1.0, inf), claim(0.5, 9.0), claim(2.0, 0.0)]);
            assert!(s.iter().sum::<f64>() <= total * (1.0 + 1e-9), "{total}: {s:?}");
        }
    }

    #[test]
    fn bad_changes_are_refused_with_the_reason() {
        let mut a = Admission::new(AdmissionTunables::default());
        assert_eq!(a.set_tree(0, None, 1e6, 0.0), Err(QosError::ReservedId));
        assert!(matches!(a.set_tree(5, None, 0.0, 0.0), Err(QosError::BadRate { tree: 5, .. })));
        assert!(matches!(a.set_tree(5, None, f64::NAN, 0.0), Err(QosError::BadRate { .. })));
        assert_eq!(a.set_tree(5, Some(9), 1e6, 0.0), Err(QosError::UnknownTree(9)));
        a.set_tree(5, None, 1e6, 0.0).unwrap();
        a.set_tree(6, Some(5), 1e6, 0.0).unwrap();
        assert_eq!(a.move_tree(5, Some(6), 0.0), Err(QosError::Cycle { tree: 5, parent: 6 }));
        assert_eq!(a.set_tree(5, Some(5), 1e6, 0.0), Err(QosError::Cycle { tree: 5, parent: 5 }));
        assert_eq!(a.remove_tree(7, 0.0), Err(QosError::UnknownTree(7)));
        let msg = a.move_tree(5, Some(6), 0.0).unwrap_err().to_string();
        assert_eq!(msg, "qos tree 5 cannot go under tree 6: 6 is inside it");
        // an unknown tree is not paced
        assert_eq!(a.admit(42, 1 << 30, 0.0), Admit::Go);
    }

    #[test]
    fn changes_count_wakeups_waits_and_tree_changes_not_periodic_reallocs() {
        let mut a = Admission::new(AdmissionTunables::default());
        a.set_tree(1, None, 1e6, 0.0).unwrap();
        let c0 = a.changes();
        assert_eq!(a.admit(1, 1 << 20, 0.0), Admit::Go, "first request: woke up");
        assert_eq!(a.changes(), c0 + 1);
        assert!(matches!(a.admit(1, 1 << 20, 0.01), Admit::WaitUntil(_)), "first wait");
        assert_eq!(a.changes(), c0 + 2);
        // waiting on, with periodic reallocations: no change
        for k in 1..5 {
            let _ = a.admit(1, 1 << 20, 0.01 + 0.15 * k as f64);
        }
        assert_eq!(a.changes(), c0 + 2);
        a.set_tree(2, Some(1), 1e5, 1.0).unwrap();
        assert_eq!(a.changes(), c0 + 3);
    }
}
