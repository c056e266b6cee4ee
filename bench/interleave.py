#!/usr/bin/env python3
"""Runs commands interleaved and prints each one's median and its ratio to
the first command's.

    bench/interleave.py ROUNDS CMD...
    INTERLEAVE_GAP=0.1 bench/interleave.py ROUNDS CMD...   (a pause before each run)

hyperfine runs all of one command, then all of the next: on a shared machine
whose speed drifts, that drift lands in the ratio. Here every round runs each
command once, in a fresh random order, so drift falls on all of them alike.
Each command is started with posix_spawn and waited for, its output
discarded; the wall time of each run is kept. A command that fails stops it.
"""
import os
import random
import shlex
import statistics
import sys
import time


def main():
    rounds = int(sys.argv[1])
    # A quiet moment before each run, as a cron job or a single command
    # meets the machine: some kernel paths are cheap only when busy.
    gap = float(os.environ.get("INTERLEAVE_GAP", "0"))
    commands = sys.argv[2:]
    argvs = [shlex.split(c) for c in commands]
    devnull = os.open(os.devnull, os.O_RDWR)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)]

    def once(argv):
        if gap:
            time.sleep(gap)
        start = time.perf_counter()
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)
        _, status = os.waitpid(pid, 0)
        took = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"failed: {shlex.join(argv)}")
        return took

    for _ in range(10):
        for argv in argvs:
            once(argv)
    times = [[] for _ in argvs]
    for _ in range(rounds):
        order = list(range(len(argvs)))
        random.shuffle(order)
        for i in order:
            times[i].append(once(argvs[i]))
    ref = statistics.median(times[0])
    for command, t in zip(commands, times):
        m = statistics.median(t)
        print(f"  median {m * 1000:9.3f} ms  ratio {m / ref:5.2f}  {command}  (interleaved, {rounds} rounds{f', {gap} s apart' if gap else ''})")


if __name__ == "__main__":
    main()
