//! End-to-end check of a CPU-bound position (feedback mode, tunable `fb_rate`): the rung the
//! queue feedback settles on is held only as long as the mount's measured intake rate says
//! that no weaker rung writes faster.
//!
//! ```text
//! WHY: the floor (feedback.rs FLOOR) rates each rung by the CPU the process's own threads
//!   spend on it. What they do not see the model cannot charge: a loop device's kernel
//!   worker and the host filesystem under it, page-cache writeback, the kernel's side of
//!   the FUSE round trips, another process's load on the same cores. On a loop device over
//!   the host disk the floor rated zstd:1 within 15% of `none` while the mount wrote at
//!   0.68× `none`. The one figure that includes all of it is the rate the mount takes
//!   records in at while the CPU is the bottleneck, so that is what decides, as zstd's
//!   --adapt decides by its output pipe.
//!
//! MEASURED: input bytes of the records decided per second of wall time, over windows of
//!   fb_rate_secs (and at least MIN_WINDOW_RECORDS records). A gap of more than
//!   MAX_GAP_SECS between two records (the writer paused, or waits in fsync) drops the
//!   window: an idle writer is not a slow rung.
//!
//! SEARCH: a hill climb from the rung in use, c (at first the controller's own rung,
//!   top). A test compares a candidate t with c: windows alternate c, t, c, and t's rate is
//!   judged against the mean of the two c windows around it, so that a rate drifting over
//!   the three windows (data changing kind, load coming and going) cancels out. A weaker
//!   rung passes when it is faster by fb_rate_gain, a stronger one when it is slower by
//!   less than that. The reference is the rung in use rather than raw: a window at raw
//!   stores several times the bytes of one at zstd:1 on compressible data, and a search
//!   that spends half its time raw would cost more ratio than it could save time.
//!   Descent: t = c − step, step at first half of c (the rungs between zstd:1 and raw are
//!   crossed in two or three tests when raw is fastest; testing raw first cost the
//!   simulation's 50–200 MB/s cells 5–10% of throughput and ratio); a pass moves c to t, a
//!   failure halves the step; it ends when a one-rung test fails or c is raw.
//!   Recheck (every search after the first): one test one rung down — a pass turns it into
//!   a descent —, then one rung up if c < top; a pass there moves c up.
//!
//! LOAD (the caller's `Load`, per record): Cpu — records wait for the compress workers
//!   while they are busy, or the allowed CPUs are (nearly) never idle, the device queue
//!   at or below its target and not growing;
//!   Device — the queue above its target or growing; Neither — the queue short and the
//!   workers not saturated: the writer, or the pipeline's CPU outside the workers (FUSE,
//!   copies, the loop device's worker), bounds the write. A search starts only on Cpu,
//!   and goes on through Neither only while it measures a rung weaker than the one it
//!   began at: such a rung takes the compress workers out of the bottleneck — that is
//!   what makes it faster —, and its window's rate is then the write's end to end.
//!   Dropped there, a test of raw would end as soon as its records free the workers, and
//!   no descent could reach raw. Neither at the starting rung is the load changing (a
//!   slower or pausing writer): the search ends there, as a search that went on through
//!   every pause would never end and would keep the controller's own choice out.
//!
//! STATES
//!   Idle        not searching: not CPU-bound (Device; Neither outside a search or at
//!               the rung it began at; or data stored raw anyway): nothing measured, a
//!               window in progress dropped; the ceiling still holds
//!   Reference   measuring c for one window
//!   Candidate   measuring t for one window, then Reference again, whose rate completes
//!               the test's verdict
//!   Holding     searched: c is the ceiling until `until`, then a recheck
//! TRANSITIONS
//!   Idle → Reference           Cpu again (a recheck if a ceiling is known)
//!   Reference → Candidate      a window of c done and the search has a next test
//!   Candidate → Reference      its window done
//!   Reference → Holding        the search has no next test; the hold is fb_rate_hold
//!                              seconds after a search that moved c, and doubles (up to
//!                              fb_rate_hold_max) after one that did not
//!   Holding → Reference        Cpu at `until` or later
//!   any → Idle                 Device; Neither outside a search or at the rung it
//!                              began at; `reset` (the devices were the bottleneck for
//!                              long: a stronger rung is then free) forgets the
//!                              ceiling too
//!
//! TUNABLES (tunables.rs): fb_rate 1 (0: no check, the controller's rung as it is);
//!   fb_rate_secs 0.1 (records of a fast write arrive every 0.2 ms: hundreds per window,
//!   and a descent of three tests ends in under a second, within a 1 GB write at 600
//!   MB/s); fb_rate_gain 0.03 (a weaker rung must be faster by more than this to be taken:
//!   below it, the loss of ratio buys too little); fb_rate_hold 1 and fb_rate_hold_max 8
//!   seconds (a recheck of two tests puts 0.2 s of a neighbour's records among 8 s);
//!   fb_rate_idle 0.1 (feedback.rs: the CPUs idle a tenth of the time or less count as
//!   Cpu though the workers wait — on a fast loop device the FUSE round trips, the
//!   writer's copy and the loop worker keep both cores busy at lz4 while the workers idle).
//! ```

/// A record later than this after the one before ends the window it would have been in.
pub const MAX_GAP_SECS: f64 = 0.05;

/// Fewest records in a window.
pub const MIN_WINDOW_RECORDS: u64 = 8;

/// What bounds the write, as the caller sees it at a record (module comment, LOAD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// the compress stage: records wait for busy workers, the device queue short
    Cpu,
    /// neither the compress stage nor the devices (the writer, or the pipeline's CPU
    /// outside the workers)
    Neither,
    /// the devices: their queue above its target or growing
    Device,
}

/// The check's settings (the `fb_rate*` tunables).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateTunables {
    pub window_secs: f64,
    pub gain: f64,
    pub hold_secs: f64,
    pub hold_max_secs: f64,
}

/// A window being measured.
#[derive(Clone, Copy, Debug)]
struct Window {
    start: f64,
    last: f64,
    bytes: u64,
    records: u64,
}

impl Window {
    fn new(now: f64) -> Window {
        Window { start: now, last: now, bytes: 0, records: 0 }
    }

    /// Its rate once it spans `secs` and enough records, bytes per second.
    fn done(&self, secs: f64) -> Option<f64> {
        let span = self.last - self.start;
        (span >= secs && self.records >= MIN_WINDOW_RECORDS).then(|| self.bytes as f64 / span.max(1e-9))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    Idle,
    Reference,
    Candidate,
    Holding { until: f64 },
}

/// A search under way.
#[derive(Clone, Copy, Debug)]
struct Search {
    /// the rung in use
    at: usize,
    /// the rung the search began at, on a CPU-bound write
    from: usize,
    /// descent: rungs below `at` the next test goes (0: the descent is over)
    step: usize,
    /// a recheck: one test down, then one up
    recheck: bool,
    down_done: bool,
    up_done: bool,
    /// `at` moved during this search
    moved: bool,
}

/// The end-to-end rate check (see the module comment).
#[derive(Clone, Debug)]
pub struct RateCheck {
    tun: RateTunables,
    phase: Phase,
    window: Option<Window>,
    /// the last window of the rung in use, before the candidate's, bytes/s
    reference: Option<f64>,
    /// the candidate under test and its window's rate
    cand: usize,
    cand_rate: Option<f64>,
    search: Option<Search>,
    /// the rung the last search ended on (None: none ended yet, no ceiling)
    ceiling: Option<usize>,
    hold: f64,
    last_now: Option<f64>,
}

impl RateCheck {
    pub fn new(tun: RateTunables) -> RateCheck {
        RateCheck {
            tun,
            phase: Phase::Idle,
            window: None,
            reference: None,
            cand: 0,
            cand_rate: None,
            search: None,
            ceiling: None,
            hold: tun.hold_secs,
            last_now: None,
        }
    }

    /// The rung the last search ended on (None: none ended yet).
    pub fn ceiling(&self) -> Option<usize> {
        self.ceiling
    }

    /// Whether a search is under way (the rungs handed out are measurements).
    pub fn searching(&self) -> bool {
        matches!(self.phase, Phase::Reference | Phase::Candidate)
    }

    /// The devices were the bottleneck for long: forget the ceiling (a stronger rung is
    /// free while they are) and start afresh when the CPU bounds again.
    pub fn reset(&mut self) {
        self.ceiling = None;
        self.hold = self.tun.hold_secs;
        self.idle();
    }

    fn idle(&mut self) {
        self.phase = Phase::Idle;
        self.window = None;
        self.reference = None;
        self.cand_rate = None;
        self.search = None;
    }

    /// The rung for the next record of `bytes`, at `now`, given the controller's own rung
    /// `top` and what bounds the write: Some(r) overrides the controller (a window of the
    /// search, or the ceiling where it is below `top`), None leaves its choice as it is.
    ///
    /// `bound(r)` is the input rate the devices take at rung r (their rate over its stored
    /// fraction; infinite while unknown): a window's rate counts up to it, for a rung the
    /// compress stage takes in faster than the devices drain only fills the dirty memory
    /// until the devices become the bottleneck.
    pub fn rung(
        &mut self,
        now: f64,
        bytes: u64,
        top: usize,
        load: Load,
        bound: &dyn Fn(usize) -> f64,
    ) -> Option<usize> {
        let gap = self.last_now.is_some_and(|t| now - t > MAX_GAP_SECS);
        self.last_now = Some(now);
        let measure = match load {
            Load::Cpu => true,
            Load::Neither => self.freed_workers(),
            Load::Device => false,
        };
        if !measure || top == 0 {
            if self.phase != Phase::Idle && !matches!(self.phase, Phase::Holding { .. }) {
                self.idle();
            }
            return self.cap(top);
        }
        if gap {
            // a pause: the window in progress and the reference before it measured a writer
            // that stopped, not a rung
            self.window = None;
            self.reference = None;
            self.cand_rate = None;
            if self.phase == Phase::Candidate {
                self.phase = Phase::Reference;
            }
        }
        match self.phase {
            Phase::Idle => self.start_search(top),
            Phase::Holding { until } if now >= until => self.start_search(top),
            Phase::Holding { .. } => return self.cap(top),
            _ => {}
        }
        if let Some(sr) = &mut self.search {
            // the controller's own rung fell below the rung in use: nothing above it is wanted
            if sr.at > top {
                sr.at = top;
                sr.from = sr.from.min(top);
                self.reference = None;
                self.cand_rate = None;
                self.phase = Phase::Reference;
                self.window = None;
            }
        }
        let measuring = match (self.phase, self.search) {
            (Phase::Candidate, _) => self.cand,
            (_, Some(sr)) => sr.at,
            _ => top,
        };
        let w = self.window.get_or_insert_with(|| Window::new(now));
        w.last = now;
        w.bytes = w.bytes.saturating_add(bytes);
        w.records += 1;
        if let Some(rate) = w.done(self.tun.window_secs) {
            let rate = rate.min(bound(measuring));
            self.window = None;
            self.window_done(now, rate, top);
        }
        Some(measuring)
    }

    /// Whether a search is measuring a rung weaker than the one it began at, where the
    /// write was CPU-bound: only such a rung can have taken the compress workers out of
    /// the bottleneck. Anywhere else a short queue with idle workers is a change of load
    /// (a slower writer, pauses), and a search going on through it would never end.
    fn freed_workers(&self) -> bool {
        let Some(sr) = self.search.filter(|_| self.searching()) else { return false };
        let measuring = if self.phase == Phase::Candidate { self.cand } else { sr.at };
        measuring < sr.from
    }

    /// The ceiling as an override of the controller's rung `top`.
    fn cap(&self, top: usize) -> Option<usize> {
        self.ceiling.filter(|&c| c < top)
    }

    fn start_search(&mut self, top: usize) {
        let at = self.ceiling.unwrap_or(top).min(top);
        self.search = Some(Search {
            at,
            from: at,
            step: (at / 2).max(1),
            recheck: self.ceiling.is_some(),
            down_done: false,
            up_done: false,
            moved: false,
        });
        self.phase = Phase::Reference;
        self.reference = None;
        self.cand_rate = None;
        self.window = None;
    }

    fn window_done(&mut self, now: f64, rate: f64, top: usize) {
        match self.phase {
            Phase::Candidate => {
                self.cand_rate = Some(rate);
                self.phase = Phase::Reference;
            }
            Phase::Reference => {
                // this window closes the test begun after the one before it, and opens the next
                let before = self.reference.replace(rate);
                if let (Some(before), Some(cand)) = (before, self.cand_rate.take()) {
                    self.verdict(0.5 * (before + rate), cand);
                }
                self.next_test(now, top);
            }
            _ => {}
        }
    }

    /// The candidate's rate `cand` against the rung in use's `base`, bytes/s.
    fn verdict(&mut self, base: f64, cand: f64) {
        let Some(mut sr) = self.search else { return };
        let t = self.cand;
        if t < sr.at {
            if cand >= base * (1.0 + self.tun.gain) {
                sr.at = t;
                sr.moved = true;
                if sr.recheck {
                    // what held no longer does (a hog, other data): descend in earnest
                    sr.recheck = false;
                    sr.step = (t / 2).max(1);
                } else {
                    sr.step = sr.step.min(t);
                }
                self.reference = None;
            } else if sr.recheck {
                sr.down_done = true;
            } else {
                sr.step /= 2;
            }
        } else if t > sr.at {
            sr.up_done = true;
            if cand * (1.0 + self.tun.gain) >= base {
                sr.at = t;
                sr.moved = true;
                self.reference = None;
            }
        }
        self.search = Some(sr);
    }

    /// After a window of the rung in use: the next test, or the end of the search.
    fn next_test(&mut self, now: f64, top: usize) {
        let Some(sr) = self.search else { return };
        if self.reference.is_none() {
            // the rung in use moved: measure it before testing against it
            self.phase = Phase::Reference;
            return;
        }
        let next = if !sr.recheck {
            (sr.step > 0 && sr.at > 0).then(|| sr.at - sr.step.min(sr.at))
        } else if !sr.down_done && sr.at > 0 {
            Some(sr.at - 1)
        } else if !sr.up_done && sr.at < top {
            Some(sr.at + 1)
        } else {
            None
        };
        match next {
            Some(t) => {
                self.cand = t;
                self.phase = Phase::Candidate;
            }
            None => {
                self.hold = if sr.moved || self.ceiling != Some(sr.at) {
                    self.tun.hold_secs
                } else {
                    (self.hold * 2.0).min(self.tun.hold_max_secs)
                };
                self.ceiling = Some(sr.at);
                self.search = None;
                self.reference = None;
                self.phase = Phase::Holding { until: now + self.hold };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TUN: RateTunables = RateTunables { window_secs: 0.1, gain: 0.03, hold_secs: 1.0, hold_max_secs: 8.0 };
    const REC: u64 = 128 << 10;

    /// Feed records at the rate `rate_of(rung)` for `secs`, CPU-bound, with the controller at
    /// `top`; the rungs used, in order.
    fn drive(c: &mut RateCheck, now: &mut f64, secs: f64, top: usize, rate_of: &dyn Fn(usize) -> f64) -> Vec<usize> {
        drive_loaded(c, now, secs, top, rate_of, &|_| Load::Cpu)
    }

    /// As `drive`, each record's load `load_of(rung of the record before)`.
    fn drive_loaded(
        c: &mut RateCheck,
        now: &mut f64,
        secs: f64,
        top: usize,
        rate_of: &dyn Fn(usize) -> f64,
        load_of: &dyn Fn(usize) -> Load,
    ) -> Vec<usize> {
        let end = *now + secs;
        let mut used = Vec::new();
        let mut r_prev = top;
        while *now < end {
            let r = c.rung(*now, REC, top, load_of(r_prev), &|_| f64::INFINITY).unwrap_or(top);
            r_prev = r;
            used.push(r);
            *now += REC as f64 / rate_of(r);
        }
        used
    }

    #[test]
    fn a_descent_crosses_to_raw_in_halving_steps_when_each_weaker_rung_is_faster() {
        let rate = |r: usize| 600e6 / 1.05f64.powi(r as i32);
        let mut c = RateCheck::new(TUN);
        let mut now = 0.0;
        let used = drive(&mut c, &mut now, 1.0, 10, &rate);
        assert_eq!(c.ceiling(), Some(0));
        // 10 against 5, then 5 against 0: nothing else was tried
        assert!(used.iter().all(|r| [0, 5, 10].contains(r)), "{used:?}");
        // holding: the ceiling overrides the controller's rung
        assert_eq!(c.rung(now, REC, 10, Load::Cpu, &|_| f64::INFINITY), Some(0));
    }

    #[test]
    fn rechecks_climb_back_to_the_strongest_rung_as_fast_as_raw() {
        // storing costs: rungs 0 to 3 are equally fast, each rung above 5% slower
        let rate = |r: usize| 600e6 / 1.05f64.powi(r.saturating_sub(3) as i32);
        let mut c = RateCheck::new(TUN);
        let mut now = 0.0;
        drive(&mut c, &mut now, 12.0, 10, &rate);
        assert_eq!(c.ceiling(), Some(3));
        assert!(c.hold > TUN.hold_secs, "rechecks that change nothing back off: {}", c.hold);
        // the CPU frees up: every rung is as fast, and the rechecks climb to the top
        drive(&mut c, &mut now, 20.0, 10, &|_| 600e6);
        assert_eq!(c.ceiling(), Some(10));
    }

    #[test]
    fn a_rung_no_slower_than_the_weaker_ones_is_kept() {
        let mut c = RateCheck::new(TUN);
        let mut now = 0.0;
        let used = drive(&mut c, &mut now, 1.0, 10, &|_| 500e6);
        assert_eq!(c.ceiling(), Some(10));
        // three tests, halving the step: 5, 8, 9
        assert!(used.iter().all(|r| [5, 8, 9, 10].contains(r)), "{used:?}");
        assert_eq!(
            c.rung(now, REC, 10, Load::Cpu, &|_| f64::INFINITY),
            None,
            "no override where the ceiling is the controller's rung"
        );
    }

    #[test]
    fn a_writer_that_pauses_is_not_measured_as_a_slow_rung() {
        // every rung is as fast while records come, but the writer stops for 0.2 s inside
        // three windows of the rung in use: counted, they would make every weaker rung pass
        let mut c = RateCheck::new(TUN);
        let mut now = 0.0;
        let (mut pauses, mut in_window) = (0, 0);
        for _ in 0..20_000 {
            let r = c.rung(now, REC, 10, Load::Cpu, &|_| f64::INFINITY).unwrap_or(10);
            now += REC as f64 / 500e6;
            in_window = if r == 10 && c.searching() { in_window + 1 } else { 0 };
            if in_window == 20 && pauses < 3 {
                now += 0.2;
                pauses += 1;
            }
        }
        assert_eq!(pauses, 3);
        assert_eq!(c.ceiling(), Some(10));
    }

    #[test]
    fn not_cpu_bound_keeps_the_ceiling_and_reset_forgets_it() {
        let mut c = RateCheck::new(TUN);
        let mut now = 0.0;
        drive(&mut c, &mut now, 1.0, 10, &|r| 600e6 / 1.05f64.powi(r as i32));
        assert_eq!(c.ceiling(), Some(0));
        // the devices behind for a moment: the ceiling (what the CPU can carry) holds
        assert_eq!(c.rung(now, REC, 10, Load::Device, &|_| f64::INFINITY), Some(0));
        c.reset();
        assert_eq!(c.rung(now + 0.001, REC, 10, Load::Device, &|_| f64::INFINITY), None);
        assert_eq!(c.ceiling(), None);
    }

    #[test]
    fn a_weaker_rung_the_devices_cannot_take_does_not_pass() {
        // the compress stage takes each weaker rung in 2% faster, but the devices drain
        // 500 MB/s of stored bytes: below rung 3 a weaker rung would only fill memory
        let rate = |r: usize| 600e6 / 1.02f64.powi(r as i32);
        let stored = |r: usize| 1.0 - 0.05 * r as f64;
        let bound = move |r: usize| 500e6 / stored(r);
        let mut c = RateCheck::new(TUN);
        let mut now = 0.0;
        let end = now + 2.0;
        while now < end {
            let r = c.rung(now, REC, 10, Load::Cpu, &bound).unwrap_or(10);
            now += REC as f64 / rate(r).min(bound(r));
        }
        assert_eq!(c.ceiling(), Some(3));
    }

    #[test]
    fn a_raw_window_whose_workers_idle_still_counts_for_the_search() {
        // raw frees the compress workers: its records no longer wait for them (Neither),
        // yet the write is twice as fast. The search measures on, and raw becomes the
        // ceiling, which holds while raw leaves the workers idle
        let rate = |r: usize| if r == 0 { 800e6 } else { 400e6 / 1.05f64.powi(r as i32) };
        let load = |r: usize| if r == 0 { Load::Neither } else { Load::Cpu };
        let mut c = RateCheck::new(TUN);
        let mut now = 0.0;
        drive_loaded(&mut c, &mut now, 1.0, 10, &rate, &load);
        assert_eq!(c.ceiling(), Some(0));
        let used = drive_loaded(&mut c, &mut now, 3.0, 10, &rate, &load);
        assert!(used.iter().all(|&r| r == 0), "{:?}", used.iter().filter(|&&r| r != 0).count());
        // outside a search, Neither starts none
        let mut idle = RateCheck::new(TUN);
        assert_eq!(idle.rung(0.0, REC, 10, Load::Neither, &|_| f64::INFINITY), None);
        assert!(!idle.searching());
    }

    #[test]
    fn a_search_ends_when_the_rung_it_began_at_stops_being_cpu_bound() {
        // a search begun on a CPU-bound write at rung 10; its first reference window sees
        // the writer slow down (the workers idle at the rung the search began at): that is
        // the load changing, not a weaker rung freeing the workers, and the search ends
        // with no ceiling, leaving the controller's choice to it
        let mut c = RateCheck::new(TUN);
        assert_eq!(c.rung(0.0, REC, 10, Load::Cpu, &|_| f64::INFINITY), Some(10));
        assert!(c.searching());
        let mut now = 0.0;
        for _ in 0..2_000 {
            now += 0.001;
            assert_eq!(c.rung(now, REC, 10, Load::Neither, &|_| f64::INFINITY), None, "at {now:.3} s");
        }
        assert!(!c.searching());
        assert_eq!(c.ceiling(), None);
    }
}
