// The evaluator's watchdog (internal to runtime/): bounds how long the host
// can stay inside the evaluator without progress, whatever it is blocked in.
//
// Every host wait of the evaluator has the run's timeout T of its own and
// fails with a report first. The watchdog is for what has none: a
// bootstrap exchange (share_mem_handles) that a peer never reaches, an NCCL
// call blocked behind a stuck kernel, an embedder's backend, a device call
// that blocks. The evaluator marks where it is (enter(): a section with its
// limit) and its progress (tick(): one store per instruction). A thread
// samples both every kPeriod; when a section made no progress for its limit:
//   stage 1: `abort` (on a thread of its own, at most once at a time): the
//            evaluator takes its report, aborts its backends and fails the
//            device's queued work, which makes most blocked calls return
//            with an error;
//   stage 2: still no progress kGrace later: `end`, which prints and ends
//            the job (Bootstrap::abort) and does not return.
// The main thread never takes a lock or reads the clock for it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include <hostir/device.h>

namespace hir {

class Watchdog {
 public:
  enum class Section : uint8_t { None, Load, Run, Synchronize, Teardown };
  static constexpr Duration kPeriod{50};
  static constexpr Duration kGrace{1500};

  struct Actions {
    std::function<void(Section, Duration stuck)> abort;
    std::function<void(Section, Duration stuck)> end;  // must not return
  };

  explicit Watchdog(Actions actions);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The host is now inside `s` and must progress at least every `limit`.
  void enter(Section s, Duration limit);
  void leave() { state_.store(0, std::memory_order_release); }
  // Progress: the host is at instruction `pc` (for reports). Release, so
  // that what the host wrote before it (the loop indices a report prints)
  // is what a report made on the watchdog's thread reads after pc()
  // (acquire); a plain store on x86.
  void tick(int pc) {
    ticks_.store(ticks_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    pc_.store(pc, std::memory_order_release);
  }
  int pc() const { return pc_.load(std::memory_order_acquire); }

  // Leaves the section at the end of the scope (also when it throws).
  class Scope {
   public:
    Scope(Watchdog& w, Section s, Duration limit) : w_(w) { w_.enter(s, limit); }
    ~Scope() { w_.leave(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog& w_;
  };

 private:
  void loop();

  Actions actions_;
  // (generation << 8) | section; 0: outside every section.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> limit_ms_{0};
  std::atomic<uint64_t> ticks_{0};
  std::atomic<int> pc_{-1};
  uint64_t generation_ = 0;  // main thread only
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  // Runs stage 1, so that an abort that blocks does not keep the sampling
  // thread from stage 2.
  std::thread aborter_;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace hir
