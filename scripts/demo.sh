#!/usr/bin/env bash
# The README's main-job command: build squeezefs, create a pool in the default location,
# mount it, write sample data, and show what compression did.
#
#   bash scripts/demo.sh            # set up, mount, show stats; leaves the mount live
#   squeezefs umount "$MNT"         # (printed at the end) unmounts and flushes
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

cargo build --release --locked -p squeezefs
BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/squeezefs"

POOL="${SQUEEZEFS_POOL:-$HOME/.local/share/squeezefs/demo-pool}"
MNT="${SQUEEZEFS_MNT:-/tmp/squeezefs-demo}"
SPEC="${SQUEEZEFS_COMPRESS:-zstd:3}"

if mountpoint -q "$MNT"; then "$BIN" umount "$MNT"; fi
mkdir -p "$(dirname "$POOL")" "$MNT"
if [ ! -e "$POOL" ]; then
    "$BIN" mkfs "$POOL"
fi
"$BIN" mount "$POOL" "$MNT" -o "compress=$SPEC"
echo "mounted $POOL on $MNT with compress=$SPEC"

# Sample data: text-like (system docs), binaries, and random bytes.
mkdir -p "$MNT/sample"
cp -r /usr/share/common-licenses "$MNT/sample/licenses" 2>/dev/null || true
cp /usr/bin/bash "$MNT/sample/bash"
if [ -d /usr/share/doc ]; then
    tar -C /usr/share -cf - doc 2>/dev/null | head -c 200000000 > "$MNT/sample/doc.tar" || true
fi
head -c 16M /dev/urandom > "$MNT/sample/random.bin"
sync -f "$MNT"

df -h "$MNT"
"$BIN" stats "$MNT"
cmp /usr/bin/bash "$MNT/sample/bash" && echo "read back: bash binary identical"
echo
echo "The filesystem stays mounted at $MNT. Unmount with:  $BIN umount $MNT   (or: umount $MNT)"
