#!/usr/bin/env python3
"""Makes N abandoned runs under ROOT/runs for the reap and ls benchmarks.

Each run looks like one whose runws was killed: status running, lease
expired, a runws pid that no longer exists, and scratch directories with a
few files in them.
"""
import json, os, socket, sys

root, n = sys.argv[1], int(sys.argv[2])
status = sys.argv[3] if len(sys.argv) > 3 else "running"
runs = os.path.join(root, "runs")
os.makedirs(runs, exist_ok=True)
host = socket.gethostname()
for i in range(n):
    rid = f"r{i:06d}"
    d = os.path.join(runs, rid)
    os.mkdir(d)
    for sub in ["inputs", "outputs", "work", "logs", "home", "tmp", "cache", "run", "bin"]:
        os.mkdir(os.path.join(d, sub))
    os.makedirs(os.path.join(d, "home/.config/tool"))
    os.makedirs(os.path.join(d, "tmp/build/obj"))
    for rel, data in [("home/.gitconfig", "[user]\n\tname = x\n"), ("home/.config/tool/state", "x" * 300),
                      ("tmp/build/obj/a.o", "o" * 2000), ("cache/blob", "c" * 4000), ("outputs/report.json." + rid, "{}\n")]:
        with open(os.path.join(d, rel), "w") as f:
            f.write(data)
    os.symlink("/usr/bin/env", os.path.join(d, "bin/runws"))
    m = {
        "schema": 1, "run_id": rid, "job": "bench", "argv": ["/bin/true"], "program": "/bin/true",
        "cwd": d + "/work", "invoked_from": "/", "host": host, "uid": os.getuid(),
        "runws": {"pid": 4194000, "start_time": 1}, "child": {"pid": 4194001, "pgid": 4194001, "start_time": 2},
        "started_at": "2026-01-01T00:00:00.000Z", "finished_at": None if status == "running" else "2026-01-01T00:00:01.000Z",
        "status": status, "exit_code": None if status == "running" else 0, "signal": None,
        "lease_ttl_ms": 60000, "lease_until": "2026-01-01T00:01:00.000Z", "timeout_ms": None,
        "env": [], "ports": [], "listen": False, "capture": False, "inputs": [],
        "input_fingerprint": "sha256:0", "fingerprint": None,
        "outputs": [{"name": "report.json", "file": "report.json." + rid, "bytes": 3, "sha256": "0", "written_at": "2026-01-01T00:00:00.500Z"}],
    }
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(m, f, indent=2)
