// The MPI backend (mpi_backend.h): its communicators and the MPI call of
// every communication type. A post never blocks the host: it goes through
// the start stream and completion lanes of backends/host_post.h, where
//
//   start:      a host function starts the non-blocking MPI calls
//   completion: a host function polls them (MPI_Testall, with the backend
//               timeout), then divides the result of avg
//
// Every start runs on one thread, in post order, on every rank: MPI needs the
// collectives of a communicator in the same order everywhere, and a start
// never waits for a peer, so send/recv posted in any order cannot deadlock.
// A post's completion waits only for its own requests (and, in its lane,
// for earlier posts that must complete first anyway); a poll progresses
// every request. A send is not assumed to complete before its recv starts:
// MPI buffers only below its eager limit, which a program must not rely on.
//
// Argument resolution (communicator, in-place forms, staging) happens on the
// posting thread, so a bad argument is thrown by post() itself; failures of
// the enqueued host functions become the device's sticky error.
#include "backends/mpi_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/buffer_ranges.h"
#include "backends/host_post.h"
#include "backends/post_checks.h"
#include "common/elements.h"
#include "common/reductions.h"
#include "common/check.h"
#include "common/log.h"
#include <hostir/bootstrap.h>
#include "transport/mpi_util.h"

namespace hir {

namespace {

constexpr int kMpiAutoPriority = 10;
// One tag for every send/recv: MPI's non-overtaking rule keeps the order of
// the messages between a pair of ranks, which is the order of the program.
constexpr int kPointToPointTag = 0;
// Polling of a pending post. MPI moves a message larger than its eager
// limit in fragments, and only while both ranks call into it (Open MPI has
// no progress thread), so a poller that sleeps long between calls moves
// about one fragment per sleep (docs/performance.md, "The mpi backend on the
// host"). The completion task is the rank's one poller while the host waits
// asleep, so it
// - spins (calls MPI_Testall back to back, never yielding) for kSpinBase
//   plus the post's bytes at kSpinNsPerByte: a small operation's round
//   trip, or a large one's transfer while the peer keeps up;
// - then, while the data could still be moving (kHotBase plus the bytes at
//   kHotNsPerByte, 250 MB/s, well below any host's copy rate), sleeps
//   kHotPause between polls, so that a peer rank sharing its core can run;
// - then, for a peer that is late, sleeps doubling from kFirstPause to
//   kLongestPause.
// It never yields: on a loaded machine a yield gives the core away for a
// whole time slice (milliseconds), while a thread that wakes from a short
// sleep runs ahead of the processes that kept their cores (host-bench.sh,
// docs/performance.md, "The host path beside raw MPI").
constexpr std::chrono::microseconds kSpinBase{100};
constexpr double kSpinNsPerByte = 1.0;
constexpr std::chrono::microseconds kHotBase{1000};
constexpr double kHotNsPerByte = 4.0;
constexpr std::chrono::microseconds kHotPause{5};
constexpr std::chrono::microseconds kFirstPause{2};
constexpr std::chrono::microseconds kLongestPause{100};
// A post's polling gives up this long after the backend timeout: the
// evaluator's own host waits (the timeout) and its watchdog (the timeout and
// 1 s), which report what is pending, end first. The polling is the
// backstop.
constexpr Duration kPollGrace{2000};

// ------------------------------------------------------------- datatypes

bool is16BitFloat(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// float16 and bfloat16 move as 16-bit integers; their reductions are our own
// MPI_Ops that compute in float.
MPI_Datatype mpiDatatype(DType t) {
  switch (t) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Float16: return MPI_UINT16_T;
    case DType::BFloat16: return MPI_UINT16_T;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::UInt8: return MPI_UINT8_T;
  }
  HIR_INTERNAL_ASSERT(false, "unknown dtype {}", static_cast<int>(t));
  return MPI_DATATYPE_NULL;
}

// avg is a sum followed by a division on completion.
MPI_Op builtinOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Prod: return MPI_PROD;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
  }
  HIR_INTERNAL_ASSERT(false, "unknown reduce op {}", static_cast<int>(op));
  return MPI_OP_NULL;
}

// Slots of the 16-bit ops: [float16, bfloat16] x [sum, prod, min, max].
constexpr int kOpSlots = 4;
int opSlot(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return 0;
    case ReduceOp::Avg: return 0;
    case ReduceOp::Prod: return 1;
    case ReduceOp::Min: return 2;
    case ReduceOp::Max: return 3;
  }
  HIR_INTERNAL_ASSERT(false, "unknown reduce op {}", static_cast<int>(op));
  return 0;
}

// MPI_User_function for a 16-bit float type: inout[i] = in[i] (op) inout[i],
// with the host's reduction arithmetic (common/reductions.h).
template <DType T, ReduceOp Op>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  combineInto(inout, in, static_cast<std::size_t>(*len), T, Op);
}

template <DType T>
constexpr MPI_User_function* kReduce16[kOpSlots] = {
    &reduce16<T, ReduceOp::Sum>, &reduce16<T, ReduceOp::Prod>, &reduce16<T, ReduceOp::Min>,
    &reduce16<T, ReduceOp::Max>};

// MPI_User_function for a uint8 sum that wraps modulo 256, as MPI's
// standard, NCCL and the host reference compute: Open MPI 4.1's op/avx
// component adds MPI_UINT8_T with saturation from 8 elements up (4 ranks of
// 200 give 255, not 32).
void sumUInt8(void* in, void* inout, int* len, MPI_Datatype*) {
  combineInto(inout, in, static_cast<std::size_t>(*len), DType::UInt8, ReduceOp::Sum);
}

// ------------------------------------------------------------ one post

// One MPI call of a post, resolved on the posting thread.
struct Call {
  CommType type = CommType::Allreduce;
  DType dtype = DType::Float32;
  MPI_Datatype datatype = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  const void* send = nullptr;  // may be MPI_IN_PLACE
  void* recv = nullptr;        // may be MPI_IN_PLACE (scatter's root)
  int count = 0;
  int root = 0;   // team rank
  int peer = -1;  // world rank (send, recv)

  // Done by the start task first, once the inputs are ready:
  // CopyToOutput: a broadcast root whose input is not its output copies it.
  // InputToTemp: the input overlaps the output in a way MPI does not allow;
  // it is copied to a temporary that becomes the send buffer.
  enum class Stage { None, CopyToOutput, InputToTemp };
  Stage stage = Stage::None;
  const void* stage_src = nullptr;
  std::size_t stage_bytes = 0;

  // avg: the completion task divides avg_count elements of avg_out.
  void* avg_out = nullptr;
  std::size_t avg_count = 0;
  int avg_divisor = 1;
};

// What the start and completion tasks of one post share. The start task
// fills `requests` (and `temps`); the completion task reads them after it:
// behind the `started` event, or, for a start run on the posting thread,
// enqueued once it returned (host_post.h).
struct MpiPost {
  std::vector<Call> calls;
  std::vector<MPI_Request> requests;
  std::vector<std::unique_ptr<std::byte[]>> temps;
  std::size_t bytes = 0;  // what the post moves on this rank, for polling
  std::string what;       // "PATH (allreduce)", for messages
  int rank = -1;          // world rank, for messages
  Duration timeout{0};
  // The backend's abort(): a start not yet run is skipped, a poll gives up.
  std::shared_ptr<const std::atomic<bool>> aborted;
  bool start_failed = false;
  bool completed = false;

  // A post that never completed (a timeout, an abort, or its completion
  // task skipped after an earlier failure) may still have MPI writing into
  // its temporaries, and its requests stay with MPI (a collective cannot be
  // cancelled): both go to the abandoned lists, kept for the rest of the
  // process (the run has failed).
  ~MpiPost();
};

// What posts that never completed left with MPI: their temporaries (MPI may
// still write into them) and their requests, reachable to the end of the
// process. Never freed.
struct Abandoned {
  std::mutex mutex;
  std::vector<std::unique_ptr<std::byte[]>> temps;
  std::vector<MPI_Request> requests;
};

Abandoned& abandoned() {
  static auto* a = new Abandoned;
  return *a;
}

MpiPost::~MpiPost() {
  if (completed) return;
  Abandoned& a = abandoned();
  std::lock_guard lock(a.mutex);
  for (auto& temp : temps) a.temps.push_back(std::move(temp));
  for (MPI_Request r : requests)
    if (r != MPI_REQUEST_NULL) a.requests.push_back(r);
}

void stageInput(Call& c, MpiPost& record) {
  switch (c.stage) {
    case Call::Stage::None:
      return;
    case Call::Stage::CopyToOutput:
      std::memmove(c.recv, c.stage_src, c.stage_bytes);
      return;
    case Call::Stage::InputToTemp: {
      auto temp = std::make_unique<std::byte[]>(c.stage_bytes);
      std::memcpy(temp.get(), c.stage_src, c.stage_bytes);
      c.send = temp.get();
      record.temps.push_back(std::move(temp));
      return;
    }
  }
}

// Every MPI call of the backend's posts holds this lock. The progress made
// inside any call (a start on the posting thread, a test on a completion
// lane) may move the data of another thread's request and complete it; the
// lock orders that progress before the other thread's test that sees the
// completion, in a way ThreadSanitizer can see (Open MPI itself is not
// instrumented). Open MPI runs its progress under its own lock anyway.
std::mutex& mpiCalls() {
  static std::mutex m;
  return m;
}

MPI_Request startCall(const Call& c) {
  const std::lock_guard lock(mpiCalls());
  MPI_Request r = MPI_REQUEST_NULL;
  const int n = c.count;
  const MPI_Datatype t = c.datatype;
  switch (c.type) {
    case CommType::Allgather:
      mpi::check(MPI_Iallgather(c.send, n, t, c.recv, n, t, c.comm, &r), "MPI_Iallgather");
      break;
    case CommType::Allreduce:
      mpi::check(MPI_Iallreduce(c.send, c.recv, n, t, c.op, c.comm, &r), "MPI_Iallreduce");
      break;
    case CommType::ReduceScatter:
      mpi::check(MPI_Ireduce_scatter_block(c.send, c.recv, n, t, c.op, c.comm, &r),
                 "MPI_Ireduce_scatter_block");
      break;
    case CommType::Broadcast:
      mpi::check(MPI_Ibcast(c.recv, n, t, c.root, c.comm, &r), "MPI_Ibcast");
      break;
    case CommType::Reduce:
      mpi::check(MPI_Ireduce(c.send, c.recv, n, t, c.op, c.root, c.comm, &r), "MPI_Ireduce");
      break;
    case CommType::Gather:
      mpi::check(MPI_Igather(c.send, n, t, c.recv, n, t, c.root, c.comm, &r), "MPI_Igather");
      break;
    case CommType::Scatter:
      mpi::check(MPI_Iscatter(c.send, n, t, c.recv, n, t, c.root, c.comm, &r), "MPI_Iscatter");
      break;
    case CommType::Alltoall:
      mpi::check(MPI_Ialltoall(c.send, n, t, c.recv, n, t, c.comm, &r), "MPI_Ialltoall");
      break;
    case CommType::Send:
      mpi::check(MPI_Isend(c.send, n, t, c.peer, kPointToPointTag, c.comm, &r), "MPI_Isend");
      break;
    case CommType::Recv:
      mpi::check(MPI_Irecv(c.recv, n, t, c.peer, kPointToPointTag, c.comm, &r), "MPI_Irecv");
      break;
  }
  return r;
}

// The start task: never waits for a peer.
void startPost(MpiPost& record) {
  if (record.aborted->load()) {
    record.start_failed = true;
    throw BackendError(fmt::format("mpi: {} was not started on rank {}: the backend was aborted",
                                   record.what, record.rank));
  }
  try {
    record.requests.reserve(record.calls.size());
    for (Call& c : record.calls) {
      stageInput(c, record);
      record.requests.push_back(startCall(c));
    }
  } catch (...) {
    record.start_failed = true;
    throw;
  }
}

// Polls until every request of the post completed, or throws after the
// timeout and its grace, or once the backend is aborted (this becomes the
// device's sticky error). An abandoned request stays with MPI.
void awaitPost(MpiPost& record) {
  using Clock = std::chrono::steady_clock;
  const Duration limit = record.timeout + kPollGrace;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + limit;
  auto after = [&](std::chrono::microseconds base, double ns_per_byte) {
    return start + base +
           std::chrono::nanoseconds(
               static_cast<int64_t>(static_cast<double>(record.bytes) * ns_per_byte));
  };
  const Clock::time_point spin_until = after(kSpinBase, kSpinNsPerByte);
  const Clock::time_point hot_until = after(kHotBase, kHotNsPerByte);
  std::chrono::microseconds pause = kFirstPause;
  for (;;) {
    int complete = 0;
    {
      const std::lock_guard lock(mpiCalls());
      mpi::check(MPI_Testall(static_cast<int>(record.requests.size()), record.requests.data(),
                             &complete, MPI_STATUSES_IGNORE),
                 "MPI_Testall");
    }
    if (complete) return;
    if (record.aborted->load())
      throw BackendError(fmt::format("mpi: {} was abandoned on rank {}: the backend was aborted",
                                     record.what, record.rank));
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      throw BackendError(fmt::format(
          "mpi: {} did not complete within {} ms on rank {} (the timeout, {} ms, and {} ms)",
          record.what, limit.count(), record.rank, record.timeout.count(), kPollGrace.count()));
    if (now < spin_until) continue;
    if (now < hot_until) {
      std::this_thread::sleep_for(kHotPause);
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kLongestPause);
  }
}

// The completion task.
void completePost(MpiPost* record) {
  if (record->start_failed) return;  // the start task already reported it
  awaitPost(*record);
  record->completed = true;
  for (const Call& c : record->calls)
    if (c.avg_out != nullptr) divideBy(c.avg_out, c.dtype, c.avg_count, c.avg_divisor);
}

void stageToTemp(Call& c, const void* input, std::size_t bytes) {
  c.stage = Call::Stage::InputToTemp;
  c.stage_src = input;
  c.stage_bytes = bytes;
}

void requireMpiThreadMultiple() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  HIR_CHECK_AS(BackendError, initialized && !finalized,
               "the mpi backend needs MPI, which is {} in this process (create the bootstrap "
               "with hir::createMpiBootstrap(), also for one rank)",
               finalized ? "already finalized" : "not initialized");
  int provided = MPI_THREAD_SINGLE;
  mpi::check(MPI_Query_thread(&provided), "MPI_Query_thread");
  HIR_CHECK_AS(BackendError, provided >= MPI_THREAD_MULTIPLE,
               "the mpi backend needs MPI initialized with MPI_THREAD_MULTIPLE (it starts and "
               "completes operations from two threads); this process has {}",
               mpi::threadLevelName(provided));
}

}  // namespace

// ------------------------------------------------------------- the backend

struct MpiBackend::State {
  BackendContext ctx;
  int rank = -1;  // world rank
  // Per team of ctx.teams: its communicator (MPI_COMM_NULL where this rank
  // is not a member), this rank's team rank (-1 outside) and its size.
  std::vector<MPI_Comm> comms;
  std::vector<int> team_rank;
  std::vector<int> team_size;
  MPI_Op ops16[2][kOpSlots] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                               {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
  MPI_Op sum_u8 = MPI_OP_NULL;
  HostPostStreams streams;
  // Set by abort(); shared with the posts' tasks.
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);

  void createTeams();
  void createOps();
  MPI_Op reduceOp(DType t, ReduceOp op) const;
  Call resolve(const PostArgs& a) const;
  void resolveCollective(const PostArgs& a, Call& c) const;
  void shutdown() noexcept;
};

void MpiBackend::State::createTeams() {
  const int world = ctx.bootstrap->world();
  HIR_INTERNAL_ASSERT(!ctx.teams.empty() && static_cast<int>(ctx.teams[0].size()) == world,
                      "teams[0] must be the world of {} ranks", world);
  for (int r = 0; r < world; ++r)
    HIR_INTERNAL_ASSERT(ctx.teams[0][r] == r, "teams[0] must list the ranks in order");
  for (std::size_t i = 0; i < ctx.teams.size(); ++i) {
    const std::vector<int>& team = ctx.teams[i];
    auto me = std::find(team.begin(), team.end(), rank);
    const int index = me == team.end() ? -1 : static_cast<int>(me - team.begin());
    for (int member : team)
      HIR_INTERNAL_ASSERT(member >= 0 && member < world, "team {} lists rank {}", i, member);
    MPI_Comm comm = MPI_COMM_NULL;
    if (i == 0) {
      mpi::check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    } else {
      // Collective over the world: non-members take part with MPI_UNDEFINED.
      mpi::check(MPI_Comm_split(MPI_COMM_WORLD, index >= 0 ? 0 : MPI_UNDEFINED,
                                std::max(index, 0), &comm),
                 "MPI_Comm_split");
    }
    comms.push_back(comm);
    team_rank.push_back(index);
    team_size.push_back(static_cast<int>(team.size()));
    if (comm != MPI_COMM_NULL)
      mpi::check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
}

void MpiBackend::State::createOps() {
  for (int slot = 0; slot < kOpSlots; ++slot) {
    mpi::check(MPI_Op_create(kReduce16<DType::Float16>[slot], 1, &ops16[0][slot]),
               "MPI_Op_create");
    mpi::check(
        MPI_Op_create(kReduce16<DType::BFloat16>[slot], 1, &ops16[1][slot]),
        "MPI_Op_create");
  }
  mpi::check(MPI_Op_create(&sumUInt8, 1, &sum_u8), "MPI_Op_create");
}

MPI_Op MpiBackend::State::reduceOp(DType t, ReduceOp op) const {
  if (t == DType::UInt8 && (op == ReduceOp::Sum || op == ReduceOp::Avg)) return sum_u8;
  if (!is16BitFloat(t)) return builtinOp(op);
  return ops16[t == DType::Float16 ? 0 : 1][opSlot(op)];
}

Call MpiBackend::State::resolve(const PostArgs& a) const {
  Call c;
  c.type = a.type;
  c.dtype = a.dtype;
  c.datatype = mpiDatatype(a.dtype);
  HIR_CHECK_AS(BackendError, a.count <= static_cast<std::size_t>(INT_MAX),
               "mpi: {} ({}) moves {} elements per rank; the mpi backend supports at most {} "
               "(MPI's int counts)",
               a.path, toString(a.type), a.count, INT_MAX);
  c.count = static_cast<int>(a.count);
  if (isPointToPoint(a.type)) {
    HIR_INTERNAL_ASSERT(a.peer >= 0 && a.peer < team_size[0], "{}: peer {} outside the world",
                        a.path, a.peer);
    c.comm = comms[0];
    c.peer = a.peer;
    c.send = a.input;
    c.recv = a.output;
    return c;
  }
  resolveCollective(a, c);
  return c;
}

void MpiBackend::State::resolveCollective(const PostArgs& a, Call& c) const {
  HIR_INTERNAL_ASSERT(a.team >= 0 && a.team < static_cast<int>(comms.size()),
                      "{}: team {} was not set up", a.path, a.team);
  c.comm = comms[a.team];
  HIR_INTERNAL_ASSERT(c.comm != MPI_COMM_NULL, "{}: rank {} posts on team {} without being in it",
                      a.path, rank, a.team);
  const int size = team_size[a.team];
  const int me = team_rank[a.team];
  HIR_INTERNAL_ASSERT(!hasRoot(a.type) || (a.root >= 0 && a.root < size),
                      "{}: root {} outside a team of {}", a.path, a.root, size);
  c.root = a.root;
  const bool is_root = me == a.root;
  if (hasReduceOp(a.type)) c.op = reduceOp(a.dtype, a.reduce);
  const std::size_t chunk = a.count * dtypeSize(a.dtype);
  const std::size_t all = chunk * static_cast<std::size_t>(size);
  c.send = a.input;
  c.recv = a.output;
  // avg divides what this rank receives as a reduction result.
  auto divideOutput = [&] {
    if (a.reduce != ReduceOp::Avg) return;
    c.avg_out = a.output;
    c.avg_count = a.count;
    c.avg_divisor = size;
  };
  switch (a.type) {
    case CommType::Allgather:
      if (a.input == bytesAt(a.output, me * chunk))
        c.send = MPI_IN_PLACE;
      else if (overlaps(a.input, chunk, a.output, all))
        stageToTemp(c, a.input, chunk);
      return;
    case CommType::Allreduce:
      if (a.input == a.output)
        c.send = MPI_IN_PLACE;
      else if (overlaps(a.input, chunk, a.output, chunk))
        stageToTemp(c, a.input, chunk);
      divideOutput();
      return;
    case CommType::ReduceScatter:
      // MPI's in-place form leaves the result at the start of the buffer,
      // not at this rank's chunk: any overlap goes through a temporary.
      if (overlaps(a.input, all, a.output, chunk)) stageToTemp(c, a.input, all);
      divideOutput();
      return;
    case CommType::Broadcast:
      c.send = nullptr;
      if (is_root && a.input != a.output) {
        c.stage = Call::Stage::CopyToOutput;
        c.stage_src = a.input;
        c.stage_bytes = chunk;
      }
      return;
    case CommType::Reduce:
      if (!is_root) {
        c.recv = nullptr;  // significant only at the root
        return;
      }
      if (a.input == a.output)
        c.send = MPI_IN_PLACE;
      else if (overlaps(a.input, chunk, a.output, chunk))
        stageToTemp(c, a.input, chunk);
      divideOutput();
      return;
    case CommType::Gather:
      if (!is_root) {
        c.recv = nullptr;
        return;
      }
      if (a.input == bytesAt(a.output, a.root * chunk))
        c.send = MPI_IN_PLACE;
      else if (overlaps(a.input, chunk, a.output, all))
        stageToTemp(c, a.input, chunk);
      return;
    case CommType::Scatter:
      if (!is_root) {
        c.send = nullptr;
        return;
      }
      if (a.output == bytesAt(a.input, a.root * chunk))
        c.recv = MPI_IN_PLACE;
      else if (overlaps(a.input, all, a.output, chunk))
        stageToTemp(c, a.input, all);
      return;
    case CommType::Alltoall:
      if (overlaps(a.input, all, a.output, all)) stageToTemp(c, a.input, all);
      return;
    case CommType::Send:
    case CommType::Recv:
      break;
  }
  HIR_INTERNAL_ASSERT(false, "{}: {} is not a collective", a.path, toString(a.type));
}

void MpiBackend::State::shutdown() noexcept {
  // Let posted work finish (or time out) before its communicators go. After
  // abort() the tasks end at once.
  streams.drain(ctx.timeout);
  streams.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // After an abort too: MPI_Comm_free and MPI_Op_free only mark the objects
  // for deallocation, which waits for the operations still pending on them
  // (an abandoned request keeps its communicator and op alive), and Open
  // MPI's free of an intracommunicator does not communicate, so a peer that
  // is gone cannot hold it up (the fault tests kill peers). Left to
  // MPI_Finalize instead, part of each communicator is never freed.
  for (MPI_Comm& comm : comms)
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  for (auto& row : ops16)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
  if (sum_u8 != MPI_OP_NULL) MPI_Op_free(&sum_u8);
}

MpiBackend::MpiBackend() : state_(std::make_unique<State>()) {}

std::size_t MpiBackend::abandonedRequests() {
  Abandoned& a = abandoned();
  std::lock_guard lock(a.mutex);
  return a.requests.size();
}

MpiBackend::~MpiBackend() { state_->shutdown(); }

// Every communication type, dtype and reduce op, on host memory.
BackendCaps MpiBackend::caps() {
  BackendCaps c;
  c.name = "mpi";
  c.devices = {"host"};
  c.types = EnumSet<CommType>::all(kCommTypeNames);
  c.dtypes = EnumSet<DType>::all(kDTypeNames);
  c.reduce_ops = EnumSet<ReduceOp>::all(kReduceOpNames);
  c.rank_spaces = {RankSpace::Processes};  // MPI_COMM_WORLD
  c.post_order = PostOrder::kStartsInPostOrder;  // one start thread (host_post.h)
  c.auto_priority = kMpiAutoPriority;
  return c;
}

void MpiBackend::setup(const BackendContext& ctx) {
  HIR_INTERNAL_ASSERT(ctx.device != nullptr && ctx.bootstrap != nullptr,
                      "mpi backend setup without a device or bootstrap");
  HIR_INTERNAL_ASSERT(state_->comms.empty(), "mpi backend set up twice");
  Support s = supports(caps(), SupportQuery{ctx.device->kind()});
  HIR_CHECK_AS(BackendError, s.ok, "{}", s.why);
  requireMpiThreadMultiple();
  State& st = *state_;
  int mpi_rank = -1, mpi_world = 0;
  mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(MPI_COMM_WORLD, &mpi_world), "MPI_Comm_size");
  HIR_CHECK_AS(BackendError,
               mpi_rank == ctx.bootstrap->rank() && mpi_world == ctx.bootstrap->world(),
               "the mpi backend works on MPI_COMM_WORLD (rank {} of {}), but the bootstrap says "
               "rank {} of {}",
               mpi_rank, mpi_world, ctx.bootstrap->rank(), ctx.bootstrap->world());
  st.ctx = ctx;
  st.rank = mpi_rank;
  device_ = ctx.device;
  st.createTeams();
  st.createOps();
  st.streams.create(*device_);
  HIR_LOG_INFO(Subsys::Mpi, "communicators of {} team(s) created (rank {} of {})",
               ctx.teams.size(), mpi_rank, mpi_world);
}

void MpiBackend::post(std::span<const PostArgs> ops, Stream& current, Event& done) {
  State& st = *state_;
  checkPostable("mpi", ops, st.streams.created(), st.aborted->load(), st.rank);
  auto record = std::make_shared<MpiPost>();
  record->rank = st.rank;
  record->timeout = st.ctx.timeout;
  record->aborted = st.aborted;
  record->what = describePost(ops);
  record->calls.reserve(ops.size());
  for (const PostArgs& a : ops) {
    record->calls.push_back(st.resolve(a));
    record->bytes += a.count * dtypeSize(a.dtype) *
                     (isPointToPoint(a.type) ? 1 : static_cast<std::size_t>(st.team_size[a.team]));
  }
  std::size_t staged = 0;
  for (const Call& c : record->calls) staged += c.stage == Call::Stage::None ? 0 : c.stage_bytes;
  const auto lock = st.streams.lock();
  st.streams.enqueue(lock, ops, current, done, [record] { startPost(*record); },
                     [record] { completePost(record.get()); },
                     staged <= HostPostStreams::kInlineStartBytes);
}

void MpiBackend::abort() {
  HIR_LOG_INFO(Subsys::Mpi, "aborted: pending requests are abandoned");
  state_->aborted->store(true);
}

void registerMpiBackend() {
  registerBackend({MpiBackend::caps(), [] { return std::make_unique<MpiBackend>(); }});
}

}  // namespace hir
