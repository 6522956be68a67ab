// A 2-rank test of a sum allreduce, run under mpirun: every rank builds the
// same program, runs it on the host through the MPI backend and checks its
// own buffer. The example of docs/testing.md.
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include <hostir/hostir.h>
#include <hostir/testing.h>

namespace {

TEST(Allreduce, SumOfEveryRankReachesEveryRank) {
  HIR_REQUIRE_WORLD(2);
  hir::Bootstrap& world = hir::test::world();
  constexpr int n = 1024;

  hir::ProgramBuilder b("allreduce");
  b.param("n", n).input("x").output("x");
  b.allocate("x", hir::DType::Float32, {"n"});
  b.allreduce("ar", "x", "x", hir::ReduceOp::Sum);
  b.wait("ar");

  hir::Session session(world, hir::SessionOptions{"host"});
  hir::Evaluator ev(session, b.build());
  std::vector<float> x(n, static_cast<float>(world.rank() + 1));
  ev.bind("x", x.data(), x.size() * sizeof(float));
  ev.run();
  ev.synchronize();

  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(x[i], 3.0f) << "element " << i << " on rank " << world.rank();  // 1 + 2
}

}  // namespace
