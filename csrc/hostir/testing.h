// The multi-rank GoogleTest harness (CMake target hostir::gtest_main,
// docs/testing.md): tests that run under mpirun, one process per rank, every
// rank running every test. Not part of <hostir/hostir.h>: only test programs
// include it. The macros below are for GoogleTest test bodies (the test file
// includes <gtest/gtest.h>; this header does not, so that it stays free of
// anything but hostir and the standard library).
#pragma once

#include <string>

#include <hostir/bootstrap.h>

namespace hir::test {

// The world of this test program: the MPI bootstrap that the main of
// hostir::gtest_main (or runAllTests) created before the tests ran, shared by
// all of them. Throws UsageError outside such a program.
Bootstrap& world();

// What a test asks of the world's size (the HIR_REQUIRE_WORLD macros).
enum class WorldRequirement { Exactly, AtLeast };

// Why a world of `have` ranks does not meet the requirement: the skip
// message, e.g. "needs exactly 2 ranks, the world has 3"; empty when it
// does. A `needed` below 1 is a UsageError.
std::string worldRequirementProblem(WorldRequirement kind, int needed, int have);

// The main of hostir::gtest_main, for a test program that has its own main()
// (link hostir::gtest instead): creates the MPI bootstrap, runs every test
// on every rank, combines the results of all ranks and returns the exit
// status every rank must return (docs/testing.md). Call it once.
int runAllTests(int* argc, char*** argv);

}  // namespace hir::test

// Skip the test (GTEST_SKIP, on every rank alike) unless the world has
// exactly n ranks, or at least n ranks. The message names both sizes.
#define HIR_REQUIRE_WORLD(n) HIR_REQUIRE_WORLD_IMPL_(::hir::test::WorldRequirement::Exactly, (n))
#define HIR_REQUIRE_WORLD_AT_LEAST(n) \
  HIR_REQUIRE_WORLD_IMPL_(::hir::test::WorldRequirement::AtLeast, (n))

#define HIR_REQUIRE_WORLD_IMPL_(kind, n)                                        \
  do {                                                                          \
    const ::std::string hir_world_problem_ =                                    \
        ::hir::test::worldRequirementProblem(kind, n, ::hir::test::world().world()); \
    if (!hir_world_problem_.empty()) GTEST_SKIP() << hir_world_problem_;        \
  } while (0)
