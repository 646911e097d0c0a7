#!/usr/bin/env bash
# What the second metadata copy costs: the meta_copies_cost example with --copies 1 (A)
# and --copies 2 (B), in alternating pairs (A, B, A, B, ...) from one binary, so load that
# comes and goes on a shared machine hits both sides alike.
#
#   bash bench/meta-copies-ab.sh BIN      env: PAIRS=6 FILES=400 WORK=/var/tmp
#
# BIN: `cargo build --release -p squeezefs-pipeline --example meta_copies_cost` (or the dev
# build, for a ratio only), target/*/examples/meta_copies_cost. Prints every run, then per
# side the medians, and B/A of the medians: fsync mean and p99 latency, commit files/s.
set -euo pipefail
[ $# -eq 1 ] || { sed -n '2,11p' "$0"; exit 2; }
BIN=$1; PAIRS=${PAIRS:-6}; FILES=${FILES:-400}
W=$(mktemp -d "${WORK:-/var/tmp}/sqz-meta-ab.XXXXXX")
trap 'rm -rf "$W"' EXIT
: > "$W/runs"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for p in $(seq 1 "$PAIRS"); do
    for c in 1 2; do
        out=$("$BIN" --work "$W" --copies "$c" --files "$FILES")
        echo "$out" >> "$W/runs"
        echo "pair $p: $out"
    done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/runs" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for key in ["fsync_mean_ms", "fsync_p99_ms", "commit_files_per_s"]:
    a = statistics.median(r[key] for r in runs if r["copies"] == 1)
    b = statistics.median(r[key] for r in runs if r["copies"] == 2)
    print(f"{key}: one copy {a:.3f}, two copies {b:.3f}, two/one {b / a:.3f}")
PY
