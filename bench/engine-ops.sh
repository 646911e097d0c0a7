#!/usr/bin/env bash
# Engine metadata operations, sector packing and read path, each against a reference
# measured in the same run (see crates/pipeline/examples/engine_ops.rs).
#
#   bench/engine-ops.sh [WORKDIR] [ENTRIES]
#
# Data: the Silesia corpus files ($SQUEEZEFS_CORPUS or ../shared/corpus, zip files) if
# present, else 64 MiB of generated text.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${1:-$(mktemp -d /var/tmp/sqz-engine-ops.XXXXXX)}
ENTRIES=${2:-20000}
CORPUS=${SQUEEZEFS_CORPUS:-$ROOT/../shared/corpus}
FILES=()
if ls "$CORPUS"/*.zip >/dev/null 2>&1 && command -v unzip >/dev/null; then
    mkdir -p "$WORK/corpus"
    for z in "$CORPUS"/*.zip; do unzip -qo "$z" -d "$WORK/corpus"; done
    mapfile -t FILES < <(find "$WORK/corpus" -type f | sort)
else
    echo "engine-ops: no corpus in $CORPUS; using generated text" >&2
fi
cargo build --locked --release -q -p squeezefs-pipeline --example engine_ops
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/engine_ops
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" --work "$WORK" --entries "$ENTRIES" "${FILES[@]}"
rm -rf "$WORK/pool"
