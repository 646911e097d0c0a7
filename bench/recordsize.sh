#!/usr/bin/env bash
# The Silesia corpus written at recordsize 128 KiB against 1 MiB, at zstd:3 and zstd:15:
# compression ratio, write and cold-read throughput, on a mounted squeezefs; beside it, the
# zstd CLI on the same bytes cut into the same blocks (`zstd -b -B`), measured in the same
# run, as the reference for the ratio.
#
#   bench/recordsize.sh [WORKDIR] [ROUNDS]      (root; ROUNDS default 3; CORPUS=DIR of .zip)
#
# Per round: a fresh pool, mounted with no option; four directories, one per (record size,
# level), each with `recordsize` and `compression` set as properties (files created there
# get them); the configurations are written in a rotated order each round: `cp` of COPIES
# copies of the corpus files, then `sync` of the copied files (the first fsync commits the
# txg). Then a remount, and per configuration (same rotation) a cold read: caches dropped,
# `cat` of its files. Ratio: uncompressed / disk bytes from `squeezefs stats --json DIR`
# (deterministic). Beside wall time, the daemon's CPU time (utime + stime, /proc) per write
# and read: on a machine shared with other jobs it moves far less than wall time. The table
# shows the medians over the rounds, and 1M / 128K per level (medians of the per-round
# ratios: both sizes ran in the same round).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${1:-$(mktemp -d /var/tmp/sqz-recordsize.XXXXXX)}
ROUNDS=${2:-3}
CORPUS=${CORPUS:-/work/shared/corpus}
COPIES=${COPIES:-4}
SPECS=${SPECS:-"zstd:3 zstd:15"}
SIZES=${SIZES:-"128K 1M"}
[ "$(id -u)" = 0 ] || { echo "bench/recordsize.sh mounts: run it as root" >&2; exit 1; }
ls "$CORPUS"/*.zip >/dev/null 2>&1 || { echo "no .zip files in $CORPUS (set CORPUS=DIR)" >&2; exit 1; }
mkdir -p "$WORK"
cargo build --locked --release -q -p squeezefs
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/squeezefs
POOL=$WORK/pool
MNT=$WORK/mnt
SRC=/dev/shm/sqz-recordsize-src.$$
cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && "$BIN" umount "$MNT" || true
    rm -rf "$SRC"
}
trap cleanup EXIT

mkdir -p "$SRC" "$MNT"
for z in "$CORPUS"/*.zip; do
    unzip -q -o "$z" -d "$SRC"
done
for c in $(seq 2 "$COPIES"); do
    for f in "$SRC"/*; do
        case "$f" in *.copy*) continue ;; esac
        cp "$f" "$f.copy$c"
    done
done
BYTES=$(cat "$SRC"/* | wc -c)
echo "corpus: $(ls "$SRC" | wc -l) files, $BYTES bytes ($COPIES copies of $(ls "$CORPUS"/*.zip | wc -l) Silesia files)" >&2

# configurations: "SPEC SIZE", in a fixed order; rounds rotate it
CONFIGS=()
for spec in $SPECS; do
    for size in $SIZES; do
        CONFIGS+=("$spec $size")
    done
done
dirname_of() { echo "$1" | tr ': ' '-_'; } # "zstd:3 1M" -> zstd-3_1M

RES=$WORK/results.$$
: > "$RES"
now() { date +%s.%N; }
TICK=$(getconf CLK_TCK)
daemon_cpu() { # seconds of CPU the mount's daemon used so far
    local pid
    pid=$(getfattr --absolute-names --only-values -n user.squeezefs.mount "$MNT" | sed -n 's/^pid=//p')
    echo "$(awk '{print $14 + $15}' "/proc/$pid/stat") / $TICK" | bc -l
}
for round in $(seq 1 "$ROUNDS"); do
    rm -rf "$POOL"
    "$BIN" mkfs "$POOL" >/dev/null
    "$BIN" mount "$POOL" "$MNT"
    n=${#CONFIGS[@]}
    order=()
    for i in $(seq 0 $((n - 1))); do order+=("${CONFIGS[$(((i + round - 1) % n))]}"); done
    for cfg in "${order[@]}"; do
        read -r spec size <<< "$cfg"
        d=$MNT/$(dirname_of "$cfg")
        mkdir "$d"
        "$BIN" prop set "$d" "recordsize=$size" "compression=$spec"
        c0=$(daemon_cpu)
        t0=$(now)
        cp "$SRC"/* "$d/"
        sync "$d"/*
        t1=$(now)
        c1=$(daemon_cpu)
        ratio=$("$BIN" stats --json "$d" | python3 -c 'import json,sys; t=json.load(sys.stdin)["total"]; print(t["uncompressed_bytes"] / t["disk_bytes"])')
        echo "$round|$cfg|write|$(echo "$t1 - $t0" | bc -l)|$(echo "$c1 - $c0" | bc -l)|$ratio" >> "$RES"
    done
    "$BIN" umount "$MNT"
    "$BIN" mount "$POOL" "$MNT"
    for cfg in "${order[@]}"; do
        d=$MNT/$(dirname_of "$cfg")
        sync
        echo 3 > /proc/sys/vm/drop_caches
        c0=$(daemon_cpu)
        t0=$(now)
        cat "$d"/* > /dev/null
        t1=$(now)
        c1=$(daemon_cpu)
        echo "$round|$cfg|read|$(echo "$t1 - $t0" | bc -l)|$(echo "$c1 - $c0" | bc -l)|" >> "$RES"
    done
    "$BIN" umount "$MNT"
    echo "round $round done" >&2
done

# the zstd CLI on the same bytes, cut into blocks of the record size (one thread)
ZSTD=$WORK/zstd.$$
: > "$ZSTD"
for spec in $SPECS; do
    level=${spec#zstd:}
    for size in $SIZES; do
        # "-3   23984116 (2.650)  250.1 MB/s  1200.2 MB/s   8 files" (ratio, compress, decompress)
        line=$(zstd -q -b"$level" -B"$size" -i3 "$SRC"/* 2>&1 | tr '\r' '\n' | grep -E 'MB/s' | tail -1)
        r=$(echo "$line" | sed -n 's/.*(x\?\([0-9.]*\)).*/\1/p')
        speeds=$(echo "$line" | grep -oE '[0-9.]+ MB/s' | awk '{print $1}' | paste -sd'|')
        echo "$spec $size|$r|$speeds" >> "$ZSTD"
    done
done

python3 - "$RES" "$ZSTD" "$BYTES" "$SIZES" <<'EOF'
import statistics, sys
res, zst, nbytes, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
rows = {}
for line in open(res):
    rnd, cfg, kind, secs, cpu, ratio = line.strip().split("|")
    r = rows.setdefault(cfg, {"write": [], "read": [], "write_cpu": [], "read_cpu": [], "ratio": None})
    r[kind].append(float(secs))
    r[kind + "_cpu"].append(float(cpu))
    if ratio:
        r["ratio"] = float(ratio)
# "SPEC SIZE" -> (ratio, compress MB/s, decompress MB/s) of `zstd -b -B SIZE`, one thread
cli = {}
for l in open(zst):
    cfg, ratio, comp, decomp = l.strip().split("|")
    cli[cfg] = (float(ratio), float(comp), float(decomp))
mb = nbytes / 1e6
med = statistics.median
specs = []
for cfg in rows:
    spec = cfg.split()[0]
    if spec not in specs:
        specs.append(spec)
print("| spec | recordsize | ratio | zstd -b -B ratio | squeezefs / zstd | write MB/s (daemon CPU-s) | cold read MB/s (daemon CPU-s) | zstd -b compress / decompress MB/s (1 thread) |")
print("|---|---|---|---|---|---|---|---|")
for spec in specs:
    for size in sizes:
        r, z = rows[f"{spec} {size}"], cli[f"{spec} {size}"]
        print(f"| {spec} | {size} | {r['ratio']:.4f} | {z[0]:.4f} | {r['ratio'] / z[0]:.4f} | "
              f"{mb / med(r['write']):.1f} ({med(r['write_cpu']):.2f}) | {mb / med(r['read']):.1f} ({med(r['read_cpu']):.2f}) | "
              f"{z[1]:.1f} / {z[2]:.1f} |")
if len(sizes) == 2:
    a, b = sizes
    print()
    print(f"| spec | ratio {b} / {a} | write MB/s {b} / {a} | write CPU-s {b} / {a} | cold read MB/s {b} / {a} | read CPU-s {b} / {a} | zstd -b compress / decompress MB/s {b} / {a} |")
    print("|---|---|---|---|---|---|---|")
    for spec in specs:
        ra, rb = rows[f"{spec} {a}"], rows[f"{spec} {b}"]
        za, zb = cli[f"{spec} {a}"], cli[f"{spec} {b}"]
        # per-round pairs (both configurations ran in the same round): median of the ratios
        pair = lambda k, inv: med([(x / y if inv else y / x) for x, y in zip(ra[k], rb[k])])
        print(f"| {spec} | {rb['ratio'] / ra['ratio']:.4f} | {pair('write', True):.2f} | {pair('write_cpu', False):.2f} | "
              f"{pair('read', True):.2f} | {pair('read_cpu', False):.2f} | {zb[1] / za[1]:.2f} / {zb[2] / za[2]:.2f} |")
EOF
echo "per-round figures: $RES (round|spec size|write or read|seconds|daemon CPU seconds|ratio)" >&2
