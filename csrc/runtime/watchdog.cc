#include "runtime/watchdog.h"

#include <pthread.h>

namespace hir {

Watchdog::Watchdog(Actions actions) : actions_(std::move(actions)) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (aborter_.joinable()) aborter_.join();
}

void Watchdog::enter(Section s, Duration limit) {
  limit_ms_.store(limit.count(), std::memory_order_relaxed);
  state_.store((++generation_ << 8) | static_cast<uint64_t>(s), std::memory_order_release);
}

void Watchdog::loop() {
  pthread_setname_np(pthread_self(), "hir-watchdog");
  using Clock = std::chrono::steady_clock;
  uint64_t seen_state = 0, seen_ticks = 0;
  Clock::time_point since = Clock::now(), aborted_at{};
  int stage = 0;
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, kPeriod, [&] { return stop_; })) {
    const uint64_t state = state_.load(std::memory_order_acquire);
    const uint64_t ticks = ticks_.load(std::memory_order_relaxed);
    const Clock::time_point now = Clock::now();
    if (state == 0 || state != seen_state || ticks != seen_ticks) {
      seen_state = state;
      seen_ticks = ticks;
      since = now;
      stage = 0;
      continue;
    }
    const auto section = static_cast<Section>(state & 0xff);
    const auto stuck = std::chrono::duration_cast<Duration>(now - since);
    if (stage == 0 && stuck >= Duration(limit_ms_.load(std::memory_order_relaxed))) {
      stage = 1;
      aborted_at = now;
      // A former stage 1 still under way is not started again.
      if (actions_.abort && !aborter_.joinable()) {
        aborter_ = std::thread([this, section, stuck] { actions_.abort(section, stuck); });
      }
    } else if (stage == 1 && now - aborted_at >= kGrace) {
      stage = 2;
      lock.unlock();
      if (actions_.end) actions_.end(section, stuck);
      lock.lock();
    }
  }
}

}  // namespace hir
