// The MPI backend: collectives and send/recv on host memory through
// non-blocking MPI-3 calls. It runs on the host device only.
//
// How a post stays asynchronous (backends/host_post.h): a host function on
// the backend's "start" stream starts the MPI calls once the inputs are
// ready on the caller's stream; a host function on its "completion" stream
// polls them (with the backend timeout and a grace, so that the evaluator's
// own waits report first) and records `done`. Starts run in post order on
// every rank and never wait, so send/recv posted in any order cannot
// deadlock.
//
// Needs MPI initialized with MPI_THREAD_MULTIPLE (the MPI bootstrap does it,
// at any world size, one rank included). Destroy the backend before the
// device and before the bootstrap that finalizes MPI.
#pragma once

#include <cstddef>
#include <memory>

#include <hostir/backend.h>

namespace hir {

class MpiBackend final : public Backend {
 public:
  MpiBackend();
  ~MpiBackend() override;

  std::string_view name() const override { return "mpi"; }
  void setup(const BackendContext& ctx) override;
  void post(std::span<const PostArgs> ops, Stream& current, Event& done) override;
  // This rank gives up its posts: starts not yet run are skipped, polls
  // end at once (the device's sticky error), later posts throw. Requests
  // already started stay with MPI (a collective cannot be cancelled), and
  // so do the communicators. Local: the job goes on (the evaluator calls
  // it when a run fails; `hir run` then ends the job).
  void abort() override;

  // Host device only; every communication type, dtype and reduce op.
  static BackendCaps caps();

  // How many MPI requests of posts that never completed (a failed run)
  // this process has left with MPI, for good: a collective cannot be
  // cancelled. A run that completes leaves none (tests check it; MPI's own
  // bookkeeping keeps requests reachable, so a leak checker cannot).
  static std::size_t abandonedRequests();

 private:
  // The MPI objects (communicators, ops) live in State so that this header
  // does not need <mpi.h>.
  struct State;
  std::unique_ptr<State> state_;
};

// Adds "mpi" to the backend registry (auto priority 10). The registry calls
// it on first use; calling it again throws.
void registerMpiBackend();

}  // namespace hir
