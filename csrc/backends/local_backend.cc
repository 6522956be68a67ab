// The local backend (local_backend.h says what it is). Its parts:
// - the data movement of a complete slot, for every communication type,
//   (reductions as the mpi backend computes them: common/reductions.h),
//   staged through a temporary so that any overlap of a rank's input and
//   output gives what the non-overlapping case gives;
// - the hub (slots, one mutex and one condition variable for the world),
//   and the per-post record that the start and completion tasks share.
#include "backends/local_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "backends/host_post.h"
#include "backends/post_checks.h"
#include "common/check.h"
#include "common/elements.h"
#include "common/reductions.h"

namespace hir {

namespace {

constexpr int kLocalAutoPriority = 5;
// A post's wait gives up this long after the backend timeout, so that the
// evaluator's own host waits and watchdog report first (as mpi).
constexpr Duration kWaitGrace{2000};

// --------------------------------------------------------- posts and slots

struct PostRecord;
struct Slot;

// Collectives: (0, team, 0, k), the k-th collective of the team. Send/recv:
// (1, sender, receiver, k), the k-th message of that ordered pair.
using SlotKey = std::tuple<int, int, int, uint64_t>;

// One communication of a post, resolved on the posting thread.
struct Op {
  CommType type = CommType::Allreduce;
  DType dtype = DType::Float32;
  ReduceOp reduce = ReduceOp::Sum;
  const void* input = nullptr;
  void* output = nullptr;
  std::size_t count = 0;
  int root = 0;  // team rank
  std::string path;
  SlotKey key;
  int index = 0;     // place in the slot: team rank; send 0, recv 1
  int expected = 0;  // members of the slot
  std::vector<int> members;  // world rank of each place
  Slot* slot = nullptr;  // once deposited; valid while !done
  bool done = false;
};

// A rendezvous: one op of each member.
struct Slot {
  struct Part {
    std::shared_ptr<PostRecord> record;
    const Op* op = nullptr;
  };
  std::vector<Part> parts;
  int arrived = 0;
  std::string failed;  // a member gave up, or the members disagree: why
};

// What the start and completion tasks of one post share; guarded by the
// hub's mutex once the start task runs.
struct PostRecord {
  std::vector<Op> ops;
  std::string what;  // "PATH (allreduce), ...", for messages
  int rank = -1;
  Duration timeout{0};
  std::shared_ptr<const std::atomic<bool>> aborted;
  int pending = 0;        // ops not done
  int moving = 0;         // slots of its ops whose data is being moved
  std::string error;      // the first failure of one of its slots
  bool start_failed = false;
  bool abandoned = false;
};

std::string describeOp(const Op& o, int rank) {
  return fmt::format("rank {} posts {} ({} of {} x {}{}{})", rank, o.path, toString(o.type),
                     o.count, toString(o.dtype),
                     hasReduceOp(o.type) ? fmt::format(", {}", toString(o.reduce)) : "",
                     hasRoot(o.type) ? fmt::format(", root {}", o.root) : "");
}

// A send and its recv agree on their bytes; collectives on everything.
bool agree(const Op& a, const Op& b) {
  if (isPointToPoint(a.type))
    return isPointToPoint(b.type) && a.type != b.type &&
           a.count * dtypeSize(a.dtype) == b.count * dtypeSize(b.dtype);
  return a.type == b.type && a.dtype == b.dtype && a.count == b.count &&
         (!hasReduceOp(a.type) || a.reduce == b.reduce) && (!hasRoot(a.type) || a.root == b.root);
}

// The data movement of a complete slot: every member's op is in place and
// none of them touches its buffers until its op is done.
void moveData(const Slot& s) {
  const Op& o = *s.parts[0].op;
  const std::size_t n = s.parts.size();
  const std::size_t chunk = o.count * dtypeSize(o.dtype);
  auto in = [&](std::size_t j) { return static_cast<const std::byte*>(s.parts[j].op->input); };
  auto out = [&](std::size_t j) { return static_cast<std::byte*>(s.parts[j].op->output); };
  auto copy = [](void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  };
  // The reduction over every member's `elements` elements, avg divided.
  auto reduceAll = [&](std::size_t elements) {
    std::vector<std::byte> acc(elements * dtypeSize(o.dtype));
    copy(acc.data(), in(0), acc.size());
    for (std::size_t j = 1; j < n; ++j) combineInto(acc.data(), in(j), elements, o.dtype, o.reduce);
    if (o.reduce == ReduceOp::Avg) divideBy(acc.data(), o.dtype, elements, static_cast<int>(n));
    return acc;
  };
  const auto root = static_cast<std::size_t>(o.root);
  std::vector<std::byte> temp;
  switch (o.type) {
    case CommType::Allgather:
    case CommType::Gather:
      temp.resize(n * chunk);
      for (std::size_t j = 0; j < n; ++j) copy(temp.data() + j * chunk, in(j), chunk);
      if (o.type == CommType::Gather) {
        copy(out(root), temp.data(), temp.size());
      } else {
        for (std::size_t j = 0; j < n; ++j) copy(out(j), temp.data(), temp.size());
      }
      return;
    case CommType::Allreduce:
      temp = reduceAll(o.count);
      for (std::size_t j = 0; j < n; ++j) copy(out(j), temp.data(), chunk);
      return;
    case CommType::ReduceScatter:
      temp = reduceAll(o.count * n);
      for (std::size_t j = 0; j < n; ++j) copy(out(j), temp.data() + j * chunk, chunk);
      return;
    case CommType::Reduce:
      temp = reduceAll(o.count);
      copy(out(root), temp.data(), chunk);
      return;
    case CommType::Broadcast:
      temp.assign(in(root), in(root) + chunk);
      for (std::size_t j = 0; j < n; ++j) copy(out(j), temp.data(), chunk);
      return;
    case CommType::Scatter:
      temp.assign(in(root), in(root) + n * chunk);
      for (std::size_t j = 0; j < n; ++j) copy(out(j), temp.data() + j * chunk, chunk);
      return;
    case CommType::Alltoall:
      // Member j's input holds n chunks, chunk r for member r.
      temp.resize(n * n * chunk);
      for (std::size_t j = 0; j < n; ++j) copy(temp.data() + j * n * chunk, in(j), n * chunk);
      for (std::size_t r = 0; r < n; ++r)
        for (std::size_t j = 0; j < n; ++j)
          copy(out(r) + j * chunk, temp.data() + (j * n + r) * chunk, chunk);
      return;
    case CommType::Send:
    case CommType::Recv:
      // parts[0] is the send, parts[1] the recv.
      if (chunk > 0) std::memmove(out(1), in(0), chunk);
      return;
  }
  HIR_INTERNAL_ASSERT(false, "unknown communication type {}", static_cast<int>(o.type));
}

// What the ranks of one world share.
struct Hub {
  std::mutex mutex;
  std::condition_variable cv;
  std::map<SlotKey, std::unique_ptr<Slot>> slots;  // incomplete (or failed) slots
};

// Under the hub's lock: fails `slot` with `why`, and every op already in it.
void failSlot(Slot& slot, const std::string& why) {
  if (slot.failed.empty()) slot.failed = why;
  for (const Slot::Part& p : slot.parts)
    if (p.record != nullptr && p.record->error.empty()) p.record->error = slot.failed;
}

// Under the hub's lock (held by `lock`): `record`'s rank gives up on it.
// Its slots that are still incomplete fail with `why`, so that their other
// members fail now and no later arrival moves data into its buffers; a
// movement already under way is waited for (it is a bounded copy).
void abandon(Hub& hub, std::unique_lock<std::mutex>& lock, PostRecord& record,
             const std::string& why) {
  if (!record.abandoned) {
    record.abandoned = true;
    for (const Op& op : record.ops)
      if (op.slot != nullptr && !op.done && op.slot->arrived < op.expected)
        failSlot(*op.slot, why);
    hub.cv.notify_all();
  }
  hub.cv.wait(lock, [&] { return record.moving == 0; });
}

// The world ranks of the members of `op`'s slot that have not posted it yet.
std::string missingRanks(const Op& op) {
  std::string out;
  if (op.slot == nullptr) return out;
  for (int place = 0; place < op.expected; ++place)
    if (op.slot->parts[place].record == nullptr)
      out += fmt::format("{}{}", out.empty() ? "" : ", ", op.members[place]);
  return out;
}

}  // namespace

// ------------------------------------------------------------- the backend

struct LocalBackend::State {
  BackendContext ctx;
  int rank = -1;
  std::shared_ptr<Hub> hub;
  std::vector<int> team_rank;  // per team: this rank's team rank, or -1
  // Sequence numbers of this rank's posts: per team, per peer and direction.
  std::vector<uint64_t> team_seq, send_seq, recv_seq;
  HostPostStreams streams;
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);
  // Posts deposited and not yet finished (guarded by the hub's mutex), for
  // abort().
  std::vector<std::shared_ptr<PostRecord>> live;

  Op resolve(const PostArgs& a);
  void start(const std::shared_ptr<PostRecord>& record);
  void complete(const std::shared_ptr<PostRecord>& record);
  void forget(const PostRecord* record);
  void shutdown() noexcept;
};

Op LocalBackend::State::resolve(const PostArgs& a) {
  Op o;
  o.type = a.type;
  o.dtype = a.dtype;
  o.reduce = a.reduce;
  o.input = a.input;
  o.output = a.output;
  o.count = a.count;
  o.root = a.root;
  o.path = a.path;
  const int world = static_cast<int>(ctx.teams[0].size());
  if (isPointToPoint(a.type)) {
    HIR_INTERNAL_ASSERT(a.peer >= 0 && a.peer < world, "{}: peer {} outside a world of {}",
                        a.path, a.peer, world);
    const bool send = a.type == CommType::Send;
    const int sender = send ? rank : a.peer, receiver = send ? a.peer : rank;
    uint64_t& seq = send ? send_seq[a.peer] : recv_seq[a.peer];
    o.key = SlotKey{1, sender, receiver, seq++};
    o.index = send ? 0 : 1;
    o.expected = 2;
    o.members = {sender, receiver};
    return o;
  }
  HIR_INTERNAL_ASSERT(a.team >= 0 && a.team < static_cast<int>(ctx.teams.size()),
                      "{}: team {} was not set up", a.path, a.team);
  const std::vector<int>& team = ctx.teams[a.team];
  const int me = team_rank[a.team];
  HIR_INTERNAL_ASSERT(me >= 0, "{}: rank {} posts on team {} without being in it", a.path, rank,
                      a.team);
  HIR_INTERNAL_ASSERT(!hasRoot(a.type) || (a.root >= 0 && a.root < static_cast<int>(team.size())),
                      "{}: root {} outside a team of {}", a.path, a.root, team.size());
  o.key = SlotKey{0, a.team, 0, team_seq[a.team]++};
  o.index = me;
  o.expected = static_cast<int>(team.size());
  o.members = team;
  return o;
}

// The start task: deposits every op; completes the slots it fills last.
// Never waits for a peer.
void LocalBackend::State::start(const std::shared_ptr<PostRecord>& record) {
  if (aborted->load()) {
    record->start_failed = true;
    throw BackendError(fmt::format("local: {} was not started on rank {}: the backend was aborted",
                                   record->what, rank));
  }
  std::vector<std::unique_ptr<Slot>> full;
  {
    std::lock_guard lock(hub->mutex);
    live.push_back(record);
    for (Op& op : record->ops) {
      std::unique_ptr<Slot>& slot = hub->slots[op.key];
      if (slot == nullptr) {
        slot = std::make_unique<Slot>();
        slot->parts.resize(static_cast<std::size_t>(op.expected));
      }
      Slot& s = *slot;
      op.slot = &s;
      s.parts[op.index] = Slot::Part{record, &op};
      ++s.arrived;
      for (const Slot::Part& p : s.parts)
        if (p.op != nullptr && p.op != &op && s.failed.empty() && !agree(*p.op, op))
          failSlot(s, fmt::format("the ranks disagree on this communication: {}; {}",
                                  describeOp(*p.op, p.record->rank), describeOp(op, rank)));
      if (!s.failed.empty()) {
        failSlot(s, s.failed);
        continue;
      }
      if (s.arrived < op.expected) continue;
      for (const Slot::Part& p : s.parts) ++p.record->moving;
      full.push_back(std::move(slot));
      hub->slots.erase(op.key);
    }
    if (!record->error.empty()) hub->cv.notify_all();
  }
  std::string failure;
  try {
    for (const auto& s : full) moveData(*s);
  } catch (const std::exception& e) {
    failure = fmt::format("moving its data on rank {} failed: {}", rank, e.what());
  }
  std::lock_guard lock(hub->mutex);
  for (const auto& s : full) {
    if (!failure.empty()) failSlot(*s, failure);
    for (const Slot::Part& p : s->parts) {
      --p.record->moving;
      if (!failure.empty()) continue;
      const_cast<Op*>(p.op)->done = true;
      const_cast<Op*>(p.op)->slot = nullptr;
      --p.record->pending;
    }
  }
  hub->cv.notify_all();
}

void LocalBackend::State::forget(const PostRecord* record) {
  live.erase(std::remove_if(live.begin(), live.end(),
                            [&](const auto& r) { return r.get() == record; }),
             live.end());
}

// The completion task: waits for this rank's ops, or gives up on them.
void LocalBackend::State::complete(const std::shared_ptr<PostRecord>& record) {
  if (record->start_failed) return;  // the start task already reported it
  const Duration limit = record->timeout + kWaitGrace;
  std::unique_lock lock(hub->mutex);
  const bool settled = hub->cv.wait_for(lock, limit, [&] {
    return record->pending == 0 || !record->error.empty() || aborted->load();
  });
  if (record->pending == 0 && record->error.empty()) {
    forget(record.get());
    return;
  }
  std::string why;
  if (!record->error.empty()) {
    why = fmt::format("local: {} failed on rank {}: {}", record->what, rank, record->error);
  } else if (settled) {
    why = fmt::format("local: {} was abandoned on rank {}: the backend was aborted", record->what,
                      rank);
  } else {
    std::string missing;
    for (const Op& op : record->ops)
      if (!op.done)
        missing += fmt::format("{}{}: rank(s) {} never posted it", missing.empty() ? "" : "; ",
                               op.path, missingRanks(op));
    why = fmt::format(
        "local: {} did not complete within {} ms on rank {} (the timeout, {} ms, and {} ms): {}",
        record->what, limit.count(), rank, record->timeout.count(), kWaitGrace.count(), missing);
  }
  abandon(*hub, lock, *record,
          record->error.empty() ? fmt::format("rank {} gave up on it ({})", rank, why) : why);
  forget(record.get());
  throw BackendError(why);
}

void LocalBackend::State::shutdown() noexcept {
  streams.drain(ctx.timeout);
  // What is still deposited (its tasks skipped after a failure) gives up,
  // so that no peer writes into this rank's memory after the teardown.
  if (hub != nullptr) {
    std::unique_lock lock(hub->mutex);
    const auto records = live;  // abandon() may let go of the lock
    for (const auto& r : records)
      abandon(*hub, lock, *r, fmt::format("rank {} was torn down", rank));
    live.clear();
  }
  streams.reset();
}

LocalBackend::LocalBackend() : state_(std::make_unique<State>()) {}

LocalBackend::~LocalBackend() { state_->shutdown(); }

BackendCaps LocalBackend::caps() {
  BackendCaps c;
  c.name = "local";
  c.devices = {"host"};
  c.types = EnumSet<CommType>::all(kCommTypeNames);
  c.dtypes = EnumSet<DType>::all(kDTypeNames);
  c.reduce_ops = EnumSet<ReduceOp>::all(kReduceOpNames);
  c.rank_spaces = {RankSpace::Threads};
  c.post_order = PostOrder::kStartsInPostOrder;  // one start thread (host_post.h)
  c.auto_priority = kLocalAutoPriority;
  return c;
}

void LocalBackend::setup(const BackendContext& ctx) {
  HIR_INTERNAL_ASSERT(ctx.device != nullptr && ctx.bootstrap != nullptr,
                      "local backend setup without a device or bootstrap");
  HIR_INTERNAL_ASSERT(state_->hub == nullptr, "local backend set up twice");
  Support s = supports(caps(), SupportQuery{ctx.device->kind()});
  HIR_CHECK_AS(BackendError, s.ok, "{}", s.why);
  Bootstrap& boot = *ctx.bootstrap;
  HIR_CHECK_AS(BackendError, boot.rankSpace() == RankSpace::Threads,
               "the local backend connects ranks that are threads of one process "
               "(createThreadBootstraps, createSelfBootstrap); this bootstrap has them as "
               "separate processes");
  const int world = boot.world();
  HIR_INTERNAL_ASSERT(!ctx.teams.empty() && static_cast<int>(ctx.teams[0].size()) == world,
                      "teams[0] must be the world of {} ranks", world);
  State& st = *state_;
  st.ctx = ctx;
  st.rank = boot.rank();
  for (const std::vector<int>& team : ctx.teams) {
    for (int member : team)
      HIR_INTERNAL_ASSERT(member >= 0 && member < world, "a team lists rank {}", member);
    auto me = std::find(team.begin(), team.end(), st.rank);
    st.team_rank.push_back(me == team.end() ? -1 : static_cast<int>(me - team.begin()));
  }
  st.team_seq.assign(ctx.teams.size(), 0);
  st.send_seq.assign(static_cast<std::size_t>(world), 0);
  st.recv_seq.assign(static_cast<std::size_t>(world), 0);
  // Rank 0 makes the hub; the others copy its handle, which it keeps in
  // place until the barrier (the ranks share the address space).
  if (st.rank == 0) st.hub = std::make_shared<Hub>();
  auto address = reinterpret_cast<uintptr_t>(&st.hub);
  boot.broadcast(&address, sizeof(address), 0);
  if (st.rank != 0) st.hub = *reinterpret_cast<const std::shared_ptr<Hub>*>(address);
  boot.barrier();
  device_ = ctx.device;
  st.streams.create(*device_);
}

void LocalBackend::post(std::span<const PostArgs> ops, Stream& current, Event& done) {
  State& st = *state_;
  checkPostable("local", ops, st.streams.created(), st.aborted->load(), st.rank);
  auto record = std::make_shared<PostRecord>();
  record->rank = st.rank;
  record->timeout = st.ctx.timeout;
  record->aborted = st.aborted;
  record->what = describePost(ops);
  record->ops.reserve(ops.size());
  // The sequence numbers resolve() gives follow the order of the starts.
  const auto lock = st.streams.lock();
  for (const PostArgs& a : ops) record->ops.push_back(st.resolve(a));
  record->pending = static_cast<int>(record->ops.size());
  // A start that completes a slot moves the data of all its members.
  std::size_t moved = 0;
  for (const Op& o : record->ops) moved += o.count * dtypeSize(o.dtype) * o.members.size();
  State* state = &st;  // the backend's teardown drains its streams first
  st.streams.enqueue(lock, ops, current, done, [state, record] { state->start(record); },
                     [state, record] { state->complete(record); },
                     moved <= HostPostStreams::kInlineStartBytes);
}

void LocalBackend::abort() {
  State& st = *state_;
  st.aborted->store(true);
  if (st.hub == nullptr) return;
  std::unique_lock lock(st.hub->mutex);
  const auto records = st.live;  // abandon() may let go of the lock
  for (const auto& r : records)
    abandon(*st.hub, lock, *r,
            fmt::format("rank {} gave up on it (its backend was aborted)", st.rank));
  st.hub->cv.notify_all();
}

void registerLocalBackend() {
  registerBackend({LocalBackend::caps(), [] { return std::make_unique<LocalBackend>(); }});
}

}  // namespace hir
