#!/usr/bin/env bash
# Benchmarks for `runws reap`, side by side with what a user would type
# instead, in one hyperfine invocation per section (results in
# bench/results/reap-*.json; BENCHMARKS.md summarises them by hand).
#
#   bench/reap.sh [scratch|procs|all]
#
# scratch: N abandoned runs (bench/gen_runs.py: 9 directories, 5 small
#   files and a symlink each; default N=10000) reaped, against
#   `rm -rf */home */tmp */cache */run */bin` of the same scratch, with the
#   root on the repository's file system and on tmpfs (/dev/shm).
# procs: M abandoned runs (default 1000) reaped with the host as it is, and
#   with P extra idle processes (default 1000 `sleep`s, killed at the end):
#   the ratio of the two is what the host's processes cost a reap.
#
# RUNWS_BEFORE=/path/to/older/runws adds that build beside this one in the
# same invocations; RUNWS_BIN=/path uses that build instead of building.
# REPEATS (default 5) is hyperfine's --runs.
set -euo pipefail
cd "$(dirname "$0")/.."
section=${1:-all}
N=${N:-10000}
M=${M:-1000}
P=${P:-1000}
REPEATS=${REPEATS:-5}
RESULTS=$PWD/bench/results
mkdir -p "$RESULTS"
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
SHM=$(mktemp -d /dev/shm/runws-bench.XXXXXX)
SLEEPERS=()
cleanup() {
  if [ ${#SLEEPERS[@]} -gt 0 ]; then kill "${SLEEPERS[@]}" 2>/dev/null || true; fi
  rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT

. bench/lib.sh
BIN=${RUNWS_BIN:-$(built --bin runws)}
BINS=("$BIN")
if [ -n "${RUNWS_BEFORE:-}" ]; then BINS+=("$RUNWS_BEFORE"); fi

machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $(ls /proc | grep -c '^[0-9]') processes"
}

# `spread FILE` prints each command's median, min, max and stddev.
spread() {
  python3 - "$1" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"  median {r['median']*1000:9.1f} ms  min {r['min']*1000:9.1f} ms  max {r['max']*1000:9.1f} ms  stddev {r['stddev']*1000:7.1f} ms  {r['command']}")
PY
}

# `fresh DIR N` makes N abandoned runs under DIR once; each timed command
# gets a copy (cp -a), made in --prepare and synced, so no run is timed
# against a warmer or emptier tree than another.
scratch() {
  machine
  for where in disk tmpfs; do
    local base=$WORK/base-$N r=$WORK/root
    [ "$where" = tmpfs ] && { base=$SHM/base-$N; r=$SHM/root; }
    [ -d "$base" ] || python3 bench/gen_runs.py "$base" "$N"
    local prep="sh -c 'rm -rf $r && cp -a $base $r && sync'"
    local args=(--prepare "$prep" "sh -c 'cd $r/runs && rm -rf */home */tmp */cache */run */bin'")
    for b in "${BINS[@]}"; do args+=(--prepare "$prep" "$b reap --root $r --grace 0s"); done
    echo "== reap ($where root): $N abandoned runs, against rm -rf of the same scratch"
    hyperfine -N --runs "$REPEATS" --export-json "$RESULTS/reap-$where.json" "${args[@]}" >/dev/null
    ratio "$RESULTS/reap-$where.json" 0
    spread "$RESULTS/reap-$where.json"
    rm -rf "$r"
  done
}

procs() {
  local base=$SHM/base-$M r=$SHM/root
  [ -d "$base" ] || python3 bench/gen_runs.py "$base" "$M"
  local prep="sh -c 'rm -rf $r && cp -a $base $r'"
  for load in host extra; do
    if [ "$load" = extra ]; then
      for _ in $(seq "$P"); do sleep 3600 & SLEEPERS+=($!); done
    fi
    machine
    echo "== reap (tmpfs root): $M abandoned runs, $load processes"
    local args=()
    for b in "${BINS[@]}"; do args+=(--prepare "$prep" "$b reap --root $r --grace 0s"); done
    hyperfine -N --runs "$REPEATS" --export-json "$RESULTS/reap-procs-$load.json" "${args[@]}" >/dev/null
    spread "$RESULTS/reap-procs-$load.json"
  done
  kill "${SLEEPERS[@]}" 2>/dev/null || true
  SLEEPERS=()
  echo "  with $P extra processes against without (1.00: independent of the host's processes):"
  python3 - "$RESULTS/reap-procs-host.json" "$RESULTS/reap-procs-extra.json" <<'PY'
import json, statistics, sys
host, extra = (json.load(open(f))["results"] for f in sys.argv[1:])
for h, e in zip(host, extra):
    print(f"  ratio {statistics.median(e['times'])/statistics.median(h['times']):5.2f}  {h['command']}")
PY
  rm -rf "$r"
}

case "$section" in
  scratch) scratch ;;
  procs) procs ;;
  all) scratch; procs ;;
  *) echo "unknown section $section" >&2; exit 2 ;;
esac
