#!/usr/bin/env python3
"""Makes a mixed tree of about SIZE_MB megabytes in DIR for the seal and scan
benchmarks: source-like text in many small files, logs, and binaries.
Deterministic (seeded), offline."""
import os, random, sys

out, size_mb = sys.argv[1], int(sys.argv[2])
rng = random.Random(42)
words = ("fn let mut self return match impl struct enum pub use mod const static if else for while loop "
         "break continue where trait type async await move ref dyn value result error config token path "
         "reader writer buffer index count name data file line offset").split()
target = size_mb * 1024 * 1024
written = 0

def text(n):
    lines, size = [], 0
    while size < n:
        line = "    " * rng.randint(0, 3) + " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        line += rng.choice([";", " {", " }", ",", ""]) + "\n"
        lines.append(line); size += len(line)
    return "".join(lines)

i = 0
while written < target:
    kind = i % 10
    d = os.path.join(out, f"pkg{i % 97:02d}", f"mod{i % 13:02d}")
    os.makedirs(d, exist_ok=True)
    if kind < 7:      # source files, 2-40 KB
        data = text(rng.randint(2_000, 40_000)).encode(); name = f"f{i}.rs"
    elif kind < 9:    # logs, 100-600 KB
        data = text(rng.randint(100_000, 600_000)).encode(); name = f"run{i}.log"
    else:             # binaries, 0.5-3 MB
        data = rng.randbytes(rng.randint(500_000, 3_000_000)); name = f"blob{i}.bin"
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    written += len(data); i += 1
print(f"{i} files, {written / 1e6:.0f} MB in {out}")
