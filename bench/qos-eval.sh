#!/usr/bin/env bash
# QoS trees (issue 24, DESIGN §6): directory trees held at N MB/s, sharing bandwidth like
# HTB classes, spending the slack on ratio. Root only (FUSE mounts).
#
# usage: bench/qos-eval.sh [PART,...] [options]
#   PART (default a,b,c):
#     a   one tree at each target (thesis fig. 6.10): achieved throughput, 10 s windows,
#         ratio and levels; and every reference fixed level written unpaced (its throughput
#         and ratio: the strongest fixed level that meets a target is the ratio to beat)
#     b   concurrent trees (fig. 6.11), with --writers writers per directory:
#         b1  a parent at 20 MB/s shared by two children without their own rate
#         b2  a parent at 20 MB/s, a child with its own 5 MB/s and a sibling without
#         b3  a 100 MB/s tree next to a 10 MB/s tree
#     c   the thesis comparison: two trees at qos 10 and 50 against the same data written
#         to two directories at fixed lz4 and zlib:9 (unpaced): average throughput, ratio
#   --seconds S     length of every run (default 30: three 10 s windows)
#   --ref-seconds S length of each reference fixed-level run (default 10)
#   --targets L     MB/s targets of part a (default 10,25,50,100,1000; 1000 is above what
#                   a 2-core machine compresses: it shows what the machine does)
#   --refs L        reference fixed levels of part a (default lz4,zstd:1,zstd:3,zstd:6,
#                   zstd:9,zstd:12,zstd:15,zstd:19)
#   --writers L     writers per directory in part b (default 1,8)
#   --out DIR       results (default /var/tmp/squeezefs-bench-results/qos-eval-TIME)
#
# Data: the Silesia files of ../shared/corpus (SQUEEZEFS_CORPUS), concatenated and written
# cyclically by bench/qos-writer.py (1 MiB writes, each writer from its own offset). Every
# run: a fresh pool (file device in /var/tmp), mounted with trace=FILE, the directories and
# their properties set with `squeezefs prop set`, the writers started together and stopped
# at the same deadline; per directory the bytes written per second; `squeezefs stats
# --json` (after sync) for each tree's ratio and levels and each fixed directory's ratio;
# `squeezefs plot` of the trace (level and throughput over time per tree). Results:
# OUT/results.jsonl (one line per run), OUT/report.md and OUT/qos-eval-{a,b,c}.png from
# crates/cli/examples/qos_eval_report.rs, OUT/runs/NAME/{trace.csv,plot.png,stats.json}.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CORPUS=${SQUEEZEFS_CORPUS:-$REPO/../shared/corpus}

die() { echo "qos-eval: $*" >&2; exit 1; }
note() { echo "[$(date -u +%H:%M:%S)] $*"; }
usage() { sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

PARTS=a,b,c SECS=30 REF_SECS=10 TARGETS=10,25,50,100,1000 WRITERS=1,8
REFS=lz4,zstd:1,zstd:3,zstd:6,zstd:9,zstd:12,zstd:15,zstd:19
OUT=/var/tmp/squeezefs-bench-results/qos-eval-$(date -u +%Y%m%dT%H%M%S)
case "${1:-}" in [abc]*) PARTS=$1; shift ;; esac
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECS=${2:?--seconds needs a number}; shift 2 ;;
        --ref-seconds) REF_SECS=${2:?--ref-seconds needs a number}; shift 2 ;;
        --targets) TARGETS=${2:?--targets needs a list}; shift 2 ;;
        --refs) REFS=${2:?--refs needs a list}; shift 2 ;;
        --writers) WRITERS=${2:?--writers needs a list}; shift 2 ;;
        --out) OUT=${2:?--out needs a directory}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
IFS=, read -ra PART_LIST <<<"$PARTS"
IFS=, read -ra TARGET_LIST <<<"$TARGETS"
IFS=, read -ra REF_LIST <<<"$REFS"
IFS=, read -ra WRITER_LIST <<<"$WRITERS"
for p in "${PART_LIST[@]}"; do case $p in a|b|c) ;; *) die "unknown part '$p' (accepted: a, b, c)" ;; esac; done
[[ "$SECS" =~ ^[1-9][0-9]*$ ]] && [ "$SECS" -ge 10 ] || die "--seconds: '$SECS' (a whole number ≥ 10: the windows are 10 s)"
[[ "$REF_SECS" =~ ^[1-9][0-9]*$ ]] || die "--ref-seconds: '$REF_SECS' is not a positive number"
for t in "${TARGET_LIST[@]}"; do [[ "$t" =~ ^[1-9][0-9]*$ ]] || die "--targets: '$t' is not a number of MB/s"; done
for w in "${WRITER_LIST[@]}"; do [[ "$w" =~ ^[1-9][0-9]*$ ]] || die "--writers: '$w' is not a number"; done

[ "$(id -u)" = 0 ] || die "must run as root (FUSE mounts)"
need=()
for t in jq python3 unzip getfattr; do command -v $t >/dev/null || need+=("$t"); done
[ ${#need[@]} -eq 0 ] || die "needs: ${need[*]} (Debian: jq python3 unzip attr)"
ls "$CORPUS"/*.zip >/dev/null 2>&1 || die "no corpus zip files in $CORPUS (set SQUEEZEFS_CORPUS)"

[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
note "build (release): squeezefs and the report example"
(cd "$REPO" && cargo build --locked --release -q -p squeezefs --bin squeezefs --example qos_eval_report)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}/release
SQ=$TARGET/squeezefs
REPORT=$TARGET/examples/qos_eval_report
WRITER=$REPO/bench/qos-writer.py
COMMIT=$(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- crates bench || echo +dirty)

mkdir -p "$OUT/runs"
WORK=$(mktemp -d /var/tmp/sqz-qos-eval.XXXXXX)
POOL=$WORK/pool
MNT=$WORK/mnt
mkdir -p "$MNT"
cleanup() {
    set +e
    if mountpoint -q "$MNT" 2>/dev/null; then "$SQ" umount "$MNT" || umount -l "$MNT"; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# the data: the corpus once, in the page cache before any clock starts
mkdir -p "$WORK/corpus"
for z in "$CORPUS"/*.zip; do unzip -qo "$z" -d "$WORK/corpus"; done
DATA=$WORK/data.bin
find "$WORK/corpus" -type f | sort | xargs cat >"$DATA"
rm -rf "$WORK/corpus"
note "data: $(numfmt --to=iec "$(stat -c %s "$DATA")") of $(ls "$CORPUS"/*.zip | xargs -n1 basename | sed 's/\.zip//' | paste -sd, -)"

# space: the largest run writes ~ the machine's rate × seconds, mostly compressed
free=$(( $(stat -f -c '%a * %S' /var/tmp) ))
[ "$free" -gt $((12 << 30)) ] || die "less than 12G free in /var/tmp ($(numfmt --to=iec "$free"))"

RESULTS=$OUT/results.jsonl
# One run: NAME PART SECONDS SETTINGS WRITERS, where SETTINGS is a space-separated list of
# DIR (mkdir), DIR=qos:RATE or DIR=compression:SPEC, and WRITERS of DIR:N.
run() {
    local name=$1 part=$2 secs=$3 settings=$4 writers=$5
    local dir=$OUT/runs/$name
    mkdir -p "$dir"
    note "run $name ($secs s): $settings / writers $writers"
    "$SQ" umount "$MNT" >/dev/null 2>&1 || true
    rm -rf "$POOL"
    "$SQ" mkfs "$POOL" >"$dir/mkfs.txt"
    "$SQ" mount "$POOL" "$MNT" -o "trace=$dir/trace.csv"
    local s d v
    for s in $settings; do
        d=${s%%=*}
        mkdir -p "$MNT/$d"
        if [ "$s" != "$d" ]; then
            v=${s#*=}
            "$SQ" prop set "$MNT/$d" "${v%%:*}=${v#*:}" >/dev/null
        fi
    done
    local args=() w
    for w in $writers; do args+=("$MNT/${w%%:*}:${w##*:}"); done
    local load0 load1
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    python3 "$WRITER" "$DATA" "$secs" "${args[@]}" >"$dir/writers.json"
    load1=$(cut -d' ' -f1-3 /proc/loadavg)
    sync -f "$MNT"
    "$SQ" stats --json "$MNT" >"$dir/stats.json"
    # ratio of each directory with a fixed compression (not a tree of its own)
    local fixed="{}" r
    for s in $settings; do
        d=${s%%=*}
        case $s in
            *=compression:*)
                r=$("$SQ" stats --json "$MNT/$d" | jq '.total | if .disk_bytes > 0 then .uncompressed_bytes / .disk_bytes else 1 end')
                fixed=$(jq -c --arg d "$d" --argjson r "$r" '. + {($d): $r}' <<<"$fixed") ;;
        esac
    done
    "$SQ" umount "$MNT"
    "$SQ" plot "$dir/trace.csv" -o "$dir/plot.png" >/dev/null 2>&1 || note "  (no plot: $("$SQ" plot "$dir/trace.csv" -o "$dir/plot.png" 2>&1 | tail -1))"
    rm -rf "$POOL"
    # keep the trace small: it is plotted already
    gzip -f "$dir/trace.csv"
    jq -c --arg name "$name" --arg part "$part" --arg settings "$settings" --arg load0 "$load0" --arg load1 "$load1" \
        --arg mnt "$MNT/" --argjson fixed "$fixed" --slurpfile st "$dir/stats.json" '
        {name: $name, part: $part, settings: ($settings | split(" ")), load: [$load0, $load1],
         seconds: .seconds,
         dirs: (.trees | with_entries(.key |= ltrimstr($mnt))),
         trees: [$st[0].qos_trees[] | .path |= (ltrimstr($mnt | rtrimstr("/")) | ltrimstr("/") | if . == "" then "." else . end)],
         fixed: $fixed}' "$dir/writers.json" >>"$RESULTS"
    jq -r '"  " + ([.dirs | to_entries[] | "\(.key): \(.value.bytes / 1e6 / $s | floor) MB/s"] | join(", "))' \
        --argjson s "$(jq .seconds "$dir/writers.json")" <(tail -1 "$RESULTS")
}

for part in "${PART_LIST[@]}"; do
    case $part in
        a)
            for t in "${TARGET_LIST[@]}"; do
                run "a-qos$t" a "$SECS" "t=qos:${t}M" "t:1"
            done
            for r in "${REF_LIST[@]}"; do
                run "a-ref-$(tr ':' '=' <<<"$r")" a-ref "$REF_SECS" "f=compression:$r" "f:1"
            done ;;
        b)
            for w in "${WRITER_LIST[@]}"; do
                run "b1-w$w" b "$SECS" "p=qos:20M p/c1 p/c2" "p/c1:$w p/c2:$w"
                run "b2-w$w" b "$SECS" "p=qos:20M p/c=qos:5M p/s" "p/c:$w p/s:$w"
                run "b3-w$w" b "$SECS" "fast=qos:100M slow=qos:10M" "fast:$w slow:$w"
            done ;;
        c)
            run "c-fixed" c "$SECS" "a=compression:lz4 b=compression:zlib:9" "a:1 b:1"
            run "c-qos" c "$SECS" "a=qos:10M b=qos:50M" "a:1 b:1" ;;
    esac
done

{
    echo "# qos-eval $(date -u +%Y-%m-%d) commit $COMMIT"
    echo
    echo "command: bench/qos-eval.sh $PARTS --seconds $SECS --ref-seconds $REF_SECS --targets $TARGETS --writers $WRITERS"
    echo "machine: $(nproc) cores, $(uname -r); load average at the start of the runs in results.jsonl"
    echo
    "$REPORT" "$RESULTS" --png-dir "$OUT"
} >"$OUT/report.md"
note "report: $OUT/report.md"
cat "$OUT/report.md"
