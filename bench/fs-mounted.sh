#!/usr/bin/env bash
# The mounted filesystem against ext4 in the same run: streaming write (+fsync), cold
# read, and a metadata-heavy tree (untar, stat everything, delete), on squeezefs with
# several compress= settings and on a plain directory of the host ext4 (/var/tmp).
#
#   bench/fs-mounted.sh [WORKDIR] [SPECS]        (root; SPECS default "none lz4 zstd:1 zstd:3")
#
# Data: the Silesia corpus files ($SQUEEZEFS_CORPUS or ../shared/corpus) concatenated 2x if
# present, else 256 MiB of generated text; the tree is a tar of /usr/share/doc and
# /usr/share/man (whatever this machine has; the same tar for every target).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${1:-$(mktemp -d /var/tmp/sqz-fs-mounted.XXXXXX)}
SPECS=${2:-"none lz4 zstd:1 zstd:3"}
CORPUS=${SQUEEZEFS_CORPUS:-$ROOT/../shared/corpus}
mkdir -p "$WORK"
cargo build --locked --release -q -p squeezefs
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/squeezefs

DATA=$WORK/data.bin
if [ ! -s "$DATA" ]; then
    if ls "$CORPUS"/*.zip >/dev/null 2>&1 && command -v unzip >/dev/null; then
        mkdir -p "$WORK/corpus"
        for z in "$CORPUS"/*.zip; do unzip -qo "$z" -d "$WORK/corpus"; done
        for _ in 1 2; do find "$WORK/corpus" -type f | sort | xargs cat; done > "$DATA"
    else
        echo "fs-mounted: no corpus in $CORPUS; using generated text" >&2
        seq 1 40000000 | head -c 268435456 > "$DATA"
    fi
fi
TREE=$WORK/tree.tar
[ -s "$TREE" ] || tar -C /usr -cf "$TREE" share/doc share/man 2>/dev/null || true
MB=$(( $(stat -c %s "$DATA") / 1048576 ))
FILES=$(tar -tf "$TREE" | wc -l)

secs() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

run_target() { # DIR LABEL
    local d=$1 label=$2 w r x s del
    drop
    w=$(secs sh -c "cp '$DATA' '$d/data' && sync -f '$d/data' && sync '$d/data'")
    drop
    r=$(secs sh -c "cat '$d/data' > /dev/null")
    mkdir "$d/tree"
    x=$(secs sh -c "tar -C '$d/tree' -xf '$TREE' && sync -f '$d/tree'")
    drop
    s=$(secs sh -c "find '$d/tree' -printf '%s %m\n' > /dev/null")
    del=$(secs rm -rf "$d/tree")
    printf '%-12s %8.0f %8.0f %8.2f %8.2f %8.2f\n' "$label" "$(echo "$MB / $w" | bc -l)" \
        "$(echo "$MB / $r" | bc -l)" "$x" "$s" "$del"
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg); data ${MB} MiB; tree ${FILES} entries"
printf '%-12s %8s %8s %8s %8s %8s\n' target "write" "read" untar "stat-all" "rm -rf"
printf '%-12s %8s %8s %8s %8s %8s\n' "" "MB/s" "MB/s" s s s
mkdir -p "$WORK/ext4"
run_target "$WORK/ext4" ext4
rm -rf "$WORK/ext4"
for spec in $SPECS; do
    rm -rf "$WORK/pool" "$WORK/mnt"; mkdir -p "$WORK/mnt"
    "$BIN" mkfs "$WORK/pool" >/dev/null
    "$BIN" mount "$WORK/pool" "$WORK/mnt" -o "compress-force=$spec"
    run_target "$WORK/mnt" "sqz $spec"
    "$BIN" stats "$WORK/mnt" | sed -n 4p | sed "s/^/    stats $spec: /"
    "$BIN" umount "$WORK/mnt"
done
rm -rf "$WORK/pool" "$WORK/mnt"
