// The evaluator's watchdog alone: a section without progress for its limit
// gets stage 1 (abort), and kGrace later stage 2 (end); progress or leaving
// the section prevents both; a section entered again starts a new limit.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/watchdog.h"

namespace hir {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Calls {
  std::atomic<int> aborts{0}, ends{0};
  std::atomic<int64_t> abort_ms{-1}, end_ms{-1};
  std::atomic<int> abort_section{-1};
  Clock::time_point start = Clock::now();

  Watchdog::Actions actions() {
    auto since = [this] {
      return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
    };
    return Watchdog::Actions{[this, since](Watchdog::Section s, Duration) {
                               abort_ms = since();
                               abort_section = static_cast<int>(s);
                               ++aborts;
                             },
                             [this, since](Watchdog::Section, Duration) {
                               end_ms = since();
                               ++ends;
                             }};
  }
};

TEST(Watchdog, AStuckSectionIsAbortedAfterItsLimitThenEndedAfterTheGrace) {
  Calls calls;
  Watchdog w(calls.actions());
  calls.start = Clock::now();
  w.enter(Watchdog::Section::Run, milliseconds(300));
  std::this_thread::sleep_for(milliseconds(250));
  EXPECT_EQ(calls.aborts, 0) << "aborted before the limit";
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (calls.ends == 0 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(calls.aborts, 1);
  EXPECT_EQ(calls.ends, 1);
  EXPECT_EQ(calls.abort_section, static_cast<int>(Watchdog::Section::Run));
  EXPECT_GE(calls.abort_ms, 300);
  EXPECT_LT(calls.abort_ms, 300 + 4 * Watchdog::kPeriod.count());
  // The grace starts at the watchdog's clock reading before it calls the
  // abort action, which reads abort_ms a little later (1 ms later under
  // AddressSanitizer on a loaded machine: 1499 ms, CI-like run, session 29).
  EXPECT_GE(calls.end_ms - calls.abort_ms, Watchdog::kGrace.count() - 5);
  EXPECT_LT(calls.end_ms - calls.abort_ms, Watchdog::kGrace.count() + 4 * Watchdog::kPeriod.count());
  w.leave();
}

TEST(Watchdog, ProgressAndLeavingKeepItQuiet) {
  Calls calls;
  Watchdog w(calls.actions());
  w.enter(Watchdog::Section::Run, milliseconds(200));
  for (int i = 0; i < 40; ++i) {  // 800 ms, a tick every 20 ms
    w.tick(i);
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(w.pc(), 39);
  w.leave();
  std::this_thread::sleep_for(milliseconds(500));  // outside every section
  EXPECT_EQ(calls.aborts, 0);
  EXPECT_EQ(calls.ends, 0);
}

TEST(Watchdog, EnteringASectionAgainStartsANewLimit) {
  Calls calls;
  Watchdog w(calls.actions());
  for (int i = 0; i < 8; ++i) {  // 800 ms without a tick, but a new section every 100 ms
    w.enter(Watchdog::Section::Synchronize, milliseconds(250));
    std::this_thread::sleep_for(milliseconds(100));
  }
  w.leave();
  EXPECT_EQ(calls.aborts, 0);
}

}  // namespace
}  // namespace hir
