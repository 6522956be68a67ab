// compileOptionsFor: the one place that says what a compile of a job binds
// backends from, so that `hir run`'s launcher, which compiles before any
// rank exists, decides what the ranks' Evaluators then decide.
#include "compile/compile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <hostir/bootstrap.h>
#include <hostir/json.h>

namespace hir {
namespace {

using ::testing::HasSubstr;

const BackendCaps& caps(const CompileOptions& co, const std::string& name) {
  const BackendCaps* c = findCaps(co.backends, name);
  EXPECT_NE(c, nullptr) << name;
  return *c;
}

TEST(CompileOptions, ForARankSpaceTheCatalogIsThatOfItsBootstraps) {
  const CompileOptions processes = compileOptionsFor(4, "host", RankSpace::Processes, true, Settings{});
  EXPECT_EQ(processes.world, 4);
  EXPECT_EQ(processes.device, "host");
  EXPECT_TRUE(processes.check_schedule);
  EXPECT_FALSE(processes.nodes);
  EXPECT_EQ(processes.settings, Settings{});
  const Settings mine = Settings{}.set(Setting::IpcEagerMax, 4096);
  EXPECT_EQ(compileOptionsFor(4, "host", RankSpace::Processes, true, mine).settings, mine)
      << "the compile decides by the settings it is given";
  EXPECT_EQ(caps(processes, "mpi").unavailable, "");
  EXPECT_THAT(caps(processes, "local").unavailable, HasSubstr("separate processes"));

  std::unique_ptr<Bootstrap> self = createSelfBootstrap();  // ranks as threads
  const CompileOptions threads = compileOptionsFor(*self, "host", false, Settings{});
  EXPECT_EQ(threads.world, 1);
  EXPECT_FALSE(threads.check_schedule);
  EXPECT_FALSE(threads.nodes);  // one rank: no names to ask for
  const std::vector<BackendCaps> expected = backendCatalog(*self);
  ASSERT_EQ(threads.backends.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(threads.backends[i].name, expected[i].name);
    EXPECT_EQ(threads.backends[i].unavailable, expected[i].unavailable);
  }
  EXPECT_EQ(caps(threads, "local").unavailable, "");
  EXPECT_THAT(caps(threads, "mpi").unavailable, HasSubstr("threads of one process"));
}

// A program naming a backend that the ranks' bootstrap cannot serve fails
// the compile made before they start, as it fails theirs.
TEST(CompileOptions, ALauncherRefusesABackendItsRanksCannotRun) {
  const Program p = parseProgram(R"({"format": "hostir/1", "name": "named", "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": [4]},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
       "reduce": "sum", "backend": "local"},
      {"op": "wait", "communication": "ar"}]})");
  try {
    compile(p, compileOptionsFor(2, "host", RankSpace::Processes, true, Settings{}));
    ADD_FAILURE() << "local bound for ranks that are processes";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/1: backend 'local' cannot run allreduce"));
  }
  EXPECT_NO_THROW(compile(p, compileOptionsFor(2, "host", RankSpace::Threads, true, Settings{})));
}

}  // namespace
}  // namespace hir
