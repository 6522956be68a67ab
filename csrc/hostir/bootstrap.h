// The bootstrap: how the ranks of one program find each other and exchange
// small amounts of bytes on the host (unique ids, memory handles). Everything
// in hostir goes through this interface; an embedder may supply its own.
// All calls are collective over the world and blocking; they are used at
// load, never on the per-node path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hir {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Rank among the ranks of the same node, and how many share the node.
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;
  // Identity of this rank's node; equal strings mean the same machine.
  virtual const std::string& node() const = 0;

  // recv receives world() * bytes: rank r's `send` at r * bytes.
  virtual void allgather(const void* send, void* recv, std::size_t bytes) = 0;
  virtual void broadcast(void* buf, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank's process with `exit_code` (MPI_Abort); for failures
  // that other ranks cannot see and would otherwise wait on forever. The
  // default ends this process only.
  [[noreturn]] virtual void abort(int exit_code);

  // Node identity of every rank (one allgather, cached).
  const std::vector<std::string>& nodes();

 private:
  std::vector<std::string> nodes_;
};

// Over MPI_COMM_WORLD. Initializes MPI with MPI_THREAD_MULTIPLE unless
// already initialized (then requires that level), and finalizes it on
// destruction if it initialized it. Node identity is the host name, or, when
// HIR_FAKE_NODES=k is set, "node<r / ceil(world / k)>" (k fake nodes, for
// tests of multi-node behaviour on one machine).
std::unique_ptr<Bootstrap> createMpiBootstrap(int* argc = nullptr, char*** argv = nullptr);

// World of one rank, no MPI (for tests and single-process embedding).
std::unique_ptr<Bootstrap> createSelfBootstrap();

// True when this process was started by an MPI launcher (mpirun sets
// OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK).
bool launchedByMpi();

}  // namespace hir
