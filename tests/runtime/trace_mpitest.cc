// The timeline of EvaluatorOptions::trace on the host device, gathered by
// writeTrace into one Chrome trace: it parses, names every rank, has a host
// span for every node, GPU spans on the tracks where the work ran (timed on
// the streams: two streams that overlap have overlapping spans), and an
// arrow from each post to its waits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>
#include "plan/plan.h"
#include "runtime/trace.h"
#include "support/mpi_test.h"

namespace hir {
namespace {

using nlohmann::json;

EvaluatorOptions traced() {
  EvaluatorOptions o;
  o.timeout = std::chrono::seconds(60);
  o.trace = true;
  return o;
}

// Stream 1 fills `a` while stream 0 fills `b`: both start once stream 0's
// earlier work is done (sync_stream 0 on stream 1), and the fills are large
// (the host device's streams are threads, so they run at the same time).
// An allreduce waited on the stream and one waited by the host; a loop of
// two iterations.
constexpr const char* kOverlap = R"({
  "format": "hostir/1", "name": "overlap", "params": {"n": 4194304},
  "body": [
    {"op": "allocate", "name": "a", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "b", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": [1024]},
    {"op": "allocate", "name": "y", "dtype": "float32", "shape": [1024]},
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [
      {"op": "fill", "tensor": "x", "value": "rank + i", "step": 1},
      {"op": "fill", "tensor": "y", "value": "rank", "step": 0},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
       "reduce": "sum"},
      {"op": "communication", "name": "ar_host", "type": "allreduce", "input": "y",
       "output": "y", "reduce": "sum"},
      {"op": "set_stream", "stream": 1},
      {"op": "sync_stream", "stream": 0},
      {"op": "fill", "tensor": "a", "value": "i", "step": 1},
      {"op": "set_stream", "stream": 0},
      {"op": "fill", "tensor": "b", "value": "i", "step": 2},
      {"op": "sync_stream", "stream": 1},
      {"op": "wait", "communication": "ar"},
      {"op": "wait", "communication": "ar_host", "mode": "host"},
      {"op": "check", "tensor": "x", "value": "world * (world - 1) / 2 + world * i",
       "step": "world"},
      {"op": "check", "tensor": "a", "value": "i", "step": 1}
    ]}
  ]})";

// The same path on every rank (rank 0's pid), so concurrent test runs do
// not share a file.
std::string tracePath(const std::string& what) {
  int pid = static_cast<int>(getpid());
  test::world().broadcast(&pid, sizeof pid, 0);
  return ::testing::TempDir() + "hir_trace_" + what + "_" + std::to_string(pid) + ".json";
}

json readJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return json::parse(in);  // throws on invalid JSON
}

// One rank's spans and tracks, from the parsed trace.
struct Span {
  std::string name, cat, track;
  int tid = 0;
  double begin = 0, end = 0;  // microseconds
  json args;
};

struct RankView {
  std::map<int, std::string> tracks;  // tid -> thread_name
  std::vector<Span> spans;
  std::vector<json> flow_starts, flow_ends;
  bool named = false;
  std::string name;
};

std::map<int, RankView> viewOf(const json& trace) {
  std::map<int, RankView> ranks;
  for (const json& e : trace.at("traceEvents")) {
    const int pid = e.at("pid").get<int>();
    RankView& r = ranks[pid];
    const std::string ph = e.at("ph").get<std::string>();
    if (ph == "M" && e.at("name") == "process_name") {
      r.named = true;
      r.name = e.at("args").at("name").get<std::string>();
    } else if (ph == "M" && e.at("name") == "thread_name") {
      r.tracks[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    } else if (ph == "X") {
      Span s;
      s.name = e.at("name").get<std::string>();
      s.cat = e.at("cat").get<std::string>();
      s.tid = e.at("tid").get<int>();
      s.begin = e.at("ts").get<double>();
      s.end = s.begin + e.at("dur").get<double>();
      s.args = e.value("args", json::object());
      r.spans.push_back(s);
    } else if (ph == "s") {
      r.flow_starts.push_back(e);
    } else if (ph == "f") {
      r.flow_ends.push_back(e);
    }
  }
  for (auto& [pid, r] : ranks)
    for (Span& s : r.spans) s.track = r.tracks.count(s.tid) ? r.tracks[s.tid] : "?";
  return ranks;
}

// "op /path (detail)": the path of a span's name.
std::string pathOf(const std::string& name) {
  const auto sp = name.find(' ');
  if (sp == std::string::npos) return "";
  const auto end = name.find(' ', sp + 1);
  return name.substr(sp + 1, end == std::string::npos ? std::string::npos : end - sp - 1);
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Runs kOverlap `runs` times with tracing and writes the trace; returns it
// parsed, and the plan's node paths.
struct Traced {
  json trace;
  std::vector<std::string> paths;
};
Traced runOverlap(const std::string& what, int runs = 1) {
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(kOverlap), traced());
  for (int i = 0; i < runs; ++i) ev.run();
  ev.synchronize();
  EXPECT_TRUE(ev.report().ok()) << ev.report().format();
  const std::string path = tracePath(what);
  writeTrace(test::world(), ev.traceEvents(), path);
  Traced t{readJson(path), {}};
  for (const PlanNode& n : ev.plan().nodes) t.paths.push_back(n.path);
  test::world().barrier();  // every rank read it
  if (test::world().rank() == 0) std::remove(path.c_str());
  return t;
}

TEST(Trace, TheFileIsOneChromeTraceThatNamesEveryRank) {
  Traced t = runOverlap("names");
  ASSERT_TRUE(t.trace.contains("traceEvents"));
  ASSERT_TRUE(t.trace.at("traceEvents").is_array());
  EXPECT_EQ(t.trace.value("displayTimeUnit", ""), "ns");
  auto ranks = viewOf(t.trace);
  for (int r = 0; r < test::world().world(); ++r) {
    ASSERT_TRUE(ranks.count(r)) << "no events of rank " << r;
    EXPECT_TRUE(ranks[r].named) << "no process_name for rank " << r;
    EXPECT_EQ(ranks[r].name, "rank " + std::to_string(r));
  }
  EXPECT_EQ(static_cast<int>(ranks.size()), test::world().world());
}

TEST(Trace, EveryNodeHasAHostSpanWithItsLoopIndices) {
  Traced t = runOverlap("host");
  auto ranks = viewOf(t.trace);
  for (auto& [rank, r] : ranks) {
    std::set<std::string> seen;
    for (const Span& s : r.spans)
      if (s.cat == "host") {
        EXPECT_EQ(s.track, "host") << s.name;
        EXPECT_LE(s.begin, s.end) << s.name;
        seen.insert(pathOf(s.name));
      }
    for (const std::string& p : t.paths)
      EXPECT_TRUE(seen.count(p)) << "rank " << rank << ": no host span for node " << p;
    // The fill inside the loop ran with i = 0 and i = 1.
    std::set<int64_t> indices;
    for (const Span& s : r.spans)
      if (s.cat == "host" && s.name.rfind("fill ", 0) == 0 && endsWith(s.name, "(a)"))
        indices.insert(s.args.at("i").get<int64_t>());
    EXPECT_EQ(indices, (std::set<int64_t>{0, 1})) << "rank " << rank;
  }
}

TEST(Trace, ComputeAndCommunicationsAreOnTheTracksTheyRanOn) {
  Traced t = runOverlap("tracks");
  auto ranks = viewOf(t.trace);
  for (auto& [rank, r] : ranks) {
    std::map<std::string, std::multiset<std::string>> on;  // what -> tracks
    for (const Span& s : r.spans) {
      if (s.cat == "host") continue;
      EXPECT_LE(s.begin, s.end) << s.name;
      on[s.name.substr(0, s.name.find(' ')) + " " + s.name.substr(s.name.rfind(' ') + 1)].insert(
          s.track);
    }
    // Two loop iterations: each span twice.
    EXPECT_EQ(on["fill (a)"], (std::multiset<std::string>{"stream 1", "stream 1"})) << rank;
    EXPECT_EQ(on["fill (b)"], (std::multiset<std::string>{"stream 0", "stream 0"})) << rank;
    EXPECT_EQ(on["check (x)"], (std::multiset<std::string>{"stream 0", "stream 0"})) << rank;
    // Posted off the stream on mpi, the host device's collectives backend
    // (a second lane where two posts are in flight together).
    for (const char* comm : {"communication (ar)", "communication (ar_host)"}) {
      ASSERT_EQ(on[comm].size(), 2u) << rank << " " << comm;
      for (const std::string& track : on[comm])
        EXPECT_EQ(track.rfind("mpi", 0), 0u) << rank << " " << comm << " on " << track;
    }
    // The stream-mode wait stalls stream 0; the host-mode one is host time.
    EXPECT_EQ(on["wait (ar)"], (std::multiset<std::string>{"stream 0", "stream 0"})) << rank;
    EXPECT_EQ(on.count("wait (ar_host)"), 0u) << rank;
  }
}

TEST(Trace, EveryWaitHasAnArrowFromItsPost) {
  Traced t = runOverlap("flows");
  auto ranks = viewOf(t.trace);
  for (auto& [rank, view] : ranks) {
    auto& r = view;  // a lambda may not capture a structured binding (clang 14)
    // The span on track `tid` whose interval holds `ts`.
    auto at = [&](int tid, double ts) -> const Span* {
      for (const Span& s : r.spans)
        if (s.tid == tid && s.begin <= ts && ts <= s.end) return &s;
      return nullptr;
    };
    std::map<uint64_t, const json*> starts;
    for (const json& s : r.flow_starts) starts[s.at("id").get<uint64_t>()] = &s;
    std::map<std::string, int> arrows;  // comm -> arrows into its waits
    for (const json& f : r.flow_ends) {
      auto it = starts.find(f.at("id").get<uint64_t>());
      ASSERT_NE(it, starts.end()) << "a flow end without its start on rank " << rank;
      const json& s = *it->second;
      EXPECT_EQ(f.value("bp", ""), "e");
      EXPECT_LE(s.at("ts").get<double>(), f.at("ts").get<double>()) << "an arrow back in time";
      const Span* post = at(s.at("tid").get<int>(), s.at("ts").get<double>());
      const Span* wait = at(f.at("tid").get<int>(), f.at("ts").get<double>());
      ASSERT_NE(post, nullptr) << "a flow start outside any span on rank " << rank;
      ASSERT_NE(wait, nullptr) << "a flow end outside any span on rank " << rank;
      EXPECT_EQ(post->name.rfind("communication ", 0), 0u) << post->name;
      EXPECT_EQ(wait->name.rfind("wait ", 0), 0u) << wait->name;
      const std::string comm = post->name.substr(post->name.rfind(' ') + 1);
      EXPECT_TRUE(endsWith(wait->name, comm)) << post->name << " -> " << wait->name;
      ++arrows[comm];
    }
    EXPECT_EQ(arrows["(ar)"], 2) << "rank " << rank;       // one per loop iteration
    EXPECT_EQ(arrows["(ar_host)"], 2) << "rank " << rank;
  }
}

TEST(Trace, StreamsThatOverlapHaveOverlappingSpans) {
  Traced t = runOverlap("overlap", 2);
  auto ranks = viewOf(t.trace);
  for (auto& [rank, r] : ranks) {
    // Each (run, i): the fill of a on stream 1 and of b on stream 0.
    std::map<std::pair<int64_t, int64_t>, const Span*> a, b;
    for (const Span& s : r.spans) {
      if (s.cat != "compute" || s.name.rfind("fill ", 0) != 0) continue;
      const auto key = std::make_pair(s.args.at("run").get<int64_t>(),
                                      s.args.at("i").get<int64_t>());
      if (endsWith(s.name, "(a)")) a[key] = &s;
      if (endsWith(s.name, "(b)")) b[key] = &s;
    }
    ASSERT_EQ(a.size(), 4u) << "rank " << rank;
    ASSERT_EQ(b.size(), 4u) << "rank " << rank;
    for (const auto& [key, sa] : a) {
      const Span* sb = b.at(key);
      EXPECT_LT(sa->begin, sb->end) << "rank " << rank << ": run " << key.first << ", i="
                                    << key.second << ": stream 1's fill began after stream 0's";
      EXPECT_LT(sb->begin, sa->end) << "rank " << rank << ": run " << key.first << ", i="
                                    << key.second << ": stream 0's fill began after stream 1's";
    }
  }
}

TEST(Trace, ARunWithoutTraceHasNoEvents) {
  Session session(test::world(), SessionOptions{"host"});
  EvaluatorOptions o;
  o.timeout = std::chrono::seconds(60);
  Evaluator ev(session, parseProgram(kOverlap), o);
  ev.run();
  ev.synchronize();
  EXPECT_EQ(ev.traceEvents(), "");
}

TEST(Trace, SpansOverTheCapAreDroppedAndTheTraceSaysSo) {
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(kOverlap), traced());
  Tracer tracer(session.device(), ev.plan(), test::world().rank(), std::chrono::seconds(60), 5);
  tracer.startRun(session.device().defaultStream());
  std::vector<int64_t> scalars(ev.plan().scalar_init);
  const auto now = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) tracer.host(0, now, now, scalars.data());
  const json events = json::parse("[" + tracer.events() + "]");
  int spans = 0;
  std::string labels;
  for (const json& e : events) {
    if (e.at("ph") == "X") ++spans;
    if (e.at("ph") == "M" && e.at("name") == "process_labels")
      labels = e.at("args").at("labels").get<std::string>();
  }
  EXPECT_EQ(spans, 5);
  EXPECT_NE(labels.find("3 spans or flows dropped over the cap of 5"), std::string::npos)
      << labels;
}

TEST(Trace, AFileThatCannotBeWrittenIsAUsageErrorOnEveryRank) {
  try {
    writeTrace(test::world(), "", "/nonexistent-dir/trace.json");
    FAIL() << "wrote a trace into a missing directory";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write the trace to '/nonexistent-dir/trace.json'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hir
