// Every program in ir_examples/ runs in one process, without MPI, on the
// host device: at world 1 through createSelfBootstrap(), and at worlds 3 and
// 4 with createThreadBootstraps() (one thread per rank, each with its own
// Session and Evaluator); "auto" binds its communications to the local
// backend. Each runs twice in one evaluator and all its checks pass.
// Programs that name a backend needing ranks in separate processes (ipc)
// are skipped, saying so.
#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <thread>

#include <hostir/backend.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>
#include "ir/walk.h"
#include "support/test_util.h"

namespace hir {
namespace {

struct ExampleAt {
  std::string path;
  int world;
};

// How ctest and failures show a case (gtest would print its bytes).
void PrintTo(const ExampleAt& e, std::ostream* os) { *os << e.path << " at world " << e.world; }

class LocalExample : public ::testing::TestWithParam<ExampleAt> {};

// The first backend the program names that cannot run with `boot`, or "".
std::string unavailableBackend(const Program& p, const Bootstrap& boot) {
  const std::vector<BackendCaps> catalog = backendCatalog(boot);
  std::string found;
  walkNodes(p.body, [&](const Node& n) {
    const auto* c = std::get_if<Communication>(&n.v);
    if (c == nullptr || c->backend == "auto" || !found.empty()) return;
    const BackendCaps* caps = findCaps(catalog, c->backend);
    if (caps != nullptr && !caps->unavailable.empty()) found = caps->unavailable;
  });
  return found;
}

TEST_P(LocalExample, RunsTwiceWithEveryCheckPassing) {
  const auto& [path, world] = GetParam();
  const Program p = loadProgram(path);
  if (p.world_size && *p.world_size != world) GTEST_SKIP() << "needs world size " << *p.world_size;
  if (p.min_world_size && *p.min_world_size > world)
    GTEST_SKIP() << "needs at least " << *p.min_world_size << " ranks";
  std::vector<std::unique_ptr<Bootstrap>> bootstraps =
      world == 1 ? std::vector<std::unique_ptr<Bootstrap>>{}
                 : createThreadBootstraps(world, std::chrono::seconds(60));
  if (world == 1) bootstraps.push_back(createSelfBootstrap());
  if (std::string why = unavailableBackend(p, *bootstraps[0]); !why.empty()) GTEST_SKIP() << why;

  std::vector<std::string> errors(world);
  std::vector<RunReport> reports(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        Session session(*bootstraps[r], SessionOptions{"host"});
        EvaluatorOptions options;
        options.timeout = std::chrono::seconds(60);
        Evaluator ev(session, p, options);
        ev.run();
        ev.run();
        ev.synchronize();
        reports[r] = ev.report();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].format();
    EXPECT_GT(reports[r].checks_run, 0u) << "rank " << r << ": an example must check its results";
  }
}

std::vector<ExampleAt> examplesAtEveryWorld() {
  std::vector<ExampleAt> out;
  for (const std::string& path : test::listJson(test::examplesDir()))
    for (int world : {1, 3, 4}) out.push_back({path, world});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Examples, LocalExample, ::testing::ValuesIn(examplesAtEveryWorld()),
                         [](const auto& info) {
                           std::string n = std::filesystem::path(info.param.path).stem().string();
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n + "_world" + std::to_string(info.param.world);
                         });

}  // namespace
}  // namespace hir
