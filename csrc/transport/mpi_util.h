// Internal: MPI error handling shared by the MPI bootstrap and the MPI
// backend. Every failing MPI call becomes a BackendError that names the call,
// the world rank and MPI's own message. Not part of the public interface
// (it includes <mpi.h>).
#pragma once

// The C interface only: hostir links MPI::MPI_C, not the C++ bindings.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <string>
#include <string_view>

#include "common/check.h"

namespace hir::mpi {

inline std::string errorString(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return fmt::format("MPI error code {}", rc);
  return std::string(text, static_cast<std::size_t>(len));
}

inline std::string_view threadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// World rank for messages; -1 when MPI is not (or no longer) usable.
inline int worldRankForMessages() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Throws BackendError("MPI_Xxx failed on rank R: <MPI message>") unless rc is
// MPI_SUCCESS. Only communicators with MPI_ERRORS_RETURN report errors this
// way; on the others MPI aborts by itself.
inline void check(int rc, std::string_view call) {
  if (rc == MPI_SUCCESS) return;
  throw BackendError(
      fmt::format("{} failed on rank {}: {}", call, worldRankForMessages(), errorString(rc)));
}

}  // namespace hir::mpi
