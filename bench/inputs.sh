#!/usr/bin/env bash
# `runws run --input DIR -- /bin/true` with DIR of many small files, against
# what a user would otherwise type for a copy and a fingerprint:
#
#   sh -c 'cp -a DIR X && tar -cf - -C DIR . | sha256sum'
#
#   bench/inputs.sh [small10k|small100k|all]
#
# Trees are made by bench/gen_small.py (deterministic; 10,000 files are
# about 65 MB, 100,000 about 650 MB, 100 files a directory; sizes in its
# header). Each section runs on disk (source, copy and root under
# bench/.work.*, the repository's file system) and on tmpfs (/dev/shm).
# Before every timed run the copy and the roots are removed and the file
# system synced, so no run pays for another's dirty pages (runws syncs its
# inputs once before recording them; cp -a does not sync, the third command
# shows what a sync costs it). Every section is REPEATS (default 3)
# hyperfine invocations, all commands side by side in each; printed: each
# command's median, min, max and stddev per repeat, the ratio of medians to
# the reference per repeat, and the median ratio with its min and max over
# the repeats. RUNWS_BEFORE=/path/to/older/runws adds that build beside
# this one in the same invocations. Results: bench/results/inputs-*.json.
# WHERE="disk" or WHERE="tmpfs" runs one of the two. Needs: hyperfine,
# python3, GNU tar, coreutils.
set -euo pipefail
cd "$(dirname "$0")/.."
section=${1:-all}
REPEATS=${REPEATS:-3}
WHERE=${WHERE:-disk tmpfs}
RESULTS=$PWD/bench/results
mkdir -p "$RESULTS"
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
SHM=$(mktemp -d /dev/shm/runws-bench.XXXXXX)
trap 'rm -rf "$WORK" "$SHM"' EXIT

. bench/lib.sh
BIN=$(built --bin runws)

machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), disk fs $(df -T "$WORK" | awk 'NR==2 {print $2}'), load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# `spread FILE...`: per repeat, each command's median/min/max/stddev and
# its ratio to the first command; then the median ratio over the repeats
# with its min and max.
spread() {
  python3 - "$@" <<'PY'
import json, statistics, sys
ratios = {}
for i, path in enumerate(sys.argv[1:], 1):
    data = json.load(open(path))["results"]
    ref = statistics.median(data[0]["times"])
    print(f"  repeat {i}:")
    for r in data:
        t = r["times"]
        med = statistics.median(t)
        sd = statistics.stdev(t) if len(t) > 1 else 0.0
        ratios.setdefault(r["command"], []).append(med / ref)
        print(f"    median {med:8.3f} s  min {min(t):8.3f}  max {max(t):8.3f}  sd {sd:6.3f}  ratio {med/ref:5.2f}  {r['command']}")
print("  over the repeats (ratio of medians to the first command):")
for c, rs in ratios.items():
    print(f"    median ratio {statistics.median(rs):5.2f}  min {min(rs):5.2f}  max {max(rs):5.2f}  {c}")
PY
}

# `measure NAME N RUNS WARMUP`: the tree of N files on disk and on tmpfs.
measure() {
  local name=$1 n=$2 runs=$3 warmup=$4
  machine
  for where in $WHERE; do
    local base=$WORK
    [ "$where" = tmpfs ] && base=$SHM
    local src=$base/src-$n x=$base/copy
    python3 bench/gen_small.py "$src" "$n"
    echo "== $name ($where): runws run --input DIR ($n small files) -- /bin/true against cp -a DIR X && tar -c DIR | sha256sum"
    local ref="sh -c 'cp -a $src $x && tar -cf - -C $src . | sha256sum >/dev/null'"
    local cmds=("$ref")
    [ "$n" -le 10000 ] && cmds+=("sh -c 'cp -a $src $x && sync -f $x && tar -cf - -C $src . | sha256sum >/dev/null'")
    cmds+=("$BIN run --root $base/root-new --ports 1 --input $src -- /bin/true")
    [ -n "${RUNWS_BEFORE:-}" ] && cmds+=("$RUNWS_BEFORE run --root $base/root-old --ports 1 --input $src -- /bin/true")
    local files=()
    for i in $(seq "$REPEATS"); do
      local out=$RESULTS/inputs-$name-$where-$i.json
      hyperfine -N --warmup "$warmup" --runs "$runs" --export-json "$out" \
        --prepare "sh -c 'rm -rf $x $base/root-new $base/root-old && sync'" \
        "${cmds[@]}" >/dev/null
      files+=("$out")
    done
    spread "${files[@]}"
    rm -rf "$src" "$x" "$base/root-new" "$base/root-old"
  done
}

small10k() { measure small10k 10000 5 1; }
small100k() { measure small100k 100000 3 0; }

case "$section" in
  small10k) small10k ;;
  small100k) small100k ;;
  all) small10k; small100k ;;
  *) echo "unknown section $section" >&2; exit 2 ;;
esac
