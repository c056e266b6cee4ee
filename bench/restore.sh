#!/usr/bin/env bash
# `runws restore` of a ~400 MB seal against what a user would otherwise
# type: verify the checksum with openssl, then extract with tar --zstd.
#
#   bench/restore.sh [tmpfs|disk|all]
#
# The tree is `bench/gen_tree.py DIR 400` (1,660 files, 421 MB: source-like
# text, logs and random binaries), copied into a run's work/ and sealed
# once with `--max-bytes 1GiB` (about 315 MB of tar.zst). Each repeat is
# one hyperfine invocation running, side by side:
#   1. sh -c 'openssl dgst -sha256 A && tar --zstd -xf A -C X'
#   2. runws restore A --to Y --max-bytes 1GiB        (this build)
#   3. $RUNWS_BEFORE restore A --to Z ...              (when set: an older build)
# with --prepare removing every target and any staging directory left
# beside it. The order of the commands is reversed on every other repeat so
# drift on a shared machine falls on all of them; the script prints each
# repeat's ratios to the reference, then the median ratio and its min and
# max over the repeats. Results: bench/results/restore-<where>-<n>.json.
#
#   RUNS=3 REPEATS=3 RUNWS_BEFORE=/path/to/old/runws bench/restore.sh
#
# "disk" keeps the archive and the targets under bench/.work.* (the
# repository's file system); "tmpfs" under /dev/shm. Neither side syncs the
# extracted files (tar does not; runws syncs the directory it renames into).
# Needs: hyperfine, python3, openssl, GNU tar, zstd.
set -euo pipefail
cd "$(dirname "$0")/.."
section=${1:-all}
RUNS=${RUNS:-3}
REPEATS=${REPEATS:-3}
RESULTS=$PWD/bench/results
mkdir -p "$RESULTS"
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
SHM=$(mktemp -d /dev/shm/runws-bench.XXXXXX)
trap 'rm -rf "$WORK" "$SHM"' EXIT

. bench/lib.sh
BIN=$(built --bin runws)

machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), user $(id -un), load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# One seal, made once on tmpfs and copied to disk.
make_seal() {
  python3 bench/gen_tree.py "$SHM/tree" 400
  "$BIN" run --root "$SHM/seal-root" -- cp -a "$SHM/tree" ./tree
  "$BIN" seal last --root "$SHM/seal-root" --to "$SHM/arch" --max-bytes 1GiB >/dev/null
  rm -rf "$SHM/tree" "$SHM/seal-root"
  ARCHIVE_NAME=$(cd "$SHM/arch" && ls ./*.tar.zst | sed 's|^\./||')
  mkdir -p "$WORK/arch"
  cp "$SHM/arch/$ARCHIVE_NAME" "$SHM/arch/$ARCHIVE_NAME.sha256" "$WORK/arch/"
  echo "archive: $(stat -c %s "$SHM/arch/$ARCHIVE_NAME") bytes"
}

# Prints the median ratio and its spread over the repeats' JSON files.
summary() {
  python3 - "$@" <<'PY'
import json, statistics, sys
rows = {}
for path in sys.argv[1:]:
    res = json.load(open(path))["results"]
    ref = next(r for r in res if r["command"].startswith("sh -c"))
    for r in res:
        name = "reference" if r is ref else ("before" if "BEFORE" in r["command"] else "runws")
        rows.setdefault(name, []).append(statistics.median(r["times"]) / statistics.median(ref["times"]))
for name, ratios in rows.items():
    if name == "reference":
        continue
    print(f"  {name:6} / reference: median ratio {statistics.median(ratios):.2f}  "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f} over {len(ratios)} repeats)")
PY
}

bench() {
  local where=$1 base
  base=$WORK
  [ "$where" = tmpfs ] && base=$SHM
  local a=$base/arch/$ARCHIVE_NAME
  local prepare="sh -c 'rm -rf $base/x $base/y $base/z $base/.y.restore-* $base/.z.restore-*; mkdir $base/x'"
  local ref="sh -c 'openssl dgst -sha256 $a >/dev/null && tar --zstd -xf $a -C $base/x'"
  local new="$BIN restore $a --to $base/y --root $base/root --max-bytes 1GiB"
  local cmds=("$ref" "$new")
  if [ -n "${RUNWS_BEFORE:-}" ]; then
    # The name marks the old build's row in the summary.
    cmds+=("env RUNWS_BENCH=BEFORE $RUNWS_BEFORE restore $a --to $base/z --root $base/root-before --max-bytes 1GiB")
  fi
  echo "== restore ($where): runws restore against openssl dgst + tar --zstd -x, $RUNS runs x $REPEATS repeats"
  local files=()
  for n in $(seq 1 "$REPEATS"); do
    local order=("${cmds[@]}")
    if [ $((n % 2)) = 0 ]; then
      order=()
      for ((i = ${#cmds[@]} - 1; i >= 0; i--)); do order+=("${cmds[$i]}"); done
    fi
    local out=$RESULTS/restore-$where-$n.json
    hyperfine -N --warmup 1 --runs "$RUNS" --prepare "$prepare" --export-json "$out" "${order[@]}" >/dev/null
    echo " repeat $n:"
    ratio "$out" "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print(next(i for i,x in enumerate(r) if x["command"].startswith("sh -c")))' "$out")"
    files+=("$out")
  done
  summary "${files[@]}"
  sh -c "rm -rf $base/x $base/y $base/z"
}

machine
make_seal
case "$section" in
  tmpfs) bench tmpfs ;;
  disk) bench disk ;;
  all) bench tmpfs; bench disk ;;
  *) echo "unknown section $section" >&2; exit 2 ;;
esac
