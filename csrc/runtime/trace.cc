// The Tracer and writeTrace (see trace.h).
#include "runtime/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/check.h"
#include "common/overloaded.h"

namespace hir {
namespace {

using Clock = std::chrono::steady_clock;

// Track ids (Chrome "tid") of one rank: the host thread, the program's
// streams, then each backend's lanes (a lane is a row of spans that do not
// overlap: detached posts of one backend may be in flight together).
constexpr int kHostTid = 0;
constexpr int streamTid(int k) { return 1 + k; }
constexpr int kMaxLanes = 64;
constexpr int backendTid(int b, int lane) { return 100 + b * kMaxLanes + lane; }

int64_t nsOf(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Chrome's ts and dur are microseconds; three decimals keep nanoseconds.
std::string us(double ns) { return fmt::format("{:.3f}", ns / 1000.0); }

void appendEscaped(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  out += '"';
}

std::string jsonString(std::string_view s) {
  std::string out;
  appendEscaped(out, s);
  return out;
}

// What the tracer knows of an instruction: "<name> <path> (<detail>)", and
// whether it gets a span on its stream. The name is instrName()'s; every
// instruction is listed here for its detail, so a new one does not compile
// until it has one.
enum class SpanKind : uint8_t { None, Compute, Communication, Wait };

struct InstrInfo {
  std::string name;
  SpanKind on_stream = SpanKind::None;  // Compute, Wait (stream mode) or None
  int backend = -1;                     // a post's (Post, GroupEnd)
};

InstrInfo describe(const Plan& plan, const Instr& in) {
  auto named = [&](const std::string& detail, SpanKind on_stream = SpanKind::None,
                   int backend = -1) {
    std::string path = in.node >= 0 ? plan.nodes[in.node].path : std::string("?");
    std::string name = fmt::format("{} {}", instrName(in), path);
    // An implicit group's name is already in parentheses.
    if (!detail.empty()) name += detail.front() == '(' ? " " + detail : " (" + detail + ")";
    return InstrInfo{std::move(name), on_stream, backend};
  };
  auto loopIndex = [&](int slot) { return plan.scalar_names[slot]; };
  return std::visit(
      Overloaded{
          [&](const instr::Allocate& a) { return named(plan.allocs[a.alloc].name); },
          [&](const instr::Deallocate& a) { return named(plan.allocs[a.alloc].name); },
          [&](const instr::Post& p) {
            const PlanComm& c = plan.comms[p.comm];
            return named(c.name, SpanKind::None, c.backend);
          },
          [&](const instr::GroupBegin& g) { return named(plan.groups[g.group].name + ", begin"); },
          [&](const instr::GroupEnd& g) {
            const PlanGroup& pg = plan.groups[g.group];
            return named(pg.name, SpanKind::None, pg.backend);
          },
          [&](const instr::Share&) { return named(""); },
          [&](const instr::Wait& w) {
            return named(w.comm >= 0 ? plan.comms[w.comm].name : plan.groups[w.group].name,
                         w.mode == WaitMode::Stream ? SpanKind::Wait : SpanKind::None);
          },
          [&](const instr::LoopInit& l) { return named(loopIndex(l.slot)); },
          [&](const instr::LoopNext& l) { return named(loopIndex(l.slot) + ", next"); },
          [&](const instr::JumpIfZero&) { return named(""); },
          [&](const instr::Jump&) { return named("jump"); },
          [&](const instr::SetStream&) { return named(""); },
          [&](const instr::SyncStream&) { return named(""); },
          [&](const instr::Fill& f) { return named(f.ref.text, SpanKind::Compute); },
          [&](const instr::Copy& c) {
            return named(c.src.text + " -> " + c.dst.text, SpanKind::Compute);
          },
          [&](const instr::Check& c) { return named(c.ref.text, SpanKind::Compute); },
          [&](const instr::Matmul& m) { return named(m.out.text, SpanKind::Compute); },
          [&](const instr::Add& a) { return named(a.out.text, SpanKind::Compute); },
          [&](const instr::Unary& u) { return named(u.out.text, SpanKind::Compute); },
          [&](const instr::Kernel& k) { return named(plan.kernels[k.kernel], SpanKind::Compute); },
      },
      in.op);
}

}  // namespace

struct Tracer::Impl {
  enum class State : uint8_t { Open, Recorded, Resolved, Lost };

  struct HostSpan {
    int pc;
    int run;
    int64_t begin_ns, end_ns;
    std::size_t loops;  // offset of its loop values in loop_values
  };
  struct GpuSpan {
    int pc;
    int run;
    int k;                  // program stream it was enqueued from
    int backend;            // on that backend's track; -1: on stream k's
    std::size_t host;       // index its host span will have
    SpanKind kind;
    State state = State::Open;
    Stream* stream = nullptr;  // where it began (and ends, unless on a backend's track)
    Event* begin = nullptr;    // pooled until resolved
    Event* end = nullptr;
    double begin_ns = 0, end_ns = 0;
  };
  // An arrow from a post's span to a wait: its span on a stream, or (host
  // mode) its host span.
  struct Flow {
    int post;
    bool to_host;
    std::size_t wait;  // index into host or gpu
  };

  Device& dev;
  const Plan& plan;
  const int rank;
  const Duration timeout;
  const std::size_t max_spans;
  std::vector<InstrInfo> info;  // per pc

  int run = -1;
  std::unique_ptr<Event> base;
  double base_ns = 0;

  std::vector<HostSpan> host;
  std::vector<int64_t> loop_values;
  std::vector<GpuSpan> gpu;
  std::size_t first_open = 0;  // gpu spans before it are resolved or lost
  std::vector<Flow> flows;
  std::vector<int> latest_comm, latest_group;  // latest post span, or -1
  std::vector<std::vector<int>> group_comms;
  uint64_t dropped = 0;  // spans and flows over the cap

  std::vector<std::unique_ptr<Event>> events;  // the pool: every event made
  std::vector<Event*> free_events;
  std::vector<std::unique_ptr<Stream>> backend_streams;  // per backend, made on first use

  Impl(Device& d, const Plan& p, int r, Duration t, std::size_t cap)
      : dev(d), plan(p), rank(r), timeout(t), max_spans(cap) {
    HIR_CHECK_AS(UsageError, dev.supports(DeviceFeature::Timing),
                 "tracing needs a device with timing events; {} has none", dev.describe());
    for (const Instr& in : plan.code) info.push_back(describe(plan, in));
    latest_comm.assign(plan.comms.size(), -1);
    latest_group.assign(plan.groups.size(), -1);
    group_comms.resize(plan.groups.size());
    for (std::size_t c = 0; c < plan.comms.size(); ++c)
      if (plan.comms[c].group >= 0)
        group_comms[plan.comms[c].group].push_back(static_cast<int>(c));
    backend_streams.resize(plan.backends.size());
  }

  bool full() const { return host.size() + gpu.size() + flows.size() >= max_spans; }

  Event* acquire() {
    if (free_events.empty()) {
      events.push_back(dev.createTimingEvent());
      return events.back().get();
    }
    Event* e = free_events.back();
    free_events.pop_back();
    return e;
  }
  void release(GpuSpan& s) {
    if (s.begin) free_events.push_back(s.begin);
    if (s.end) free_events.push_back(s.end);
    s.begin = s.end = nullptr;
  }

  double gpuNs(Event& e) { return base_ns + dev.elapsedMs(*base, e) * 1e6; }

  // Times the spans whose events completed and returns their events to the
  // pool; `final`: what is still open was never ended (a failed run).
  void harvest(bool final) {
    for (std::size_t i = first_open; i < gpu.size(); ++i) {
      GpuSpan& s = gpu[i];
      if (s.state == State::Open && final) {
        release(s);
        s.state = State::Lost;
      }
      if (s.state != State::Recorded || !dev.query(*s.end) || !dev.query(*s.begin)) continue;
      s.begin_ns = gpuNs(*s.begin);
      s.end_ns = std::max(s.begin_ns, gpuNs(*s.end));
      release(s);
      s.state = State::Resolved;
    }
    while (first_open < gpu.size() &&
           (gpu[first_open].state == State::Resolved || gpu[first_open].state == State::Lost))
      ++first_open;
  }

  int begin(int pc, int k, Stream& s, SpanKind kind) {
    if (full()) {
      ++dropped;
      return -1;
    }
    GpuSpan span{pc, run, k, -1, host.size(), kind};
    span.stream = &s;
    span.begin = acquire();
    dev.record(*span.begin, s);
    gpu.push_back(span);
    return static_cast<int>(gpu.size()) - 1;
  }

  void end(int span, Stream& s) {
    GpuSpan& g = gpu[span];
    g.end = acquire();
    dev.record(*g.end, s);
    g.state = State::Recorded;
  }

  // The latest post span of what the Wait at `pc` waits on, or -1.
  int latestFor(int pc) const {
    const auto& w = std::get<instr::Wait>(plan.code[pc].op);
    return w.comm >= 0 ? latest_comm[w.comm] : latest_group[w.group];
  }

  void addFlow(int post, bool to_host, std::size_t wait) {
    if (full()) {
      ++dropped;
      return;
    }
    flows.push_back(Flow{post, to_host, wait});
  }

  // The latest post of what `pc` (Post or GroupEnd) posts is `span`.
  void setLatest(int pc, int span) {
    std::visit(Overloaded{
                   [&](const instr::Post& p) { latest_comm[p.comm] = span; },
                   [&](const instr::GroupEnd& g) {
                     latest_group[g.group] = span;
                     for (int c : group_comms[g.group]) latest_comm[c] = span;
                   },
                   [](const auto&) {},
               },
               plan.code[pc].op);
  }

  Stream& backendStream(int b) {
    if (!backend_streams[b]) backend_streams[b] = dev.createStream();
    return *backend_streams[b];
  }

  std::string format();
};

Tracer::Tracer(Device& dev, const Plan& plan, int rank, Duration timeout, std::size_t max_spans)
    : impl_(std::make_unique<Impl>(dev, plan, rank, timeout, max_spans)) {
  for (const InstrInfo& i : impl_->info) on_stream_.push_back(i.on_stream != SpanKind::None);
}

Tracer::~Tracer() = default;

void Tracer::startRun(Stream& s0) {
  Impl& t = *impl_;
  ++t.run;
  if (!t.base) {
    // GPU time of an event e = host time of the base + elapsedMs(base, e).
    // The base's host time is not observable: it lies between the host's
    // clock before its record() and after the wait for it returns. Of a few
    // such record-and-wait intervals on s0 (the first also waits for work
    // already there), the tightest is kept and its middle taken: off by at
    // most half of it (microseconds), by which every GPU span is shifted.
    constexpr int kSamples = 4;
    Clock::duration best{};
    for (int i = 0; i < kSamples; ++i) {
      std::unique_ptr<Event> e = t.dev.createTimingEvent();
      const Clock::time_point before = Clock::now();
      t.dev.record(*e, s0);
      t.dev.synchronize(*e, t.timeout);
      const Clock::time_point after = Clock::now();
      if (t.base && after - before >= best) continue;
      best = after - before;
      t.base = std::move(e);
      t.base_ns = static_cast<double>(nsOf(before)) +
                  static_cast<double>(nsOf(after) - nsOf(before)) / 2;
    }
    return;
  }
  t.harvest(true);
}

void Tracer::host(int pc, Clock::time_point begin, Clock::time_point end,
                  const int64_t* scalars) {
  Impl& t = *impl_;
  if (t.full()) {
    ++t.dropped;
    return;
  }
  const std::size_t loops = t.loop_values.size();
  const Instr& in = t.plan.code[pc];
  if (in.node >= 0)
    for (int slot : t.plan.nodes[in.node].loop_slots) t.loop_values.push_back(scalars[slot]);
  t.host.push_back(Impl::HostSpan{pc, t.run, nsOf(begin), nsOf(end), loops});
  if (const auto* w = std::get_if<instr::Wait>(&in.op); w && w->mode == WaitMode::Host)
    if (const int post = t.latestFor(pc); post >= 0) t.addFlow(post, true, t.host.size() - 1);
}

int Tracer::gpuBegin(int pc, int k, Stream& s) {
  Impl& t = *impl_;
  const SpanKind kind = t.info[pc].on_stream;
  const int post = kind == SpanKind::Wait ? t.latestFor(pc) : -1;
  if (kind == SpanKind::Wait && post < 0) return -1;  // skipped here, or never posted
  const int span = t.begin(pc, k, s, kind);
  if (post >= 0 && span >= 0) t.addFlow(post, false, static_cast<std::size_t>(span));
  return span;
}

void Tracer::gpuEnd(int span, Stream& s) {
  if (span >= 0) impl_->end(span, s);
}

int Tracer::postBegin(int pc, int k, Stream& current) {
  const int span = impl_->begin(pc, k, current, SpanKind::Communication);
  impl_->setLatest(pc, span);
  return span;
}

void Tracer::postEnd(int span, Event* done) {
  if (span < 0) return;
  Impl& t = *impl_;
  Impl::GpuSpan& g = t.gpu[span];
  if (!done) {  // ran on the current stream
    t.end(span, *g.stream);
    return;
  }
  // A stream of our own waits for the backend's completion and stamps it:
  // the program's streams and the host do not wait for it. Posts of one
  // backend complete in order on its stream (nccl, mpi), so one stream per
  // backend does not delay a stamp (ipc's streams per peer may complete
  // out of post order: a stamp may then come when an earlier post is done).
  g.backend = t.info[g.pc].backend;
  Stream& s = t.backendStream(g.backend);
  t.dev.wait(s, *done);
  t.end(span, s);
}

std::string Tracer::events() {
  Impl& t = *impl_;
  // The stamps of detached posts are taken by our streams, maybe just after
  // the evaluator saw the completions: let them land (bounded by the
  // timeout: a post that never completed leaves its span out).
  const auto start = Clock::now();
  for (auto& s : t.backend_streams) {
    if (!s) continue;
    try {
      t.dev.synchronize(*s, remainingOf(t.timeout, start));
    } catch (const TimeoutError&) {
    }
  }
  if (t.base) t.harvest(false);
  return t.format();
}

std::string Tracer::Impl::format() {
  std::string out;
  auto add = [&](std::string_view ev) {
    if (!out.empty()) out += ",\n";
    out += ev;
  };
  const std::string pid = std::to_string(rank);
  auto meta = [&](int tid, std::string_view what, std::string_view arg, const std::string& value) {
    add(fmt::format(R"({{"ph": "M", "pid": {}, "tid": {}, "name": "{}", "args": {{"{}": {}}}}})",
                    pid, tid, what, arg, value));
  };
  meta(kHostTid, "process_name", "name", jsonString(fmt::format("rank {}", rank)));
  meta(kHostTid, "process_sort_index", "sort_index", pid);

  // Tracks: stream spans on their stream's; a backend's in lanes, since the
  // spans of one track must not overlap.
  std::vector<int> tid(gpu.size(), -1);
  std::vector<int> order;
  uint64_t incomplete = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (gpu[i].state != State::Resolved) {
      ++incomplete;
      continue;
    }
    if (gpu[i].backend < 0)
      tid[i] = streamTid(gpu[i].k);
    else
      order.push_back(static_cast<int>(i));
  }
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return gpu[a].begin_ns < gpu[b].begin_ns; });
  std::vector<std::vector<double>> lane_ends(plan.backends.size());
  for (int i : order) {
    auto& ends = lane_ends[gpu[i].backend];
    std::size_t lane = 0;
    while (lane < ends.size() && ends[lane] > gpu[i].begin_ns) ++lane;
    if (lane == ends.size() && ends.size() < kMaxLanes) ends.push_back(0);
    lane = std::min(lane, ends.size() - 1);
    ends[lane] = std::max(ends[lane], gpu[i].end_ns);
    tid[i] = backendTid(gpu[i].backend, static_cast<int>(lane));
  }

  // Track names, in track order.
  std::vector<std::pair<int, std::string>> tracks = {{kHostTid, "host"}};
  std::vector<bool> stream_used(kMaxStreams);
  for (std::size_t i = 0; i < gpu.size(); ++i)
    if (tid[i] >= 0 && gpu[i].backend < 0) stream_used[gpu[i].k] = true;
  for (int k = 0; k < kMaxStreams; ++k)
    if (stream_used[k]) tracks.emplace_back(streamTid(k), fmt::format("stream {}", k));
  for (std::size_t b = 0; b < lane_ends.size(); ++b)
    for (std::size_t l = 0; l < lane_ends[b].size(); ++l)
      tracks.emplace_back(backendTid(static_cast<int>(b), static_cast<int>(l)),
                          l == 0 ? plan.backends[b].name
                                 : fmt::format("{} #{}", plan.backends[b].name, l + 1));
  for (const auto& [id, name] : tracks) {
    meta(id, "thread_name", "name", jsonString(name));
    meta(id, "thread_sort_index", "sort_index", std::to_string(id));
  }

  if (dropped > 0 || incomplete > 0)
    meta(kHostTid, "process_labels", "labels",
         jsonString(fmt::format("trace: {} spans or flows dropped over the cap of {}; {} GPU spans "
                            "incomplete",
                            dropped, max_spans, incomplete)));

  // Args: the run and the loop indices of a host span.
  auto args = [&](std::size_t h, int pc, int run, const std::string& extra) {
    std::string a = fmt::format(R"("run": {})", run);
    const int node = plan.code[pc].node;
    if (h < host.size() && host[h].pc == pc && node >= 0) {
      const auto& slots = plan.nodes[node].loop_slots;
      for (std::size_t j = 0; j < slots.size(); ++j)
        a += fmt::format(", {}: {}", jsonString(plan.scalar_names[slots[j]]),
                         loop_values[host[h].loops + j]);
    }
    return "{" + a + extra + "}";
  };
  auto span = [&](int tid, double begin_ns, double end_ns, int pc, std::string_view cat,
                  const std::string& args) {
    add(fmt::format(R"({{"ph": "X", "pid": {}, "tid": {}, "ts": {}, "dur": {}, "name": {}, )"
                    R"("cat": "{}", "args": {}}})",
                    pid, tid, us(begin_ns), us(end_ns - begin_ns), jsonString(info[pc].name), cat,
                    args));
  };
  for (std::size_t h = 0; h < host.size(); ++h) {
    const HostSpan& s = host[h];
    span(kHostTid, static_cast<double>(s.begin_ns), static_cast<double>(s.end_ns), s.pc, "host",
         args(h, s.pc, s.run, ""));
  }
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const GpuSpan& s = gpu[i];
    if (tid[i] < 0) continue;
    const std::string extra = s.backend >= 0 ? fmt::format(R"(, "stream": {})", s.k) : "";
    const std::string_view cat = s.kind == SpanKind::Compute ? "compute"
                                 : s.kind == SpanKind::Wait  ? "wait"
                                                             : "communication";
    span(tid[i], s.begin_ns, s.end_ns, s.pc, cat, args(s.host, s.pc, s.run, extra));
  }

  // Flows. A flow event binds to the slice around its timestamp, and
  // viewers drop an arrow that goes back in time: both ends sit just
  // inside the ends of their slices (a wait ends after the post's
  // completion), the start no later than the finish.
  auto inside_end = [](double b, double e) { return e - std::min(100.0, (e - b) / 2); };
  for (std::size_t f = 0; f < flows.size(); ++f) {
    const Flow& fl = flows[f];
    if (tid[fl.post] < 0) continue;
    const GpuSpan& p = gpu[fl.post];
    double wait_ts;
    int wait_tid;
    if (fl.to_host) {
      const HostSpan& h = host[fl.wait];
      wait_ts = inside_end(static_cast<double>(h.begin_ns), static_cast<double>(h.end_ns));
      wait_tid = kHostTid;
    } else {
      if (tid[fl.wait] < 0) continue;
      wait_ts = inside_end(gpu[fl.wait].begin_ns, gpu[fl.wait].end_ns);
      wait_tid = tid[fl.wait];
    }
    const double post_ts =
        std::max(p.begin_ns + std::min(1.0, (p.end_ns - p.begin_ns) / 2),
                 std::min(inside_end(p.begin_ns, p.end_ns), wait_ts));
    const uint64_t id = (static_cast<uint64_t>(rank) << 32) | f;
    add(fmt::format(R"({{"ph": "s", "pid": {}, "tid": {}, "ts": {}, "id": {}, )"
                    R"("name": "wait", "cat": "flow"}})",
                    pid, tid[fl.post], us(post_ts), id));
    add(fmt::format(R"({{"ph": "f", "bp": "e", "pid": {}, "tid": {}, "ts": {}, "id": {}, )"
                    R"("name": "wait", "cat": "flow"}})",
                    pid, wait_tid, us(wait_ts), id));
  }
  return out;
}

// ------------------------------------------------------------- writeTrace
namespace {

// Rank 0's error message, made every rank's.
std::string shareError(Bootstrap& boot, std::string message) {
  uint64_t n = message.size();
  boot.broadcast(&n, sizeof n, 0);
  message.resize(n);
  if (n > 0) boot.broadcast(message.data(), n, 0);
  return message;
}

}  // namespace

void writeTrace(Bootstrap& boot, const std::string& events, const std::string& path) {
  const int rank = boot.rank(), world = boot.world();
  std::FILE* file = nullptr;
  std::string error;
  if (rank == 0) {
    file = std::fopen(path.c_str(), "wb");
    if (!file) error = std::strerror(errno);
  }
  error = shareError(boot, error);
  HIR_CHECK_AS(UsageError, error.empty(), "cannot write the trace to '{}': {}", path, error);

  // Rank 0 writes as it receives: one rank's events at a time, in pieces,
  // so no rank holds more than its own events and one piece.
  std::vector<uint64_t> sizes(world);
  const uint64_t mine = events.size();
  boot.allgather(&mine, sizes.data(), sizeof mine);
  bool first = true;
  int write_errno = 0;
  auto put = [&](const char* p, std::size_t n) {
    if (rank == 0 && write_errno == 0 && n > 0 && std::fwrite(p, 1, n, file) != n)
      write_errno = errno ? errno : EIO;
  };
  auto puts = [&](std::string_view s) { put(s.data(), s.size()); };
  puts("{\"traceEvents\": [\n");
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  std::vector<char> piece;
  for (int r = 0; r < world; ++r) {
    if (sizes[r] == 0) continue;
    if (!first) puts(",\n");
    first = false;
    if (r == 0) {
      if (rank == 0) puts(events);
      continue;
    }
    for (uint64_t at = 0; at < sizes[r]; at += kPiece) {
      const uint64_t n = std::min(kPiece, sizes[r] - at);
      piece.resize(n);
      if (rank == r) std::memcpy(piece.data(), events.data() + at, n);
      boot.broadcast(piece.data(), n, r);
      put(piece.data(), n);
    }
  }
  puts("\n],\n\"displayTimeUnit\": \"ns\"}\n");
  if (rank == 0) {
    if (std::fclose(file) != 0 && write_errno == 0) write_errno = errno ? errno : EIO;
    if (write_errno != 0) error = std::strerror(write_errno);
  }
  error = shareError(boot, error);
  HIR_CHECK_AS(RuntimeError, error.empty(), "writing the trace to '{}' failed: {}", path, error);
}

}  // namespace hir
