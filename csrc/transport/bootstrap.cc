// The MPI bootstrap and the one-rank bootstrap.
//
// Bootstrap calls are blocking and have no timeout of their own: they run at
// load (setup, share_mem_handles), never on the per-node path, and a rank that
// dies there makes the MPI launcher end the job.
#include <hostir/bootstrap.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/check.h"
#include "transport/fake_nodes.h"
#include "transport/mpi_util.h"

namespace hir {

namespace {

// Fixed width of a node name in the nodes() exchange (HOST_NAME_MAX is 64).
constexpr std::size_t kNodeNameBytes = 256;

std::string hostName() {
  char name[kNodeNameBytes] = {};
  if (gethostname(name, sizeof(name) - 1) != 0)
    throw BackendError(fmt::format("gethostname failed: {}", std::strerror(errno)));
  return name;
}

int toMpiCount(std::size_t bytes, std::string_view call) {
  HIR_CHECK_AS(BackendError, bytes <= static_cast<std::size_t>(INT_MAX),
               "bootstrap {} of {} bytes per rank: at most {} bytes are supported", call, bytes,
               INT_MAX);
  return static_cast<int>(bytes);
}

class MpiBootstrap final : public Bootstrap {
 public:
  MpiBootstrap(int* argc, char*** argv) {
    initializeMpi(argc, argv);
    try {
      mpi::check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
      // Errors on our communicator come back as codes, which we turn into
      // BackendErrors, instead of aborting the process.
      mpi::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      mpi::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
      mpi::check(MPI_Comm_size(comm_, &world_), "MPI_Comm_size");
      findNode();
    } catch (...) {
      release();
      throw;
    }
  }

  ~MpiBootstrap() override { release(); }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int localRank() const override { return local_rank_; }
  int localSize() const override { return local_size_; }
  const std::string& node() const override { return node_; }

  void allgather(const void* send, void* recv, std::size_t bytes) override {
    int count = toMpiCount(bytes, "allgather");
    mpi::check(MPI_Allgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, comm_),
               "MPI_Allgather");
  }

  void broadcast(void* buf, std::size_t bytes, int root) override {
    HIR_CHECK_AS(UsageError, root >= 0 && root < world_, "bootstrap broadcast: root {} is not a rank of a world of {}",
              root, world_);
    mpi::check(MPI_Bcast(buf, toMpiCount(bytes, "broadcast"), MPI_BYTE, root, comm_), "MPI_Bcast");
  }

  void barrier() override { mpi::check(MPI_Barrier(comm_), "MPI_Barrier"); }

  [[noreturn]] void abort(int exit_code) override {
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; this keeps [[noreturn]] true
  }

 private:
  void initializeMpi(int* argc, char*** argv) {
    int initialized = 0, finalized = 0;
    mpi::check(MPI_Initialized(&initialized), "MPI_Initialized");
    mpi::check(MPI_Finalized(&finalized), "MPI_Finalized");
    HIR_CHECK_AS(BackendError, !finalized,
                 "cannot create the MPI bootstrap: MPI was already finalized in this process");
    int provided = MPI_THREAD_SINGLE;
    if (initialized) {
      mpi::check(MPI_Query_thread(&provided), "MPI_Query_thread");
      // The MPI backend starts and completes operations from two threads.
      HIR_CHECK_AS(BackendError, provided >= MPI_THREAD_MULTIPLE,
                   "MPI was initialized with {}; hostir needs MPI_THREAD_MULTIPLE (initialize "
                   "MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let hostir do it)",
                   mpi::threadLevelName(provided));
      return;
    }
    mpi::check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    owns_mpi_ = true;
    // Ours to set, since we started MPI: errors on the predefined
    // communicators (MPI_Comm_dup and MPI_Comm_split of MPI_COMM_WORLD here
    // and in the MPI backend, errors tied to no communicator) come back as
    // codes that mpi::check turns into BackendErrors (exit 3), instead of
    // MPI aborting the rank with an MPI error class as its exit code. An
    // embedder that started MPI keeps its own handlers.
    mpi::check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
               "MPI_Comm_set_errhandler");
    mpi::check(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN),
               "MPI_Comm_set_errhandler");
    if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Finalize();
      owns_mpi_ = false;
      throw BackendError(fmt::format(
          "MPI_Init_thread provided {}; hostir needs MPI_THREAD_MULTIPLE (an MPI library "
          "built without thread support?)",
          mpi::threadLevelName(provided)));
    }
  }

  void findNode() {
    int fake_nodes = parseFakeNodes(std::getenv("HIR_FAKE_NODES"));
    if (fake_nodes > 0) {
      NodeAssignment a = fakeNodeAssignment(rank_, world_, fake_nodes);
      node_ = a.node;
      local_rank_ = a.local_rank;
      local_size_ = a.local_size;
      return;
    }
    node_ = hostName();
    MPI_Comm local = MPI_COMM_NULL;
    mpi::check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
               "MPI_Comm_split_type");
    int rc_rank = MPI_Comm_rank(local, &local_rank_);
    int rc_size = MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    mpi::check(rc_rank, "MPI_Comm_rank");
    mpi::check(rc_size, "MPI_Comm_size");
  }

  // Never throws: runs in the destructor and on a failed construction.
  void release() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
    owns_mpi_ = false;
  }

  bool owns_mpi_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string node_;
};

class SelfBootstrap final : public Bootstrap {
 public:
  SelfBootstrap() : node_(hostName()) {}

  int rank() const override { return 0; }
  int world() const override { return 1; }
  int localRank() const override { return 0; }
  int localSize() const override { return 1; }
  const std::string& node() const override { return node_; }

  void allgather(const void* send, void* recv, std::size_t bytes) override {
    if (send != recv) std::memmove(recv, send, bytes);
  }
  void broadcast(void*, std::size_t, int root) override {
    HIR_CHECK_AS(UsageError, root == 0, "bootstrap broadcast: root {} is not a rank of a world of 1", root);
  }
  void barrier() override {}

 private:
  std::string node_;
};

}  // namespace

void Bootstrap::abort(int exit_code) {
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

const std::vector<std::string>& Bootstrap::nodes() {
  if (!nodes_.empty()) return nodes_;
  const std::string& mine = node();
  HIR_CHECK_AS(BackendError, mine.size() < kNodeNameBytes,
               "node identity of rank {} is {} bytes long; at most {} are supported", rank(),
               mine.size(), kNodeNameBytes - 1);
  std::vector<char> send(kNodeNameBytes, '\0');
  std::memcpy(send.data(), mine.data(), mine.size());
  std::vector<char> all(kNodeNameBytes * static_cast<std::size_t>(world()), '\0');
  allgather(send.data(), all.data(), kNodeNameBytes);
  std::vector<std::string> nodes;
  nodes.reserve(static_cast<std::size_t>(world()));
  for (int r = 0; r < world(); ++r) {
    const char* name = all.data() + static_cast<std::size_t>(r) * kNodeNameBytes;
    nodes.emplace_back(name, strnlen(name, kNodeNameBytes));
  }
  nodes_ = std::move(nodes);
  return nodes_;
}

NodeAssignment fakeNodeAssignment(int rank, int world, int nodes) {
  HIR_INTERNAL_ASSERT(world >= 1 && rank >= 0 && rank < world && nodes >= 1,
                      "rank {} world {} nodes {}", rank, world, nodes);
  int per_node = (world + nodes - 1) / nodes;
  int index = rank / per_node;
  NodeAssignment a;
  a.node = fmt::format("node{}", index);
  a.local_rank = rank % per_node;
  a.local_size = std::min(per_node, world - index * per_node);
  return a;
}

int parseFakeNodes(const char* env_value) {
  if (env_value == nullptr || *env_value == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  long k = std::strtol(env_value, &end, 10);
  HIR_CHECK_AS(UsageError, errno == 0 && *end == '\0' && k >= 1 && k <= INT_MAX,
               "HIR_FAKE_NODES must be a positive integer (the number of fake nodes), got '{}'",
               env_value);
  return static_cast<int>(k);
}

std::unique_ptr<Bootstrap> createMpiBootstrap(int* argc, char*** argv) {
  return std::make_unique<MpiBootstrap>(argc, argv);
}

std::unique_ptr<Bootstrap> createSelfBootstrap() { return std::make_unique<SelfBootstrap>(); }

bool launchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

}  // namespace hir
