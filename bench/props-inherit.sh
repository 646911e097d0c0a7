#!/usr/bin/env bash
# Cost of property inheritance on the write path: the same writes into the mount's root and
# into a 10-deep tree whose every level sets properties (compression=lz4 and
# compress-force=off, the same codec the mount option gives the root, so both targets
# compress alike and only the lookup differs). One pool, mounted compress=lz4; the two
# targets alternate in every round, and the table shows the median of the rounds.
#
#   bench/props-inherit.sh [WORKDIR] [ROUNDS]     (root; ROUNDS default 7)
#
# Workloads per round and target:
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
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/squeezefs
POOL=$WORK/pool
MNT=$WORK/mnt
DATA=/dev/shm/sqz-props-data.$$
SMALL=/dev/shm/sqz-props-small.$$
cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && "$BIN" umount "$MNT" || true
    rm -f "$DATA" "$SMALL"
}
trap cleanup EXIT

seq 1 100000000 | head -c $((MB << 20)) > "$DATA"
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

secs() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }

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

declare -A T
for r in $(seq 1 "$ROUNDS"); do
    # alternate which target goes first, so drift in the machine's load hits both alike
    if [ $((r % 2)) -eq 1 ]; then order="root deep"; else order="deep root"; fi
    for t in $order; do
        d=$MNT
        [ "$t" = deep ] && d=$DEEP
        T[$t,stream]+="$(secs stream "$d") "
        rm -f "$d/stream"
        T[$t,small]+="$(secs small "$d") "
        rm -rf "$d/small"
        sync -f "$MNT"
    done
done

"$BIN" stats "$MNT" | head -n 8 >&2
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); rounds: $ROUNDS; stream ${MB} MiB; small ${FILES} x 64 KiB"
printf '%-8s %14s %14s %10s\n' workload "root (median)" "10-deep" "deep/root"
for w in stream small; do
    a=$(echo "${T[root,$w]}" | tr ' ' '\n' | grep . | median)
    b=$(echo "${T[deep,$w]}" | tr ' ' '\n' | grep . | median)
    if [ "$w" = stream ]; then
        printf '%-8s %11.1f MB/s %9.1f MB/s %10.3f\n' "$w" "$(echo "$MB / $a" | bc -l)" "$(echo "$MB / $b" | bc -l)" \
            "$(echo "$b / $a" | bc -l)"
    else
        printf '%-8s %12.2f s %12.2f s %10.3f\n' "$w" "$a" "$b" "$(echo "$b / $a" | bc -l)"
    fi
    echo "  $w root s: ${T[root,$w]}"
    echo "  $w deep s: ${T[deep,$w]}"
done
