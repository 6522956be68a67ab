#!/usr/bin/env python3
"""scripts/ipc_targets.py judges issue #13's targets from one run of
scripts/ipc-targets.sh: these tests feed it made-up tables (a run where
every target is met, then one where each bar is missed by a little) and
check every verdict, the "not measured" of a missing part and the "not
judged" of ranks sharing a GPU.

  python3 tests/scripts/ipc_targets_test.py SCRIPT   (ctest: scripts.ipc_targets)
"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = None  # scripts/ipc_targets.py, from the command line

OPS = ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]
SIZES = [8 * 8**k for k in range(10)]  # 8 B - 1 GiB by 8x
P2P_SIZES = [4096 * 4**k for k in range(10)]  # 4 KiB - 1 GiB by 4x


def write_p2p(path, ipc_over_nccl=1.2, latency=(5.0, 10.0)):
    """nccl at 100 GB/s everywhere, ipc-auto at ipc_over_nccl (a number, or
    {bytes: ratio}) times that."""
    with open(path, "w") as f:
        f.write("world,test,bytes,variant,us,gbps,ratio_to_nccl\n")
        f.write(f"2,latency,8,nccl,{latency[1]},0.00,1.0\n")
        f.write(f"2,latency,8,ipc-auto,{latency[0]},0.00,{latency[1] / latency[0]}\n")
        for b in P2P_SIZES:
            x = ipc_over_nccl.get(b, 1.2) if isinstance(ipc_over_nccl, dict) else ipc_over_nccl
            us = b / 100e3
            f.write(f"2,bandwidth,{b},nccl,{us:.3f},100.00,1.0\n")
            f.write(f"2,bandwidth,{b},ipc-auto,{us / x:.3f},{100 * x:.2f},{x}\n")


def write_collectives(path, allgather_busbw=1.1, wrong=0, skip=()):
    """nccl: 10 us and 100 GB/s busbw for every op and size; ipc: the same,
    but the allgather's busbw at allgather_busbw times nccl's. `skip`: the
    (op, size) rows ipc lacks."""
    with open(path, "w") as f:
        for op in OPS:
            for s in SIZES:
                # op,backend,mode,size,count,type,redop,root,time_us,algbw,busbw,wrong,...
                f.write(f"{op},nccl,eager,{s},{s // 4},float32,sum,-1,10.0,100.0,100.0,0,1,20\n")
                if (op, s) in skip:
                    continue
                bw = 100.0 * (allgather_busbw if op == "allgather" else 1.0)
                f.write(f"{op},ipc,eager,{s},{s // 4},float32,sum,-1,9.0,{bw},{bw},{wrong},1,20\n")


def write_latency(path, rows):
    with open(path, "w") as f:
        f.write("# us per operation (ping-pong: one way), medians of 5 runs of 1000 operations\n")
        f.write(f"{'what':<22} {'variant':<28} {'mode':<6} {'us':>10}\n")
        for (what, mode), us in rows.items():
            f.write(f"{what:<22} {'default':<28} {mode:<6} {us:>10}\n")


GOOD_LATENCY = {
    ("nccl allreduce 8 B", "eager"): "11.20", ("nccl allreduce 8 B", "graph"): "3.30",
    ("nccl ping-pong 8 B", "eager"): "10.00", ("nccl ping-pong 8 B", "graph"): "5.90",
    ("ipc allreduce 8 B", "eager"): "7.90", ("ipc allreduce 8 B", "graph"): "2.95",
    ("ipc ping-pong 8 B", "eager"): "5.20", ("ipc ping-pong 8 B", "graph"): "2.25",
}

TARGETS = [
    "8 B one way, eager (hir run ping-pong)",
    "8 B one way, --graph",
    "1 - 16 MiB send/recv, streamed, defaults",
    "256 MiB and up send/recv, streamed, defaults",
    "allgather 64 MiB and up, busbw",
    "8 B allreduce, eager",
    "8 B allreduce, --graph",
    "the table: every op, 8 B - 1 GiB",
]


class IpcTargets(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.p2p, self.colls, self.lat = (os.path.join(d, n) for n in
                                          ("p2p.csv", "colls.csv", "lat.txt"))

    def tearDown(self):
        self.dir.cleanup()

    def verdicts(self, *extra):
        out = subprocess.run([sys.executable, SCRIPT, "--p2p", self.p2p, "--collectives",
                              self.colls, "--latency", self.lat, "--gpus", "2", *extra],
                             capture_output=True, text=True, check=True).stdout
        rows = {}
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] in TARGETS:
                rows[cells[0]] = cells[-1]
        self.assertEqual(sorted(rows), sorted(TARGETS), out)
        return rows, out

    def test_a_run_that_meets_every_bar_meets_every_target(self):
        write_p2p(self.p2p)
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        rows, out = self.verdicts()
        for t in TARGETS:
            self.assertEqual(rows[t], "**met**", f"{t}\n{out}")
        self.assertIn("0 missed, 0 not measured, 8 met.", out)

    def test_each_bar_missed_by_a_little_is_missed(self):
        # 4 MiB at 0.99x, 1 GiB at 1.07x: the two send/recv bars.
        write_p2p(self.p2p, {4 << 20: 0.99, 1 << 30: 1.07}, latency=(8.1, 10.0))
        write_collectives(self.colls, allgather_busbw=1.04, wrong=1)
        lat = dict(GOOD_LATENCY)
        lat[("ipc ping-pong 8 B", "eager")] = "8.10"  # 0.81x NCCL's 10.00
        lat[("ipc ping-pong 8 B", "graph")] = "3.00"  # the bar is under 3 us
        lat[("ipc allreduce 8 B", "eager")] = "11.20"  # level is not below
        lat[("ipc allreduce 8 B", "graph")] = "3.45"
        write_latency(self.lat, lat)
        rows, out = self.verdicts()
        for t in TARGETS:
            self.assertEqual(rows[t], "**missed**", f"{t}\n{out}")

    def test_a_part_that_did_not_run_leaves_its_targets_not_measured(self):
        write_p2p(self.p2p)  # the latency part failed, the collectives never ran
        rows, out = self.verdicts()
        for t in ["8 B one way, --graph", "allgather 64 MiB and up, busbw",
                  "8 B allreduce, eager", "8 B allreduce, --graph"]:
            self.assertEqual(rows[t], "not measured", f"{t}\n{out}")
        self.assertEqual(rows["1 - 16 MiB send/recv, streamed, defaults"], "**met**")
        self.assertEqual(rows["the table: every op, 8 B - 1 GiB"], "**missed**")

    def test_an_op_and_size_without_an_ipc_row_leaves_the_table_incomplete(self):
        write_p2p(self.p2p)
        write_collectives(self.colls, skip={("alltoall", 1 << 30)})
        write_latency(self.lat, GOOD_LATENCY)
        rows, out = self.verdicts()
        self.assertEqual(rows["the table: every op, 8 B - 1 GiB"], "**missed**")
        self.assertIn("missing: alltoall 1 GiB", out)

    def test_ranks_sharing_a_gpu_judge_nothing(self):
        write_p2p(self.p2p)
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        rows, out = self.verdicts("--shared")
        for t in TARGETS:
            self.assertEqual(rows[t], "not judged (no NCCL: ranks share a GPU)", f"{t}\n{out}")


if __name__ == "__main__":
    SCRIPT = sys.argv.pop(1)
    unittest.main()
