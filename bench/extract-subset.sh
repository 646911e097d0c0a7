#!/usr/bin/env bash
# Metadata-heavy extract, squeezefs against kernel btrfs in the same run, alternating.
#
#   bench/extract-subset.sh [--rounds N] [--specs "none zstd:3"] [--uring on|off|auto]  # default: no uring= option
#   bench/extract-subset.sh --vs-one-meta-copy [--rounds N] [--specs ...]
#
# Extracts linux-source-6.1/{fs,net,include} (10 368 entries, 121 MB; the part of the Linux
# tarball that compare-btrfs.sh (b) spends most of its extract time on) from /dev/shm into a
# fresh squeezefs pool and a fresh btrfs (loop device over a sparse file), same disk, same
# compression spec (lz4 ↔ btrfs lzo), N rounds alternating, and prints each time and the
# squeezefs/btrfs ratio of the medians. Times run until the data is durable and unmounted.
# --vs-one-meta-copy: the other side is not btrfs but squeezefs with `mkfs --meta-copies 1`,
# so the ratio is what the default second metadata copy costs (issue 52).
# Runs as root. Needs the Linux tarball: Debian linux-source-6.1 (installed if missing).
# Environment: SQUEEZEFS_BIN (default: built release binary), BENCH_WORKDIR (default /var/tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
ROUNDS=3
SPECS="none zstd:3"
URING=""
VS=btrfs
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --specs) SPECS=$2; shift 2 ;;
        --uring) URING=$2; shift 2 ;;
        --vs-one-meta-copy) VS=one-copy; shift ;;
        *) echo "extract-subset: unknown argument '$1' (accepted: --rounds N, --specs \"SPEC...\", --uring on|off|auto, --vs-one-meta-copy)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "extract-subset: run as root (loop devices, mounts)" >&2; exit 1; }
need=()
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
[ -e /usr/src/linux-source-6.1.tar.xz ] || need+=(linux-source-6.1)
if [ ${#need[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
BIN=${SQUEEZEFS_BIN:-}
if [ -z "$BIN" ]; then
    cargo build --release --locked -q -p squeezefs
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/squeezefs
fi
CACHE=/var/tmp/squeezefs-bench-cache
mkdir -p "$CACHE"
if [ ! -s "$CACHE/linux-subset.tar" ]; then
    t=$(mktemp -d /dev/shm/sqz-subset.XXXXXX)
    xz -dc -T0 /usr/src/linux-source-6.1.tar.xz | tar -x -C "$t" linux-source-6.1/fs linux-source-6.1/net linux-source-6.1/include
    tar -cf "$CACHE/linux-subset.tar.tmp" -C "$t" linux-source-6.1
    mv "$CACHE/linux-subset.tar.tmp" "$CACHE/linux-subset.tar"
    rm -rf "$t"
fi
SRC=$(mktemp /dev/shm/sqz-subset.XXXXXX.tar)
cp "$CACHE/linux-subset.tar" "$SRC"
W=$(mktemp -d "${BENCH_WORKDIR:-/var/tmp}/sqz-extract.XXXXXX")
LOOP=
cleanup() {
    mountpoint -q "$W/mnt" && { "$BIN" umount "$W/mnt" 2>/dev/null || umount "$W/mnt" 2>/dev/null || true; }
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    rm -rf "$W" "$SRC"
}
trap cleanup EXIT
mkdir -p "$W/mnt"
now() { date +%s.%N; }

run_btrfs() { # spec → seconds
    local opt=() spec=$1
    case "$spec" in none) ;; lz4) opt=(-o compress=lzo) ;; *) opt=(-o "compress=$spec") ;; esac
    truncate -s 8G "$W/btrfs.img"
    LOOP=$(losetup --find --show "$W/btrfs.img")
    mkfs.btrfs -q -f "$LOOP" >/dev/null
    mount "${opt[@]}" "$LOOP" "$W/mnt"
    local t0 t1
    t0=$(now)
    tar -xf "$SRC" -C "$W/mnt"
    sync -f "$W/mnt"
    umount "$W/mnt"
    t1=$(now)
    losetup -d "$LOOP"; LOOP=
    rm -f "$W/btrfs.img"
    echo "$t1 - $t0" | bc
}

run_squeezefs() { # spec [mkfs args...] → seconds
    local spec=$1
    shift
    rm -rf "$W/pool"
    "$BIN" mkfs "$W/pool" "$@" >/dev/null
    "$BIN" mount "$W/pool" "$W/mnt" -o "compress=$spec${URING:+,uring=$URING}"
    local t0 t1
    t0=$(now)
    tar -xf "$SRC" -C "$W/mnt"
    "$BIN" umount "$W/mnt" # flushes the last txg and waits for the daemon to exit
    t1=$(now)
    rm -rf "$W/pool"
    echo "$t1 - $t0" | bc
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "load: $(cut -d' ' -f1-3 /proc/loadavg); squeezefs: $BIN; uring=${URING:-default}; $ROUNDS rounds"
run_other() { # spec → seconds
    case "$VS" in
        btrfs) run_btrfs "$1" ;;
        one-copy) run_squeezefs "$1" --meta-copies 1 ;;
    esac
}

if [ "$VS" = btrfs ]; then
    echo "| spec | btrfs s (rounds) | squeezefs s (rounds) | sq/btrfs (medians) |"
else
    echo "| spec | one meta copy s (rounds) | two (default) s (rounds) | two/one (medians) |"
fi
echo "|---|---|---|---|"
for spec in $SPECS; do
    b=() s=()
    for _ in $(seq "$ROUNDS"); do
        b+=("$(run_other "$spec")")
        s+=("$(run_squeezefs "$spec")")
    done
    mb=$(echo "${b[*]}" | median)
    ms=$(echo "${s[*]}" | median)
    printf '| %s | %s | %s | **%.2f** |\n' "$spec" "$(printf '%.2f ' "${b[@]}")" "$(printf '%.2f ' "${s[@]}")" "$(echo "$ms / $mb" | bc -l)"
done
