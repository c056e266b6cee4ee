#!/usr/bin/env bash
# Benchmarks for `runws run --sandbox` and `runws audit`. As bench/run.sh:
# each section runs runws side by side with its reference in one hyperfine
# invocation and prints the ratio of medians. Results go to
# bench/results/<section>.json; BENCHMARKS.md summarises them by hand.
#
#   bench/sandbox.sh [sandbox|audit|unprivileged|landlock|builds|all]
#
# Each section runs twice: with the root on the repository's file system
# (the manifest's fsyncs paid as a user pays them) and on tmpfs (/dev/shm),
# which leaves only the cost of the sandbox itself.
# Needs: hyperfine, python3, bwrap.
set -euo pipefail
cd "$(dirname "$0")/.."
section=${1:-all}
RESULTS=$PWD/bench/results
mkdir -p "$RESULTS"
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
SHM=$(mktemp -d /dev/shm/runws-bench.XXXXXX)
trap 'rm -rf "$WORK" "$SHM"' EXIT

. bench/lib.sh
BIN=$(built --bin runws)

machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), user $(id -un)"
}

BWRAP="bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --die-with-parent /bin/true"

sandbox() {
  machine
  for where in disk tmpfs; do
    local root=$WORK/root-sandbox
    [ "$where" = tmpfs ] && root=$SHM/root-sandbox
    echo "== sandbox ($where root): runws run --sandbox --net none -- /bin/true against bwrap"
    hyperfine -N --warmup 20 --runs 300 --export-json "$RESULTS/sandbox-$where.json" \
      "$BWRAP" \
      "$BIN run --root $root --ports 1 --sandbox --net none -- /bin/true" >/dev/null
    ratio "$RESULTS/sandbox-$where.json" 0
    python3 bench/interleave.py 300 "$BWRAP" "$BIN run --root $root --ports 1 --sandbox --net none -- /bin/true"
  done
}

audit() {
  machine
  for where in disk tmpfs; do
    local root=$WORK/root-audit
    [ "$where" = tmpfs ] && root=$SHM/root-audit
    echo "== audit ($where root): runws audit -- /bin/true against runws run -- /bin/true"
    hyperfine -N --warmup 10 --runs 200 --export-json "$RESULTS/audit-$where.json" \
      "$BIN run --root $root --ports 1 -- /bin/true" \
      "$BIN audit --root $root --ports 1 -- /bin/true" >/dev/null 2>&1
    ratio "$RESULTS/audit-$where.json" 0
    python3 bench/interleave.py 200 "$BIN run --root $root --ports 1 -- /bin/true" \
      "$BIN audit --root $root --ports 1 -- /bin/true"
  done
}

# The same as `sandbox`, as an ordinary user: the current user when it is
# not root; as root, `nobody`, with a copy of the binary and the roots in
# directories that user owns (on the disk's file system, under /var/tmp, and
# on tmpfs). Both commands run in a user namespace of their own.
unprivileged() {
  local who=${RUNWS_BENCH_USER:-nobody} as=()
  if [ "$(id -u)" = 0 ]; then as=(runuser -u "$who" --); else who=$(id -un); fi
  local disk
  disk=$(mktemp -d /var/tmp/runws-bench.XXXXXX)
  local shm
  shm=$(mktemp -d /dev/shm/runws-bench-user.XXXXXX)
  chmod 755 "$disk"
  cp "$BIN" "$disk/runws"
  # RUNWS_BEFORE=/path/to/older/runws: that build beside this one.
  [ -n "${RUNWS_BEFORE:-}" ] && cp "$RUNWS_BEFORE" "$disk/runws-before"
  [ "$(id -u)" = 0 ] && chown "$who" "$disk" "$shm"
  echo "machine: $(nproc) cores, kernel $(uname -r), user $who"
  for where in disk tmpfs; do
    local root=$disk/root
    [ "$where" = tmpfs ] && root=$shm/root
    echo "== sandbox as $who ($where root): runws run --sandbox --net none -- /bin/true against bwrap"
    local cmds=("$BWRAP" "$disk/runws run --root $root --ports 1 --sandbox --net none -- /bin/true")
    [ -n "${RUNWS_BEFORE:-}" ] && cmds+=("$disk/runws-before run --root $root-before --ports 1 --sandbox --net none -- /bin/true")
    "${as[@]}" hyperfine -N --warmup 20 --runs 300 --export-json "$disk/sandbox-user-$where.json" "${cmds[@]}" >/dev/null
    cp "$disk/sandbox-user-$where.json" "$RESULTS/"
    ratio "$RESULTS/sandbox-user-$where.json" 0
    echo "  the same, interleaved:"
    "${as[@]}" python3 bench/interleave.py 300 "${cmds[@]}"
  done
  rm -rf "$disk" "$shm"
}

# The Landlock backend as an ordinary user (where it is the fallback),
# interleaved with the namespace backend, bwrap and a plain run, on tmpfs
# and on disk; as root too. --net none in each sandbox.
landlock() {
  local who=${RUNWS_BENCH_USER:-nobody} as=()
  if [ "$(id -u)" = 0 ]; then as=(runuser -u "$who" --); else who=$(id -un); fi
  local disk shm
  disk=$(mktemp -d /var/tmp/runws-bench.XXXXXX)
  shm=$(mktemp -d /dev/shm/runws-bench-ll.XXXXXX)
  chmod 755 "$disk"
  cp "$BIN" "$disk/runws"
  [ "$(id -u)" = 0 ] && chown "$who" "$disk" "$shm"
  machine
  for where in disk tmpfs; do
    local root=$disk/root
    [ "$where" = tmpfs ] && root=$shm/root
    echo "== as $who ($where root): plain run, --sandbox=landlock, --sandbox=ns, bwrap; all -- /bin/true"
    "${as[@]}" python3 bench/interleave.py 300 \
      "$disk/runws run --root $root --ports 1 -- /bin/true" \
      "$disk/runws run --root $root --ports 1 --sandbox=landlock --net none -- /bin/true" \
      "$disk/runws run --root $root --ports 1 --sandbox=ns --net none -- /bin/true" \
      "$BWRAP"
  done
  # The same copy of the binary as above: where the executable lies changes
  # its start-up (an overlay against ext4 or tmpfs), and bwrap's is on disk.
  for where in disk tmpfs; do
    local root=$disk/root-$(id -un)
    [ "$where" = tmpfs ] && root=$shm/root-$(id -un)
    echo "== as $(id -un) ($where root): the same"
    python3 bench/interleave.py 300 \
      "$disk/runws run --root $root --ports 1 -- /bin/true" \
      "$disk/runws run --root $root --ports 1 --sandbox=landlock --net none -- /bin/true" \
      "$disk/runws run --root $root --ports 1 --sandbox=ns --net none -- /bin/true" \
      "$BWRAP"
  done
  rm -rf "$disk" "$shm"
}

# The default build (a dynamically linked PIE) beside `cargo build-static`
# (x86_64 only), copied together to one directory (a copy's age changes its
# start-up): a plain run, the Landlock sandbox (root) and the namespace
# sandbox (root and an ordinary user), each against bwrap, on disk and on
# tmpfs. --net none in each sandbox.
builds() {
  local who=${RUNWS_BENCH_USER:-nobody} as=()
  if [ "$(id -u)" = 0 ]; then as=(runuser -u "$who" --); else who=$(id -un); fi
  local static
  static=$(cargo build-static --quiet --locked --message-format=json-render-diagnostics --bin runws | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])
')
  local disk shm
  disk=$(mktemp -d /var/tmp/runws-bench.XXXXXX)
  shm=$(mktemp -d /dev/shm/runws-bench-builds.XXXXXX)
  chmod 755 "$disk"
  cp "$BIN" "$disk/dynamic" & cp "$static" "$disk/static" & wait
  [ "$(id -u)" = 0 ] && chown "$who" "$disk" "$shm"
  machine
  # row USER SANDBOX ROOT [PREFIX...]: bwrap, then the sandboxed run and
  # the plain run of each build, as USER (through PREFIX).
  row() {
    local user=$1 sandbox=$2 root=$3 b
    shift 3
    local cmds=("$BWRAP")
    for b in dynamic static; do
      cmds+=("$disk/$b run --root $root/$user-$b --ports 1 --sandbox=$sandbox --net none -- /bin/true")
    done
    for b in dynamic static; do
      cmds+=("$disk/$b run --root $root/$user-$b --ports 1 -- /bin/true")
    done
    echo "== as $user ($w root): bwrap; --sandbox=$sandbox and a plain run, dynamic then static"
    "$@" python3 bench/interleave.py 200 "${cmds[@]}"
  }
  local w root
  for w in disk tmpfs; do
    root=$disk; [ "$w" = tmpfs ] && root=$shm
    row "$(id -un)" landlock "$root"
    row "$(id -un)" ns "$root"
    [ "$(id -u)" = 0 ] && row "$who" ns "$root" "${as[@]}"
  done
  rm -rf "$disk" "$shm"
}

case "$section" in
  sandbox) sandbox ;;
  audit) audit ;;
  unprivileged) unprivileged ;;
  landlock) landlock ;;
  builds) builds ;;
  all) sandbox; audit; unprivileged; landlock; builds ;;
  *) echo "unknown section $section" >&2; exit 2 ;;
esac
