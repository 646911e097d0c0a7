#!/usr/bin/env bash
# Bundle size of a `mkfs --rootdir` pool: what it saves against mksquashfs, and what it costs
# to read the small files back, on the Linux 6.1 source tree, in one run.
#
# usage: bench/bundle-size.sh [--levels "3"] [--blocks "128K 1M"] [--factors "1 2 4"] [--rounds N]
#                             [--read-blocks "128K"] [--read-rounds N] [--jobs N]
#                             [--workdir DIR] [--outdir DIR] [--no-size] [--no-read]
#
# Source: WORKDIR/src as bench/rootdir.sh extracts it (default /var/tmp/rootdir-bench), read
# once before timing.
# Size (unless --no-size): for each zstd level N (default 3) and block size B, ROUNDS times,
# alternately:
#   mksquashfs SRC IMG -comp zstd -Xcompression-level N -b B -processors JOBS, then `sync IMG`;
#   squeezefs mkfs POOL --rootdir SRC --compress zstd:N --recordsize B --bundle-size F×B
#     --jobs JOBS, for each factor F (a bundle size above 4M is skipped).
#   Images and pools go to OUTDIR (default /dev/shm/bundle-size-bench: device write speed
#   left out). Size: `du -B1` of the image, of data.0 and the metadata store (meta.seal, as
#   mkfs --rootdir seals it); time: wall seconds until
#   durable and CPU seconds (user+sys, /usr/bin/time).
# Read cost (unless --no-read): for each block size B of --read-blocks, a pool at bundle size
#   B and one at 2×B, made on WORKDIR's disk; then READ_ROUNDS times, alternately, each pool
#   mounted afresh after `echo 3 > /proc/sys/vm/drop_caches` (the pool's device file and the
#   daemon's record cache both cold), and every file of the tree shorter than B read with
#   cat (xargs -0, 64 files a call) in two orders: path order (the order mkfs --rootdir wrote
#   them, so neighbours share bundles) and one fixed shuffle (every file's bundle decoded
#   afresh, the worst case). Wall seconds of each pass; the daemon's CPU is not in cat's.
# The 1-minute load average is printed with each row: the machine is shared, compare within
# a pair and use the ratios.
#
# Environment: SQUEEZEFS_BIN (default target/release/squeezefs, built if missing).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LEVELS="3"
BLOCKS="128K 1M"
FACTORS="1 2 4"
ROUNDS=1
READ_BLOCKS="128K"
READ_ROUNDS=3
JOBS=$(nproc)
WORK=/var/tmp/rootdir-bench
OUT=/dev/shm/bundle-size-bench
SIZE=1
READ=1

die() { echo "bundle-size.sh: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --levels) LEVELS=${2:?}; shift 2 ;;
        --blocks) BLOCKS=${2:?}; shift 2 ;;
        --factors) FACTORS=${2:?}; shift 2 ;;
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --read-blocks) READ_BLOCKS=${2:?}; shift 2 ;;
        --read-rounds) READ_ROUNDS=${2:?}; shift 2 ;;
        --jobs) JOBS=${2:?}; shift 2 ;;
        --workdir) WORK=${2:?}; shift 2 ;;
        --outdir) OUT=${2:?}; shift 2 ;;
        --no-size) SIZE=0; shift ;;
        --no-read) READ=0; shift ;;
        -h|--help) sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

[ "$(id -u)" = 0 ] || die "run as root (mounts, drop_caches)"
command -v mksquashfs >/dev/null || die "mksquashfs missing: apt-get install squashfs-tools"
BIN=${SQUEEZEFS_BIN:-$REPO/target/release/squeezefs}
if [ ! -x "$BIN" ]; then
    log "building $BIN"
    (cd "$REPO" && cargo build --release --locked -p squeezefs >&2)
fi
TREE=$(find "$WORK/src" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -1)
[ -d "$TREE" ] || die "no tree under $WORK/src: run bench/rootdir.sh once to extract it"
mkdir -p "$OUT"
log "warming the page cache with $TREE"
tar -C "$TREE" -cf - . | wc -c >/dev/null

alloc() { du -B1 -s "$1" | cut -f1; }
load1() { cut -d' ' -f1 /proc/loadavg; }
bytes_of() { # 128K / 1M -> bytes
    case "$1" in *K) echo $(( ${1%K} * 1024 )) ;; *M) echo $(( ${1%M} * 1048576 )) ;; *) echo "$1" ;; esac
}
mb() { printf '%.1f' "$(echo "$1/1000000" | bc -l)"; }
ratio() { printf '%.3f' "$(echo "$1/$2" | bc -l)"; }

# timed CMD...: sets WALL (s, 2 decimals) and CPU (user+sys s)
timed() {
    local t0 t1 tf
    tf=$(mktemp)
    t0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$tf" "$@" >/dev/null 2>"$tf.err" || { cat "$tf.err" >&2; rm -f "$tf" "$tf.err"; return 1; }
    t1=$(date +%s.%N)
    WALL=$(printf '%.2f' "$(echo "$t1 - $t0" | bc -l)")
    CPU=$(awk '{printf "%.2f", $1 + $2}' "$tf")
    rm -f "$tf" "$tf.err"
}

COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT+changes"
echo "# bundle-size.sh: $(date -u +%F\ %H:%M) UTC, $(nproc) cores, tree $TREE"
echo "# squeezefs: $($BIN --version) at commit $COMMIT ($BIN); $(mksquashfs -version 2>&1 | head -1)"

if [ "$SIZE" = 1 ]; then
    echo "# size: output to $OUT ($(df --output=fstype "$OUT" | tail -1))"
    ROWS=()
    for level in $LEVELS; do
        for block in $BLOCKS; do
            b=$(bytes_of "$block")
            for round in $(seq "$ROUNDS"); do
                img=$OUT/img.sqfs
                rm -f "$img"
                l=$(load1)
                log "mksquashfs zstd:$level -b $block (round $round, load $l)"
                timed sh -c "mksquashfs '$TREE' '$img' -comp zstd -Xcompression-level $level -b $block -no-progress -quiet -processors $JOBS && sync '$img'"
                sq=$(alloc "$img")
                sq_wall=$WALL
                ROWS+=("| mksquashfs zstd:$level -b $block | - | - | $sq | $(mb "$sq") | 1 | $WALL | 1 | $CPU | $l |")
                rm -f "$img"
                for f in $FACTORS; do
                    bs=$(( b * f ))
                    [ "$bs" -le $(( 4 << 20 )) ] || continue
                    pool=$OUT/pool
                    rm -rf "$pool"
                    l=$(load1)
                    log "squeezefs --rootdir --recordsize $block --bundle-size $bs (round $round, load $l)"
                    timed "$BIN" mkfs "$pool" --rootdir "$TREE" --compress zstd:$level --recordsize "$b" --bundle-size "$bs" \
                        --jobs "$JOBS" -q
                    sz=$(alloc "$pool")
                    store=meta.redb
                    [ -e "$pool/meta.seal" ] && store=meta.seal
                    ROWS+=("| squeezefs zstd:$level rs $block, bundles $((bs / 1024))K | $(mb "$(alloc "$pool/data.0")") | $(mb "$(alloc "$pool/$store")") | $sz | $(mb "$sz") | $(ratio "$sz" "$sq") | $WALL | $(ratio "$WALL" "$sq_wall") | $CPU | $l |")
                    "$BIN" fsck "$pool" >/dev/null || die "fsck of the pool failed"
                    rm -rf "$pool"
                done
            done
        done
    done
    echo
    echo "| tool | data.0 MB | store MB | bytes | MB | vs squashfs | wall s | time vs squashfs | CPU s | load |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
fi

if [ "$READ" = 1 ]; then
    mnt=$WORK/bundle-size-mnt
    mkdir -p "$mnt"
    RROWS=()
    for block in $READ_BLOCKS; do
        b=$(bytes_of "$block")
        lists=$WORK/bundle-size-lists
        mkdir -p "$lists"
        (cd "$TREE" && find . -type f -size -"$b"c -print0 | sort -z) >"$lists/path"
        # one fixed shuffle: the same order for every pool and round
        tr '\0' '\n' <"$lists/path" | shuf --random-source=<(yes) | tr '\n' '\0' >"$lists/shuffled"
        n=$(tr -cd '\0' <"$lists/path" | wc -c)
        bytes=$(cd "$TREE" && xargs -0 -a "$lists/path" stat -c %s | awk '{s += $1} END {print s}')
        log "read cost at $block: $n files, $bytes bytes"
        declare -A POOLS=()
        for f in 1 2; do
            bs=$(( b * f ))
            pool=$WORK/bundle-size-pool-$f
            rm -rf "$pool"
            log "making $pool (record size $block, bundles $((bs / 1024))K)"
            "$BIN" mkfs "$pool" --rootdir "$TREE" --compress zstd:3 --recordsize "$b" --bundle-size "$bs" --jobs "$JOBS" -q \
                >/dev/null
            POOLS[$f]=$pool
        done
        for round in $(seq "$READ_ROUNDS"); do
            for order in path shuffled; do
                for f in 1 2; do
                    "$BIN" mount "${POOLS[$f]}" "$mnt" -o ro
                    sync
                    echo 3 >/proc/sys/vm/drop_caches
                    l=$(load1)
                    timed sh -c "cd '$mnt' && xargs -0 -n 64 -a '$lists/$order' cat >/dev/null"
                    "$BIN" umount "$mnt"
                    RROWS+=("| $block | $(( b * f / 1024 ))K | $order | $round | $n | $WALL | $CPU | $l |")
                    eval "W_${order}_${f}_${round}=$WALL"
                done
                w1=W_${order}_1_${round}
                w2=W_${order}_2_${round}
                RROWS+=("| $block | 2× vs 1× | $order | $round | | $(ratio "${!w2}" "${!w1}") | | |")
            done
        done
        for f in 1 2; do rm -rf "${POOLS[$f]}"; done
        unset POOLS
    done
    rmdir "$mnt" 2>/dev/null || true
    echo
    echo "| record size | bundle size | order | round | files | wall s | cat CPU s | load |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${RROWS[@]}"
fi
