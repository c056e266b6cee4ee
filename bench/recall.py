#!/usr/bin/env python3
"""Recall and false positives of secret scanners on the generated corpus.

    bench/recall.py CORPUS RUNWS [RUNWS_BEFORE] [--rg RULES]

CORPUS is what `RUNWS_RECALL_CORPUS=DIR cargo test --test cli
every_secret_kind` leaves: `found/<rule>/<context>` files each hold one
secret of that rule's kind, `placeholder/<rule>/<context>.<n>` files hold
none. A sample counts as found when the scanner reports that rule in that
file (ripgrep, which cannot say which rule matched, when any pattern
matches); a placeholder file counts as a false positive when anything is
reported in it.
"""
import json
import os
import subprocess
import sys


def files(corpus, kind):
    out = []
    base = os.path.join(corpus, kind)
    for rule in sorted(os.listdir(base)):
        for name in sorted(os.listdir(os.path.join(base, rule))):
            out.append((rule, os.path.join(kind, rule, name)))
    return out


def runws(binary, corpus):
    p = subprocess.run([binary, "scan", "--json", corpus], capture_output=True, text=True)
    hits = {}
    for f in json.loads(p.stdout or "[]"):
        rel = os.path.relpath(f["path"], corpus)
        hits.setdefault(rel, set()).add(f["rule"])
    return lambda rel, rule: rule in hits.get(rel, set()), lambda rel: rel in hits


def ripgrep(rules, corpus):
    p = subprocess.run(["rg", "-uuu", "-l", "-f", rules, corpus], capture_output=True, text=True)
    hits = {os.path.relpath(line, corpus) for line in p.stdout.splitlines()}
    return lambda rel, rule: rel in hits, lambda rel: rel in hits


def report(name, found, any_hit, samples, placeholders):
    got = sum(found(rel, rule) for rule, rel in samples)
    fp = sum(any_hit(rel) for _, rel in placeholders)
    per_rule = {}
    for rule, rel in samples:
        ok, n = per_rule.get(rule, (0, 0))
        per_rule[rule] = (ok + found(rel, rule), n + 1)
    worst = sorted((ok / n, rule, ok, n) for rule, (ok, n) in per_rule.items())[:3]
    worst = ", ".join(f"{r} {ok}/{n}" for _, r, ok, n in worst)
    print(f"  {name}: recall {got}/{len(samples)} ({100 * got / len(samples):.1f}%), "
          f"placeholders reported {fp}/{len(placeholders)} ({100 * fp / len(placeholders):.2f}%); "
          f"lowest: {worst}")


def main():
    args = sys.argv[1:]
    rules = None
    if "--rg" in args:
        i = args.index("--rg")
        rules = args[i + 1]
        del args[i:i + 2]
    corpus, binaries = args[0], args[1:]
    samples, placeholders = files(corpus, "found"), files(corpus, "placeholder")
    for b in binaries:
        report(b, *runws(b, corpus), samples, placeholders)
    if rules:
        report(f"rg -f {os.path.basename(rules)}", *ripgrep(rules, corpus), samples, placeholders)


if __name__ == "__main__":
    main()
