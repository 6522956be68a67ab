#include "runtime/diagnostics.h"

#include <algorithm>
#include <array>

#include "common/check.h"

namespace hir {
namespace {

// Loop contexts of check executions are kept for this many executions per
// check node; later failures are reported by execution number.
constexpr int64_t kMaxCheckContexts = 4096;

}  // namespace

Diagnostics::Diagnostics(const Plan& plan, Device& dev, int rank)
    : plan_(plan), dev_(dev), rank_(rank) {
  if (!plan.checks.empty()) shared_ = dev.allocateCheckRecords(plan.checks.size());
  spare_.resize(plan.checks.size());
  executed_.resize(plan.checks.size());
  current_.assign(plan.checks.size(), nullptr);
  check_executions_.assign(plan.checks.size(), 0);
  captured_executions_.assign(plan.checks.size(), 0);
  check_contexts_.resize(plan.checks.size());
}

Diagnostics::~Diagnostics() {
  if (leak_) return;
  try {
    for (CheckRecord* block : blocks_) dev_.freeCheckRecords(block);
    if (shared_) dev_.freeCheckRecords(shared_);
  } catch (const std::exception&) {
    // Teardown after a device failure: the error that matters was reported.
  }
}

std::string Diagnostics::loopContext(int node, const int64_t* values, int count) const {
  const PlanNode& n = plan_.nodes[node];
  std::string out;
  const std::size_t shown =
      count < 0 ? n.loop_slots.size() : std::min(n.loop_slots.size(), std::size_t(count));
  for (std::size_t i = 0; i < shown; ++i)
    out += fmt::format("{}{}={}", out.empty() ? "" : ", ", plan_.scalar_names[n.loop_slots[i]],
                       values[i]);
  return out;
}

void Diagnostics::loopValues(int node, const int64_t* scalars, std::vector<int64_t>& out) const {
  const std::vector<int>& slots = plan_.nodes[node].loop_slots;
  out.resize(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) out[i] = scalars[slots[i]];
}

std::string Diagnostics::where(int node, const int64_t* scalars) const {
  std::vector<int64_t> values;
  loopValues(node, scalars, values);
  std::string ctx = loopContext(node, values.data());
  return fmt::format("{}: on rank {}{}", plan_.nodes[node].path, rank_,
                     ctx.empty() ? "" : fmt::format(" ({})", ctx));
}

namespace {

// Whether a program stream still has work, asked once per report (record
// its event, query it; a stream that cannot be asked counts as busy), or
// never (`ask` false: recording may block where the host is stuck), which
// answers "unknown".
class StreamProbe {
 public:
  enum Answer { kFinished = 0, kBusy = 1, kUnknown = 2 };
  StreamProbe(Device& dev, Streams& streams, bool ask) : dev_(dev), streams_(streams), ask_(ask) {
    busy_.fill(-1);
  }
  Answer state(int k) {
    if (k < 0 || k >= kMaxStreams) return kFinished;
    if (!ask_) return kUnknown;
    if (busy_[k] < 0) {
      busy_[k] = 0;
      try {
        if (streams_[k].stream && streams_[k].event) {
          dev_.record(*streams_[k].event, *streams_[k].stream);
          busy_[k] = dev_.query(*streams_[k].event) ? 0 : 1;
        }
      } catch (const std::exception&) {
        busy_[k] = 1;
      }
    }
    return busy_[k] == 1 ? kBusy : kFinished;
  }

 private:
  Device& dev_;
  Streams& streams_;
  bool ask_;
  std::array<int, kMaxStreams> busy_;  // -1: not asked yet, 0: finished, 1: busy
};

// "team 0 (the world)", "team 2 (ranks 0, 2, 4)", "team 3 (ranks 0, 1, 2, ... 15: 16 ranks)".
std::string teamText(const Plan& plan, int team) {
  if (team == 0) return "team 0 (the world)";
  const std::vector<int>& ranks = plan.teams[team].ranks;
  constexpr std::size_t kShown = 6;
  std::string list;
  for (std::size_t i = 0; i < ranks.size() && i < kShown; ++i)
    list += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  if (ranks.size() > kShown) list += fmt::format(", ... {}: {} ranks", ranks.back(), ranks.size());
  return fmt::format("team {} (rank{} {})", team, ranks.size() == 1 ? "" : "s", list);
}

}  // namespace

std::string Diagnostics::pendingReport(const std::vector<CommState>& comms, Streams& streams,
                                       bool ask_streams) const {
  std::string out = fmt::format("rank {}: pending communications:", rank_);
  StreamProbe probe(dev_, streams, ask_streams);
  int n = 0;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const CommState& c = comms[i];
    if (c.state != PostState::Posted) continue;
    bool done = false;
    StreamProbe::Answer stream = StreamProbe::kFinished;
    if (c.last_done) {
      try {
        done = dev_.query(*c.last_done);
      } catch (const std::exception&) {
      }
    } else {
      stream = probe.state(c.joined_on);
      done = c.joined_on < 0 || stream == StreamProbe::kFinished;
    }
    if (done) continue;
    const PlanComm& pc = plan_.comms[i];
    std::string ctx = loopContext(pc.node, c.loop_values.data());
    out += fmt::format("\n  '{}' ({}) at {}{}{}", pc.name, toString(pc.type),
                       plan_.nodes[pc.node].path, ctx.empty() ? "" : " (" + ctx + ")",
                       c.last_done                         ? ""
                       : stream == StreamProbe::kUnknown ? fmt::format(", on stream {}", c.joined_on)
                           : fmt::format(", on stream {}, which has not finished", c.joined_on));
    ++n;
  }
  if (n == 0) out += " none (a stream is stuck on other work)";
  return out;
}

std::string Diagnostics::flightReport(const FlightRecorder& recorder, EventPool& events,
                                      Streams& streams, bool ask_streams) const {
  const uint64_t posts = recorder.posts();
  if (posts == 0) return fmt::format("rank {}: flight recorder: no communication posted", rank_);
  const uint64_t shown = std::min<uint64_t>(posts, FlightRecorder::kEntries);
  std::string out = fmt::format(
      "rank {}: flight recorder, the last {} of {} communication{} posted (oldest first):", rank_,
      shown, posts, posts == 1 ? "" : "s");
  StreamProbe probe(dev_, streams, ask_streams);
  const int width = static_cast<int>(fmt::formatted_size("{}", posts));
  recorder.forEach([&](const FlightRecorder::Entry& e) {
    const PlanComm& pc = plan_.comms[e.comm];
    // done / PENDING: its own done event says so; queued: a joined post on
    // a stream that has not finished (it, or later work there, holds the
    // stream); unknown: the device failed, or the stream was not asked.
    const char* state = "unknown";
    if (e.captured) {
      state = "graph";
    } else if (e.event >= 0) {
      try {
        state = dev_.query(events[e.event]) ? "done" : "PENDING";
      } catch (const std::exception&) {
      }
    } else {
      const StreamProbe::Answer a = probe.state(e.joined);
      if (a != StreamProbe::kUnknown) state = a == StreamProbe::kBusy ? "queued" : "done";
    }
    std::string what;
    switch (pc.type) {
      case CommType::Send:
        what = fmt::format("send #{} to rank {}", e.match, e.peer);
        break;
      case CommType::Recv:
        what = fmt::format("recv #{} from rank {}", e.match, e.peer);
        break;
      default:
        what = fmt::format("{} #{} of {}{}", toString(pc.type), e.match, teamText(plan_, pc.team),
                           e.root >= 0 ? fmt::format(", root {}", e.root) : "");
    }
    std::string ctx = loopContext(pc.node, e.loop_values.data(), e.loops);
    if (e.more_loops) ctx += ", ...";
    out += fmt::format("\n  #{:<{}} {:<7} '{}' {} at {}{} on {}, run {}, stream {}{}", e.seq, width,
                       state, pc.name, what, plan_.nodes[pc.node].path,
                       ctx.empty() ? "" : " (" + ctx + ")", plan_.backends[pc.backend].name,
                       e.run, e.stream,
                       e.captured          ? " (captured: every later run replays it)"
                       : e.joined >= 0     ? " (joined: in the stream's order)"
                                           : "");
  });
  return out;
}

int64_t Diagnostics::beginCheck(int check, const int64_t* scalars) {
  const int64_t exec = check_executions_[check]++;
  if (exec < kMaxCheckContexts)
    for (int slot : plan_.nodes[plan_.checks[check].node].loop_slots)
      check_contexts_[check].push_back(scalars[slot]);
  if (capturing_) ++captured_executions_[check];
  if (exec >= kRecordedExecutions || capturing_) {
    current_[check] = shared_ + check;
    return exec;
  }
  // Blocks double (16, 16, 32, ... records): a few allocations per node,
  // most of them in the first runs.
  Spare& spare = spare_[check];
  if (spare.left == 0) {
    const int64_t n = std::min(std::max<int64_t>(16, exec), kRecordedExecutions - exec);
    spare.next = dev_.allocateCheckRecords(static_cast<std::size_t>(n));
    blocks_.push_back(spare.next);
    spare.left = n;
  }
  current_[check] = spare.next++;
  --spare.left;
  executed_[check].push_back(current_[check]);
  return exec;
}

void Diagnostics::setCapturing(bool on) {
  if (on) std::fill(captured_executions_.begin(), captured_executions_.end(), 0);
  capturing_ = on;
}

void Diagnostics::replayed() {
  for (std::size_t i = 0; i < check_executions_.size(); ++i)
    check_executions_[i] += captured_executions_[i];
}

RunReport Diagnostics::report() const {
  RunReport r;
  for (std::size_t i = 0; i < plan_.checks.size(); ++i) {
    const std::vector<CheckRecord*>& recs = executed_[i];
    const CheckRecord& shared = shared_[i];
    r.checks_run += static_cast<uint64_t>(check_executions_[i]);
    CheckFailure f;
    const CheckRecord* first = nullptr;  // the first failing execution's record
    for (const CheckRecord* rec : recs) {
      r.elements_checked += rec->checked;
      f.elements_min = rec == recs.front() ? rec->checked : std::min(f.elements_min, rec->checked);
      f.elements_max = std::max(f.elements_max, rec->checked);
      if (rec->mismatches == 0) continue;
      f.wrong_min = f.failed_executions == 0 ? rec->mismatches
                                             : std::min(f.wrong_min, rec->mismatches);
      f.wrong_max = std::max(f.wrong_max, rec->mismatches);
      ++f.failed_executions;
      f.mismatches += rec->mismatches;
      if (!first) first = rec;
    }
    r.elements_checked += shared.checked;
    if (shared.mismatches > 0) {
      f.exact = false;
      f.replayed = captured_executions_[i] > 0;
      ++f.failed_executions;
      f.mismatches += shared.mismatches;
      if (!first) first = &shared;
    }
    r.checks_failed += f.failed_executions;
    r.wrong_elements += f.mismatches;
    if (!first) continue;
    const PlanNode& node = plan_.nodes[plan_.checks[i].node];
    f.rank = rank_;
    f.path = node.path;
    f.tensor = plan_.checks[i].tensor;
    f.executions = static_cast<uint64_t>(check_executions_[i]);
    const int64_t exec = first->first_execution;
    const std::size_t depth = node.loop_slots.size();
    if (exec >= 0 && exec < kMaxCheckContexts && depth > 0 &&
        (exec + 1) * static_cast<int64_t>(depth) <=
            static_cast<int64_t>(check_contexts_[i].size())) {
      f.context = loopContext(plan_.checks[i].node, &check_contexts_[i][exec * depth]);
    } else if (exec >= 0 && depth > 0) {
      f.context = fmt::format("execution #{}", exec);
    }
    for (int k = 0; k < first->reported && k < CheckRecord::kMaxReported; ++k)
      if (first->integer)
        f.first.push_back({first->index[k], static_cast<double>(first->got[k].i),
                           static_cast<double>(first->expected[k].i), true, first->got[k].i,
                           first->expected[k].i});
      else
        f.first.push_back({first->index[k], first->got[k].f, first->expected[k].f});
    r.failures.push_back(std::move(f));
  }
  return r;
}

namespace {

// "16", or "1 to 16" when executions differ.
std::string span(uint64_t lo, uint64_t hi) {
  return lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi);
}

}  // namespace

std::string RunReport::format() const {
  std::string out;
  for (const CheckFailure& f : failures) {
    out += fmt::format("rank {}: check failed at {}{}: '{}' has ", f.rank, f.path,
                       f.context.empty() ? "" : " (" + f.context + ")", f.tensor);
    if (f.wrong_max == 0) {
      // Only executions counted together failed.
      if (f.replayed)
        out += fmt::format("{} wrong element{} in executions counted together (the captured "
                           "graph's and its replays', and any past the first {}) (of {})",
                           f.mismatches, f.mismatches == 1 ? "" : "s",
                           Diagnostics::kRecordedExecutions, f.executions);
      else
        out += fmt::format("{} wrong element{} in executions past the first {} (of {})",
                           f.mismatches, f.mismatches == 1 ? "" : "s",
                           Diagnostics::kRecordedExecutions, f.executions);
    } else {
      out += fmt::format("{} wrong element{} of {} in {}{} of {} execution{}",
                         span(f.wrong_min, f.wrong_max), f.wrong_max == 1 ? "" : "s",
                         span(f.elements_min, f.elements_max), f.exact ? "" : "at least ",
                         f.failed_executions, f.executions, f.executions == 1 ? "" : "s");
      if (f.failed_executions > 1) out += fmt::format(" ({} in all)", f.mismatches);
    }
    for (const auto& e : f.first)
      if (e.integer)
        out += fmt::format("; [{}] got {} expected {}", e.index, e.got_int, e.expected_int);
      else
        out += fmt::format("; [{}] got {} expected {}", e.index, e.got, e.expected);
    out += '\n';
  }
  return out;
}

}  // namespace hir
