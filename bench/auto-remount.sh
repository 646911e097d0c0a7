#!/usr/bin/env bash
# compress=auto on a pool that has written before (issue 49 item 2: a mount starts where the
# pool's last write ended) against a fresh pool, none and lz4, on an unthrottled loop device.
#
#   bash bench/auto-remount.sh [--size 1G] [--rounds 3] [--cores N]    (root)
#   env: SQUEEZEFS_BIN (default target/release/squeezefs), WORK (default /var/tmp),
#        CORPUS (default ../shared/corpus: zips of Silesia files)
#
# Cells, in alternating rounds, each on a fresh pool over a loop device (direct I/O, a file
# in WORK): `none`, `lz4`, `auto` (fresh), `auto-remount` (SIZE written and fsynced, the pool
# unmounted and mounted again, then the measured write). The measured write is SIZE of the
# corpus repeated, `dd bs=1M conv=fsync` into one file after the page cache is dropped and
# the data read once; its rate and its own ratio (stored / logical, `squeezefs stats --json`
# of that file). --cores N runs the daemon under `taskset` on the first N CPUs. Prints every
# run, then medians per cell and each against none.
set -euo pipefail
SIZE=1G; ROUNDS=3; CORES=""
while [ $# -gt 0 ]; do
    case $1 in
        --size) SIZE=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --cores) CORES=$2; shift 2 ;;
        *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
SQ=${SQUEEZEFS_BIN:-$HERE/../target/release/squeezefs}
CORPUS=${CORPUS:-$HERE/../../shared/corpus}
[ -x "$SQ" ] || { echo "no squeezefs binary at $SQ (cargo build --release, or SQUEEZEFS_BIN=...)" >&2; exit 2; }
ls "$CORPUS"/*.zip >/dev/null 2>&1 || { echo "no corpus zips in $CORPUS (CORPUS=...)" >&2; exit 2; }
for t in jq unzip losetup numfmt taskset; do command -v $t >/dev/null || { echo "needs $t" >&2; exit 2; }; done
BYTES=$(numfmt --from=iec "$SIZE")
W=$(mktemp -d "${WORK:-/var/tmp}/sqz-remount.XXXXXX")
LOOP=""
cleanup() {
    umount "$W/mnt" 2>/dev/null || true
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/c" "$W/mnt"
for z in "$CORPUS"/*.zip; do unzip -q -o "$z" -d "$W/c"; done
python3 - "$W/c" "$W/data" "$BYTES" <<'PY'
import os, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
blobs = [open(os.path.join(src, f), "rb").read() for f in sorted(os.listdir(src))]
with open(out, "wb") as o:
    while n > 0:
        for b in blobs:
            o.write(b[:n]); n -= min(len(b), n)
            if n == 0:
                break
PY
truncate -s $((BYTES * 3 + (1 << 30))) "$W/img"
LOOP=$(losetup -f --show --direct-io=on "$W/img")
pin=(); [ -n "$CORES" ] && pin=(taskset -c "0-$((CORES - 1))")
mnt() { "${pin[@]}" "$SQ" mount "$W/pool" "$W/mnt" -o "compress=$1"; }
write() {
    sync; echo 3 > /proc/sys/vm/drop_caches; cat "$W/data" > /dev/null
    local t0 t1; t0=$(date +%s.%N)
    dd if="$W/data" of="$W/mnt/$1" bs=1M conv=fsync status=none
    t1=$(date +%s.%N)
    python3 -c "print('%.1f' % ($BYTES / 1e6 / ($t1 - $t0)))"
}
: > "$W/runs"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    for cell in none lz4 auto auto-remount; do
        rm -rf "$W/pool"
        "$SQ" mkfs "$W/pool" --device "$LOOP" --force >/dev/null
        mnt "${cell%-remount}"
        if [ "$cell" = auto-remount ]; then
            write warm >/dev/null
            "$SQ" umount "$W/mnt"
            mnt auto
        fi
        mbs=$(write f)
        ratio=$("$SQ" stats --json "$W/mnt/f" | jq '[.rows[].disk_bytes] | add / '"$BYTES")
        echo "$cell $mbs $ratio" >> "$W/runs"
        printf 'round %s: %-13s %8s MB/s  stored/logical %.3f\n' "$r" "$cell" "$mbs" "$ratio"
        "$SQ" umount "$W/mnt"
    done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/runs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {c: (statistics.median(float(r[1]) for r in rows if r[0] == c),
           statistics.median(float(r[2]) for r in rows if r[0] == c)) for c in dict.fromkeys(r[0] for r in rows)}
print("| cell | MB/s | ÷ none | stored / logical |")
print("|---|---|---|---|")
for c, (mbs, ratio) in med.items():
    print(f"| {c} | {mbs:.0f} | {mbs / med['none'][0]:.2f} | {ratio:.3f} |")
PY
