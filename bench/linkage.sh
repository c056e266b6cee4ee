#!/usr/bin/env bash
# Start-up of several builds of runws side by side, in one interleaved run:
# `runws run -- /bin/true` for each binary given (its own root for each),
# with the root on disk and then on tmpfs, beside `env -i /bin/true`.
#
#   bench/linkage.sh ROUNDS BIN...
#
# Used to compare ways of linking runws (static, static-pie, dynamic PIE);
# the first binary is the reference for the ratios runws-to-runws.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=$1
shift
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
SHM=$(mktemp -d /dev/shm/runws-bench.XXXXXX)
trap 'rm -rf "$WORK" "$SHM"' EXIT
for base in "$WORK" "$SHM"; do
  echo "== root on $(df -T "$base" | awk 'NR==2 {print $2}'): $(nproc) cores, kernel $(uname -r)"
  cmds=("env -i /bin/true")
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    cmds+=("$bin run --root $base/root$i -- /bin/true")
  done
  python3 bench/interleave.py "$rounds" "${cmds[@]}"
done
