#!/usr/bin/env bash
# What the second metadata copy costs: the meta_copies_cost example with --copies 1 (A)
# and --copies 2 (B), in alternating pairs (A, B, A, B, ...), so load that comes and goes
# on a shared machine hits both sides alike.
#
#   bash bench/meta-copies-ab.sh BIN [BIN2]    env: PAIRS=6 FILES=400 WORK=/var/tmp
#
# BIN: `cargo build --release -p squeezefs-pipeline --example meta_copies_cost` (or the dev
# build, for a ratio only), target/*/examples/meta_copies_cost. With BIN2 (another build of
# it) every round runs both binaries' pairs, so two designs are compared in one run. Prints
# every run, then per binary the medians of each side and B/A of the medians: fsync mean and
# p99 latency, commit files/s.
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '2,12p' "$0"; exit 2; }
PAIRS=${PAIRS:-6}; FILES=${FILES:-400}
W=$(mktemp -d "${WORK:-/var/tmp}/sqz-meta-ab.XXXXXX")
trap 'rm -rf "$W"' EXIT
: > "$W/runs"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for p in $(seq 1 "$PAIRS"); do
    for bin in "$@"; do
        for c in 1 2; do
            out=$("$bin" --work "$W" --copies "$c" --files "$FILES")
            echo "$bin $out" >> "$W/runs"
            echo "pair $p: $bin $out"
        done
    done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/runs" "$@" <<'PY'
import json, statistics, sys
runs = [(l.split(" ", 1)[0], json.loads(l.split(" ", 1)[1])) for l in open(sys.argv[1])]
for bin in sys.argv[2:]:
    print(bin)
    for key in ["fsync_mean_ms", "fsync_p99_ms", "commit_files_per_s"]:
        a = statistics.median(r[key] for b, r in runs if b == bin and r["copies"] == 1)
        b = statistics.median(r[key] for b2, r in runs if b2 == bin and r["copies"] == 2)
        print(f"  {key}: one copy {a:.3f}, two copies {b:.3f}, two/one {b / a:.3f}")
PY
