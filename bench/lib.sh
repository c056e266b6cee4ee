# Shared by the benchmark scripts: `ratio FILE REF` prints each command's
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
