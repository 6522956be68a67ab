// Point-to-point benchmark through the whole evaluator: the same programs
// with backend "ipc" (put and get) and "nccl" (or "mpi" on the host), in one
// run, interleaved, medians of several repetitions.
//
//   mpirun -np 2 hir_p2p_bench [--device cuda|host] [--min 1K] [--max 1G]
//       [--factor 4] [--reps 5] [--csv PATH]
//
// bandwidth: even ranks send to rank + 1 in a loop (post + stream wait), odd
//   ranks receive; time per message = (run + synchronize) / messages; the
//   receivers check the last message's data.
// latency: ranks 0 and 1 ping-pong one 8-byte message; one-way latency =
//   time / (2 x round trips).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "ir/json.h"
#include "runtime/bootstrap.h"
#include "runtime/evaluator.h"
#include "runtime/session.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string device = "cuda";
  int64_t min = 1024, max = int64_t{1} << 30, factor = 4;
  int reps = 5;
  std::string csv;
};

int64_t parseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? end : "";
  int64_t mult = unit == "K" ? 1024 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 1;
  if (!unit.empty() && mult == 1) throw hir::UsageError("bad size '" + s + "'");
  return static_cast<int64_t>(v * static_cast<double>(mult));
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw hir::UsageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device") o.device = next();
    else if (a == "--min") o.min = parseSize(next());
    else if (a == "--max") o.max = parseSize(next());
    else if (a == "--factor") o.factor = std::stoll(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--csv") o.csv = next();
    else throw hir::UsageError("unknown option " + a);
  }
  return o;
}

// Messages per run: enough to amortize the run's start, bounded in bytes.
int messagesFor(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{4} << 30) / std::max<int64_t>(bytes, 1),
                                              4, 200));
}

std::string bandwidthProgram(const std::string& backend, const std::string& protocol,
                             int64_t count, int messages) {
  std::string proto = protocol.empty() ? "" : fmt::format(", \"protocol\": \"{}\"", protocol);
  std::string share = backend == "ipc"
                          ? R"({"op": "share_mem_handles", "communications": ["s", "r"]},)"
                          : "";
  return fmt::format(R"({{
    "format": "hostir/1", "name": "p2p_bw", "min_world_size": 2,
    "params": {{"n": {count}, "m": {messages}}},
    "body": [
      {{"op": "allocate", "name": "buf", "dtype": "float32", "shape": ["n"]}},
      {{"op": "fill", "tensor": "buf", "value": "rank", "step": 0}},
      {share}
      {{"op": "for", "index": "i", "start": 0, "stop": "m", "body": [
        {{"op": "if", "cond": "rank % 2 == 0 && rank + 1 < world", "then": [
          {{"op": "communication", "name": "s", "type": "send", "tensor": "buf",
            "peer": "rank + 1", "backend": "{backend}"{proto}}},
          {{"op": "wait", "communication": "s"}}]}},
        {{"op": "if", "cond": "rank % 2 == 1", "then": [
          {{"op": "communication", "name": "r", "type": "recv", "tensor": "buf",
            "peer": "rank - 1", "backend": "{backend}"{proto}}},
          {{"op": "wait", "communication": "r"}}]}}]}},
      {{"op": "if", "cond": "rank % 2 == 1", "then": [
        {{"op": "check", "tensor": "buf", "value": "rank - 1"}}]}}
    ]}})",
                     fmt::arg("count", count), fmt::arg("messages", messages),
                     fmt::arg("share", share), fmt::arg("backend", backend),
                     fmt::arg("proto", proto));
}

std::string pingPongProgram(const std::string& backend, const std::string& protocol,
                            int trips) {
  std::string proto = protocol.empty() ? "" : fmt::format(", \"protocol\": \"{}\"", protocol);
  std::string share =
      backend == "ipc"
          ? R"({"op": "share_mem_handles", "communications": ["ping", "pong", "rping", "rpong"]},)"
          : "";
  return fmt::format(R"({{
    "format": "hostir/1", "name": "p2p_pingpong", "min_world_size": 2,
    "params": {{"t": {trips}}},
    "body": [
      {{"op": "allocate", "name": "buf", "dtype": "float32", "shape": [2]}},
      {{"op": "fill", "tensor": "buf", "value": "rank"}},
      {share}
      {{"op": "for", "index": "i", "start": 0, "stop": "t", "body": [
        {{"op": "if", "cond": "rank == 0", "then": [
          {{"op": "communication", "name": "ping", "type": "send", "tensor": "buf", "peer": 1,
            "backend": "{backend}"{proto}}},
          {{"op": "wait", "communication": "ping"}},
          {{"op": "communication", "name": "rpong", "type": "recv", "tensor": "buf", "peer": 1,
            "backend": "{backend}"{proto}}},
          {{"op": "wait", "communication": "rpong"}}]}},
        {{"op": "if", "cond": "rank == 1", "then": [
          {{"op": "communication", "name": "rping", "type": "recv", "tensor": "buf", "peer": 0,
            "backend": "{backend}"{proto}}},
          {{"op": "wait", "communication": "rping"}},
          {{"op": "communication", "name": "pong", "type": "send", "tensor": "buf", "peer": 0,
            "backend": "{backend}"{proto}}},
          {{"op": "wait", "communication": "pong"}}]}}]}},
      {{"op": "check", "tensor": "buf", "value": 0}}
    ]}})",
                     fmt::arg("trips", trips), fmt::arg("share", share),
                     fmt::arg("backend", backend), fmt::arg("proto", proto));
}

struct Variant {
  std::string label, backend, protocol;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Seconds per run of each program, median over reps, runs interleaved.
std::vector<double> timePrograms(hir::Session& session, const std::vector<std::string>& texts,
                                 int reps) {
  hir::Bootstrap& boot = session.bootstrap();
  std::vector<std::unique_ptr<hir::Evaluator>> evs;
  for (const std::string& t : texts) {
    hir::EvaluatorOptions o;
    o.timeout = std::chrono::seconds(120);
    evs.push_back(std::make_unique<hir::Evaluator>(session, hir::parseProgram(t), o));
    evs.back()->run();  // warm-up: connections, exchanges, caches
    evs.back()->synchronize();
  }
  std::vector<std::vector<double>> times(texts.size());
  for (int rep = 0; rep < reps; ++rep) {
    for (std::size_t k = 0; k < evs.size(); ++k) {
      boot.barrier();
      auto t0 = Clock::now();
      evs[k]->run();
      evs[k]->synchronize();
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::vector<double> all(static_cast<std::size_t>(boot.world()));
      boot.allgather(&s, all.data(), sizeof(double));
      times[k].push_back(*std::max_element(all.begin(), all.end()));
    }
  }
  std::vector<double> out;
  for (std::size_t k = 0; k < evs.size(); ++k) {
    hir::RunReport r = evs[k]->report();
    HIR_CHECK_AS(hir::BackendError, r.ok(), "p2p bench: wrong data:\n{}", r.format());
    out.push_back(median(times[k]));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<hir::Bootstrap> boot = hir::createMpiBootstrap(&argc, &argv);
  int rc = 0;
  try {
    Options o = parse(argc, argv);
    if (boot->world() < 2) throw hir::UsageError("hir_p2p_bench needs at least 2 ranks");
    hir::Session session(*boot, hir::SessionOptions{o.device});
    std::string base = session.device().kind() == "cuda" ? "nccl" : "mpi";
    std::vector<Variant> variants = {
        {base, base, ""}, {"ipc-put", "ipc", "put"}, {"ipc-get", "ipc", "get"}};
    bool root = boot->rank() == 0;
    std::FILE* csv = nullptr;
    if (root && !o.csv.empty()) {
      csv = std::fopen(o.csv.c_str(), "w");
      if (csv) std::fprintf(csv, "world,test,bytes,variant,us,gbps,ratio_to_%s\n", base.c_str());
    }
    if (root)
      std::printf("# hir_p2p_bench: %d ranks, device %s, median of %d runs\n"
                  "%-10s %11s %10s %10s %10s %9s %9s %9s %7s %7s\n",
                  boot->world(), session.device().describe().c_str(), o.reps, "test", "bytes",
                  (base + "_us").c_str(), "put_us", "get_us", (base + "_GB/s").c_str(),
                  "put_GB/s", "get_GB/s", "put_x", "get_x");
    auto row = [&](const char* test, int64_t bytes, const std::vector<double>& us) {
      if (!root) return;
      auto gbps = [&](double t) { return static_cast<double>(bytes) / (t * 1e3); };
      // x: the variant's speed relative to the base backend (base time / its time).
      std::printf("%-10s %11lld %10.2f %10.2f %10.2f %9.1f %9.1f %9.1f %7.3f %7.3f\n", test,
                  static_cast<long long>(bytes), us[0], us[1], us[2], gbps(us[0]), gbps(us[1]),
                  gbps(us[2]), us[0] / us[1], us[0] / us[2]);
      if (csv)
        for (std::size_t k = 0; k < us.size(); ++k)
          std::fprintf(csv, "%d,%s,%lld,%s,%.3f,%.2f,%.4f\n", boot->world(), test,
                       static_cast<long long>(bytes), variants[k].label.c_str(), us[k],
                       static_cast<double>(bytes) / (us[k] * 1e3), us[0] / us[k]);
    };

    const int trips = 200;
    std::vector<std::string> pp;
    for (const Variant& v : variants) pp.push_back(pingPongProgram(v.backend, v.protocol, trips));
    std::vector<double> t = timePrograms(session, pp, o.reps);
    std::vector<double> one_way;
    for (double s : t) one_way.push_back(s * 1e6 / (2.0 * trips));
    row("latency", 8, one_way);

    for (int64_t bytes = o.min; bytes <= o.max; bytes *= o.factor) {
      int m = messagesFor(bytes);
      std::vector<std::string> texts;
      for (const Variant& v : variants)
        texts.push_back(bandwidthProgram(v.backend, v.protocol, bytes / 4, m));
      std::vector<double> s = timePrograms(session, texts, o.reps);
      std::vector<double> us;
      for (double x : s) us.push_back(x * 1e6 / m);
      row("bandwidth", bytes, us);
      if (root) std::fflush(stdout);
    }
    if (root && csv) std::fclose(csv);
    if (root) std::printf("# x = %s time / variant time (> 1: faster than %s)\n", base.c_str(),
                          base.c_str());
  } catch (const hir::Error& e) {
    std::fprintf(stderr, "hir_p2p_bench rank %d: %s\n", boot->rank(), e.what());
    rc = e.exitCode();
    boot->abort(rc);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hir_p2p_bench rank %d: %s\n", boot->rank(), e.what());
    rc = 4;
    boot->abort(rc);
  }
  return rc;
}
