#!/usr/bin/env bash
# Recompressing a tree after the fact, and background compression's cost to foreground work.
#
# usage: bench/recompress.sh [--tree DIR] [--parts space,fg] [--fg-mb 1024] [--rounds 5]
#                            [--workdir DIR] [--jobs 2]
#
# Runs as root, in one run on one disk (the work dir, default a fresh dir in /var/tmp):
#
# space  a tree (default /var/tmp/rootdir-bench/src/linux-source-6.1 when present, else the
#        corpus files of ../shared/corpus unzipped and copied into a tree of 64 directories)
#        copied with `cp -a` into
#          squeezefs mounted compress=lz4, then `squeezefs recompress -r --to zstd:15
#                    --jobs N` (the conversion's time is the command's: it ends after the
#                    commit that makes the rewrites durable);
#          squeezefs mounted compress=zstd:15 (the same tree written at zstd:15 directly);
#          btrfs on a loop device (sparse file in the work dir) mounted compress=lzo (btrfs has
#                    no lz4), then `btrfs filesystem defrag -r -czstd` + sync; btrfs-progs
#                    without a level option for defrag leaves the level to the kernel
#                    (zstd's default, 3), so btrfs mounted compress=zstd:15 is run too.
#        Write times run until the data is durable: squeezefs until `umount` returned (the daemon
#        flushed and exited: FUSE has no syncfs), btrfs until `sync` returned. Space: data
#        bytes on disk of the tree's files (squeezefs `stats --json` totals; btrfs: distinct
#        data extents + inline data from `btrfs inspect-internal dump-tree`, as compsize
#        counts, bench/btrfs/btrfs_extents.py), and all-in (squeezefs: `du` of the pool less the
#        fresh pool's; btrfs: `filesystem usage` Used less the fresh filesystem's).
# fg     foreground throughput with and without background compression at work: two pools
#        with the same contents, mounted compress=lz4: FG_MB×2 MiB of data to convert under a
#        directory with background_compression=zstd:15, and the foreground's own files outside
#        it (they stay lz4 in both). "with": mounted bg-idle=2s, each round starts once `stats`
#        shows the worker working; "without": bg-idle=off. Per round: write FG_MB MiB (dd
#        bs=1M conv=fsync from tmpfs), then read a file of FG_MB MiB written before, cold
#        (caches dropped). Rounds alternate between the two pools (mounted for the round), so
#        a drifting machine load hits both alike; medians of ROUNDS rounds; also the bytes the
#        worker converted while the dd and the cat ran.
#
# Environment: SQUEEZEFS_BIN (default target/release/squeezefs, built when missing),
# SQUEEZEFS_CORPUS (default ../shared/corpus), BENCH_LOOP_SIZE (default 8G).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=$(command -v python3)
TREE=""
PARTS="space,fg"
FG_MB=1024
ROUNDS=5
JOBS=2
WORK=""
LOOP_SIZE=${BENCH_LOOP_SIZE:-8G}
CORPUS=${SQUEEZEFS_CORPUS:-$REPO/../shared/corpus}

die() { echo "recompress.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case "$1" in
        --tree) TREE=$2; shift 2 ;;
        --parts) PARTS=$2; shift 2 ;;
        --fg-mb) FG_MB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --workdir) WORK=$2; shift 2 ;;
        *) die "unknown argument $1 (see the header of this script)" ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root (mounts, loop devices, drop_caches)"
SQ=${SQUEEZEFS_BIN:-$REPO/target/release/squeezefs}
if [ -z "${SQUEEZEFS_BIN:-}" ]; then
    (cd "$REPO" && cargo build --locked --release -q -p squeezefs) || die "build failed"
fi
[ -x "$SQ" ] || die "no squeezefs binary at $SQ"
WORK=${WORK:-$(mktemp -d /var/tmp/sqz-recompress.XXXXXX)}
mkdir -p "$WORK"
LOG=$WORK/log
MNT=$WORK/mnt
POOL=$WORK/pool
LOOPDEV=""
mkdir -p "$MNT"
log() { echo "[$(date +%T)] $*" | tee -a "$LOG" >&2; }

cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && { "$SQ" umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null; } || true
    [ -n "$LOOPDEV" ] && losetup -d "$LOOPDEV" 2>/dev/null || true
    rm -f "$WORK/btrfs.img" /dev/shm/sqz-recompress-fg.$$
}
trap cleanup EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
since_ms() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }

# ---- the tree --------------------------------------------------------------------------------
if [ -z "$TREE" ]; then
    if [ -d /var/tmp/rootdir-bench/src/linux-source-6.1 ]; then
        TREE=/var/tmp/rootdir-bench/src/linux-source-6.1
    else
        [ -d "$CORPUS" ] || die "no tree given, no Linux tree at /var/tmp/rootdir-bench and no corpus at $CORPUS"
        TREE=$WORK/corpus-tree
        mkdir -p "$TREE/src"
        for z in "$CORPUS"/*.zip; do unzip -q -o "$z" -d "$TREE/src"; done
        for i in $(seq 0 63); do mkdir -p "$TREE/d$i"; cp "$TREE"/src/* "$TREE/d$i/"; done
        rm -rf "$TREE/src"
    fi
fi
[ -d "$TREE" ] || die "$TREE is not a directory"
TREE_FILES=$(find "$TREE" -type f | wc -l)
TREE_BYTES=$(find "$TREE" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
tar cf /dev/null "$TREE" 2>/dev/null || true # into the page cache, outside every timing
log "tree $TREE: $TREE_FILES files, $TREE_BYTES bytes; work dir $WORK; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- squeezefs helpers -----------------------------------------------------------------------
sq_fresh() { # mkfs + mount with options $1
    mountpoint -q "$MNT" && "$SQ" umount "$MNT"
    rm -rf "$POOL"
    "$SQ" mkfs "$POOL" >> "$LOG"
    BASE_DU=$(du -sB1 "$POOL" | cut -f1)
    "$SQ" mount "$POOL" "$MNT" -o "$1"
}
sq_data() { # data bytes on disk and logical bytes of $1 (stats totals)
    "$SQ" stats --json "$1" | "$PY" -c 'import json,sys; t=json.load(sys.stdin)["total"]; print(t["disk_bytes"], t["uncompressed_bytes"])'
}
sq_allin() { echo $(( $(du -sB1 "$POOL" | cut -f1) - BASE_DU )); }
TICK=$(getconf CLK_TCK)
sq_pid() { getfattr --only-values -n user.squeezefs.mount "$MNT" 2>/dev/null | sed -n 's/^pid=//p'; }
sq_cpu() { awk -v t="$TICK" '{ printf "%.1f", ($14 + $15) / t }' "/proc/$1/stat"; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }

ROWS=()
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 |"); }

part_space() {
    local t0 t data logical allin conv pid c0 cpu
    # squeezefs, lz4 then recompress. Write times run until `umount` returned; the daemon's
    # CPU time is taken after `stats` committed everything (just before the unmount)
    sq_fresh compress=lz4
    pid=$(sq_pid); c0=$(sq_cpu "$pid")
    t0=$(now); cp -a "$TREE" "$MNT/tree"; sq_data "$MNT/tree" > /dev/null; cpu=$(minus "$(sq_cpu "$pid")" "$c0")
    "$SQ" umount "$MNT"; t=$(since "$t0")
    allin=$(sq_allin)
    "$SQ" mount "$POOL" "$MNT" -o compress=lz4
    read -r data logical < <(sq_data "$MNT/tree")
    log "squeezefs lz4: write ${t}s cpu ${cpu}s, data $data of $logical, all-in $allin"
    row "squeezefs compress=lz4, cp -a" "$t" "" "$cpu" "$(mb "$data")" "$(awk -v l="$logical" -v d="$data" 'BEGIN { printf "%.3f", l / d }')" "$(mb "$allin")"
    pid=$(sq_pid); c0=$(sq_cpu "$pid")
    t0=$(now)
    "$SQ" recompress -r --to zstd:15 --jobs "$JOBS" "$MNT/tree" | tee -a "$LOG" >&2
    conv=$(since "$t0"); cpu=$(minus "$(sq_cpu "$pid")" "$c0")
    read -r data logical < <(sq_data "$MNT/tree")
    "$SQ" umount "$MNT"
    allin=$(sq_allin)
    log "squeezefs lz4 -> recompress zstd:15: ${conv}s cpu ${cpu}s, data $data, all-in $allin"
    row "squeezefs lz4 → \`recompress -r --to zstd:15 --jobs $JOBS\`" "" "$conv" "$cpu" "$(mb "$data")" "$(awk -v l="$logical" -v d="$data" 'BEGIN { printf "%.3f", l / d }')" "$(mb "$allin")"
    # squeezefs, zstd:15 directly
    sq_fresh compress=zstd:15
    pid=$(sq_pid); c0=$(sq_cpu "$pid")
    t0=$(now); cp -a "$TREE" "$MNT/tree"; sq_data "$MNT/tree" > /dev/null; cpu=$(minus "$(sq_cpu "$pid")" "$c0")
    "$SQ" umount "$MNT"; t=$(since "$t0")
    allin=$(sq_allin)
    "$SQ" mount "$POOL" "$MNT" -o compress=zstd:15
    read -r data logical < <(sq_data "$MNT/tree")
    "$SQ" umount "$MNT"
    log "squeezefs zstd:15: write ${t}s cpu ${cpu}s, data $data, all-in $allin"
    row "squeezefs compress=zstd:15, cp -a" "$t" "" "$cpu" "$(mb "$data")" "$(awk -v l="$logical" -v d="$data" 'BEGIN { printf "%.3f", l / d }')" "$(mb "$allin")"
    # btrfs
    command -v mkfs.btrfs >/dev/null || { log "no mkfs.btrfs: btrfs rows skipped"; return; }
    for mode in lzo-defrag zstd:15; do
        rm -f "$WORK/btrfs.img"
        truncate -s "$LOOP_SIZE" "$WORK/btrfs.img"
        LOOPDEV=$(losetup -f --show "$WORK/btrfs.img")
        mkfs.btrfs -q -f "$LOOPDEV" > /dev/null
        local opt=compress=zstd:15
        [ "$mode" = lzo-defrag ] && opt=compress=lzo
        mount -t btrfs -o "$opt" "$LOOPDEV" "$MNT"
        local base; base=$(btrfs filesystem usage -b "$MNT" | awk '$1 == "Used:" { print $2; exit }')
        t0=$(now); cp -a "$TREE" "$MNT/tree"; sync; t=$(since "$t0")
        btrfs_row() { # label write-time conversion-time
            local used; used=$(btrfs filesystem usage -b "$MNT" | awk '$1 == "Used:" { print $2; exit }')
            umount "$MNT"
            blockdev --flushbufs "$LOOPDEV"
            local j; j=$("$PY" "$REPO/bench/btrfs/btrfs_extents.py" "$LOOPDEV")
            read -r data logical < <("$PY" -c 'import json,sys; t=json.loads(sys.argv[1])["total"]; print(t["disk"], t["referenced"])' "$j")
            log "$1: write $2 conversion $3, data $data of $logical, all-in $((used - base))"
            row "$1" "$2" "$3" "" "$(mb "$data")" "$(awk -v l="$logical" -v d="$data" 'BEGIN { printf "%.3f", l / d }')" "$(mb $((used - base)))"
        }
        if [ "$mode" = lzo-defrag ]; then
            btrfs_row "btrfs compress=lzo, cp -a" "$t" ""
            mount -t btrfs -o "$opt" "$LOOPDEV" "$MNT"
            t0=$(now); btrfs filesystem defrag -r -czstd "$MNT/tree"; sync; conv=$(since "$t0")
            btrfs_row "btrfs lzo → \`btrfs filesystem defrag -r -czstd\`" "" "$conv"
        else
            btrfs_row "btrfs compress=zstd:15, cp -a" "$t" ""
        fi
        losetup -d "$LOOPDEV"; LOOPDEV=""
        rm -f "$WORK/btrfs.img"
    done
}

# ---- foreground throughput -------------------------------------------------------------------
FG_ROWS=()
bg_field() { "$SQ" stats --json "$MNT/work" | "$PY" -c "import json,sys; b=json.load(sys.stdin)['background']; print(b['status']['$1'] if b else 0)"; }
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
part_fg() {
    local src=/dev/shm/sqz-recompress-fg.$$
    # text-like data from the tree (the tree's files concatenated, repeated as needed)
    : > "$src"
    while [ "$(stat -c %s "$src")" -lt $((FG_MB << 20)) ]; do
        { find "$TREE" -type f -size +8k -print0 | head -z -n 4000 | xargs -0 cat >> "$src"; } || true
    done
    truncate -s $((FG_MB << 20)) "$src"
    # two pools with the same contents: work/ (2 × FG_MB MiB to convert) and fg/read-me
    for mode in without with; do
        POOL=$WORK/pool-$mode
        sq_fresh "compress=lz4,bg-idle=off"
        mkdir "$MNT/work" "$MNT/fg"
        "$SQ" prop set "$MNT/work" background_compression=zstd:15
        for i in 1 2; do cp "$src" "$MNT/work/pending$i"; done
        cp "$src" "$MNT/fg/read-me"
        "$SQ" umount "$MNT"
    done
    # rounds alternate between the pools (the machine's load drifts): "without" mounts with
    # bg-idle=off, "with" with bg-idle=2s and starts once the worker is working
    declare -A W R D
    for round in $(seq 1 "$ROUNDS"); do
        for mode in without with; do
            POOL=$WORK/pool-$mode
            local idle=off
            [ "$mode" = with ] && idle=2s
            "$SQ" mount "$POOL" "$MNT" -o "compress=lz4,bg-idle=$idle"
            if [ "$mode" = with ]; then
                local t0; t0=$(now)
                until [ "$(bg_field state)" = working ]; do
                    sleep 0.5
                    [ "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { print (b - a > 120) }')" = 1 ] && die "background compression never started working"
                done
            fi
            local c0 c1 c2 c3 t1 w r
            c0=$(bg_field session_logical)
            t1=$(now)
            dd if="$src" of="$MNT/fg/w$round" bs=1M conv=fsync status=none
            w=$(awk -v s="$(since_ms "$t1")" -v m="$FG_MB" 'BEGIN { printf "%.1f", m * 1.048576 / s }')
            c1=$(bg_field session_logical)
            sync; echo 3 > /proc/sys/vm/drop_caches
            c2=$(bg_field session_logical)
            t1=$(now)
            cat "$MNT/fg/read-me" > /dev/null
            r=$(awk -v s="$(since_ms "$t1")" -v m="$FG_MB" 'BEGIN { printf "%.1f", m * 1.048576 / s }')
            c3=$(bg_field session_logical)
            rm -f "$MNT/fg/w$round"
            W[$mode]="${W[$mode]:-} $w"
            R[$mode]="${R[$mode]:-} $r"
            D[$mode]=$(( ${D[$mode]:-0} + c1 - c0 + c3 - c2 ))
            log "fg $mode round $round: write $w MB/s, read $r MB/s, converted during them $(( c1 - c0 + c3 - c2 )) B (load $(cut -d' ' -f1 /proc/loadavg))"
            "$SQ" umount "$MNT"
        done
    done
    for mode in without with; do
        local idle=off
        [ "$mode" = with ] && idle=2s
        # shellcheck disable=SC2086
        FG_ROWS+=("| $mode background compression (bg-idle=$idle) | $(median ${W[$mode]}) | $(median ${R[$mode]}) |${W[$mode]} |${R[$mode]} | $(mb "${D[$mode]}") |")
    done
    rm -f "$src"
}

[[ ",$PARTS," == *",space,"* ]] && part_space
[[ ",$PARTS," == *",fg,"* ]] && part_fg

echo
echo "# bench/recompress.sh $(date -u '+%F %H:%M UTC'), $(nproc) cores, kernel $(uname -r), $(btrfs --version 2>/dev/null | head -1)"
echo "# tree $TREE: $TREE_FILES files, $(mb "$TREE_BYTES") MB"
if [ ${#ROWS[@]} -gt 0 ]; then
    echo
    echo "| filesystem, step | write s | conversion s | daemon CPU s | data on disk MB | ratio | all-in MB |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
fi
if [ ${#FG_ROWS[@]} -gt 0 ]; then
    echo
    echo "| foreground ($FG_MB MiB, median of $ROUNDS) | write MB/s | cold read MB/s | writes | reads | converted during them MB |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${FG_ROWS[@]}"
fi
