#!/usr/bin/env python3
"""Writes N small files under DIR, deterministically (the same N gives the
same tree, byte for byte):

    bench/gen_small.py DIR N

Files go 100 to a directory (d0000/, d0001/, ...; 10,000 files make 100
directories). Sizes follow a source tree's small files: a file's size is
drawn from a fixed pseudo-random sequence, 60% between 0 and 1 KiB, 30%
between 1 and 8 KiB, 9% between 8 and 64 KiB and 1% between 64 and 256
KiB (about 5 KiB on average: 10,000 files are about 50 MB). Every 50th
file is empty. The bytes are pseudo-random, so nothing compresses or
deduplicates them.
"""
import os
import random
import sys


def size_of(rng):
    p = rng.random()
    if p < 0.60:
        return rng.randrange(0, 1024)
    if p < 0.90:
        return rng.randrange(1024, 8192)
    if p < 0.99:
        return rng.randrange(8192, 65536)
    return rng.randrange(65536, 262144)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gen_small.py DIR N")
    root, n = sys.argv[1], int(sys.argv[2])
    rng = random.Random(20261201)
    os.makedirs(root, exist_ok=True)
    total = 0
    for i in range(n):
        d = os.path.join(root, f"d{i // 100:04d}")
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        size = 0 if i % 50 == 0 else size_of(rng)
        with open(os.path.join(d, f"f{i:06d}.dat"), "wb") as f:
            f.write(rng.randbytes(size))
        total += size
    print(f"{root}: {n} files, {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
