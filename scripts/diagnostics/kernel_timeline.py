#!/usr/bin/env python3
"""Summarizes a kernel_trace.cpp file: the CUDA graph replayed most often (a decode step), its
kernels in order with medians over the replays of
  dur  the kernel's own span, start to end (us);
  inc  its end minus the previous kernel's end: what it adds to the step (us);
  gap  its start minus the previous kernel's end (negative: launched early, programmatic
       dependent launch),
and, with --period P --offset O, the same per slot of a repeating group of P kernels (a layer)
from kernel O on, averaged over the groups.

Usage: kernel_timeline.py TRACE.tsv[.gz] [--period 7 --offset 2]
"""
import argparse
import collections
import gzip
import re
import statistics
import subprocess
import sys


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith("#"):
                continue
            start, end, graph, node, _stream, grid, _block, name = line.rstrip("\n").split("\t")
            rows.append((int(start), int(end), int(graph), int(node), int(grid), name))
    rows.sort()
    return rows


def short_names(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = list(names)
    short = {}
    for name, dem in zip(names, out):
        dem = re.sub(r"gpubench::\(anonymous namespace\)::|gpubench::|void ", "", dem)
        short[name] = dem.split("(")[0][:56]
    return short


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--period", type=int, default=0)
    ap.add_argument("--offset", type=int, default=0)
    a = ap.parse_args()
    try:
        rows = read(a.trace)
    except (OSError, ValueError) as e:
        sys.exit(f"kernel_timeline.py: cannot read {a.trace}: {e}")
    graphs = collections.Counter(r[2] for r in rows if r[2] != 0)
    if not graphs:
        sys.exit("kernel_timeline.py: no kernel replayed from a CUDA graph in " + a.trace)
    graph = max(graphs, key=lambda g: graphs[g])
    mine = [r for r in rows if r[2] == graph]
    # Replay i of the graph: the i-th run of each of its nodes (by start time); the kernels of a
    # replay in the order they started in the first one.
    runs = collections.defaultdict(list)
    for r in mine:
        runs[r[3]].append(r)
    count = min(len(v) for v in runs.values())
    order = sorted(runs, key=lambda node: runs[node][0][0])
    replays = [[runs[node][i] for node in order] for i in range(count)]
    nodes = len(order)
    short = short_names(sorted({r[5] for r in mine}))
    med = lambda v: statistics.median(v) / 1000 if v else 0.0
    n = nodes
    dur = [med([rp[i][1] - rp[i][0] for rp in replays]) for i in range(n)]
    inc = [med([rp[i][1] - rp[i - 1][1] for rp in replays]) if i else 0.0 for i in range(n)]
    gap = [med([rp[i][0] - rp[i - 1][1] for rp in replays]) if i else 0.0 for i in range(n)]
    step = [rp[-1][1] - rp[0][0] for rp in replays]
    print(f"graph {graph}: {n} kernels, {len(replays)} replays, step median "
          f"{statistics.median(step) / 1e6:.4f} ms, min {min(step) / 1e6:.4f} ms")
    print(f"{'#':>3} {'kernel':56} {'grid':>6} {'dur us':>8} {'inc us':>8} {'gap us':>8}")
    for i, r in enumerate(replays[0]):
        print(f"{i:>3} {short[r[5]]:56} {r[4]:>6} {dur[i]:8.2f} {inc[i]:8.2f} {gap[i]:8.2f}")
    if a.period > 0:
        groups = (n - a.offset) // a.period
        print(f"\nper slot of {a.period} kernels from #{a.offset}, mean over {groups} groups")
        total = 0.0
        for s in range(a.period):
            idx = [a.offset + g * a.period + s for g in range(groups)]
            d = sum(dur[i] for i in idx) / groups
            c = sum(inc[i] for i in idx) / groups
            g = sum(gap[i] for i in idx) / groups
            total += c
            print(f"{s:>3} {short[replays[0][idx[0]][5]]:56} {replays[0][idx[0]][4]:>6} "
                  f"{d:8.2f} {c:8.2f} {g:8.2f}")
        print(f"    group (layer) total inc {total:.2f} us")


if __name__ == "__main__":
    main()
