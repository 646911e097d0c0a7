#!/usr/bin/env bash
# Memory bound of the squeezefs daemon: write a file FACTOR (default 20) times larger than the
# configured dirty cache + decompressed-record (read) cache, read it back cold, and sample the
# daemon's VmRSS / VmHWM (/proc/PID/status) all along. Reports peak RSS against
# caches + constant (the idle RSS right after mount, plus what is left over).
#
# usage: bench/memory.sh [--spec zstd:3] [--factor 20] [--dirty BYTES] [--read-cache BYTES]
#                        [-o EXTRA_MOUNT_OPTS] [--workdir DIR]
#
# The cache sizes default to the engine's built-in defaults, read from
# crates/pipeline/src/options.rs (OpenOptions::default: max_dirty_bytes, record_cache_bytes).
# If the mount accepts options for them, pass both the option (-o) and the sizes (--dirty,
# --read-cache) so the file size and the report follow. Data: the Silesia corpus files
# ($SQUEEZEFS_CORPUS, default ../shared/corpus) concatenated and repeated, so records really
# get compressed (zeros would become holes, random data would be stored raw); without the
# corpus, a tar of /usr/lib is used instead.
# Environment: SQUEEZEFS_BIN, SQUEEZEFS_CORPUS, BENCH_WORKDIR (default /var/tmp).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
SPEC=zstd:3
FACTOR=20
DIRTY=""
RCACHE=""
EXTRA=""
WORKROOT=${BENCH_WORKDIR:-/var/tmp}
CORPUS=${SQUEEZEFS_CORPUS:-$REPO/../shared/corpus}

die() { echo "memory.sh: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --spec) SPEC=${2:?}; shift 2 ;;
        --factor) FACTOR=${2:?}; shift 2 ;;
        --dirty) DIRTY=$(numfmt --from=iec "${2:?}") || die "--dirty: '$2' is not a size"; shift 2 ;;
        --read-cache) RCACHE=$(numfmt --from=iec "${2:?}") || die "--read-cache: '$2' is not a size"; shift 2 ;;
        -o) EXTRA=${2:?}; shift 2 ;;
        --workdir) WORKROOT=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ "$FACTOR" =~ ^[1-9][0-9]*$ ]] || die "--factor: '$FACTOR' is not a positive number"
[ "$(id -u)" = 0 ] || die "must run as root (FUSE mount, drop_caches)"
command -v fusermount3 >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null; }

# Engine defaults, read from the source so this script follows the code.
read -r DEF_DIRTY DEF_RCACHE < <("$PY" - "$REPO/crates/pipeline/src/options.rs" <<'EOF'
import re, sys
src = open(sys.argv[1]).read()
body = src[src.index("impl Default for OpenOptions"):]
def val(name):
    m = re.search(name + r"\s*:\s*([0-9_ *]+),", body)
    if not m:
        return "?"
    expr = m.group(1).replace("_", "")
    if not re.fullmatch(r"[0-9 *]+", expr):
        return "?"
    r = 1
    for f in expr.split("*"):
        r *= int(f)
    return r
print(val("max_dirty_bytes"), val("record_cache_bytes"))
EOF
)
[ -n "$DIRTY" ] || DIRTY=$DEF_DIRTY
[ -n "$RCACHE" ] || RCACHE=$DEF_RCACHE
[[ "$DIRTY" =~ ^[0-9]+$ && "$RCACHE" =~ ^[0-9]+$ ]] \
    || die "could not read the cache defaults from crates/pipeline/src/options.rs; pass --dirty and --read-cache"
CACHES=$((DIRTY + RCACHE))
SIZE_MB=$(( (FACTOR * CACHES + 1048575) / 1048576 ))

SQ=""
for c in "${SQUEEZEFS_BIN:-}" "${CARGO_TARGET_DIR:-/nonexistent}/release/squeezefs" "$REPO/target/release/squeezefs"; do
    if [ -n "$c" ] && [ -x "$c" ]; then SQ=$c; break; fi
done
if [ -z "$SQ" ]; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    (cd "$REPO" && cargo build --release -p squeezefs)
    SQ=${CARGO_TARGET_DIR:-$REPO/target}/release/squeezefs
fi

WORK=$(mktemp -d "$WORKROOT/squeezefs-memory.XXXXXX")
MNT=$WORK/mnt; POOL=$WORK/pool; mkdir -p "$MNT"
DPID=""; TPID=""; SAMPLER=""; CHUNK=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ -z "$SAMPLER" ] || kill "$SAMPLER" 2>/dev/null || true
    if mountpoint -q "$MNT"; then "$SQ" umount "$MNT" 2>/dev/null || fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" || true; fi
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        sleep 2; kill -TERM "$DPID" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$DPID" 2>/dev/null || true   # a daemon stuck in the read deadlock ignores TERM
    fi
    [ -z "$TPID" ] || wait "$TPID" 2>/dev/null || true
    rm -rf "$WORK"
    [ -z "$CHUNK" ] || rm -f "$CHUNK" "$CHUNK.one"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Source chunk (tmpfs): corpus files concatenated, repeated to >= 64 MiB.
CHUNK=$(mktemp /dev/shm/squeezefs-memory-chunk.XXXXXX)
if ls "$CORPUS"/*.zip >/dev/null 2>&1; then
    for z in "$CORPUS"/*.zip; do unzip -p "$z"; done > "$CHUNK.one"
    DATA="Silesia corpus files ($(ls "$CORPUS"/*.zip | xargs -n1 basename | tr '\n' ' '))"
else
    tar -cf - -C /usr lib 2>/dev/null | head -c $((64 * 1048576)) > "$CHUNK.one" || true
    DATA="a tar of /usr/lib (corpus not found at $CORPUS)"
fi
while [ "$(stat -c %s "$CHUNK")" -lt $((64 * 1048576)) ]; do cat "$CHUNK.one" >> "$CHUNK"; done
rm -f "$CHUNK.one"

log "caches: dirty $DIRTY + read $RCACHE = $CACHES bytes; writing ${SIZE_MB} MiB of $DATA with $SPEC"
"$SQ" mkfs "$POOL" > "$WORK/mkfs.log" 2>&1 || { cat "$WORK/mkfs.log"; die "mkfs failed"; }
OPTS="compress=$SPEC${EXTRA:+,$EXTRA}"
"$SQ" mount "$POOL" "$MNT" -o "$OPTS" --foreground > "$WORK/daemon.log" 2>&1 &
TPID=$!
for _ in $(seq 1 300); do mountpoint -q "$MNT" && break; kill -0 "$TPID" 2>/dev/null || break; sleep 0.1; done
mountpoint -q "$MNT" || { cat "$WORK/daemon.log"; die "mount failed"; }
DPID=$TPID
sleep 1
IDLE_KB=$(awk '/^VmRSS:/ {print $2}' "/proc/$DPID/status")

SAMPLES=$WORK/rss.tsv
( phase=write
  while kill -0 "$DPID" 2>/dev/null; do
      [ -f "$WORK/phase" ] && phase=$(cat "$WORK/phase")
      awk -v p="$phase" '/^VmRSS:/ {r = $2} /^VmHWM:/ {h = $2} END {print p "\t" r "\t" h}' "/proc/$DPID/status" 2>/dev/null
      sleep 0.2
  done > "$SAMPLES" ) &
SAMPLER=$!

echo write > "$WORK/phase"
t0=$(date +%s.%N)
N=$(( (SIZE_MB * 1048576 + $(stat -c %s "$CHUNK") - 1) / $(stat -c %s "$CHUNK") ))
# (the producer stops with SIGPIPE once dd has its count: `|| break` keeps pipefail quiet)
{ for _ in $(seq 1 "$N"); do cat "$CHUNK" 2>/dev/null || break; done; } \
    | dd of="$MNT/big" bs=1M count="$SIZE_MB" iflag=fullblock status=none
sync -f "$MNT"
t1=$(date +%s.%N)
echo read > "$WORK/phase"
sync; echo 3 > /proc/sys/vm/drop_caches
READ_OK=1
# bounded: a read that stalls (see /work/notes/bugs-h5.md, read deadlock) is reported, not waited for
timeout 600 cat "$MNT/big" > /dev/null || { READ_OK=0; log "cold read did not finish within 600 s (hang?)"; }
t2=$(date +%s.%N)
if [ "$READ_OK" = 0 ]; then
    kill "$SAMPLER" 2>/dev/null || true
    awk '{ if ($3 > h) h = $3 } END { printf "peak VmHWM so far: %.1f MiB (write phase complete, read phase stalled)\n", h / 1024 }' "$SAMPLES"
    exit 1
fi
echo umount > "$WORK/phase"
STATS=$("$SQ" stats "$MNT" 2>&1 || true)
"$SQ" umount "$MNT" || fusermount3 -u "$MNT"
wait "$TPID" || die "daemon exited with an error after unmount (see $WORK/daemon.log)"
DPID=""; TPID=""
wait "$SAMPLER" 2>/dev/null || true; SAMPLER=""

"$PY" - "$SAMPLES" "$IDLE_KB" "$DIRTY" "$RCACHE" "$SIZE_MB" "$t0" "$t1" "$t2" <<'EOF'
import sys
path, idle_kb, dirty, rcache, size_mb, t0, t1, t2 = sys.argv[1:]
idle, dirty, rcache = int(idle_kb) * 1024, int(dirty), int(rcache)
peak = {}
hwm = 0
for line in open(path):
    p = line.rstrip("\n").split("\t")
    if len(p) != 3 or not p[1]:
        continue
    rss, h = int(p[1]) * 1024, int(p[2]) * 1024
    peak[p[0]] = max(peak.get(p[0], 0), rss)
    hwm = max(hwm, h)
M = 1048576
caches = dirty + rcache
print(f"file: {size_mb} MiB = {int(size_mb) * M / caches:.1f}x caches; "
      f"write+sync {float(t1) - float(t0):.1f} s, cold read {float(t2) - float(t1):.1f} s")
print("| quantity | MiB |")
print("|---|---|")
print(f"| dirty cache (configured) | {dirty / M:.0f} |")
print(f"| read (record) cache (configured) | {rcache / M:.0f} |")
print(f"| idle RSS after mount (constant part) | {idle / M:.1f} |")
for ph in ("write", "read", "umount"):
    if ph in peak:
        print(f"| peak VmRSS during {ph} | {peak[ph] / M:.1f} |")
print(f"| VmHWM (peak over the whole mount) | {hwm / M:.1f} |")
print(f"| VmHWM - caches - idle (unexplained) | {(hwm - caches - idle) / M:.1f} |")
verdict = "within" if hwm <= caches + idle + 64 * M else "ABOVE"
print(f"\npeak {hwm / M:.0f} MiB is {verdict} caches + idle RSS + 64 MiB slack "
      f"({(caches + idle) / M + 64:.0f} MiB)")
EOF
echo
echo "$STATS" | head -20
