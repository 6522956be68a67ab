#!/usr/bin/env python3
"""scripts/ipc_targets.py judges issue #13's targets from one run of
scripts/ipc-targets.sh: these tests feed it made-up tables (a run where
every target is met, then one where each bar is missed by a little) and
check every verdict, the "not measured" of a missing part, the "not
judged" of ranks sharing a GPU, and the collectives judged again at 4
ranks.

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


def write_p2p(path, ipc_over_nccl=1.2, latency=(5.0, 10.0), raw_over_nccl=None):
    """nccl at 100 GB/s everywhere, ipc-auto at ipc_over_nccl (a number, or
    {bytes: ratio}) times that; with raw_over_nccl, the raw copies too."""
    with open(path, "w") as f:
        f.write("world,test,bytes,variant,us,gbps,ratio_to_nccl\n")
        f.write(f"2,latency,8,nccl,{latency[1]},0.00,1.0\n")
        f.write(f"2,latency,8,ipc-auto,{latency[0]},0.00,{latency[1] / latency[0]}\n")
        for b in P2P_SIZES:
            x = ipc_over_nccl.get(b, 1.2) if isinstance(ipc_over_nccl, dict) else ipc_over_nccl
            us = b / 100e3
            f.write(f"2,bandwidth,{b},nccl,{us:.3f},100.00,1.0\n")
            f.write(f"2,bandwidth,{b},ipc-auto,{us / x:.3f},{100 * x:.2f},{x}\n")
            if raw_over_nccl is not None:
                r = raw_over_nccl
                f.write(f"2,bandwidth,{b},raw,{us / r:.3f},{100 * r:.2f},{r}\n")


def write_collectives(path, allgather_busbw=1.1, wrong=0, skip=(), graph_us=None, ranks=2,
                      drop=()):
    """nccl: 10 us and 100 GB/s busbw for every op and size; ipc: the same,
    but the allgather's busbw at allgather_busbw times nccl's. `skip`: the
    (op, size) rows ipc lacks; `drop`: those that both lack. graph_us: also an 8 B allreduce with
    --graph, nccl at 3.30 us and ipc at graph_us. At 4 ranks the ops that
    split their buffer by rank start at 16 B (one float32 per rank), as
    ipc-collectives-bench.sh sweeps them."""
    with open(path, "w") as f:
        if graph_us is not None:
            f.write("allreduce,nccl,graph,8,2,float32,sum,-1,3.30,0.0,0.0,0,1,20\n")
            f.write(f"allreduce,ipc,graph,8,2,float32,sum,-1,{graph_us},0.0,0.0,0,1,20\n")
        for op in OPS:
            for s in SIZES:
                if ranks * 4 > s and op in ("allgather", "reduce_scatter", "alltoall"):
                    s = ranks * 4
                if (op, s) in drop:
                    continue
                # op,backend,mode,size,count,type,redop,root,time_us,algbw,busbw,wrong,...
                f.write(f"{op},nccl,eager,{s},{s // 4},float32,sum,-1,10.0,100.0,100.0,0,1,20\n")
                if (op, s) in skip:
                    continue
                bw = 100.0 * (allgather_busbw if op == "allgather" else 1.0)
                f.write(f"{op},ipc,eager,{s},{s // 4},float32,sum,-1,9.0,{bw},{bw},{wrong},1,20\n")


def write_latency(path, rows, symmetric=None):
    """symmetric: NCCL's symmetric kernels' 8 B allreduce with --graph (us)."""
    with open(path, "w") as f:
        f.write("# us per operation (ping-pong: one way), medians of 5 runs of 1000 operations\n")
        f.write(f"{'what':<22} {'variant':<28} {'mode':<6} {'us':>10}\n")
        for (what, mode), us in rows.items():
            f.write(f"{what:<22} {'default':<28} {mode:<6} {us:>10}\n")
        if symmetric is not None:
            f.write(f"{'nccl allreduce 8 B':<22} {'symmetric':<28} {'graph':<6} {symmetric:>10}\n")


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

    def verdicts(self, *extra, targets=TARGETS):
        out = subprocess.run([sys.executable, SCRIPT, "--p2p", self.p2p, "--collectives",
                              self.colls, "--latency", self.lat, "--gpus", "2", *extra],
                             capture_output=True, text=True, check=True).stdout
        rows = {}
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] in targets:
                rows[cells[0]] = cells[-1]
        self.assertEqual(sorted(rows), sorted(targets), out)
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

    def test_the_raw_copies_ratio_stands_beside_each_send_recv_ratio(self):
        # A bar above the copy engine's own ratio shows as such.
        write_p2p(self.p2p, {1 << 30: 1.04}, raw_over_nccl=1.05)
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        rows, out = self.verdicts()
        self.assertEqual(rows["256 MiB and up send/recv, streamed, defaults"], "**missed**", out)
        self.assertIn("1 GiB 1.040x (raw copies 1.050x)", out)
        self.assertIn("4 MiB 1.200x (raw copies 1.050x)", out)

    def write_link(self, gbps):
        """hir_link_bench's CSV: {bytes: GB/s} for ce-push, and a slower
        sm-push at each size (the ceiling is the fastest way's)."""
        path = os.path.join(self.dir.name, "link.csv")
        with open(path, "w") as f:
            f.write("way,bytes,us,gbps\n")
            for b, g in gbps.items():
                f.write(f"ce-push,{b},{b / g / 1e3:.2f},{g:.2f}\n")
                f.write(f"sm-push,{b},{b / (g - 20) / 1e3:.2f},{g - 20:.2f}\n")
        return path

    def test_a_miss_above_the_links_ceiling_is_named_so(self):
        # 1 GiB at 1.06x NCCL's 100 GB/s where the fastest way of copying
        # does 107.9 GB/s: no protocol reaches 1.08x there.
        write_p2p(self.p2p, {1 << 30: 1.06}, raw_over_nccl=1.07)
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        link = self.write_link({256 << 20: 115.0, 1 << 30: 107.9})
        rows, out = self.verdicts("--link", link)
        self.assertEqual(rows["256 MiB and up send/recv, streamed, defaults"],
                         "**missed**: the bar is above the link's ceiling at 1 GiB", out)
        self.assertIn("1 GiB 1.060x (raw copies 1.070x; link ceiling 107.9 GB/s by ce-push, "
                      "1.0790x)", out)
        self.assertIn("1 missed (1 of them above what the link does), 0 not measured, 7 met.", out)

    def test_a_miss_above_the_raw_copies_of_the_links_fastest_way_is_named_so(self):
        # The ceiling (events) is 1.085x, but the raw copies, timed as ipc
        # is, do 1.078x, and the copy engine's push is the fastest way.
        write_p2p(self.p2p, {1 << 30: 1.067}, raw_over_nccl=1.078)
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        link = self.write_link({1 << 30: 108.5})
        rows, out = self.verdicts("--link", link)
        self.assertEqual(rows["256 MiB and up send/recv, streamed, defaults"],
                         "**missed**: the bar is above the raw copies (the copy engine's push, "
                         "the link's fastest way) at 1 GiB", out)

    def test_a_miss_below_the_links_ceiling_stays_a_plain_miss(self):
        # The link could carry 1.15x at 1 GiB: the miss is the protocol's.
        write_p2p(self.p2p, {1 << 30: 1.06})
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        link = self.write_link({1 << 30: 115.0})
        rows, out = self.verdicts("--link", link)
        self.assertEqual(rows["256 MiB and up send/recv, streamed, defaults"], "**missed**", out)
        self.assertIn("1 GiB 1.060x (link ceiling 115.0 GB/s by ce-push, 1.1500x)", out)
        self.assertIn("1 missed, 0 not measured, 7 met.", out)

    def test_a_malformed_file_is_a_usage_error_naming_it(self):
        write_p2p(self.p2p)
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        link = os.path.join(self.dir.name, "link.csv")
        with open(link, "w") as f:
            f.write("way,bytes,us,gbps\nce-push,lots,1.0,2.0\n")
        for args in (["--link", link], ["--p2p", link]):
            r = subprocess.run([sys.executable, SCRIPT, "--p2p", self.p2p, "--collectives",
                                self.colls, "--latency", self.lat, *args],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn(f"ipc_targets: {link}: not the file its part writes", r.stderr)
            self.assertNotIn("Traceback", r.stderr)

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

    def test_the_collectives_of_four_ranks_are_judged_again_from_their_own_table(self):
        at4 = [t + " (4 ranks)" for t in ["allgather 64 MiB and up, busbw", "8 B allreduce, eager",
                                           "8 B allreduce, --graph",
                                           "the table: every op, 8 B - 1 GiB"]]
        colls4 = os.path.join(self.dir.name, "colls4.csv")
        write_p2p(self.p2p)
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        # 8 B allreduce eager: ipc 9.0, nccl 10.0; allgather from 16 B.
        write_collectives(colls4, graph_us="2.90", ranks=4)
        rows, out = self.verdicts("--collectives-at", f"4={colls4}", targets=TARGETS + at4)
        for t in TARGETS + at4:
            self.assertEqual(rows[t], "**met**", f"{t}\n{out}")
        self.assertIn("## collectives, 4 ranks", out)
        self.assertIn("0 missed, 0 not measured, 12 met.", out)
        # At 4 ranks only: the allgather at 1.04x, the graph at 3.45 us, and
        # a missing row; the 2 ranks' verdicts stand.
        write_collectives(colls4, allgather_busbw=1.04, skip={("broadcast", 64)}, graph_us="3.45",
                          ranks=4)
        rows, out = self.verdicts("--collectives-at", f"4={colls4}", targets=TARGETS + at4)
        for t in TARGETS:
            self.assertEqual(rows[t], "**met**", f"{t}\n{out}")
        for t in at4:
            expected = "**met**" if t.startswith("8 B allreduce, eager") else "**missed**"
            self.assertEqual(rows[t], expected, f"{t}\n{out}")
        self.assertIn("missing: broadcast 64 B", out)
        # A size an op lacks on both backends (its sweep stopped) is a hole too.
        write_collectives(colls4, graph_us="2.90", ranks=4, drop={("alltoall", 1 << 21)})
        rows, out = self.verdicts("--collectives-at", f"4={colls4}", targets=TARGETS + at4)
        self.assertEqual(rows["the table: every op, 8 B - 1 GiB (4 ranks)"], "**missed**", out)
        self.assertIn("missing: alltoall 2 MiB", out)

    def test_the_latency_probe_at_four_ranks_judges_their_8_b_allreduce(self):
        at4 = [t + " (4 ranks)" for t in ["allgather 64 MiB and up, busbw", "8 B allreduce, eager",
                                           "8 B allreduce, --graph",
                                           "the table: every op, 8 B - 1 GiB"]]
        colls4 = os.path.join(self.dir.name, "colls4.csv")
        lat4 = os.path.join(self.dir.name, "lat4.txt")
        write_p2p(self.p2p)
        write_collectives(self.colls)
        write_latency(self.lat, GOOD_LATENCY)
        # The sweep meets both (eager 9.0 against 10.0, graph 2.90); the
        # probe at 4 ranks misses both, and it is the probe that judges.
        write_collectives(colls4, graph_us="2.90", ranks=4)
        lat = dict(GOOD_LATENCY)
        lat[("ipc allreduce 8 B", "eager")] = "11.50"  # nccl 11.20
        lat[("ipc allreduce 8 B", "graph")] = "3.60"
        write_latency(lat4, lat)
        rows, out = self.verdicts("--collectives-at", f"4={colls4}", "--latency-at", f"4={lat4}",
                                  targets=TARGETS + at4)
        self.assertEqual(rows["8 B allreduce, eager (4 ranks)"], "**missed**", out)
        self.assertEqual(rows["8 B allreduce, --graph (4 ranks)"], "**missed**", out)
        self.assertIn("| 8 B allreduce, eager (4 ranks) | 11.50 us | 11.20 us |", out)
        self.assertEqual(rows["8 B allreduce, eager"], "**met**", out)  # 2 ranks: their own
        # A probe at another world size judges nothing at 4.
        rows, out = self.verdicts("--collectives-at", f"4={colls4}", "--latency-at", f"8={lat4}",
                                  targets=TARGETS + at4)
        self.assertEqual(rows["8 B allreduce, eager (4 ranks)"], "**met**", out)
        r = subprocess.run([sys.executable, SCRIPT, "--latency-at", "lat4.txt"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--latency-at expects N=PATH, got 'lat4.txt'", r.stderr)

    def test_nccl_symmetric_kernels_stand_beside_the_graphs_bar_without_moving_it(self):
        write_p2p(self.p2p)
        write_collectives(self.colls)
        lat = dict(GOOD_LATENCY)
        lat[("ipc allreduce 8 B", "graph")] = "3.60"  # below NCCL's 4.00, above 3.45
        write_latency(self.lat, lat, symmetric="4.00")
        rows, out = self.verdicts()
        self.assertEqual(rows["8 B allreduce, --graph"], "**missed**", out)
        self.assertIn("| 8 B allreduce, --graph | 3.60 us | 3.30 us; symmetric kernels 4.00 us "
                      "| 0.900x symmetric's time | < 3.45 us |", out)
        # The symmetric row is not the default variant's graph figure.
        self.assertNotIn("| 8 B allreduce, --graph | 3.60 us | 4.00 us", out)

    def test_collectives_at_without_a_rank_count_is_a_usage_error(self):
        r = subprocess.run([sys.executable, SCRIPT, "--collectives-at", "four.csv"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--collectives-at expects N=PATH, got 'four.csv'", r.stderr)


if __name__ == "__main__":
    SCRIPT = sys.argv.pop(1)
    unittest.main()
