#include "tools/run_output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/check.h"

namespace hir {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Unit {
  double scale;
  const char* name;
};

Unit unitFor(double seconds) {
  if (seconds < 1e-6) return {1e9, "ns"};
  if (seconds < 1e-3) return {1e6, "us"};
  if (seconds < 1.0) return {1e3, "ms"};
  return {1.0, "s"};
}

// Three significant digits (more for values of 1000 and above).
std::string threeDigits(double v) {
  if (v >= 100 || v == 0) return fmt::format("{:.0f}", v);
  if (v >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2f}", v);
}

std::string plural(uint64_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

// "5", or "2.5" when the runs did not all check alike.
std::string ratio(uint64_t n, uint64_t d) {
  if (d == 0) return "0";
  if (n % d == 0) return fmt::format("{}", n / d);
  return fmt::format("{:.1f}", static_cast<double>(n) / static_cast<double>(d));
}

// A bandwidth in GB/s: three significant digits, also below 0.01.
std::string bandwidthText(double gbps) {
  return gbps >= 0.01 || gbps == 0 ? threeDigits(gbps) : fmt::format("{:.2e}", gbps);
}

double gbPerSecond(int64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

}  // namespace

std::string formatDuration(double seconds) {
  const Unit u = unitFor(seconds);
  return fmt::format("{} {}", threeDigits(seconds * u.scale), u.name);
}

std::string formatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (v == std::floor(v)) return fmt::format("{:.0f} {}", v, kUnits[u]);
  return fmt::format("{} {}", threeDigits(v), kUnits[u]);
}

// ----------------------------------------------------------------- progress

Progress::Progress(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  // Ranks started by `hir run --np` write to mpirun's pipes; the launcher
  // says whether its own standard error is a terminal.
  const char* launcher_tty = std::getenv("HIR_STDERR_TTY");
  tty_ = launcher_tty ? std::string(launcher_tty) == "1" : isatty(STDERR_FILENO) == 1;
  stage_start_ = 0;
  thread_ = std::thread([this] { loop(); });
}

Progress::~Progress() {
  if (!enabled_) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (shown_ && tty_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
}

void Progress::stage(std::string label, int64_t warmup, int64_t runs) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  label_ = std::move(label);
  warmup_ = warmup;
  runs_ = runs;
  done_.store(0, std::memory_order_relaxed);
  stage_start_ = -1;  // the thread takes the time
}

void Progress::clear() {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  if (shown_ && tty_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    shown_ = false;
  }
}

std::string Progress::line(double elapsed) {
  const int64_t done = std::min(done_.load(std::memory_order_relaxed), runs_);
  if (stage_start_ < 0) stage_start_ = elapsed;
  const double in_stage = elapsed - stage_start_;
  std::string out = fmt::format("hir: {}run {} of {}{}, {:.0f} s", label_, done, runs_,
                                done <= warmup_ && warmup_ > 0 ? " (warm-up)" : "", elapsed);
  if (done > 0 && done < runs_ && in_stage > 1.0)
    out += fmt::format(", about {:.0f} s left",
                       in_stage / static_cast<double>(done) * static_cast<double>(runs_ - done));
  return out;
}

void Progress::loop() {
  const Clock::time_point start = Clock::now();
  const double first = tty_ ? 3.0 : 10.0;  // seconds before the first line
  const double every = tty_ ? 0.5 : 10.0;
  double last = -every;
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(tty_ ? 500 : 1000));
    if (stop_) break;
    const double elapsed = secondsSince(start);
    if (stage_start_ < 0) stage_start_ = elapsed;
    if (elapsed < first || elapsed - last < every) continue;
    last = elapsed;
    const std::string text = line(elapsed);
    if (tty_)
      std::fprintf(stderr, "\r\033[K%s", text.c_str());
    else
      std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
}

// ------------------------------------------------------------------ timing

double timeRuns(Evaluator& ev, Bootstrap& boot, int warmup, int iters, Progress& progress) {
  for (int i = 0; i < warmup; ++i) {
    ev.run();
    progress.ran();
  }
  ev.synchronize();
  boot.barrier();
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    ev.run();
    progress.ran();
  }
  ev.synchronize();
  return secondsSince(t0) / iters;
}

namespace {

// RankFigures on the wire (one allgather; every rank runs this binary).
struct Wire {
  double seconds_per_run;
  uint64_t checks_run, checks_failed, elements_checked, wrong_elements, wrong_per_execution;
  uint64_t failed;
};

}  // namespace

RunFigures gatherFigures(Bootstrap& boot, double seconds_per_run, const RunReport& report) {
  Wire mine{seconds_per_run, report.checks_run, report.checks_failed, report.elements_checked,
            report.wrong_elements, 0, report.ok() ? 0u : 1u};
  for (const CheckFailure& f : report.failures)
    mine.wrong_per_execution += f.wrong_max > 0 ? f.wrong_max : f.mismatches;
  std::vector<Wire> all(static_cast<std::size_t>(boot.world()));
  if (boot.world() > 1)
    boot.allgather(&mine, all.data(), sizeof(Wire));
  else
    all[0] = mine;
  RunFigures f;
  std::vector<double> times;
  for (const Wire& w : all) {
    RankFigures r{w.seconds_per_run, w.checks_run,     w.checks_failed,
                  w.elements_checked, w.wrong_elements, w.wrong_per_execution};
    f.ranks.push_back(r);
    times.push_back(w.seconds_per_run);
    f.total.checks_run += r.checks_run;
    f.total.checks_failed += r.checks_failed;
    f.total.elements_checked += r.elements_checked;
    f.total.wrong_elements += r.wrong_elements;
    f.total.wrong_per_execution += r.wrong_per_execution;
    f.failed_ranks += static_cast<int>(w.failed);
  }
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  f.min = times.front();
  f.max = times.back();
  f.median = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  double sum = 0;
  for (double t : times) sum += t;
  f.mean = sum / static_cast<double>(n);
  f.total.seconds_per_run = f.mean;
  return f;
}

std::vector<std::string> gatherText(Bootstrap& boot, const std::string& text) {
  const int world = boot.world();
  if (world == 1) return {text};
  uint64_t size = text.size();
  std::vector<uint64_t> sizes(static_cast<std::size_t>(world));
  boot.allgather(&size, sizes.data(), sizeof size);
  const uint64_t width = std::max<uint64_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  std::string mine = text;
  mine.resize(width);
  std::string all(width * static_cast<uint64_t>(world), '\0');
  boot.allgather(mine.data(), all.data(), width);
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) out.push_back(all.substr(r * width, sizes[r]));
  return out;
}

// ---------------------------------------------------------------- the line

std::string resultLine(const RunDescription& d, const RunFigures& f, const ProgramVolume& v) {
  const uint64_t runs = static_cast<uint64_t>(d.iters) + static_cast<uint64_t>(d.warmup);
  if (f.failed_ranks > 0)
    return fmt::format(
        "hir: FAILED: '{}': checks failed on {} of {} ranks: {} of {} check executions found "
        "wrong elements ({} wrong elements in all)\n",
        d.program, f.failed_ranks, d.world, f.total.checks_failed, f.total.checks_run,
        f.total.wrong_elements);
  std::string out = fmt::format("hir: ok: '{}' on {} ({}): {}", d.program,
                                plural(static_cast<uint64_t>(d.world), "rank"), d.device,
                                d.iters == 1 ? "1 timed run" : fmt::format("{} timed runs", d.iters));
  if (d.warmup > 0) out += fmt::format(" after {} warm-up", d.warmup);
  if (d.graph && d.graph->captured)
    out += fmt::format(" (graph captured in {} at run 2; later runs replay it)",
                       formatDuration(d.graph->capture_ms / 1e3));
  out += fmt::format(", {} passed ({} per run{})", plural(f.total.checks_run, "check"),
                     ratio(f.total.checks_run, runs), d.world > 1 ? " over all ranks" : "");
  const Unit u = unitFor(f.mean);
  out += fmt::format(", {} per run", formatDuration(f.mean));
  if (d.world > 1)
    out += fmt::format(" (ranks {} - {} {})", threeDigits(f.min * u.scale),
                       threeDigits(f.max * u.scale), u.name);
  const int dom = v.complete ? v.dominant() : -1;
  if (dom >= 0 && v.dominates(0.8) && f.mean > 0) {
    const CommVolume& c = v.comms[dom];
    const double algbw = gbPerSecond(c.bytes_per_run, f.mean);
    out += fmt::format("; '{}' ({} of {}{}): algbw {} GB/s, busbw {} GB/s", c.name,
                       toString(c.type), formatBytes(c.bytes_max),
                       c.executions == 1 ? "" : fmt::format(", {} per run", c.executions),
                       bandwidthText(algbw), bandwidthText(algbw * c.busbw_factor));
  }
  return out + "\n";
}

// ---------------------------------------------------------------- the JSON

std::string failuresJson(const RunReport& report) {
  Json a = Json::array();
  for (const CheckFailure& f : report.failures) {
    Json j;
    j["rank"] = f.rank;
    j["path"] = f.path;
    j["tensor"] = f.tensor;
    j["first_failure"] = f.context;
    j["executions"] = f.executions;
    j["failed_executions"] = f.failed_executions;
    j["failed_executions_exact"] = f.exact;
    j["wrong_per_execution"] = {{"min", f.wrong_min}, {"max", f.wrong_max}};
    j["elements_per_execution"] = {{"min", f.elements_min}, {"max", f.elements_max}};
    j["wrong_elements"] = f.mismatches;
    Json first = Json::array();
    for (const CheckFailure::Element& e : f.first)
      if (e.integer)
        first.push_back({{"index", e.index}, {"got", e.got_int}, {"expected", e.expected_int}});
      else
        first.push_back({{"index", e.index}, {"got", e.got}, {"expected", e.expected}});
    j["first_wrong"] = std::move(first);
    a.push_back(std::move(j));
  }
  return a.dump();
}

std::string resultJson(const RunDescription& d, const Plan& plan, const RunFigures& f,
                       const ProgramVolume& v, const std::vector<std::string>& failures,
                       int exit_code) {
  Json j;
  j["format"] = "hostir-result/1";
  j["program"] = d.program;
  j["status"] = exit_code == 0 ? "ok" : "checks failed";
  j["exit_code"] = exit_code;
  j["world"] = d.world;
  j["device"] = d.device;
  j["device_kind"] = d.device_kind;
  std::set<std::string> seen;
  Json backends = Json::array();
  for (const PlanComm& c : plan.comms)
    if (seen.insert(plan.backends[c.backend].name).second)
      backends.push_back(plan.backends[c.backend].name);
  j["backends"] = std::move(backends);
  j["iters"] = d.iters;
  j["warmup"] = d.warmup;
  if (d.graph)
    j["graph"] = {{"captured", d.graph->captured},
                  {"capture_seconds", d.graph->capture_ms / 1e3},
                  {"launches", d.graph->launches}};
  else
    j["graph"] = nullptr;
  j["symmetric_allocations"] = d.symmetric;
  Json params = Json::object();
  for (const auto& [name, value] : d.params) params[name] = value;
  j["params"] = std::move(params);

  Json per_rank = Json::array();
  for (const RankFigures& r : f.ranks) per_rank.push_back(r.seconds_per_run);
  j["seconds_per_run"] = {{"mean", f.mean},
                          {"min", f.min},
                          {"median", f.median},
                          {"max", f.max},
                          {"ranks", std::move(per_rank)}};

  Json comms = Json::array();
  for (const CommVolume& c : v.comms) {
    Json cj;
    cj["name"] = c.name;
    cj["path"] = c.path;
    cj["type"] = toString(c.type);
    cj["backend"] = c.backend;
    cj["dtype"] = toString(c.dtype);
    cj["reduce"] = c.reduce;
    cj["root"] = c.root;
    cj["team_size"] = c.team_size;
    cj["rank"] = c.rank;
    cj["executions_per_run"] = c.executions;
    cj["bytes_per_execution"] = c.bytes_min == c.bytes_max ? Json(c.bytes_max) : Json(nullptr);
    cj["bytes_per_execution_min"] = c.bytes_min;
    cj["bytes_per_execution_max"] = c.bytes_max;
    cj["count"] = c.count();
    cj["bytes_per_run"] = c.bytes_per_run;
    const bool timed = c.executions > 0 && f.mean > 0;
    const double algbw = gbPerSecond(c.bytes_per_run, f.mean);
    cj["seconds_per_execution"] =
        timed ? Json(f.mean / static_cast<double>(c.executions)) : Json(nullptr);
    cj["algbw_GBps"] = timed ? Json(algbw) : Json(nullptr);
    cj["busbw_factor"] = c.busbw_factor;
    cj["busbw_GBps"] = timed ? Json(algbw * c.busbw_factor) : Json(nullptr);
    comms.push_back(std::move(cj));
  }
  j["communications_counted"] = v.complete;
  if (!v.complete) j["communications_note"] = v.why;
  j["communications"] = std::move(comms);

  const uint64_t runs = static_cast<uint64_t>(d.iters) + static_cast<uint64_t>(d.warmup);
  Json all_failures = Json::array();
  for (const std::string& text : failures)
    for (Json& one : Json::parse(text)) all_failures.push_back(std::move(one));
  j["checks"] = {
      {"nodes", d.check_nodes},
      {"executions", f.total.checks_run},
      {"executions_per_run",
       runs ? static_cast<double>(f.total.checks_run) / static_cast<double>(runs) : 0.0},
      {"passed", f.total.checks_run - f.total.checks_failed},
      {"failed", f.total.checks_failed},
      {"elements_checked", f.total.elements_checked},
      {"wrong_elements", f.total.wrong_elements},
      {"failures", std::move(all_failures)}};

  Json ranks = Json::array();
  for (std::size_t r = 0; r < f.ranks.size(); ++r) {
    const RankFigures& x = f.ranks[r];
    ranks.push_back({{"rank", r},
                     {"seconds_per_run", x.seconds_per_run},
                     {"check_executions", x.checks_run},
                     {"checks_failed", x.checks_failed},
                     {"elements_checked", x.elements_checked},
                     {"wrong_elements", x.wrong_elements}});
  }
  j["ranks"] = std::move(ranks);
  return j.dump(2) + "\n";
}

}  // namespace hir
