#!/usr/bin/env bash
# Crash safety under SIGKILL, long version of the crash_kill test.
#
#   bench/crash-kill.sh [KILLS] [SEED]
#
# Then the same number of power cuts (crates/pipeline/tests/crash_power.rs: device writes
# since the last fdatasync dropped / kept / torn at sector granularity); set POWER_CUTS=0
# to skip them.
#
# Runs crates/pipeline/tests/crash_kill.rs with KILLS kill points (default 500): a child
# process writes files through the engine (mixed sizes, random offsets, fsyncs), logs what
# fsync acknowledged, and is SIGKILLed at random moments; after each kill the pool is
# reopened and every acknowledged byte, every checksum (scrub) and the metadata (fsck) are
# checked. SEED replays a run (the test prints the seed it used).
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${1:-500}
case "$KILLS" in ''|*[!0-9]*) echo "usage: $0 [KILLS] [SEED]  (KILLS: a positive number, not '$KILLS')" >&2; exit 2;; esac
export SQUEEZEFS_CRASH_KILLS=$KILLS
if [ -n "${2:-}" ]; then
    case "$2" in *[!0-9]*) echo "SEED must be a number, not '$2'" >&2; exit 2;; esac
    export SQUEEZEFS_CRASH_SEED=$2
fi
export SQUEEZEFS_POWER_CUTS=${POWER_CUTS:-$KILLS}
start=$(date +%s)
set +e
cargo test --locked -p squeezefs-pipeline --test crash_kill -- \
    --nocapture --exact sigkill_at_random_points_keeps_acknowledged_data
status=$?
echo "crash-kill: $KILLS kills, exit status $status, $(( $(date +%s) - start )) s"
if [ "$status" = 0 ] && [ "$SQUEEZEFS_POWER_CUTS" != 0 ]; then
    start=$(date +%s)
    cargo test --locked -p squeezefs-pipeline --test crash_power -- --nocapture
    status=$?
    echo "crash-kill: $SQUEEZEFS_POWER_CUTS power cuts, exit status $status, $(( $(date +%s) - start )) s"
fi
set -e
exit "$status"
