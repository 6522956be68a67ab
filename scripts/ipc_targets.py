#!/usr/bin/env python3
"""Issue #13's verdicts from one run of scripts/ipc-targets.sh.

Reads what its three parts wrote (any may be missing: its targets are then
"not measured") and prints markdown: the send/recv table, the table of
every collective at every size, then (last, for a log's tail) one row per
target with the figure, NCCL's in the same run, the ratio, the bar and the
verdict.

  ipc_targets.py --p2p p2p.csv --collectives ipc-collectives.csv \\
      --latency ipc-latency.txt [--link link.csv] [--collectives-at N=PATH]...
      [--latency-at N=PATH]... [--gpus N] [--shared]

--shared: the ranks shared one GPU (no NCCL): every verdict is "not judged".
--collectives-at N=PATH: the collectives of N ranks (a machine of N GPUs;
the issue's "4 when lent"): their table, and the collectives' targets again
at N ranks, the 8 B allreduce's from that table unless --latency-at N=PATH
gives the latency probe's table at N ranks (1,000 allreduces per run, as
2 ranks take it; the sweep times 20 per run, whose eager figure varies by
more than the bar's margin between runs).
Inputs:
  p2p.csv          hir_p2p_bench --csv: world,test,bytes,variant,us,gbps,...
                   (variants nccl, ipc-auto, raw)
  link.csv         hir_link_bench --csv: way,bytes,us,gbps (the link's
                   ceiling: a bandwidth bar above it at some size is missed
                   by the hardware, and its verdict says so)
  ipc-collectives.csv  ipc-collectives-bench.sh: op,backend,mode,size,count,
                   type,redop,root,time_us,algbw,busbw,wrong,...
  ipc-latency.txt  ipc-latency-probe.sh's table: "<backend> <op> <n> B
                   <variant> <mode> <us>" rows
"""
import argparse
import csv
import os
import re
import sys

MiB = 1 << 20


def size_text(b):
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n} {unit}"
    return f"{b} B"


def lines_of(path):
    """The file's lines, or none when it was not given or not written (its
    part did not run: its targets are then "not measured")."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def load(reader, path):
    """reader(path); a file that is not what its part writes (a column
    missing, a number that is not one) ends the script with status 2,
    naming it."""
    try:
        return reader(path)
    except (KeyError, TypeError, ValueError) as e:
        print(f"ipc_targets: {path}: not the file its part writes ({e!r})", file=sys.stderr)
        sys.exit(2)


def read_p2p(path):
    """{(test, bytes): {variant: (us, gbps)}}"""
    rows = {}
    for r in csv.DictReader(lines_of(path)):
        key = (r["test"], int(r["bytes"]))
        rows.setdefault(key, {})[r["variant"]] = (float(r["us"]), float(r["gbps"]))
    return rows


def read_link(path):
    """{bytes: (gbps, way)}: the fastest way of hir_link_bench at each size."""
    best = {}
    for r in csv.DictReader(lines_of(path)):
        b, g = int(r["bytes"]), float(r["gbps"])
        if g > best.get(b, (0.0, ""))[0]:
            best[b] = (g, r["way"])
    return best


def read_collectives(path):
    """{(op, mode, size): {backend: (us, busbw, wrong)}}"""
    rows = {}
    for r in csv.reader(lines_of(path)):
        if len(r) < 12:
            continue
        op, backend, mode, size = r[0], r[1], r[2], int(r[3])
        rows.setdefault((op, mode, size), {})[backend] = (float(r[8]), float(r[10]), int(r[11]))
    return rows


LATENCY_ROW = re.compile(r"^(ipc|nccl) (allreduce|allgather|ping-pong) (\d+) B(?:/rank)?\s+"
                         r"(\S+)\s+(eager|graph)\s+(\S+)\s*$")


def read_latency(path):
    """{(backend, op, bytes, mode): us} for the default variant, and
    NCCL's symmetric kernels as mode "graph+sym" (variant "symmetric")"""
    rows = {}
    for line in lines_of(path):
        m = LATENCY_ROW.match(line)
        if not m or m.group(4) not in ("default", "symmetric"):
            continue
        try:
            us = float(m.group(6))
        except ValueError:
            continue  # "failed"
        mode = m.group(5) + ("+sym" if m.group(4) == "symmetric" else "")
        rows[(m.group(1), m.group(2), int(m.group(3)), mode)] = us
    return rows


class Verdicts:
    def __init__(self, shared):
        self.shared = shared
        self.rows = []

    def add(self, target, figure, baseline, ratio_text, bar, met, why_missed=""):
        if self.shared:
            verdict = "not judged (no NCCL: ranks share a GPU)"
        elif met is None:
            verdict = "not measured"
        else:
            verdict = "**met**" if met else "**missed**" + (f": {why_missed}" if why_missed else "")
        self.rows.append((target, figure, baseline, ratio_text, bar, verdict))

    def missed(self):
        return [r for r in self.rows if r[5].startswith("**missed**")]


def judge_rates(rows, bar):
    """rows: (size, {backend: (time, rate, ...)}, ipc key, nccl key).
    Returns (verdict, [(size, ipc rate, nccl rate, ipc / nccl)]): met when
    every size's ratio is at least `bar`; None (not measured) when there is
    no size or a size lacks either rate."""
    judged, ok = [], True
    for size, r, ipc, nccl in rows:
        if ipc not in r or nccl not in r or r[nccl][1] <= 0:
            ok = None
            continue
        i, n = r[ipc][1], r[nccl][1]
        judged.append((size, i, n, i / n))
        if ok is not None:
            ok = ok and i / n >= bar
    return (ok if rows else None), judged


OPS = ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]


def judge_allgather(v, colls, suffix):
    """Target 5: allgather at 64 MiB and up at least 1.05x NCCL's busbw."""
    big = sorted(s for (op, mode, s) in colls if op == "allgather" and mode == "eager" and s >= 64 * MiB)
    ok, judged = judge_rates([(s, colls[("allgather", "eager", s)], "ipc", "nccl")
                              for s in big], 1.05)
    v.add("allgather 64 MiB and up, busbw" + suffix,
          "; ".join(f"{size_text(s)} {i:.1f} / {n:.1f} GB/s, {x:.3f}x" for s, i, n, x in judged)
          or "-", "same row", "-", ">= 1.05x", ok)


def judge_small_allreduce(v, times, suffix):
    """Targets 6 and 7: the 8 B allreduce below NCCL's eagerly, and with a
    graph below nccl-tests' symmetric kernels (3.45 us, 2 H200s). times:
    {mode: (ipc us, nccl us)}, None where not measured; "graph+sym": NCCL's
    symmetric kernels in the same run, shown beside the graph's bar (which
    stays the issue's 3.45 us)."""
    ipc, nccl = times["eager"]
    v.add("8 B allreduce, eager" + suffix, us(ipc), us(nccl),
          f"{fmt(ipc / nccl, 3)}x time" if ipc and nccl else "-", "< nccl",
          None if ipc is None or nccl is None else ipc < nccl)
    ipc, nccl = times["graph"]
    sym = times.get("graph+sym", (None, None))[1]
    v.add("8 B allreduce, --graph" + suffix, us(ipc),
          us(nccl) + (f"; symmetric kernels {us(sym)}" if sym is not None else ""),
          f"{fmt(ipc / sym, 3)}x symmetric's time" if ipc and sym else "-",
          "< 3.45 us", None if ipc is None else ipc < 3.45)


# The ops whose buffer is split by rank: their sizes start at one float32
# per rank (16 B at 4 ranks), where ipc-collectives-bench.sh sweeps them.
SPLIT_OPS = {"allgather", "reduce_scatter", "alltoall"}


def judge_table(v, colls, suffix, ranks, p2p_sizes, has_latency):
    """Target 8: every op at every size of the sweep, 8 B - 1 GiB (a split
    op from its own smallest), ipc and nccl, no wrong element; and
    send/recv's sizes when p2p_sizes is not None."""
    split_least = max(8, 4 * ranks)
    # The sweep's sizes: a split op's smallest is its own (rounded up) one.
    sizes = sorted({s for (op, mode, s) in colls if mode == "eager"
                    and (op not in SPLIT_OPS or s > split_least)})
    holes = []
    for op in OPS:
        least = split_least if op in SPLIT_OPS else 8
        holes += [f"{op} {size_text(s)}" for s in sorted({max(s, least) for s in sizes})
                  if not {"ipc", "nccl"} <= set(colls.get((op, "eager", s), {}))]
    spans = bool(sizes) and sizes[0] <= 8 and sizes[-1] >= 1 << 30
    if p2p_sizes is not None:
        spans = spans and bool(p2p_sizes) and p2p_sizes[-1] >= 1 << 30 and has_latency
    if not spans:
        holes.append("sizes short of 8 B - 1 GiB")
    wrong = sum(w for r in colls.values() for (_, _, w) in r.values())
    complete = not holes and wrong == 0
    v.add("the table: every op, 8 B - 1 GiB" + suffix,
          f"{len(OPS)} ops x {len(sizes)} sizes"
          + (f" ({size_text(sizes[0])} - {size_text(sizes[-1])})" if sizes else "")
          + (f", send/recv {len(p2p_sizes)} sizes" if p2p_sizes is not None else "")
          + f", #wrong {wrong}"
          + (f"; missing: {', '.join(holes[:6])}{' ...' if len(holes) > 6 else ''}" if holes else ""),
          "-", "-", "complete, #wrong 0", complete if (sizes or p2p_sizes) else None)


def print_collectives(colls, suffix):
    if not colls:
        return
    print()
    print(f"## collectives{suffix} (ipc-collectives-bench.sh): us per collective, busbw GB/s; "
          "ratio = ipc time / nccl time (< 1: ipc faster)")
    print()
    print("| op | mode | size | nccl us | ipc us | ipc / nccl | nccl busbw | ipc busbw | #wrong |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for op in OPS:
        for mode in ("eager", "graph"):
            for s in sorted(k[2] for k in colls if k[0] == op and k[1] == mode):
                r = colls[(op, mode, s)]
                n, i = r.get("nccl"), r.get("ipc")
                ratio = fmt(i[0] / n[0], 3) if n and i and n[0] > 0 else "-"
                w = sum(x[2] for x in r.values())
                print(f"| {op} | {mode} | {size_text(s)} | {fmt(n and n[0])} | "
                      f"{fmt(i and i[0])} | {ratio} | {fmt(n and n[1])} | {fmt(i and i[1])} "
                      f"| {w} |")


def fmt(v, p=2):
    return "-" if v is None else f"{v:.{p}f}"


def us(v):
    return "-" if v is None else f"{v:.2f} us"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--p2p")
    ap.add_argument("--collectives")
    ap.add_argument("--latency")
    ap.add_argument("--link")
    ap.add_argument("--collectives-at", action="append", default=[], metavar="N=PATH")
    ap.add_argument("--latency-at", action="append", default=[], metavar="N=PATH")
    ap.add_argument("--gpus", default="?")
    ap.add_argument("--shared", action="store_true")
    a = ap.parse_args()
    p2p = load(read_p2p, a.p2p)
    link = load(read_link, a.link)
    colls = load(read_collectives, a.collectives)
    lat = load(read_latency, a.latency)
    def ranks_and_path(flag, spec):
        n, sep, path = spec.partition("=")
        if not sep or not n.isdigit():
            ap.error(f"{flag} expects N=PATH, got '{spec}'")
        return int(n), path

    at_ranks = [(n, load(read_collectives, path)) for n, path in
                (ranks_and_path("--collectives-at", spec) for spec in a.collectives_at)]
    lat_at = {n: load(read_latency, path) for n, path in
              (ranks_and_path("--latency-at", spec) for spec in a.latency_at)}
    v = Verdicts(a.shared)

    # 1. 8 B one way, eager: at most 0.8x NCCL's time (hir run's ping-pong,
    #    the issue's own measurement; the p2p bench's latency row beside it).
    ipc, nccl = lat.get(("ipc", "ping-pong", 8, "eager")), lat.get(("nccl", "ping-pong", 8, "eager"))
    bench = p2p.get(("latency", 8), {})
    bi, bn = bench.get("ipc-auto", (None,))[0], bench.get("nccl", (None,))[0]
    extra = f"; hir_p2p_bench {fmt(bi)} / {fmt(bn)} us" if bi and bn else ""
    ok = None if ipc is None or nccl is None else ipc <= 0.8 * nccl
    v.add("8 B one way, eager (hir run ping-pong)", f"{us(ipc)}{extra}", us(nccl),
          f"{fmt(ipc / nccl, 3)}x time" if ipc and nccl else "-", "<= 0.8x", ok)

    # 2. 8 B one way with a CUDA graph: under 3 us.
    ipc = lat.get(("ipc", "ping-pong", 8, "graph"))
    nccl = lat.get(("nccl", "ping-pong", 8, "graph"))
    v.add("8 B one way, --graph", us(ipc), us(nccl), "-", "< 3 us",
          None if ipc is None else ipc < 3.0)

    # 3. and 4. send/recv bandwidth, streamed, the default protocol. Beside
    #    each ratio, the raw copies' (the copy engine into the peer's
    #    buffer, no protocol) over NCCL's, when the bench measured them: a
    #    bar above it is above what the copy engine does on that host; and
    #    the link's ceiling over NCCL's (hir_link_bench's fastest way of
    #    any): a size missed where that too is under the bar is missed by
    #    the hardware, and the verdict says so; so is one where the raw
    #    copies, timed as ipc is, are under it and the copy engine's push
    #    (what they do) is the link's fastest way.
    def bandwidth(lo, hi, bar, label):
        sizes = sorted(b for (t, b) in p2p if t == "bandwidth" and lo <= b <= hi)
        ok, judged = judge_rates([(b, p2p[("bandwidth", b)], "ipc-auto", "nccl")
                                  for b in sizes], bar)

        def ratio(b, i, n, x):
            raw = p2p[("bandwidth", b)].get("raw", (None, 0.0))[1]
            text = f"{size_text(b)} {x:.3f}x" + (f" (raw copies {raw / n:.3f}x" if raw > 0 else "")
            if b in link:
                text += ("; " if raw > 0 else " (") + \
                    f"link ceiling {link[b][0]:.1f} GB/s by {link[b][1]}, {link[b][0] / n:.4f}x"
            return text + (")" if raw > 0 or b in link else "")
        def above(b, n):
            """What the hardware does under the bar at size b, or None."""
            if b in link and link[b][0] / n < bar:
                return "the link's ceiling"
            raw = p2p[("bandwidth", b)].get("raw", (None, 0.0))[1]
            if raw > 0 and raw / n < bar and link.get(b, (0, ""))[1] == "ce-push":
                return "the raw copies (the copy engine's push, the link's fastest way)"
            return None
        short = [(b, above(b, n)) for b, i, n, x in judged if x < bar]
        why = ""
        if short and all(r for _, r in short):
            why = "; ".join(f"the bar is above {r} at {size_text(b)}" for b, r in short)
        v.add(label,
              "; ".join(f"{size_text(b)} {i:.1f} / {n:.1f}" for b, i, n, _ in judged)
              + " GB/s (ipc / nccl)" if judged else "-", "same row",
              ", ".join(ratio(*j) for j in judged) or "-",
              f">= {bar}x bandwidth", ok, why)

    bandwidth(1 * MiB, 16 * MiB, 1.0, "1 - 16 MiB send/recv, streamed, defaults")
    bandwidth(256 * MiB, 1 << 40, 1.08, "256 MiB and up send/recv, streamed, defaults")

    judge_allgather(v, colls, "")

    # 6. and 7. the 8 B allreduce, from the latency probe.
    judge_small_allreduce(v, {m: (lat.get(("ipc", "allreduce", 8, m)),
                                  lat.get(("nccl", "allreduce", 8, m)))
                              for m in ("eager", "graph", "graph+sym")}, "")

    # 8. The table: every op at every size, no wrong element (and send/recv's).
    p2p_sizes = sorted(b for (t, b) in p2p if t == "bandwidth")
    judge_table(v, colls, "", 2, p2p_sizes, ("latency", 8) in p2p)

    # The same at N ranks, the 8 B allreduce from the latency probe at N
    # ranks when it ran, else from the collectives' table.
    for n, other in at_ranks:
        suffix = f" ({n} ranks)"
        judge_allgather(v, other, suffix)
        if n in lat_at:
            times = {m: (lat_at[n].get(("ipc", "allreduce", 8, m)),
                         lat_at[n].get(("nccl", "allreduce", 8, m)))
                     for m in ("eager", "graph", "graph+sym")}
        else:
            rows = {m: other.get(("allreduce", m, 8), {}) for m in ("eager", "graph")}
            times = {m: (r.get("ipc", (None,))[0], r.get("nccl", (None,))[0])
                     for m, r in rows.items()}
        judge_small_allreduce(v, times, suffix)
        judge_table(v, other, suffix, n, None, True)

    print(f"# Issue #13 in one run: 2 ranks, {a.gpus} GPU(s)"
          + (" (shared under MPS: ipc only)" if a.shared else "")
          + "".join(f"; collectives also at {n} ranks" for n, _ in at_ranks))
    if p2p:
        print()
        print("## send/recv (hir_p2p_bench --protocols auto,put): us per message (latency, "
              "pingpong: one way), GB/s; ipc: the default protocol (eager up to 16 MiB, put "
              "above); x = ipc rate / nccl rate")
        print()
        print("| test | size | nccl us | ipc us | ipc put us | raw us | nccl GB/s | ipc GB/s | x |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        order = {"latency": 0, "bandwidth": 1, "pingpong": 2}
        for (test, b) in sorted(p2p, key=lambda k: (k[1], order.get(k[0], 9))):
            r = p2p[(test, b)]
            n, i, p, w = r.get("nccl"), r.get("ipc-auto"), r.get("ipc-put"), r.get("raw")
            x = fmt(n[0] / i[0], 3) if n and i and i[0] > 0 else "-"
            print(f"| {test} | {size_text(b)} | {fmt(n and n[0])} | {fmt(i and i[0])} | "
                  f"{fmt(p and p[0])} | {fmt(w and w[0])} | {fmt(n and n[1], 1)} | "
                  f"{fmt(i and i[1], 1)} | {x} |")

    print_collectives(colls, "")
    for n, other in at_ranks:
        print_collectives(other, f", {n} ranks")
    print()
    print("## The targets (last, so that a log's tail shows them)")
    print()
    print("| target | ipc | nccl, same run | ratio | bar | verdict |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in v.rows:
        print("| " + " | ".join(r) + " |")
    print()
    missed = v.missed()
    hardware = sum("the bar is above" in r[5] for r in missed)
    print(f"{len(missed)} missed" + (f" ({hardware} of them above what the link does)"
                                     if hardware else "") + ", "
          f"{sum(r[5] == 'not measured' for r in v.rows)} not measured, "
          f"{sum(r[5] == '**met**' for r in v.rows)} met.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
