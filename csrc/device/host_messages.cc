// The host device's steps of ipc's message protocol (messages.h): stream
// semaphores (writeValue, waitValue), counted steps, message steps with
// their inline lines and direct delivery, and reduce with a MessageStep.
// Each is a task on the stream's worker; its waits poll, since the writer
// may be another process.
#include "device/host_device.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/elements.h"
#include "common/reductions.h"
#include "device/compute.h"
#include "device/host_device_impl.h"

namespace hir {

using host_device::Clock;
using host_device::deadlineAfter;

// ------------------------------------------------------ stream semaphores

void HostDevice::writeValue(Stream& s, uint32_t* addr, uint32_t value) {
  HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(addr) % alignof(uint32_t) == 0,
                      "writeValue: misaligned address {}", static_cast<void*>(addr));
  impl_->stream(s).worker().enqueue(
      [addr, value] { std::atomic_ref<uint32_t>(*addr).store(value, std::memory_order_release); });
}

namespace {

// The longest sleep between two polls of a semaphore: a peer's write is
// seen at most this late (the worker's sleeps are precise, host_device_impl.h).
constexpr std::chrono::microseconds kLongestPollPause{100};

// Polls `seen()` until `ready(value)`: the writer may be another process,
// so there is nothing to notify. Ends early when `release` (may be null)
// becomes non-zero or the device failed; throws once the device closes or
// its stream wait limit passes. `what` names the call in errors and
// `awaited` what it waits for ("waiting for >= 5").
template <class Seen, class Ready>
void pollUntil(HostDevice::Impl* dev, const void* at, Seen seen, Ready ready, uint32_t* release,
               const char* what, std::string_view awaited) {
  Duration limit = dev->streamWait();
  auto deadline = deadlineAfter(limit);
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    const auto value = seen();
    if (ready(value) || dev->failed.load()) return;
    if (release != nullptr && std::atomic_ref<uint32_t>(*release).load(std::memory_order_acquire))
      return;
    HIR_CHECK_AS(BackendError, !dev->closing.load(), "device destroyed while {}({}) saw {}, {}",
                 what, at, value, awaited);
    HIR_CHECK_AS(BackendError, Clock::now() < deadline,
                 "stream wait timed out after {} ms: {}({}) saw {}, {}", limit.count(), what, at,
                 value, awaited);
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, kLongestPollPause);
  }
}

// Waits until *word >= at_least, compared cyclically, (int32)(value -
// at_least) >= 0, as CUDA's GEQ; the rest as pollUntil.
void pollValue(HostDevice::Impl* dev, uint32_t* word, uint32_t at_least, uint32_t* release,
               const char* what) {
  std::atomic_ref<uint32_t> value(*word);
  // Checked before anything is formatted: the usual case.
  if (static_cast<int32_t>(value.load(std::memory_order_acquire) - at_least) >= 0) return;
  pollUntil(
      dev, word, [&] { return value.load(std::memory_order_acquire); },
      [&](uint32_t seen) { return static_cast<int32_t>(seen - at_least) >= 0; }, release, what,
      fmt::format("waiting for >= {}", at_least));
}

}  // namespace

void HostDevice::waitValue(Stream& s, const uint32_t* addr, uint32_t at_least) {
  HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(addr) % alignof(uint32_t) == 0,
                      "waitValue: misaligned address {}", static_cast<const void*>(addr));
  Impl* dev = impl_.get();
  // atomic_ref needs a non-const object; the task only loads through it.
  auto* word = const_cast<uint32_t*>(addr);
  impl_->stream(s).worker().enqueue(
      [dev, word, at_least] { pollValue(dev, word, at_least, nullptr, "waitValue"); });
}

namespace {

// Inline lines (device.h): writes src's bytes as lines flagged `flag` into
// dst; readLines waits for each line of src to hold `flag` (as pollValue
// waits) and copies its data into dst.
void writeLines(void* dst, const void* src, std::size_t bytes, uint32_t flag) {
  auto* line = static_cast<uint64_t*>(dst);
  const auto* from = static_cast<const char*>(src);
  for (std::size_t w = 0; w * 4 < bytes; ++w) {
    uint32_t word = 0;
    std::memcpy(&word, from + w * 4, std::min<std::size_t>(4, bytes - w * 4));
    std::atomic_ref<uint64_t>(line[w]).store(uint64_t{flag} << 32 | word,
                                             std::memory_order_release);
  }
}

void readLines(HostDevice::Impl* dev, void* dst, const void* src, std::size_t bytes,
               uint32_t flag, uint32_t* release, const char* what) {
  auto* line = static_cast<uint64_t*>(const_cast<void*>(src));
  auto* to = static_cast<char*>(dst);
  for (std::size_t w = 0; w * 4 < bytes; ++w) {
    std::atomic_ref<uint64_t> at(line[w]);
    uint64_t seen = at.load(std::memory_order_acquire);
    // The flag must be equal (an earlier lap's or none is smaller, or 0):
    // the slot's next message waits for this one to be read.
    auto flagged = [flag](uint64_t x) { return static_cast<uint32_t>(x >> 32) == flag; };
    if (!flagged(seen))
      pollUntil(
          dev, &line[w],
          [&] {
            seen = at.load(std::memory_order_acquire);
            return seen;
          },
          flagged, release, what, fmt::format("waiting for a line flagged {}", flag));
    const auto word = static_cast<uint32_t>(seen);
    std::memcpy(to + w * 4, &word, std::min<std::size_t>(4, bytes - w * 4));
  }
}

// One part of a messageStep as a stream task does it (device.h).
void runPart(HostDevice::Impl* dev, const MessageStep& m, const MessageStep::Copy& c, bool push) {
  auto* release = const_cast<uint32_t*>(m.release);
  uint32_t v = c.number;
  if (c.counter != nullptr) v += std::atomic_ref<uint32_t>(*c.counter).load(std::memory_order_relaxed);
  // Direct delivery (device.h): the pull resets its mark and posts; the
  // push goes direct when it sees the post, the pull when it sees the mark.
  const bool asks = asksDirect(c, push);
  uint32_t* mark = asks ? c.mark + (c.slotted ? v & (m.slots - 1) : 0) : nullptr;
  const bool posts = asks && !push;
  if (posts) {
    std::atomic_ref<uint32_t>(*mark).store(directMarkReset(v), std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(*c.posted).store(v, std::memory_order_release);
  }
  bool direct = asks && push &&
                static_cast<int32_t>(
                    std::atomic_ref<uint32_t>(*c.posted).load(std::memory_order_acquire) - v) >= 0;
  if (c.wait != nullptr && !direct)
    pollValue(dev, const_cast<uint32_t*>(c.wait), v - c.wait_back, release, "messageStep");
  if (posts) direct = std::atomic_ref<uint32_t>(*mark).load(std::memory_order_acquire) == v;
  const std::size_t slot = c.slotted ? (v & (m.slots - 1)) * m.stride : 0;
  char* dst = direct && push ? static_cast<char*>(c.direct)
                             : static_cast<char*>(c.dst) + (push ? slot : 0);
  const char* src = static_cast<const char*>(c.src) + (push ? 0 : slot);
  if (c.inline_flags && push)
    writeLines(dst, src, c.bytes, inlineFlag(v));
  else if (c.inline_flags)
    readLines(dev, dst, src, c.bytes, inlineFlag(v), release, "messageStep");
  else if (c.bytes > 0 && !(direct && !push))
    std::memmove(dst, src, c.bytes);
  if (direct && push) std::atomic_ref<uint32_t>(*mark).store(v, std::memory_order_relaxed);
  if (c.signal != nullptr)
    std::atomic_ref<uint32_t>(*c.signal).store(v, std::memory_order_release);
  if (c.counter != nullptr && c.advance != 0)
    std::atomic_ref<uint32_t>(*c.counter)
        .store(v - c.number + c.advance, std::memory_order_relaxed);
}

}  // namespace

// Any size of part can travel in lines.
std::size_t HostDevice::inlineFlagsMax() const { return std::numeric_limits<std::size_t>::max(); }

// Parts in lines or with direct delivery: one stream task (runPart each);
// else Device's default.
void HostDevice::messageStep(Stream& s, const MessageStep& m) {
  bool own = false;
  for (std::size_t k = 0; k < m.push_count; ++k)
    own = own || m.pushes[k].inline_flags || asksDirect(m.pushes[k], true);
  for (std::size_t k = 0; k < m.pull_count; ++k)
    own = own || m.pulls[k].inline_flags || asksDirect(m.pulls[k], false);
  if (!own) return DeviceMessages::messageStep(s, m);
  HIR_INTERNAL_ASSERT(m.push_count <= m.pushes.size() && m.pull_count <= m.pulls.size(),
                      "messageStep: {} pushes and {} pulls", m.push_count, m.pull_count);
  Impl* dev = impl_.get();
  impl_->stream(s).worker().enqueue([dev, m] {
    for (std::size_t k = 0; k < m.push_count; ++k) runPart(dev, m, m.pushes[k], true);
    for (std::size_t k = 0; k < m.pull_count; ++k) runPart(dev, m, m.pulls[k], false);
  });
}

// One stream task: v from the counter when it runs, the wait, the copy (of
// slot v % slots with a ring), the signal, then the counter's advance.
void HostDevice::countedStep(Stream& s, const CountedStep& step) {
  HIR_INTERNAL_ASSERT(step.counter != nullptr, "countedStep without a counter");
  for (const void* a : {static_cast<const void*>(step.counter),
                        static_cast<const void*>(step.wait_addr),
                        static_cast<const void*>(step.release),
                        static_cast<const void*>(step.signal_addr)})
    HIR_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(a) % alignof(uint32_t) == 0,
                        "countedStep: misaligned address {}", a);
  HIR_INTERNAL_ASSERT((step.slots & (step.slots - 1)) == 0,
                      "countedStep: {} slots is not a power of two", step.slots);
  Impl* dev = impl_.get();
  impl_->stream(s).worker().enqueue([dev, step] {
    std::atomic_ref<uint32_t> c(*step.counter);
    const uint32_t base = c.load(std::memory_order_relaxed), v = base + step.offset;
    if (step.wait_addr != nullptr)
      pollValue(dev, const_cast<uint32_t*>(step.wait_addr), v - step.wait_back,
                const_cast<uint32_t*>(step.release), "countedStep");
    const std::size_t slot = step.slots > 0 ? v & (step.slots - 1) : 0;
    if (step.bytes > 0)
      std::memmove(static_cast<char*>(step.dst) + slot * step.dst_stride,
                   static_cast<const char*>(step.src) + slot * step.src_stride, step.bytes);
    if (step.signal_addr != nullptr)
      std::atomic_ref<uint32_t>(*step.signal_addr).store(v, std::memory_order_release);
    if (step.advance != 0) c.store(base + step.advance, std::memory_order_relaxed);
  });
}

// ----------------------------------------------------------------- reduce

namespace {

using ReduceSources = std::array<const void*, kMaxReduceSources>;

// Bytes of each step of a reduce: small enough for the worker's stack and
// its core's cache.
constexpr std::size_t kReduceBlockBytes = 4096;

// dst = srcs[0] op ... op srcs[n-1] one block at a time: the block of every
// source is combined in `scratch` before dst's block is written, so dst may
// be one of the sources.
void hostReduce(void* dst, const ReduceSources& srcs, int n, DType t, ReduceOp op,
                std::size_t count) {
  const std::size_t size = dtypeSize(t);
  const std::size_t block = kReduceBlockBytes / size;
  alignas(16) std::byte scratch[kReduceBlockBytes];
  for (std::size_t first = 0; first < count; first += block) {
    const std::size_t m = std::min(block, count - first);
    const std::size_t offset = first * size;
    std::memcpy(scratch, static_cast<const std::byte*>(srcs[0]) + offset, m * size);
    for (int j = 1; j < n; ++j)
      combineInto(scratch, static_cast<const std::byte*>(srcs[j]) + offset, m, t, op);
    if (op == ReduceOp::Avg) divideBy(scratch, t, m, n);
    std::memcpy(static_cast<std::byte*>(dst) + offset, scratch, m * size);
  }
}

}  // namespace

void HostDevice::reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources,
                        DType t, ReduceOp op, std::size_t count) {
  reduceWith(s, dst, srcs, sources, t, op, count, nullptr);
}

void HostDevice::reduce(Stream& s, void* dst, const void* const* srcs, std::size_t sources,
                        DType t, ReduceOp op, std::size_t count, const MessageStep& sync) {
  reduceWith(s, dst, srcs, sources, t, op, count, &sync);
}

// With sync: the pushes (messageStep), then one task: the numbers from the
// counters when it runs, the waits, the sources in their slots, the
// reduction, the signals, the counters' advance.
void HostDevice::reduceWith(Stream& s, void* dst, const void* const* srcs, std::size_t sources,
                            DType t, ReduceOp op, std::size_t count, const MessageStep* sync) {
  checkReduceArgs(dst, srcs, sources, count, sync, "host");
  if (count == 0 && sync == nullptr) return;
  ReduceSources from{};
  std::copy(srcs, srcs + sources, from.begin());
  const int n = static_cast<int>(sources);
  if (sync == nullptr)
    return impl_->stream(s).worker().enqueue([=] { hostReduce(dst, from, n, t, op, count); });
  Impl* dev = impl_.get();
  // The pushes first, as messageStep does them (tasks of their own, each
  // signaled before this step waits for any source).
  if (sync->push_count > 0) {
    MessageStep pushes = *sync;
    pushes.pull_count = 0;
    messageStep(s, pushes);
  }
  const std::size_t bytes = count * dtypeSize(t);
  impl_->stream(s).worker().enqueue([=, y = *sync]() mutable {
    // Sources in lines are read out into this worker's scratch, one
    // 16-byte-aligned part per source.
    thread_local std::vector<std::byte> lines_out;
    const std::size_t part = (bytes + 15) / 16 * 16;
    std::array<uint32_t, kMaxReduceSources> v{};
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
      v[j] = y.numbers[j];
      if (y.counters[j] != nullptr)
        v[j] += std::atomic_ref<uint32_t>(*y.counters[j]).load(std::memory_order_relaxed);
      if (y.waits[j] != nullptr)
        pollValue(dev, const_cast<uint32_t*>(y.waits[j]), v[j],
                  const_cast<uint32_t*>(y.release), "reduce");
      if (y.slotted[j])
        from[j] = static_cast<const char*>(from[j]) + (v[j] & (y.slots - 1)) * y.stride;
      if (y.inline_flags[j] && bytes > 0) {
        if (lines_out.size() < kMaxReduceSources * part) lines_out.resize(kMaxReduceSources * part);
        std::byte* mine = lines_out.data() + j * part;
        readLines(dev, mine, from[j], bytes, inlineFlag(v[j]), const_cast<uint32_t*>(y.release),
                  "reduce");
        from[j] = mine;
      }
    }
    if (count > 0) hostReduce(dst, from, n, t, op, count);
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
      if (y.signals[j] != nullptr)
        std::atomic_ref<uint32_t>(*y.signals[j]).store(v[j], std::memory_order_release);
      if (y.counters[j] != nullptr && y.advances[j] != 0)
        std::atomic_ref<uint32_t>(*y.counters[j])
            .store(v[j] - y.numbers[j] + y.advances[j], std::memory_order_relaxed);
    }
  });
}

}  // namespace hir
