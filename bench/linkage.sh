#!/usr/bin/env bash
# Start-up of several builds of runws side by side, in one interleaved run:
# `runws run -- /bin/true` for each binary given (its own root for each),
# with the root on disk and then on tmpfs, beside `env -i /bin/true`; with
# SANDBOX=1 also `runws run --sandbox --net none -- /bin/true` on tmpfs,
# beside bwrap.
#
#   bench/linkage.sh ROUNDS BIN...
#   SANDBOX=1 bench/linkage.sh ROUNDS BIN...
#
# Used to compare ways of linking runws (static, static-pie, dynamic PIE)
# and a build against the one before a change; the first binary is the
# reference for the ratios runws-to-runws.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=$1
shift
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
SHM=$(mktemp -d /dev/shm/runws-bench.XXXXXX)
trap 'rm -rf "$WORK" "$SHM"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), user $(id -un)"
for base in "$WORK" "$SHM"; do
  echo "== root on $(df -T "$base" | awk 'NR==2 {print $2}')"
  cmds=("env -i /bin/true")
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    cmds+=("$bin run --root $base/root$i -- /bin/true")
  done
  python3 bench/interleave.py "$rounds" "${cmds[@]}"
done
if [ "${SANDBOX:-0}" = 1 ]; then
  echo "== sandboxed, root on tmpfs"
  cmds=("bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --die-with-parent /bin/true")
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    cmds+=("$bin run --root $SHM/sroot$i --sandbox --net none -- /bin/true")
  done
  python3 bench/interleave.py "$rounds" "${cmds[@]}"
fi
