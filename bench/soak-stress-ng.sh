#!/usr/bin/env bash
# Soak test: stress-ng's filesystem stressors on a squeezefs mount, each for a bounded time,
# then unmount, `squeezefs fsck` the pool, and report per stressor: exit status, bogo ops,
# whether the daemon survived.
#
# usage: bench/soak-stress-ng.sh [--timeout 15] [--spec zstd:1] [--stressors "hdd dir ..."]
#                                [--workers 2] [--workdir DIR]
#
# --timeout is per stressor (seconds). stress-ng exit codes: 0 passed, 2 a stressor failed
# (e.g. --verify found bad data), 3 not enough resources / not supported here, 4 not
# implemented, others: error. A stressor that runs into an unsupported operation (EOPNOTSUPP,
# e.g. fiemap) is reported as such, not as a failure of the soak.
# Environment: SQUEEZEFS_BIN, BENCH_WORKDIR (default /var/tmp).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TIMEOUT=15
SPEC=zstd:1
WORKERS=2
STRESSORS="hdd dir dirdeep dirmany link symlink rename dentry fallocate fpunch seek xattr mmap iomix
filename chmod chown utime fstat getdent copy-file flock lockf touch sync-file readahead revio fsize open access"
WORKROOT=${BENCH_WORKDIR:-/var/tmp}

die() { echo "soak-stress-ng: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) TIMEOUT=${2:?}; shift 2 ;;
        --spec) SPEC=${2:?}; shift 2 ;;
        --stressors) STRESSORS=${2:?}; shift 2 ;;
        --workers) WORKERS=${2:?}; shift 2 ;;
        --workdir) WORKROOT=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "--timeout: '$TIMEOUT' is not a positive number of seconds"
[[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || die "--workers: '$WORKERS' is not a positive number"
[ "$(id -u)" = 0 ] || die "must run as root (FUSE mount)"
need=()
command -v stress-ng >/dev/null || need+=(stress-ng)
command -v fusermount3 >/dev/null || need+=(fuse3)
if [ ${#need[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

SQ=""
for c in "${SQUEEZEFS_BIN:-}" "${CARGO_TARGET_DIR:-/nonexistent}/release/squeezefs" "$REPO/target/release/squeezefs"; do
    if [ -n "$c" ] && [ -x "$c" ]; then SQ=$c; break; fi
done
if [ -z "$SQ" ]; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    (cd "$REPO" && cargo build --release -p squeezefs)
    SQ=${CARGO_TARGET_DIR:-$REPO/target}/release/squeezefs
fi

WORK=$(mktemp -d "$WORKROOT/squeezefs-soak.XXXXXX")
OUT=/var/tmp/squeezefs-bench-results/soak-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"
MNT=$WORK/mnt; POOL=$WORK/pool; mkdir -p "$MNT"
DPID=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if mountpoint -q "$MNT"; then
        timeout 60 "$SQ" umount "$MNT" 2>/dev/null || fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" || true
    fi
    if [ -n "$DPID" ]; then
        for _ in $(seq 1 30); do kill -0 "$DPID" 2>/dev/null || break; sleep 1; done
        kill -TERM "$DPID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_daemon() {
    "$SQ" mount "$POOL" "$MNT" -o "compress=$SPEC" --foreground >> "$OUT/daemon.log" 2>&1 &
    DPID=$!
    for _ in $(seq 1 300); do mountpoint -q "$MNT" && return 0; kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
    die "squeezefs mount failed (see $OUT/daemon.log)"
}

"$SQ" mkfs "$POOL" > "$OUT/mkfs.log" 2>&1 || die "mkfs failed (see $OUT/mkfs.log)"
start_daemon
log "squeezefs $SPEC on $MNT; $WORKERS worker(s) per stressor, ${TIMEOUT}s each; logs in $OUT"

printf '| stressor | exit | result | bogo ops | daemon |\n|---|---|---|---|---|\n' > "$OUT/table.md"
failures=0
for s in $STRESSORS; do
    extra=()
    case "$s" in
        hdd) extra=(--hdd-bytes 64M --verify) ;;
        mmap) extra=(--mmap-file --verify) ;;
        fallocate) extra=(--fallocate-bytes 64M) ;;
        seek) extra=(--seek-size 64M) ;;
        iomix) extra=(--iomix-bytes 64M) ;;
    esac
    dir=$MNT/$s; mkdir -p "$dir"
    rc=0
    timeout $((TIMEOUT * 4 + 60)) stress-ng --temp-path "$dir" "--$s" "$WORKERS" "${extra[@]}" \
        --timeout "${TIMEOUT}s" --metrics-brief > "$OUT/$s.log" 2>&1 || rc=$?
    bogo=$(awk -v s="$s" '$2 == "metrc:" && $4 == s && $5 ~ /^[0-9]+$/ { print $5; exit }' "$OUT/$s.log")
    alive=alive
    kill -0 "$DPID" 2>/dev/null && mountpoint -q "$MNT" || alive=DEAD
    case "$rc" in
        0) res=passed ;;
        3) res="not supported / no resources" ;;
        4) res="not implemented" ;;
        124) res="HUNG (killed after $((TIMEOUT * 4 + 60)) s)" ;;
        *) res=FAILED ;;
    esac
    if [ "$rc" = 2 ] && grep -q -i -E 'not supported|ENOTSUP|EOPNOTSUPP|ENOSYS' "$OUT/$s.log"; then
        res="failed on an unsupported operation"
    fi
    case "$res" in FAILED|HUNG*) failures=$((failures + 1)) ;; esac
    [ "$alive" = alive ] || failures=$((failures + 1))
    printf '| %s | %s | %s | %s | %s |\n' "$s" "$rc" "$res" "${bogo:-—}" "$alive" | tee -a "$OUT/table.md"
    rm -rf "$dir" 2>/dev/null || true
    if [ "$alive" = DEAD ]; then
        log "daemon died during $s: remounting to continue (see $OUT/daemon.log)"
        umount -l "$MNT" 2>/dev/null || true
        start_daemon
    fi
done

log "unmounting and checking the pool"
"$SQ" umount "$MNT" || fusermount3 -u "$MNT"
for _ in $(seq 1 600); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.5; done
kill -0 "$DPID" 2>/dev/null && die "daemon still running 5 minutes after umount (hang)"
wait "$DPID" || log "daemon exit status $? (see $OUT/daemon.log)"
DPID=""
fsck_rc=0
"$SQ" fsck "$POOL" > "$OUT/fsck.log" 2>&1 || fsck_rc=$?
echo
cat "$OUT/table.md"
echo
echo "fsck exit status $fsck_rc:"; tail -20 "$OUT/fsck.log"
echo "logs: $OUT"
[ "$fsck_rc" = 0 ] && [ "$failures" = 0 ]
