// Point-to-point benchmark through the whole evaluator: the same programs
// with backend "ipc" (protocols put, get and eager) and "nccl" (or "mpi" on
// the host), in one run, interleaved, medians of several repetitions; plus a
// "raw" baseline
// without any protocol: rank 0 copies into rank 1's memory mapped through the
// device's IPC (CUDA IPC, or shared memory on the host device), through the
// Device interface only, timed the same way and interleaved with the rest.
//
//   mpirun -np 2 hir_p2p_bench [--device cuda|host] [--min 1K] [--max 1G]
//       [--factor 4] [--reps 5] [--run-bytes 4G] [--csv PATH] [--base nccl|mpi|ipc]
//       [--pingpong-max SIZE] [--protocols put,get,eager]
// (`hir_p2p_bench --help` lists them; arguments are parsed by CLI11, before
// MPI starts.)
//
// bandwidth: even ranks send to rank + 1 in a loop (post + stream wait), odd
//   ranks receive; messages per run: --run-bytes / size, within [4, 200];
//   time per message = (run + synchronize) / messages. Each program first
//   runs once untimed with a fill before and a check after (the receivers
//   check the last message's data); the timed runs do neither.
// latency: ranks 0 and 1 ping-pong one 8-byte message; one-way latency =
//   time / (2 x round trips). pingpong (--pingpong-max): the same at each
//   bandwidth size up to that one (10 to 200 round trips, --run-bytes / 2
//   per run): what a message waited for by its peer before the next costs.
// eager: carries at most hir::ipcEagerSendMaxBytes() per message
//   (HIR_IPC_EAGER_SEND_MAX, default 16 MiB), so it takes part in the latency
//   row and in the bandwidth rows up to that size only; above it, it is
//   neither built (the load would refuse it) nor run, and its cells print
//   "-". The base's column on ipc (--base ipc) is auto: eager up to that
//   size too, put above.
// --protocols: ipc's columns (default put, get, eager); "auto" is a send
//   that names no protocol, what a user's program runs by default (eager
//   up to HIR_IPC_EAGER_SEND_MAX, put above).
// raw: bandwidth = m device copies of `bytes` from rank 0's buffer into rank
//   1's imported buffer on one stream, then synchronize, / m; latency = one
//   8-byte copy + synchronize (averaged over the trips). Ranks 0 and 1 only.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/ipc/collectives.h"
#include "bench_cli.h"
#include "common/check.h"
#include <hostir/device.h>
#include <hostir/json.h>
#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/session.h>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string device = "cuda";
  int64_t min = 1024, max = int64_t{1} << 30, factor = 4;
  int reps = 5;
  int64_t run_bytes = int64_t{4} << 30;  // bytes sent per bandwidth run
  int64_t pingpong_max = 0;              // ping-pong rows up to this size (0: none)
  std::string csv;
  std::string base;  // the baseline's backend; empty: nccl on cuda, mpi on the host
  std::vector<std::string> protocols = {"put", "get", "eager"};  // ipc's columns, in order
};

// Parses the command line before MPI is initialized, on every rank alike, so
// that --help and bad usage end every rank cleanly (no MPI_Abort). Returns
// -1 to go on, or the exit code: 0 after --help, 2 after bad usage (the
// message names the flag).
int parse(int argc, char** argv, Options& o) {
  CLI::App app{"Point-to-point benchmark through the evaluator: ipc (put, get, eager) against\n"
               "nccl on GPUs, against mpi on the host, plus a raw device copy. Needs 2 or more\n"
               "ranks:\n"
               "  mpirun -np 2 hir_p2p_bench [options]\n",
               "hir_p2p_bench"};
  app.set_help_flag("-h,--help", "print this help and exit");
  app.allow_extras();  // reported below, naming the option
  app.get_formatter()->column_width(24);
  app.footer("Sizes take K, M, G suffixes (KiB, MiB, GiB). An option may be given once; values "
             "as\n`--opt value` or `--opt=value`.");
  std::string device, min, max, factor, reps, run_bytes, csv, base, pingpong_max, protocols;
  using hir::bench::singleOption;
  singleOption(app, "--device", device, "D", "cuda (default) or host");
  singleOption(app, "--min", min, "BYTES", "smallest message of the bandwidth rows (default 1K)");
  singleOption(app, "--max", max, "BYTES", "largest message (default 1G)");
  singleOption(app, "--factor", factor, "F", "from one size to the next (default 4)");
  singleOption(app, "--reps", reps, "N", "repetitions; each time is their median (default 5)");
  singleOption(app, "--run-bytes", run_bytes, "BYTES", "bytes sent per bandwidth run (default 4G)");
  singleOption(app, "--csv", csv, "PATH", "also write the results to PATH (rank 0)");
  singleOption(app, "--pingpong-max", pingpong_max, "BYTES",
               "also a ping-pong row (one way) at each size up to this one (default 0: none)");
  singleOption(app, "--base", base, "B",
               "the baseline's backend: nccl (default on cuda), mpi (default on the host) or "
               "ipc (its auto protocol: for ranks sharing one GPU, where NCCL refuses to run)");
  singleOption(app, "--protocols", protocols, "LIST",
               "ipc's protocols to time, comma-separated, from auto (what a send without "
               "\"protocol\" runs: eager up to HIR_IPC_EAGER_SEND_MAX, put above), put, get "
               "and eager (default put,get,eager)");
  return hir::bench::parse(app, argc, argv, "hir_p2p_bench", [&] {
    using hir::bench::parseBytes;
    using hir::bench::parseInteger;
    auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
    if (given("--device")) {
      if (device != "cuda" && device != "host" && device != "auto")
        throw hir::UsageError(fmt::format("--device expects cuda, host or auto, got '{}'", device));
      o.device = device;
    }
    // 4 bytes at least: one float32 element.
    if (given("--min")) o.min = parseBytes("--min", min, 4);
    if (given("--max")) o.max = parseBytes("--max", max, 4);
    if (given("--factor")) o.factor = parseInteger("--factor", factor, 2, 1024);
    if (given("--reps")) o.reps = static_cast<int>(parseInteger("--reps", reps, 1, 1000000));
    if (given("--run-bytes")) o.run_bytes = parseBytes("--run-bytes", run_bytes, 1);
    if (given("--pingpong-max")) o.pingpong_max = parseBytes("--pingpong-max", pingpong_max, 0);
    if (given("--csv")) o.csv = csv;
    if (given("--base")) {
      if (base != "nccl" && base != "mpi" && base != "ipc")
        throw hir::UsageError(fmt::format("--base expects nccl, mpi or ipc, got '{}'", base));
      o.base = base;
    }
    if (given("--protocols")) {
      o.protocols.clear();
      std::string_view rest = protocols;
      while (true) {
        const std::size_t comma = rest.find(',');
        const std::string one(rest.substr(0, comma));
        if (one != "auto" && one != "put" && one != "get" && one != "eager")
          throw hir::UsageError(fmt::format(
              "--protocols takes auto, put, get and eager, comma-separated; got '{}' in '{}'",
              one, protocols));
        if (std::find(o.protocols.begin(), o.protocols.end(), one) != o.protocols.end())
          throw hir::UsageError(
              fmt::format("--protocols names '{}' twice in '{}'", one, protocols));
        o.protocols.push_back(one);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
    if (o.min > o.max)
      throw hir::UsageError(fmt::format("--min ({}) must not exceed --max ({})", o.min, o.max));
  });
}

// Messages per run: enough to amortize the run's start, bounded in bytes.
int messagesFor(int64_t bytes, int64_t run_bytes) {
  return static_cast<int>(
      std::clamp<int64_t>(run_bytes / std::max<int64_t>(bytes, 1), 4, 200));
}

// With `verify`, the sender fills its buffer first and the receiver checks
// the last message; timed runs leave both out (a fill and a check of the
// whole buffer per run cost about as much as 20% of the messages at 4 GiB
// per run, which raw does not pay) and copy whatever the buffer holds.
std::string bandwidthProgram(const std::string& backend, const std::string& protocol,
                             int64_t count, int messages, bool verify) {
  std::string proto = protocol.empty() ? "" : fmt::format(", \"protocol\": \"{}\"", protocol);
  std::string share = backend == "ipc"
                          ? R"({"op": "share_mem_handles", "communications": ["s", "r"]},)"
                          : "";
  return fmt::format(R"({{
    "format": "hostir/1", "name": "p2p_bw", "min_world_size": 2,
    "params": {{"n": {count}, "m": {messages}, "verify": {verify}}},
    "body": [
      {{"op": "allocate", "name": "buf", "dtype": "float32", "shape": ["n"]}},
      {{"op": "if", "cond": "verify", "then": [
        {{"op": "fill", "tensor": "buf", "value": "rank", "step": 0}}]}},
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
      {{"op": "if", "cond": "verify && rank % 2 == 1", "then": [
        {{"op": "check", "tensor": "buf", "value": "rank - 1"}}]}}
    ]}})",
                     fmt::arg("count", count), fmt::arg("messages", messages),
                     fmt::arg("verify", verify ? 1 : 0),
                     fmt::arg("share", share), fmt::arg("backend", backend),
                     fmt::arg("proto", proto));
}

std::string pingPongProgram(const std::string& backend, const std::string& protocol,
                            int trips, int64_t count = 2) {
  std::string proto = protocol.empty() ? "" : fmt::format(", \"protocol\": \"{}\"", protocol);
  std::string share =
      backend == "ipc"
          ? R"({"op": "share_mem_handles", "communications": ["ping", "pong", "rping", "rpong"]},)"
          : "";
  return fmt::format(R"({{
    "format": "hostir/1", "name": "p2p_pingpong", "min_world_size": 2,
    "params": {{"t": {trips}}},
    "body": [
      {{"op": "allocate", "name": "buf", "dtype": "float32", "shape": [{count}]}},
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
      {{"op": "if", "cond": "rank < 2", "then": [
        {{"op": "check", "tensor": "buf", "value": 0}}]}}
    ]}})",
                     fmt::arg("trips", trips), fmt::arg("share", share),
                     fmt::arg("backend", backend), fmt::arg("proto", proto),
                     fmt::arg("count", count));
}

// One evaluator variant. `name` is its short name in the table's columns;
// `max_bytes` the largest message it may carry, above which it is left out.
struct Variant {
  std::string label, backend, protocol, name;
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();

  bool carries(int64_t bytes) const { return static_cast<std::size_t>(bytes) <= max_bytes; }
};

// The variants that carry `bytes`, by index into `variants`, in order.
std::vector<std::size_t> presentAt(const std::vector<Variant>& variants, int64_t bytes) {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < variants.size(); ++k)
    if (variants[k].carries(bytes)) out.push_back(k);
  return out;
}

using hir::bench::median;

// One timed step, collective: barrier, run `fn` (which waits for its work),
// and the slowest rank's seconds.
double timeStep(hir::Bootstrap& boot, const std::function<void()>& fn) {
  boot.barrier();
  auto t0 = Clock::now();
  fn();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> all(static_cast<std::size_t>(boot.world()));
  boot.allgather(&s, all.data(), sizeof(double));
  return *std::max_element(all.begin(), all.end());
}

// The raw baseline: rank 1's buffer mapped into rank 0 through the device's
// IPC, and a stream of rank 0's to copy into it. No protocol, no evaluator.
// Unavailable (every time NaN) without IPC or when ranks 0 and 1 are on
// different nodes.
class RawCopy {
 public:
  RawCopy(hir::Bootstrap& boot, hir::Device& dev, std::size_t capacity)
      : boot_(boot), dev_(dev), rank_(boot.rank()) {
    const std::vector<std::string>& nodes = boot.nodes();
    available_ = dev.supports(hir::DeviceFeature::Ipc) && nodes[0] == nodes[1];
    if (!available_) return;
    hir::MemoryHandle h;
    if (rank_ == 0) {
      src_ = dev.allocate(capacity);
      dev.fill(dev.defaultStream(), src_, hir::DType::UInt8, capacity, 1, 0);
      dev.synchronize(dev.defaultStream(), kTimeout);
      stream_ = dev.createStream();
    } else if (rank_ == 1) {
      own_ = dev.allocate(capacity);
      h = dev.exportMemory(own_);
    }
    // Rank 1's handle to every rank: sizes first, then the bytes padded to
    // the largest.
    std::size_t world = static_cast<std::size_t>(boot.world());
    uint64_t size = h.bytes.size();
    std::vector<uint64_t> sizes(world);
    boot.allgather(&size, sizes.data(), sizeof size);
    std::size_t pad = *std::max_element(sizes.begin(), sizes.end());
    h.bytes.resize(pad);
    std::vector<uint8_t> all(world * pad);
    boot.allgather(h.bytes.data(), all.data(), pad);
    if (rank_ == 0) {
      hir::MemoryHandle peer;
      peer.bytes.assign(all.begin() + static_cast<std::ptrdiff_t>(pad),
                        all.begin() + static_cast<std::ptrdiff_t>(pad + sizes[1]));
      dst_ = dev.importMemory(peer);
    }
    boot.barrier();
  }

  RawCopy(const RawCopy&) = delete;
  RawCopy& operator=(const RawCopy&) = delete;

  // Collective: unmaps and frees everything (not in a destructor: after an
  // error the ranks abort instead of meeting in a barrier).
  void close() {
    if (!available_) return;
    available_ = false;
    if (rank_ == 0) {
      dev_.synchronize(*stream_, kTimeout);
      dev_.closeImported(dst_);
    }
    boot_.barrier();  // rank 0 has unmapped rank 1's buffer before it is freed
    if (src_) dev_.deallocate(src_);
    if (own_) dev_.deallocate(own_);
    src_ = dst_ = own_ = nullptr;
    stream_.reset();
  }

  bool available() const { return available_; }

  // m copies of `bytes` on one stream, then synchronize (rank 0 only;
  // others return at once).
  void stream(std::size_t bytes, int m) {
    if (!available_ || rank_ != 0) return;
    for (int i = 0; i < m; ++i) dev_.copy(*stream_, dst_, src_, bytes);
    dev_.synchronize(*stream_, kTimeout);
  }
  // m times: one copy of `bytes`, then synchronize.
  void pingCopies(std::size_t bytes, int m) {
    if (!available_ || rank_ != 0) return;
    for (int i = 0; i < m; ++i) {
      dev_.copy(*stream_, dst_, src_, bytes);
      dev_.synchronize(*stream_, kTimeout);
    }
  }

 private:
  static constexpr hir::Duration kTimeout = std::chrono::seconds(120);
  hir::Bootstrap& boot_;
  hir::Device& dev_;
  int rank_;
  bool available_ = false;
  void* src_ = nullptr;  // rank 0
  void* dst_ = nullptr;  // rank 0: rank 1's own_, imported
  void* own_ = nullptr;  // rank 1
  std::unique_ptr<hir::Stream> stream_;
};

// Runs each program once, untimed, and fails unless every check passed.
void verifyPrograms(hir::Session& session, const std::vector<std::string>& texts) {
  for (const std::string& t : texts) {
    hir::EvaluatorOptions o;
    o.timeout = std::chrono::seconds(120);
    hir::Evaluator ev(session, hir::parseProgram(t), o);
    ev.run();
    ev.synchronize();
    hir::RunReport r = ev.report();
    const bool receives = session.bootstrap().rank() % 2 == 1;
    HIR_CHECK_AS(hir::BackendError, r.ok() && (!receives || r.checks_run > 0),
                 "p2p bench: wrong data:\n{}", r.format());
  }
}

// Seconds per run of each program, median over reps, runs interleaved. With
// `raw`, one more entry: `raw` timed the same way, after the programs of each
// repetition.
std::vector<double> timePrograms(hir::Session& session, const std::vector<std::string>& texts,
                                 int reps, const std::function<void()>& raw = {}) {
  hir::Bootstrap& boot = session.bootstrap();
  std::vector<std::unique_ptr<hir::Evaluator>> evs;
  for (const std::string& t : texts) {
    hir::EvaluatorOptions o;
    o.timeout = std::chrono::seconds(120);
    evs.push_back(std::make_unique<hir::Evaluator>(session, hir::parseProgram(t), o));
    evs.back()->run();  // warm-up: connections, exchanges, caches
    evs.back()->synchronize();
  }
  if (raw) raw();  // warm-up
  std::vector<std::vector<double>> times(texts.size() + (raw ? 1 : 0));
  for (int rep = 0; rep < reps; ++rep) {
    for (std::size_t k = 0; k < evs.size(); ++k)
      times[k].push_back(timeStep(boot, [&] {
        evs[k]->run();
        evs[k]->synchronize();
      }));
    if (raw) times.back().push_back(timeStep(boot, raw));
  }
  std::vector<double> out;
  for (std::size_t k = 0; k < evs.size(); ++k) {
    hir::RunReport r = evs[k]->report();
    HIR_CHECK_AS(hir::BackendError, r.ok(), "p2p bench: wrong data:\n{}", r.format());
    out.push_back(median(times[k]));
  }
  if (raw) out.push_back(median(times.back()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int done = parse(argc, argv, o); done >= 0) return done;
  std::unique_ptr<hir::Bootstrap> boot = hir::createMpiBootstrap(&argc, &argv);
  int rc = 0;
  try {
    if (boot->world() < 2) throw hir::UsageError("hir_p2p_bench needs at least 2 ranks");
    hir::Session session(*boot, hir::SessionOptions{o.device});
    std::string base = !o.base.empty()                     ? o.base
                       : session.device().kind() == "cuda" ? "nccl"
                                                           : "mpi";
    // Read once: every rank has the same (the ipc backend's setup compares it).
    const std::size_t eager_max = hir::ipcEagerSendMaxBytes(hir::Settings::fromEnvironment());
    // variants[0] is the base; the index of each is its place in every row.
    std::vector<Variant> variants = {{base, base, "", base}};
    for (const std::string& p : o.protocols) {
      // auto: the program names no protocol, as a user's send would.
      Variant v{"ipc-" + p, "ipc", p == "auto" ? "" : p, p};
      if (p == "eager") v.max_bytes = eager_max;
      variants.push_back(v);
    }
    bool root = boot->rank() == 0;
    // The raw baseline's buffers, at the largest size (and at least the 8
    // bytes of the latency row).
    RawCopy raw(*boot, session.device(),
                static_cast<std::size_t>(std::max<int64_t>({o.min, o.max, 8})));
    std::FILE* csv = nullptr;
    if (root && !o.csv.empty()) {
      csv = std::fopen(o.csv.c_str(), "w");
      if (csv) std::fprintf(csv, "world,test,bytes,variant,us,gbps,ratio_to_%s\n", base.c_str());
    }

    // The table's columns after test and bytes, for one row's times `us` (the
    // variants' in order, then raw's; NaN where absent, printed "-"):
    // <v>_us for each variant then raw_us, <v>_GB/s likewise, <v>_x = base
    // time / variant time and <v>/raw = variant time / raw time for each
    // variant but the base.
    struct Cell {
      std::string name;
      double value;
      int width, prec;
    };
    auto cells = [&](int64_t bytes, const std::vector<double>& us) {
      std::vector<Cell> out;
      auto add = [&](std::string name, double value, int width, int prec) {
        int w = std::max(width, static_cast<int>(name.size()));
        out.push_back({std::move(name), value, w, prec});
      };
      auto gbps = [&](double t) { return static_cast<double>(bytes) / (t * 1e3); };
      const double r = us.back();
      for (std::size_t k = 0; k < variants.size(); ++k) add(variants[k].name + "_us", us[k], 10, 2);
      add("raw_us", r, 10, 2);
      for (std::size_t k = 0; k < variants.size(); ++k)
        add(variants[k].name + "_GB/s", gbps(us[k]), 9, 1);
      add("raw_GB/s", gbps(r), 9, 1);
      for (std::size_t k = 1; k < variants.size(); ++k)
        add(variants[k].name + "_x", us[0] / us[k], 7, 3);
      for (std::size_t k = 1; k < variants.size(); ++k)
        add(variants[k].name + "/raw", us[k] / r, 7, 3);
      return out;
    };
    if (root) {
      std::string header = fmt::format("{:<10} {:>11}", "test", "bytes");
      for (const Cell& c : cells(8, std::vector<double>(variants.size() + 1, 1.0)))
        header += fmt::format(" {:>{}}", c.name, c.width);
      std::printf("# hir_p2p_bench: %d ranks, device %s, median of %d runs\n%s\n", boot->world(),
                  session.device().describe().c_str(), o.reps, header.c_str());
    }
    auto row = [&](const char* test, int64_t bytes, const std::vector<double>& us) {
      if (!root) return;
      std::string line = fmt::format("{:<10} {:>11}", test, bytes);
      for (const Cell& c : cells(bytes, us))
        line += std::isfinite(c.value) ? fmt::format(" {:{}.{}f}", c.value, c.width, c.prec)
                                       : fmt::format(" {:>{}}", "-", c.width);
      std::printf("%s\n", line.c_str());
      if (csv)
        for (std::size_t k = 0; k < us.size(); ++k) {
          if (!std::isfinite(us[k])) continue;
          std::fprintf(csv, "%d,%s,%lld,%s,%.3f,%.2f,%.4f\n", boot->world(), test,
                       static_cast<long long>(bytes),
                       k < variants.size() ? variants[k].label.c_str() : "raw", us[k],
                       static_cast<double>(bytes) / (us[k] * 1e3), us[0] / us[k]);
        }
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    // Times the variants that carry `bytes` (program(v) builds one's program),
    // and raw, interleaved; seconds per run by variant index, NaN for the
    // absent, then raw's.
    using ProgramFor = std::function<std::string(const Variant&)>;
    auto timeVariants = [&](int64_t bytes, const ProgramFor& program,
                            const std::function<void()>& raw_fn) {
      const std::vector<std::size_t> present = presentAt(variants, bytes);
      std::vector<std::string> texts;
      for (std::size_t k : present) texts.push_back(program(variants[k]));
      std::vector<double> t = timePrograms(session, texts, o.reps, raw_fn);
      std::vector<double> out(variants.size(), nan);
      for (std::size_t i = 0; i < present.size(); ++i) out[present[i]] = t[i];
      out.push_back(t.back());
      return out;
    };

    const int trips = 200;
    std::vector<double> t = timeVariants(
        8, [&](const Variant& v) { return pingPongProgram(v.backend, v.protocol, trips); },
        [&] { raw.pingCopies(8, trips); });
    std::vector<double> one_way;
    for (std::size_t k = 0; k < variants.size(); ++k) one_way.push_back(t[k] * 1e6 / (2.0 * trips));
    // raw: one 8-byte copy + synchronize (not a round trip).
    one_way.push_back(raw.available() ? t.back() * 1e6 / trips : nan);
    row("latency", 8, one_way);

    for (int64_t bytes = o.min; bytes <= o.max; bytes *= o.factor) {
      int m = messagesFor(bytes, o.run_bytes);
      std::vector<std::string> checked;
      for (std::size_t k : presentAt(variants, bytes))
        checked.push_back(
            bandwidthProgram(variants[k].backend, variants[k].protocol, bytes / 4, m, true));
      verifyPrograms(session, checked);
      std::vector<double> s = timeVariants(
          bytes,
          [&](const Variant& v) {
            return bandwidthProgram(v.backend, v.protocol, bytes / 4, m, false);
          },
          [&] { raw.stream(static_cast<std::size_t>(bytes), m); });
      std::vector<double> us;
      for (double x : s) us.push_back(x * 1e6 / m);
      if (!raw.available()) us.back() = nan;
      row("bandwidth", bytes, us);
      if (bytes <= o.pingpong_max) {
        // One way: time / (2 x round trips); raw: one copy + synchronize.
        const int n = static_cast<int>(std::clamp<int64_t>(o.run_bytes / (2 * bytes), 10, 200));
        std::vector<double> p = timeVariants(
            bytes,
            [&](const Variant& v) { return pingPongProgram(v.backend, v.protocol, n, bytes / 4); },
            [&] { raw.pingCopies(static_cast<std::size_t>(bytes), n); });
        std::vector<double> way;
        for (std::size_t k = 0; k < variants.size(); ++k) way.push_back(p[k] * 1e6 / (2.0 * n));
        way.push_back(raw.available() ? p.back() * 1e6 / n : nan);
        row("pingpong", bytes, way);
      }
      if (root) std::fflush(stdout);
    }
    bool raw_ok = raw.available();
    raw.close();
    if (root && csv) std::fclose(csv);
    if (root) {
      std::string names;
      for (std::size_t k = 1; k < variants.size(); ++k)
        names += fmt::format("{}{}", k > 1 ? ", " : "", variants[k].name);
      std::printf("# variants: %s (the base), then ipc with protocols %s\n", base.c_str(),
                  names.c_str());
      if (eager_max > 0)
        std::printf("# eager carries at most %zu bytes a message (HIR_IPC_EAGER_SEND_MAX): \"-\" "
                    "above\n",
                    eager_max);
      else
        std::printf("# eager is off (HIR_IPC_EAGER_MAX=0): \"-\" everywhere\n");
      std::printf("# <v>_x = %s time / variant time (> 1: faster than %s)\n", base.c_str(),
                  base.c_str());
      std::printf("# raw = device copies into the peer's IPC-mapped buffer, no protocol%s; "
                  "<v>/raw = variant time / raw time (1: as fast as raw), for %s\n",
                  raw_ok ? "" : " (unavailable here: no IPC between ranks 0 and 1)",
                  names.c_str());
    }
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
