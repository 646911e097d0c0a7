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
# p99 latency, commit files/s. With BTRFS=1 (root, btrfs-progs) every pair also runs
# bench/btrfs-meta-dup.py on btrfs `-m single` and `-m dup` (a fresh file system on a loop
# device over a file in WORK each time): what btrfs's own second metadata copy costs on the
# same disk in the same run, printed as "btrfs".
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '2,15p' "$0"; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
PAIRS=${PAIRS:-6}; FILES=${FILES:-400}
W=$(mktemp -d "${WORK:-/var/tmp}/sqz-meta-ab.XXXXXX")
LOOP=""
cleanup() {
    if [ -n "$LOOP" ]; then umount "$W/mnt" 2>/dev/null || true; losetup -d "$LOOP" 2>/dev/null || true; fi
    rm -rf "$W"
}
trap cleanup EXIT
# btrfs at `-m single` (1) or `-m dup` (2) on a fresh loop device: one JSON line
btrfs_run() {
    rm -f "$W/btrfs.img"; truncate -s 2G "$W/btrfs.img"
    LOOP=$(losetup -f --show "$W/btrfs.img")
    local m=single; [ "$1" = 2 ] && m=dup
    mkfs.btrfs -q -f -m "$m" -d single "$LOOP" >/dev/null 2>&1
    mkdir -p "$W/mnt"; mount "$LOOP" "$W/mnt"
    python3 "$HERE/btrfs-meta-dup.py" "$W/mnt" "$1" "$FILES"
    umount "$W/mnt"; losetup -d "$LOOP"; LOOP=""; rm -f "$W/btrfs.img"
}
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
    if [ "${BTRFS:-0}" = 1 ]; then
        for c in 1 2; do
            out=$(btrfs_run "$c")
            echo "btrfs $out" >> "$W/runs"
            echo "pair $p: btrfs $out"
        done
    fi
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
labels=("$@"); [ "${BTRFS:-0}" = 1 ] && labels+=(btrfs)
python3 - "$W/runs" "${labels[@]}" <<'PY'
import json, statistics, sys
runs = [(l.split(" ", 1)[0], json.loads(l.split(" ", 1)[1])) for l in open(sys.argv[1])]
for bin in sys.argv[2:]:
    print(bin)
    for key in ["fsync_mean_ms", "fsync_p99_ms", "commit_files_per_s"]:
        a = statistics.median(r[key] for b, r in runs if b == bin and r["copies"] == 1)
        b = statistics.median(r[key] for b2, r in runs if b2 == bin and r["copies"] == 2)
        print(f"  {key}: one copy {a:.3f}, two copies {b:.3f}, two/one {b / a:.3f}")
PY
