#!/usr/bin/env python3
"""The kernel's own price of a run's control group, without any tool's:
each round spawns /bin/true once plainly and once inside freshly made
groups (the hierarchies and limits runws uses on this machine: mkdir, the
limits written, the child moved in before its exec, the groups removed
after it), in a random order, and prints the median of each and their
difference. Needs root (cgroup v1) or a writable cgroup v2 hierarchy.

    bench/cgroup_floor.py ROUNDS
"""
import os
import random
import statistics
import sys
import time

GIB = str(1 << 30)


def own(controller):
    for line in open("/proc/self/cgroup"):
        _, names, path = line.rstrip("\n").split(":", 2)
        if controller == "" and names == "":
            return path
        if controller in names.split(","):
            return path
    return None


def places():
    """(directory of runws's own group, files to write) per hierarchy."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        base = "/sys/fs/cgroup" + own("")
        return [(base, [("memory.max", GIB), ("pids.max", "1000"), ("cpu.max", "200000 100000")])]
    out = []
    for c, files in [
        ("memory", [("memory.limit_in_bytes", GIB)]),
        ("pids", [("pids.max", "1000")]),
        ("cpu", [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "200000")]),
    ]:
        out.append((f"/sys/fs/cgroup/{c}" + own(c), files))
    return out


def write(path, value):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def once(groups, n):
    start = time.perf_counter()
    made = []
    if groups:
        for base, files in groups:
            d = os.path.join(base, f"floor-{os.getpid()}-{n}")
            os.mkdir(d)
            made.append(d)
            for f, v in files:
                write(os.path.join(d, f), v)
    pid = os.fork()
    if pid == 0:
        try:
            for d in made:
                write(os.path.join(d, "cgroup.procs"), "0")
            os.execv("/bin/true", ["/bin/true"])
        finally:
            os._exit(127)
    os.waitpid(pid, 0)
    for d in made:
        while True:
            try:
                os.rmdir(d)
                break
            except OSError:
                time.sleep(0.0005)
    return time.perf_counter() - start


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    groups = places()
    plain, grouped = [], []
    for n in range(rounds + 10):
        order = [False, True]
        random.shuffle(order)
        for g in order:
            t = once(groups if g else None, n)
            if n >= 10:
                (grouped if g else plain).append(t)
    p, g = statistics.median(plain), statistics.median(grouped)
    print(f"  median {p*1000:9.3f} ms  fork+exec /bin/true")
    print(f"  median {g*1000:9.3f} ms  the same in new groups ({len(groups)} hierarchies)")
    print(f"  the groups' own price: {(g-p)*1000:.3f} ms")


main()
