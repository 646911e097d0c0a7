#!/usr/bin/env bash
# Image of a directory tree: `squeezefs mkfs --rootdir` against mksquashfs (and mkfs.btrfs
# --rootdir), on the Linux 6.1 source tree, in one run.
#
# usage: bench/rootdir.sh [--levels "3 15"] [--blocks "128K 1M"] [--rounds N] [--jobs N]
#                         [--workdir DIR] [--outdir DIR] [--no-btrfs] [--mounted] [--keep]
#                         [--no-seal]
#
# Source: Debian's linux-source-6.1 (/usr/src/linux-source-6.1.tar.xz), extracted once into
# WORKDIR/src (default /var/tmp/rootdir-bench) and read once before timing, so every tool reads
# it from the page cache.
# For each zstd level and block size, ROUNDS times (default 1), alternately:
#   mksquashfs SRC IMG -comp zstd -Xcompression-level N -b B   (Debian squashfs-tools), then
#     `sync IMG`: mksquashfs does not sync, squeezefs commits (fdatasync) before it exits;
#   squeezefs mkfs POOL --rootdir SRC --compress zstd:N --recordsize B, then `squeezefs fsck`
#     (not timed).
# Images and pools are written to OUTDIR (default: WORKDIR; /dev/shm keeps a nearly full disk
# out of the comparison, at the price of leaving out device write speed).
# Size: `du -B1 -s` of the image / of the pool directory (device file data.0 + the metadata
# store: meta.seal, sealed by mkfs --rootdir by default, or meta.redb with --no-seal, which
# passes --no-seal to mkfs; the split is printed too). The squeezefs time includes the seal. Time: wall seconds until the output is durable, and CPU seconds
# (user+sys, /usr/bin/time). The 1-minute load average before each run is printed: the machine
# is shared, so compare the tools within one run, as ratios.
# btrfs: mkfs.btrfs --rootdir with --compress zstd:3 when this btrfs-progs has it (6.x before
# 6.12 does not: then the uncompressed --rootdir run is given for time and size), on a sparse
# image file, shrunk (--shrink); size = the shrunk image's allocated bytes.
# --mounted: also the tree extracted through a mount (`squeezefs mount -o compress=zstd:3`,
# `tar -cf - . | tar -xf -` into it, `squeezefs umount`): pool size and wall time.
#
# Environment: SQUEEZEFS_BIN (default: target/release/squeezefs, built if missing).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LEVELS="3 15"
BLOCKS="128K 1M"
ROUNDS=1
JOBS=$(nproc)
WORK=/var/tmp/rootdir-bench
OUT=""
BTRFS=1
MOUNTED=0
KEEP=0
SEAL_ARG=()
LINUX_XZ=/usr/src/linux-source-6.1.tar.xz

die() { echo "rootdir.sh: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --levels) LEVELS=${2:?}; shift 2 ;;
        --blocks) BLOCKS=${2:?}; shift 2 ;;
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --jobs) JOBS=${2:?}; shift 2 ;;
        --workdir) WORK=${2:?}; shift 2 ;;
        --outdir) OUT=${2:?}; shift 2 ;;
        --no-btrfs) BTRFS=0; shift ;;
        --mounted) MOUNTED=1; shift ;;
        --keep) KEEP=1; shift ;;
        --no-seal) SEAL_ARG=(--no-seal); shift ;;
        -h|--help) sed -n '2,5p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

[ "$(id -u)" = 0 ] || die "run as root (mkfs.btrfs on a loop image, dropping nothing else)"
command -v mksquashfs >/dev/null || die "mksquashfs missing: apt-get install squashfs-tools"
[ -r "$LINUX_XZ" ] || die "$LINUX_XZ missing: apt-get install linux-source-6.1"
BIN=${SQUEEZEFS_BIN:-$REPO/target/release/squeezefs}
if [ ! -x "$BIN" ]; then
    log "building $BIN"
    (cd "$REPO" && cargo build --release -p squeezefs >&2)
fi

OUT=${OUT:-$WORK}
mkdir -p "$WORK" "$OUT"
SRC=$WORK/src
if [ ! -e "$SRC/.extracted" ]; then
    log "extracting $LINUX_XZ into $SRC"
    rm -rf "$SRC" && mkdir -p "$SRC"
    tar -C "$SRC" -xf "$LINUX_XZ"
    touch "$SRC/.extracted"
fi
TREE=$(find "$SRC" -mindepth 1 -maxdepth 1 -type d | head -1)
[ -d "$TREE" ] || die "no tree under $SRC"
log "warming the page cache with $TREE"
tar -C "$TREE" -cf - . | wc -c >/dev/null
LOGICAL=$(du -s -B1 --apparent-size "$TREE" | cut -f1)
ENTRIES=$(find "$TREE" | wc -l)

# size in bytes of a path as du -B1 -s counts it
alloc() { du -B1 -s "$1" | cut -f1; }
load1() { cut -d' ' -f1 /proc/loadavg; }
bytes_of() { # 128K / 1M -> bytes
    case "$1" in *K) echo $(( ${1%K} * 1024 )) ;; *M) echo $(( ${1%M} * 1048576 )) ;; *) echo "$1" ;; esac
}

# timed CMD...: sets WALL (s, 2 decimals) and CPU (user+sys s)
timed() {
    local t0 t1 tf
    tf=$(mktemp)
    t0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$tf" "$@" >/dev/null 2>"$tf.err" || { cat "$tf.err" >&2; rm -f "$tf" "$tf.err"; return 1; }
    t1=$(date +%s.%N)
    WALL=$(echo "$t1 - $t0" | bc -l)
    CPU=$(awk '{printf "%.2f", $1 + $2}' "$tf")
    rm -f "$tf" "$tf.err"
}

ROWS=()
# row NAME BYTES RATIO WALL CPU LOAD
row() { ROWS+=("$(printf '| %s | %s | %.1f | %s | %.2f | %.2f | %s |' "$1" "$2" "$(echo "$2/1000000" | bc -l)" "$3" "$4" "$5" "$6")"); }
ratio() { printf '%.3f' "$(echo "$1/$2" | bc -l)"; }
mb() { printf '%.2f' "$(echo "$1/1000000" | bc -l)"; }

echo "# rootdir.sh: $(date -u +%F\ %H:%M) UTC, $(nproc) cores, tree $TREE: $ENTRIES entries, $LOGICAL bytes"
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT+changes"
echo "# squeezefs: $($BIN --version) at commit $COMMIT ($BIN); $(mksquashfs -version 2>&1 | head -1); output to $OUT ($(df --output=fstype "$OUT" | tail -1))"

for level in $LEVELS; do
    for block in $BLOCKS; do
        b=$(bytes_of "$block")
        for round in $(seq "$ROUNDS"); do
            # mksquashfs
            img=$OUT/img.sqfs
            rm -f "$img"
            l=$(load1)
            log "mksquashfs zstd:$level -b $block (round $round, load $l)"
            timed sh -c "mksquashfs '$TREE' '$img' -comp zstd -Xcompression-level $level -b $block -no-progress -quiet -processors $JOBS && sync '$img'"
            sq_size=$(alloc "$img")
            sq_wall=$WALL
            row "mksquashfs zstd:$level -b $block" "$sq_size" 1 "$WALL" "$CPU" "$l"
            rm -f "$img"
            # squeezefs
            pool=$OUT/pool
            rm -rf "$pool"
            l=$(load1)
            log "squeezefs mkfs --rootdir zstd:$level --recordsize $block (round $round, load $l)"
            timed "$BIN" mkfs "$pool" --rootdir "$TREE" --compress "zstd:$level" --recordsize "$b" --jobs "$JOBS" -q "${SEAL_ARG[@]}"
            sz_size=$(alloc "$pool")
            data=$(alloc "$pool/data.0")
            store=meta.redb
            [ -e "$pool/meta.seal" ] && store=meta.seal
            meta=$(alloc "$pool/$store")
            row "squeezefs zstd:$level rs $block (data.0 $(mb "$data") MB, $store $(mb "$meta") MB; time $(ratio "$WALL" "$sq_wall")×)" \
                "$sz_size" "$(ratio "$sz_size" "$sq_size")" "$WALL" "$CPU" "$l"
            "$BIN" fsck "$pool" >/dev/null || die "fsck of the pool failed"
            [ "$KEEP" = 1 ] || rm -rf "$pool"
        done
    done
done

if [ "$BTRFS" = 1 ]; then
    img=$OUT/img.btrfs
    if mkfs.btrfs --help 2>&1 | grep -q -- '--compress'; then
        args=(--compress zstd:3); name="mkfs.btrfs --rootdir --compress zstd:3"
    else
        echo "# mkfs.btrfs $(mkfs.btrfs --version 2>&1 | head -1 | awk '{print $NF}'): no --compress (added in btrfs-progs 6.12); uncompressed --rootdir run instead"
        args=(); name="mkfs.btrfs --rootdir (no compression)"
    fi
    rm -f "$img"
    truncate -s $(( LOGICAL * 2 + (1 << 30) )) "$img"
    l=$(load1)
    log "$name (load $l)"
    timed sh -c "mkfs.btrfs -q -f ${args[*]} --rootdir '$TREE' --shrink '$img' && sync '$img'"
    bt_size=$(alloc "$img")
    row "$name" "$bt_size" "-" "$WALL" "$CPU" "$l"
    rm -f "$img"
fi

if [ "$MOUNTED" = 1 ]; then
    pool=$OUT/pool-mounted
    mnt=$OUT/mnt
    rm -rf "$pool" && mkdir -p "$mnt"
    "$BIN" mkfs "$pool" >/dev/null
    "$BIN" mount "$pool" "$mnt" -o compress=zstd:3
    l=$(load1)
    log "tar through the mount, compress=zstd:3 (load $l)"
    # the daemon's CPU is not in /usr/bin/time's figure: CPU is the tar pipeline's only
    timed sh -c "tar -C '$TREE' -cf - . | tar -C '$mnt' -xf - && '$BIN' umount '$mnt'"
    data=$(alloc "$pool/data.0")
    meta=$(alloc "$pool/meta.redb")
    row "squeezefs mount, tar xf, compress=zstd:3 (data.0 $((data / 1000000)) MB, meta.redb $((meta / 1000000)) MB)" \
        "$(alloc "$pool")" "-" "$WALL" "$CPU" "$l"
    "$BIN" fsck "$pool" >/dev/null || die "fsck of the mounted pool failed"
    [ "$KEEP" = 1 ] || rm -rf "$pool"
    rmdir "$mnt"
fi

echo
echo "| tool | bytes | MB | vs squashfs | wall s | CPU s | load |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
