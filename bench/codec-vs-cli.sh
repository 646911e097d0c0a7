#!/usr/bin/env bash
# squeezefs bench against the zstd and lz4 command-line benchmarks, same machine, same run.
#
# Unzips the Silesia subset (dickens ooffice osdb xml) to a temp dir, then for zstd:1,
# zstd:3 and lz4 runs, in alternation, `zstd -bN -B128K` / `lz4 -b1 -B128K` and
# `squeezefs bench --threads 1 --block 128K` (ROUNDS times each, best of rounds counts),
# then squeezefs with 2 threads, then zstd levels 1..15 (ratio, speed, workspace KiB against
# btrfs' figures) with a plot. Prints the tables of bench/codec/compare.py.
#
# env: CORPUS (dir of the zips; default ../shared/corpus or /work/shared/corpus),
#      TIME (seconds per measurement, default 3), ROUNDS (default 2),
#      OUT (dir for results and the plot; default a temp dir that is kept),
#      CARGO_TARGET_DIR (default target/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TIME=${TIME:-3}
ROUNDS=${ROUNDS:-2}
if [ -z "${CORPUS:-}" ]; then
    for c in "$ROOT/../shared/corpus" /work/shared/corpus; do
        [ -f "$c/dickens.zip" ] && CORPUS=$c && break
    done
fi
[ -n "${CORPUS:-}" ] && [ -f "$CORPUS/dickens.zip" ] || { echo "corpus not found: set CORPUS=dir with dickens.zip ooffice.zip osdb.zip xml.zip" >&2; exit 2; }
for tool in zstd lz4 unzip python3; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 2; }
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && cargo build --release -q -p squeezefs)
BIN=$CARGO_TARGET_DIR/release/squeezefs
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
OUT=${OUT:-$(mktemp -d /tmp/codec-vs-cli.XXXXXX)}
mkdir -p "$OUT"
for z in dickens ooffice osdb xml; do unzip -oq "$CORPUS/$z.zip" -d "$DATA"; done
FILES=("$DATA/dickens" "$DATA/ooffice" "$DATA/osdb" "$DATA/xml")
echo "zstd: $(zstd --version 2>&1 | head -1)"
echo "lz4:  $(lz4 --version 2>&1 | head -1)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

for round in $(seq "$ROUNDS"); do
    for codec in zstd:1 zstd:3 lz4; do
        case $codec in
            zstd:*) zstd -b"${codec#zstd:}" -i"$TIME" -B128K "${FILES[@]}" >"$OUT/cli.$codec.$round.txt" 2>&1 ;;
            lz4) lz4 -b1 -i"$TIME" -B131072 "${FILES[@]}" >"$OUT/cli.$codec.$round.txt" 2>&1 ;;
        esac
        "$BIN" bench --threads 1 --block 128K --time "$TIME" --codecs "$codec" --json "${FILES[@]}" >"$OUT/ours.$codec.$round.json"
    done
done
"$BIN" bench --threads 1 --block 128K --time "$TIME" --codecs zstd:1,zstd:3,lz4 --json "${FILES[@]}" >"$OUT/threads1.json"
"$BIN" bench --threads 2 --block 128K --time "$TIME" --codecs zstd:1,zstd:3,lz4 --json "${FILES[@]}" >"$OUT/threads2.json"
"$BIN" bench --threads 1 --block 128K --time 0 --codecs zstd:1..15 --json "${FILES[@]}" >"$OUT/levels.json"
"$BIN" bench --threads 1 --block 128K --time 0 --codecs lz4:fast=17,lz4,lz4hc:9,zstd:-5,zstd:-1..15,zlib:1,zlib:6,zlib:9 \
    --plot "$OUT/ratio-vs-speed.png" "${FILES[@]}" >"$OUT/plot-table.txt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 "$ROOT/bench/codec/compare.py" "$OUT"
echo
echo "all codecs (one pass each):"
cat "$OUT/plot-table.txt"
echo "results and plot: $OUT"
