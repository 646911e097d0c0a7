#!/usr/bin/env bash
# Writes into a pool whose free space lies in many 1 KiB pieces, against the same write into
# a fresh pool in the same run (crates/pipeline/examples/fragmented_writes.rs).
#
#   bench/fragmented-writes.sh [WORKDIR]        # FRAGMENTS=50000 MIB=64 by default
#
# Prints one row per write size: seconds and MB/s on the fragmented pool and on the fresh
# one, and their ratio (1.0 = fragments cost nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
FRAGMENTS=${FRAGMENTS:-50000}
MIB=${MIB:-64}
if [ -n "${1:-}" ]; then
    WORK=$1
else
    WORK=$(mktemp -d /var/tmp/sqz-frag-bench.XXXXXX)
    trap 'rm -rf "$WORK"' EXIT
fi
cargo build --locked --release -q -p squeezefs-pipeline --example fragmented_writes
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/fragmented_writes
printf '%-12s %-10s %14s %14s %10s\n' "write size" fragments "fragmented MB/s" "fresh MB/s" slowdown
for size in 4096 131072 1048576; do
    out=$("$BIN" --work "$WORK" --fragments "$FRAGMENTS" --mib "$MIB" --write-size "$size")
    OUT="$out" python3 -c "
import json, os
d = json.loads(os.environ['OUT'])
print('%-12d %-10d %14.1f %14.1f %10.2f' % (d['write_size'], d['fragments'], d['fragmented_mb_s'], d['fresh_mb_s'], d['slowdown']))
"
done
