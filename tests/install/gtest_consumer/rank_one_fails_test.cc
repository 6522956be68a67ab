// Linked with allreduce_test.cc into a program that must fail on rank 1
// only (tests/install/run_consumer.cmake checks its exit status and the
// harness's summary).
#include <gtest/gtest.h>

#include <hostir/testing.h>

namespace {

TEST(RankOne, FailsOnPurpose) {
  EXPECT_NE(hir::test::world().rank(), 1) << "rank 1 fails on purpose";
}

}  // namespace
