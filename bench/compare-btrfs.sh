#!/usr/bin/env bash
# squeezefs vs kernel btrfs with the same compression spec, on the same disk, in one run.
#
# usage: bench/compare-btrfs.sh [--specs "none lz4 zstd:1 zstd:3 zstd:9"] [--parts a,b,c]
#            [--copies 4] [--read-rounds 3] [--zero-urandom-size 2G] [--quick] [--fs "btrfs squeezefs"]
#            [--uring on|off|auto]     # default: no uring= option (the mount's default)
#            [--verify full|light|none] [--workdir DIR] [--results DIR] [--stop-at HH:MM] [--perf]
#        bench/compare-btrfs.sh --report RESULTS_DIR      # print the tables of an earlier run
#
# Runs as root. Every (part, spec, filesystem) gets a freshly made filesystem:
#   btrfs     -- mkfs.btrfs on a loop device over a sparse file (default 8 GiB) in the work dir;
#   squeezefs -- `squeezefs mkfs` of a pool in the same work dir (same host filesystem and disk).
# Source data is staged first (outside all timings) on tmpfs when it fits, else in the work dir.
#
#  (a) corpus, mounted compress-force=SPEC: write COPIES copies of the corpus files
#      ($SQUEEZEFS_CORPUS, default ../shared/corpus next to the repo: *.zip, unzipped), then
#      sync and unmount -- the write time runs until the data is durable and the filesystem is
#      unmounted (squeezefs: until the daemon exited; FUSE has no syncfs, so `sync` alone does not
#      reach squeezefs' transaction group commit). Mount, drop caches, read every file (cat);
#      READ_ROUNDS times (--read-rounds, default 5; remount + drop caches each), the median counts.
#  (b) Linux source tarball (Debian linux-source-6.1, decompressed to .tar before timing),
#      mounted compress=SPEC: copy the tar in (+sync+unmount), extract it on the filesystem
#      (+sync+unmount), delete the tar, mount, drop caches, read the tree.
#  (c) SIZE bytes from a urandom file (generated before timing) and from /dev/zero, mounted
#      compress=SPEC, dd bs=1M + sync + unmount; CPU time of the writer, of kernel threads
#      (btrfs compresses in kworkers) and of the squeezefs daemon; `none` is always run as the
#      baseline for "CPU added".
#
# Ratios: logical bytes / data bytes on disk. btrfs: `compsize` is not in Debian bookworm, so
# bench/btrfs/btrfs_extents.py sums disk_num_bytes of distinct data extents (+ inline data) from
# `btrfs inspect-internal dump-tree` on the unmounted device, as compsize does. squeezefs: the
# totals of `squeezefs stats --json`. Cross-check ("all-in", metadata included): btrfs
# `filesystem usage` Used minus the fresh filesystem's; squeezefs `du` of the pool minus the
# fresh pool's.
#
# --perf samples the squeezefs daemon with `perf record -e cpu-clock` (software clock: this VM
# has no hardware counters) for every mount session and keeps the top symbols per session in
# the logs; it costs some throughput, so use it in a separate profiling run.
#
# Request transport: squeezefs mounts with its defaults unless --uring is given (then
# `uring=VALUE`); each squeezefs result records the transport its mounts reported in
# `user.squeezefs.mount` (`transport=`: io_uring or /dev/fuse and why), and the setup file
# records the kernel's enable_uring parameter at the start of the run (the default mount of
# root switches it from N to Y).
#
# Spec mapping: identical specs on both, except squeezefs `lz4` runs against btrfs `lzo`, and
# `none` mounts btrfs without a compress option.
#
# Environment: SQUEEZEFS_BIN (binary; default: $CARGO_TARGET_DIR/release, then target/release,
# else it is built), SQUEEZEFS_CORPUS, BENCH_WORKDIR (parent of the work dir, default /var/tmp),
# BENCH_SRCDIR (parent of the staging dir, default /dev/shm when it fits),
# BENCH_LOOP_SIZE (default 8G), BENCH_PHASE_TIMEOUT (seconds, default 1800).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=$REPO/bench/btrfs
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

SPECS="none lz4 zstd:1 zstd:3 zstd:9"
PARTS="a,b,c"
COPIES=4
READ_ROUNDS=5
ZU_SIZE=2G
FSES="btrfs squeezefs"
VERIFY=light
QUICK=0
PERF=0
RESULTS=""
URING=""
REPORT_ONLY=""
STOP_AT=""
CORPUS=${SQUEEZEFS_CORPUS:-$REPO/../shared/corpus}
WORKROOT=${BENCH_WORKDIR:-/var/tmp}
LOOP_SIZE=${BENCH_LOOP_SIZE:-8G}
PHASE_TIMEOUT=${BENCH_PHASE_TIMEOUT:-1800}
CACHE=/var/tmp/squeezefs-bench-cache
LINUX_XZ=/usr/src/linux-source-6.1.tar.xz

die() { echo "compare-btrfs: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
usage() { sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --specs) SPECS=${2:?--specs needs a list}; shift 2 ;;
        --parts) PARTS=${2:?--parts needs a list like a,b,c}; shift 2 ;;
        --copies) COPIES=${2:?--copies needs a number}; shift 2 ;;
        --read-rounds) READ_ROUNDS=${2:?--read-rounds needs a number}; shift 2 ;;
        --zero-urandom-size) ZU_SIZE=${2:?--zero-urandom-size needs a size like 2G}; shift 2 ;;
        --fs) FSES=${2:?--fs needs \"btrfs squeezefs\" or one of them}; shift 2 ;;
        --uring) URING=${2:?--uring needs on, off or auto}; shift 2 ;;
        --verify) VERIFY=${2:?--verify needs full, light or none}; shift 2 ;;
        --workdir) WORKROOT=${2:?}; shift 2 ;;
        --results) RESULTS=${2:?}; shift 2 ;;
        --stop-at) STOP_AT=${2:?--stop-at needs HH:MM (UTC)}; shift 2 ;;
        --report) REPORT_ONLY=${2:?--report needs a results dir}; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --perf) PERF=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'" ;;
    esac
done

[[ "$READ_ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--read-rounds must be a positive number, not '$READ_ROUNDS'"

if [ -n "$REPORT_ONLY" ]; then
    exec "$PY" "$LIB/report.py" "$REPORT_ONLY/results.jsonl"
fi

if [ "$QUICK" = 1 ]; then
    COPIES=1; ZU_SIZE=64M; SPECS="zstd:1"
fi

# ---- validate options -------------------------------------------------------------------------
PARTS=${PARTS//,/ }
for p in $PARTS; do
    case "$p" in a|b|c) ;; *) die "--parts: '$p' is not a part; accepted: a, b, c (comma separated)" ;; esac
done
case "$URING" in ""|on|off|auto) ;; *) die "--uring: '$URING' is not accepted; use on, off or auto" ;; esac
FSES=${FSES//,/ }
for f in $FSES; do
    case "$f" in btrfs|squeezefs) ;; *) die "--fs: '$f' is not accepted; use btrfs and/or squeezefs" ;; esac
done
for s in $SPECS; do
    case "$s" in
        none|lz4|zstd|zlib) ;;
        zstd:[1-9]|zstd:1[0-5]) ;;
        zlib:[1-9]) ;;
        *) die "--specs: '$s' has no btrfs equivalent; accepted: none, lz4 (vs btrfs lzo), zstd:1..15, zlib:1..9" ;;
    esac
done
case "$VERIFY" in full|light|none) ;; *) die "--verify: '$VERIFY'; accepted: full, light, none" ;; esac
[[ "$COPIES" =~ ^[1-9][0-9]*$ ]] || die "--copies: '$COPIES' is not a positive number"
ZU_BYTES=$(numfmt --from=iec "$ZU_SIZE" 2>/dev/null) || die "--zero-urandom-size: '$ZU_SIZE' is not a size (e.g. 64M, 2G)"
[ $((ZU_BYTES % 1048576)) = 0 ] && [ "$ZU_BYTES" -gt 0 ] || die "--zero-urandom-size must be a positive multiple of 1M"
ZU_MB=$((ZU_BYTES / 1048576))
[ -z "$STOP_AT" ] || [[ "$STOP_AT" =~ ^[0-2][0-9]:[0-5][0-9]$ ]] || die "--stop-at: '$STOP_AT' is not HH:MM"
[ "$(id -u)" = 0 ] || die "must run as root (loop devices, mounts, drop_caches)"
[ "$PERF" = 0 ] || command -v perf >/dev/null || die "--perf needs perf (Debian package linux-perf)"

# ---- packages ---------------------------------------------------------------------------------
need=()
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v xz >/dev/null || need+=(xz-utils)
command -v unzip >/dev/null || need+=(unzip)
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v getfattr >/dev/null || need+=(attr)
[ -x /usr/bin/time ] || need+=(time)
[[ " $PARTS " != *" b "* ]] || [ -e "$LINUX_XZ" ] || need+=(linux-source-6.1)
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

SQ=""
if [[ " $FSES " == *" squeezefs "* ]]; then
    for c in "${SQUEEZEFS_BIN:-}" "${CARGO_TARGET_DIR:-/nonexistent}/release/squeezefs" "$REPO/target/release/squeezefs"; do
        if [ -n "$c" ] && [ -x "$c" ]; then SQ=$c; break; fi
    done
    if [ -z "$SQ" ]; then
        log "building squeezefs (release)"
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
        (cd "$REPO" && cargo build --release -p squeezefs)
        SQ=${CARGO_TARGET_DIR:-$REPO/target}/release/squeezefs
    fi
    "$SQ" --version >/dev/null 2>&1 || die "$SQ does not run"
fi

# ---- work dir, results, cleanup ---------------------------------------------------------------
mkdir -p "$WORKROOT"
WORK=$(mktemp -d "$WORKROOT/squeezefs-bench.XXXXXX")
[ -n "$RESULTS" ] || RESULTS=/var/tmp/squeezefs-bench-results/compare-btrfs-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$RESULTS/logs"
: > "$RESULTS/results.jsonl"
SRC=""
echo "$0 $*" > "$RESULTS/command"
{ echo "specs=$SPECS parts=$PARTS copies=$COPIES size=$ZU_SIZE fs=$FSES verify=$VERIFY"
  echo "kernel=$(uname -r) cpus=$(nproc) btrfs-progs=$(btrfs --version 2>/dev/null)"
  echo "enable_uring at start=$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo absent) uring option=${URING:-default}"
  [ -z "$SQ" ] || echo "squeezefs=$SQ ($("$SQ" --version 2>&1)) git=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)"
} > "$RESULTS/setup"

# Unmount everything under $WORK (aborting a hung FUSE connection first), stop the daemons this
# script started (by pid), detach our loop devices. Idempotent: used per unit and at exit.
sweep() {
    local m pid dev minor
    for m in $(awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r); do
        if ! timeout 20 umount "$m" 2>/dev/null; then
            if [[ "$(awk -v m="$m" '$2 == m { print $3 }' /proc/mounts)" == fuse* ]]; then
                dev=$(mountpoint -d "$m" 2>/dev/null || true); minor=${dev#*:}
                [ -d /sys/fs/fuse/connections ] && ! mountpoint -q /sys/fs/fuse/connections \
                    && mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
                [ -n "$minor" ] && [ -e "/sys/fs/fuse/connections/$minor/abort" ] \
                    && echo 1 > "/sys/fs/fuse/connections/$minor/abort" || true
            fi
            umount -l "$m" 2>/dev/null || true
        fi
    done
    if [ -f "$WORK/pids" ]; then
        while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done < "$WORK/pids"
        sleep 1
        while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done < "$WORK/pids"
        : > "$WORK/pids"
    fi
    if [ -e "$WORK/btrfs.img" ]; then
        for dev in $(losetup -j "$WORK/btrfs.img" -O NAME -n 2>/dev/null); do losetup -d "$dev" 2>/dev/null || true; done
    fi
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    sweep
    rm -rf "$WORK"
    [ -z "$SRC" ] || rm -rf "$SRC"
    exit $rc
}
trap cleanup EXIT
trap 'echo "compare-btrfs: command failed at line $LINENO: $BASH_COMMAND" >&2' ERR
trap 'exit 130' INT TERM

now() { date +%s.%N; }
fsub() { "$PY" -c 'import sys; print(f"{float(sys.argv[1]) - float(sys.argv[2]):.3f}")' "$1" "$2"; }
emit() { "$PY" - "$@" >> "$RESULTS/results.jsonl" <<'EOF'
import json, sys
rec = {}
for kv in sys.argv[1:]:
    k, _, v = kv.partition("=")
    try:
        rec[k] = int(v)
    except ValueError:
        try:
            rec[k] = float(v)
        except ValueError:
            rec[k] = v
print(json.dumps(rec))
EOF
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
past_stop() {
    [ -n "$STOP_AT" ] || return 1
    [ "$(date -u +%H:%M)" \> "$STOP_AT" ] || [ "$(date -u +%H:%M)" = "$STOP_AT" ]
}

# ---- staging (outside every timing) -----------------------------------------------------------
need_bytes=$((64 * 1048576))
[[ " $PARTS " != *" b "* ]] || need_bytes=$((need_bytes + (QUICK ? 200 : 1500) * 1048576))
[[ " $PARTS " != *" c "* ]] || need_bytes=$((need_bytes + ZU_BYTES))
shm=${BENCH_SRCDIR:-/dev/shm}
if [ -d "$shm" ] && [ "$(df -B1 --output=avail "$shm" | tail -1)" -gt $((need_bytes + 2147483648)) ]; then
    SRC=$(mktemp -d "$shm/squeezefs-bench-src.XXXXXX")
else
    SRC=$WORK/src; mkdir -p "$SRC"
fi
log "work dir $WORK, staging in $SRC, results in $RESULTS"

CORPUS_BYTES=0
if [[ " $PARTS " == *" a "* ]]; then
    ls "$CORPUS"/*.zip >/dev/null 2>&1 \
        || die "no corpus zips in $CORPUS (set SQUEEZEFS_CORPUS to the directory holding the Silesia *.zip files)"
    mkdir -p "$SRC/corpus"
    for z in "$CORPUS"/*.zip; do unzip -q -o "$z" -d "$SRC/corpus"; done
    CORPUS_BYTES=$(find "$SRC/corpus" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
    log "corpus: $(find "$SRC/corpus" -type f | wc -l) files, $CORPUS_BYTES bytes"
fi
TAR_BYTES=0; TREE_BYTES=0; TREE_ENTRIES=0
if [[ " $PARTS " == *" b "* ]]; then
    [ -e "$LINUX_XZ" ] || die "$LINUX_XZ is missing (apt-get install linux-source-6.1)"
    mkdir -p "$CACHE"
    if [ ! -s "$CACHE/linux-source-6.1.tar" ] || [ "$LINUX_XZ" -nt "$CACHE/linux-source-6.1.tar" ]; then
        log "decompressing $LINUX_XZ into $CACHE (once)"
        xz -dc -T0 "$LINUX_XZ" > "$CACHE/linux-source-6.1.tar.tmp"
        mv "$CACHE/linux-source-6.1.tar.tmp" "$CACHE/linux-source-6.1.tar"
    fi
    if [ "$QUICK" = 1 ]; then
        # a small but tree-shaped subset: kernel/ and lib/ (~2.5k files)
        if [ ! -s "$CACHE/linux-quick.tar" ]; then
            q=$(mktemp -d "$WORK/q.XXXX")
            tar -xf "$CACHE/linux-source-6.1.tar" -C "$q" linux-source-6.1/kernel linux-source-6.1/lib
            tar -cf "$CACHE/linux-quick.tar" -C "$q" linux-source-6.1
            rm -rf "$q"
        fi
        cp "$CACHE/linux-quick.tar" "$SRC/linux.tar"
    else
        cp "$CACHE/linux-source-6.1.tar" "$SRC/linux.tar"
    fi
    TAR_BYTES=$(stat -c %s "$SRC/linux.tar")
    read -r TREE_BYTES TREE_ENTRIES TREE_TOP < <("$PY" -c '
import sys, tarfile
n = s = 0
top = None
with tarfile.open(sys.argv[1]) as t:
    for m in t:
        n += 1
        top = top or m.name.split("/")[0]
        if m.isreg():
            s += m.size
print(s, n, top)' "$SRC/linux.tar")
    log "linux tar: $TAR_BYTES bytes, $TREE_ENTRIES entries, $TREE_BYTES bytes in regular files"
fi
if [[ " $PARTS " == *" c "* ]]; then
    log "generating $ZU_SIZE of urandom data"
    head -c "$ZU_BYTES" /dev/urandom > "$SRC/urandom.bin"
fi

# ---- one filesystem under test ----------------------------------------------------------------
# Globals of a unit (set in its subshell): FS SPEC MODE TAG MNT LOOPDEV POOL TPID DPID SAMPLER
# TRANSPORTS (the distinct request transports its squeezefs mounts reported)
# and the results of the last phase / usage measurement (PH_*, U_*).
MNT_OPTS() {  # mount options for FS / SPEC / MODE (compress or compress-force)
    if [ "$FS" = btrfs ]; then
        case "$SPEC" in none) echo "" ;; lz4) echo "$MODE=lzo" ;; *) echo "$MODE=$SPEC" ;; esac
    else
        # uring=: only when asked (--uring); the default mount picks its transport itself
        case "$SPEC" in none) echo "compress=none${URING:+,uring=$URING}" ;; *) echo "$MODE=$SPEC${URING:+,uring=$URING}" ;; esac
    fi
}

fs_make() {
    if [ "$FS" = btrfs ]; then
        rm -f "$WORK/btrfs.img"
        truncate -s "$LOOP_SIZE" "$WORK/btrfs.img"
        LOOPDEV=$(losetup -f --show "$WORK/btrfs.img")
        mkfs.btrfs -q -f "$LOOPDEV" > /dev/null
    else
        rm -rf "$WORK/pool"
        "$SQ" mkfs "$WORK/pool" >> "$ULOG" 2>&1 || die "squeezefs mkfs $WORK/pool failed (see $ULOG)"
        BASE_DU=$(du -sB1 "$WORK/pool" | cut -f1)
    fi
    mkdir -p "$MNT"
}

MOUNTS=0
fs_mount() {
    local opts; opts=$(MNT_OPTS)
    MOUNTS=$((MOUNTS + 1))
    if [ "$FS" = btrfs ]; then
        mount -t btrfs ${opts:+-o "$opts"} "$LOOPDEV" "$MNT"
        return
    fi
    DTIME=$RESULTS/logs/$TAG.daemon$MOUNTS.time
    THREADS=$RESULTS/logs/$TAG.daemon$MOUNTS.threads.json
    /usr/bin/time -f '%U %S %M' -o "$DTIME" "$SQ" mount "$WORK/pool" "$MNT" ${opts:+-o "$opts"} --foreground \
        >> "$RESULTS/logs/$TAG.daemon.log" 2>&1 &
    TPID=$!
    local i
    for i in $(seq 1 600); do
        mountpoint -q "$MNT" && break
        kill -0 "$TPID" 2>/dev/null || die "squeezefs mount exited before mounting (see $RESULTS/logs/$TAG.daemon.log)"
        sleep 0.1
    done
    mountpoint -q "$MNT" || die "squeezefs mount did not mount within 60 s"
    DPID=$(pgrep -P "$TPID" | head -1)
    [ -n "$DPID" ] || die "cannot find the squeezefs daemon (child of $TPID)"
    echo "$DPID" >> "$WORK/pids"
    # the request transport this mount got (io_uring, or /dev/fuse and why)
    local t; t=$(getfattr --only-values -n user.squeezefs.mount "$MNT" 2>/dev/null | sed -n 's/^transport=//p')
    echo "mount $MOUNTS: transport=${t:-unknown}" >> "$ULOG"
    t=${t%%;*}
    [[ " ${TRANSPORTS:-} " == *"[$t]"* ]] || TRANSPORTS="${TRANSPORTS:+$TRANSPORTS }[$t]"
    PERFPID=""
    if [ "$PERF" = 1 ]; then
        perf record -q -e cpu-clock -F 499 -p "$DPID" -o "$RESULTS/logs/$TAG.daemon$MOUNTS.perf.data" \
            > /dev/null 2>&1 &
        PERFPID=$!
    fi
    # per-thread CPU split of the daemon, refreshed every second until it exits
    ( while kill -0 "$DPID" 2>/dev/null; do
          "$PY" "$LIB/cpu_snapshot.py" threads "$DPID" > "$THREADS.tmp" 2>/dev/null && [ -s "$THREADS.tmp" ] \
              && [ "$(cat "$THREADS.tmp")" != "{}" ] && mv "$THREADS.tmp" "$THREADS"
          sleep 1
      done; rm -f "$THREADS.tmp" ) &
    SAMPLER=$!
}

# Unmount; for squeezefs wait until the daemon has flushed and exited (bounded), and set
# DAEMON_TOTAL (its user+sys seconds over the whole mount session).
fs_umount() { fs_umount_core; fs_session_done; }
fs_umount_core() {
    if [ "$FS" = btrfs ]; then
        umount "$MNT"
        return
    fi
    "$SQ" umount "$MNT" >> "$ULOG" 2>&1 || fusermount3 -u "$MNT" >> "$ULOG" 2>&1 \
        || die "neither 'squeezefs umount' nor fusermount3 -u could unmount $MNT"
    # watchdog against a daemon that never exits (its sleep dies with it when it is cancelled;
    # cancelled before `sp` is set, the trap finds no sleep: hence `${sp:-}` under set -u, and
    # the subshell's own messages are of no interest)
    ( trap 'kill "${sp:-}" 2>/dev/null; exit 0' TERM; sleep "$PHASE_TIMEOUT" & sp=$!; wait "$sp"; kill -TERM "$DPID" 2>/dev/null ) 2>/dev/null &
    local wd=$!
    local rc=0
    wait "$TPID" || rc=$?
    kill "$wd" 2>/dev/null || true; wait "$wd" 2>/dev/null || true
    [ "$rc" = 0 ] || die "squeezefs daemon exited with status $rc after unmount (see $RESULTS/logs/$TAG.daemon.log)"
    DAEMON_TOTAL=$(awk '{print $1 + $2}' "$DTIME")
    DAEMON_MAXRSS_KB=$(awk '{print $3}' "$DTIME")
    DPID=""
}
# After the clock stopped: end the thread sampler (it sleeps between samples) and perf.
fs_session_done() {
    [ "$FS" = squeezefs ] || return 0
    kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true
    if [ -n "${PERFPID:-}" ]; then
        wait "$PERFPID" 2>/dev/null || true
        perf report -i "$RESULTS/logs/$TAG.daemon$MOUNTS.perf.data" --stdio --no-children --sort comm,dso,sym 2>/dev/null \
            | grep -v '^#' | grep -v '^$' | head -40 > "$RESULTS/logs/$TAG.daemon$MOUNTS.perf.txt" || true
        rm -f "$RESULTS/logs/$TAG.daemon$MOUNTS.perf.data"
    fi
}

# run_phase NAME UMOUNT(yes|no) CMD... : run CMD (which ends with its own sync), optionally
# unmount, and set PH_WALL (to unmounted), PH_SYNC (to end of CMD), PH_WRITER (user+sys of CMD
# and its children), PH_KTHREADS, PH_SYSTEM (machine busy), PH_DAEMON (squeezefs daemon).
run_phase() {
    local name=$1 um=$2; shift 2
    local a=$WORK/snap.a b=$WORK/snap.b tf=$WORK/phase.time d0=0
    echo "$name" > "$WORK/step"
    [ "$FS" = squeezefs ] && d0=$("$PY" "$LIB/cpu_snapshot.py" pid "$DPID")
    "$PY" "$LIB/cpu_snapshot.py" snap "$a"
    local t0 t1 t2 rc=0
    t0=$(now)
    timeout "$PHASE_TIMEOUT" /usr/bin/time -f '%U %S' -o "$tf" "$@" >> "$ULOG" 2>&1 || rc=$?
    t1=$(now)
    [ "$rc" = 0 ] || die "phase $name failed with status $rc$([ "$rc" = 124 ] && echo " (timed out after $PHASE_TIMEOUT s: hang?)")"
    PH_DAEMON=""
    if [ "$um" = yes ]; then
        fs_umount_core
        t2=$(now)
        fs_session_done
        [ "$FS" = squeezefs ] && PH_DAEMON=$(fsub "$DAEMON_TOTAL" "$d0")
    else
        t2=$t1
        [ "$FS" = squeezefs ] && PH_DAEMON=$(fsub "$("$PY" "$LIB/cpu_snapshot.py" pid "$DPID")" "$d0")
    fi
    "$PY" "$LIB/cpu_snapshot.py" snap "$b"
    PH_WALL=$(fsub "$t2" "$t0"); PH_SYNC=$(fsub "$t1" "$t0")
    PH_WRITER=$(awk '{print $1 + $2}' "$tf")
    read -r PH_KTHREADS PH_SYSTEM < <("$PY" -c '
import json, subprocess, sys
d = json.loads(subprocess.check_output([sys.executable, sys.argv[1], "delta", sys.argv[2], sys.argv[3]]))
print(d["kthreads_s"], d["system_s"])' "$LIB/cpu_snapshot.py" "$a" "$b")
    log "  $TAG $name: ${PH_WALL}s (to sync ${PH_SYNC}s) writer ${PH_WRITER}s kthreads ${PH_KTHREADS}s${PH_DAEMON:+ daemon ${PH_DAEMON}s}"
}

# Space used, measured unmounted (call right after a phase that unmounted): btrfs data extents
# from dump-tree; squeezefs pool du. Sets U_DISK/U_UNCOMP/U_REF (btrfs) or U_POOL (squeezefs).
usage_unmounted() {
    if [ "$FS" = btrfs ]; then
        blockdev --flushbufs "$LOOPDEV"
        local j; j=$("$PY" "$LIB/btrfs_extents.py" "$LOOPDEV")
        echo "$j" > "$RESULTS/logs/$TAG.extents.$1.json"
        read -r U_DISK U_UNCOMP U_REF < <("$PY" -c 'import json,sys; t=json.loads(sys.argv[1])["total"]; print(t["disk"], t["uncompressed"], t["referenced"])' "$j")
    else
        U_POOL=$(du -sB1 "$WORK/pool" | cut -f1)
    fi
}
# Space used, measured mounted: btrfs all-in Used; squeezefs `stats --json` totals.
usage_mounted() {
    if [ "$FS" = btrfs ]; then
        U_ALLIN=$(( $(btrfs_used) - BASE_USED ))
    else
        U_ALLIN=$((U_POOL - BASE_DU))
        "$SQ" stats "$MNT" --json > "$RESULTS/logs/$TAG.stats.$1.json" 2>> "$ULOG" \
            || die "squeezefs stats $MNT --json failed"
        read -r U_DISK U_UNCOMP U_REF < <("$PY" "$LIB/squeezefs_stats.py" "$RESULTS/logs/$TAG.stats.$1.json")
    fi
}
btrfs_used() { btrfs filesystem usage -b "$MNT" | awk '$1 == "Used:" { print $2; exit }'; }
base_usage() { [ "$FS" = btrfs ] && BASE_USED=$(btrfs_used) || true; }

verify_note() { VERIFIED=$1; [ "$1" = ok ] || log "  $TAG VERIFY FAILED: $2"; }

# ---- the parts --------------------------------------------------------------------------------
unit_a() {
    MODE=compress-force
    fs_make; fs_mount; base_usage
    local logical=$((COPIES * CORPUS_BYTES))
    run_phase write yes bash -c 'for i in $(seq 1 "$1"); do cp -r "$2" "$3/copy$i"; done; sync -f "$3"' \
        _ "$COPIES" "$SRC/corpus" "$MNT"
    local w_wall=$PH_WALL w_sync=$PH_SYNC w_writer=$PH_WRITER w_kt=$PH_KTHREADS w_daemon=$PH_DAEMON
    usage_unmounted write; fs_mount; usage_mounted write
    # the cold read takes 0.1–0.3 s here, so one run swings by ±25%: READ_ROUNDS cold reads
    # (remount + drop caches before each), the median counts
    local r reads=() rdaemon=()
    for r in $(seq 1 "$READ_ROUNDS"); do
        if [ "$r" -gt 1 ]; then fs_umount; fs_mount; fi
        drop_caches
        run_phase read no bash -c 'find "$1" -type f -print0 | xargs -0 cat > /dev/null' _ "$MNT"
        reads+=("$PH_WALL"); rdaemon+=("$PH_DAEMON")
    done
    local read_med read_daemon
    read -r read_med read_daemon < <("$PY" -c 'import sys
n = len(sys.argv) // 2
walls, cpus = sys.argv[1:1 + n], sys.argv[1 + n:]
i = sorted(range(n), key=lambda k: float(walls[k]))[n // 2]
print(walls[i], cpus[i])' "${reads[@]}" "${rdaemon[@]}")
    log "  $TAG cold reads: ${reads[*]} s (median $read_med s)"
    VERIFIED=skipped
    if [ "$VERIFY" != none ]; then
        echo verify > "$WORK/step"
        local i bad=""
        for i in $(seq 1 "$COPIES"); do timeout 180 diff -rq "$SRC/corpus" "$MNT/copy$i" >> "$ULOG" 2>&1 || bad="$bad copy$i"; done
        [ -z "$bad" ] && verify_note ok || verify_note FAIL "content differs in$bad"
    fi
    emit part=a fs="$FS" spec="$SPEC" opts="$(MNT_OPTS)" transport="${TRANSPORTS:-}" logical="$logical" \
        write_s="$w_wall" write_sync_s="$w_sync" write_writer_cpu="$w_writer" write_kthreads_cpu="$w_kt" \
        write_daemon_cpu="$w_daemon" read_s="$read_med" read_daemon_cpu="$read_daemon" read_rounds_s="${reads[*]}" \
        disk="$U_DISK" uncompressed="$U_UNCOMP" referenced="$U_REF" allin="$U_ALLIN" verified="$VERIFIED"
    fs_umount
}

unit_b() {
    MODE=compress
    fs_make; fs_mount; base_usage
    run_phase copy yes bash -c 'cp "$1" "$2/linux.tar"; sync -f "$2"' _ "$SRC/linux.tar" "$MNT"
    local c_wall=$PH_WALL c_sync=$PH_SYNC c_daemon=$PH_DAEMON
    usage_unmounted tar; fs_mount; usage_mounted tar
    local tar_disk=$U_DISK tar_allin=$U_ALLIN
    drop_caches
    run_phase extract yes bash -c 'tar -xf "$1/linux.tar" -C "$1"; sync -f "$1"' _ "$MNT"
    local x_wall=$PH_WALL x_sync=$PH_SYNC x_writer=$PH_WRITER x_daemon=$PH_DAEMON
    fs_mount
    run_phase delete yes bash -c 'rm "$1/linux.tar"; sync -f "$1"' _ "$MNT"
    local d_wall=$PH_WALL
    usage_unmounted tree; fs_mount; usage_mounted tree
    drop_caches
    run_phase read no bash -c 'find "$1" -type f -print0 | xargs -0 cat > /dev/null' _ "$MNT"
    local r_wall=$PH_WALL r_daemon=$PH_DAEMON
    VERIFIED=skipped
    if [ "$VERIFY" != none ]; then
        echo verify > "$WORK/step"
        local members=("$TREE_TOP")
        [ "$VERIFY" = light ] && [ "$QUICK" = 0 ] && members=("$TREE_TOP/kernel" "$TREE_TOP/fs/btrfs" "$TREE_TOP/Documentation/filesystems")
        local out; out=$(timeout 300 tar --compare -f "$SRC/linux.tar" -C "$MNT" "${members[@]}" 2>&1 || true)
        echo "$out" | head -50 >> "$ULOG"
        local bad; bad=$(echo "$out" | grep -c -E 'Contents differ|Size differs|No such file|Not a|Symlink differs|Warning: Cannot' || true)
        local meta; meta=$(echo "$out" | grep -c -E 'Mod time differs|Mode differs|Uid differs|Gid differs' || true)
        [ "$bad" = 0 ] && verify_note ok || verify_note FAIL "$bad entries differ in content/type (tar --compare, see $ULOG)"
        [ "$meta" = 0 ] || log "  $TAG note: $meta metadata differences (mtime/mode/owner) in tar --compare"
    fi
    emit part=b fs="$FS" spec="$SPEC" opts="$(MNT_OPTS)" transport="${TRANSPORTS:-}" tar_logical="$TAR_BYTES" tree_logical="$TREE_BYTES" \
        entries="$TREE_ENTRIES" tar_disk="$tar_disk" tar_allin="$tar_allin" tree_disk="$U_DISK" tree_allin="$U_ALLIN" \
        copy_s="$c_wall" copy_sync_s="$c_sync" extract_s="$x_wall" extract_sync_s="$x_sync" delete_s="$d_wall" \
        read_s="$r_wall" copy_daemon_cpu="$c_daemon" extract_daemon_cpu="$x_daemon" extract_writer_cpu="$x_writer" \
        read_daemon_cpu="$r_daemon" verified="$VERIFIED"
    fs_umount
}

unit_c() {
    MODE=compress
    local data
    for data in urandom zero; do
        fs_make; fs_mount; base_usage
        local src=/dev/zero
        [ "$data" = urandom ] && src=$SRC/urandom.bin
        run_phase "write-$data" yes bash -c 'dd if="$1" of="$2/$3" bs=1M count="$4" iflag=fullblock status=none; sync -f "$2"' \
            _ "$src" "$MNT" "$data.bin" "$ZU_MB"
        local wall=$PH_WALL sync_s=$PH_SYNC writer=$PH_WRITER kt=$PH_KTHREADS sys=$PH_SYSTEM daemon=$PH_DAEMON
        usage_unmounted "$data"; fs_mount; usage_mounted "$data"
        VERIFIED=skipped
        if [ "$VERIFY" != none ]; then
            echo verify > "$WORK/step"
            drop_caches
            local n=$ZU_BYTES  # light: the first 256 MiB
            [ "$VERIFY" = light ] && [ "$n" -gt 268435456 ] && n=268435456
            if [ "$data" = urandom ]; then timeout 180 cmp -n "$n" "$SRC/urandom.bin" "$MNT/$data.bin" >> "$ULOG" 2>&1
            else timeout 180 cmp -n "$n" /dev/zero "$MNT/$data.bin" >> "$ULOG" 2>&1; fi \
                && verify_note ok || verify_note FAIL "$data.bin differs from its source"
            [ "$(stat -c %s "$MNT/$data.bin")" = "$ZU_BYTES" ] || verify_note FAIL "$data.bin has the wrong size"
        fi
        emit part=c fs="$FS" spec="$SPEC" opts="$(MNT_OPTS)" transport="${TRANSPORTS:-}" data="$data" logical="$ZU_BYTES" \
            write_s="$wall" write_sync_s="$sync_s" writer_cpu="$writer" kthreads_cpu="$kt" system_cpu="$sys" \
            daemon_cpu="$daemon" disk="$U_DISK" uncompressed="$U_UNCOMP" allin="$U_ALLIN" verified="$VERIFIED"
        fs_umount
        if [ "$FS" = btrfs ]; then losetup -d "$LOOPDEV"; fi
    done
}

run_unit() {  # part spec fs
    local part=$1 spec=$2 fs=$3 rc=0
    TAG=$part-$fs-${spec//:/}
    ULOG=$RESULTS/logs/$TAG.log
    log "($part) $fs $spec"
    (
        FS=$fs SPEC=$spec MNT=$WORK/mnt-$fs DPID="" LOOPDEV="" TRANSPORTS=""
        trap 'sweep; rm -rf "$WORK/pool" "$WORK/btrfs.img"' EXIT
        "unit_$part"
    ) || rc=$?
    if [ "$rc" != 0 ]; then
        local step; step=$(cat "$WORK/step" 2>/dev/null || echo setup)
        log "($part) $fs $spec FAILED in step '$step' (status $rc); logs: $ULOG, $RESULTS/logs/$TAG.daemon.log"
        emit part="$part" fs="$fs" spec="$spec" failed="$step" status="$rc"
    fi
    rm -f "$WORK/step"
}

for part in $PARTS; do
    specs=$SPECS
    [ "$part" != c ] || [[ " $specs " == *" none "* ]] || specs="none $specs"
    for spec in $specs; do
        for fs in $FSES; do
            if past_stop; then log "stop time $STOP_AT reached: skipping ($part) $fs $spec"; emit part="$part" fs="$fs" spec="$spec" skipped=stop-at; continue; fi
            run_unit "$part" "$spec" "$fs"
        done
    done
done

"$PY" "$LIB/report.py" "$RESULTS/results.jsonl" | tee "$RESULTS/report.md"
log "results: $RESULTS"
