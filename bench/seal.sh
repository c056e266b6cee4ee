#!/usr/bin/env bash
# `runws seal` against the pipe a user would type, at the same zstd level
# (3, as src/seal/compress.rs sets it) on the same tree:
#
#   tar -cf - manifest.json inputs outputs work logs | zstd -T<cores> -3
#   tar --zstd -cf (one zstd thread)
#   runws seal (packs, scans every byte for secrets, hashes the archive,
#               fsyncs archive, sidecar and directory)
#   RUNWS_BEFORE=/path/to/older/runws: that build's seal beside this one's
#
#   bench/seal.sh [SIZE_MB]        (default 300: bench/gen_tree.py's tree)
#
# Every command runs pinned to the first C cores (taskset), for C = 2 and
# C = every core of the machine (once when they are the same); zstd gets
# -T<C> and runws sees C cores. All commands of one repeat run side by side
# in one hyperfine invocation; REPEATS (default 3) invocations, RUNS (default
# 5) runs each. Prints each repeat's median ratios against the pipe, the
# spread (min and max of the ratios over the repeats, and each command's
# min/max time), and the compression ratio (archive bytes / tree bytes).
# The root is on disk (under bench/.work.*). Results: bench/results/seal-*.json.
# Needs: hyperfine, python3, zstd, GNU tar, taskset.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-300}
REPEATS=${REPEATS:-3}
RUNS=${RUNS:-5}
RESULTS=$PWD/bench/results
mkdir -p "$RESULTS"
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

. bench/lib.sh
BIN=$(built --bin runws)

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "zstd: $(zstd -V | head -1)"

r=$WORK/root
"$BIN" run --root "$r" --run-id bench-seal --ports 0 -- true
run=$r/runs/bench-seal
python3 bench/gen_tree.py "$run/work/tree" "$SIZE" | sed 's/^/tree: /'
list="manifest.json inputs outputs work logs"
tree_bytes=$(cd "$run" && du -sb --apparent-size $(for n in $list; do [ -e "$n" ] && echo "$n"; done) | awk '{s += $1} END {print s}')
echo "tree: $tree_bytes bytes packed"
cat $(find "$run" -type f) >/dev/null
a=$WORK/archives
mkdir -p "$a"

cores_list=2
[ "$(nproc)" != 2 ] && cores_list="2 $(nproc)"
for cores in $cores_list; do
  pin="taskset -c 0-$((cores - 1))"
  pipe="$pin sh -c 'cd $run && tar -cf - $list | zstd -T$cores -3 -q -o $a/p.tar.zst'"
  single="$pin sh -c 'cd $run && tar --zstd -cf $a/t.tar.zst $list'"
  seal="$pin $BIN seal --root $r bench-seal --to $a/s --max-bytes 1GiB --max-files 200000"
  cmds=(--prepare "rm -f $a/p.tar.zst" "$pipe" --prepare "rm -f $a/t.tar.zst" "$single"
    --prepare "rm -rf $a/s" "$seal")
  if [ -n "${RUNWS_BEFORE:-}" ]; then
    cmds+=(--prepare "rm -rf $a/b" "$pin $RUNWS_BEFORE seal --root $r bench-seal --to $a/b --max-bytes 1GiB --max-files 200000")
  fi
  echo "== seal on $cores cores (zstd -T$cores -3; runws sees $cores cores), $REPEATS repeats of $RUNS runs"
  files=()
  for rep in $(seq "$REPEATS"); do
    f=$RESULTS/seal-${cores}cores-$rep.json
    hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$f" "${cmds[@]}" >/dev/null 2>&1
    echo " repeat $rep:"
    ratio "$f" 0
    files+=("$f")
  done
  python3 - "${files[@]}" <<'PY'
import json, statistics, sys
ratios, times = {}, {}
for path in sys.argv[1:]:
    res = json.load(open(path))["results"]
    ref = statistics.median(res[0]["times"])
    for i, r in enumerate(res):
        ratios.setdefault(i, []).append(statistics.median(r["times"]) / ref)
        times.setdefault(i, []).extend(r["times"])
names = ["tar | zstd -T", "tar --zstd", "runws seal", "runws seal (before)"]
print(" over the repeats (ratio to the pipe: median [min, max]; time min..max):")
for i in ratios:
    t = times[i]
    print(f"  {names[i]:20s} {statistics.median(ratios[i]):5.2f} [{min(ratios[i]):.2f}, {max(ratios[i]):.2f}]"
          f"  {min(t)*1000:7.0f}..{max(t)*1000:7.0f} ms")
PY
done

echo "== compression ratio (archive bytes / $tree_bytes tree bytes)"
for f in "$a/p.tar.zst" "$a/t.tar.zst" "$a/s/bench-seal.tar.zst" ${RUNWS_BEFORE:+"$a/b/bench-seal.tar.zst"}; do
  [ -e "$f" ] && echo "  $(python3 -c "import os,sys; print(f'{os.path.getsize(sys.argv[1]) / int(sys.argv[2]):.4f}  {os.path.getsize(sys.argv[1])} bytes')" "$f" "$tree_bytes")  ${f#"$a"/}"
done
