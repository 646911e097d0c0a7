#!/usr/bin/env bash
# A mounted pool whose data is a device file against one whose data is a loop device over a
# file on the same filesystem (/var/tmp), and optionally a device file written by another
# squeezefs binary (--baseline BIN, e.g. one that writes device files through the page cache).
#
#   bench/pool-file-vs-device.sh [--rounds R] [--specs "none lz4 zstd:1"] [--data FILE]
#                                [--baseline BIN]                    (root: losetup, mount)
# Per round and spec, alternating: mkfs (default file device, or --device LOOP), mount with
# compress=SPEC, drop caches, read FILE once, `dd bs=1M conv=fsync` it into the mount; prints
# MB/s and the daemon's CPU seconds. FILE defaults to the auto-eval corpus sample
# (/var/tmp/sqz-auto-eval-data/medium-1G.bin, made by bench/auto-eval.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=2 SPECS="none lz4 zstd:1" DATA=/var/tmp/sqz-auto-eval-data/medium-1G.bin BASE=
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --specs) SPECS=${2:?}; shift 2 ;;
        --data) DATA=${2:?}; shift 2 ;;
        --baseline) BASE=${2:?}; shift 2 ;;
        *) echo "pool-file-vs-device: unknown argument '$1'; accepted: --rounds R --specs \"S...\" --data FILE --baseline BIN" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "pool-file-vs-device: needs root" >&2; exit 1; }
[ -z "$BASE" ] || [ -x "$BASE" ] || { echo "pool-file-vs-device: --baseline $BASE is not an executable" >&2; exit 1; }
[ -r "$DATA" ] || { echo "pool-file-vs-device: no data file $DATA (run bench/auto-eval.sh once, or --data FILE)" >&2; exit 1; }
cargo build --locked --release -q -p squeezefs --bin squeezefs
SQ=$(pwd)/target/release/squeezefs
KINDS="file loop${BASE:+ file@base}"
W=$(mktemp -d /var/tmp/sqz-fvd.XXXXXX)
M=$(mktemp -d /tmp/sqz-fvd-mnt.XXXXXX)
L=
cleanup() {
    mountpoint -q "$M" && "$SQ" umount "$M" || true
    [ -n "$L" ] && losetup -d "$L" 2>/dev/null || true
    rm -rf "$W"; rmdir "$M" 2>/dev/null || true
}
trap cleanup EXIT
BYTES=$(stat -c %s "$DATA")
echo "| round | spec | pool data on | MB/s | daemon CPU s |"
echo "|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
    for spec in $SPECS; do
        for kind in $KINDS; do
            rm -rf "$W/pool" "$W/img"
            bin=$SQ
            [ "$kind" = file@base ] && bin=$BASE
            if [ $kind = loop ]; then
                truncate -s $((BYTES * 3)) "$W/img"
                L=$(losetup -f --show "$W/img")
                "$bin" mkfs "$W/pool" --device "$L" >/dev/null
            else
                "$bin" mkfs "$W/pool" >/dev/null
            fi
            "$bin" mount "$W/pool" "$M" -o "compress=$spec"
            sync; echo 3 > /proc/sys/vm/drop_caches
            cat "$DATA" > /dev/null
            t0=$(date +%s.%N)
            dd if="$DATA" of="$M/f" bs=1M conv=fsync status=none
            t1=$(date +%s.%N)
            pid=$(pgrep -f " mount $W/pool " | head -1)
            cpu=$(awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$pid/stat")
            "$bin" umount "$M"
            if [ $kind = loop ]; then losetup -d "$L"; L=; fi
            python3 -c "print(f'| $r | $spec | $kind | {$BYTES / 1e6 / ($t1 - $t0):.0f} | $cpu |')"
        done
    done
done
