#!/usr/bin/env bash
# Cold-read A/B of squeezefs binaries on one pool (run as root: mounts, drop_caches).
#
#   bash bench/ab-coldread.sh BIN_A BIN_B [BIN…]      env: SPEC=none COPIES=8 ROUNDS=6 CORPUS=…
#
# Writes COPIES copies of the Silesia corpus files (CORPUS: directory of the *.zip files,
# default ../shared/corpus) into one pool with compress-force=$SPEC using the first binary,
# then, ROUNDS times, for each binary in turn: mount, drop caches, `cat` every file, umount.
# Prints MB/s per round; compare the medians. The binaries must share the pool's format.
# Single reads of 0.1–0.3 s swing by a quarter on a shared machine: use 10+ rounds.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,11p' "$0"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "ab-coldread: must run as root" >&2; exit 1; }
SPEC=${SPEC:-none}; COPIES=${COPIES:-8}; ROUNDS=${ROUNDS:-6}
CORPUS=${CORPUS:-$(cd "$(dirname "$0")/.." && pwd)/../shared/corpus}
ls "$CORPUS"/*.zip >/dev/null 2>&1 || { echo "ab-coldread: no corpus zips in $CORPUS" >&2; exit 1; }
W=$(mktemp -d /var/tmp/sqz-abc.XXXXXX)
cleanup() { for b in "$@"; do "$b" umount "$W/mnt" 2>/dev/null || true; done; rm -rf "$W"; }
trap 'cleanup "$@"' EXIT
mkdir -p "$W/mnt" "$W/src"
for z in "$CORPUS"/*.zip; do unzip -qo "$z" -d "$W/src"; done
MB=$(du -sb "$W/src" | awk -v c="$COPIES" '{print $1 * c / 1e6}')
"$1" mkfs "$W/pool" >/dev/null
"$1" mount "$W/pool" "$W/mnt" -o "compress-force=$SPEC"
for c in $(seq 1 "$COPIES"); do mkdir "$W/mnt/c$c"; cp "$W/src"/* "$W/mnt/c$c/"; done
"$1" umount "$W/mnt"
for r in $(seq 1 "$ROUNDS"); do
    for b in "$@"; do
        "$b" mount "$W/pool" "$W/mnt" -o "compress-force=$SPEC"
        sync; echo 3 > /proc/sys/vm/drop_caches
        t0=$(date +%s.%N); cat "$W/mnt"/c*/* > /dev/null; t1=$(date +%s.%N)
        "$b" umount "$W/mnt"
        python3 -c "import sys; print(f'{sys.argv[1]}  round {sys.argv[2]}  {float(sys.argv[3]) / (float(sys.argv[5]) - float(sys.argv[4])):.0f} MB/s')" "$b" "$r" "$MB" "$t0" "$t1"
    done
done
