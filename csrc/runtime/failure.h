// How an evaluator fails (internal to runtime/), once and for good.
//
// The first error a run or synchronize() meets (a timeout, a device or
// library error, an error of the program at run time), or the watchdog's
// finding that the host made no progress, calls fail(): the report of what
// is pending and of the flight recorder is taken first (an abort may
// complete what was stuck), then every backend is aborted (NCCL kernels
// and ipc semaphore waits are released, MPI requests abandoned) and the
// device abandons its queued work (Device::cancel: the host device's
// streams skip it instead of running it). Teardown then waits for nothing. A failed
// evaluator refuses to run again: the other ranks' numbering of messages
// and collectives went out of step with this one.
//
// Thread-safe: the watchdog calls fail() from its thread while the main
// thread is stuck.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include <hostir/bootstrap.h>
#include <hostir/device.h>

namespace hir {

class Failure {
 public:
  struct Actions {
    // Pending + flight recorder; `ask_streams` false from the watchdog,
    // where recording on a stream may block.
    std::function<std::string(bool ask_streams)> report;
    std::function<void()> abort;          // every backend's abort()
  };

  Failure(Device& dev, Bootstrap& boot, int rank) : dev_(dev), boot_(boot), rank_(rank) {}
  void setActions(Actions a) { actions_ = std::move(a); }

  bool failed() const { return failed_.load(); }

  // The first failure (`why`: its error): report, abort, fail the queued
  // work. Returns the report taken at the first call. From the watchdog
  // (`from_watchdog`) once teardown began, it does nothing: teardown
  // aborts on its own thread.
  std::string fail(std::string_view why, bool from_watchdog = false);

  // Teardown begins (after a fail() under way on another thread ended).
  void beginTeardown();

  // RuntimeError, when failed.
  void throwIfFailed();

  // The message of an error `what` met at `where` (node path, rank, loop
  // indices), with the report; fails first. When the watchdog failed the
  // run, `what` is what its abort made the stuck call throw: the message
  // then is the watchdog's finding (which says where the host was stuck),
  // then that. `*watchdog` tells which.
  std::string messageAt(std::string_view where, std::string_view what, bool* watchdog = nullptr);

  // The watchdog's last resort: prints `stuck` (where the host is stuck)
  // and the report, then ends the job through the bootstrap (exit 3).
  [[noreturn]] void endJob(const std::string& stuck);

 private:
  void cancelQueuedWork();

  Device& dev_;
  Bootstrap& boot_;
  int rank_;
  Actions actions_;
  std::mutex mu_;
  std::atomic<bool> failed_{false};
  bool tearing_down_ = false;    // guarded by mu_
  bool watchdog_fired_ = false;  // guarded by mu_
  std::string first_;            // guarded by mu_: the first line of the first failure
  std::string report_;           // guarded by mu_
};

}  // namespace hir
