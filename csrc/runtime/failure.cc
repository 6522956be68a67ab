#include "runtime/failure.h"

#include <cstdio>
#include <cstdlib>

#include "common/check.h"
#include "common/log.h"

namespace hir {

namespace {

std::string_view firstLine(std::string_view text) { return text.substr(0, text.find('\n')); }

}  // namespace

std::string Failure::fail(std::string_view why, bool from_watchdog) {
  std::lock_guard lock(mu_);
  if (failed_.load()) return report_;
  if (from_watchdog && tearing_down_) return {};
  failed_.store(true);
  watchdog_fired_ = from_watchdog;
  first_ = std::string(firstLine(why));
  HIR_LOG_INFO(Subsys::Eval, "the run failed{}: {}; aborting the backends and the queued work",
               from_watchdog ? " (watchdog)" : "", first_);
  try {
    if (actions_.report) report_ = actions_.report(!from_watchdog);
  } catch (const std::exception& e) {
    report_ = fmt::format("rank {}: no report: {}", rank_, e.what());
  }
  try {
    if (actions_.abort) actions_.abort();
  } catch (const std::exception&) {
    // Best effort; the device's queued work fails below.
  }
  cancelQueuedWork();
  return report_;
}

// The device abandons its queued work (Device::cancel): the host device's
// streams skip it instead of running it, and their blocked waits give up.
// (On the cuda device, the backends' abort is what releases the GPU.)
void Failure::cancelQueuedWork() {
  try {
    dev_.cancel(fmt::format("rank {}: the run failed ({}); its queued work was abandoned", rank_,
                            first_));
  } catch (const std::exception&) {
  }
}

void Failure::beginTeardown() {
  std::lock_guard lock(mu_);
  tearing_down_ = true;
}

void Failure::throwIfFailed() {
  if (!failed_.load()) return;
  std::lock_guard lock(mu_);
  throw RuntimeError(fmt::format("rank {}: the evaluator failed earlier ({}) and its "
                                 "communications were aborted; create a new one",
                                 rank_, first_));
}

std::string Failure::messageAt(std::string_view where, std::string_view what, bool* watchdog) {
  std::string report = fail(what);
  std::lock_guard lock(mu_);
  if (watchdog) *watchdog = watchdog_fired_;
  if (!watchdog_fired_) return fmt::format("{}: {}\n{}", where, what, report);
  return fmt::format("{}; then: {}\n{}", first_, firstLine(what), report);  // first_ says where
}

void Failure::endJob(const std::string& stuck) {
  std::string text =
      fmt::format("hostir: rank {}: {}, even after aborting the communications; ending the job "
                  "(exit {})\n",
                  rank_, stuck, static_cast<int>(kExitRuntimeFailure));
  std::unique_lock lock(mu_, std::try_to_lock);  // its holder may be what is stuck
  if (lock.owns_lock() && !report_.empty())
    text += fmt::format("hostir: rank {}: the run failed: {}\n{}\n", rank_, first_, report_);
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  boot_.abort(kExitRuntimeFailure);
  std::_Exit(kExitRuntimeFailure);  // an embedder's bootstrap that returned
}

}  // namespace hir
