#!/usr/bin/env python3
"""scripts/kernel_stamps.py: the phases of the kernel stamps' records
(HIR_CUDA_STAMPS), from files written the way KernelStampRing::save does.

    python3 tests/scripts/kernel_stamps_test.py scripts/kernel_stamps.py
"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = sys.argv.pop(1)
HEADER = "kind,sm,entry_ns,followed_ns,pushed_ns,waited_ns,end_ns\n"


def write(path, records):
    with open(path, "w") as f:
        f.write(HEADER)
        for r in records:
            f.write(",".join(str(x) for x in r) + "\n")


def loop(count, kind=2, period=3000, start=100, pushes=200, waits=1500, signals=50, t0=10**9):
    """count kernels, one every `period` ns: entry, +start followed, ..."""
    out = []
    for i in range(count):
        e = t0 + i * period
        f = e + start
        out.append((kind, i % 132, e, f, f + pushes, f + pushes + waits,
                    f + pushes + waits + signals))
    return out


class KernelStamps(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def run_on(self, *names):
        r = subprocess.run([sys.executable, SCRIPT, *(os.path.join(self.dir.name, n) for n in names)],
                           capture_output=True, text=True)
        return r

    def row(self, out, name, kernel):
        for line in out.splitlines():
            if name in line and kernel in line:
                return line.split()
        self.fail(f"no row for {name} {kernel}:\n{out}")

    def test_each_phase_is_the_median_of_the_second_half(self):
        # The first half runs slow (warm-up), the second at the steady rate.
        recs = loop(100, period=9000, waits=8000) + loop(100, t0=10**9 + 100 * 9000)
        write(os.path.join(self.dir.name, "s.gpu0.1.csv"), recs)
        r = self.run_on("s.gpu0.1.csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        cells = self.row(r.stdout, "s.gpu0.1.csv", "lines")
        # ... count, start, pushes, waits, signals, handoff, period
        self.assertEqual(cells[-7:], ["100", "100", "200", "1500", "50", "1250", "3000"], r.stdout)

    def test_records_are_ordered_by_their_start_and_unwritten_ones_dropped(self):
        recs = loop(40)
        recs = recs[20:] + recs[:20] + [(0, 0, 0, 0, 0, 0, 0)] * 5  # a ring's wrap, unwritten slots
        write(os.path.join(self.dir.name, "w.gpu1.2.csv"), recs)
        r = self.run_on("w.gpu1.2.csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        cells = self.row(r.stdout, "w.gpu1.2.csv", "lines")
        self.assertEqual(cells[-7], "20")
        self.assertEqual(cells[-1], "3000")  # the period, not a jump across the wrap

    def test_kinds_are_apart(self):
        recs = sorted(loop(50, kind=1, pushes=900) + loop(50, kind=3, t0=10**9 + 1500),
                      key=lambda r: r[3])
        write(os.path.join(self.dir.name, "k.gpu0.3.csv"), recs)
        r = self.run_on("k.gpu0.3.csv")
        self.assertEqual(self.row(r.stdout, "k.gpu0.3.csv", "message")[-5], "900", r.stdout)
        self.assertEqual(self.row(r.stdout, "k.gpu0.3.csv", "fused")[-5], "200", r.stdout)

    def test_the_pushes_are_split_where_their_points_were_recorded(self):
        path = os.path.join(self.dir.name, "p.gpu0.4.csv")
        with open(path, "w") as f:
            f.write("kind,sm,entry_ns,followed_ns,numbered_ns,slotted_ns,copied_ns,pushed_ns,"
                    "waited_ns,end_ns\n")
            for i in range(20):
                e = 10**9 + i * 3000
                f.write(f"2,{i % 2},{e},{e + 100},{e + 400},{e + 500},{e + 900},{e + 1000},"
                        f"{e + 2000},{e + 2100}\n")
        r = self.run_on("p.gpu0.4.csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("numbers 300, slots 100, copies 400, psignals 100", r.stdout)
        self.assertEqual(self.row(r.stdout, "p.gpu0.4.csv", "lines")[-5], "900", r.stdout)

    def test_a_missing_or_malformed_file_is_named_in_a_usage_error(self):
        r = self.run_on("absent.csv")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("absent.csv", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        with open(os.path.join(self.dir.name, "bad.csv"), "w") as f:
            f.write(HEADER + "2,1,100,200,300\n")
        r = self.run_on("bad.csv")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("bad.csv: line 2: not a stamp record", r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    def test_no_file_is_a_usage_error(self):
        r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no stamp files", r.stderr)


if __name__ == "__main__":
    unittest.main()
