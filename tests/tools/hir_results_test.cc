// What `hir run` and `hir sweep` report for scripts and people: the JSON
// result (hostir-result/1), the result line, per-execution check counts,
// the sweep's rows, CSV and JSON, and scripts/plot_sweep.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace hir::test {
namespace {

using Json = nlohmann::json;

CommandResult hir(std::vector<std::string> args, int timeout_s = 180) {
  args.insert(args.begin(), hirBinary());
  return runCommand(args, timeout_s);
}

std::string data(const std::string& name) { return sourceDir() + "/tests/tools/data/" + name; }

// A fresh temporary folder, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = std::filesystem::temp_directory_path() / "hir-results-XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(HirResults, RunJsonHasTheProgramTimesCommunicationsAndChecks) {
  TempDir dir;
  const std::string out = dir.file("result.json");
  CommandResult r = hir({"run", data("allreduce_sized.json"), "--np", "2", "--device", "host",
                         "--iters", "3", "--warmup", "1", "--param", "n=1000", "--json", out});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Json j = Json::parse(readFile(out));
  EXPECT_EQ(j["format"], "hostir-result/1");
  EXPECT_EQ(j["program"], "allreduce_sized");
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["world"], 2);
  EXPECT_EQ(j["device_kind"], "host");
  EXPECT_EQ(j["backends"], Json::array({"mpi"}));
  EXPECT_EQ(j["iters"], 3);
  EXPECT_EQ(j["warmup"], 1);
  EXPECT_EQ(j["params"]["n"], 1000);
  EXPECT_TRUE(j["graph"].is_null());  // no --graph

  const Json& t = j["seconds_per_run"];
  ASSERT_EQ(t["ranks"].size(), 2u);
  EXPECT_GT(t["min"].get<double>(), 0.0);
  EXPECT_LE(t["min"].get<double>(), t["median"].get<double>());
  EXPECT_LE(t["median"].get<double>(), t["max"].get<double>());
  EXPECT_DOUBLE_EQ(t["median"].get<double>(),
                   (t["ranks"][0].get<double>() + t["ranks"][1].get<double>()) / 2);

  ASSERT_EQ(j["communications"].size(), 1u);
  const Json& c = j["communications"][0];
  EXPECT_EQ(c["name"], "ar");
  EXPECT_EQ(c["path"], "/body/2");
  EXPECT_EQ(c["type"], "allreduce");
  EXPECT_EQ(c["backend"], "mpi");
  EXPECT_EQ(c["executions_per_run"], 1);
  EXPECT_EQ(c["bytes_per_execution"], 1000 * 4);  // count x sizeof(float32)
  EXPECT_EQ(c["count"], 1000);
  EXPECT_EQ(c["bytes_per_run"], 4000);
  EXPECT_DOUBLE_EQ(c["busbw_factor"].get<double>(), 1.0);  // 2(n-1)/n at n = 2
  const double mean = t["mean"].get<double>();
  EXPECT_DOUBLE_EQ(c["seconds_per_execution"].get<double>(), mean);
  EXPECT_NEAR(c["algbw_GBps"].get<double>(), 4000 / mean / 1e9, 1e-12);
  EXPECT_DOUBLE_EQ(c["busbw_GBps"].get<double>(), c["algbw_GBps"].get<double>());

  const Json& checks = j["checks"];
  EXPECT_EQ(checks["nodes"], 1);
  EXPECT_EQ(checks["executions"], 2 * 4);  // 2 ranks x (3 + 1) runs
  EXPECT_EQ(checks["passed"], 8);
  EXPECT_EQ(checks["failed"], 0);
  EXPECT_EQ(checks["elements_checked"], 8 * 1000);
  EXPECT_TRUE(checks["failures"].empty());
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["check_executions"], 4);
}

// nccl-tests' factors: allreduce 2(n-1)/n; allgather (n-1)/n, with the
// gathered buffer as the size.
TEST(HirResults, BusBandwidthFactorsFollowNcclTests) {
  TempDir dir;
  const std::string ar = dir.file("ar.json");
  CommandResult r = hir({"run", data("allreduce_sized.json"), "--np", "3", "--device", "host",
                         "--json", ar});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Json c = Json::parse(readFile(ar))["communications"][0];
  EXPECT_DOUBLE_EQ(c["busbw_factor"].get<double>(), 2.0 * 2 / 3);
  EXPECT_NEAR(c["busbw_GBps"].get<double>(), c["algbw_GBps"].get<double>() * 4 / 3, 1e-12);

  const std::string ag = dir.file("ag.json");
  r = hir({"run", examplesDir() + "/allgather.json", "--np", "2", "--device", "host",
           "--param", "n=8", "--json", ag});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Json j = Json::parse(readFile(ag));
  ASSERT_EQ(j["communications"].size(), 2u);
  const Json& f32 = j["communications"][0];  // 'ag': float32, 8 per rank
  EXPECT_EQ(f32["name"], "ag");
  EXPECT_EQ(f32["bytes_per_execution"], 2 * 8 * 4);
  EXPECT_EQ(f32["count"], 16);
  EXPECT_DOUBLE_EQ(f32["busbw_factor"].get<double>(), 0.5);
}

TEST(HirResults, JsonToStandardOutputIsTheDocumentAlone) {
  CommandResult r = hir({"run", data("allreduce_sized.json"), "--device", "host", "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Json::parse(r.out)["format"], "hostir-result/1");
  EXPECT_NE(r.err.find("hir: ok: 'allreduce_sized'"), std::string::npos) << r.err;
}

TEST(HirResults, ResultLineCountsTimedRunsApartFromWarmupWithRankSpread) {
  CommandResult r = hir({"run", data("allreduce_sized.json"), "--np", "2", "--device", "host",
                         "--iters", "20", "--warmup", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("on 2 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": 20 timed runs after 2 warm-up, 44 checks passed (2 per run over all "
                       "ranks), "),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"([0-9.]+ (ns|us|ms|s) per run \(ranks [0-9.]+ - [0-9.]+ (ns|us|ms|s)\))")))
      << r.out;
  // One communication: its bandwidth.
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"('ar' \(allreduce of 4 KiB\): algbw \S+ GB/s, busbw \S+ GB/s)")))
      << r.out;

  CommandResult one = hir({"run", data("allreduce_sized.json"), "--device", "host"});
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  EXPECT_NE(one.out.find(": 1 timed run, 1 check passed (1 per run), "), std::string::npos)
      << one.out;
  EXPECT_EQ(one.out.find("ranks "), std::string::npos) << one.out;
}

TEST(HirResults, FailedCheckCountsWrongElementsPerExecution) {
  TempDir dir;
  const std::string out = dir.file("failed.json");
  CommandResult r = hir({"run", data("failing_check.json"), "--np", "2", "--device", "host",
                         "--iters", "3", "--json", out});
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  // 16 elements, all wrong in each of the 3 executions: 16 per execution.
  EXPECT_NE(r.err.find("rank 1: check failed at /body/2: 'x' has 16 wrong elements of 16 in 3 "
                       "of 3 executions (48 in all); [0] got 1 expected 2"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("hir: FAILED: 'failing_check': checks failed on 2 of 2 ranks: 6 of 6 "
                       "check executions found wrong elements (96 wrong elements in all)"),
            std::string::npos)
      << r.out;
  const Json j = Json::parse(readFile(out));
  EXPECT_EQ(j["status"], "checks failed");
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["checks"]["failed"], 6);
  EXPECT_EQ(j["checks"]["passed"], 0);
  EXPECT_EQ(j["checks"]["wrong_elements"], 96);
  ASSERT_EQ(j["checks"]["failures"].size(), 2u);
  const Json& f = j["checks"]["failures"][1];
  EXPECT_EQ(f["rank"], 1);
  EXPECT_EQ(f["path"], "/body/2");
  EXPECT_EQ(f["executions"], 3);
  EXPECT_EQ(f["failed_executions"], 3);
  EXPECT_EQ(f["wrong_per_execution"]["max"], 16);
  EXPECT_EQ(f["elements_per_execution"]["max"], 16);
  EXPECT_EQ(f["wrong_elements"], 48);
  EXPECT_EQ(f["first_wrong"][0]["got"], 1.0);
}

TEST(HirResults, SweepOfThreeSizesPrintsWritesAndParsesThreeRows) {
  TempDir dir;
  const std::string csv = dir.file("sweep.csv"), json = dir.file("sweep.json");
  CommandResult r = hir({"sweep", data("allreduce_sized.json"), "--param-size", "n", "-b", "1K",
                         "-e", "4K", "-f", "2", "-n", "2", "-w", "1", "--np", "2", "--device",
                         "host", "--csv", csv, "--json", json});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The table: three rows of nccl-tests' columns.
  std::vector<std::string> rows;
  for (const std::string& line : lines(r.out))
    if (!line.empty() && line[0] != '#') rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  EXPECT_TRUE(std::regex_search(
      rows[0], std::regex(R"(^\s+1024\s+256\s+float32\s+sum\s+-1\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+0$)")))
      << rows[0];
  EXPECT_NE(r.out.find("#wrong"), std::string::npos) << r.out;

  const std::vector<std::string> csv_lines = lines(readFile(csv));
  ASSERT_EQ(csv_lines.size(), 4u) << readFile(csv);
  EXPECT_EQ(csv_lines[0],
            "size,count,type,redop,root,time_us,algbw_GBps,busbw_GBps,wrong,n,executions_per_run");
  const int64_t sizes[] = {1024, 2048, 4096};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(csv_lines[i + 1].rfind(std::to_string(sizes[i]) + ",", 0), 0u) << csv_lines[i + 1];
    EXPECT_NE(csv_lines[i + 1].find(",0," + std::to_string(sizes[i] / 4) + ",1"),
              std::string::npos)
        << csv_lines[i + 1];  // #wrong 0, n = size / 4, one execution per run
  }

  const Json j = Json::parse(readFile(json));
  EXPECT_EQ(j["format"], "hostir-sweep/1");
  EXPECT_EQ(j["world"], 2);
  EXPECT_EQ(j["communication"]["name"], "ar");
  ASSERT_EQ(j["rows"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Json& row = j["rows"][i];
    EXPECT_EQ(row["size"], sizes[i]);
    EXPECT_EQ(row["param_value"], sizes[i] / 4);
    EXPECT_EQ(row["wrong"], 0);
    EXPECT_GT(row["time_us"].get<double>(), 0.0);
    EXPECT_NEAR(row["algbw_GBps"].get<double>(),
                sizes[i] / (row["time_us"].get<double>() * 1e-6) / 1e9, 1e-9);
  }
}

// The programs of scripts/ipc-collectives-bench.sh (bench/ipc/): each sweeps
// on the host at 2 ranks through ipc, measures its one collective (20
// executions per run) and finds nothing wrong.
TEST(HirResults, EveryIpcCollectiveBenchProgramSweepsOnTheHost) {
  const std::vector<std::string> programs = listJson(sourceDir() + "/bench/ipc");
  ASSERT_EQ(programs.size(), 5u);
  for (const std::string& program : programs) {
    TempDir dir;
    const std::string json = dir.file("sweep.json");
    CommandResult r = hir({"sweep", program, "--param-size", "n", "-b", "64", "-e", "256", "-f",
                           "4", "-n", "1", "-w", "0", "--np", "2", "--device", "host", "--json",
                           json, "--no-progress"});
    ASSERT_EQ(r.exit_code, 0) << program << "\n" << r.out << r.err;
    const Json j = Json::parse(readFile(json));
    EXPECT_EQ(j["communication"]["backend"], "ipc") << program;
    ASSERT_EQ(j["rows"].size(), 2u) << program;
    for (const Json& row : j["rows"]) {
      EXPECT_EQ(row["wrong"], 0) << program;
      EXPECT_EQ(row["executions_per_run"], 20) << program;
    }
  }
}

TEST(HirResults, SweepRefusesBadSizesAndUnknownParams) {
  const std::string prog = data("allreduce_sized.json");
  CommandResult bad = hir({"sweep", prog, "--param-size", "n", "-b", "8X"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--minbytes expects a size in bytes with an optional K, M, G or T "
                         "suffix (powers of 1024), got '8X'"),
            std::string::npos)
      << bad.err;
  CommandResult unknown = hir({"sweep", prog, "--param-size", "m", "-b", "8", "--device", "host"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("--param-size m: 'allreduce_sized' declares no such param (its "
                             "params: n)"),
            std::string::npos)
      << unknown.err;
  CommandResult no_size = hir({"sweep", prog, "-b", "8"});
  EXPECT_EQ(no_size.exit_code, 2);
  EXPECT_NE(no_size.err.find("needs --param-size NAME"), std::string::npos) << no_size.err;
  CommandResult both = hir({"sweep", prog, "--param-size", "n", "--param", "n=4", "-b", "8"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("the sweep sets n itself"), std::string::npos) << both.err;
  CommandResult help = hir({"sweep", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* word : {"--param-size", "--minbytes", "--maxbytes", "--stepfactor", "--iters",
                           "--warmup", "--param-unit", "--csv", "--json", "--np"})
    EXPECT_NE(help.out.find(word), std::string::npos) << word;
}

// --graph in a sweep: each size that will run is checked for capture; the
// unchecked probes that find the line from the param to bytes are not (they
// once made every --graph sweep fail with "the check was turned off"). On
// the host, the size's check finds what stops the capture.
TEST(HirResults, SweepWithGraphChecksTheSizesItRunsNotItsProbes) {
  CommandResult r = hir({"sweep", data("allreduce_sized.json"), "--param-size", "n", "-b", "1K",
                         "--graph", "--device", "host"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err.find("it was turned off"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a run cannot be captured into a graph"), std::string::npos) << r.err;
}

// The interpreter python3-matplotlib installs into (scripts/setup.sh), else
// the first python3 on PATH.
std::string python() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

TEST(HirResults, PlotSweepDrawsAPngFromACsvAndNcclTestsOutput) {
  TempDir dir;
  const std::string csv = dir.file("hir.csv"), nccl = dir.file("nccl.txt"),
                    png = dir.file("plot.png");
  std::ofstream(csv) << "size,count,type,redop,root,time_us,algbw_GBps,busbw_GBps,wrong,n,"
                        "executions_per_run\n"
                        "1024,256,float32,sum,-1,50.5,0.0203,0.0203,0,256,1\n"
                        "4096,1024,float32,sum,-1,61.2,0.0669,0.0669,0,1024,1\n";
  std::ofstream(nccl)
      << "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
         "        1024           256     float     sum      -1    12.10    0.08    0.08      0"
         "    11.90    0.09    0.09      0\n"
         "        4096          1024     float     sum      -1    13.00    0.32    0.32      0"
         "    12.90    0.32    0.32      0\n";
  CommandResult r = runCommand({python(), sourceDir() + "/scripts/plot_sweep.py", csv, nccl,
                                "--label", "hir", "--label", "nccl-tests", "-o", png});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string bytes = readFile(png);
  ASSERT_GT(bytes.size(), 8u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

}  // namespace
}  // namespace hir::test
