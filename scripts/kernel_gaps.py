#!/usr/bin/env python3
"""Summarizes `nsys stats --report cuda_gpu_trace --format csv` (stdin) for
ipc-latency-probe.sh: per context (one per rank), for each kernel or copy
name, how many ran and their median duration, and the median gap from the
end of one operation to the start of the next on that context, over the
second half of the trace (the steady state of a replayed graph)."""
import csv
import statistics
import sys
from collections import defaultdict


def column(header, prefix):
    for i, h in enumerate(header):
        if h.startswith(prefix):
            return i
    return None


def main():
    rows = list(csv.reader(l for l in sys.stdin if l.strip() and not l.startswith("Processing")))
    start = next((i for i, r in enumerate(rows) if r and r[0].startswith("Start")), None)
    if start is None:
        print("  (no GPU trace in the report)")
        return
    header, body = rows[start], rows[start + 1:]
    c_start, c_dur, c_name = column(header, "Start"), column(header, "Duration"), column(header, "Name")
    c_ctx, c_dev = column(header, "Ctx"), column(header, "Device")
    by_ctx = defaultdict(list)
    for r in body:
        try:
            key = (r[c_dev] if c_dev is not None else "", r[c_ctx] if c_ctx is not None else "")
            by_ctx[key].append((int(float(r[c_start])), int(float(r[c_dur])), r[c_name][:60]))
        except (ValueError, IndexError):
            continue
    for key, ops in sorted(by_ctx.items()):
        ops.sort()
        steady = ops[len(ops) // 2:]
        gaps = [b[0] - (a[0] + a[1]) for a, b in zip(steady, steady[1:])]
        names = defaultdict(list)
        for _, d, n in steady:
            names[n].append(d)
        span = (steady[-1][0] + steady[-1][1] - steady[0][0]) / max(1, len(steady)) / 1e3
        print(f"  device {key[0]} context {key[1]}: {len(ops)} operations; steady half: "
              f"{span:.2f} us per operation, median gap {statistics.median(gaps) / 1e3 if gaps else 0:.2f} us")
        for n, ds in sorted(names.items(), key=lambda kv: -len(kv[1]))[:6]:
            print(f"    {len(ds):6d} x {statistics.median(ds) / 1e3:8.2f} us  {n}")


if __name__ == "__main__":
    main()
