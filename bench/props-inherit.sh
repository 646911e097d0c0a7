#!/usr/bin/env bash
# Cost of property inheritance on the write path, two ways:
#
# 1. In process, CPU time of the writing thread (crates/fs/examples/inherit_cost.rs): 128 KiB
#    writes through the fs core into a file in the root and one 10 levels deep whose every
#    level sets properties, and the cost of resolving with the cache current / after an
#    invalidation. Thread CPU time is what a shared machine disturbs least.
# 2. Mounted: the same writes into the mount's root and into a 10-deep tree whose every
#    level sets properties (compression=lz4 and compress-force=off, the codec the mount option
#    gives the root, so both targets compress alike and only the lookup differs). One pool,
#    mounted compress=lz4; the targets alternate in every round; the table shows the medians
#    of wall time and of the daemon's CPU time (utime+stime from /proc) per workload.
#
#   bench/props-inherit.sh [WORKDIR] [ROUNDS]     (root; ROUNDS default 7)
#
# Mounted workloads per round and target:
#   stream: one file of $MB MiB of text written with dd bs=1M conv=fsync (the kernel sends
#           1 MiB writes, each one resolved by the fs core);
#   small:  $FILES files of 64 KiB (a create and a first write each, then one fsync).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${1:-$(mktemp -d /var/tmp/sqz-props.XXXXXX)}
ROUNDS=${2:-7}
MB=${MB:-256}
FILES=${FILES:-2000}
mkdir -p "$WORK"
cargo build --locked --release -q -p squeezefs
cargo build --locked --release -q -p squeezefs-fs --example inherit_cost
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/squeezefs
"${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/inherit_cost" "$WORK" 20000 "$ROUNDS"
POOL=$WORK/pool
MNT=$WORK/mnt
DATA=/dev/shm/sqz-props-data.$$
SMALL=/dev/shm/sqz-props-small.$$
cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && "$BIN" umount "$MNT" || true
    rm -f "$DATA" "$SMALL"
}
trap cleanup EXIT

# (seq is cut off by head: its SIGPIPE is expected)
{ seq 1 100000000 || true; } | head -c $((MB << 20)) > "$DATA"
head -c 65536 "$DATA" > "$SMALL"
rm -rf "$POOL"
mkdir -p "$MNT"
"$BIN" mkfs "$POOL" >/dev/null
"$BIN" mount "$POOL" "$MNT" -o compress=lz4

DEEP=$MNT
for i in $(seq 1 10); do
    DEEP=$DEEP/level$i
    mkdir "$DEEP"
    "$BIN" prop set "$DEEP" compression=lz4 compress-force=off
done
"$BIN" prop get "$DEEP" compression compress-force >&2

PID=$(getfattr --only-values -n user.squeezefs.mount "$MNT" | sed -n 's/^pid=//p')
TICK=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
# wall seconds of "$@"; the daemon's CPU seconds go to $CPU_FILE
CPU_FILE=$WORK/cpu.$$
secs() {
    local t0 t1 c0 c1
    c0=$(cpu); t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); c1=$(cpu)
    echo "($c1 - $c0) / $TICK" | bc -l > "$CPU_FILE"
    echo "$t1 - $t0" | bc -l
}

stream() { # DIR
    dd if="$DATA" of="$1/stream" bs=1M conv=fsync status=none
}

small() { # DIR
    mkdir "$1/small"
    for i in $(seq 1 "$FILES"); do cat "$SMALL" > "$1/small/f$i"; done
    sync -f "$1/small"
    "$BIN" stats "$1/small" >/dev/null # commits
}

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

declare -A T C
for r in $(seq 1 "$ROUNDS"); do
    # alternate which target goes first, so drift in the machine's load hits both alike
    if [ $((r % 2)) -eq 1 ]; then order="root deep"; else order="deep root"; fi
    for t in $order; do
        d=$MNT
        [ "$t" = deep ] && d=$DEEP
        T[$t,stream]+="$(secs stream "$d") "
        C[$t,stream]+="$(cat "$CPU_FILE") "
        rm -f "$d/stream"
        T[$t,small]+="$(secs small "$d") "
        C[$t,small]+="$(cat "$CPU_FILE") "
        rm -rf "$d/small"
        sync -f "$MNT"
    done
done

"$BIN" stats "$MNT" >&2
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); rounds: $ROUNDS; stream ${MB} MiB; small ${FILES} x 64 KiB"
printf '%-8s %12s %12s %9s   %12s %12s %9s\n' workload "wall root" "wall deep" deep/root "cpu root" "cpu deep" deep/root
for w in stream small; do
    a=$(echo "${T[root,$w]}" | tr ' ' '\n' | grep . | median)
    b=$(echo "${T[deep,$w]}" | tr ' ' '\n' | grep . | median)
    ca=$(echo "${C[root,$w]}" | tr ' ' '\n' | grep . | median)
    cb=$(echo "${C[deep,$w]}" | tr ' ' '\n' | grep . | median)
    printf '%-8s %10.2f s %10.2f s %9.3f   %10.2f s %10.2f s %9.3f\n' "$w" "$a" "$b" "$(echo "$b / $a" | bc -l)" \
        "$ca" "$cb" "$(echo "$cb / $ca" | bc -l)"
    echo "  $w wall root: ${T[root,$w]}"
    echo "  $w wall deep: ${T[deep,$w]}"
    echo "  $w cpu root: ${C[root,$w]}"
    echo "  $w cpu deep: ${C[deep,$w]}"
done
