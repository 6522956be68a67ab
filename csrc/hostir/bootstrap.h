// The bootstrap: how the ranks of one program find each other and exchange
// small amounts of bytes on the host (unique ids, memory handles). Everything
// in hostir goes through this interface; an embedder may supply its own.
// All calls are collective over the world and blocking; they are used at
// load, never on the per-node path.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hir {

// Where the ranks of a world live: each in a process of its own (MPI), or
// all as threads of one process (createThreadBootstraps, createSelfBootstrap).
// Backends say which they connect (BackendCaps::rank_spaces).
enum class RankSpace : uint8_t { Processes, Threads };

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
  // Where this world's ranks live. Default: separate processes.
  virtual RankSpace rankSpace() const { return RankSpace::Processes; }

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

// ---- In-process worlds: every rank a thread of this process, no MPI. ----
//
// createThreadBootstraps(world) makes one world of `world` ranks: element r
// is rank r's bootstrap, to be used by one thread (the rank's thread) at a
// time; give each its own Session. Collective calls meet in memory and
// wait at most `timeout` for the other ranks: a rank that does not arrive
// makes the call throw TimeoutError naming the missing ranks, and ranks
// that called different collectives (or with different sizes or roots) get
// a UsageError saying so. After either, the world is broken: every later
// call throws the same error. rankSpace() is RankSpace::Threads; every rank
// is on this machine's node (the host name), localRank() == rank(). The
// ranks share state that lives until the last of them is destroyed. A
// world of more than kMaxThreadRanks (each rank a thread with a Session of
// its own) is a UsageError.
inline constexpr int kMaxThreadRanks = 4096;
std::vector<std::unique_ptr<Bootstrap>> createThreadBootstraps(
    int world, std::chrono::milliseconds timeout = std::chrono::minutes(5));

// A world of one rank: createThreadBootstraps(1)[0] (for tests and
// single-process embedding; its calls never wait).
std::unique_ptr<Bootstrap> createSelfBootstrap();

// True when this process was started by an MPI launcher (mpirun sets
// OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK).
bool launchedByMpi();

// ---- Over TCP, for launchers other than MPI (torchrun). ----
//
// Rank 0 listens on `port` (every IPv4 interface); the other ranks connect
// to addr:port, retrying until `timeout`. Collectives go through rank 0, and
// every wait on a socket is bounded by `timeout`: a rank that does not
// connect or answer makes the call throw TimeoutError naming it, a rank
// whose socket closed (it ended or aborted) a BackendError naming it, and
// ranks that called different collectives a UsageError. abort() closes the
// sockets, so that the other ranks fail at their next bootstrap call, and
// ends this process (it cannot end the others).
struct TcpBootstrapOptions {
  int rank = 0;
  int world = 1;
  std::string addr;  // rank 0's host name or IPv4 address
  int port = 0;      // 1..65535
  // Rank among the ranks of its node and their number; -1: counted from
  // the node names of all ranks.
  int local_rank = -1;
  int local_size = -1;
  std::string node;  // this rank's node identity; empty: the host name
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};
std::unique_ptr<Bootstrap> createTcpBootstrap(const TcpBootstrapOptions& options);

// True when torchrun's variables are set (RANK or WORLD_SIZE) and no MPI
// launcher's (launchedByMpi()).
bool launchedByTorchrun();

// The bootstrap of the launcher that started this process: MPI when
// launchedByMpi(); TCP when launchedByTorchrun(), from RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT (rank 0 listens on MASTER_PORT + 1 when
// torchrun's agent holds MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True;
// HIR_BOOTSTRAP_PORT overrides both), LOCAL_RANK and LOCAL_WORLD_SIZE
// (optional), HIR_FAKE_NODES; else a world of one. A missing or malformed
// variable is a UsageError naming it.
std::unique_ptr<Bootstrap> createBootstrapFromEnvironment(
    std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace hir
