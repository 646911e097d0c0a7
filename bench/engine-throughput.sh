#!/usr/bin/env bash
# Engine write throughput against what the machine can do, all measured in this run.
#
#   bench/engine-throughput.sh [WORKDIR]
#
# Writes the Silesia corpus files ×4 through the engine API (crates/pipeline/examples/
# engine_throughput.rs: 1 MiB writes, then sync) at zstd:1 and compares with
#   target = 0.9 × min(cores × single-thread zstd:1 speed, device write speed × ratio)
# where the single-thread speed is the higher of the zstd CLI (-b1, 128 KiB blocks, the
# engine's record size) and the engine's codec library per CPU-second of one thread, the device speed from dd with O_DIRECT on the filesystem holding WORKDIR,
# and the ratio from the engine's own run. WORKDIR defaults to a new directory in /var/tmp,
# removed at the end (a WORKDIR given is kept).
# Corpus: $SQUEEZEFS_CORPUS or ../shared/corpus (zip files); skipped with a message if absent.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CORPUS=${SQUEEZEFS_CORPUS:-$ROOT/../shared/corpus}
if ! ls "$CORPUS"/*.zip >/dev/null 2>&1; then
    echo "engine-throughput: no corpus zip files in $CORPUS; skipping (set SQUEEZEFS_CORPUS)" >&2
    exit 0
fi
for tool in zstd unzip dd nproc python3; do
    command -v $tool >/dev/null || { echo "engine-throughput: needs $tool" >&2; exit 1; }
done
if [ -n "${1:-}" ]; then
    WORK=$1
else
    # a work dir of our own (corpus copies, ~60 MB) goes when the script ends
    WORK=$(mktemp -d /var/tmp/sqz-engine-bench.XXXXXX)
    trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK/corpus"
for z in "$CORPUS"/*.zip; do unzip -qo "$z" -d "$WORK/corpus"; done
mapfile -t FILES < <(find "$WORK/corpus" -type f | sort)
cat "${FILES[@]}" > "$WORK/all.bin"
BYTES=$(stat -c %s "$WORK/all.bin")
CORES=$(nproc)

echo "== build (release)"
cargo build --locked --release -q -p squeezefs-pipeline --example engine_throughput
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/engine_throughput

# Single-thread zstd:1 on 128 KiB blocks; measured before and after the engine runs, the
# faster of the two is used (a conservative target when other work shares the cores).
zstd1() {
    zstd -b1 -B131072 -i3 -T1 "$WORK/all.bin" 2>&1 | tr '\r' '\n' | grep -E 'MB/s' | tail -1
}
echo "== single-thread zstd:1, 128 KiB blocks (zstd CLI); load: $(cut -d' ' -f1-3 /proc/loadavg)"
Z1_LINE=$(zstd1)
echo "$Z1_LINE"
Z1A=$(echo "$Z1_LINE" | grep -Eo '[0-9.]+ MB/s' | head -1 | cut -d' ' -f1)

echo "== single-thread zstd:1 by CPU time (the engine's codec library, 128 KiB blocks, best of 10)"
REF=$("$BIN" --codec-reference "${FILES[@]}")
echo "$REF"
Z1CPU=$(REF="$REF" python3 -c "import json, os; print(json.loads(os.environ['REF'])['mb_per_cpu_s'])")

# The engine's compression work done by zstd alone: the corpus ×4 in 128 KiB blocks on one
# thread per core at once, wall clock, best of 5 (before and after the engine runs). Not the
# target's bound; it shows what the cores deliver together at this moment (on this VM two
# threads at once range from ~1.4× to ~2× one thread within minutes).
par_ref() {
    "$BIN" --parallel-reference --copies 4 --threads "$CORES" "${FILES[@]}"
}
echo "== zstd:1 alone on $CORES threads at once (the engine's compression work, wall clock, best of 5)"
PAR_A=$(par_ref)
echo "$PAR_A"

RUNS=${RUNS:-5}
echo "== engine: corpus ($BYTES bytes) ×4 at zstd:1, best of $RUNS runs per writer count (zstd -b reports its best too)"
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"
for writers in 1 2; do
    for _ in $(seq "$RUNS"); do
        rm -rf "$WORK/pool"
        "$BIN" --pool "$WORK/pool" --compression zstd:1 --copies 4 --writers $writers "${FILES[@]}" | tee -a "$RESULTS"
    done
done
rm -rf "$WORK/pool"
PAR_B=$(par_ref)
echo "zstd:1 alone on $CORES threads again: $PAR_B"
Z1_LINE=$(zstd1)
echo "zstd:1 again: $Z1_LINE; load: $(cut -d' ' -f1-3 /proc/loadavg)"
Z1B=$(echo "$Z1_LINE" | grep -Eo '[0-9.]+ MB/s' | head -1 | cut -d' ' -f1)
# The higher of the CLI's best wall-clock speed and the codec's speed per CPU-second: CPU time
# does not shrink when other jobs share the cores, so the target stays honest under load.
Z1=$(python3 -c "print(max($Z1A, $Z1B, $Z1CPU))")

# Device speed last: deleting the 1 GiB test file sends discards (mount -o discard) that
# would stall the engine's fdatasync if the engine ran right after.
echo "== device write speed (dd, O_DIRECT, 1 GiB) on $(df --output=source "$WORK" | tail -1)"
t0=$(date +%s.%N)
dd if=/dev/zero of="$WORK/dd.test" bs=1M count=1024 oflag=direct conv=fdatasync status=none
t1=$(date +%s.%N)
rm -f "$WORK/dd.test"
DEV=$(python3 -c "print(round(1073741824/1e6/($t1-$t0),1))")
echo "device write: $DEV MB/s"

python3 - "$RESULTS" "$Z1" "$DEV" "$CORES" "$PAR_A" "$PAR_B" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
z1 = float(sys.argv[2]); dev = float(sys.argv[3]); cores = int(sys.argv[4])
par = max(json.loads(sys.argv[5])["mb_per_s"], json.loads(sys.argv[6])["mb_per_s"])
r = max(runs, key=lambda x: x["mb_per_s"])
cpu = min(x["cpu_seconds"] for x in runs)
cpu_bound = cores * z1
dev_bound = dev * r["ratio"]
bound = min(cpu_bound, dev_bound)
target = 0.9 * bound
got = r["mb_per_s"]
mb = r["logical_bytes"] / 1e6
print(f"cores × zstd:1      = {cores} × {z1:.0f} = {cpu_bound:.0f} MB/s")
print(f"device × ratio      = {dev:.0f} × {r['ratio']:.2f} = {dev_bound:.0f} MB/s")
print(f"target (90% of min) = {target:.0f} MB/s")
print(f"engine (best run)   = {got:.0f} MB/s ({r['writers']} writer(s), write phase {r['write_phase_seconds']:.2f} s of {r['seconds']:.2f} s) = {100*got/bound:.0f}% of the bound -> {'PASS' if got >= target else 'MISS'}")
print(f"engine CPU cost     = {cpu:.2f} CPU-s for {mb:.0f} MB; zstd:1 alone needs {mb/z1:.2f} CPU-s at {z1:.0f} MB/s: {100*(mb/z1)/cpu:.0f}% of the engine's CPU is compression")
# measured inside the engine: the codec's own CPU time and the bytes it compressed
lean = min(runs, key=lambda x: x["cpu_seconds"])
zc = lean["compress_cpu_seconds"]
print(f"engine CPU, measured = {lean['cpu_seconds']:.2f} CPU-s, of which {zc:.2f} in the codec "
      f"({lean['compressed_input_bytes']/1e6:.0f} MB at {lean['compressed_input_bytes']/1e6/zc:.0f} MB/CPU-s): "
      f"{100*(lean['cpu_seconds']-zc)/lean['cpu_seconds']:.0f}% of the engine's CPU is beyond compression (leanest run)")
print(f"CPU-limited figure  = {cores} cores × {mb:.0f} MB / {cpu:.2f} CPU-s = {cores*mb/cpu:.0f} MB/s ({100*cores*mb/cpu/bound:.0f}% of the bound, if the engine had the cores to itself)")
print(f"zstd alone, {cores} threads = {par:.0f} MB/s (best before/after, {100*par/cpu_bound:.0f}% of cores × zstd:1); engine = {100*got/par:.0f}% of it")
PY
