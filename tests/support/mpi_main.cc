// main() of the test binaries run under mpirun. Rank 0 prints the usual
// GoogleTest output; the other ranks print only their failures, each line
// prefixed with the rank. Every rank exits 1 when any rank failed, so that
// the launcher's status does not depend on which rank it reports.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/check.h"
#include "support/mpi_test.h"

namespace hir::test {

namespace {

std::unique_ptr<Bootstrap> g_world;

// Prints the failures of a rank other than 0: "[rank R] file:line: message".
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::string where = result.file_name() ? result.file_name() : "unknown file";
    if (result.line_number() >= 0) where += ":" + std::to_string(result.line_number());
    printLines(fmt::format("{}: Failure\n{}", where, result.message()));
  }

  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      printLines(fmt::format("FAILED {}.{}", info.test_suite_name(), info.name()));
  }

 private:
  void printLines(const std::string& text) const {
    std::string out;
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      out += fmt::format("[rank {}] {}\n", rank_, text.substr(start, end - start));
      start = end + 1;
    }
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
  }

  int rank_;
};

// 1 if any rank's result is non-zero.
int combineResults(Bootstrap& world, int mine) {
  int32_t local = mine != 0 ? 1 : 0;
  std::vector<int32_t> all(static_cast<std::size_t>(world.world()));
  world.allgather(&local, all.data(), sizeof(local));
  for (int32_t r : all)
    if (r != 0) return 1;
  return 0;
}

}  // namespace

Bootstrap& world() {
  HIR_INTERNAL_ASSERT(g_world != nullptr, "hir::test::world() used outside the MPI test main");
  return *g_world;
}

}  // namespace hir::test

int main(int argc, char** argv) {
  using hir::test::g_world;
  try {
    g_world = hir::createMpiBootstrap(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot create the MPI bootstrap: %s\n", e.what());
    return 1;
  }
  testing::InitGoogleTest(&argc, argv);
  const int rank = g_world->rank();
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new hir::test::RankFailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  int combined = 1;
  try {
    combined = hir::test::combineResults(*g_world, result);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] cannot combine the test results: %s\n", rank, e.what());
  }
  if (rank == 0 && combined != result)
    std::printf("[rank 0] another rank failed (see its [rank R] lines above)\n");
  g_world.reset();  // MPI_Finalize
  return combined;
}
