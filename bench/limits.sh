#!/usr/bin/env bash
# Benchmark for `runws run --memory/--pids/--cpu`: what a run's control
# group costs at start and end, measured side by side in one interleaved
# invocation (bench/interleave.py) with
# a plain `runws run -- /bin/true` (the same run without a group); then
# bench/cgroup_floor.py prints what the same groups cost without any tool
# (mkdir, the limits, the child moved in before its exec, rmdir): the
# floor of the difference.
# Then the same with a pause of 0.1 s before each run: on cgroup v1 moving
# another process into a group waits for an RCU grace period unless such
# moves are frequent, which only a spaced run shows.
# The root is on tmpfs, so the manifest's fsyncs do not hide the group's
# cost. Needs root (cgroup v1 or a writable v2 hierarchy) and python3.
#
#   bench/limits.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-300}
SHM=$(mktemp -d /dev/shm/runws-bench-limits.XXXXXX)
trap 'rm -rf "$SHM"' EXIT
. bench/lib.sh
BIN=$(built --bin runws)

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), user $(id -un), load $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== run -- /bin/true, run --memory 1GiB --pids 1000 --cpu 2 -- /bin/true, ($rounds rounds, interleaved, tmpfs root)"
python3 bench/interleave.py "$rounds" \
  "$BIN run --root $SHM/root --ports 1 -- /bin/true" \
  "$BIN run --root $SHM/root --ports 1 --memory 1GiB --pids 1000 --cpu 2 -- /bin/true"
echo "== the same, each run 0.1 s after the last (a quiet machine, as a cron job meets it; $((rounds / 4)) rounds)"
INTERLEAVE_GAP=0.1 python3 bench/interleave.py "$((rounds / 4))" \
  "$BIN run --root $SHM/root --ports 1 -- /bin/true" \
  "$BIN run --root $SHM/root --ports 1 --memory 1GiB --pids 1000 --cpu 2 -- /bin/true"
echo "== the kernel's own price of the same groups (bench/cgroup_floor.py $rounds)"
python3 bench/cgroup_floor.py "$rounds"
