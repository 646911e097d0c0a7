#!/usr/bin/env bash
# What a device write costs the writing thread, through the page cache and with O_DIRECT:
# the figures behind writing block devices direct (crates/device/src/direct.rs).
#
#   bench/direct-write.sh [--mib N] [--rounds R] [--dir DIR]      (root: losetup)
#
# Writes N MiB (default 800) in 1 MiB blocks with dd, pinned to CPU 0, to
#   loop-shm   a loop device over a file in /dev/shm (no disk under it),
#   loop-dir   a loop device over a file in DIR (default /var/tmp: the host's disk),
#   file-dir   a regular file in DIR (how a pool on a device file is written),
# each buffered and with oflag=direct, then fdatasync (conv=fdatasync). Prints per target
# and mode the writer's CPU per byte (user + system of dd) and the throughput including the
# sync, the median of R rounds (default 3), modes alternating within a round.
set -euo pipefail
MIB=800 ROUNDS=3 DIR=/var/tmp
while [ $# -gt 0 ]; do
    case $1 in
        --mib) MIB=${2:?}; shift 2 ;;
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --dir) DIR=${2:?}; shift 2 ;;
        *) echo "direct-write: unknown argument '$1'; accepted: --mib N --rounds R --dir DIR" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "direct-write: needs root (losetup)" >&2; exit 1; }
for tool in dd losetup taskset python3; do
    command -v $tool >/dev/null || { echo "direct-write: needs $tool" >&2; exit 1; }
done
SIZE=$(( (MIB + 64) << 20 ))
SHM=$(mktemp /dev/shm/sqz-direct.XXXXXX)
DISK=$(mktemp "$DIR/sqz-direct-loop.XXXXXX")
FILE=$(mktemp "$DIR/sqz-direct-file.XXXXXX")
LOOPS=()
cleanup() {
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    rm -f "$SHM" "$DISK" "$FILE"
}
trap cleanup EXIT
truncate -s "$SIZE" "$SHM" "$DISK"
LSHM=$(losetup -f --show "$SHM"); LOOPS+=("$LSHM")
LDISK=$(losetup -f --show "$DISK"); LOOPS+=("$LDISK")

# one dd run: prints "cpu_seconds wall_seconds"
one() {
    local target=$1 flag=$2 t0 t1 cpu
    [ "$target" = "$FILE" ] && : > "$FILE"
    t0=$(date +%s.%N)
    cpu=$( { TIMEFORMAT='%U %S'; time taskset -c 0 dd if=/dev/zero of="$target" bs=1M count="$MIB" \
        conv=fdatasync,notrunc $flag status=none; } 2>&1 )
    t1=$(date +%s.%N)
    python3 -c "import sys; u,s=map(float,'$cpu'.split()); print(u+s, $t1-$t0)"
}

declare -A CPU WALL
for r in $(seq "$ROUNDS"); do
    for t in loop-shm loop-dir file-dir; do
        case $t in loop-shm) dev=$LSHM ;; loop-dir) dev=$LDISK ;; file-dir) dev=$FILE ;; esac
        for mode in buffered direct; do
            flag=; [ $mode = direct ] && flag=oflag=direct
            read -r c w < <(one "$dev" "$flag")
            CPU[$t,$mode]+="$c "
            WALL[$t,$mode]+="$w "
        done
    done
done

echo "| target | mode | writer CPU ns/B | MB/s incl. fdatasync | rounds |"
echo "|---|---|---|---|---|"
for t in loop-shm loop-dir file-dir; do
    for mode in buffered direct; do
        python3 - "$MIB" "${CPU[$t,$mode]}" "${WALL[$t,$mode]}" "$t" "$mode" <<'EOF'
import statistics, sys
mib, cpus, walls, t, mode = int(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split(), sys.argv[4], sys.argv[5]
b = mib << 20
ns = [float(c) * 1e9 / b for c in cpus]
mbs = [b / 1e6 / float(w) for w in walls]
print(f"| {t} | {mode} | {statistics.median(ns):.2f} ({min(ns):.2f}–{max(ns):.2f}) | "
      f"{statistics.median(mbs):.0f} ({min(mbs):.0f}–{max(mbs):.0f}) | {len(ns)} |")
EOF
    done
done
