// The TCP bootstrap (createTcpBootstrap) on 127.0.0.1: ranks as threads of
// this process, or as a forked process for abort(); and the choice of a
// bootstrap from torchrun's variables (createBootstrapFromEnvironment).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/error.h>

namespace hir {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A port nothing listens on right now (bound to 0, then released).
int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TcpBootstrapOptions options(int rank, int world, int port, std::chrono::milliseconds timeout,
                            std::string node = "") {
  TcpBootstrapOptions o;
  o.rank = rank;
  o.world = world;
  o.addr = "127.0.0.1";
  o.port = port;
  o.timeout = timeout;
  o.node = std::move(node);
  return o;
}

// Runs `body(bootstrap)` on `world` threads, one per rank; returns each
// rank's error text ("" when it returned normally).
std::vector<std::string> onRanks(int world, const std::vector<int>& ranks, int port,
                                 std::chrono::milliseconds timeout,
                                 const std::function<void(Bootstrap&)>& body,
                                 const std::vector<std::string>& nodes = {}) {
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      try {
        auto boot = createTcpBootstrap(
            options(r, world, port, timeout, nodes.empty() ? "" : nodes[r]));
        body(*boot);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty message)";
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST(TcpBootstrap, CollectivesAtWorldThreeMoveTheRightBytes) {
  constexpr int kWorld = 3;
  std::vector<std::vector<int32_t>> gathered(kWorld);
  std::vector<std::vector<int64_t>> broadcast(kWorld);
  std::vector<int> ranks(kWorld), worlds(kWorld);
  const std::vector<std::string> errors = onRanks(
      kWorld, {0, 1, 2}, freePort(), 10s, [&](Bootstrap& b) {
        const int r = b.rank();
        ranks[r] = r;
        worlds[r] = b.world();
        int32_t mine[2] = {100 + r, -r};
        gathered[r].resize(2 * kWorld);
        b.allgather(mine, gathered[r].data(), sizeof mine);
        b.barrier();
        // Root 1, not the rank everything goes through.
        broadcast[r].assign(4, r == 1 ? 7 : -1);
        if (r == 1) broadcast[r] = {11, 22, 33, 44};
        b.broadcast(broadcast[r].data(), 4 * sizeof(int64_t), 1);
        // A second round: the sockets stay in step.
        int32_t again = 10 * r;
        std::vector<int32_t> all(kWorld);
        b.allgather(&again, all.data(), sizeof again);
        EXPECT_EQ(all, (std::vector<int32_t>{0, 10, 20})) << "rank " << r;
        b.barrier();
      });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(worlds[r], kWorld);
    EXPECT_EQ(gathered[r], (std::vector<int32_t>{100, 0, 101, -1, 102, -2})) << "rank " << r;
    EXPECT_EQ(broadcast[r], (std::vector<int64_t>{11, 22, 33, 44})) << "rank " << r;
  }
}

// Local ranks come from the node names when not given: ranks 0 and 2 on
// "a", rank 1 on "b".
TEST(TcpBootstrap, LocalRanksAreCountedFromNodeNames) {
  std::vector<std::pair<int, int>> local(3);
  std::vector<std::vector<std::string>> nodes(3);
  const auto errors = onRanks(
      3, {0, 1, 2}, freePort(), 10s,
      [&](Bootstrap& b) {
        local[b.rank()] = {b.localRank(), b.localSize()};
        nodes[b.rank()] = b.nodes();
      },
      {"a", "b", "a"});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(nodes[r], (std::vector<std::string>{"a", "b", "a"}));
  }
  EXPECT_EQ(local[0], std::make_pair(0, 2));
  EXPECT_EQ(local[1], std::make_pair(0, 1));
  EXPECT_EQ(local[2], std::make_pair(1, 2));
}

// Rank 2 never starts: rank 0 gives up at the timeout, names it, and tells
// rank 1, which fails with the same message; both within the bound.
TEST(TcpBootstrap, AMissingRankIsATimeoutNamingIt) {
  const auto timeout = 700ms;
  const auto start = Clock::now();
  const auto errors = onRanks(3, {0, 1}, freePort(), timeout, [](Bootstrap& b) { b.barrier(); });
  const auto took = Clock::now() - start;
  EXPECT_NE(errors[0].find("rank 0 waited 700 ms"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("for rank 2 to connect"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("for rank 2 to connect"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("said by rank 0; this is rank 1"), std::string::npos) << errors[1];
  EXPECT_LT(took, timeout + 2s);
}

// A rank that connected but never calls the collective: the others fail
// with a TimeoutError naming it.
TEST(TcpBootstrap, ARankThatDoesNotArriveAtACollectiveIsNamed) {
  const auto timeout = 500ms;
  std::vector<std::string> kinds(3);
  const auto errors = onRanks(3, {0, 1, 2}, freePort(), timeout, [&](Bootstrap& b) {
    if (b.rank() == 2) {
      std::this_thread::sleep_for(timeout + 1500ms);  // then leaves without a call
      return;
    }
    try {
      b.barrier();
    } catch (const TimeoutError&) {
      kinds[b.rank()] = "timeout";
      throw;
    }
  });
  for (int r : {0, 1}) {
    EXPECT_EQ(kinds[r], "timeout") << errors[r];
    EXPECT_NE(errors[r].find("tcp bootstrap barrier: rank 2 did not arrive within 500 ms"),
              std::string::npos)
        << errors[r];
  }
  EXPECT_EQ(errors[2], "");
}

TEST(TcpBootstrap, DifferentCollectivesAreAUsageError) {
  const auto errors = onRanks(2, {0, 1}, freePort(), 5s, [](Bootstrap& b) {
    int32_t x = 1, all[2];
    if (b.rank() == 0) b.allgather(&x, all, sizeof x);
    else b.barrier();
  });
  for (int r : {0, 1})
    EXPECT_NE(errors[r].find("the ranks called different collectives: rank 0 allgather of 4 "
                             "bytes (root 0), rank 1 barrier of 0 bytes"),
              std::string::npos)
        << errors[r];
}

// abort() in another process closes its sockets: rank 0 fails at once,
// naming rank 1, instead of waiting for the timeout.
TEST(TcpBootstrap, AbortMakesThePeersFailNamingTheRank) {
  const int port = freePort();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      auto boot = createTcpBootstrap(options(1, 2, port, 5s));
      boot->abort(3);
    } catch (...) {
    }
    _exit(9);
  }
  const auto start = Clock::now();
  std::string error;
  try {
    auto boot = createTcpBootstrap(options(0, 2, port, 20s));
    boot->barrier();
  } catch (const BackendError& e) {
    error = e.what();
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
  EXPECT_NE(error.find("connection to rank 1 lost"), std::string::npos) << error;
  EXPECT_LT(Clock::now() - start, 10s);
}

TEST(TcpBootstrap, BadOptionsAreUsageErrors) {
  EXPECT_THROW(createTcpBootstrap(options(3, 3, 1234, 1s)), UsageError);
  EXPECT_THROW(createTcpBootstrap(options(0, 2, 0, 1s)), UsageError);
  EXPECT_THROW(createTcpBootstrap(options(0, 2, 70000, 1s)), UsageError);
  TcpBootstrapOptions o = options(0, 1, 1234, 1s);
  o.local_rank = 0;  // without local_size
  EXPECT_THROW(createTcpBootstrap(o), UsageError);
  // A world of one needs no peer and no socket.
  auto one = createTcpBootstrap(options(0, 1, 1234, 1s, "n0"));
  int32_t x = 5, y = 0;
  one->allgather(&x, &y, sizeof x);
  EXPECT_EQ(y, 5);
  EXPECT_EQ(one->node(), "n0");
}

// Sets torchrun's variables for one test (and unsets them afterwards).
class TorchrunEnv {
 public:
  explicit TorchrunEnv(std::vector<std::pair<const char*, const char*>> vars) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                             "MASTER_ADDR", "MASTER_PORT", "HIR_BOOTSTRAP_PORT",
                             "TORCHELASTIC_USE_AGENT_STORE"}) {
      if (const char* v = std::getenv(name)) saved_.emplace_back(name, v);
      unsetenv(name);
      names_.push_back(name);
    }
    for (const auto& [k, v] : vars) setenv(k, v, 1);
  }
  ~TorchrunEnv() {
    for (const std::string& n : names_) unsetenv(n.c_str());
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST(BootstrapFromEnvironment, TorchrunsVariablesGiveATcpWorld) {
  if (launchedByMpi()) GTEST_SKIP() << "inside an MPI job";
  {
    TorchrunEnv env({});
    EXPECT_FALSE(launchedByTorchrun());
    EXPECT_EQ(createBootstrapFromEnvironment(1s)->world(), 1);
  }
  const std::string port = std::to_string(freePort());
  TorchrunEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"},
                   {"LOCAL_WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", port.c_str()}});
  EXPECT_TRUE(launchedByTorchrun());
  auto boot = createBootstrapFromEnvironment(1s);
  EXPECT_EQ(boot->world(), 1);
  EXPECT_EQ(boot->localSize(), 1);
}

TEST(BootstrapFromEnvironment, AMissingOrMalformedVariableIsNamed) {
  if (launchedByMpi()) GTEST_SKIP() << "inside an MPI job";
  auto message = [] {
    try {
      createBootstrapFromEnvironment(1s);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    TorchrunEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
    EXPECT_EQ(message(), "torchrun's variables are set (RANK or WORLD_SIZE) but MASTER_ADDR is "
                         "not set");
  }
  {
    TorchrunEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                     {"MASTER_PORT", "29500"}});
    EXPECT_EQ(message(), "RANK must be in [0, 1], got 2");
  }
  {
    TorchrunEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                     {"MASTER_PORT", "port"}});
    EXPECT_EQ(message(), "MASTER_PORT expects an integer, got 'port'");
  }
}

}  // namespace
}  // namespace hir
