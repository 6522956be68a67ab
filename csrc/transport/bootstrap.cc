// The MPI bootstrap, and the in-process one (ranks as threads; the one-rank
// bootstrap is its world of 1).
//
// Bootstrap calls are blocking. They run at load (setup, share_mem_handles),
// never on the per-node path. The MPI ones have no timeout of their own: a
// rank that dies there makes the MPI launcher end the job. The in-process
// ones wait at most their world's timeout, since nothing else would end them.
#include <hostir/bootstrap.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/check.h"
#include "transport/fake_nodes.h"
#include "transport/mpi_util.h"

namespace hir {

namespace {

// Fixed width of a node name in the nodes() exchange (HOST_NAME_MAX is 64).
constexpr std::size_t kNodeNameBytes = 256;

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

// ------------------------------------------------- ranks as threads

// What the ranks of one in-process world share: a rendezvous for one
// collective at a time. Each rank deposits its arguments; the last to arrive
// checks that they agree, moves the bytes for everyone and starts the next
// generation; the others wait for that, at most the timeout.
class ThreadWorld {
 public:
  enum class Call : uint8_t { Allgather, Broadcast, Barrier };

  ThreadWorld(int world, std::chrono::milliseconds timeout, std::string node)
      : world_(world), timeout_(timeout), node_(std::move(node)), arrivals_(world) {}

  int world() const { return world_; }
  const std::string& node() const { return node_; }

  void collective(int rank, Call call, const void* send, void* recv, std::size_t bytes,
                  int root) {
    std::unique_lock lock(mutex_);
    throwIfBroken();
    Arrival& me = arrivals_[rank];
    HIR_CHECK_AS(UsageError, !me.here,
                 "bootstrap {} on rank {}: the rank's previous bootstrap call has not returned "
                 "(one thread per rank may call its bootstrap)",
                 name(call), rank);
    me = Arrival{true, call, send, recv, bytes, root};
    if (++arrived_ == world_) {
      complete();
      return;
    }
    const uint64_t generation = generation_;
    const bool done = cv_.wait_for(lock, timeout_, [&] {
      return generation_ != generation || broken_ != Broken::No;
    });
    if (generation_ != generation) return;
    if (!done) {
      std::string missing;
      for (int r = 0; r < world_; ++r)
        if (!arrivals_[r].here) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
      breakWith(Broken::Timeout,
                fmt::format("bootstrap {} (threads of one process): rank(s) {} of a world of {} "
                            "did not arrive within {} ms; rank(s) {} waited",
                            name(call), missing, world_, timeout_.count(), arrivedList()));
    }
    throwIfBroken();
  }

 private:
  struct Arrival {
    bool here = false;
    Call call = Call::Barrier;
    const void* send = nullptr;
    void* recv = nullptr;
    std::size_t bytes = 0;
    int root = 0;
  };
  enum class Broken : uint8_t { No, Timeout, Mismatch };

  static std::string_view name(Call c) {
    switch (c) {
      case Call::Allgather: return "allgather";
      case Call::Broadcast: return "broadcast";
      case Call::Barrier: return "barrier";
    }
    return "?";
  }

  std::string describe(int r) const {
    const Arrival& a = arrivals_[r];
    switch (a.call) {
      case Call::Allgather: return fmt::format("rank {}: allgather of {} bytes", r, a.bytes);
      case Call::Broadcast:
        return fmt::format("rank {}: broadcast of {} bytes from root {}", r, a.bytes, a.root);
      case Call::Barrier: return fmt::format("rank {}: barrier", r);
    }
    return "?";
  }

  std::string arrivedList() const {
    std::string out;
    for (int r = 0; r < world_; ++r)
      if (arrivals_[r].here) out += fmt::format("{}{}", out.empty() ? "" : ", ", r);
    return out;
  }

  // Under the lock, by the last rank to arrive.
  void complete() {
    const Arrival& first = arrivals_[0];
    bool agree = true;
    for (const Arrival& a : arrivals_)
      agree = agree && a.call == first.call && a.bytes == first.bytes &&
              (a.call != Call::Broadcast || a.root == first.root);
    if (!agree) {
      std::string calls;
      for (int r = 0; r < world_; ++r) calls += fmt::format("; {}", describe(r));
      breakWith(Broken::Mismatch,
                fmt::format("bootstrap (threads of one process): the ranks' calls differ{}",
                            calls));
      throwIfBroken();
    }
    const std::size_t bytes = first.bytes;
    switch (first.call) {
      case Call::Allgather: {
        // Staged: a rank's send may lie inside its own recv.
        std::vector<std::byte> all(bytes * static_cast<std::size_t>(world_));
        for (int r = 0; r < world_; ++r)
          if (bytes > 0) std::memcpy(all.data() + r * bytes, arrivals_[r].send, bytes);
        for (const Arrival& a : arrivals_)
          if (!all.empty()) std::memcpy(a.recv, all.data(), all.size());
        break;
      }
      case Call::Broadcast: {
        const void* src = arrivals_[first.root].recv;
        for (int r = 0; r < world_; ++r)
          if (r != first.root && bytes > 0) std::memcpy(arrivals_[r].recv, src, bytes);
        break;
      }
      case Call::Barrier:
        break;
    }
    for (Arrival& a : arrivals_) a.here = false;
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  }

  void breakWith(Broken kind, std::string why) {
    if (broken_ != Broken::No) return;
    broken_ = kind;
    broken_why_ = std::move(why);
    cv_.notify_all();
  }

  void throwIfBroken() const {
    switch (broken_) {
      case Broken::No: return;
      case Broken::Timeout: throw TimeoutError(broken_why_);
      case Broken::Mismatch: throw UsageError(broken_why_);
    }
  }

  const int world_;
  const std::chrono::milliseconds timeout_;
  const std::string node_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Arrival> arrivals_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  Broken broken_ = Broken::No;
  std::string broken_why_;
};

class ThreadBootstrap final : public Bootstrap {
 public:
  ThreadBootstrap(std::shared_ptr<ThreadWorld> world, int rank)
      : world_(std::move(world)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world() const override { return world_->world(); }
  int localRank() const override { return rank_; }
  int localSize() const override { return world_->world(); }
  const std::string& node() const override { return world_->node(); }
  RankSpace rankSpace() const override { return RankSpace::Threads; }

  void allgather(const void* send, void* recv, std::size_t bytes) override {
    world_->collective(rank_, ThreadWorld::Call::Allgather, send, recv, bytes, 0);
  }
  void broadcast(void* buf, std::size_t bytes, int root) override {
    HIR_CHECK_AS(UsageError, root >= 0 && root < world(),
                 "bootstrap broadcast: root {} is not a rank of a world of {}", root, world());
    world_->collective(rank_, ThreadWorld::Call::Broadcast, buf, buf, bytes, root);
  }
  void barrier() override {
    world_->collective(rank_, ThreadWorld::Call::Barrier, nullptr, nullptr, 0, 0);
  }

 private:
  std::shared_ptr<ThreadWorld> world_;
  int rank_;
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

std::string hostName() {
  char name[kNodeNameBytes] = {};
  if (gethostname(name, sizeof(name) - 1) != 0)
    throw BackendError(fmt::format("gethostname failed: {}", std::strerror(errno)));
  return name;
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

std::vector<std::unique_ptr<Bootstrap>> createThreadBootstraps(int world,
                                                               std::chrono::milliseconds timeout) {
  HIR_CHECK_AS(UsageError, world >= 1 && world <= kMaxThreadRanks,
               "createThreadBootstraps: a world of ranks as threads has 1 to {} ranks, got {}",
               kMaxThreadRanks, world);
  HIR_CHECK_AS(UsageError, timeout.count() > 0,
               "createThreadBootstraps: the timeout must be positive, got {} ms", timeout.count());
  auto shared = std::make_shared<ThreadWorld>(world, timeout, hostName());
  std::vector<std::unique_ptr<Bootstrap>> out;
  out.reserve(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) out.push_back(std::make_unique<ThreadBootstrap>(shared, r));
  return out;
}

std::unique_ptr<Bootstrap> createSelfBootstrap() {
  return std::move(createThreadBootstraps(1).front());
}

bool launchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

}  // namespace hir
