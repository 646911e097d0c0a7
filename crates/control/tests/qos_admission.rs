//! Hierarchical admission on synthetic time: writers that ask, go or wait as told, and the
//! rates each tree gets. MB = 10^6 bytes (as `qos=N` is quoted).

use proptest::prelude::*;
use squeezefs_control::qos::{Admission, AdmissionTunables, Admit, TreeId};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

const MB: f64 = 1e6;
const MIB: u64 = 1 << 20;

/// A writer: which tree it writes into, a label for reports (a subdirectory without its own
/// `qos` shares its tree's bucket but is reported apart), request size, pause after each
/// write, when it starts and stops.
#[derive(Clone, Copy, Debug)]
struct Writer {
    tree: TreeId,
    group: u32,
    bytes: u64,
    think: f64,
    start: f64,
    stop: f64,
}

fn writer(tree: TreeId, group: u32) -> Writer {
    Writer { tree, group, bytes: MIB, think: 0.0, start: 0.0, stop: f64::INFINITY }
}

#[derive(PartialEq)]
struct Ev(f64, u64, usize);
impl Eq for Ev {}
impl Ord for Ev {
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// An admitted write: time, writer index, bytes.
type Log = Vec<(f64, usize, u64)>;

/// A tree change applied at a time during a run.
type Change<'a> = (f64, &'a mut dyn FnMut(&mut Admission, f64));

/// Run `writers` against `a` until `end` seconds; `at` holds tree changes to apply on the way.
fn run(a: &mut Admission, writers: &[Writer], end: f64, at: &mut [Change]) -> Log {
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    for (i, w) in writers.iter().enumerate() {
        heap.push(Ev(w.start, seq, i));
        seq += 1;
    }
    let mut changes: Vec<usize> = (0..at.len()).collect();
    changes.sort_by(|&x, &y| at[x].0.total_cmp(&at[y].0));
    let mut next_change = 0;
    let mut log = Vec::new();
    while let Some(Ev(t, _, i)) = heap.pop() {
        if t >= end {
            break;
        }
        while next_change < changes.len() && at[changes[next_change]].0 <= t {
            let (ct, f) = &mut at[changes[next_change]];
            f(a, *ct);
            next_change += 1;
        }
        let w = writers[i];
        if t >= w.stop {
            continue;
        }
        let next = match a.admit(w.tree, w.bytes, t) {
            Admit::Go => {
                log.push((t, i, w.bytes));
                t + w.think
            }
            Admit::WaitUntil(u) => {
                assert!(u > t, "wait until {u} at {t}");
                u
            }
        };
        heap.push(Ev(next, seq, i));
        seq += 1;
    }
    log
}

/// MB/s admitted in [from, to) by the writers `pick` selects.
fn rate(log: &Log, writers: &[Writer], from: f64, to: f64, pick: impl Fn(&Writer) -> bool) -> f64 {
    let b: u64 = log.iter().filter(|(t, i, _)| *t >= from && *t < to && pick(&writers[*i])).map(|e| e.2).sum();
    b as f64 / (to - from) / MB
}

fn near(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * want
}

fn adm() -> Admission {
    Admission::new(AdmissionTunables::default())
}

#[test]
fn one_tree_holds_its_rate_with_one_or_eight_writers() {
    for target in [10.0, 25.0, 50.0, 100.0] {
        for n in [1, 8] {
            let mut a = adm();
            a.set_tree(7, None, target * MB, 0.0).unwrap();
            let ws: Vec<Writer> =
                (0..n).map(|k| Writer { bytes: if k % 2 == 0 { MIB } else { 128 << 10 }, ..writer(7, 0) }).collect();
            let log = run(&mut a, &ws, 30.0, &mut []);
            for w in 0..3 {
                let (from, to) = (w as f64 * 10.0, w as f64 * 10.0 + 10.0);
                let got = rate(&log, &ws, from, to, |_| true);
                println!("qos {target} MB/s, {n} writer(s), [{from}, {to}) s: {got:.2} MB/s");
                assert!(near(got, target, 0.05), "{target} MB/s with {n} writers: {got:.2} in [{from}, {to})");
            }
            // every second too, within the burst bound
            for s in 0..30 {
                let got = rate(&log, &ws, s as f64, s as f64 + 1.0, |_| true);
                assert!(got <= target * 1.1 + 8.0 * MIB as f64 / MB, "second {s}: {got:.2}");
            }
        }
    }
}

#[test]
fn subdirectories_without_their_own_rate_share_the_bucket() {
    // a parent at 20 MB/s, two subdirectories of it (groups 1 and 2) without qos: one tree
    for (n1, n2) in [(1, 1), (8, 8), (1, 8)] {
        let mut a = adm();
        a.set_tree(10, None, 20.0 * MB, 0.0).unwrap();
        let mut ws = vec![writer(10, 1); n1];
        ws.extend(vec![writer(10, 2); n2]);
        let log = run(&mut a, &ws, 20.0, &mut []);
        for (from, to) in [(0.0, 10.0), (10.0, 20.0)] {
            let total = rate(&log, &ws, from, to, |_| true);
            assert!(near(total, 20.0, 0.05), "{n1}+{n2} writers: {total:.2}");
            if n1 == n2 {
                // equal writers: about equal halves (the bucket does not know who is who)
                let one = rate(&log, &ws, from, to, |w| w.group == 1);
                assert!(near(one, 10.0, 0.15), "{n1}+{n2} writers: first subdirectory {one:.2}");
            }
        }
    }
}

#[test]
fn a_child_with_its_own_rate_is_guaranteed_it_and_the_parent_is_a_ceiling() {
    for (np, nc) in [(1, 1), (8, 8), (8, 1), (1, 8)] {
        let mut a = adm();
        a.set_tree(10, None, 20.0 * MB, 0.0).unwrap();
        a.set_tree(11, Some(10), 5.0 * MB, 0.0).unwrap();
        let mut ws = vec![writer(10, 0); np];
        ws.extend(vec![writer(11, 1); nc]);
        let log = run(&mut a, &ws, 30.0, &mut []);
        for w in 0..3 {
            let (from, to) = (w as f64 * 10.0, w as f64 * 10.0 + 10.0);
            let child = rate(&log, &ws, from, to, |w| w.tree == 11);
            let own = rate(&log, &ws, from, to, |w| w.tree == 10);
            println!("parent 20 ({np} writers) + child 5 ({nc} writers): child {child:.2} parent's own {own:.2}");
            assert!(near(child, 5.0, 0.05), "child {child:.2}");
            assert!(near(own, 15.0, 0.05), "parent's own files {own:.2}");
            assert!(child + own <= 20.0 * 1.02, "total {:.2}", child + own);
        }
    }
}

#[test]
fn a_child_borrows_what_its_parent_leaves_and_gives_it_back() {
    let mut a = adm();
    a.set_tree(10, None, 20.0 * MB, 0.0).unwrap();
    a.set_tree(11, Some(10), 5.0 * MB, 0.0).unwrap();
    // the child writes alone for 10 s, then the parent's own files start
    let ws = [writer(11, 1), Writer { start: 10.0, ..writer(10, 0) }, Writer { start: 10.0, ..writer(10, 0) }];
    let log = run(&mut a, &ws, 30.0, &mut []);
    let alone = rate(&log, &ws, 0.0, 10.0, |w| w.tree == 11);
    assert!(near(alone, 20.0, 0.05), "child alone borrows up to the parent's rate: {alone:.2}");
    let child = rate(&log, &ws, 20.0, 30.0, |w| w.tree == 11);
    let own = rate(&log, &ws, 20.0, 30.0, |w| w.tree == 10);
    assert!(near(child, 5.0, 0.05) && near(own, 15.0, 0.05), "child {child:.2}, parent {own:.2}");
    // within a second of the parent's writers starting, the child is back near its rate
    let switch = rate(&log, &ws, 10.5, 11.5, |w| w.tree == 11);
    assert!(switch < 7.0, "child still at {switch:.2} half a second after the parent started");
    // a writer slower than its share leaves the rest to the borrower
    let mut a = adm();
    a.set_tree(10, None, 20.0 * MB, 0.0).unwrap();
    a.set_tree(11, Some(10), 5.0 * MB, 0.0).unwrap();
    let slow = Writer { think: 1.0 / 3.0, ..writer(10, 0) }; // ~3 MB/s
    let ws = [slow, writer(11, 1), writer(11, 1)];
    let log = run(&mut a, &ws, 30.0, &mut []);
    for (from, to) in [(10.0, 20.0), (20.0, 30.0)] {
        let own = rate(&log, &ws, from, to, |w| w.tree == 10);
        let child = rate(&log, &ws, from, to, |w| w.tree == 11);
        println!("slow parent writer {own:.2}, borrowing child {child:.2}");
        assert!(own > 2.8, "the slow writer is not slowed: {own:.2}");
        assert!(near(child, 20.0 - own, 0.05), "the child gets what is left: {child:.2} + {own:.2}");
    }
}

#[test]
fn borrowing_is_shared_by_rate_not_by_number_of_writers() {
    let mut a = adm();
    a.set_tree(1, None, 40.0 * MB, 0.0).unwrap();
    a.set_tree(2, Some(1), 10.0 * MB, 0.0).unwrap();
    a.set_tree(3, Some(1), 10.0 * MB, 0.0).unwrap();
    a.set_tree(4, Some(1), 5.0 * MB, 0.0).unwrap();
    // 1 writer in tree 2, 8 in tree 3, 3 in tree 4; nobody in the parent's own files
    let mut ws = vec![writer(2, 0)];
    ws.extend(vec![writer(3, 0); 8]);
    ws.extend(vec![writer(4, 0); 3]);
    let log = run(&mut a, &ws, 20.0, &mut []);
    for (from, to) in [(0.0, 10.0), (10.0, 20.0)] {
        let r: Vec<f64> = [2, 3, 4].iter().map(|&t| rate(&log, &ws, from, to, |w| w.tree == t)).collect();
        println!("40 MB/s shared by 10 (1 writer), 10 (8 writers), 5 (3 writers): {r:.2?}");
        // the parent's own 15 is unused: 25 guaranteed + 15 borrowed in proportion 2:2:1
        for (got, want) in r.iter().zip([16.0, 16.0, 8.0]) {
            assert!(near(*got, want, 0.05), "{r:?}");
        }
    }
}

#[test]
fn independent_trees_do_not_share() {
    let mut a = adm();
    a.set_tree(1, None, 100.0 * MB, 0.0).unwrap();
    a.set_tree(2, None, 10.0 * MB, 0.0).unwrap();
    for n in [1, 8] {
        let mut ws = vec![writer(1, 0); n];
        ws.extend(vec![writer(2, 0); n]);
        let log = run(&mut a.clone(), &ws, 20.0, &mut []);
        for (from, to) in [(0.0, 10.0), (10.0, 20.0)] {
            let fast = rate(&log, &ws, from, to, |w| w.tree == 1);
            let slow = rate(&log, &ws, from, to, |w| w.tree == 2);
            assert!(near(fast, 100.0, 0.05) && near(slow, 10.0, 0.05), "{n} writers each: {fast:.2}, {slow:.2}");
        }
    }
}

#[test]
fn nested_children_inherit_scaled_guarantees_when_overcommitted() {
    // children asking for more than the parent has: the parent still caps, guarantees scale
    let mut a = adm();
    a.set_tree(1, None, 20.0 * MB, 0.0).unwrap();
    a.set_tree(2, Some(1), 15.0 * MB, 0.0).unwrap();
    a.set_tree(3, Some(1), 15.0 * MB, 0.0).unwrap();
    a.set_tree(4, Some(3), 10.0 * MB, 0.0).unwrap();
    let ws = [writer(1, 0), writer(2, 0), writer(3, 0), writer(4, 0), writer(4, 0)];
    let log = run(&mut a, &ws, 20.0, &mut []);
    let (from, to) = (10.0, 20.0);
    let total = rate(&log, &ws, from, to, |_| true);
    assert!((20.0 * 0.95..=20.0 * 1.02).contains(&total), "{total:.2}");
    let g = |t| a.info(t, 20.0).unwrap().guaranteed_bps / MB;
    // self of 1 keeps 1/32 of 20; the rest is split 15:15 between 2 and 3
    assert!((g(1) - 20.0 / 32.0).abs() < 1e-9);
    assert!((g(2) - (20.0 - 20.0 / 32.0) / 2.0).abs() < 1e-9);
    let own = rate(&log, &ws, from, to, |w| w.tree == 1);
    assert!(own >= g(1) * 0.9, "the parent's own files are not starved: {own:.3}");
    for t in [2, 3, 4] {
        let got = rate(&log, &ws, from, to, |w| w.tree == t);
        assert!(got >= g(t) * 0.95, "tree {t}: {got:.2} < its guarantee {:.2}", g(t));
    }
}

#[test]
fn removing_a_child_folds_its_tokens_and_debt_into_the_parent() {
    let mut a = adm();
    a.set_tree(1, None, 20.0 * MB, 0.0).unwrap();
    a.set_tree(2, Some(1), 5.0 * MB, 0.0).unwrap();
    // the child runs into debt: one large write
    assert_eq!(a.admit(2, 4 * MIB, 0.0), Admit::Go);
    assert_eq!(a.admit(1, 1000, 0.0), Admit::Go);
    let t = 0.01;
    let before = a.tokens_in_top(1, t);
    let debt = a.info(2, t).unwrap().tokens;
    assert!(debt < -3.0 * MIB as f64, "{debt}");
    let parent_before = a.info(1, t).unwrap().tokens;
    a.remove_tree(2, t).unwrap();
    let parent_after = a.info(1, t).unwrap().tokens;
    assert!((parent_after - (parent_before + debt)).abs() < 1.0, "{parent_after} vs {parent_before} + {debt}");
    assert!((a.tokens_in_top(1, t) - before).abs() < 1.0, "no tokens made or lost");
    // the debt is paid by the parent's writers now: the next write waits
    assert!(matches!(a.admit(1, 1000, t), Admit::WaitUntil(_)));
    // a new child starts empty and takes nothing from the parent
    let before = a.tokens_in_top(1, t);
    a.set_tree(3, Some(1), 5.0 * MB, t).unwrap();
    assert_eq!(a.info(3, t).unwrap().tokens, 0.0);
    assert!((a.tokens_in_top(1, t) - before).abs() < 1.0);
}

#[test]
fn moving_a_tree_keeps_its_tokens_and_its_subtree() {
    let mut a = adm();
    a.set_tree(1, None, 20.0 * MB, 0.0).unwrap();
    a.set_tree(2, None, 50.0 * MB, 0.0).unwrap();
    a.set_tree(3, Some(1), 10.0 * MB, 0.0).unwrap();
    a.set_tree(4, Some(3), 2.0 * MB, 0.0).unwrap();
    assert_eq!(a.admit(3, 3 * MIB, 0.0), Admit::Go);
    let t = 0.05;
    let debt3 = a.info(3, t).unwrap().tokens;
    let total = a.tokens_in_top(1, t) + a.tokens_in_top(2, t);
    a.move_tree(3, Some(2), t).unwrap();
    assert_eq!(a.top_of(4), Some(2), "the subtree moves along");
    assert_eq!(a.info(3, t).unwrap().tokens, debt3, "a deficit moves with its tree");
    assert!(a.tokens_in_top(1, t) + a.tokens_in_top(2, t) <= total + 1.0);
    // moved out to top level: it becomes its own ceiling
    a.move_tree(3, None, t).unwrap();
    assert_eq!(a.top_of(4), Some(3));
    assert_eq!(a.info(3, t).unwrap().parent, None);
    // removing a top-level tree frees its children as top-level trees, unpaced itself
    a.remove_tree(3, t).unwrap();
    assert_eq!(a.top_of(4), Some(4));
    assert_eq!(a.admit(3, 1 << 30, t), Admit::Go);
}

#[test]
fn a_rate_change_takes_effect_at_once() {
    let mut a = adm();
    a.set_tree(1, None, 50.0 * MB, 0.0).unwrap();
    let ws = [writer(1, 0), writer(1, 0)];
    let mut lower = |a: &mut Admission, t: f64| a.set_tree(1, None, 10.0 * MB, t).unwrap();
    let log = run(&mut a, &ws, 20.0, &mut [(10.0, &mut lower)]);
    let before = rate(&log, &ws, 0.0, 10.0, |_| true);
    let after = rate(&log, &ws, 10.0, 20.0, |_| true);
    assert!(near(before, 50.0, 0.05) && near(after, 10.0, 0.05), "{before:.2} then {after:.2}");
}

/// A random forest of trees: (parent index or none, rate MB/s) for each.
fn forest() -> impl Strategy<Value = Vec<(Option<usize>, f64)>> {
    prop::collection::vec((any::<prop::sample::Index>(), 1.0f64..60.0, any::<bool>()), 1..7).prop_map(|v| {
        v.iter()
            .enumerate()
            .map(|(i, (p, r, top))| (if i == 0 || *top { None } else { Some(p.index(i)) }, *r))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the trees, writers and their schedules: no top-level tree admits more than its
    /// rate (plus the burst bound) in any window, and every leaf whose writers keep asking gets
    /// its guarantee.
    #[test]
    fn ceilings_and_guarantees_hold_for_any_writers(
        trees in forest(),
        ws in prop::collection::vec(
            (any::<prop::sample::Index>(), 0usize..8, 4096u64..(2 << 20), prop::option::of(0.0f64..0.5), 0.0f64..4.0),
            1..12,
        ),
    ) {
        let mut a = adm();
        for (i, (p, r)) in trees.iter().enumerate() {
            a.set_tree(i as u64 + 1, p.map(|p| p as u64 + 1), r * MB, 0.0).unwrap();
        }
        let mut writers = Vec::new();
        for (t, n, bytes, think, start) in &ws {
            let tree = t.index(trees.len()) as u64 + 1;
            for _ in 0..*n {
                writers.push(Writer { tree, group: 0, bytes: *bytes, think: think.unwrap_or(0.0), start: *start, stop: f64::INFINITY });
            }
        }
        let end = 16.0;
        let log = run(&mut a, &writers, end, &mut []);
        let tops: Vec<u64> = (1..=trees.len() as u64).filter(|&t| a.info(t, end).unwrap().parent.is_none()).collect();
        let burst = a.tunables().burst_secs;
        for &top in &tops {
            let rate_t = a.info(top, end).unwrap().rate_bps;
            let inside = |w: &Writer| a.top_of(w.tree) == Some(top);
            let leaves = (1..=trees.len() as u64).filter(|&t| a.top_of(t) == Some(top)).count() as f64;
            let max_req = writers.iter().filter(|w| inside(w)).map(|w| w.bytes).max().unwrap_or(0) as f64;
            for len in [0.5, 2.0, 8.0] {
                let mut from = 0.0;
                while from + len <= end {
                    let got = rate(&log, &writers, from, from + len, inside) * MB * len;
                    let bound = rate_t * (len + burst) + leaves * max_req + 1.0;
                    prop_assert!(got <= bound, "top {top}: {got} bytes in [{from}, {}) > {bound}", from + len);
                    from += 0.25;
                }
            }
        }
        // guarantees: a leaf with a writer that never pauses, over the last 8 s
        for t in 1..=trees.len() as u64 {
            let busy: Vec<&Writer> = writers.iter().filter(|w| w.tree == t && w.think == 0.0 && w.start < 4.0).collect();
            if busy.is_empty() {
                continue;
            }
            let g = a.info(t, end).unwrap().guaranteed_bps;
            // any writer of the tree can leave the bucket a request's worth in deficit
            let max_req = writers.iter().filter(|w| w.tree == t).map(|w| w.bytes).max().unwrap() as f64;
            let got = rate(&log, &writers, 8.0, end, |w| w.tree == t) * MB * 8.0;
            let want = g * 8.0 * 0.97 - g * burst - 2.0 * max_req;
            prop_assert!(got >= want, "tree {t}: {got} bytes < guarantee {g} × 8 s ({want})");
        }
    }

    /// Changing trees (rates, adding, removing, moving) never makes tokens nor forgives a
    /// deficit (both would raise the total), except that a removed top-level tree's own tokens
    /// go with it (its writes are no longer paced); and no bucket holds more than its cap.
    #[test]
    fn tree_changes_never_make_tokens(
        ops in prop::collection::vec((0u8..5, 1u64..7, 0u64..7, 1.0f64..50.0, 0u64..(4 << 20)), 1..60),
    ) {
        let mut a = adm();
        a.set_tree(1, None, 20.0 * MB, 0.0).unwrap();
        let mut t = 0.0;
        for (op, x, y, r, bytes) in ops {
            t += 0.013;
            let total = |a: &Admission| a.trees().map(|tr| a.info(tr, t).unwrap().tokens).sum::<f64>();
            let _ = a.admit(x, bytes, t);
            let before = total(&a);
            let parent = (y != 0 && a.contains(y)).then_some(y);
            let gone = match a.info(x, t) {
                Some(i) if op == 2 && i.parent.is_none() => i.tokens,
                _ => 0.0,
            };
            let _ = match op {
                0 | 1 => a.set_tree(x, parent, r * MB, t),
                2 => a.remove_tree(x, t),
                _ => a.move_tree(x, parent, t),
            };
            let after = total(&a);
            prop_assert!(after <= before - gone + 1.0, "op {op} on {x}: tokens {before} → {after}");
            for tr in a.trees() {
                let i = a.info(tr, t).unwrap();
                prop_assert!(i.tokens <= i.allocated_bps * a.tunables().burst_secs + 1.0, "tree {tr}: {i:?}");
            }
        }
    }
}
