// Every program in ir_examples/ runs on the host device at the world size of
// the MPI job (ctest runs this binary at 1, 2, 3 and 4 ranks), twice in one
// evaluator (allocation caches, event reuse), and all its checks pass.
#include <gtest/gtest.h>

#include <filesystem>

#include <hostir/json.h>
#include <hostir/evaluator.h>
#include <hostir/session.h>
#include "support/mpi_test.h"
#include "support/test_util.h"

namespace hir {
namespace {

class ExampleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExampleTest, RunsTwiceWithEveryCheckPassing) {
  Program p = loadProgram(GetParam());
  Bootstrap& world = test::world();
  if (p.world_size && *p.world_size != world.world())
    GTEST_SKIP() << "needs world size " << *p.world_size;
  if (p.min_world_size && *p.min_world_size > world.world())
    GTEST_SKIP() << "needs at least " << *p.min_world_size << " ranks";
  Session session(world, SessionOptions{"host"});
  EvaluatorOptions options;
  options.timeout = std::chrono::seconds(60);
  Evaluator ev(session, p, options);
  ev.run();
  ev.run();
  ev.synchronize();
  RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_GT(r.checks_run, 0u) << "an example must check its results";
}

std::vector<std::string> examples() { return test::listJson(test::examplesDir()); }

INSTANTIATE_TEST_SUITE_P(Examples, ExampleTest, ::testing::ValuesIn(examples()),
                         [](const auto& info) {
                           std::string n = std::filesystem::path(info.param).stem().string();
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace hir
