#!/usr/bin/env python3
"""Plots bus bandwidth and time against size from sweeps, one line per input.

    scripts/plot_sweep.py INPUT... -o OUT.png [--label TEXT]... [--title TEXT]

Each INPUT is one of:
- a CSV of `hir sweep --csv` (columns size, time_us, busbw_GBps, ...), or
  any CSV with those three columns (a baseline written in the same format);
- a JSON of `hir sweep --json` (format hostir-sweep/1);
- the text output of an nccl-tests binary (all_reduce_perf ...): its rows
  of numbers, out-of-place columns.
The kind is found from the content. OUT.png gets two panels, log-log:
busbw (GB/s) against size and time (us) against size. Lines are labelled
with --label, in the order of the inputs, else by file name. Needs
matplotlib (Debian: python3-matplotlib); without it, says so and exits 2.
Exit 1 when an input cannot be read or has no rows.
"""
import argparse
import csv
import io
import json
import os
import sys


def fail(message):
    print(f"plot_sweep: {message}", file=sys.stderr)
    sys.exit(1)


def rows_from_csv(path, text):
    reader = csv.DictReader(io.StringIO(text))
    needed = {"size", "time_us", "busbw_GBps"}
    if not reader.fieldnames or not needed <= set(reader.fieldnames):
        fail(f"{path}: a CSV needs the columns {', '.join(sorted(needed))}; "
             f"it has {', '.join(reader.fieldnames or [])}")
    return [(float(r["size"]), float(r["time_us"]), float(r["busbw_GBps"])) for r in reader]


def rows_from_json(path, text):
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != "hostir-sweep/1":
        fail(f"{path}: a JSON input must be a hostir-sweep/1 document (hir sweep --json)")
    return [(float(r["size"]), float(r["time_us"]), float(r["busbw_GBps"])) for r in doc["rows"]]


def rows_from_nccl_tests(text):
    # Rows: size count type redop root time algbw busbw #wrong [in-place ...].
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 9 or line.lstrip().startswith("#"):
            continue
        try:
            size, time_us, busbw = float(fields[0]), float(fields[5]), float(fields[7])
        except ValueError:
            continue
        rows.append((size, time_us, busbw))
    return rows


def load(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e}")
    stripped = text.lstrip()
    try:
        if stripped.startswith("{"):
            rows = rows_from_json(path, text)
        elif stripped.startswith("size,") or "," in stripped.split("\n", 1)[0]:
            rows = rows_from_csv(path, text)
        else:
            rows = rows_from_nccl_tests(text)
    except (ValueError, KeyError) as e:
        fail(f"{path}: {e}")
    rows = [r for r in rows if r[0] > 0]
    if not rows:
        fail(f"{path}: no rows (expected hir sweep CSV or JSON, or nccl-tests output)")
    return sorted(rows)


def main():
    parser = argparse.ArgumentParser(
        description="Plot busbw and time against size from sweeps (hir sweep, nccl-tests).")
    parser.add_argument("inputs", nargs="+", metavar="INPUT")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.png")
    parser.add_argument("--label", action="append", default=[],
                        help="label of the next input's line (repeat, in order)")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    if len(args.label) > len(args.inputs):
        parser.error(f"{len(args.label)} labels for {len(args.inputs)} inputs")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_sweep: needs matplotlib (Debian: apt-get install python3-matplotlib)",
              file=sys.stderr)
        sys.exit(2)

    series = []
    for i, path in enumerate(args.inputs):
        label = args.label[i] if i < len(args.label) else os.path.splitext(
            os.path.basename(path))[0]
        series.append((label, load(path)))

    fig, (bw, lat) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, rows in series:
        sizes = [r[0] for r in rows]
        lat.plot(sizes, [r[1] for r in rows], marker="o", markersize=3, label=label)
        busbw = [(s, b) for s, _, b in rows if b > 0]
        if busbw:
            bw.plot([s for s, _ in busbw], [b for _, b in busbw], marker="o", markersize=3,
                    label=label)
    for ax, ylabel in ((bw, "bus bandwidth (GB/s)"), (lat, "time (us)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    bw.set_title("busbw against size")
    lat.set_title("time against size")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot_sweep: wrote {args.output}")


if __name__ == "__main__":
    main()
