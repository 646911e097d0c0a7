#!/usr/bin/env bash
# compress=auto against every fixed level on a real, write-limited block device (issue 23,
# DESIGN §5). Root only: it sets up a loop device, its write limit (the cgroup-v1 blkio
# throttle of the root cgroup, or a paced FUSE file under it) and FUSE mounts.
#
# usage: bench/auto-eval.sh [MODE] [options]
#   MODE (default matrix):
#     matrix           every (data set, cores, device limit) cell, every spec
#     hog              a CPU hog (stress-ng --cpu 1 pinned on core 0) while the corpus is
#                      written with auto and none, unthrottled and at 100 MB/s
#     change           one file whose data changes mid-stream (text → random → text), with
#                      auto and none at 100 MB/s, auto traced
#     verify-throttle  does the limit hold for the ways squeezefs writes? dd (buffered +
#                      fdatasync, and O_DIRECT) to the loop device and a squeezefs `none`
#                      mount, per limit, against the bytes the device took (--device picks
#                      the throttle or the paced device)
#   --limits L,..    device write limits in MB/s (10^6 B/s) or `unthrottled`
#                    (default 25,50,100,200,400,unthrottled)
#   --specs S,..     compression specs (default none,lz4,lz4fast-20,zstd:-5,zstd:1,zstd:3,
#                    zstd:9,zlib:6,auto); SPEC~NAME=V+NAME=V runs SPEC with those auto
#                    tunables (the daemon's SQUEEZEFS_AUTO_TUNE), e.g. auto~explore_reach=1
#   --datasets D,..  medium (Silesia corpus), random (/dev/urandom), xml (the corpus xml,
#                    highly compressible), change (medium → random → medium in one file)
#   --cores C,..     cores the daemon may use: 1 (taskset -c 0) or 2 (default 1,2)
#   --size SIZE      bytes written per run, e.g. 256M, 1G (default 1G)
#   --runs N         runs per spec and cell; specs alternate within a cell, the order
#                    rotating each round (default 1); the report takes medians
#   --trace          auto runs mount with trace=FILE and are plotted with `squeezefs plot`
#                    (skipped with a note while the mount option does not exist)
#   --plot-size WxH  size of those plots (default the plot command's, 1600x1200; 1000x750
#                    for docs/img)
#   --hog            a CPU hog on core 0 during every run (the hog mode sets it)
#   --device KIND    how the loop device's writes are limited (default loop):
#                    loop      (or throttle) its backing file in --backing (default
#                              /var/tmp, the host disk), limit `unthrottled` or
#                              the cgroup-v1 blkio throttle: a token bucket that passes
#                              writes at the host disk's speed while they arrive below the
#                              limit, so the device's rate shows only while it is saturated
#                    paced     its backing file is the `dev` of bench/paced-device (a FUSE
#                              server: every write completes size ÷ limit after the one
#                              before, idle or not, as on a disk), its data in --backing
#                              (default /dev/shm: the host disk's writeback stays out)
#   --backing DIR    directory of the device's data
#   --out DIR        results directory (default /var/tmp/squeezefs-bench-results/auto-eval-TIME)
#   --keep-data      keep the generated data sets (in /var/tmp/sqz-auto-eval-data) for the next run
#   --baseline BIN   another squeezefs binary (e.g. main's): every auto spec S also runs with it,
#                    as spec S@base, alternating with the others in the same cells (an A/B of
#                    two builds under the same load)
#   RUST_LOG=...     passed to the daemon; with --trace the daemon log of every auto run is
#                    kept next to its trace (RUST_LOG=squeezefs_pipeline=debug: auto's inputs
#                    twice a second)
#
# Every run: fresh pool (`squeezefs mkfs POOL --device /dev/loopN`: the pool's metadata store
# on the host filesystem, its data on the loop device; the loop device is discarded first so
# its backing file holds only this run's data), the limit set, mount -o compress=SPEC (under
# taskset), then timed: dd of the data set into one file (1 MiB writes, conv=fsync), and,
# after an untimed `squeezefs stats --json` (the ratio), `squeezefs umount` (waits for the
# daemon's flush). Throughput = bytes / (write + fsync + umount). Load average and the bytes
# that crossed the device's limit are recorded per run. Results: OUT/results.jsonl, the tables and
# PNGs of crates/cli/examples/auto_eval_report.rs (OUT/report.md, OUT/auto-eval-*.png),
# trace plots in OUT/runs/*/trace.png.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CORPUS=${SQUEEZEFS_CORPUS:-$REPO/../shared/corpus}
THROTTLE=/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device
SERVICED=/sys/fs/cgroup/blkio/blkio.throttle.io_service_bytes
DATA_DIR=/var/tmp/sqz-auto-eval-data

die() { echo "auto-eval: $*" >&2; exit 1; }
note() { echo "[$(date -u +%H:%M:%S)] $*"; }
usage() { sed -n '2,58p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

MODE=matrix
LIMITS="" SPECS="" DATASETS="" CORES="" SIZE="" RUNS=1 TRACE=0 HOG=0 KEEP_DATA=0 BASELINE="" PLOT_SIZE=""
BACKING="" DEVICE=throttle
OUT=/var/tmp/squeezefs-bench-results/auto-eval-$(date -u +%Y%m%dT%H%M%S)
case "${1:-}" in matrix|hog|change|verify-throttle) MODE=$1; shift ;; esac
while [ $# -gt 0 ]; do
    case "$1" in
        --limits) LIMITS=${2:?--limits needs a list}; shift 2 ;;
        --specs) SPECS=${2:?--specs needs a list}; shift 2 ;;
        --datasets) DATASETS=${2:?--datasets needs a list}; shift 2 ;;
        --cores) CORES=${2:?--cores needs a list}; shift 2 ;;
        --size) SIZE=${2:?--size needs a size}; shift 2 ;;
        --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
        --trace) TRACE=1; shift ;;
        --plot-size) PLOT_SIZE=${2:?--plot-size needs WIDTHxHEIGHT}; shift 2 ;;
        --hog) HOG=1; shift ;;
        --backing) BACKING=${2:?--backing needs a directory}; shift 2 ;;
        --device) DEVICE=${2:?--device needs loop, throttle or paced}; shift 2 ;;
        --out) OUT=${2:?--out needs a directory}; shift 2 ;;
        --keep-data) KEEP_DATA=1; shift ;;
        --baseline) BASELINE=${2:?--baseline needs a squeezefs binary}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (modes: matrix, hog, change, verify-throttle; see --help)" ;;
    esac
done
case $MODE in
    matrix) : "${LIMITS:=25,50,100,200,400,unthrottled}" "${DATASETS:=medium,random,xml}" "${CORES:=1,2}"
        : "${SPECS:=none,lz4,lz4fast-20,zstd:-5,zstd:1,zstd:3,zstd:9,zlib:6,auto}" ;;
    hog) HOG=1; : "${LIMITS:=unthrottled,100}" "${DATASETS:=medium}" "${CORES:=2}" "${SPECS:=none,auto}" ;;
    change) TRACE=1; : "${LIMITS:=100}" "${DATASETS:=change}" "${CORES:=2}" "${SPECS:=none,auto}" ;;
    verify-throttle) : "${LIMITS:=25,100,unthrottled}" "${SIZE:=256M}" ;;
esac
: "${SIZE:=1G}"
case $DEVICE in
    # `loop` names what the device is (a loop device over a file on the host disk; the
    # limits `unthrottled` or MB/s through the blkio throttle); `throttle` is the same
    loop|throttle) DEVICE=throttle; : "${BACKING:=/var/tmp}" ;;
    paced) : "${BACKING:=/dev/shm}" ;;
    *) die "--device: '$DEVICE' (accepted: loop (= throttle), paced)" ;;
esac

# ---- checks ---------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || die "must run as root (loop device, blkio throttle, FUSE)"
[ -w "$THROTTLE" ] || die "$THROTTLE is not writable: needs the cgroup-v1 blkio controller mounted at /sys/fs/cgroup/blkio"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "--runs: '$RUNS' is not a positive number"
BYTES=$(numfmt --from=iec "$SIZE" 2>/dev/null) || die "--size: '$SIZE' is not a size (e.g. 256M, 1G)"
[ "$BYTES" -ge $((16 << 20)) ] || die "--size: $SIZE is below 16M; a run would time mount overhead only"
IFS=, read -ra LIMIT_LIST <<<"$LIMITS"
IFS=, read -ra SPEC_LIST <<<"$SPECS"
IFS=, read -ra DATASET_LIST <<<"${DATASETS:-}"
IFS=, read -ra CORE_LIST <<<"${CORES:-}"
for l in "${LIMIT_LIST[@]}"; do
    [[ "$l" =~ ^[1-9][0-9]*$ || "$l" = unthrottled ]] || die "--limits: '$l' is neither a number of MB/s nor 'unthrottled'"
done
if [ -n "$BASELINE" ]; then
    [ -x "$BASELINE" ] || die "--baseline: '$BASELINE' is not an executable squeezefs binary"
    BASELINE=$(realpath "$BASELINE")
    for s in "${SPEC_LIST[@]}"; do [[ "$s" == auto* ]] && SPEC_LIST+=("$s@base"); done
fi
for d in "${DATASET_LIST[@]}"; do
    case $d in medium|random|xml|change) ;; *) die "--datasets: unknown data set '$d' (accepted: medium, random, xml, change)" ;; esac
done
for c in "${CORE_LIST[@]}"; do
    case $c in 1|2) ;; *) die "--cores: '$c' (accepted: 1, 2)" ;; esac
done
[ "$(nproc)" -ge 2 ] || [[ " ${CORE_LIST[*]} " != *" 2 "* ]] || die "--cores 2 on a machine with $(nproc) core(s)"
need=()
for t in jq numfmt taskset losetup blkdiscard unzip getfattr; do command -v $t >/dev/null || need+=("$t"); done
[ ${#need[@]} -eq 0 ] || die "needs: ${need[*]} (Debian: jq coreutils util-linux unzip attr)"
if [ "$HOG" = 1 ] && ! command -v stress-ng >/dev/null; then
    note "installing stress-ng (Debian package) for the CPU hog"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; } \
        || die "could not install stress-ng"
fi

# ---- binaries ---------------------------------------------------------------------------
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
note "build (release): squeezefs, the report example and the paced device"
(cd "$REPO" && cargo build --locked --release -q -p squeezefs --bin squeezefs --example auto_eval_report \
    -p squeezefs-paced-device)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}/release
SQ=$TARGET/squeezefs
REPORT=$TARGET/examples/auto_eval_report
PACED_BIN=$TARGET/paced-device
COMMIT=$(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- crates || echo +dirty)

# ---- space -------------------------------------------------------------------------------
# the loop device's backing file holds one run's data at most (discarded between runs);
# room for the biggest (none on incompressible data) plus the pool's own overhead, and at
# least 2 GiB: the engine places compressed records early (at once, not at their txg's sync)
# only while the pool's room exceeds 4 × max_dirty (256 MiB) + 256 MiB (pipeline
# early_place.rs); on a smaller device every level would be measured without it. The file
# is sparse: it takes only what a run writes.
DEV_BYTES=$(( (BYTES + BYTES / 5 + (256 << 20)) >> 20 << 20 ))
[ "$DEV_BYTES" -ge $((2 << 30)) ] || DEV_BYTES=$((2 << 30))
datasets_bytes=0
for d in "${DATASET_LIST[@]}"; do
    [ -e "$DATA_DIR/$d-$SIZE.bin" ] || datasets_bytes=$((datasets_bytes + BYTES))
done
[ "$MODE" = verify-throttle ] && datasets_bytes=$BYTES
mkdir -p "$BACKING" "$DATA_DIR"
free_backing=$(( $(stat -f -c '%a * %S' "$BACKING") ))
free_data=$(( $(stat -f -c '%a * %S' "$DATA_DIR") ))
same_fs=$([ "$(stat -c %d "$BACKING")" = "$(stat -c %d "$DATA_DIR")" ] && echo 1 || echo 0)
margin=$((2 << 30)) # never take the shared disk's last 2 GiB
if [ "$same_fs" = 1 ]; then
    [ "$free_backing" -gt $((DEV_BYTES + datasets_bytes + margin)) ] \
        || die "not enough space on $BACKING: needs $(numfmt --to=iec $((DEV_BYTES + datasets_bytes))) + 2G margin, has $(numfmt --to=iec "$free_backing")"
else
    [ "$free_backing" -gt $((DEV_BYTES + margin)) ] || die "not enough space on $BACKING for the device ($(numfmt --to=iec $DEV_BYTES) + 2G margin)"
    [ "$free_data" -gt $((datasets_bytes + margin)) ] || die "not enough space on $DATA_DIR for the data sets ($(numfmt --to=iec $datasets_bytes) + 2G margin)"
fi

# ---- set-up and clean-up ------------------------------------------------------------------
mkdir -p "$OUT/runs"
WORK=$(mktemp -d /var/tmp/sqz-auto-eval.XXXXXX)
POOL=$WORK/pool
MNT=$WORK/mnt
mkdir -p "$MNT"
BACKING_FILE=$(mktemp "$BACKING/sqz-auto-eval-dev.XXXXXX")
LOOP="" MAJMIN="" HOG_PID="" PACED="" PACED_PID=""
# data sets that exist now are someone's cache (--keep-data): only those made here go
mapfile -t DATA_BEFORE < <(find "$DATA_DIR" -maxdepth 1 -name '*.bin' 2>/dev/null)
cleanup() {
    set +e
    if mountpoint -q "$MNT" 2>/dev/null; then "${RUN_SQ:-$SQ}" umount "$MNT" || umount -l "$MNT"; fi
    [ -n "$HOG_PID" ] && kill "$HOG_PID" 2>/dev/null && wait "$HOG_PID" 2>/dev/null
    [ -n "$MAJMIN" ] && echo "$MAJMIN 0" >"$THROTTLE"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    if [ -n "$PACED_PID" ]; then
        umount "$PACED" 2>/dev/null || umount -l "$PACED"
        wait "$PACED_PID" 2>/dev/null
    fi
    rm -f "$BACKING_FILE"
    rm -rf "$WORK"
    rm -f "$DATA_DIR"/*.tmp
    if [ "$KEEP_DATA" = 0 ]; then
        for f in "$DATA_DIR"/*.bin; do
            [ -e "$f" ] && [[ " ${DATA_BEFORE[*]} " != *" $f "* ]] && rm -f "$f"
        done
        rmdir "$DATA_DIR" 2>/dev/null
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

truncate -s "$DEV_BYTES" "$BACKING_FILE"
LOOP_FILE=$BACKING_FILE
if [ "$DEVICE" = paced ]; then
    PACED=$WORK/paced
    mkdir -p "$PACED"
    "$PACED_BIN" "$PACED" --backing "$BACKING_FILE" --size "$DEV_BYTES" 2>"$WORK/paced.log" &
    PACED_PID=$!
    for _ in $(seq 50); do [ -e "$PACED/dev" ] && break; sleep 0.1; done
    [ -e "$PACED/dev" ] || die "the paced device did not come up: $(head -c 300 "$WORK/paced.log")"
    LOOP_FILE=$PACED/dev
fi
# direct I/O from the loop device to its backing file: the loop device does not keep a
# second copy of the data in the host's page cache, and its fdatasync reaches the disk
LOOP=$(losetup -f --show --direct-io=on "$LOOP_FILE")
MAJMIN=$(lsblk -dno MAJ:MIN "$LOOP" | tr -d ' ')
note "device: $LOOP ($MAJMIN) over $LOOP_FILE, $(numfmt --to=iec $DEV_BYTES), direct I/O $(cat /sys/block/"${LOOP#/dev/}"/loop/dio), limits by $DEVICE"

# Set the write limit of the loop device (MB/s, or unthrottled) and check it was taken: the
# throttle's, or the paced device's rate with the throttle off.
set_limit() {
    local bps=0
    [ "$1" = unthrottled ] || bps=$(($1 * 1000000))
    if [ "$DEVICE" = paced ]; then
        echo "$bps" >"$PACED/rate"
        [ "$(cat "$PACED/rate")" = "$bps" ] || die "the paced device's rate reads '$(cat "$PACED/rate")' after writing $bps"
        bps=0
    fi
    echo "$MAJMIN $bps" >"$THROTTLE"
    local now
    now=$(awk -v d="$MAJMIN" '$1 == d { print $2 }' "$THROTTLE")
    [ "${now:-0}" = "$bps" ] || die "the throttle of $MAJMIN reads '${now:-none}' after writing $bps"
}
# Bytes written to the loop device so far (the root cgroup's count: everything on this machine
# is in it, the kernel's writeback threads too).
dev_written() { awk -v d="$MAJMIN" '$1 == d && $2 == "Write" { print $3 }' "$SERVICED" | head -1; }

# ---- data sets (outside any timing) ---------------------------------------------------------
corpus_dir() {
    local dir=$WORK/corpus
    if [ ! -d "$dir" ]; then
        ls "$CORPUS"/*.zip >/dev/null 2>&1 || die "no corpus zip files in $CORPUS (set SQUEEZEFS_CORPUS)"
        mkdir -p "$dir"
        for z in "$CORPUS"/*.zip; do unzip -qo "$z" -d "$dir"; done
    fi
    echo "$dir"
}
# repeat FILES... into OUT up to exactly $BYTES
repeat_to_size() {
    local out=$1; shift
    local src=$WORK/repeat.src
    cat "$@" >"$src"
    local n; n=$(stat -c %s "$src")
    : >"$out"
    for _ in $(seq $((BYTES / n))); do cat "$src" >>"$out"; done
    head -c $((BYTES % n)) "$src" >>"$out"
    rm -f "$src"
}
dataset_file() {
    local d=$1 f=$DATA_DIR/$1-$SIZE.bin
    if [ ! -e "$f" ] || [ "$(stat -c %s "$f")" != "$BYTES" ]; then
        note "data set $d: generating $(numfmt --to=iec "$BYTES") in $f" >&2
        local c
        case $d in
            medium) c=$(corpus_dir); mapfile -t files < <(find "$c" -type f | sort); repeat_to_size "$f.tmp" "${files[@]}" ;;
            xml) c=$(corpus_dir); [ -f "$c/xml" ] || die "the corpus has no xml file"; repeat_to_size "$f.tmp" "$c/xml" ;;
            random) head -c "$BYTES" /dev/urandom >"$f.tmp" ;;
            change)
                local third=$((BYTES / 3)) med
                med=$(dataset_file medium)
                { head -c "$third" "$med"; head -c "$third" /dev/urandom; tail -c $((BYTES - 2 * third)) "$med"; } >"$f.tmp" ;;
        esac
        mv "$f.tmp" "$f"
    fi
    echo "$f"
}

# ---- one run -----------------------------------------------------------------------------------
TRACE_OK=1
RUN_SQ=$SQ # the binary of the current run (the baseline's for SPEC@base)
mount_pool() { # SPEC CORES [TRACEFILE] → mounts, or returns the mount's error text on stderr
    local spec=${1%@base} tune="" cpus=0
    if [[ "$spec" == *"~"* ]]; then tune=${spec#*~} spec=${spec%%~*}; fi
    local opts="compress=$spec"
    [ "$2" = 2 ] && cpus=0,1
    [ -n "${3:-}" ] && opts="$opts,trace=$3"
    env ${tune:+SQUEEZEFS_AUTO_TUNE=${tune//+/,}} taskset -c $cpus "$RUN_SQ" mount "$POOL" "$MNT" -o "$opts"
}
daemon_pid() { getfattr -n user.squeezefs.mount --only-values "$MNT" 2>/dev/null | sed -n 's/^pid=//p'; }
daemon_cpu_s() { # utime + stime of a pid, seconds
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null || echo null
}
RESULTS=$OUT/results.jsonl
run_one() { # DATASET CORES LIMIT SPEC ROUND
    local ds=$1 cores=$2 limit=$3 spec=$4 round=$5 data
    data=$(dataset_file "$ds") || return 1
    local dir base k=2
    base=$OUT/runs/$(printf '%s_%sc_%s_%s_r%s' "$ds" "$cores" "$limit" "$spec" "$round" | tr ':' '=')
    # a spec listed twice runs twice per round: each run keeps its own directory
    dir=$base
    while [ -e "$dir" ]; do dir=${base}_$k; k=$((k + 1)); done
    mkdir -p "$dir"
    cat "$data" >/dev/null # in the page cache before the clock starts
    "$RUN_SQ" umount "$MNT" >/dev/null 2>&1 || true
    RUN_SQ=$SQ
    [[ "$spec" == *@base ]] && RUN_SQ=$BASELINE
    blkdiscard "$LOOP" || return 1
    rm -rf "$POOL"
    "$RUN_SQ" mkfs "$POOL" --device "$LOOP" --force >"$dir/mkfs.txt" || return 1
    set_limit "$limit" || return 1
    local trace=""
    if [ "$TRACE" = 1 ] && [ "$TRACE_OK" = 1 ] && [[ "$spec" == auto* ]]; then trace=$dir/trace.csv; fi
    if ! mount_pool "$spec" "$cores" "$trace" 2>"$dir/mount.err"; then
        if [ -n "$trace" ] && grep -q "unknown mount option 'trace" "$dir/mount.err"; then
            TRACE_OK=0 trace=""
            note "NOTE: this squeezefs has no trace= mount option yet; auto runs are not traced"
            mount_pool "$spec" "$cores" "" 2>"$dir/mount.err" || { cat "$dir/mount.err" >&2; return 1; }
        else
            cat "$dir/mount.err" >&2
            return 1
        fi
    fi
    local pid affinity load w0 t0 t1 t2 t3 cpu
    pid=$(daemon_pid)
    affinity=$(awk '/^Cpus_allowed_list/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo "?")
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    w0=$(dev_written)
    t0=$(date +%s%N)
    if ! dd if="$data" of="$MNT/data" bs=1M conv=fsync status=none 2>"$dir/dd.err"; then
        note "  $spec: the write failed: $(head -c 300 "$dir/dd.err")"
        "$RUN_SQ" umount "$MNT" || true
        return 1
    fi
    t1=$(date +%s%N)
    if ! "$RUN_SQ" stats "$MNT" --json >"$dir/stats.json"; then
        "$RUN_SQ" umount "$MNT" || true
        return 1
    fi
    cpu=$(daemon_cpu_s "$pid")
    t2=$(date +%s%N)
    "$RUN_SQ" umount "$MNT" || return 1
    t3=$(date +%s%N)
    local written=$(( $(dev_written) - w0 ))
    if grep -qiE 'error|panic' "$POOL/squeezefs.log" 2>/dev/null; then
        note "  daemon log of this run reports errors:"; grep -iE 'error|panic' "$POOL/squeezefs.log" | tail -5
        cp "$POOL/squeezefs.log" "$dir/"
    elif [ -n "$trace" ] && [ -f "$POOL/squeezefs.log" ]; then
        cp "$POOL/squeezefs.log" "$dir/"
    fi
    local secs disk unc
    secs=$(echo "scale=6; ($t1 - $t0 + $t3 - $t2) / 1000000000" | bc)
    disk=$(jq .total.disk_bytes "$dir/stats.json")
    unc=$(jq .total.uncompressed_bytes "$dir/stats.json")
    [ "$unc" = "$BYTES" ] || note "  WARNING: stats counts $unc uncompressed bytes, $BYTES were written"
    local png=null
    if [ -n "$trace" ] && [ -s "$trace" ]; then
        if "$SQ" plot "$trace" -o "$dir/trace.png" ${PLOT_SIZE:+--size "$PLOT_SIZE"} 2>"$dir/plot.err"; then png="\"$dir/trace.png\""; else
            note "  squeezefs plot failed: $(head -c 200 "$dir/plot.err")"; fi
    fi
    local limit_json=null
    [ "$limit" = unthrottled ] || limit_json=$limit
    jq -nc --arg dataset "$ds" --argjson hog "$([ "$HOG" = 1 ] && echo true || echo false)" \
        --argjson cores "$cores" --argjson limit_mbs "$limit_json" --arg spec "$spec" \
        --argjson round "$round" --argjson bytes "$BYTES" --argjson seconds "$secs" \
        --argjson write_s "$(echo "scale=3; ($t1 - $t0) / 1000000000" | bc)" \
        --argjson umount_s "$(echo "scale=3; ($t3 - $t2) / 1000000000" | bc)" \
        --argjson disk_bytes "$disk" --argjson uncompressed_bytes "$unc" \
        --argjson device_write_bytes "$written" --argjson daemon_cpu_s "$cpu" \
        --arg daemon_cpus "$affinity" --arg load "$load" --slurpfile stats "$dir/stats.json" \
        --argjson trace_png "$png" --arg commit "$COMMIT" --arg binary "$RUN_SQ" --arg time "$(date -u +%FT%TZ)" \
        --arg device "$DEVICE" \
        '{dataset:$dataset, hog:$hog, cores:$cores, limit_mbs:$limit_mbs, spec:$spec, round:$round,
          bytes:$bytes, seconds:$seconds, write_s:$write_s, umount_s:$umount_s,
          disk_bytes:$disk_bytes, uncompressed_bytes:$uncompressed_bytes,
          device_write_bytes:$device_write_bytes, daemon_cpu_s:$daemon_cpu_s,
          daemon_cpus:$daemon_cpus, load:$load, levels:$stats[0].rows, trace_png:$trace_png,
          commit:$commit, binary:$binary, time:$time, device:$device}' >>"$RESULTS"
    printf '  %-11s %7.1f MB/s  ratio %5.2f  (write+fsync %6.2f s, umount %5.2f s, daemon CPU %s s on cpus %s, device got %s) load %s\n' \
        "$spec" "$(echo "$BYTES / $secs / 1000000" | bc -l)" "$(echo "$unc / $disk" | bc -l)" \
        "$(echo "($t1 - $t0) / 1000000000" | bc -l)" "$(echo "($t3 - $t2) / 1000000000" | bc -l)" \
        "$cpu" "$affinity" "$(numfmt --to=iec "$written")" "$load"
}

# ---- verify-throttle mode --------------------------------------------------------------------------
if [ "$MODE" = verify-throttle ]; then
    data=$(dataset_file random)
    printf '\n| limit MB/s | dd buffered+fdatasync MB/s | dd O_DIRECT MB/s | squeezefs none MB/s | bytes the device took (squeezefs) |\n|---|---|---|---|---|\n' >"$OUT/throttle.md"
    for limit in "${LIMIT_LIST[@]}"; do
        # about 10 s of writing at the limit, at most --size
        n=$BYTES
        [ "$limit" = unthrottled ] || n=$(( limit * 10000000 < BYTES ? limit * 10000000 : BYTES ))
        n=$(( n >> 20 ))
        set_limit "$limit"
        note "limit $limit: $n MiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
        blkdiscard "$LOOP"
        buf=$(dd if="$data" of="$LOOP" bs=1M count="$n" conv=fdatasync 2>&1 | tail -1)
        blkdiscard "$LOOP"
        direct=$(dd if="$data" of="$LOOP" bs=1M count="$n" oflag=direct 2>&1 | tail -1)
        echo "  dd buffered + fdatasync: $buf"
        echo "  dd O_DIRECT:             $direct"
        mbs() { sed -E 's/.*, ([0-9.]+) s, .*/\1/' <<<"$1" | awk -v b=$((n << 20)) '{ printf "%.1f", b / $1 / 1e6 }'; }
        # squeezefs: the same bytes through a `none` mount (data from the random set: no holes)
        blkdiscard "$LOOP"; rm -rf "$POOL"
        "$SQ" mkfs "$POOL" --device "$LOOP" --force >/dev/null
        mount_pool none 2
        head -c $((n << 20)) "$data" >"$WORK/part.bin"
        w0=$(dev_written); t0=$(date +%s%N)
        dd if="$WORK/part.bin" of="$MNT/data" bs=1M conv=fsync status=none
        "$SQ" umount "$MNT"
        t1=$(date +%s%N); w=$(( $(dev_written) - w0 ))
        rm -f "$WORK/part.bin"
        sq=$(echo "scale=1; $n * 1048576 * 1000 / ($t1 - $t0)" | bc)
        echo "  squeezefs none:          $sq MB/s, $(numfmt --to=iec $w) through the device for $(numfmt --to=iec $((n << 20))) written"
        printf '| %s | %s | %s | %s | %s of %s |\n' "$limit" "$(mbs "$buf")" "$(mbs "$direct")" "$sq" \
            "$(numfmt --to=iec $w)" "$(numfmt --to=iec $((n << 20)))" >>"$OUT/throttle.md"
    done
    cat "$OUT/throttle.md"
    exit 0
fi

# ---- matrix (and the hog and change modes) ------------------------------------------------------------
note "mode $MODE: data sets ${DATASET_LIST[*]}; cores ${CORE_LIST[*]}; limits ${LIMIT_LIST[*]}; specs ${SPEC_LIST[*]}; $(numfmt --to=iec "$BYTES") per run, $RUNS run(s); commit $COMMIT"
for d in "${DATASET_LIST[@]}"; do dataset_file "$d" >/dev/null; done
if [ "$HOG" = 1 ]; then
    stress-ng --cpu 1 --taskset 0 --timeout 0 --quiet &
    HOG_PID=$!
    note "CPU hog: stress-ng --cpu 1 --taskset 0 (pid $HOG_PID)"
fi
{
    echo "# auto-eval $MODE, $(date -u +%FT%TZ), commit $COMMIT"
    echo "command: bench/auto-eval.sh $MODE --device $DEVICE --limits $LIMITS --specs $SPECS --datasets ${DATASETS} --cores ${CORES} --size $SIZE --runs $RUNS$([ "$TRACE" = 1 ] && echo ' --trace')$([ "$HOG" = 1 ] && [ "$MODE" != hog ] && echo ' --hog')"
    case $DEVICE in
        throttle) echo "device: loop over $BACKING (direct I/O), cgroup-v1 blkio write throttle; machine: $(nproc) cores" ;;
        paced) echo "device: loop (direct I/O) over bench/paced-device, data in $BACKING, writes served at the limit; machine: $(nproc) cores" ;;
    esac
} >"$OUT/report.md"
for ds in "${DATASET_LIST[@]}"; do
    for cores in "${CORE_LIST[@]}"; do
        for limit in "${LIMIT_LIST[@]}"; do
            note "cell: $ds, daemon on $cores core(s), device $limit$([ "$limit" = unthrottled ] || echo ' MB/s'), load $(cut -d' ' -f1-3 /proc/loadavg)"
            for round in $(seq "$RUNS"); do
                # alternate the specs within a cell, starting one later each round
                n=${#SPEC_LIST[@]}
                for i in $(seq 0 $((n - 1))); do
                    spec=${SPEC_LIST[$(( (i + round - 1) % n ))]}
                    run_one "$ds" "$cores" "$limit" "$spec" "$round" || note "  $spec: run failed (see $OUT/runs)"
                done
            done
        done
    done
done
set_limit unthrottled
[ -s "$RESULTS" ] || die "no run succeeded"
"$REPORT" "$RESULTS" --png-dir "$OUT" | tee -a "$OUT/report.md"
for p in "$OUT"/runs/*/trace.png; do [ -e "$p" ] && echo "trace plot: $p"; done
[ "$TRACE" = 1 ] && [ "$TRACE_OK" = 0 ] && echo "note: the mount has no trace= option yet; no traces" | tee -a "$OUT/report.md"
note "results: $OUT"
