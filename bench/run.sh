#!/usr/bin/env bash
# Benchmarks for runws. Each section measures runws side by side with a
# reference command in the same hyperfine invocation, and prints the ratio
# of medians. Results go to bench/results/<section>.json and are summarised
# by hand in BENCHMARKS.md.
#
#   bench/run.sh [startup|input|concurrent|reap|ls|seal|recall|lease|all]
#
# Needs: hyperfine, python3, openssl, ripgrep; bwrap and detect-secrets are
# measured when installed. bench/sandbox.sh measures the sandbox and audit.
set -euo pipefail
cd "$(dirname "$0")/.."
section=${1:-all}
RESULTS=$PWD/bench/results
mkdir -p "$RESULTS"
# The root lives on the same file system as the repository (not tmpfs), so
# the manifest's fsyncs are paid as a user pays them.
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

. bench/lib.sh
BIN=$(built --bin runws)

machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), fs $(df -T "$WORK" | awk 'NR==2 {print $2}')"
}

startup() {
  echo "== startup: runws run -- /bin/true against env -i /bin/true"
  machine
  local cmds=("env -i /bin/true" "$BIN run --root $WORK/root --ports 1 -- /bin/true")
  if command -v bwrap >/dev/null; then
    cmds+=("bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --die-with-parent /bin/true")
  fi
  hyperfine -N --warmup 30 --runs 500 --export-json "$RESULTS/startup.json" "${cmds[@]}" >/dev/null
  ratio "$RESULTS/startup.json" 0
  echo "  the same, interleaved:"
  python3 bench/interleave.py 500 "${cmds[@]}"
  if [ -d /dev/shm ]; then
    echo "  the same with the root on tmpfs (no disk latency in the manifest's fsyncs):"
    local shm
    shm=$(mktemp -d /dev/shm/runws-bench.XXXXXX)
    hyperfine -N --warmup 30 --runs 500 --export-json "$RESULTS/startup-tmpfs.json" \
      "env -i /bin/true" "$BIN run --root $shm/root --ports 1 -- /bin/true" >/dev/null
    ratio "$RESULTS/startup-tmpfs.json" 0
    python3 bench/interleave.py 500 "env -i /bin/true" "$BIN run --root $shm/root --ports 1 -- /bin/true"
    rm -rf "$shm"
  fi
}

input() {
  echo "== input: runws run --input <1 GiB file> -- /bin/true against openssl dgst -sha256"
  machine
  local f=$WORK/input.bin
  head -c 1073741824 /dev/urandom >"$f"
  cat "$f" >/dev/null
  hyperfine -N --warmup 1 --runs 7 --export-json "$RESULTS/input.json" \
    --prepare "rm -rf $WORK/root-input" \
    "openssl dgst -sha256 $f" \
    "$BIN run --root $WORK/root-input --ports 0 --input $f -- /bin/true" >/dev/null
  ratio "$RESULTS/input.json" 0
  rm -rf "$WORK/root-input" "$f"
}

concurrent() {
  echo "== concurrent: 200 runs started at once on $(nproc) cores"
  machine
  local n=200 out=$WORK/conc
  mkdir -p "$out"
  cat >"$WORK/many-runws.sh" <<SH
#!/usr/bin/env bash
rm -rf $WORK/root-conc $out/*; mkdir -p $out
for i in \$(seq $n); do
  $BIN run --root $WORK/root-conc -- sh -c 'echo \$RUN_ID \$PORT' >$out/\$i.out 2>&1 &
done
fail=0; for j in \$(jobs -p); do wait \$j || fail=1; done
exit \$fail
SH
  cat >"$WORK/many-env.sh" <<SH
#!/usr/bin/env bash
for i in \$(seq $n); do env -i sh -c 'echo x' >/dev/null & done
wait
SH
  chmod +x "$WORK/many-runws.sh" "$WORK/many-env.sh"
  hyperfine -N --warmup 1 --runs 10 --export-json "$RESULTS/concurrent.json" \
    "$WORK/many-env.sh" "$WORK/many-runws.sh" >/dev/null
  ratio "$RESULTS/concurrent.json" 0
  # The last round's runs: all succeeded, ids all distinct.
  "$WORK/many-runws.sh"
  python3 - "$out" "$WORK/root-conc" <<'PY'
import json, os, sys
out, root = sys.argv[1], sys.argv[2]
lines = [open(os.path.join(out, f)).read().split() for f in os.listdir(out)]
runs = os.listdir(os.path.join(root, "runs"))
ok = sum(json.load(open(os.path.join(root, "runs", r, "manifest.json")))["status"] == "succeeded" for r in runs)
print(f"  check: {len(lines)} runs, {len({l[0] for l in lines})} distinct ids, {ok} succeeded, {len(runs)} run dirs")
assert len(lines) == len({l[0] for l in lines}) == ok == len(runs) == 200
PY
  # Ports are unique among runs alive at the same time: hold all 200 alive
  # at once (each waits for a barrier), then compare.
  rm -rf "$WORK/root-conc" "$out" && mkdir -p "$out"
  for i in $(seq $n); do
    "$BIN" run --root "$WORK/root-conc" -- sh -c "echo \$RUN_ID \$PORT > $out/\$RUN_ID.port; while [ ! -e $out/barrier ]; do sleep 0.05; done" &
  done
  while [ "$(ls "$out" | wc -l)" -lt $n ]; do sleep 0.1; done
  touch "$out/barrier"
  wait
  python3 - "$out" <<'PY'
import os, sys
out = sys.argv[1]
lines = [open(os.path.join(out, f)).read().split() for f in os.listdir(out) if f.endswith(".port")]
ports = {l[1] for l in lines}
print(f"  check: {len(lines)} runs alive at once, {len(ports)} distinct ports")
assert len(lines) == len(ports) == 200
PY
}

reap() {
  # Reap of abandoned runs against rm -rf, on disk and tmpfs, and with extra
  # processes on the host: bench/reap.sh.
  bench/reap.sh all
  machine
  local r=$WORK/root-reap n=10000 gen
  echo "== reap --keep 0s: 10,000 finished runs removed whole, against rm -rf of the run directories"
  gen="rm -rf $r && python3 bench/gen_runs.py $r $n succeeded && sync"
  hyperfine -N --runs 5 --export-json "$RESULTS/reap-keep.json" \
    --prepare "sh -c '$gen'" "sh -c 'cd $r/runs && rm -rf r*'" \
    --prepare "sh -c '$gen'" "$BIN reap --root $r --keep 0s --grace 0s" >/dev/null
  ratio "$RESULTS/reap-keep.json" 0
  rm -rf "$r"
}

ls_scaling() {
  echo "== ls: 1,000 and 10,000 runs"
  machine
  rm -rf "$WORK/ls1k" "$WORK/ls10k"
  python3 bench/gen_runs.py "$WORK/ls1k" 1000 succeeded
  python3 bench/gen_runs.py "$WORK/ls10k" 10000 succeeded
  hyperfine -N --warmup 2 --runs 10 --export-json "$RESULTS/ls.json" \
    "$BIN ls --root $WORK/ls1k --json" "$BIN ls --root $WORK/ls10k --json" >/dev/null
  ratio "$RESULTS/ls.json" 0
  echo "  (linear scaling is a ratio near 10)"
  rm -rf "$WORK/ls1k" "$WORK/ls10k"
}

seal() {
  echo "== seal: a 300 MB mixed tree, against tar --zstd -cf (which does no scanning)"
  machine
  local r=$WORK/root-seal
  "$BIN" run --root "$r" --run-id bench-seal --ports 0 -- true
  local run=$r/runs/bench-seal
  python3 bench/gen_tree.py "$run/work/tree" 300 | sed 's/^/  /'
  cat $(find "$run/work" -type f) >/dev/null
  local a=$WORK/archives
  mkdir -p "$a"
  local list="manifest.json inputs outputs work logs"
  hyperfine -N --warmup 1 --runs 5 --export-json "$RESULTS/seal.json" \
    --prepare "rm -f $a/t.tar.zst" "sh -c 'cd $run && tar --zstd -cf $a/t.tar.zst $list'" \
    --prepare "rm -rf $a/s" "$BIN seal --root $r bench-seal --to $a/s --max-bytes 1GiB --max-files 200000" \
    --prepare "rm -f $a/t.tar.gz" "sh -c 'cd $run && tar -czf $a/t.tar.gz $list'" >/dev/null
  ratio "$RESULTS/seal.json" 0
  echo "== scan: the secret scan alone, against ripgrep with the same rules"
  "$BIN" scan --rules >"$WORK/rules.txt"
  local tree=$run/work/tree
  local cmds=("$BIN scan $tree" "rg -uuu -c -f $WORK/rules.txt $tree")
  if command -v detect-secrets >/dev/null; then
    cmds+=("detect-secrets scan --all-files $tree")
  else
    echo "  (detect-secrets is not installed: pip install detect-secrets to compare it too)"
  fi
  hyperfine -N -i --warmup 1 --runs 3 --export-json "$RESULTS/scan.json" "${cmds[@]}" >/dev/null
  ratio "$RESULTS/scan.json" 1
  rm -rf "$r" "$a"
}

recall() {
  echo "== recall: the generated corpus (every secret kind in every context, and placeholders)"
  local corpus=$WORK/corpus
  RUNWS_RECALL_CORPUS=$corpus cargo test --quiet --locked --test cli every_secret_kind >/dev/null
  "$BIN" scan --rules >"$WORK/rules.txt"
  # RUNWS_BEFORE=path/to/an/older/runws measures it beside this build.
  python3 bench/recall.py "$corpus" "$BIN" ${RUNWS_BEFORE:+"$RUNWS_BEFORE"} --rg "$WORK/rules.txt"
  if [ -n "${RUNWS_BEFORE:-}" ]; then
    echo "== scan speed: this build, the older one and ripgrep on the seal's 300 MB tree"
    local tree=$WORK/tree
    python3 bench/gen_tree.py "$tree" 300 | sed 's/^/  /'
    cat $(find "$tree" -type f) >/dev/null
    hyperfine -N -i --warmup 1 --runs 10 --export-json "$RESULTS/scan-before.json" \
      "rg -uuu -c -f $WORK/rules.txt $tree" "$BIN scan $tree" "$RUNWS_BEFORE scan $tree" >/dev/null
    ratio "$RESULTS/scan-before.json" 0
    echo "  the same, interleaved:"
    python3 bench/interleave.py 15 "sh -c 'rg -uuu -c -f $WORK/rules.txt $tree; true'" \
      "$BIN scan $tree" "$RUNWS_BEFORE scan $tree"
  fi
}

lease() {
  echo "== lease: acquire+release round trips per second (5 s each)"
  machine
  local eb
  eb=$(built --example store_bench | grep '/store_bench$')
  local urls=("file:$WORK/store")
  if [ -n "${RUNWS_TEST_PG_URL:-}" ]; then urls+=("$RUNWS_TEST_PG_URL"); else echo "  (RUNWS_TEST_PG_URL not set: PostgreSQL skipped; see ci/postgres.sh)"; fi
  for url in "${urls[@]}"; do
    for clients in 1 8; do
      "$eb" "$url" "$clients" 5 distinct | sed 's/^/  /'
    done
  done
}

case "$section" in
  startup) startup ;;
  input) input ;;
  concurrent) concurrent ;;
  reap) reap ;;
  ls) ls_scaling ;;
  seal) seal ;;
  recall) recall ;;
  lease) lease ;;
  all) startup; input; concurrent; reap; ls_scaling; seal; recall; lease ;;
  *) echo "unknown section $section" >&2; exit 2 ;;
esac
