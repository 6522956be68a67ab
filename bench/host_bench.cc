// The host path beside raw MPI: a loop of allreduces, each waited on the
// host, run through the evaluator on the host device (what `hir run --device
// host` runs), against the same loop written with MPI_Iallreduce + MPI_Wait,
// alternating in every repetition of the same run.
//
//   mpirun -np 2 hir_host_bench [--sizes 8,1M,16M] [--bytes-per-run 64M]
//       [--min-iters 20] [--max-iters 2000] [--reps 7] [--csv PATH]
//
// Each size runs `bytes-per-run / size` iterations (within the bounds), so
// that a small size is not timed on a handful of operations. A run's time is
// the slowest rank's, from a barrier to the end of its last operation; the
// time per operation is the median over repetitions of run time /
// iterations. Both reduce with max, which keeps every element where it
// is and costs what a sum costs (avg adds a division that MPI does not
// have), and the program checks its result, so a fast wrong answer fails
// the bench. Prints one row per
// size: raw us, hir us, and hir / raw.
#include "transport/mpi_util.h"  // <mpi.h> without its C++ bindings

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_cli.h"
#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<int64_t> sizes = {8, int64_t{1} << 20, int64_t{16} << 20};
  int64_t bytes_per_run = int64_t{64} << 20;
  int64_t min_iters = 20, max_iters = 2000;
  int reps = 7;
  std::string csv;
};

int parse(int argc, char** argv, Options& o) {
  CLI::App app{"The host path beside raw MPI: allreduce loops (each operation waited on the\n"
               "host) through the evaluator on the host device and through MPI_Iallreduce +\n"
               "MPI_Wait, alternating:\n"
               "  mpirun -np 2 hir_host_bench [options]\n",
               "hir_host_bench"};
  app.set_help_flag("-h,--help", "print this help and exit");
  app.allow_extras();
  app.get_formatter()->column_width(24);
  std::string sizes, bytes_per_run, min_iters, max_iters, reps, csv;
  using hir::bench::singleOption;
  singleOption(app, "--sizes", sizes, "LIST",
               "message sizes, comma-separated, multiples of 4 bytes (default 8,1M,16M)");
  singleOption(app, "--bytes-per-run", bytes_per_run, "BYTES",
               "bytes reduced per timed run, which sets its iterations (default 64M)");
  singleOption(app, "--min-iters", min_iters, "N", "fewest iterations of a run (default 20)");
  singleOption(app, "--max-iters", max_iters, "N", "most iterations of a run (default 2000)");
  singleOption(app, "--reps", reps, "N", "repetitions; each time is their median (default 7)");
  singleOption(app, "--csv", csv, "PATH", "also write the rows to PATH (rank 0)");
  return hir::bench::parse(app, argc, argv, "hir_host_bench", [&] {
    using hir::bench::parseBytes;
    using hir::bench::parseInteger;
    auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
    if (given("--sizes")) {
      o.sizes.clear();
      std::size_t at = 0;
      while (at <= sizes.size()) {
        const std::size_t comma = std::min(sizes.find(',', at), sizes.size());
        const int64_t b = parseBytes("--sizes", sizes.substr(at, comma - at), 4, int64_t{1} << 32);
        if (b % 4 != 0)
          throw hir::UsageError(fmt::format("--sizes: {} is not a multiple of 4 bytes", b));
        o.sizes.push_back(b);
        at = comma + 1;
      }
    }
    if (given("--bytes-per-run"))
      o.bytes_per_run = parseBytes("--bytes-per-run", bytes_per_run, 4);
    if (given("--min-iters")) o.min_iters = parseInteger("--min-iters", min_iters, 1, 1 << 24);
    if (given("--max-iters"))
      o.max_iters = parseInteger("--max-iters", max_iters, o.min_iters, 1 << 24);
    if (given("--reps")) o.reps = static_cast<int>(parseInteger("--reps", reps, 1, 1000));
    if (given("--csv")) o.csv = csv;
  });
}

// `iters` allreduces (max) of n float32 elements, each waited on the host,
// then a check: every rank starts at 2 * rank + 2, whose maximum is 2 * world.
std::string program(int64_t n, int64_t iters) {
  return fmt::format(R"({{"format": "hostir/1", "name": "host_bench", "body": [
    {{"op": "allocate", "name": "x", "dtype": "float32", "shape": [{}]}},
    {{"op": "fill", "tensor": "x", "value": "2 * rank + 2"}},
    {{"op": "for", "index": "i", "start": 0, "stop": {}, "body": [
      {{"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
        "reduce": "max", "backend": "mpi"}},
      {{"op": "wait", "communication": "ar", "mode": "host"}}]}},
    {{"op": "check", "tensor": "x", "value": "2 * world"}}]}})",
                     n, iters);
}

using hir::bench::median;

// Seconds of the slowest rank, from a barrier to the end of `fn`.
double timed(const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  fn();
  double s = std::chrono::duration<double>(Clock::now() - t0).count(), slowest = 0;
  MPI_Allreduce(&s, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int done = parse(argc, argv, o); done >= 0) return done;
  std::unique_ptr<hir::Bootstrap> boot = hir::createMpiBootstrap(&argc, &argv);
  int rc = 0;
  try {
    const bool root = boot->rank() == 0;
    hir::Session session(*boot, hir::SessionOptions{"host"});
    MPI_Comm raw_comm = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm);
    std::FILE* csv = root && !o.csv.empty() ? std::fopen(o.csv.c_str(), "w") : nullptr;
    if (csv) std::fprintf(csv, "world,bytes,iters,raw_us,hir_us,hir_over_raw\n");
    if (root)
      std::printf("# hir_host_bench: %d ranks, allreduce (max, float32) waited on the host, "
                  "median of %d\n%12s %8s %12s %12s %10s\n",
                  boot->world(), o.reps, "bytes", "iters", "raw_us", "hir_us", "hir/raw");
    for (int64_t bytes : o.sizes) {
      const int64_t n = bytes / 4;
      const int64_t iters = std::clamp(o.bytes_per_run / bytes, o.min_iters, o.max_iters);
      hir::EvaluatorOptions eo;
      eo.timeout = std::chrono::seconds(300);
      hir::Evaluator ev(session, hir::parseProgram(program(n, iters)), eo);
      std::vector<float> buf(static_cast<std::size_t>(n), 1.0f);
      auto raw = [&] {
        for (int64_t i = 0; i < iters; ++i) {
          MPI_Request r = MPI_REQUEST_NULL;
          MPI_Iallreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_MAX,
                         raw_comm, &r);
          MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
      };
      auto hir = [&] {
        ev.run();
        ev.synchronize();
      };
      raw();  // warm-up: connections, pages, caches
      hir();
      std::vector<double> raw_s, hir_s;
      for (int rep = 0; rep < o.reps; ++rep) {
        raw_s.push_back(timed(raw));
        hir_s.push_back(timed(hir));
      }
      const hir::RunReport report = ev.report();
      if (!report.ok() || report.checks_run == 0)
        throw hir::BackendError(
            fmt::format("host bench: wrong result at {} bytes:\n{}", bytes, report.format()));
      const double raw_us = median(raw_s) * 1e6 / static_cast<double>(iters);
      const double hir_us = median(hir_s) * 1e6 / static_cast<double>(iters);
      if (root) {
        std::printf("%12lld %8lld %12.2f %12.2f %10.2f\n", static_cast<long long>(bytes),
                    static_cast<long long>(iters), raw_us, hir_us, hir_us / raw_us);
        std::fflush(stdout);
      }
      if (csv)
        std::fprintf(csv, "%d,%lld,%lld,%.3f,%.3f,%.3f\n", boot->world(),
                     static_cast<long long>(bytes), static_cast<long long>(iters), raw_us, hir_us,
                     hir_us / raw_us);
    }
    if (csv) std::fclose(csv);
    MPI_Comm_free(&raw_comm);
  } catch (const hir::Error& e) {
    std::fprintf(stderr, "hir_host_bench: rank %d: error: %s\n", boot->rank(), e.what());
    rc = e.exitCode();
  }
  return rc;
}
