#!/usr/bin/env bash
# Engine write throughput A/B of two builds of the engine_throughput example, in
# alternating pairs (A, B, A, B, ...), so load that comes and goes on a shared machine hits
# both sides alike.
#
#   bash bench/engine-ab.sh BIN_A BIN_B      env: PAIRS=8 WRITERS=2 SPEC=zstd:1 COPIES=4 CORPUS=…
#
# Build each side with `cargo build --release -p squeezefs-pipeline --example engine_throughput`
# (separate target directories for the two commits). Each run writes the Silesia corpus
# files (CORPUS: directory of the *.zip files, default ../shared/corpus) COPIES times
# through the engine API and syncs (bench/engine-throughput.sh has the details). Prints
# every run's MB/s and CPU seconds, then per side the median and mean, and B/A of the
# medians and of the pairwise ratios.
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,14p' "$0"; exit 2; }
A=$1; B=$2
PAIRS=${PAIRS:-8}; WRITERS=${WRITERS:-2}; SPEC=${SPEC:-zstd:1}; COPIES=${COPIES:-4}
CORPUS=${CORPUS:-$(cd "$(dirname "$0")/.." && pwd)/../shared/corpus}
ls "$CORPUS"/*.zip >/dev/null 2>&1 || { echo "engine-ab: no corpus zips in $CORPUS" >&2; exit 1; }
W=$(mktemp -d /var/tmp/sqz-engine-ab.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/corpus"
for z in "$CORPUS"/*.zip; do unzip -qo "$z" -d "$W/corpus"; done
mapfile -t FILES < <(find "$W/corpus" -type f | sort)
: > "$W/runs"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for p in $(seq 1 "$PAIRS"); do
    for side in A B; do
        bin=$A; [ "$side" = B ] && bin=$B
        rm -rf "$W/pool"
        out=$("$bin" --pool "$W/pool" --compression "$SPEC" --copies "$COPIES" --writers "$WRITERS" "${FILES[@]}")
        echo "$p $side $out" >> "$W/runs"
        python3 -c "import json,sys; r=json.loads(sys.argv[3]); print(f'pair {sys.argv[1]} {sys.argv[2]}: {r[\"mb_per_s\"]:.0f} MB/s, {r[\"cpu_seconds\"]:.2f} CPU-s')" "$p" "$side" "$out"
    done
done
rm -rf "$W/pool"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/runs" <<'PY'
import json, statistics, sys
runs = {"A": [], "B": []}
for line in open(sys.argv[1]):
    p, side, js = line.split(" ", 2)
    runs[side].append(json.loads(js))
for side in "AB":
    mb = [r["mb_per_s"] for r in runs[side]]
    cpu = [r["cpu_seconds"] for r in runs[side]]
    print(f"{side}: MB/s median {statistics.median(mb):.0f} mean {statistics.mean(mb):.0f} "
          f"(min {min(mb):.0f}, max {max(mb):.0f}); CPU-s median {statistics.median(cpu):.2f}")
ma = statistics.median(r["mb_per_s"] for r in runs["A"])
mb = statistics.median(r["mb_per_s"] for r in runs["B"])
pair = [b["mb_per_s"] / a["mb_per_s"] for a, b in zip(runs["A"], runs["B"])]
ca = statistics.median(r["cpu_seconds"] for r in runs["A"])
cb = statistics.median(r["cpu_seconds"] for r in runs["B"])
print(f"B/A: medians {mb / ma:.3f}; pairwise ratios median {statistics.median(pair):.3f} "
      f"(min {min(pair):.3f}, max {max(pair):.3f}); CPU-s medians {cb / ca:.3f}")
PY
