#!/usr/bin/env bash
# Crash safety under SIGKILL, long version of the crash_kill test.
#
#   bench/crash-kill.sh [KILLS] [SEED]
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
start=$(date +%s)
set +e
cargo test --locked -p squeezefs-pipeline --test crash_kill -- \
    --nocapture --exact sigkill_at_random_points_keeps_acknowledged_data
status=$?
set -e
echo "crash-kill: $KILLS kills, exit status $status, $(( $(date +%s) - start )) s"
exit "$status"
