#include "testing/harness.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include <hostir/error.h>
#include <hostir/testing.h>

namespace hir::test {

std::string worldRequirementProblem(WorldRequirement kind, int needed, int have) {
  const char* macro = kind == WorldRequirement::Exactly ? "HIR_REQUIRE_WORLD"
                                                        : "HIR_REQUIRE_WORLD_AT_LEAST";
  if (needed < 1)
    throw UsageError(std::string(macro) + "(" + std::to_string(needed) +
                     "): expected a number of ranks of at least 1");
  const bool ok = kind == WorldRequirement::Exactly ? have == needed : have >= needed;
  if (ok) return "";
  return std::string("needs ") + (kind == WorldRequirement::Exactly ? "exactly " : "at least ") +
         std::to_string(needed) + (needed == 1 ? " rank" : " ranks") + ", the world has " +
         std::to_string(have);
}

namespace harness {

// Wire form: "failed=0|1\n", then one line per failure: "T Suite.Test" or
// "O text". Neither names nor texts hold a newline.
std::string encode(const RankOutcome& outcome) {
  std::string out = outcome.failed ? "failed=1\n" : "failed=0\n";
  for (const std::string& t : outcome.failed_tests) out += "T " + t + "\n";
  for (const std::string& o : outcome.other_failures) out += "O " + o + "\n";
  return out;
}

RankOutcome decode(int rank, const std::string& bytes) {
  RankOutcome outcome;
  outcome.rank = rank;
  std::istringstream in(bytes);
  std::string line;
  auto bad = [&](const std::string& what) {
    return InternalError("the test outcome of rank " + std::to_string(rank) + " is malformed: " +
                         what + " in '" + bytes + "'");
  };
  if (!std::getline(in, line) || (line != "failed=0" && line != "failed=1"))
    throw bad("expected a first line failed=0 or failed=1");
  outcome.failed = line == "failed=1";
  while (std::getline(in, line)) {
    if (line.size() < 2 || line[1] != ' ' || (line[0] != 'T' && line[0] != 'O'))
      throw bad("expected a line 'T <test>' or 'O <text>', found '" + line + "'");
    (line[0] == 'T' ? outcome.failed_tests : outcome.other_failures).push_back(line.substr(2));
  }
  return outcome;
}

std::string formatRanks(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string formatSummary(const std::vector<RankOutcome>& outcomes) {
  auto onRanks = [](const std::vector<int>& ranks) {
    return (ranks.size() == 1 ? "rank " : "ranks ") + formatRanks(ranks);
  };
  // Failed tests in the order they first failed (by rank, then as run).
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks_of;
  for (const RankOutcome& o : outcomes)
    for (const std::string& t : o.failed_tests) {
      auto [it, added] = ranks_of.try_emplace(t);
      if (added) order.push_back(t);
      if (it->second.empty() || it->second.back() != o.rank) it->second.push_back(o.rank);
    }
  std::string out;
  for (const std::string& t : order)
    out += "[hir] FAILED on " + onRanks(ranks_of[t]) + ": " + t + "\n";
  int failed_ranks = 0;
  for (const RankOutcome& o : outcomes) {
    for (const std::string& text : o.other_failures)
      out += "[hir] FAILED on rank " + std::to_string(o.rank) + ": " + text + "\n";
    if (o.failed || !o.failed_tests.empty() || !o.other_failures.empty()) ++failed_ranks;
  }
  const std::string world =
      std::to_string(outcomes.size()) + (outcomes.size() == 1 ? " rank" : " ranks");
  if (failed_ranks == 0) return out + "[hir] PASSED on all " + world + "\n";
  out += "[hir] FAILED on " + std::to_string(failed_ranks) + " of " + world;
  if (!order.empty())
    out += " (" + std::to_string(order.size()) +
           (order.size() == 1 ? " failed test)" : " failed tests)");
  return out + "\n";
}

std::string perRankOutput(const std::string& output, int rank, const std::string& program) {
  if (output.empty()) return output;
  const std::string tag = ".rank" + std::to_string(rank);
  const std::size_t colon = output.find(':');
  const std::string format = output.substr(0, colon);
  if (colon == std::string::npos) return format + ":test_detail" + tag + "." + format;
  const std::string path = output.substr(colon + 1);
  if (path.empty()) return format + ":test_detail" + tag + "." + format;
  if (path.back() == '/') return format + ":" + path + program + tag + "." + format;
  const std::size_t slash = path.rfind('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  const std::size_t dot = path.rfind('.');
  if (dot == std::string::npos || dot <= base) return format + ":" + path + tag;
  return format + ":" + path.substr(0, dot) + tag + path.substr(dot);
}

std::chrono::seconds endTimeout(const char* value) {
  if (value == nullptr) return std::chrono::seconds(300);
  const std::string text = value;
  const bool digits = !text.empty() && text.size() <= 5 &&
                      std::all_of(text.begin(), text.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
  const long seconds = digits ? std::strtol(text.c_str(), nullptr, 10) : 0;
  if (seconds < 1 || seconds > 86400)
    throw UsageError(
        "HIR_TEST_END_TIMEOUT_S: expected a whole number of seconds from 1 to 86400, found '" +
        text + "'");
  return std::chrono::seconds(seconds);
}

}  // namespace harness
}  // namespace hir::test
