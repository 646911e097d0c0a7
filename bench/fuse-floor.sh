#!/usr/bin/env bash
# Where the FUSE floor lies for a metadata-heavy extract: the bare cost of a FUSE round trip on
# this kernel, the round trips a created file costs, and what kernel btrfs, squeezefs and mature
# passthrough FUSE filesystems take for the same extract, all in one run, rounds alternating.
#
#   bench/fuse-floor.sh [--rounds N] [--spec zstd:1] [--calls N]
#                       [--variants "btrfs tmpfs sq sq-devfuse overlay bindfs bindfs-mt"]
#
# Each round, on the same disk (/var/tmp or $BENCH_WORKDIR), in a rotating order:
#  (a) round trips: N fgetxattr(2) calls on one open file (bench/fuse-floor/rtt.c), of
#      `system.sqzfloor` (the daemon refuses the namespace before looking at anything:
#      EOPNOTSUPP) and of `security.capability` (ENODATA: the two GETXATTRs the kernel sends
#      per created file), on a fresh squeezefs mount with each transport (`uring=off`:
#      /dev/fuse; the default: io_uring when the kernel offers it) and the same calls on btrfs
#      (the kernel answers itself: the syscall's own cost). Per call: the caller's wall clock,
#      the daemon's CPU (all its threads, /proc/PID/task/*/schedstat) and its user/system
#      split (/proc/PID/stat ticks). The mount's own request counter must grow by N, or the
#      round stops: every call was a round trip.
#  (b) the subset extract's requests per created entry, from `user.squeezefs.requests` on
#      the squeezefs mounts of (c), and for the reference filesystems from the kernel's
#      `fuse:fuse_request_send` tracepoint (filtered on the mount's connection, in a tracefs
#      instance of our own), in one extra untimed extract each at the end;
#  (c) the subset extract (linux-source-6.1/{fs,net,include}: 10 368 entries, 121 MB, as
#      bench/extract-subset.sh makes it) from /dev/shm with `tar -x`, timed until durable and
#      unmounted, into: `btrfs` (mounted compress=SPEC on a loop device over a sparse file),
#      `tmpfs` (a directory in /dev/shm: the kernel's own cost of creating the files, tar
#      included, with no filesystem work and nothing to make durable),
#      `sq` (squeezefs compress=SPEC, default transport), `sq-devfuse` (squeezefs
#      compress=SPEC,uring=off), `overlay` (fuse-overlayfs with an empty lower directory and
#      its upper directory on a btrfs mounted compress=SPEC), `bindfs` and `bindfs-mt`
#      (bindfs, single-threaded as it starts by default, and with --multithreaded, over the
#      same kind of btrfs). The FUSE daemons run in the foreground as children of the script;
#      a reference run ends when its FUSE mount is unmounted, its daemon exited, and the
#      btrfs below was synced and unmounted.
#
# Prints per-round rows and then the medians, and two floors per transport: R × T added to
# btrfs' time (a FUSE filesystem that does its own work at btrfs' cost) and to tmpfs' time
# (one that does no work at all), where R is the synchronous requests of the extract (all but
# FORGET, BATCH_FORGET, RELEASE, RELEASEDIR, INTERRUPT) and T the bare round trip
# (system.sqzfloor on squeezefs − the same call on btrfs).
#
# Runs as root. Installs btrfs-progs, linux-source-6.1, bindfs, fuse-overlayfs and gcc
# (Debian packages) when missing. Environment: SQUEEZEFS_BIN (default: the release binary,
# built when missing), BENCH_WORKDIR (default /var/tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
ROUNDS=5
SPEC=zstd:1
CALLS=100000
VARIANTS="btrfs tmpfs sq sq-devfuse overlay bindfs bindfs-mt"
die() { echo "fuse-floor: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --spec) SPEC=${2:?}; shift 2 ;;
        --calls) CALLS=${2:?}; shift 2 ;;
        --variants) VARIANTS=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (accepted: --rounds N, --spec SPEC, --calls N, --variants \"...\")" ;;
    esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds: '$ROUNDS' is not a positive number"
[[ "$CALLS" =~ ^[1-9][0-9]*$ ]] || die "--calls: '$CALLS' is not a positive number"
case "$SPEC" in none|zstd|zstd:[1-9]|zstd:1[0-5]|zlib|zlib:[1-9]) ;;
    *) die "--spec: '$SPEC' is not accepted (none, zstd[:1..15], zlib[:1..9]: same spec on both)" ;; esac
for v in $VARIANTS; do
    case "$v" in btrfs|tmpfs|sq|sq-devfuse|overlay|bindfs|bindfs-mt) ;;
        *) die "--variants: '$v' is not a variant (btrfs tmpfs sq sq-devfuse overlay bindfs bindfs-mt)" ;; esac
done
[[ " $VARIANTS " == *" btrfs "* ]] || die "--variants must include btrfs (the reference of every ratio)"
[ "$(id -u)" = 0 ] || die "run as root (loop devices, mounts, tracefs)"

need=()
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v getfattr >/dev/null || need+=(attr)
command -v cc >/dev/null || need+=(gcc)
command -v fusermount3 >/dev/null || need+=(fuse3)
[[ " $VARIANTS " != *" overlay "* ]] || command -v fuse-overlayfs >/dev/null || need+=(fuse-overlayfs)
[[ " $VARIANTS " != *" bindfs"* ]] || command -v bindfs >/dev/null || need+=(bindfs)
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
SRC=$(mktemp /dev/shm/sqz-floor.XXXXXX.tar)
cp "$CACHE/linux-subset.tar" "$SRC"
ENTRIES=$(tar -tf "$SRC" | wc -l)
W=$(mktemp -d "${BENCH_WORKDIR:-/var/tmp}/sqz-floor.XXXXXX")
RTT=$W/rtt
cc -O2 -Wall -o "$RTT" "$ROOT/bench/fuse-floor/rtt.c"
mkdir -p "$W/mnt" "$W/b" "$W/out"
TRACE=/sys/kernel/tracing
TINST=""
LOOP=""
DPIDS=()
cleanup() {
    local m
    for m in "$W/mnt" "$W/b"; do
        mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
    done
    for p in "${DPIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    [ -n "${TPID:-}" ] && kill "$TPID" 2>/dev/null
    [ -n "$TINST" ] && { echo 0 > "$TINST/events/fuse/fuse_request_send/enable"; rmdir "$TINST" 2>/dev/null; }
    rm -rf "$W" "$SRC"
}
trap cleanup EXIT
now() { date +%s.%N; }
load() { cut -d' ' -f1 /proc/loadavg; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# ---- filesystems ------------------------------------------------------------------------------
btrfs_up() { # fresh btrfs at $W/b, compress=$SPEC
    local opt=()
    [ "$SPEC" = none ] || opt=(-o "compress=$SPEC")
    truncate -s 8G "$W/btrfs.img"
    LOOP=$(losetup --find --show "$W/btrfs.img")
    mkfs.btrfs -q -f "$LOOP" >/dev/null
    mount "${opt[@]}" "$LOOP" "$W/b"
}
btrfs_down() { # sync, unmount, forget
    sync -f "$W/b"
    umount "$W/b"
    losetup -d "$LOOP"; LOOP=""
    rm -f "$W/btrfs.img"
}
sq_up() { # fresh pool mounted at $W/mnt; $1: extra options ("" or uring=off); sets DPID
    rm -rf "$W/pool"
    "$BIN" mkfs "$W/pool" >/dev/null
    "$BIN" mount "$W/pool" "$W/mnt" -o "compress=$SPEC${1:+,$1}"
    DPID=$(getfattr --absolute-names --only-values -n user.squeezefs.mount "$W/mnt" | sed -n 's/^pid=//p')
    [ -n "$DPID" ] || die "no daemon pid in user.squeezefs.mount"
}
sq_transport() { getfattr --absolute-names --only-values -n user.squeezefs.mount "$W/mnt" | sed -n 's/^transport=//p' | sed 's/ (.*//; s/,.*//'; }
sq_down() { "$BIN" umount "$W/mnt"; rm -rf "$W/pool"; } # waits for the daemon's flush and exit
wait_mounted() { # $1: daemon pid
    for _ in $(seq 2000); do
        mountpoint -q "$W/mnt" && return 0
        kill -0 "$1" 2>/dev/null || die "FUSE daemon $1 exited before mounting"
        sleep 0.005
    done
    die "FUSE mount at $W/mnt did not appear"
}
ref_up() { # reference FUSE filesystem over a fresh btrfs; sets RPID
    btrfs_up
    case "$1" in
        overlay)
            mkdir -p "$W/b/lower" "$W/b/upper" "$W/b/work"
            fuse-overlayfs -f -o "lowerdir=$W/b/lower,upperdir=$W/b/upper,workdir=$W/b/work" "$W/mnt" 2>"$W/out/ref.log" &
            ;;
        bindfs) mkdir -p "$W/b/data"; bindfs -f "$W/b/data" "$W/mnt" 2>"$W/out/ref.log" & ;;
        bindfs-mt) mkdir -p "$W/b/data"; bindfs -f --multithreaded "$W/b/data" "$W/mnt" 2>"$W/out/ref.log" & ;;
    esac
    RPID=$!
    DPIDS+=("$RPID")
    wait_mounted "$RPID"
}
ref_down() { # unmount the FUSE mount, wait for its daemon, then the btrfs below
    umount "$W/mnt"
    wait "$RPID" || true
    DPIDS=("${DPIDS[@]/$RPID}")
    btrfs_down
}

# ---- (a) round trips --------------------------------------------------------------------------
daemon_ns() { # CPU ns of every thread of $1 so far
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'
}
daemon_ticks() { # "utime stime" (clock ticks) of process $1, its threads included
    sed 's/.*) //' /proc/"$1"/stat | awk '{print $12, $13}'
}
req_threads_cpu() { # "user_ticks sys_ticks ns" of daemon $1's request threads (ring and /dev/fuse)
    local t u=0 k=0 n=0 a b c
    for t in /proc/"$1"/task/*; do
        case "$(cat "$t/comm" 2>/dev/null)" in sqz-uring-*|sqz-fuse-*) ;; *) continue ;; esac
        read -r a b < <(sed 's/.*) //' "$t/stat" | awk '{print $12, $13}')
        read -r c _ < "$t/schedstat"
        u=$((u + a)); k=$((k + b)); n=$((n + c))
    done
    echo "$u $k $n"
}
getxattr_count() { # GETXATTR requests served so far by the mount at $W/mnt
    getfattr --absolute-names --only-values -n user.squeezefs.requests "$W/mnt" | awk '$1 == "GETXATTR" {print $2}'
}
HZ=$(getconf CLK_TCK)
rtt_sq() { # $1 label, $2 mount option → rows "label name wall user sys dcpu duser dsys errno"
    local name o
    sq_up "$2"
    echo x > "$W/mnt/f"
    sq_transport > "$W/out/transport.$1"
    for name in system.sqzfloor security.capability; do
        local c0 c1 n0 n1 t0 t1
        c0=$(getxattr_count); n0=$(daemon_ns "$DPID"); t0=$(daemon_ticks "$DPID")
        o=$("$RTT" "$W/mnt/f" "$name" "$CALLS")
        n1=$(daemon_ns "$DPID"); t1=$(daemon_ticks "$DPID"); c1=$(getxattr_count)
        local sent=$((CALLS + CALLS / 10 + 1))
        [ $((c1 - c0 - 1)) -ge "$sent" ] || die "$1 $name: $((c1 - c0 - 1)) GETXATTR requests for $sent calls (cached?)"
        echo "$1 $name $o $(( (n1 - n0) / (CALLS + CALLS / 10 + 1) ))" \
            "$(echo "$t0 $t1" | awk -v hz="$HZ" -v n="$sent" '{printf "%.0f %.0f", ($3-$1)*1e9/hz/n, ($4-$2)*1e9/hz/n}')"
    done
    sq_down
}
rtt_btrfs() {
    btrfs_up
    echo x > "$W/b/f"
    local name
    for name in system.sqzfloor security.capability; do
        echo "btrfs $name $("$RTT" "$W/b/f" "$name" "$CALLS") 0 0 0"
    done
    btrfs_down
}
transport() { cat "$W/out/transport.$1" 2>/dev/null || echo "?"; } # of variant $1, as its mount said

# ---- (b) request counts -----------------------------------------------------------------------
SYNC_SKIP=" FORGET BATCH_FORGET RELEASE RELEASEDIR INTERRUPT "
op_name() {
    case "$1" in
        1) echo LOOKUP ;; 2) echo FORGET ;; 3) echo GETATTR ;; 4) echo SETATTR ;; 5) echo READLINK ;;
        6) echo SYMLINK ;; 8) echo MKNOD ;; 9) echo MKDIR ;; 10) echo UNLINK ;; 11) echo RMDIR ;;
        12) echo RENAME ;; 13) echo LINK ;; 14) echo OPEN ;; 15) echo READ ;; 16) echo WRITE ;;
        17) echo STATFS ;; 18) echo RELEASE ;; 20) echo FSYNC ;; 21) echo SETXATTR ;; 22) echo GETXATTR ;;
        23) echo LISTXATTR ;; 24) echo REMOVEXATTR ;; 25) echo FLUSH ;; 26) echo INIT ;; 27) echo OPENDIR ;;
        28) echo READDIR ;; 29) echo RELEASEDIR ;; 30) echo FSYNCDIR ;; 34) echo ACCESS ;; 35) echo CREATE ;;
        36) echo INTERRUPT ;; 38) echo DESTROY ;; 42) echo BATCH_FORGET ;; 43) echo FALLOCATE ;;
        44) echo READDIRPLUS ;; 45) echo RENAME2 ;; 50) echo SYNCFS ;; 52) echo STATX ;; *) echo "OP$1" ;;
    esac
}
trace_start() { # $1: mount's "major:minor"; stream its FUSE requests from our own tracefs instance
    [ -e "$TRACE/events/fuse/fuse_request_send" ] || return 1
    local dev=$1
    TINST=$TRACE/instances/sqz-floor-$$
    mkdir "$TINST"
    echo 16384 > "$TINST/buffer_size_kb"
    echo "connection == $(( (${dev%%:*} << 20) | ${dev##*:} ))" > "$TINST/events/fuse/fuse_request_send/filter"
    cat "$TINST/trace_pipe" > "$W/out/trace" &
    TPID=$!
    echo 1 > "$TINST/events/fuse/fuse_request_send/enable"
}
trace_stop() { # → "NAME count" lines of the requests traced
    echo 0 > "$TINST/events/fuse/fuse_request_send/enable"
    sleep 1
    kill "$TPID"; wait "$TPID" 2>/dev/null || true
    local lost
    lost=$(awk '/overrun|dropped/ {s += $NF} END {print s + 0}' "$TINST"/per_cpu/cpu*/stats)
    rmdir "$TINST"; TINST=""
    [ "$lost" = 0 ] || echo "fuse-floor: $lost trace events lost; counts are low" >&2
    sed -n 's/.*opcode [0-9]* (FUSE_\([A-Z_]*\)).*/\1/p' "$W/out/trace" | sort | uniq -c | awk '{print $2, $1}'
}
# ---- (c) extracts -----------------------------------------------------------------------------
extract() { # variant → "seconds_total seconds_tar" (tar alone, then the flush to unmounted);
             # leaves squeezefs' request counts in $W/out/counts.VARIANT
    local v=$1 t0 t1 t2
    case "$v" in
        btrfs)
            btrfs_up
            t0=$(now); tar -xf "$SRC" -C "$W/b"; t1=$(now); btrfs_down; t2=$(now) ;;
        tmpfs)
            local d
            d=$(mktemp -d /dev/shm/sqz-floor-tmpfs.XXXXXX)
            t0=$(now); tar -xf "$SRC" -C "$d"; t1=$(now); t2=$t1
            rm -rf "$d" ;;
        sq|sq-devfuse)
            sq_up "$([ "$v" = sq-devfuse ] && echo uring=off)"
            sq_transport > "$W/out/transport.$v"
            local c0 c1
            c0=$(req_threads_cpu "$DPID")
            t0=$(now)
            tar -xf "$SRC" -C "$W/mnt"
            t1=$(now)
            c1=$(req_threads_cpu "$DPID")
            getfattr --absolute-names --only-values -n user.squeezefs.requests "$W/mnt" > "$W/out/counts.$v"
            echo "$c0 $c1" >> "$W/out/reqcpu.$v"
            sq_down
            t2=$(now) ;;
        overlay|bindfs|bindfs-mt)
            ref_up "$v"
            t0=$(now); tar -xf "$SRC" -C "$W/mnt"; t1=$(now); ref_down; t2=$(now) ;;
    esac
    echo "$(echo "$t2 - $t0" | bc) $(echo "$t1 - $t0" | bc)"
}
count_ref() { # untimed extract through reference variant $1 with the tracepoint histogram
    local dev
    ref_up "$1"
    dev=$(mountpoint -d "$W/mnt")
    trace_start "$dev" || { ref_down; return 1; }
    tar -xf "$SRC" -C "$W/mnt"
    umount "$W/mnt"; wait "$RPID" || true; DPIDS=("${DPIDS[@]/$RPID}")
    trace_stop > "$W/out/counts.$1"
    btrfs_down
}

# ---- run --------------------------------------------------------------------------------------
echo "fuse-floor: spec $SPEC, $ROUNDS rounds, $CALLS calls per round trip figure, subset $ENTRIES entries"
echo "kernel $(uname -r), $(nproc) CPUs, enable_uring=$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo absent)," \
    "squeezefs $BIN ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)), $(bindfs --version 2>/dev/null | head -1), $(fuse-overlayfs --version 2>/dev/null | head -1)"
read -ra VS <<< "$VARIANTS"
declare -A TIMES TARTIMES
RTTROWS=$W/out/rtt
: > "$RTTROWS"
echo
echo "(c) per round: seconds until durable and unmounted (tar alone)"
echo
echo "| round | load start→end | order | $(printf '%s s | ' "${VS[@]}")"
echo "|---|---|---|$(printf -- '---|%.0s' "${VS[@]}")"
for r in $(seq "$ROUNDS"); do
    l0=$(load)
    # rotate the order each round, so no variant always follows the same one
    k=$(( (r - 1) % ${#VS[@]} ))
    order=("${VS[@]:k}" "${VS[@]:0:k}")
    { rtt_sq sq-devfuse uring=off; rtt_sq sq ""; rtt_btrfs; } | sed "s/^/$r /" >> "$RTTROWS"
    declare -A row=() tarp=()
    for v in "${order[@]}"; do
        read -r row[$v] tarp[$v] < <(extract "$v")
        TIMES[$v]="${TIMES[$v]:-} ${row[$v]}"
        TARTIMES[$v]="${TARTIMES[$v]:-} ${tarp[$v]}"
    done
    line="| $r | $l0→$(load) | ${order[*]} |"
    for v in "${VS[@]}"; do line+=" $(printf '%.2f (%.2f)' "${row[$v]}" "${tarp[$v]}") |"; done
    echo "$line"
done

echo
echo "(c) subset extract, medians of $ROUNDS rounds (until durable and unmounted):"
echo
echo "| variant | transport | median s | / btrfs | tar alone s | rest s |"
echo "|---|---|---|---|---|---|"
declare -A MED MEDTAR
for v in "${VS[@]}"; do MED[$v]=$(echo "${TIMES[$v]}" | median); MEDTAR[$v]=$(echo "${TARTIMES[$v]}" | median); done
for v in "${VS[@]}"; do
    case "$v" in btrfs|tmpfs) tr=kernel ;; sq|sq-devfuse) tr=$(transport "$v") ;; *) tr=/dev/fuse ;; esac
    printf '| %s | %s | %.2f | **%.2f** | %.2f | %.2f |\n' "$v" "$tr" "${MED[$v]}" "$(echo "${MED[$v]} / ${MED[btrfs]}" | bc -l)" \
        "${MEDTAR[$v]}" "$(echo "${MED[$v]} - ${MEDTAR[$v]}" | bc -l)"
done

echo
echo "(a) round trips, medians of $ROUNDS rounds, per call (ns): caller wall clock and CPU; daemon CPU"
echo "    (all threads) and its user/system split (clock ticks, coarse)"
echo
echo "| where | name | wall | caller user | caller sys | daemon CPU | daemon user | daemon sys | errno |"
echo "|---|---|---|---|---|---|---|---|---|"
declare -A RT
for where in sq-devfuse sq btrfs; do
    for name in system.sqzfloor security.capability; do
        cells=""
        for col in 4 5 6 8 9 10; do
            m=$(awk -v w="$where" -v n="$name" -v c="$col" '$2 == w && $3 == n {print $c}' "$RTTROWS" | tr '\n' ' ' | median)
            cells+=" $m |"
            [ "$col" = 4 ] && RT[$where.$name]=$m
        done
        e=$(awk -v w="$where" -v n="$name" '$2 == w && $3 == n {print $7}' "$RTTROWS" | sort -u | tr '\n' ' ')
        wl=$where; [ "$where" = btrfs ] || wl="$where ($(transport "$where"))"
        echo "| $wl | $name |$cells $e|"
    done
done

echo
echo "(b) requests per created entry ($ENTRIES entries), last extract of each variant:"
for v in "${VS[@]}"; do
    case "$v" in overlay|bindfs|bindfs-mt) count_ref "$v" || echo "  ($v: no fuse tracepoint; not counted)" ;; esac
done
echo
ops="LOOKUP GETATTR CREATE MKDIR SYMLINK GETXATTR WRITE SETATTR FLUSH RELEASE OPEN FORGET BATCH_FORGET"
echo "| variant | $(echo $ops | sed 's/ / | /g') | all | synchronous | sync / entry |"
echo "|---|$(for _ in $ops; do printf -- '---|'; done)---|---|---|"
declare -A SYNCREQ
for v in "${VS[@]}"; do
    f=$W/out/counts.$v
    [ -s "$f" ] || continue
    all=$(awk '{s += $2} END {print s}' "$f")
    sync=$(awk -v skip="$SYNC_SKIP" 'index(skip, " " $1 " ") == 0 {s += $2} END {print s}' "$f")
    SYNCREQ[$v]=$sync
    line="| $v |"
    for o in $ops; do line+=" $(awk -v o="$o" '$1 == o {print $2}' "$f" | head -1) |"; done
    printf '%s %s | %s | %.2f |\n' "$line" "$all" "$sync" "$(echo "$sync / $ENTRIES" | bc -l)"
done

echo
echo "Request threads' CPU during the extract (tar start → tar end), medians, per synchronous request:"
echo
echo "| variant | user µs | system µs | all (schedstat) µs |"
echo "|---|---|---|---|"
for v in sq sq-devfuse; do
    [ -s "$W/out/reqcpu.$v" ] && [ -n "${SYNCREQ[$v]:-}" ] || continue
    awk -v hz="$HZ" -v n="${SYNCREQ[$v]}" '{u[NR] = ($4-$1)*1e6/hz/n; k[NR] = ($5-$2)*1e6/hz/n; a[NR] = ($6-$3)/1e3/n}
        function med(x, m,   i, j, t) { for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
            return (m % 2) ? x[(m+1)/2] : (x[m/2] + x[m/2+1]) / 2 }
        END {printf "| %s | %.2f | %.2f | %.2f |\n", v, med(u, NR), med(k, NR), med(a, NR)}' v="$v" "$W/out/reqcpu.$v"
done
echo
echo "Floors, per transport: the synchronous requests of the extract × the bare round trip"
echo "(system.sqzfloor on squeezefs − the same call on btrfs), added to btrfs' time (a FUSE"
echo "filesystem doing its own work at btrfs' cost) and to tmpfs' time (one doing no work at all):"
echo
echo "| transport | bare round trip µs | sync requests | requests × round trip s | btrfs + that s | / btrfs | tmpfs + that s | / btrfs | squeezefs s | / btrfs | squeezefs − (btrfs + that) s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for v in sq-devfuse sq; do
    [ -n "${MED[$v]:-}" ] && [ -n "${SYNCREQ[$v]:-}" ] || continue
    rt=$(echo "(${RT[$v.system.sqzfloor]} - ${RT[btrfs.system.sqzfloor]}) / 1000" | bc -l)
    rr=$(echo "${SYNCREQ[$v]} * $rt / 1000000" | bc -l)
    floor=$(echo "${MED[btrfs]} + $rr" | bc -l)
    hard="-"; hardr="-"
    if [ -n "${MED[tmpfs]:-}" ]; then
        hard=$(printf '%.2f' "$(echo "${MED[tmpfs]} + $rr" | bc -l)")
        hardr=$(printf '%.2f' "$(echo "$hard / ${MED[btrfs]}" | bc -l)")
    fi
    printf '| %s (%s) | %.2f | %s | %.2f | %.2f | **%.2f** | %s | %s | %.2f | **%.2f** | %.2f |\n' "$v" "$(transport "$v")" "$rt" \
        "${SYNCREQ[$v]}" "$rr" "$floor" "$(echo "$floor / ${MED[btrfs]}" | bc -l)" "$hard" "$hardr" \
        "${MED[$v]}" "$(echo "${MED[$v]} / ${MED[btrfs]}" | bc -l)" "$(echo "${MED[$v]} - $floor" | bc -l)"
done
echo
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
