#!/usr/bin/env python3
"""Draws a hostir trace (`hir run --trace FILE`) as a PNG timeline.

    scripts/trace_to_png.py TRACE.json OUT.png [--title TEXT] [--no-flows] [--run K|last]

One row per rank and track (host, stream k, a backend's lanes), in the
trace's order; spans as bars coloured by kind (host time, compute,
communication, a stream's wait); arrows from each post to its waits. Time
is relative to the first event. Needs matplotlib (Debian:
python3-matplotlib); without it, says so and exits 2. Exit 1 when the trace
cannot be read.
"""
import argparse
import json
import sys

COLOURS = {
    "host": "#8da0cb",
    "compute": "#66c2a5",
    "communication": "#fc8d62",
    "wait": "#d9d9d9",
}
CHAR_WIDTH = 0.0036  # of the time axis, for one character of a bar's name
LABELS = {
    "host": "host time per instruction",
    "compute": "compute (fill, copy, check, matmul, add, kernel)",
    "communication": "communication",
    "wait": "stream waits on a communication",
}


def load(path):
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        print(f"trace_to_png: cannot read {path}: {e}", file=sys.stderr)
        sys.exit(1)
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        print(f"trace_to_png: {path} has no traceEvents", file=sys.stderr)
        sys.exit(1)
    return events


def rows_of(events):
    """The rows (pid, tid) in display order, with their labels."""
    process = {}
    thread = {}
    order = {}
    seen = set()
    for e in events:
        ph, pid, tid = e.get("ph"), e.get("pid", 0), e.get("tid", 0)
        if ph == "M" and e.get("name") == "process_name":
            process[pid] = e["args"]["name"]
        elif ph == "M" and e.get("name") == "thread_name":
            thread[(pid, tid)] = e["args"]["name"]
        elif ph == "M" and e.get("name") == "thread_sort_index":
            order[(pid, tid)] = e["args"]["sort_index"]
        elif ph == "X":
            seen.add((pid, tid))
    rows = sorted(seen, key=lambda r: (r[0], order.get(r, r[1]), r[1]))
    labels = [f"{process.get(p, f'pid {p}')} · {thread.get((p, t), f'tid {t}')}" for p, t in rows]
    return rows, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--title", default=None)
    ap.add_argument("--no-flows", action="store_true", help="leave out the post -> wait arrows")
    ap.add_argument("--run", default=None,
                    help="draw one run only: its index (args.run of the spans) or 'last' "
                         "(the first run pays one-time set-up: communicators, cuBLAS)")
    a = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        print(f"trace_to_png: needs matplotlib, which {sys.executable} does not have "
              "(Debian/Ubuntu: apt-get install python3-matplotlib, for /usr/bin/python3)",
              file=sys.stderr)
        return 2

    events = load(a.trace)
    spans = [e for e in events if e.get("ph") == "X"]
    if a.run is not None:
        runs = [e.get("args", {}).get("run") for e in spans]
        runs = [r for r in runs if isinstance(r, int)]
        try:
            want = max(runs) if a.run == "last" else int(a.run)
        except ValueError:
            print(f"trace_to_png: --run expects a run index or 'last', got {a.run}",
                  file=sys.stderr)
            return 2
        if runs and want not in runs:
            print(f"trace_to_png: no run {want} in {a.trace} (runs {min(runs)}..{max(runs)})",
                  file=sys.stderr)
            return 1
        spans = [e for e in spans if e.get("args", {}).get("run") == want]
        lo = min(float(e["ts"]) for e in spans)
        hi = max(float(e["ts"]) + float(e.get("dur", 0)) for e in spans)
        keep = {id(e) for e in spans}
        events = [e for e in events
                  if e.get("ph") == "M" or id(e) in keep
                  or (e.get("ph") in ("s", "f") and lo <= float(e.get("ts", lo - 1)) <= hi)]
    if not spans:
        print(f"trace_to_png: {a.trace} has no spans", file=sys.stderr)
        return 1
    rows, labels = rows_of(events)
    row_of = {r: i for i, r in enumerate(rows)}
    t0 = min(float(e["ts"]) for e in spans)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in spans)
    # Milliseconds, or microseconds for short traces.
    scale, unit = (1e-3, "ms") if t1 - t0 >= 2000 else (1.0, "µs")
    span_len = max((t1 - t0) * scale, 1e-9)

    height = max(2.5, 0.42 * len(rows) + 1.6)
    fig, ax = plt.subplots(figsize=(15, height))
    bars = {}
    for e in spans:
        cat = e.get("cat", "host")
        x = (float(e["ts"]) - t0) * scale
        w = max(float(e.get("dur", 0)) * scale, span_len * 1e-4)  # visible when tiny
        bars.setdefault((row_of[(e.get("pid", 0), e.get("tid", 0))], cat), []).append((x, w))
        # The name where it fits ("op /path (detail)"), else "op (detail)".
        name = e.get("name", "")
        parts = name.split(" ", 2)
        short = " ".join(parts[:1] + parts[2:]) if len(parts) == 3 else name
        for text in (name, short):
            if w > span_len * CHAR_WIDTH * (len(text) + 2):
                ax.text(x + w / 2, row_of[(e.get("pid", 0), e.get("tid", 0))], text,
                        ha="center", va="center", fontsize=6, clip_on=True)
                break
    for (row, cat), xs in bars.items():
        ax.broken_barh(xs, (row - 0.38, 0.76), facecolors=COLOURS.get(cat, "#999999"),
                       edgecolor="#555555", linewidth=0.3)

    if not a.no_flows:
        starts = {}
        for e in events:
            if e.get("ph") == "s":
                starts[(e.get("pid", 0), e.get("id"))] = e
        for e in events:
            if e.get("ph") != "f":
                continue
            s = starts.get((e.get("pid", 0), e.get("id")))
            if s is None:
                continue
            r0 = row_of.get((s.get("pid", 0), s.get("tid", 0)))
            r1 = row_of.get((e.get("pid", 0), e.get("tid", 0)))
            if r0 is None or r1 is None:
                continue
            ax.annotate("", xy=((float(e["ts"]) - t0) * scale, r1),
                        xytext=((float(s["ts"]) - t0) * scale, r0),
                        arrowprops=dict(arrowstyle="->", color="#333333", lw=0.6, alpha=0.6))

    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(-span_len * 0.01, span_len * 1.01)
    ax.set_xlabel(f"time since the first event ({unit})")
    for i in range(1, len(rows)):
        if rows[i][0] != rows[i - 1][0]:  # between ranks
            ax.axhline(i - 0.5, color="#888888", linewidth=0.8)
    ax.grid(axis="x", color="#eeeeee")
    ax.set_axisbelow(True)
    used = {cat for (_, cat) in bars}
    ax.legend(handles=[Patch(facecolor=COLOURS.get(c, "#999999"), label=LABELS.get(c, c))
                       for c in COLOURS if c in used],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 if len(rows) > 4 else -0.2),
              ncol=4, fontsize=8, frameon=False)
    ax.set_title(a.title or a.trace, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=130)
    print(f"trace_to_png: {len(spans)} spans in {len(rows)} rows -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
