# Shared by the benchmark scripts.

# `built ARGS` runs `cargo build --release ARGS` and prints the path of each
# executable it produced (where depends on the configured build target).
built() {
  cargo build --quiet --release --locked --message-format=json-render-diagnostics "$@" | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])
'
}

# `ratio FILE REF` prints each command's
# median from a hyperfine JSON export and its ratio to the REF-th command.
ratio() {
  python3 - "$@" <<'PY'
import json, statistics, sys
data = json.load(open(sys.argv[1]))["results"]
med = {r["command"]: statistics.median(r["times"]) for r in data}
cmds = list(med)
ref = cmds[int(sys.argv[2])]
for c in cmds:
    print(f"  median {med[c]*1000:9.3f} ms  ratio {med[c]/med[ref]:5.2f}  {c}")
PY
}
