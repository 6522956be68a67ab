// The host backends' post through a start stream and completion lanes
// (host_post.h).
#include "backends/host_post.h"

#include <algorithm>
#include <chrono>

#include "common/check.h"

namespace hir {

void HostPostStreams::create(Device& device) {
  device_ = &device;
  start_ = device.createStream();
  ready_ = device.createEvent();
  started_ = device.createEvent();
}

HostPostStreams::LaneKey HostPostStreams::laneOf(std::span<const PostArgs> ops) {
  LaneKey key;
  key.reserve(ops.size());
  for (const PostArgs& a : ops)
    key.push_back(isPointToPoint(a.type) ? int64_t{a.peer} * 2 + (a.type == CommType::Recv ? 1 : 0)
                                         : -1 - int64_t{a.team});
  std::sort(key.begin(), key.end());
  key.erase(std::unique(key.begin(), key.end()), key.end());
  return key;
}

namespace {
// Whether `ready` has completed; not after a failure (query() throws the
// sticky error then, which the post leaves to the waits that report it).
bool readyNow(Device& d, Event& ready) {
  try {
    return d.query(ready);
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

void HostPostStreams::enqueue(const std::unique_lock<std::mutex>& held,
                              std::span<const PostArgs> ops, Stream& current, Event& done,
                              std::function<void()> start, std::function<void()> complete,
                              bool inline_ok) {
  HIR_INTERNAL_ASSERT(held.mutex() == &mutex_ && held.owns_lock(),
                      "a host post enqueued without its streams' lock");
  Device& d = *device_;
  std::unique_ptr<Stream>& lane = lanes_[laneOf(ops)];
  if (lane == nullptr) lane = d.createStream();
  d.record(*ready_, current);
  if (inline_ok && queued_starts_->load() == 0 && readyNow(d, *ready_)) {
    start();
  } else {
    queued_starts_->fetch_add(1);
    d.wait(*start_, *ready_);
    d.launchHostFunc(*start_, [start = std::move(start), queued = queued_starts_] {
      struct CountDown {
        std::atomic<int64_t>& n;
        ~CountDown() { n.fetch_sub(1); }
      } count_down{*queued};
      start();
    });
    d.record(*started_, *start_);
    d.wait(*lane, *started_);
  }
  d.launchHostFunc(*lane, std::move(complete));
  d.record(done, *lane);
}

void HostPostStreams::drain(Duration timeout) noexcept {
  const auto begin = std::chrono::steady_clock::now();
  std::vector<Stream*> all{start_.get()};
  for (auto& [key, lane] : lanes_) all.push_back(lane.get());
  for (Stream* s : all) {
    if (device_ == nullptr || s == nullptr) continue;
    try {
      device_->synchronize(*s, remainingOf(timeout, begin));
    } catch (...) {
      // A failed or timed-out run: the error was reported where it happened.
    }
  }
}

void HostPostStreams::reset() {
  lanes_.clear();
  start_.reset();
  started_.reset();
  ready_.reset();
}

}  // namespace hir
