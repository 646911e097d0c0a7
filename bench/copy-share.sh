#!/usr/bin/env bash
# cp of a large file inside a mount (shared records, copy_file_range) against the same cp
# from outside it, per compression spec and per cp (issue 51).
#
#   bash bench/copy-share.sh [--size 1G] [--specs "none zstd:1 zstd:3"] [--cp "/usr/bin/cp ..."]
#
# Per spec, on a fresh pool (`squeezefs mkfs POOL`, its device file in the pool directory,
# on BENCH_WORKDIR, default /var/tmp): `cp SRC MNT/a` from the host filesystem, then, per
# cp binary (default /bin/cp; add others with --cp, e.g. a newer coreutils unpacked with
# `dpkg-deb -x`), `cp MNT/a MNT/b` with its default flags and, for each one, with
# `--sparse=never`; each copy timed with the `sync -d` of its target and, under strace,
# counted in copy_file_range calls. Then 1 MiB overwritten in the middle of the copy made
# by the first cp with `--sparse=never` (with fsync; coreutils 9.1 shares with that flag,
# 9.10 does not). Pool bytes are statfs's used bytes (a shared record counted once). Prints
# one row per copy: seconds, ÷ the copy from outside, the pool's growth (bytes and % of the
# file), copy_file_range calls; then the growth after the 1 MiB change, and whether `a`
# still reads back as the source. SRC: the Silesia files of CORPUS (a directory of .zip,
# default ../shared/corpus) repeated to --size, else a text-like generated file.
# Environment: SQUEEZEFS_BIN (default: a release build of this tree), BENCH_WORKDIR.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=1G
SPECS="none zstd:1 zstd:3"
CPS=/bin/cp
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE=$2; shift 2 ;;
        --specs) SPECS=$2; shift 2 ;;
        --cp) CPS="$CPS $2"; shift 2 ;;
        *) echo "copy-share: unknown argument '$1' (accepted: --size SIZE, --specs \"SPEC ...\", --cp PATH)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "copy-share: run as root (mounts)" >&2; exit 1; }
command -v strace >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
BIN=${SQUEEZEFS_BIN:-}
if [ -z "$BIN" ]; then
    cargo build --release --locked -q -p squeezefs
    BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/squeezefs
fi
BYTES=$(numfmt --from=iec "$SIZE")
W=$(mktemp -d "${BENCH_WORKDIR:-/var/tmp}/sqz-copy.XXXXXX")
MNT=$W/mnt
cleanup() { mountpoint -q "$MNT" && "$BIN" umount "$MNT" >/dev/null 2>&1; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$MNT" "$W/corpus"

CORPUS=${CORPUS:-../shared/corpus}
if ls "$CORPUS"/*.zip >/dev/null 2>&1; then
    for z in "$CORPUS"/*.zip; do unzip -oq "$z" -d "$W/corpus"; done
    src_kind="Silesia files of $CORPUS, repeated"
    while [ "$(stat -c %s "$W/src" 2>/dev/null || echo 0)" -lt "$BYTES" ]; do cat "$W"/corpus/* >> "$W/src"; done
else
    src_kind="generated text"
    python3 - "$W/src" "$BYTES" <<'PY'
import random, sys
words = [b"squeeze", b"record", b"copy", b"share", b"extent", b"zstd", b"lz4", b"\n"]
r = random.Random(51)
line = b" ".join(r.choice(words) for _ in range(4096))
with open(sys.argv[1], "wb") as f:
    left = int(sys.argv[2])
    while left > 0:
        f.write(line[:left]); left -= len(line)
PY
fi
truncate -s "$BYTES" "$W/src"
SUM=$(sha256sum < "$W/src" | cut -c1-64)
used() { stat -f -c '%b %f %S' "$MNT" | awk '{ printf "%.0f\n", ($1 - $2) * $3 }'; }
timed() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
cfr_calls() { grep -c 'copy_file_range(' "$1" || true; }

echo "source: $src_kind, $BYTES bytes; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-34s %8s %8s %12s %8s %6s\n' spec copy seconds ÷out growth_B growth% cfr
for spec in $SPECS; do
    rm -rf "$W/pool"
    "$BIN" mkfs "$W/pool" >/dev/null
    "$BIN" mount "$W/pool" "$MNT" -o "compress=$spec"
    sync; echo 3 > /proc/sys/vm/drop_caches
    u0=$(used)
    t_out=$(timed sh -c "cp '$W/src' '$MNT/a' && sync -d '$MNT/a'")
    u1=$(used)
    printf '%-8s %-34s %8.3f %8s %12d %8.2f %6s\n' "$spec" "from outside" "$t_out" 1.00 $((u1 - u0)) \
        "$(echo "100 * ($u1 - $u0) / $BYTES" | bc -l)" -
    n=0
    for cp in $CPS; do
        ver=$("$cp" --version | head -1 | awk '{ print $NF }')
        for flags in "" "--sparse=never"; do
            n=$((n + 1))
            before=$(used)
            t=$(timed sh -c "strace -f -o '$W/st$n' -e trace=copy_file_range '$cp' $flags '$MNT/a' '$MNT/b$n' && sync -d '$MNT/b$n'")
            after=$(used)
            printf '%-8s %-34s %8.3f %8.3f %12d %8.2f %6s\n' "$spec" "cp $ver ${flags:-(defaults)}" "$t" \
                "$(echo "$t / $t_out" | bc -l)" $((after - before)) \
                "$(echo "100 * ($after - $before) / $BYTES" | bc -l)" "$(cfr_calls "$W/st$n")"
        done
    done
    # the change goes into b2, the first cp's copy with --sparse=never (with the default
    # /bin/cp, Debian 12's 9.1, a shared copy; check its cfr column): 1 MiB of the
    # source's own first bytes, as compressible as the rest, so the growth is the stored
    # size of the records it replaces
    before=$(used)
    dd if="$W/src" of="$MNT/b2" bs=1M seek=$((BYTES / 2 >> 20)) count=1 conv=notrunc,fsync status=none
    after=$(used)
    same=$([ "$(sha256sum < "$MNT/a" | cut -c1-64)" = "$SUM" ] && echo yes || echo NO)
    echo "$spec: 1 MiB changed in the middle of b2: pool grew $((after - before)) bytes; a reads back as the source: $same"
    "$BIN" umount "$MNT"
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
