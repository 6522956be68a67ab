#include "tools/sweep.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <utility>

#include <hostir/json.h>

#include "common/check.h"
#include "common/parse_int.h"
#include "compile/compile.h"
#include "tools/files.h"
#include "tools/run_output.h"

namespace hir {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::pair<char, int64_t> kSuffixes[] = {
    {'K', int64_t{1} << 10}, {'k', int64_t{1} << 10}, {'M', int64_t{1} << 20},
    {'m', int64_t{1} << 20}, {'G', int64_t{1} << 30}, {'g', int64_t{1} << 30},
    {'T', int64_t{1} << 40}, {'t', int64_t{1} << 40}};

struct Compiled {
  Program program;
  CommVolume comm;
  ProgramVolume volume;
};

// `program` with the param set to `value`, compiled with `job` (the
// cross-rank check only when `check_schedule`), and what it moves.
Compiled compileAt(const Program& program, const SweepOptions& o, int64_t value,
                   const CompileOptions& job, bool check_schedule) {
  Compiled c{program, {}, {}};
  applyParamOverrides(c.program, {{o.param, value}});
  CompileOptions co = job;
  co.check_schedule = check_schedule;
  CompiledProgram compiled = compile(c.program, co);
  // Only a size that will run must be capturable: the unchecked probes that
  // find the line from value to bytes never run.
  if (o.graph && check_schedule) requireCapturable(compiled);
  c.volume = commVolumes(compiled.plan);
  if (!c.volume.complete)
    throw UsageError(fmt::format("the sweep needs the bytes each communication moves: {}",
                                 c.volume.why));
  return c;
}

std::string sizeText(int64_t bytes) {
  return bytes < 1024 ? fmt::format("{} B", bytes)
                      : fmt::format("{} B ({})", bytes, formatBytes(bytes));
}

}  // namespace

int64_t parseSize(const std::string& flag, const std::string& text) {
  std::string digits = text;
  int64_t scale = 1;
  if (!digits.empty())
    for (const auto& [c, s] : kSuffixes)
      if (digits.back() == c) {
        scale = s;
        digits.pop_back();
        break;
      }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError(fmt::format(
        "{} expects a size in bytes with an optional K, M, G or T suffix (powers of 1024), got "
        "'{}'",
        flag, text));
  const int64_t n = parseInteger(flag, digits, 1, INT64_MAX / scale);
  return n * scale;
}

std::string parseParamUnit(const std::string& text) {
  if (text == "elements" || text == "bytes") return text;
  throw UsageError(
      fmt::format("--param-unit expects elements or bytes, got '{}'", text));
}

SweepPlan planSweep(const Program& program, const SweepOptions& o, const CompileOptions& job) {
  const Param* param = nullptr;
  std::string declared;
  for (const Param& p : program.params) {
    if (p.name == o.param) param = &p;
    declared += (declared.empty() ? "" : ", ") + p.name;
  }
  if (!param)
    throw UsageError(fmt::format("--param-size {}: '{}' declares no such param ({})", o.param,
                                 program.name,
                                 declared.empty() ? "it declares none" : "its params: " + declared));
  if (o.max_bytes < o.min_bytes)
    throw UsageError(fmt::format("--maxbytes ({}) is below --minbytes ({})", o.max_bytes,
                                 o.min_bytes));
  std::vector<int64_t> sizes;
  for (int64_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    if (s > o.max_bytes / o.factor) break;
    s *= o.factor;
  }

  // The measured communication, and the line from value to bytes.
  const int64_t d = std::max<int64_t>(1, param->value);
  Compiled lo = compileAt(program, o, d, job, false);
  Compiled hi = compileAt(program, o, 2 * d, job, false);
  const int dom = hi.volume.dominant();
  if (dom < 0)
    throw UsageError(fmt::format("'{}' moves no data between ranks at {} = {}: nothing to sweep",
                                 program.name, o.param, 2 * d));
  const double s1 = static_cast<double>(lo.volume.comms[dom].bytes_max);
  const double s2 = static_cast<double>(hi.volume.comms[dom].bytes_max);
  const double slope = (s2 - s1) / static_cast<double>(d);
  const double offset = s1 - slope * static_cast<double>(d);
  if (o.unit == "elements" && slope <= 0)
    throw UsageError(fmt::format(
        "--param-size {}: the size of '{}', the communication that moves the most, does not "
        "grow with {} ({} B at {} = {}, {} B at {}); use --param-unit bytes if {} is a size in "
        "bytes",
        o.param, hi.volume.comms[dom].name, o.param, s1, o.param, d, s2, 2 * d, o.param));

  SweepPlan plan;
  plan.comm = hi.volume.comms[dom].name;
  for (int64_t target : sizes) {
    int64_t value = target;
    if (o.unit == "elements")
      value = std::max<int64_t>(
          1, static_cast<int64_t>(std::floor((static_cast<double>(target) - offset) / slope + 1e-9)));
    if (!plan.points.empty() && plan.points.back().value == value) continue;
    Compiled at;
    try {
      at = compileAt(program, o, value, job, job.check_schedule);
    } catch (const Error& e) {
      throw UsageError(fmt::format("--param-size {}: the size {} needs {} = {}, which fails: {}",
                                   o.param, sizeText(target), o.param, value, e.what()));
    }
    SweepPoint point;
    point.target = target;
    point.value = value;
    point.comm = at.volume.comms[dom];
    point.program = std::move(at.program);
    plan.points.push_back(std::move(point));
  }
  return plan;
}

namespace {

struct Row {
  const SweepPoint* point = nullptr;
  double seconds = 0;  // per execution of the measured communication
  double algbw = 0, busbw = 0;
  uint64_t wrong = 0;
  RunFigures figures;
};

std::string header(const SweepOptions& o, Session& session, const Bootstrap& boot,
                   const std::string& program, const CommVolume& c) {
  std::string out = fmt::format(
      "# hir sweep: '{}' on {} rank{} ({}), {} timed runs after {} warm-up per size\n"
      "# measured: '{}' at {} ({} on {}, team of {}); {} = {}\n"
      "# time: per execution of '{}': the mean over ranks of each rank's mean time per run,\n"
      "#   divided by its executions per run; algbw: size / time; busbw: algbw x {:.4g}\n"
      "#\n"
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>9}  {:>7}  {:>7}  {:>6}\n"
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>9}  {:>7}  {:>7}\n",
      program, boot.world(), boot.world() == 1 ? "" : "s",
      session.device().describe(), o.iters, o.warmup, c.name, c.path,
      toString(c.type), c.backend, c.team_size, o.param,
      o.unit == "bytes" ? "bytes" : fmt::format("elements (of {})", toString(c.dtype)), c.name,
      c.busbw_factor, "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
      "#wrong", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)");
  return out;
}

std::string rowText(const Row& r) {
  const CommVolume& c = r.point->comm;
  return fmt::format("  {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>9.2f}  {:>7.2f}  {:>7.2f}  {:>6}\n",
                     c.bytes_max, c.count(), toString(c.dtype), c.reduce, c.root,
                     r.seconds * 1e6, r.algbw, r.busbw, r.wrong);
}

std::string csvText(const std::vector<Row>& rows, const std::string& param) {
  std::string out = fmt::format(
      "size,count,type,redop,root,time_us,algbw_GBps,busbw_GBps,wrong,{},executions_per_run\n",
      param);
  for (const Row& r : rows) {
    const CommVolume& c = r.point->comm;
    out += fmt::format("{},{},{},{},{},{:.6g},{:.6g},{:.6g},{},{},{}\n", c.bytes_max, c.count(),
                       toString(c.dtype), c.reduce, c.root, r.seconds * 1e6, r.algbw, r.busbw,
                       r.wrong, r.point->value, c.executions);
  }
  return out;
}

std::string jsonText(const std::vector<Row>& rows, const SweepOptions& o, Session& session,
                     const Bootstrap& boot, const std::string& program, int exit_code) {
  Json j;
  j["format"] = "hostir-sweep/1";
  j["program"] = program;
  j["status"] = exit_code == 0 ? "ok" : "checks failed";
  j["exit_code"] = exit_code;
  j["world"] = boot.world();
  j["device"] = session.device().describe();
  j["device_kind"] = std::string(session.device().kind());
  j["iters"] = o.iters;
  j["warmup"] = o.warmup;
  j["param"] = o.param;
  j["param_unit"] = o.unit;
  if (!rows.empty()) {
    const CommVolume& c = rows.front().point->comm;
    j["communication"] = {{"name", c.name},       {"path", c.path},
                          {"type", toString(c.type)}, {"backend", c.backend},
                          {"dtype", toString(c.dtype)}, {"reduce", c.reduce},
                          {"team_size", c.team_size}, {"busbw_factor", c.busbw_factor}};
  }
  Json list = Json::array();
  for (const Row& r : rows) {
    const CommVolume& c = r.point->comm;
    Json per_rank = Json::array();
    for (const RankFigures& x : r.figures.ranks) per_rank.push_back(x.seconds_per_run);
    list.push_back({{"size", c.bytes_max},
                    {"count", c.count()},
                    {"type", toString(c.dtype)},
                    {"redop", c.reduce},
                    {"root", c.root},
                    {"param_value", r.point->value},
                    {"requested_bytes", r.point->target},
                    {"executions_per_run", c.executions},
                    {"time_us", r.seconds * 1e6},
                    {"algbw_GBps", r.algbw},
                    {"busbw_GBps", r.busbw},
                    {"wrong", r.wrong},
                    {"checks_failed", r.figures.total.checks_failed},
                    {"seconds_per_run",
                     {{"mean", r.figures.mean},
                      {"min", r.figures.min},
                      {"median", r.figures.median},
                      {"max", r.figures.max},
                      {"ranks", std::move(per_rank)}}}});
  }
  j["rows"] = std::move(list);
  return j.dump(2) + "\n";
}

}  // namespace

int runSweep(Session& session, Bootstrap& boot, const SweepPlan& plan, const SweepOptions& o,
             const EvaluatorOptions& evaluator_options) {
  const bool root = boot.rank() == 0;
  const std::string& program = plan.points.front().program.name;
  // With --json - or --csv -, standard output is the document; the table
  // goes to standard error.
  std::ostream& table = (o.json == "-" || o.csv == "-") ? std::cerr : std::cout;
  if (root) table << header(o, session, boot, program, plan.points.front().comm) << std::flush;
  std::vector<Row> rows;
  Progress progress(root && o.progress);
  const std::size_t n = plan.points.size();
  for (std::size_t i = 0; i < n; ++i) {
    const SweepPoint& p = plan.points[i];
    progress.stage(fmt::format("size {} ({} of {}), ", formatBytes(p.comm.bytes_max), i + 1, n),
                   o.warmup, o.warmup + o.iters);
    Row r;
    r.point = &p;
    {
      Evaluator ev(session, p.program, evaluator_options);
      const double t = timeRuns(ev, boot, o.warmup, o.iters, progress);
      RunReport report = ev.report();
      std::cerr << report.format();
      r.figures = gatherFigures(boot, t, report);
    }
    const CommVolume& c = p.comm;
    r.seconds = c.executions > 0 ? r.figures.mean / static_cast<double>(c.executions) : 0;
    r.algbw = r.seconds > 0 ? static_cast<double>(c.bytes_max) / r.seconds / 1e9 : 0;
    r.busbw = r.algbw * c.busbw_factor;
    r.wrong = r.figures.total.wrong_per_execution;
    if (root) {
      progress.clear();
      table << rowText(r) << std::flush;
    }
    rows.push_back(std::move(r));
  }
  int failed_sizes = 0;
  double busbw_sum = 0;
  for (const Row& r : rows) {
    failed_sizes += r.figures.failed_ranks > 0 ? 1 : 0;
    busbw_sum += r.busbw;
  }
  const int code = failed_sizes > 0 ? kExitCheckFailed : kExitOk;
  if (!root) return code;
  progress.clear();
  table << fmt::format("# Avg bus bandwidth    : {:.4g} GB/s\n",
                       busbw_sum / static_cast<double>(rows.size()));
  if (failed_sizes > 0)
    table << fmt::format("hir: FAILED: '{}': checks failed at {} of {} sizes\n", program,
                         failed_sizes, rows.size());
  table << std::flush;
  if (!o.csv.empty()) writeTextFile(o.csv, csvText(rows, o.param), "sweep's CSV");
  if (!o.json.empty())
    writeTextFile(o.json, jsonText(rows, o, session, boot, program, code), "sweep's JSON");
  return code;
}

}  // namespace hir
