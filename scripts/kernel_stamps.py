#!/usr/bin/env python3
"""Summarizes the kernel stamps (HIR_CUDA_STAMPS=PREFIX: one CSV per GPU,
PREFIX.gpuN.PID.csv) for ipc-latency-probe.sh: per file (one rank) and
kernel kind, over the second half of its records (the steady state of a
replayed graph or loop), the median nanoseconds of each phase of a kernel,
thread 0's view:

  start    entry -> followed: waiting for the kernel before it (PDL)
  pushes   followed -> pushed: numbers, slot waits, copies, push signals
  waits    pushed -> waited: the waits for the peers' messages, the pulls
           or the reduction
  signals  waited -> end: the signals' stores issued
  handoff  end -> the next kernel's followed: this kernel's exit (its
           stores drained) and the next one's start
  period   followed -> the next kernel's followed: one operation

and, for a kernel with pushes whose file has them, the pushes split:
numbers (their counters and wait words read), slots (the slot waits),
copies (the copies or lines), psignals (their signals and counters).

    python3 scripts/kernel_stamps.py PREFIX.gpu*.csv
"""
import csv
import statistics
import sys

KINDS = {1: "message step", 2: "reduce in lines", 3: "fused reduce"}
PHASES = ["start", "pushes", "waits", "signals", "handoff", "period"]
SUB = ["numbers", "slots", "copies", "psignals"]  # inside the pushes, when recorded


def read(path):
    """(kind, entry, followed, pushed, waited, end, (numbered, slotted,
    copied) or None) per record, by start. Raises ValueError naming the
    line of a record that is not one."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    recs = []
    for line, r in enumerate(rows, start=2):
        try:
            t = tuple(int(r[k]) for k in ("kind", "entry_ns", "followed_ns", "pushed_ns",
                                            "waited_ns", "end_ns"))
            inside = None
            if "numbered_ns" in r and int(r["slotted_ns"] or 0) != 0:
                inside = tuple(int(r[k]) for k in ("numbered_ns", "slotted_ns", "copied_ns"))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"line {line}: not a stamp record ({e!r}); expected the columns "
                             "of KernelStampRing::save") from None
        recs.append(t + (inside,))
    recs = [r for r in recs if r[1] != 0]
    recs.sort(key=lambda r: r[2])
    return recs


def summarize(recs):
    """{kind: {phase: median ns}, "count": n} over the second half."""
    half = recs[len(recs) // 2:]
    out = {}
    for i, (kind, entry, followed, pushed, waited, end, inside) in enumerate(half):
        ph = out.setdefault(kind, {p: [] for p in PHASES + SUB})
        if inside is not None:
            numbered, slotted, copied = inside
            ph["numbers"].append(numbered - followed)
            ph["slots"].append(slotted - numbered)
            ph["copies"].append(copied - slotted)
            ph["psignals"].append(pushed - copied)
        ph["start"].append(followed - entry)
        ph["pushes"].append(pushed - followed)
        ph["waits"].append(waited - pushed)
        ph["signals"].append(end - waited)
        if i + 1 < len(half):
            ph["handoff"].append(half[i + 1][2] - end)
            ph["period"].append(half[i + 1][2] - followed)
    return {k: ({p: (statistics.median(v) if v else None) for p, v in ph.items()},
                len(ph["start"])) for k, ph in out.items()}


def main():
    paths = sys.argv[1:]
    if not paths:
        print("kernel_stamps: no stamp files (HIR_CUDA_STAMPS=PREFIX writes PREFIX.gpuN.PID.csv)",
              file=sys.stderr)
        return 2
    print(f"  {'file':<34} {'kernel':<16} {'count':>6} " + " ".join(f"{p:>8}" for p in PHASES)
          + "   (median ns, second half)")
    for path in paths:
        try:
            recs = read(path)
        except (OSError, ValueError) as e:
            print(f"kernel_stamps: {path}: {e}", file=sys.stderr)
            return 2
        if not recs:
            print(f"  {path.rsplit('/', 1)[-1]:<34} (no records)")
            continue
        for kind, (ph, n) in sorted(summarize(recs).items()):
            cells = " ".join(f"{'-' if ph[p] is None else f'{ph[p]:.0f}':>8}" for p in PHASES)
            print(f"  {path.rsplit('/', 1)[-1]:<34} {KINDS.get(kind, str(kind)):<16} {n:>6} {cells}")
            if any(ph[p] is not None for p in SUB):
                print(f"  {'':<34} {'  the pushes:':<16} {'':>6} "
                      + ", ".join(f"{p} {ph[p]:.0f}" for p in SUB if ph[p] is not None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
