// MPI errors come back as BackendErrors (exit 3) rather than MPI aborting a
// rank with an MPI error class as its exit code: the bootstrap, which
// started MPI in this binary, set MPI_ERRORS_RETURN on the predefined
// communicators (transport/bootstrap.cc, transport/mpi_util.h).
#include <gtest/gtest.h>

#include <string>

#include "support/mpi_test.h"
#include "transport/mpi_util.h"

namespace hir {
namespace {

TEST(MpiErrors, ThePredefinedCommunicatorsReturnErrors) {
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF}) {
    MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
    ASSERT_EQ(MPI_Comm_get_errhandler(comm, &handler), MPI_SUCCESS);
    EXPECT_TRUE(handler == MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&handler);
  }
}

TEST(MpiErrors, AFailingCallOnTheWorldBecomesABackendErrorNamingCallRankAndMessage) {
  const int world = test::world().world();
  int value = 0;
  // A root outside the world: MPI's argument check fails the call.
  const int rc = MPI_Bcast(&value, 1, MPI_INT, world + 3, MPI_COMM_WORLD);
  EXPECT_NE(rc, MPI_SUCCESS);
  try {
    mpi::check(rc, "MPI_Bcast");
    FAIL() << "mpi::check accepted an error code";
  } catch (const BackendError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exitCode(), kExitRuntimeFailure);
    EXPECT_NE(msg.find("MPI_Bcast failed on rank " + std::to_string(test::world().rank()) + ": "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(mpi::errorString(rc)), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace hir
