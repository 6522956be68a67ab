// The host device (see host_device.h): its streams and events, which keep
// CUDA's semantics together, its data kernels and compute (whose kernels
// are in compute.cc). Its memory and its sharing with other processes are
// in host_device_memory.cc, the steps of ipc's message protocol in
// host_messages.cc, and what these files share in host_device_impl.h.
#include "device/host_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/elements.h"
#include "common/check.h"
#include "common/log.h"
#include "device/compute.h"
#include "device/host_device_impl.h"

namespace hir {

using host_device::Clock;
using host_device::deadlineAfter;
using host_device::HostStream;
using host_device::t_current_worker;
using host_device::Worker;

thread_local const Worker* host_device::t_current_worker = nullptr;

namespace {

// A completion token: one record() of an event. `stamp` is written before
// `done` is set, and read only after it is seen set.
struct Completion {
  uint64_t stream_id = 0;  // where it was recorded, for messages
  std::atomic<bool> done{false};
  Clock::time_point stamp{};  // when it completed (timing events only)
};

class HostEvent final : public Event {
 public:
  HostEvent(HostDevice::Impl& dev, uint64_t id, bool timing) : dev(dev), id(id), timing(timing) {}
  HostDevice::Impl& dev;
  const uint64_t id;
  const bool timing;  // createTimingEvent(): completions carry their time
  std::shared_ptr<Completion> latest;  // guarded by dev.mu; null: never recorded
};

}  // namespace

HostStream& HostDevice::Impl::stream(Stream& s) {
  auto* hs = dynamic_cast<HostStream*>(&s);
  HIR_CHECK_AS(UsageError, hs != nullptr && &hs->device() == this,
               "host device: the stream was not created by this device");
  return *hs;
}

HostDevice::Impl::~Impl() {
  // Streams the user created must be gone by now; the default stream drains
  // here, its waits giving up (with a sticky error) instead of blocking.
  shutdown();
  default_stream.reset();
  for (auto& [p, a] : allocations) {
    munmap(p, a.size);
    close(a.fd);
  }
  for (auto& [p, size] : imported) munmap(p, size);
  for (CheckRecord* r : check_records) delete[] r;
}

// Like cudaFree: memory is released only after the work enqueued so far has
// run. A stream task cannot wait for its own stream, so tasks skip this.
void HostDevice::Impl::waitForAllStreams(std::string_view why) {
  if (t_current_worker != nullptr) return;
  std::lock_guard streams_lock(streams_mu);
  // A blocked task gives up after the stream-wait timeout, so twice that
  // bounds this wait; past it something is wrong and we refuse to free.
  Duration wait = streamWait();
  Duration limit = wait >= Duration::max() / 4 ? Duration::max() : wait * 2 + Duration(1000);
  auto deadline = deadlineAfter(limit);
  for (auto& [key, hs] : streams) {
    if (!hs->owning()) continue;
    Worker& w = hs->worker();
    uint64_t target = w.enqueued();
    bool ok = waitUntil(deadline, [&] { return w.done() >= target; });
    HIR_CHECK_AS(TimeoutError, ok,
                 "host wait timed out after {} ms waiting for stream {} to finish before {}",
                 limit.count(), w.id(), why);
  }
}

// -------------------------------------------------------------- HostDevice

HostDevice::HostDevice(Duration stream_wait_timeout)
    : DeviceMessages(static_cast<Device&>(*this)),
      impl_(std::make_unique<Impl>(stream_wait_timeout)) {
  uint64_t id = impl_->next_stream_id.fetch_add(1);
  auto worker = std::make_unique<Worker>(*impl_, id);
  Worker* w = worker.get();
  impl_->default_stream = std::make_unique<HostStream>(*impl_, std::move(worker), w);
}

HostDevice::~HostDevice() = default;

void HostDevice::setStreamWaitTimeout(Duration timeout) {
  impl_->stream_wait_ms.store(timeout.count());
}
Duration HostDevice::streamWaitTimeout() const { return impl_->streamWait(); }

void HostDevice::setRunAheadWindow(std::size_t tasks) {
  impl_->window.store(std::max<std::size_t>(tasks, 1));
}
std::size_t HostDevice::runAheadWindow() const { return impl_->window.load(); }

void HostDevice::cancel(std::string_view why) {
  HIR_LOG_INFO(Subsys::Host, "queued work cancelled: {}", why);
  impl_->fail(fmt::format("cancelled: {}", why));
}

std::string HostDevice::describe() const { return fmt::format("host (pid {})", getpid()); }

bool HostDevice::supports(DeviceFeature f) const {
  switch (f) {
    case DeviceFeature::Ipc: return true;
    case DeviceFeature::StreamSemaphore: return true;
    case DeviceFeature::Compute: return true;
    case DeviceFeature::Timing: return true;
    case DeviceFeature::Graphs: return false;  // no graph of host tasks (yet)
    case DeviceFeature::Reduce: return true;
  }
  return false;
}

// ---------------------------------------------------------------- streams

Stream& HostDevice::defaultStream() { return *impl_->default_stream; }

std::unique_ptr<Stream> HostDevice::createStream() {
  uint64_t id = impl_->next_stream_id.fetch_add(1);
  HIR_LOG_DEBUG(Subsys::Host, "stream {} created (a worker thread)", id);
  auto worker = std::make_unique<Worker>(*impl_, id);
  Worker* w = worker.get();
  return std::make_unique<HostStream>(*impl_, std::move(worker), w);
}

std::unique_ptr<Stream> HostDevice::wrapStream(void* native) {
  if (native == nullptr)
    return std::make_unique<HostStream>(*impl_, nullptr, &impl_->default_stream->worker());
  // Only pointers we handed out are accepted: look them up before any cast.
  Worker* w = nullptr;
  {
    std::lock_guard lock(impl_->streams_mu);
    auto it = impl_->streams.find(static_cast<const Stream*>(native));
    HIR_CHECK_AS(UsageError, it != impl_->streams.end(),
                 "host device: wrapStream({}) expects nullptr or a Stream* of this device",
                 native);
    w = &it->second->worker();
  }
  return std::make_unique<HostStream>(*impl_, nullptr, w);
}

// ----------------------------------------------------------------- events

namespace {
HostEvent& hostEvent(HostDevice::Impl& dev, Event& e) {
  auto* he = dynamic_cast<HostEvent*>(&e);
  HIR_CHECK_AS(UsageError, he != nullptr && &he->dev == &dev,
               "host device: the event was not created by this device");
  return *he;
}
}  // namespace

std::unique_ptr<Event> HostDevice::createEvent() {
  return std::make_unique<HostEvent>(*impl_, impl_->next_event_id.fetch_add(1), false);
}

std::unique_ptr<Event> HostDevice::createTimingEvent() {
  return std::make_unique<HostEvent>(*impl_, impl_->next_event_id.fetch_add(1), true);
}

void HostDevice::record(Event& e, Stream& s) {
  HostEvent& ev = hostEvent(*impl_, e);
  Worker& w = impl_->stream(s).worker();
  auto token = std::make_shared<Completion>();
  token->stream_id = w.id();
  Impl* dev = impl_.get();
  // On a stream with nothing pending (every task it was given is done, so
  // none runs now), the event completes at once, as CUDA's does right
  // after the stream drains, and nothing waits for the worker to get to it.
  // Another thread enqueueing on the same stream meanwhile is unordered
  // with this call anyway. After a failure the record is a skipped task.
  if (t_current_worker != &w && !dev->failed.load() && w.done() == w.enqueued()) {
    if (ev.timing) token->stamp = Clock::now();
    token->done.store(true);
  } else {
    // Enqueued first: an enqueue that times out (a full run-ahead window)
    // leaves the event's capture as it was.
    w.enqueue([dev, token, timing = ev.timing] {
      if (timing) token->stamp = Clock::now();
      token->done.store(true);
      dev->wake();
    });
  }
  std::lock_guard lock(impl_->mu);
  ev.latest = token;
}

void HostDevice::wait(Stream& s, Event& e) {
  HostEvent& ev = hostEvent(*impl_, e);
  Worker& w = impl_->stream(s).worker();
  std::shared_ptr<Completion> token;
  {
    std::lock_guard lock(impl_->mu);
    token = ev.latest;  // the capture at call time
    if (!token || token->done.load()) return;  // nothing to wait for
  }
  Impl* dev = impl_.get();
  uint64_t event_id = ev.id;
  w.enqueue([dev, token, event_id] {
    Duration limit = dev->streamWait();
    dev->waitUntil(deadlineAfter(limit), [&] {
      return token->done.load() || dev->failed.load() || dev->closing.load();
    });
    if (token->done.load() || dev->failed.load()) return;  // after a failure: skipped anyway
    HIR_CHECK_AS(BackendError, !dev->closing.load(),
                 "device destroyed while a stream waited for event #{}", event_id);
    throw BackendError(fmt::format(
        "stream wait timed out after {} ms waiting for event #{} (recorded on stream {})",
        limit.count(), event_id, token->stream_id));
  });
}

bool HostDevice::query(Event& e) {
  HostEvent& ev = hostEvent(*impl_, e);
  std::lock_guard lock(impl_->mu);
  if (impl_->failed.load()) impl_->throwSticky();
  return !ev.latest || ev.latest->done.load();
}

void HostDevice::synchronize(Event& e, Duration timeout) {
  HostEvent& ev = hostEvent(*impl_, e);
  std::shared_ptr<Completion> token;
  {
    std::lock_guard lock(impl_->mu);
    token = ev.latest;
  }
  bool ok = impl_->waitUntil(deadlineAfter(timeout), [&] {
    return !token || token->done.load() || impl_->failed.load();
  });
  std::lock_guard lock(impl_->mu);
  if (impl_->failed.load()) impl_->throwSticky();
  HIR_CHECK_AS(TimeoutError, ok,
               "host wait timed out after {} ms waiting for event #{} (recorded on stream {})",
               timeout.count(), ev.id, token ? token->stream_id : 0);
}

// Like cudaEventElapsedTime: both events must be timing events whose last
// record() has completed (hostir asks only then).
double HostDevice::elapsedMs(Event& from, Event& to) {
  HostEvent& a = hostEvent(*impl_, from);
  HostEvent& b = hostEvent(*impl_, to);
  std::lock_guard lock(impl_->mu);
  if (impl_->failed.load()) impl_->throwSticky();
  for (const HostEvent* ev : {&a, &b}) {
    HIR_INTERNAL_ASSERT(ev->timing, "elapsedMs: event #{} is not a timing event", ev->id);
    HIR_INTERNAL_ASSERT(ev->latest && ev->latest->done.load(), "elapsedMs: event #{} {}", ev->id,
                        ev->latest ? "has not completed" : "was never recorded");
  }
  return std::chrono::duration<double, std::milli>(b.latest->stamp - a.latest->stamp).count();
}

void HostDevice::synchronize(Stream& s, Duration timeout) {
  Worker& w = impl_->stream(s).worker();
  uint64_t target = w.enqueued();
  bool ok = impl_->waitUntil(deadlineAfter(timeout), [&] {
    return w.done() >= target || impl_->failed.load();
  });
  std::lock_guard lock(impl_->mu);
  if (impl_->failed.load()) impl_->throwSticky();
  HIR_CHECK_AS(TimeoutError, ok,
               "host wait timed out after {} ms waiting for stream {} ({} of {} tasks done)",
               timeout.count(), w.id(), w.done(), target);
}

// ----------------------------------------------------------- data kernels

void HostDevice::fill(Stream& s, void* dst, DType t, std::size_t count, int64_t value,
                      int64_t step) {
  impl_->stream(s).worker().enqueue(
      [=] { fillPattern(dst, t, count, value, step); });
}

void HostDevice::copy(Stream& s, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  impl_->stream(s).worker().enqueue([=] { std::memmove(dst, src, bytes); });
}

namespace {

// What one execution of a check found, before it is merged into the record.
struct CheckFindings {
  uint64_t mismatches = 0;
  int reported = 0;
  bool integer = false;  // got/expected hold CheckValue::i
  int64_t index[CheckRecord::kMaxReported] = {};
  CheckValue got[CheckRecord::kMaxReported] = {};
  CheckValue expected[CheckRecord::kMaxReported] = {};
};

// Checks element k of `src` against expected(k) (a PatternElement) for k
// in [0, count). `integer`: compare and report as int64.
template <class Expected>
CheckFindings runCheck(const void* src, DType t, std::size_t count, bool integer,
                       const Tolerance& tolerance, Expected expected) {
  CheckFindings f;
  f.integer = integer;
  for (std::size_t k = 0; k < count; ++k) {
    const PatternElement e = expected(k);
    if (elementMatches(src, t, k, e, tolerance, integer)) continue;
    if (f.reported < CheckRecord::kMaxReported) {
      f.index[f.reported] = static_cast<int64_t>(k);
      if (f.integer) {
        f.got[f.reported].i = loadAsInt(src, t, k);
        f.expected[f.reported].i = e.i;
      } else {
        f.got[f.reported].f = loadAsDouble(src, t, k);
        f.expected[f.reported].f = e.f;
      }
      ++f.reported;
    }
    ++f.mismatches;
  }
  return f;
}

// Several streams may check into one record concurrently: counters are
// atomic, and the first failing execution claims the record with a CAS.
// Report slots are reserved one at a time so they never exceed kMaxReported.
void mergeCheck(CheckRecord* out, std::size_t count, const CheckFindings& f,
                int64_t execution) {
  std::atomic_ref<uint64_t>(out->checked).fetch_add(count);
  if (f.mismatches == 0) return;
  std::atomic_ref<uint64_t>(out->mismatches).fetch_add(f.mismatches);
  int64_t first = -1;
  std::atomic_ref<int64_t> first_ref(out->first_execution);
  if (!first_ref.compare_exchange_strong(first, execution) && first != execution) return;
  std::atomic_ref<int32_t>(out->integer).store(f.integer ? 1 : 0);
  std::atomic_ref<int32_t> reported(out->reported);
  for (int j = 0; j < f.reported; ++j) {
    int32_t slot = reported.load();
    do {
      if (slot >= CheckRecord::kMaxReported) return;
    } while (!reported.compare_exchange_weak(slot, slot + 1));
    out->index[slot] = f.index[j];
    out->got[slot] = f.got[j];
    out->expected[slot] = f.expected[j];
  }
}

}  // namespace

void HostDevice::check(Stream& s, const void* src, DType t, std::size_t count, int64_t value,
                       int64_t step, Tolerance tolerance, CheckRecord* out, int64_t execution) {
  HIR_INTERNAL_ASSERT(out != nullptr, "check without a record");
  impl_->stream(s).worker().enqueue([=] {
    auto pattern = [&](std::size_t k) {
      return patternElement(t, value, step, static_cast<int64_t>(k));
    };
    mergeCheck(out, count, runCheck(src, t, count, !isFloating(t), tolerance, pattern),
               execution);
  });
}

void HostDevice::checkAgainst(Stream& s, const void* got, DType t, const void* expected, DType et,
                              std::size_t count, Tolerance tolerance, CheckRecord* out,
                              int64_t execution) {
  HIR_INTERNAL_ASSERT(out != nullptr, "check without a record");
  impl_->stream(s).worker().enqueue([=] {
    const bool integer = !isFloating(t) && !isFloating(et);
    auto element = [&](std::size_t k) {
      return integer ? PatternElement{loadAsInt(expected, et, k), 0.0}
                     : PatternElement{0, loadAsDouble(expected, et, k)};
    };
    mergeCheck(out, count, runCheck(got, t, count, integer, tolerance, element), execution);
  });
}

void HostDevice::fillRandom(Stream& s, void* dst, DType t, std::size_t count,
                            const RandomPattern& pattern) {
  checkRandomPattern(t, pattern, "host");
  if (count == 0) return;
  impl_->stream(s).worker().enqueue([=] {
    for (std::size_t k = 0; k < count; ++k) storeElement(dst, t, k, randomElement(t, pattern, k));
  });
}

void HostDevice::unary(Stream& s, const UnaryArgs& args) {
  if (args.count == 0) return;
  HIR_INTERNAL_ASSERT(args.in != nullptr && args.out != nullptr,
                      "host unary of {} elements with a null buffer", args.count);
  impl_->stream(s).worker().enqueue([args] { hostUnary(args); });
}

void HostDevice::launchHostFunc(Stream& s, std::function<void()> fn) {
  HIR_INTERNAL_ASSERT(fn != nullptr, "launchHostFunc with an empty function");
  impl_->stream(s).worker().enqueue(std::move(fn));
}

// ---------------------------------------------------------------- compute

void HostDevice::matmul(Stream& s, const MatmulArgs& args) {
  checkMatmulArgs(args, "host");
  if (args.m == 0 || args.n == 0) return;
  impl_->stream(s).worker().enqueue([args] { hostMatmul(args); });
}

void HostDevice::add(Stream& s, void* out, const void* a, const void* b, DType t,
                     std::size_t count) {
  if (count == 0) return;
  HIR_INTERNAL_ASSERT(out != nullptr && a != nullptr && b != nullptr,
                      "host add of {} elements with a null buffer", count);
  impl_->stream(s).worker().enqueue([=] { hostAdd(out, a, b, t, count); });
}

// --------------------------------------------------------------- registry

void registerHostDevice() {
  registerDevice(DeviceInfo{
      "host",
      [](std::string*) { return true; },
      [](int, const Settings&) -> std::unique_ptr<Device> {
        return std::make_unique<HostDevice>();
      },
  });
}

}  // namespace hir
