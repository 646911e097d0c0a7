#!/usr/bin/env bash
# A/B of two squeezefs binaries over one FUSE request transport (run as root: mounts).
#
#   bash bench/ab-transport.sh BIN_A BIN_B      env: URING=off ROUNDS=6 TAR=… WORKDIR=/var/tmp
#                                               WORKLOADS="extract write read"
#
# A and B take turns (A B A B …), ROUNDS times each, on three workloads, each on a fresh
# pool mounted with compress=zstd:1,uring=$URING: `tar -x` of TAR and umount (the final
# flush included); a 1 GiB write (the first GiB of TAR) with fsync and umount; a read of
# that file after a remount. TAR defaults to the Linux 6.1 source of Debian's
# linux-source-6.1, else a tar of /usr/include. The daemon runs in the foreground as a
# child of the round, so `cpu s` is client + daemon. Prints a row per round, then per
# workload the medians and the median of the per-round ratio A/B (the machine is shared:
# compare ratios, not absolute times).
set -euo pipefail
if [ "${1:-}" = --round ]; then
    # one round: --round BIN WORKLOAD DIR TAR URING
    BIN=$2 W=$3 D=$4 TAR=$5 URING=$6
    mnt() {
        "$BIN" mount "$D/pool" "$D/mnt" -o "compress=zstd:1,uring=$URING" --foreground 2>/dev/null &
        DPID=$!
        for _ in $(seq 1000); do mountpoint -q "$D/mnt" && return; sleep 0.01; done
        echo "ab-transport: mount timed out" >&2
        exit 1
    }
    case $W in
        extract) mnt; tar -xf "$TAR" -C "$D/mnt" ;;
        write) mnt; head -c 1G "$TAR" | dd of="$D/mnt/big" bs=1M iflag=fullblock conv=fsync status=none ;;
        read) mnt; dd if="$D/mnt/big" of=/dev/null bs=1M status=none ;;
    esac
    "$BIN" umount "$D/mnt"
    wait "$DPID"
    exit 0
fi
[ $# -eq 2 ] || { sed -n '2,14p' "$0"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "ab-transport: must run as root" >&2; exit 1; }
URING=${URING:-off}; ROUNDS=${ROUNDS:-6}
if [ -z "${TAR:-}" ]; then
    W0=$(mktemp -d "${WORKDIR:-/var/tmp}/sqz-abt-tar.XXXXXX")
    TAR=$W0/src.tar
    if [ -r /usr/src/linux-source-6.1.tar.xz ]; then
        xz -dc /usr/src/linux-source-6.1.tar.xz > "$TAR"
    else
        tar -cf "$TAR" -C /usr include
    fi
fi
W=$(mktemp -d "${WORKDIR:-/var/tmp}/sqz-abt.XXXXXX")
trap 'umount "$W"/*/mnt 2>/dev/null || true; rm -rf "$W" ${W0:+"$W0"}' EXIT
echo "ab-transport: uring=$URING, $ROUNDS rounds, $(basename "$TAR") ($(du -h "$TAR" | cut -f1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "A = $1"
echo "B = $2"
printf '%-8s %-5s %-2s %8s %8s\n' workload round ab "wall s" "cpu s"
for w in ${WORKLOADS:-extract write read}; do
    for r in $(seq 1 "$ROUNDS"); do
        for ab in A B; do
            bin=$1; [ $ab = B ] && bin=$2
            d=$W/$ab
            if [ $w != read ]; then
                rm -rf "$d"; mkdir -p "$d/mnt"; "$bin" mkfs "$d/pool" >/dev/null
            fi
            # the read rounds read what this binary's last write round wrote
            /usr/bin/time -f '%e %U %S' -o "$W/time" bash "$0" --round "$bin" $w "$d" "$TAR" "$URING"
            read -r wall user sys < "$W/time"
            printf '%-8s %-5s %-2s %8.2f %8.2f\n' $w "$r" $ab "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')"
        done
    done
done | tee "$W/rows"
python3 - "$W/rows" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"{'workload':<8} {'A wall':>7} {'B wall':>7} {'A/B wall':>9} {'A cpu':>7} {'B cpu':>7} {'A/B cpu':>8}")
for w in ("extract", "write", "read"):
    r = [x for x in rows if x[0] == w]
    if not r:
        continue
    get = lambda ab, col: [float(x[col]) for x in r if x[2] == ab]
    aw, bw, ac, bc = get("A", 3), get("B", 3), get("A", 4), get("B", 4)
    rw = statistics.median(a / b for a, b in zip(aw, bw))
    rc = statistics.median(a / b for a, b in zip(ac, bc))
    med = statistics.median
    print(f"{w:<8} {med(aw):7.2f} {med(bw):7.2f} {rw:9.3f} {med(ac):7.2f} {med(bc):7.2f} {rc:8.3f}")
EOF
