#!/usr/bin/env bash
# Benchmarks for the index of runs: `show last`, `ls --limit 20`,
# `ls --job J` and a full `ls --json` over 10, 10,000 and 100,000 runs, and
# what the index's one more write costs a plain `runws run`.
#
#   bench/index.sh [ls|startup|all] [SIZES...]     (default sizes: 10 10000 100000)
#
# The runs are made by bench/gen_runs.py (finished runs of job `bench`,
# ~20 KB each on disk), which writes no index: the first command of the
# new build rebuilds it from the manifests (measured apart, as "first"),
# and every command after it reads the index (the "steady" figures). One
# run of job `other` is added by `runws run` on top, for `ls --job other`.
# The roots live on tmpfs (/dev/shm): what is measured is the reading of
# manifests, which the page cache serves either way.
#
# RUNWS_BEFORE=/path/to/older/runws measures that build beside this one in
# the same hyperfine invocation (it has no --limit: its figure for
# `ls --limit 20` is its plain `ls`, which a user would cut with `tail`).
# RUNWS_BIN=/path/to/runws skips the build.
# Results: bench/results/index-*.json. Needs: hyperfine, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
section=${1:-all}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10 10000 100000)
RESULTS=$PWD/bench/results
mkdir -p "$RESULTS"
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
SHM=$(mktemp -d /dev/shm/runws-bench.XXXXXX)
trap 'rm -rf "$WORK" "$SHM"' EXIT

. bench/lib.sh
BIN=${RUNWS_BIN:-$(built --bin runws)}
BEFORE=${RUNWS_BEFORE:-}

machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# `spread FILE`: min, max and stddev of each command's times.
spread() {
  python3 - "$1" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"    min {r['min']*1000:9.3f} ms  max {r['max']*1000:9.3f} ms  sd {r['stddev']*1000 if r['stddev'] else 0:8.3f} ms  {r['command']}")
PY
}

# `pair NAME RUNS NEW_ARGS [BEFORE_ARGS]`: the new build first, the old
# beside it when RUNWS_BEFORE is set; ratios against the new build.
pair() {
  local name=$1 runs=$2 new=$3 old=${4:-$3}
  local cmds=("$BIN $new")
  [ -n "$BEFORE" ] && cmds+=("$BEFORE $old")
  hyperfine -N --warmup 1 --runs "$runs" --export-json "$RESULTS/index-$name.json" "${cmds[@]}" >/dev/null 2>&1
  ratio "$RESULTS/index-$name.json" 0
  spread "$RESULTS/index-$name.json"
}

# Lists with the new build until the index carries a stamp (ROOT/runs
# unchanged for a moment): the steady state.
settle() {
  local root=$1 i
  for i in $(seq 100); do
    "$BIN" ls --root "$root" --limit 1 >/dev/null
    tail -n1 "$root/runs.index" | grep -q '^stamp ' && return 0
    sleep 0.05
  done
  echo "no stamp in $root/runs.index" >&2
  return 1
}

ls_section() {
  machine
  for n in "${sizes[@]}"; do
    local root=$SHM/runs-$n
    echo "== $n runs (root on tmpfs)"
    python3 bench/gen_runs.py "$root" "$n" succeeded
    "$BIN" run --root "$root" --job other --ports 1 -- /bin/true
    local runs=10
    [ "$n" -ge 100000 ] && runs=3
    echo "  first show last (rebuilds the index from $n manifests):"
    local cmds=("$BIN show --root $root last")
    [ -n "$BEFORE" ] && cmds+=("$BEFORE show --root $root last")
    hyperfine -N --runs "$runs" --prepare "rm -f $root/runs.index" \
      --export-json "$RESULTS/index-first-$n.json" "${cmds[@]}" >/dev/null 2>&1
    ratio "$RESULTS/index-first-$n.json" 0
    spread "$RESULTS/index-first-$n.json"
    "$BIN" ls --root "$root" --limit 1 >/dev/null
    sleep 0.2
    settle "$root"
    local steady=$((runs * 10))
    # The old build reads every manifest each time: fewer repeats at 100k.
    [ "$n" -ge 100000 ] && [ -n "$BEFORE" ] && steady=5
    echo "  show last:"
    pair "show-$n" "$steady" "show --root $root last"
    echo "  ls --newest-first --limit 20 (old build: ls):"
    pair "limit-$n" "$steady" "ls --root $root --newest-first --limit 20" "ls --root $root"
    echo "  ls --job other (one run of $((n + 1))):"
    pair "job-$n" "$steady" "ls --root $root --job other"
    echo "  ls --json (every run):"
    pair "full-$n" "$runs" "ls --root $root --json"
    echo "  after one more run, the next show last (checks runs/, reads the one new manifest):"
    local cmd="$BIN show --root $root last"
    hyperfine -N --runs "$runs" --prepare "$BIN run --root $root --ports 1 -- /bin/true" \
      --export-json "$RESULTS/index-behind-$n.json" "$cmd" >/dev/null 2>&1
    ratio "$RESULTS/index-behind-$n.json" 0
    spread "$RESULTS/index-behind-$n.json"
    rm -rf "$root"
  done
}

startup() {
  machine
  if [ -z "$BEFORE" ]; then
    echo "startup: set RUNWS_BEFORE to an older build to compare"
    return
  fi
  for where in disk tmpfs; do
    local root=$WORK/root-startup
    [ "$where" = tmpfs ] && root=$SHM/root-startup
    echo "== startup ($where root): runws run -- /bin/true, old build against this one, interleaved"
    for repeat in 1 2 3; do
      python3 bench/interleave.py 300 "$BEFORE run --root $root-old --ports 1 -- /bin/true" \
        "$BIN run --root $root --ports 1 -- /bin/true"
    done
  done
}

case "$section" in
  ls) ls_section ;;
  startup) startup ;;
  all) ls_section; startup ;;
  *) echo "unknown section $section" >&2; exit 2 ;;
esac
