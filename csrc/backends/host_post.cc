// The host backends' two-stream post (host_post.h).
#include "backends/host_post.h"

#include <chrono>

#include "common/check.h"

namespace hir {

void HostPostStreams::create(Device& device) {
  device_ = &device;
  start_ = device.createStream();
  completion_ = device.createStream();
  ready_ = device.createEvent();
  started_ = device.createEvent();
}

void HostPostStreams::enqueue(const std::unique_lock<std::mutex>& held, Stream& current,
                              Event& done, std::function<void()> start,
                              std::function<void()> complete) {
  HIR_INTERNAL_ASSERT(held.mutex() == &mutex_ && held.owns_lock(),
                      "a host post enqueued without its streams' lock");
  Device& d = *device_;
  d.record(*ready_, current);
  d.wait(*start_, *ready_);
  d.launchHostFunc(*start_, std::move(start));
  d.record(*started_, *start_);
  d.wait(*completion_, *started_);
  d.launchHostFunc(*completion_, std::move(complete));
  d.record(done, *completion_);
}

void HostPostStreams::drain(Duration timeout) noexcept {
  const auto begin = std::chrono::steady_clock::now();
  for (Stream* s : {start_.get(), completion_.get()}) {
    if (device_ == nullptr || s == nullptr) continue;
    try {
      device_->synchronize(*s, remainingOf(timeout, begin));
    } catch (...) {
      // A failed or timed-out run: the error was reported where it happened.
    }
  }
}

void HostPostStreams::reset() {
  completion_.reset();
  start_.reset();
  started_.reset();
  ready_.reset();
}

}  // namespace hir
