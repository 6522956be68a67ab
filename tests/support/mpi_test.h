// For tests run under mpirun (tests/*/*_mpitest.cc, *_gputest.cc): the
// world's bootstrap, shared by all tests of the process, and a skip helper.
#pragma once

#include <gtest/gtest.h>

#include <hostir/bootstrap.h>

namespace hir::test {

Bootstrap& world();

}  // namespace hir::test

// Skips (does not fail) when the world has fewer than n ranks.
#define HIR_REQUIRE_WORLD(n)                                                   \
  do {                                                                         \
    if (::hir::test::world().world() < (n))                                    \
      GTEST_SKIP() << "needs " << (n) << " ranks, have "                       \
                   << ::hir::test::world().world();                            \
  } while (0)
