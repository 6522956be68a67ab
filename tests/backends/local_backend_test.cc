// The local backend: ranks as threads of one process (one thread per rank,
// each with its own host device and backend). Every communication type,
// dtype and reduce op against the host reference that the mpi backend is
// tested with (support/collective_reference.h, the same averaging rule);
// send/recv posted in opposite orders; posts that return before the peer
// posted; a rank that never posts (timeout naming it), abort() releasing a
// waiter and failing the peers; ranks that disagree; and the choice of the
// backend by the bootstrap (catalog, "auto", a backend named that cannot run).
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <hostir/backend.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>
#include "common/check.h"
#include "common/elements.h"
#include "device/host_device.h"
#include "support/collective_reference.h"

namespace hir {
namespace {

using ::testing::HasSubstr;
using test::AvgRule;
using test::Case;
using test::fillWith;
using test::poison;
using test::pointToPoint;
using test::sentData;
using Clock = std::chrono::steady_clock;

constexpr Duration kTimeout{20000};
// mpi's rule, which the local backend follows: the sum divided in the dtype.
constexpr AvgRule kAvg = AvgRule::DivideInDType;

// One rank: a host device and a local backend set up on it.
struct Rank {
  Rank(Bootstrap& b, Duration timeout) : device(kTimeout), bootstrap(b) {
    backend = findBackend("local")->create();
    BackendContext ctx;
    ctx.device = &device;
    ctx.bootstrap = &b;
    ctx.teams = test::testTeams(b.world());
    ctx.timeout = timeout;
    teams = ctx.teams;
    backend->setup(ctx);
  }
  ~Rank() { backend.reset(); }
  int rank() const { return bootstrap.rank(); }
  HostDevice device;
  Bootstrap& bootstrap;
  std::unique_ptr<Backend> backend;  // destroyed before the device
  std::vector<std::vector<int>> teams;
};

// A world of `n` ranks as threads, whose backends have `timeout`. They are
// set up collectively, on one thread per rank.
struct World {
  explicit World(int n, Duration timeout = kTimeout)
      : bootstraps(createThreadBootstraps(n, kTimeout)), ranks(n) {
    onEach([&](int r) { ranks[r] = std::make_unique<Rank>(*bootstraps[r], timeout); });
  }
  ~World() { ranks.clear(); }
  // Runs fn(r) on one thread per rank and joins them.
  void onEach(const std::function<void(int)>& fn) const {
    std::vector<std::thread> threads;
    for (int r = 0; r < static_cast<int>(bootstraps.size()); ++r) threads.emplace_back(fn, r);
    for (std::thread& t : threads) t.join();
  }
  std::vector<std::unique_ptr<Bootstrap>> bootstraps;
  std::vector<std::unique_ptr<Rank>> ranks;
};

// Runs `iterations` posts of one case on rank `h`, reusing the buffers, and
// checks every output element (as the mpi backend's test does).
void runCase(Rank& h, const Case& c, std::size_t count, int iterations) {
  const std::vector<int>& team = h.teams[c.team];
  const int rank = h.rank();
  const std::optional<test::Participation> part = test::participation(c, team, rank, count);
  if (!part) return;
  const auto [me, in_n, out_n, layout] = *part;
  const std::size_t el = dtypeSize(c.dtype);
  std::vector<std::byte> main(std::max<std::size_t>(std::max(in_n, out_n) * el, 1));
  std::vector<std::byte> separate(std::max<std::size_t>(out_n * el, 1));
  std::byte* input = main.data();
  std::byte* output = main.data();
  if (c.in_place) {
    if (layout.input_inside_output)
      input = output + layout.offset * el;
    else
      output = input + layout.offset * el;
  } else {
    output = separate.data();
  }
  Stream& stream = h.device.defaultStream();
  std::unique_ptr<Event> done = h.device.createEvent();
  for (int it = 0; it < iterations; ++it) {
    const int root = it % static_cast<int>(team.size());
    fillWith(output, c.dtype, out_n, poison(c.dtype));
    if (c.type != CommType::Broadcast || me == root)
      for (std::size_t i = 0; i < in_n; ++i)
        test::store(input, c.dtype, i, test::inputValue(c.reduce, rank, it, i));
    std::vector<double> before(out_n);
    for (std::size_t k = 0; k < out_n; ++k) before[k] = loadAsDouble(output, c.dtype, k);
    PostArgs a = test::collectivePost(c, input, output, count, root);
    h.backend->post({&a, 1}, stream, *done);
    h.backend->wait(*done, stream, WaitMode::Host, kTimeout);
    const int wrong = test::countWrongElements(c, kAvg, team, me, root, it, count, output, before);
    EXPECT_EQ(wrong, 0) << test::caseName(c) << ": rank " << rank << ", iteration " << it;
  }
}

// ------------------------------------------------------- the full matrix

// One test per communication type, each running every dtype, reduce op,
// in-place form and team of test::allCases() (840 cases in all: as separate
// tests, each would be a process of its own under ctest).
class LocalCollective : public ::testing::TestWithParam<CommType> {
 protected:
  // Three ranks: team 1 ({2, 0}) is a strict subset in reverse order.
  static void SetUpTestSuite() { world_ = new World(3); }
  static void TearDownTestSuite() {
    delete world_;
    world_ = nullptr;
  }
  static World* world_;
};
World* LocalCollective::world_ = nullptr;

TEST_P(LocalCollective, MatchesTheHostReference) {
  int cases = 0;
  for (const Case& c : test::allCases()) {
    if (c.type != GetParam()) continue;
    SCOPED_TRACE(test::caseName(c));
    world_->onEach([&](int r) { runCase(*world_->ranks[r], c, /*count=*/5, 3); });
    ++cases;
  }
  EXPECT_GT(cases, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, LocalCollective,
                         ::testing::Values(CommType::Allreduce, CommType::Allgather,
                                           CommType::ReduceScatter, CommType::Broadcast,
                                           CommType::Reduce, CommType::Gather, CommType::Scatter,
                                           CommType::Alltoall),
                         [](const ::testing::TestParamInfo<CommType>& info) {
                           return std::string(toString(info.param));
                         });

TEST(LocalBackend, LargeAndZeroElementCollectivesMatchTheHostReference) {
  World w(4);
  w.onEach([&](int r) {
    for (CommType type : {CommType::Allreduce, CommType::ReduceScatter, CommType::Alltoall,
                          CommType::Gather})
      for (bool in_place : {false, true}) {
        runCase(*w.ranks[r], {type, DType::Float32, ReduceOp::Sum, in_place, 0}, 50000, 2);
        runCase(*w.ranks[r], {type, DType::Int32, ReduceOp::Sum, in_place, 0}, 0, 1);
      }
  });
}

TEST(LocalBackend, AWorldOfOneRunsEveryCollectiveAlone) {
  World w(1);
  for (const Case& c : test::allCases())
    if (c.team == 0) runCase(*w.ranks[0], c, 7, 2);
}

// -------------------------------------------------------------- send/recv

TEST(LocalBackend, SendsAndRecvsPostedInOppositeOrdersArriveInPostOrder) {
  World w(2);
  constexpr int kMessages = 3;
  constexpr std::size_t kCount = 4096;
  w.onEach([&](int rank) {
    Rank& h = *w.ranks[rank];
    const int peer = 1 - rank;
    std::vector<std::vector<float>> send(kMessages), recv(kMessages);
    std::vector<std::unique_ptr<Event>> done;
    Stream& s = h.device.defaultStream();
    std::vector<PostArgs> posts;
    for (int m = 0; m < kMessages; ++m) {
      send[m] = sentData(rank, peer, m, kCount);
      recv[m].assign(kCount, -1.0f);
      posts.push_back(pointToPoint(CommType::Send, send[m].data(), kCount, peer));
      posts.push_back(pointToPoint(CommType::Recv, recv[m].data(), kCount, peer));
    }
    // Rank 0 receives first, rank 1 sends first: blocking calls would
    // deadlock.
    if (rank == 0)
      for (std::size_t i = 0; i + 1 < posts.size(); i += 2) std::swap(posts[i], posts[i + 1]);
    for (const PostArgs& p : posts) {
      done.push_back(h.device.createEvent());
      h.backend->post({&p, 1}, s, *done.back());
    }
    for (auto& d : done) h.backend->wait(*d, s, WaitMode::Host, kTimeout);
    for (int m = 0; m < kMessages; ++m)
      EXPECT_EQ(recv[m], sentData(peer, rank, m, kCount)) << "rank " << rank << " message " << m;
  });
}

TEST(LocalBackend, AReceivesWaitDoesNotWaitForUnrelatedSends) {
  // An all-to-all by hand at world 3: every rank posts its sends, then
  // receives from each peer with a host wait. Rank r's first recv (from
  // r - 1) is waited while its send to r - 1 is still pending (r - 1
  // receives from r only second): with completions waited in post order,
  // every rank would wait for a send whose peer is blocked in turn.
  constexpr int kWorld = 3;
  constexpr std::size_t kCount = 16384;  // 64 KiB
  World w(kWorld);
  w.onEach([&](int rank) {
    Rank& h = *w.ranks[rank];
    Stream& s = h.device.defaultStream();
    std::vector<std::vector<float>> send(kWorld), recv(kWorld);
    std::vector<std::unique_ptr<Event>> sent;
    for (int j = 1; j < kWorld; ++j) {
      const int peer = (rank + j) % kWorld;
      send[peer] = sentData(rank, peer, 0, kCount);
      PostArgs a = pointToPoint(CommType::Send, send[peer].data(), kCount, peer);
      sent.push_back(h.device.createEvent());
      h.backend->post({&a, 1}, s, *sent.back());
    }
    for (int j = 1; j < kWorld; ++j) {
      const int peer = (rank - j + kWorld) % kWorld;
      recv[peer].assign(kCount, -1.0f);
      PostArgs a = pointToPoint(CommType::Recv, recv[peer].data(), kCount, peer);
      auto done = h.device.createEvent();
      h.backend->post({&a, 1}, s, *done);
      h.backend->wait(*done, s, WaitMode::Host, Duration(5000));
      EXPECT_EQ(recv[peer], sentData(peer, rank, 0, kCount)) << "rank " << rank << " from " << peer;
    }
    for (auto& d : sent) h.backend->wait(*d, s, WaitMode::Host, kTimeout);
  });
}

TEST(LocalBackend, PostAndStreamWaitReturnBeforeThePeerHasPosted) {
  World w(2);
  std::atomic<bool> rank0_posted{false};
  w.onEach([&](int rank) {
    Rank& h = *w.ranks[rank];
    std::vector<int32_t> x(16, rank + 1);
    PostArgs a;
    a.type = CommType::Allreduce;
    a.dtype = DType::Int32;
    a.input = x.data();
    a.output = x.data();
    a.count = x.size();
    a.path = "/body/0";
    auto done = h.device.createEvent();
    Stream& s = h.device.defaultStream();
    if (rank == 1)
      while (!rank0_posted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    h.backend->post({&a, 1}, s, *done);
    h.backend->wait(*done, s, WaitMode::Stream, kTimeout);
    if (rank == 0) {
      // Rank 1 has not posted: nothing can have completed.
      EXPECT_FALSE(h.device.query(*done));
      rank0_posted = true;
    }
    h.device.synchronize(s, kTimeout);
    EXPECT_EQ(x, std::vector<int32_t>(16, 3)) << "rank " << rank;
  });
}

// ---------------------------------------------------------------- failures

PostArgs allreduceOf(std::vector<float>& x, const char* path) {
  PostArgs a;
  a.type = CommType::Allreduce;
  a.input = x.data();
  a.output = x.data();
  a.count = x.size();
  a.path = path;
  return a;
}

TEST(LocalBackend, ARankThatNeverPostsTimesOutNamingIt) {
  constexpr Duration kShort{100};
  World w(3, kShort);
  std::vector<std::string> errors(3);
  const Clock::time_point start = Clock::now();
  w.onEach([&](int rank) {
    if (rank == 1) return;  // never posts
    Rank& h = *w.ranks[rank];
    std::vector<float> x(8, 1.0f);
    PostArgs a = allreduceOf(x, "/body/3");
    auto done = h.device.createEvent();
    h.backend->post({&a, 1}, h.device.defaultStream(), *done);
    try {
      h.device.synchronize(*done, std::chrono::seconds(20));
    } catch (const BackendError& e) {
      errors[rank] = e.what();
    }
  });
  // The backend timeout and its 2 s grace, then the first to give up fails
  // the other at once.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(6));
  const std::string both = errors[0] + "\n" + errors[2];
  EXPECT_THAT(both, HasSubstr("local: /body/3 (allreduce) did not complete within 2100 ms"));
  EXPECT_THAT(both, HasSubstr("/body/3: rank(s) 1 never posted it"));
  for (int r : {0, 2}) EXPECT_THAT(errors[r], HasSubstr("rank(s) 1 never posted it")) << r;
}

TEST(LocalBackend, AbortReleasesAWaiterAndFailsItsPeersAtOnce) {
  World w(2);
  std::vector<float> x0(8, 1.0f), x1(8, 2.0f);
  auto done0 = w.ranks[0]->device.createEvent();
  PostArgs a0 = allreduceOf(x0, "/body/5");
  w.ranks[0]->backend->post({&a0, 1}, w.ranks[0]->device.defaultStream(), *done0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its start ran
  const Clock::time_point start = Clock::now();
  w.ranks[0]->backend->abort();
  try {
    w.ranks[0]->device.synchronize(*done0, std::chrono::seconds(10));
    ADD_FAILURE() << "an aborted post completed";
  } catch (const BackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("local: /body/5 (allreduce)"));
    EXPECT_THAT(e.what(), HasSubstr("aborted"));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  // Rank 1 posts late: its slot was failed by rank 0, so it fails now, and
  // rank 0's buffer is left alone.
  auto done1 = w.ranks[1]->device.createEvent();
  PostArgs a1 = allreduceOf(x1, "/body/5");
  w.ranks[1]->backend->post({&a1, 1}, w.ranks[1]->device.defaultStream(), *done1);
  try {
    w.ranks[1]->device.synchronize(*done1, std::chrono::seconds(10));
    ADD_FAILURE() << "a post whose peer gave up completed";
  } catch (const BackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 gave up on it (its backend was aborted)"));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
  EXPECT_EQ(x0, std::vector<float>(8, 1.0f));
  // Later posts of the aborted rank throw at once.
  EXPECT_THROW(w.ranks[0]->backend->post({&a0, 1}, w.ranks[0]->device.defaultStream(), *done0),
               BackendError);
}

TEST(LocalBackend, RanksThatDisagreeFailNamingBoth) {
  World w(2);
  std::vector<std::string> errors(2);
  w.onEach([&](int rank) {
    Rank& h = *w.ranks[rank];
    std::vector<float> x(rank == 0 ? 4 : 6, 1.0f);
    PostArgs a = allreduceOf(x, "/body/2");
    auto done = h.device.createEvent();
    h.backend->post({&a, 1}, h.device.defaultStream(), *done);
    try {
      h.device.synchronize(*done, kTimeout);
    } catch (const BackendError& e) {
      errors[rank] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_THAT(e, HasSubstr("the ranks disagree on this communication"));
    EXPECT_THAT(e, HasSubstr("rank 0 posts /body/2 (allreduce of 4 x float32, sum)"));
    EXPECT_THAT(e, HasSubstr("rank 1 posts /body/2 (allreduce of 6 x float32, sum)"));
  }
}

// A bootstrap whose ranks are separate processes (the default), for one rank.
class ProcessBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int localRank() const override { return 0; }
  int localSize() const override { return 1; }
  const std::string& node() const override { return node_; }
  void allgather(const void* send, void* recv, std::size_t bytes) override {
    std::memmove(recv, send, bytes);
  }
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}

 private:
  std::string node_ = "here";
};

TEST(LocalBackend, SetupRefusesABootstrapOfSeparateProcesses) {
  ProcessBootstrap boot;
  HostDevice device;
  BackendContext ctx;
  ctx.device = &device;
  ctx.bootstrap = &boot;
  ctx.teams = {{0}};
  auto backend = findBackend("local")->create();
  try {
    backend->setup(ctx);
    ADD_FAILURE() << "local set up over a bootstrap of separate processes";
  } catch (const BackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("threads of one process"));
  }
}

// ------------------------------------------- missing ranks, in evaluators

Program allreduceProgram() {
  return parseProgram(R"({"format": "hostir/1", "name": "ar", "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": [4]},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
       "reduce": "sum"},
      {"op": "wait", "communication": "ar"}]})");
}

TEST(LocalEvaluator, ARankThatNeverLoadsTheProgramEndsSetupWithATimeout) {
  auto world = createThreadBootstraps(2, std::chrono::milliseconds(300));
  Session session(*world[0], SessionOptions{"host"});
  const Clock::time_point start = Clock::now();
  try {
    Evaluator ev(session, allreduceProgram());  // rank 1 never comes
    ADD_FAILURE() << "setup completed without rank 1";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank(s) 1 of a world of 2 did not arrive within 300 ms"));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
}

TEST(LocalEvaluator, ARankThatNeverRunsEndsThePeersRunWithATimeout) {
  auto world = createThreadBootstraps(2, kTimeout);
  std::string error;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Session session(*world[r], SessionOptions{"host"});
      EvaluatorOptions options;
      options.timeout = std::chrono::milliseconds(300);
      Evaluator ev(session, allreduceProgram(), options);
      if (r == 1) return;  // loads, never runs
      try {
        ev.run();
        ev.synchronize();
        ADD_FAILURE() << "rank 0's run completed without rank 1";
      } catch (const TimeoutError& e) {
        error = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(error, HasSubstr("/body/1"));
  EXPECT_THAT(error, HasSubstr("rank 0"));
}

// ------------------------------------------------- the choice of the backend

TEST(BackendChoice, AutoPicksLocalForThreadsAndMpiForProcesses) {
  const SupportQuery q{"host", CommType::Allreduce};
  std::unique_ptr<Bootstrap> self = createSelfBootstrap();
  EXPECT_EQ(selectBackend(backendCatalog(*self), "auto", q, "/body/1").name, "local");
  ProcessBootstrap processes;
  EXPECT_EQ(selectBackend(backendCatalog(processes), "auto", q, "/body/1").name, "mpi");
  // Without a bootstrap (hir check), as `hir run` runs: mpi.
  EXPECT_EQ(selectBackend(backendCatalog(), "auto", q, "/body/1").name, "mpi");
}

TEST(BackendChoice, ABackendThatCannotRunWithTheBootstrapIsAnErrorNamingTheNode) {
  const SupportQuery q{"host", CommType::Allreduce};
  std::unique_ptr<Bootstrap> self = createSelfBootstrap();
  try {
    selectBackend(backendCatalog(*self), "mpi", q, "/body/4");
    ADD_FAILURE() << "mpi selected for ranks as threads";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/4: backend 'mpi' cannot run allreduce of float32 on "
                                    "device 'host': backend 'mpi' connects ranks that are "
                                    "separate processes, but this session's bootstrap has its "
                                    "ranks as threads of one process"));
  }
  ProcessBootstrap processes;
  try {
    selectBackend(backendCatalog(processes), "local", q, "/body/4");
    ADD_FAILURE() << "local selected for ranks as processes";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/4: backend 'local' cannot run allreduce of float32 "
                                    "on device 'host': backend 'local' connects ranks that are "
                                    "threads of one process, but this session's bootstrap has "
                                    "its ranks as separate processes"));
  }
  // ipc needs separate processes too.
  SupportQuery send{"host", CommType::Send};
  EXPECT_THROW(selectBackend(backendCatalog(*self), "ipc", send, "/body/4"), ProgramError);
}

TEST(BackendChoice, AnEvaluatorOfThreadsRefusesAProgramNamingMpi) {
  Program p = parseProgram(R"({"format": "hostir/1", "name": "named", "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": [4]},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
       "reduce": "sum", "backend": "mpi"},
      {"op": "wait", "communication": "ar"}]})");
  Session session(createSelfBootstrap(), SessionOptions{"host"});
  try {
    Evaluator ev(session, p);
    ADD_FAILURE() << "a program naming mpi loaded with a thread bootstrap";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/1: backend 'mpi' cannot run allreduce"));
    EXPECT_THAT(e.what(), HasSubstr("threads of one process"));
  }
}

TEST(BackendChoice, RegisteringABackendMarkedUnavailableIsAUsageError) {
  BackendCaps caps = findBackend("local")->caps;
  caps.name = "test-unavailable";
  caps.unavailable = "never here";
  try {
    registerBackend({caps, [] { return std::unique_ptr<Backend>(); }});
    ADD_FAILURE() << "a backend marked unavailable was registered";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("only a session's catalog (backendCatalog(bootstrap)) sets it"));
  }
}

TEST(BackendChoice, RegisteringABackendForNoRankSpaceIsAUsageError) {
  BackendCaps caps = findBackend("local")->caps;
  caps.name = "test-nowhere";
  caps.rank_spaces = {};
  try {
    registerBackend({caps, [] { return std::unique_ptr<Backend>(); }});
    ADD_FAILURE() << "a backend for no rank space was registered";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("backend 'test-nowhere' connects ranks in no rank space"));
  }
}

}  // namespace
}  // namespace hir
