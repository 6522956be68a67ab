#include "device/host_device.h"
#include "device/messages.h"

#include <gtest/gtest.h>

#include "support/gate.h"
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/elements.h"
#include "common/check.h"
#include "support/compute_reference.h"

namespace hir {
namespace {

using namespace std::chrono_literals;

constexpr Duration kLong = std::chrono::seconds(20);  // for waits that must succeed

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                DType::Int32,   DType::Int64,   DType::UInt8};

using test::Gate;
using test::messageOf;

// ---------------------------------------------------- asynchronous streams

TEST(HostDeviceStreams, EnqueueReturnsBeforeTheWorkRuns) {
  HostDevice dev;
  Stream& s = dev.defaultStream();
  std::atomic<bool> later_ran{false};
  Gate gate;
  dev.launchHostFunc(s, gate.task());
  dev.launchHostFunc(s, [&] { later_ran = true; });
  auto e = dev.createEvent();
  dev.record(*e, s);
  // Had the stream run on this thread, we would be stuck at the gate.
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(later_ran.load());
  EXPECT_FALSE(dev.query(*e));
  gate.open();
  dev.synchronize(s, kLong);
  EXPECT_TRUE(later_ran.load());
  EXPECT_TRUE(dev.query(*e));
}

TEST(HostDeviceStreams, WorkRunsOnAnotherThread) {
  HostDevice dev;
  std::thread::id ran_on;
  dev.launchHostFunc(dev.defaultStream(), [&] { ran_on = std::this_thread::get_id(); });
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_NE(ran_on, std::thread::id());
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(HostDeviceStreams, TasksOfOneStreamRunInOrder) {
  HostDevice dev;
  auto s = dev.createStream();
  std::vector<int> order;  // touched only by the stream's thread until sync
  constexpr int kTasks = 2000;
  for (int i = 0; i < kTasks; ++i) dev.launchHostFunc(*s, [&order, i] { order.push_back(i); });
  dev.synchronize(*s, kLong);
  ASSERT_EQ(order.size(), static_cast<std::size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) ASSERT_EQ(order[i], i);
}

TEST(HostDeviceStreams, StreamsRunConcurrently) {
  HostDevice dev;
  auto a = dev.createStream();
  auto b = dev.createStream();
  Gate gate;
  std::atomic<bool> b_ran{false};
  dev.launchHostFunc(*a, gate.task());
  dev.launchHostFunc(*b, [&] { b_ran = true; });
  auto e = dev.createEvent();
  dev.record(*e, *a);
  dev.synchronize(*b, kLong);  // b is not held up by a
  EXPECT_TRUE(b_ran.load());
  EXPECT_FALSE(dev.query(*e));
  gate.open();
  dev.synchronize(*a, kLong);
  EXPECT_TRUE(dev.query(*e));
}

TEST(HostDeviceStreams, DestroyingAStreamDrainsIt) {
  HostDevice dev;
  std::atomic<int> ran{0};
  {
    auto s = dev.createStream();
    for (int i = 0; i < 5; ++i)
      dev.launchHostFunc(*s, [&] {
        std::this_thread::sleep_for(2ms);
        ++ran;
      });
  }
  EXPECT_EQ(ran.load(), 5);
}

TEST(HostDeviceStreams, IdleStreamsDoNotSpin) {
  HostDevice dev;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(dev.createStream());
  auto cpu = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return std::chrono::seconds(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           std::chrono::microseconds(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  // Let the process settle first: OpenBLAS (the host matmul) starts a thread
  // pool when the library loads, whose threads spin for about 0.1 s before
  // they sleep, and a test may run first in its process.
  for (int i = 0; i < 40; ++i) {
    auto start = cpu();
    std::this_thread::sleep_for(50ms);
    if (cpu() - start < 5ms) break;
  }
  auto before = cpu();
  std::this_thread::sleep_for(300ms);
  auto used = cpu() - before;
  EXPECT_LT(used, 60ms) << "5 idle stream threads used "
                        << std::chrono::duration_cast<std::chrono::milliseconds>(used).count()
                        << " ms of CPU in 300 ms";
}

TEST(HostDeviceStreams, WrapNullptrIsTheDefaultStream) {
  HostDevice dev;
  auto wrapped = dev.wrapStream(nullptr);
  Gate gate;
  std::atomic<bool> ran{false};
  dev.launchHostFunc(dev.defaultStream(), gate.task());
  dev.launchHostFunc(*wrapped, [&] { ran = true; });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ran.load()) << "the wrapper's work did not queue behind the default stream";
  gate.open();
  dev.synchronize(*wrapped, kLong);
  EXPECT_TRUE(ran.load());
  wrapped.reset();  // does not own: the default stream keeps working
  dev.launchHostFunc(dev.defaultStream(), [&] { ran = false; });
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_FALSE(ran.load());
}

TEST(HostDeviceStreams, WrapAcceptsOnlyStreamsOfThisDevice) {
  HostDevice dev;
  auto s = dev.createStream();
  auto wrapped = dev.wrapStream(static_cast<void*>(s.get()));
  Gate gate;
  std::atomic<bool> ran{false};
  dev.launchHostFunc(*s, gate.task());
  dev.launchHostFunc(*wrapped, [&] { ran = true; });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ran.load());
  gate.open();
  dev.synchronize(*s, kLong);
  EXPECT_TRUE(ran.load());

  int not_a_stream = 0;
  EXPECT_THROW(dev.wrapStream(&not_a_stream), UsageError);
  HostDevice other;
  EXPECT_THROW(dev.wrapStream(&other.defaultStream()), UsageError);
  EXPECT_THROW(dev.launchHostFunc(other.defaultStream(), [] {}), UsageError);
}

// ----------------------------------------------------------------- events

TEST(HostDeviceEvents, WaitMakesAnotherStreamObserveRecordedWork) {
  HostDevice dev;
  auto a = dev.createStream();
  auto b = dev.createStream();
  auto e = dev.createEvent();
  Gate gate;
  int value = 0;  // plain int: the event must order the write before the read
  int observed = -1;
  std::atomic<bool> b_ran{false};
  dev.launchHostFunc(*a, gate.task());
  dev.launchHostFunc(*a, [&] { value = 42; });
  dev.record(*e, *a);
  dev.wait(*b, *e);
  dev.launchHostFunc(*b, [&] {
    observed = value;
    b_ran = true;
  });
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(b_ran.load()) << "b ran before the event it waits for";
  gate.open();
  dev.synchronize(*b, kLong);
  EXPECT_EQ(observed, 42);
}

TEST(HostDeviceEvents, NeverRecordedEventIsComplete) {
  HostDevice dev;
  auto e = dev.createEvent();
  EXPECT_TRUE(dev.query(*e));
  std::atomic<bool> ran{false};
  dev.wait(dev.defaultStream(), *e);
  dev.launchHostFunc(dev.defaultStream(), [&] { ran = true; });
  dev.synchronize(dev.defaultStream(), 5000ms);
  EXPECT_TRUE(ran.load());
  dev.synchronize(*e, 10ms);  // returns at once
}

TEST(HostDeviceEvents, ReRecordDoesNotAffectAnEarlierWait) {
  HostDevice dev;
  auto a = dev.createStream();
  auto b = dev.createStream();
  auto c = dev.createStream();
  auto e = dev.createEvent();
  Gate gate;
  std::atomic<bool> b_ran{false};
  dev.launchHostFunc(*a, gate.task());
  dev.record(*e, *a);
  dev.wait(*b, *e);  // captures the record on a
  dev.launchHostFunc(*b, [&] { b_ran = true; });
  dev.record(*e, *c);  // c is empty: this capture completes at once
  dev.synchronize(*c, kLong);
  EXPECT_TRUE(dev.query(*e));  // query sees the latest capture
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(b_ran.load()) << "b's wait was satisfied by a later re-record";
  gate.open();
  dev.synchronize(*b, kLong);
  EXPECT_TRUE(b_ran.load());
}

TEST(HostDeviceEvents, WaitAfterReRecordUsesTheNewCapture) {
  HostDevice dev;
  auto a = dev.createStream();
  auto b = dev.createStream();
  auto c = dev.createStream();
  auto e = dev.createEvent();
  Gate gate;
  std::atomic<bool> b_ran{false};
  dev.launchHostFunc(*a, gate.task());
  dev.record(*e, *a);
  EXPECT_FALSE(dev.query(*e));
  dev.record(*e, *c);  // replaces the capture
  dev.wait(*b, *e);
  dev.launchHostFunc(*b, [&] { b_ran = true; });
  dev.synchronize(*b, kLong);  // a is still blocked
  EXPECT_TRUE(b_ran.load());
  gate.open();
  dev.synchronize(*a, kLong);
}

TEST(HostDeviceEvents, ARecordOnAnIdleStreamCompletesAtOnceAndOnABusyOneAfterItsWork) {
  HostDevice dev;
  auto s = dev.createStream();
  auto e = dev.createEvent();
  dev.record(*e, *s);  // nothing was ever enqueued on s
  EXPECT_TRUE(dev.query(*e)) << "a record on an idle stream waits for its worker";
  Gate gate;
  std::atomic<bool> ran{false};
  dev.launchHostFunc(*s, gate.task());
  dev.launchHostFunc(*s, [&] { ran = true; });
  dev.record(*e, *s);
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(dev.query(*e)) << "a record completed before the work enqueued before it";
  gate.open();
  dev.synchronize(*e, kLong);
  EXPECT_TRUE(ran.load());
  dev.synchronize(*s, kLong);  // idle again: the next record completes at once
  dev.record(*e, *s);
  EXPECT_TRUE(dev.query(*e));
}

TEST(HostDeviceEvents, ManyHandOffsBetweenStreamsAndTheHostAllArrive) {
  // A ping-pong between two streams and the host, each hop an event: a
  // wake-up lost between a waiter's last look and its sleep would hang a
  // hop until the timeout.
  HostDevice dev;
  auto a = dev.createStream();
  auto b = dev.createStream();
  auto ea = dev.createEvent();
  auto eb = dev.createEvent();
  int64_t value = 0;  // plain: the events order every access
  for (int i = 0; i < 2000; ++i) {
    dev.launchHostFunc(*a, [&] { ++value; });
    dev.record(*ea, *a);
    dev.wait(*b, *ea);
    dev.launchHostFunc(*b, [&] { ++value; });
    dev.record(*eb, *b);
    dev.synchronize(*eb, 5000ms);
    ASSERT_EQ(value, 2 * (i + 1));
  }
}

TEST(HostDeviceEvents, SynchronizeEventWaitsForTheRecordedWork) {
  HostDevice dev;
  auto e = dev.createEvent();
  std::atomic<bool> ran{false};
  dev.launchHostFunc(dev.defaultStream(), [&] {
    std::this_thread::sleep_for(20ms);
    ran = true;
  });
  dev.record(*e, dev.defaultStream());
  dev.synchronize(*e, kLong);
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(dev.query(*e));
}

TEST(HostDeviceEvents, SynchronizeStreamTimesOutQuickly) {
  HostDevice dev;
  Gate gate;
  dev.launchHostFunc(dev.defaultStream(), gate.task());
  auto start = std::chrono::steady_clock::now();
  std::string msg = messageOf([&] { dev.synchronize(dev.defaultStream(), 50ms); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_NE(msg.find("host wait timed out after 50 ms"), std::string::npos) << msg;
  EXPECT_THROW(dev.synchronize(dev.defaultStream(), 10ms), TimeoutError);
  // A host-side timeout is not a device failure.
  gate.open();
  dev.synchronize(dev.defaultStream(), kLong);
}

TEST(HostDeviceEvents, SynchronizeEventTimesOutQuickly) {
  HostDevice dev;
  auto e = dev.createEvent();
  Gate gate;
  dev.launchHostFunc(dev.defaultStream(), gate.task());
  dev.record(*e, dev.defaultStream());
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(dev.synchronize(*e, 50ms), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  gate.open();
  dev.synchronize(*e, kLong);
  EXPECT_TRUE(dev.query(*e));
}

// ---------------------------------------------------------- sticky errors

TEST(HostDeviceErrors, ThrowingTaskSurfacesOnSynchronize) {
  HostDevice dev;
  std::atomic<bool> later_ran{false};
  dev.launchHostFunc(dev.defaultStream(), [] { throw std::runtime_error("boom in a task"); });
  dev.launchHostFunc(dev.defaultStream(), [&] { later_ran = true; });
  try {
    dev.synchronize(dev.defaultStream(), kLong);
    FAIL() << "synchronize did not report the failure";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("boom in a task"), std::string::npos) << e.what();
    EXPECT_EQ(e.exitCode(), kExitRuntimeFailure);
  }
  auto ev = dev.createEvent();
  EXPECT_THROW(dev.query(*ev), BackendError);  // sticky
  EXPECT_THROW(dev.synchronize(*ev, 10ms), BackendError);
  EXPECT_FALSE(later_ran.load()) << "work after a failure must be skipped";
}

TEST(HostDeviceErrors, StreamWaitTimeoutBecomesStickyError) {
  HostDevice dev(Duration(50));
  auto a = dev.createStream();
  auto b = dev.createStream();
  auto e = dev.createEvent();
  Gate gate;
  std::atomic<bool> b_after{false};
  std::atomic<bool> a_after{false};
  dev.launchHostFunc(*a, gate.task());
  dev.record(*e, *a);
  dev.launchHostFunc(*a, [&] { a_after = true; });
  dev.wait(*b, *e);
  dev.launchHostFunc(*b, [&] { b_after = true; });
  std::string msg = messageOf([&] { dev.synchronize(*b, kLong); });
  EXPECT_NE(msg.find("stream wait timed out after 50 ms"), std::string::npos) << msg;
  gate.open();
  a.reset();  // drains a
  EXPECT_FALSE(b_after.load());
  EXPECT_FALSE(a_after.load()) << "a's work after the failure must be skipped";
  EXPECT_THROW(dev.query(*e), BackendError);
}

TEST(HostDeviceErrors, DestroyingTheDeviceReleasesABlockedWait) {
  auto start = std::chrono::steady_clock::now();
  std::atomic<bool> after_ran{false};
  {
    HostDevice dev;  // 10-minute stream-wait timeout
    auto* flag = static_cast<uint32_t*>(dev.allocate(sizeof(uint32_t)));
    dev.waitValue(dev.defaultStream(), flag, 1);  // no one will write it
    dev.launchHostFunc(dev.defaultStream(), [&] { after_ran = true; });
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_FALSE(after_ran.load()) << "work behind an abandoned wait must not run";
}

TEST(HostDeviceErrors, StreamWaitTimeoutCanBeChanged) {
  HostDevice dev;
  EXPECT_EQ(dev.streamWaitTimeout(), HostDevice::kDefaultStreamWaitTimeout);
  dev.setStreamWaitTimeout(Duration(30));
  EXPECT_EQ(dev.streamWaitTimeout(), Duration(30));
  auto* flag = static_cast<uint32_t*>(dev.allocate(sizeof(uint32_t)));
  dev.waitValue(dev.defaultStream(), flag, 1);  // nobody ever writes it
  std::string msg = messageOf([&] { dev.synchronize(dev.defaultStream(), kLong); });
  EXPECT_NE(msg.find("stream wait timed out after 30 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("waitValue"), std::string::npos) << msg;
  dev.deallocate(flag);
}

// ------------------------------------------------------ fill, copy, check

class HostDeviceData : public ::testing::TestWithParam<DType> {};

TEST_P(HostDeviceData, FillThenCheckFindsNoMismatch) {
  DType t = GetParam();
  HostDevice dev;
  constexpr std::size_t kCount = 1000;
  void* buf = dev.allocate(kCount * dtypeSize(t));
  CheckRecord* rec = dev.allocateCheckRecords(1);
  dev.fill(dev.defaultStream(), buf, t, kCount, 3, 2);
  dev.check(dev.defaultStream(), buf, t, kCount, 3, 2, 0, rec, 0);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(rec->checked, kCount);
  EXPECT_EQ(rec->mismatches, 0u);
  EXPECT_EQ(rec->first_execution, -1);
  EXPECT_EQ(rec->reported, 0);
  // The fill wrote the pattern itself, not just something check accepts.
  for (std::size_t k = 0; k < kCount; k += 97) {
    PatternElement e = patternElement(t, 3, 2, static_cast<int64_t>(k));
    EXPECT_EQ(loadAsDouble(buf, t, k), isFloating(t) ? e.f : static_cast<double>(e.i));
  }
  dev.freeCheckRecords(rec);
  dev.deallocate(buf);
}

TEST(HostDeviceCheck, Int64ValuesBeyondTwoToThe53AreReportedExactly) {
  // 2^53 + 1 and 2^53 are one double apart from nothing: both print as
  // 9007199254740992 when converted.
  HostDevice dev;
  constexpr int64_t kBig = (int64_t{1} << 53) + 1;
  auto* buf = static_cast<int64_t*>(dev.allocate(sizeof(int64_t)));
  CheckRecord* rec = dev.allocateCheckRecords(1);
  *buf = kBig - 1;
  dev.check(dev.defaultStream(), buf, DType::Int64, 1, kBig, 0, 0, rec, 0);
  dev.synchronize(dev.defaultStream(), kLong);
  ASSERT_EQ(rec->reported, 1);
  EXPECT_EQ(rec->integer, 1);
  EXPECT_EQ(rec->got[0].i, kBig - 1);
  EXPECT_EQ(rec->expected[0].i, kBig);
  dev.freeCheckRecords(rec);
  dev.deallocate(buf);
}

TEST_P(HostDeviceData, CheckReportsTheFirstFailingExecution) {
  DType t = GetParam();
  HostDevice dev;
  constexpr std::size_t kCount = 100;
  void* buf = dev.allocate(kCount * dtypeSize(t));
  CheckRecord* rec = dev.allocateCheckRecords(2);
  EXPECT_EQ(rec[1].first_execution, -1);
  dev.fill(dev.defaultStream(), buf, t, kCount, 3, 2);
  dev.synchronize(dev.defaultStream(), kLong);
  storeElement(buf, t, 5, patternElement(t, 100, 0, 0));  // expected 13
  dev.check(dev.defaultStream(), buf, t, kCount, 3, 2, 0, &rec[1], 7);
  dev.check(dev.defaultStream(), buf, t, kCount, 3, 2, 0, &rec[1], 8);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(rec[0].checked, 0u);
  EXPECT_EQ(rec[1].checked, 2 * kCount);
  EXPECT_EQ(rec[1].mismatches, 2u);
  EXPECT_EQ(rec[1].first_execution, 7);
  ASSERT_EQ(rec[1].reported, 1);
  EXPECT_EQ(rec[1].index[0], 5);
  EXPECT_EQ(rec[1].integer, isFloating(t) ? 0 : 1);
  if (isFloating(t)) {
    EXPECT_EQ(rec[1].got[0].f, 100.0);
    EXPECT_EQ(rec[1].expected[0].f, 13.0);
  } else {
    EXPECT_EQ(rec[1].got[0].i, 100);
    EXPECT_EQ(rec[1].expected[0].i, 13);
  }
  dev.freeCheckRecords(rec);
  dev.deallocate(buf);
}

TEST_P(HostDeviceData, CopyMovesTheBytes) {
  DType t = GetParam();
  HostDevice dev;
  constexpr std::size_t kCount = 257;
  void* src = dev.allocate(kCount * dtypeSize(t));
  void* dst = dev.allocate(kCount * dtypeSize(t));
  CheckRecord* rec = dev.allocateCheckRecords(1);
  dev.fill(dev.defaultStream(), dst, t, kCount, 0, 0);
  dev.fill(dev.defaultStream(), src, t, kCount, -50, 1);
  dev.copy(dev.defaultStream(), dst, src, kCount * dtypeSize(t));
  dev.check(dev.defaultStream(), dst, t, kCount, -50, 1, 0, rec, 0);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(rec->mismatches, 0u);
  EXPECT_EQ(std::memcmp(src, dst, kCount * dtypeSize(t)), 0);
  dev.freeCheckRecords(rec);
  dev.deallocate(src);
  dev.deallocate(dst);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, HostDeviceData, ::testing::ValuesIn(kAllDTypes),
                         [](const auto& info) { return std::string(toString(info.param)); });

TEST(HostDeviceCheck, ReportsAtMostKMaxReportedMismatches) {
  HostDevice dev;
  void* buf = dev.allocate(50 * sizeof(int32_t));
  CheckRecord* rec = dev.allocateCheckRecords(1);
  dev.fill(dev.defaultStream(), buf, DType::Int32, 50, 0, 1);
  dev.check(dev.defaultStream(), buf, DType::Int32, 50, 1000, 1, 0, rec, 3);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(rec->mismatches, 50u);
  ASSERT_EQ(rec->reported, CheckRecord::kMaxReported);
  for (int j = 0; j < CheckRecord::kMaxReported; ++j) {
    EXPECT_EQ(rec->index[j], j);
    EXPECT_EQ(rec->got[j].i, j);
    EXPECT_EQ(rec->expected[j].i, 1000 + j);
  }
  dev.freeCheckRecords(rec);
  dev.deallocate(buf);
}

TEST(HostDeviceCheck, ToleranceAppliesToFloatingDTypes) {
  HostDevice dev;
  void* buf = dev.allocate(64 * sizeof(float));
  CheckRecord* rec = dev.allocateCheckRecords(2);
  dev.fill(dev.defaultStream(), buf, DType::Float32, 64, 10, 1);
  dev.check(dev.defaultStream(), buf, DType::Float32, 64, 11, 1, 1.0, &rec[0], 0);
  dev.check(dev.defaultStream(), buf, DType::Float32, 64, 11, 1, 0.5, &rec[1], 0);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(rec[0].mismatches, 0u);
  EXPECT_EQ(rec[1].mismatches, 64u);
  dev.freeCheckRecords(rec);
  dev.deallocate(buf);
}

TEST(HostDeviceCheck, ConcurrentChecksReportOnlyTheClaimingExecution) {
  HostDevice dev;
  auto a = dev.createStream();
  auto b = dev.createStream();
  void* x = dev.allocate(1000 * sizeof(int64_t));
  void* y = dev.allocate(1000 * sizeof(int64_t));
  fillPattern(x, DType::Int64, 1000, 0, 1);
  fillPattern(y, DType::Int64, 1000, 0, 1);
  storeElement(x, DType::Int64, 1, {-1, -1});
  storeElement(y, DType::Int64, 2, {-1, -1});
  CheckRecord* rec = dev.allocateCheckRecords(1);
  for (int i = 0; i < 20; ++i) {
    dev.check(*a, x, DType::Int64, 1000, 0, 1, 0, rec, 1);
    dev.check(*b, y, DType::Int64, 1000, 0, 1, 0, rec, 2);
  }
  dev.synchronize(*a, kLong);
  dev.synchronize(*b, kLong);
  EXPECT_EQ(rec->mismatches, 40u);
  EXPECT_EQ(rec->checked, 40000u);
  ASSERT_TRUE(rec->first_execution == 1 || rec->first_execution == 2) << rec->first_execution;
  ASSERT_EQ(rec->reported, CheckRecord::kMaxReported);  // 20 reports offered, 4 kept
  for (int j = 0; j < rec->reported; ++j) EXPECT_EQ(rec->index[j], rec->first_execution);
  dev.freeCheckRecords(rec);
  dev.deallocate(x);
  dev.deallocate(y);
}

// ----------------------------------------------------------------- memory

TEST(HostDeviceMemory, ZeroByteAllocationsAreUniqueAndValid) {
  HostDevice dev;
  void* p = dev.allocate(0);
  void* q = dev.allocate(0);
  EXPECT_NE(p, nullptr);
  EXPECT_NE(q, nullptr);
  EXPECT_NE(p, q);
  dev.deallocate(p);
  dev.deallocate(q);
  EXPECT_THROW(dev.deallocate(p), BackendError);  // already freed
}

TEST(HostDeviceMemory, DeallocateWaitsForPendingWork) {
  HostDevice dev;
  Gate gate;
  void* buf = dev.allocate(4096);
  dev.launchHostFunc(dev.defaultStream(), gate.task());
  dev.fill(dev.defaultStream(), buf, DType::UInt8, 4096, 1, 0);  // uses buf later
  auto freed = std::async(std::launch::async, [&] { dev.deallocate(buf); });
  EXPECT_EQ(freed.wait_for(50ms), std::future_status::timeout)
      << "deallocate freed memory that queued work still uses";
  gate.open();
  freed.get();
}

TEST(HostDeviceMemory, AllocationsStartZeroed) {
  HostDevice dev;
  constexpr std::size_t kBytes = 3 * 4096 + 5;
  auto* p = static_cast<unsigned char*>(dev.allocate(kBytes));
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < kBytes; ++i) nonzero += p[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  dev.deallocate(p);
}

TEST(HostDeviceMemory, ExportImportWithinOneProcessAliases) {
  HostDevice dev;
  EXPECT_TRUE(dev.supports(DeviceFeature::Ipc));
  auto* p = static_cast<int32_t*>(dev.allocate(1024 * sizeof(int32_t)));
  MemoryHandle h = dev.exportMemory(p);
  auto* q = static_cast<int32_t*>(dev.importMemory(h));
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p);  // a second mapping of the same pages
  q[1000] = 12345;
  EXPECT_EQ(p[1000], 12345);
  p[7] = -9;
  EXPECT_EQ(q[7], -9);
  dev.closeImported(q);
  EXPECT_THROW(dev.closeImported(q), BackendError);
  dev.deallocate(p);
}

TEST(HostDeviceMemory, BadHandlesAreRejected) {
  HostDevice dev;
  int not_allocated = 0;
  EXPECT_THROW(dev.exportMemory(&not_allocated), BackendError);
  EXPECT_THROW(dev.importMemory(MemoryHandle{{1, 2, 3}}), BackendError);
  void* p = dev.allocate(64);
  MemoryHandle h = dev.exportMemory(p);
  dev.deallocate(p);
  std::string msg = messageOf([&] { dev.importMemory(h); });
  EXPECT_NE(msg.find("host importMemory"), std::string::npos) << msg;
}

// Reads exactly n bytes from fd, waiting at most `timeout` in all.
bool readFully(int fd, void* out, std::size_t n, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return false;
    ssize_t got = read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

// A second process (forked before this process makes any device thread)
// imports the parent's allocation through /proc/<parent>/fd, writes a
// pattern and raises a semaphore in it; the parent's stream waits on the
// semaphore, then checks the pattern.
TEST(HostDeviceMemory, ForkedChildWritesThroughImportedMemory) {
  constexpr std::size_t kCount = 4096;
  constexpr std::size_t kDataOffset = 64;
  // A socket rather than a pipe: send(MSG_NOSIGNAL) cannot kill us with
  // SIGPIPE if the child is already gone.
  int pipe_fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pipe_fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[1]);
    int code = 0;
    try {
      MemoryHandle h;
      h.bytes.resize(64);
      uint32_t size = 0;
      if (!readFully(pipe_fds[0], &size, sizeof size, 30s) || size > h.bytes.size()) _exit(2);
      h.bytes.resize(size);
      if (!readFully(pipe_fds[0], h.bytes.data(), size, 30s)) _exit(2);
      HostDevice child_dev;
      auto* peer = static_cast<char*>(child_dev.importMemory(h));
      child_dev.fill(child_dev.defaultStream(), peer + kDataOffset, DType::Int32, kCount, 77, 3);
      child_dev.writeValue(child_dev.defaultStream(), reinterpret_cast<uint32_t*>(peer), 1);
      child_dev.synchronize(child_dev.defaultStream(), kLong);
      child_dev.closeImported(peer);
    } catch (...) {
      code = 3;
    }
    _exit(code);
  }
  close(pipe_fds[0]);

  HostDevice dev(Duration(30000));  // a lost child must not hold the stream for long
  auto* base = static_cast<char*>(dev.allocate(kDataOffset + kCount * sizeof(int32_t)));
  auto* flag = reinterpret_cast<uint32_t*>(base);
  CheckRecord* rec = dev.allocateCheckRecords(1);
  dev.waitValue(dev.defaultStream(), flag, 1);
  dev.check(dev.defaultStream(), base + kDataOffset, DType::Int32, kCount, 77, 3, 0, rec, 0);
  MemoryHandle h = dev.exportMemory(base);
  auto size = static_cast<uint32_t>(h.bytes.size());
  bool sent = send(pipe_fds[1], &size, sizeof size, MSG_NOSIGNAL) == sizeof size &&
              send(pipe_fds[1], h.bytes.data(), size, MSG_NOSIGNAL) == static_cast<ssize_t>(size);
  close(pipe_fds[1]);
  EXPECT_TRUE(sent);

  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  ASSERT_NE(done, 0) << "child did not finish";
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "2: no handle received, 3: the child's device failed";
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(*flag, 1u);
  EXPECT_EQ(rec->mismatches, 0u);
  EXPECT_EQ(rec->checked, kCount);
  dev.freeCheckRecords(rec);
  dev.deallocate(base);
}

// ----------------------------------------------------- stream semaphores

TEST(HostDeviceSemaphores, WaitValueOrdersAcrossStreams) {
  HostDevice dev;
  ASSERT_TRUE(dev.supports(DeviceFeature::StreamSemaphore));
  auto a = dev.createStream();
  auto b = dev.createStream();
  auto* flag = static_cast<uint32_t*>(dev.allocate(sizeof(uint32_t)));
  Gate gate;
  int data = 0;
  int observed = -1;
  std::atomic<bool> b_ran{false};
  dev.waitValue(*b, flag, 5);
  dev.launchHostFunc(*b, [&] {
    observed = data;
    b_ran = true;
  });
  dev.launchHostFunc(*a, gate.task());
  dev.launchHostFunc(*a, [&] { data = 7; });
  dev.writeValue(*a, flag, 4);  // not enough
  dev.writeValue(*a, flag, 5);
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(b_ran.load());
  gate.open();
  dev.synchronize(*b, kLong);
  EXPECT_EQ(observed, 7);
  EXPECT_EQ(*flag, 5u);
  dev.deallocate(flag);
}

// The compare is cyclic, (int32)(value - target) >= 0, as CUDA's GEQ:
// sequence numbers may wrap at 2^32.
TEST(HostDeviceSemaphores, WaitValueComparesCyclicallyAcrossTheWrap) {
  HostDevice dev;
  auto* flag = static_cast<uint32_t*>(dev.allocate(sizeof(uint32_t)));
  dev.writeValue(dev.defaultStream(), flag, 0xFFFFFFF0u);
  dev.waitValue(dev.defaultStream(), flag, 0xFFFFFFE0u);  // reached long ago
  dev.waitValue(dev.defaultStream(), flag, 0xFFFFFFF0u);  // reached exactly
  dev.writeValue(dev.defaultStream(), flag, 5u);          // past the wrap
  dev.waitValue(dev.defaultStream(), flag, 0xFFFFFFFFu);  // 6 behind 5
  dev.waitValue(dev.defaultStream(), flag, 5u);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(*flag, 5u);
  dev.deallocate(flag);
}

TEST(HostDeviceSemaphores, AValueBeforeTheWrapDoesNotReachATargetPastIt) {
  HostDevice dev(Duration(50));
  auto* flag = static_cast<uint32_t*>(dev.allocate(sizeof(uint32_t)));
  dev.writeValue(dev.defaultStream(), flag, 0xFFFFFFF0u);
  dev.waitValue(dev.defaultStream(), flag, 3u);  // 19 ahead: an unsigned compare would pass
  const std::string msg = messageOf([&] { dev.synchronize(dev.defaultStream(), kLong); });
  EXPECT_NE(msg.find("waitValue"), std::string::npos) << msg;
  EXPECT_NE(msg.find("timed out after 50 ms"), std::string::npos) << msg;
}

// The default signaledCopy (waitValue, copy, writeValue): nothing is copied
// or signalled before the flag, and the signal follows the copy.
TEST(HostDeviceSemaphores, SignaledCopyWaitsCopiesThenSignals) {
  HostDevice dev;
  auto copier = dev.createStream();
  auto writer = dev.createStream();
  auto* flags = static_cast<uint32_t*>(dev.allocate(2 * sizeof(uint32_t)));
  auto* src = static_cast<unsigned char*>(dev.allocate(64));
  auto* dst = static_cast<unsigned char*>(dev.allocate(64));
  for (int k = 0; k < 64; ++k) src[k] = static_cast<unsigned char>(k + 1);
  int copied_when_signalled = -1;
  dev.signaledCopy(*copier, dst, src, 64, &flags[0], 2, &flags[1], 9);
  dev.waitValue(*writer, &flags[1], 9);
  dev.launchHostFunc(*writer, [&] { copied_when_signalled = dst[63]; });
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(flags[1], 0u) << "signalled before the flag";
  EXPECT_EQ(dst[0], 0) << "copied before the flag";
  dev.writeValue(dev.defaultStream(), &flags[0], 2);
  dev.synchronize(*writer, kLong);
  EXPECT_EQ(copied_when_signalled, 64);
  EXPECT_EQ(std::memcmp(dst, src, 64), 0);
  dev.deallocate(dst);
  dev.deallocate(src);
  dev.deallocate(flags);
}

// Counted steps over a ring of slots (ipc's eager messages): the step of
// number v copies slot v % slots, waits for its word to reach v - wait_back,
// signals v, and advances the counter; the slot is found when the step
// runs, from the counter.
TEST(HostDeviceSemaphores, CountedStepsWithSlotsCopySlotVModSlotsAfterWaitingForVMinusBack) {
  HostDevice dev;
  auto s = dev.createStream();
  auto* words = static_cast<uint32_t*>(dev.allocate(3 * sizeof(uint32_t)));
  uint32_t *counter = &words[0], *wait = &words[1], *signal = &words[2];
  *counter = 5;  // v = 6, 7, ..., 11: slots 2, 3, 0, 1, 2, 3
  *wait = 5;     // v - 4 <= 5 for the first four steps only
  *signal = 0;
  constexpr int kSlots = 4, kStride = 16, kSteps = 6;
  auto* ring = static_cast<unsigned char*>(dev.allocate(kSlots * kStride));
  auto* out = static_cast<unsigned char*>(dev.allocate(kSteps * kStride));
  for (int j = 0; j < kSlots * kStride; ++j) ring[j] = static_cast<unsigned char>(j / kStride + 1);
  std::memset(out, 0, kSteps * kStride);
  for (int k = 0; k < kSteps; ++k)
    dev.countedStep(*s, CountedStep{.counter = counter,
                                    .offset = 1,
                                    .advance = 1,
                                    .wait_addr = wait,
                                    .dst = out + k * kStride,
                                    .src = ring,
                                    .bytes = kStride,
                                    .signal_addr = signal,
                                    .wait_back = 4,
                                    .slots = kSlots,
                                    .src_stride = kStride});
  auto seen = [&](uint32_t* w) { return std::atomic_ref<uint32_t>(*w).load(); };
  for (int spins = 0; seen(signal) != 9 && spins < 2000; ++spins) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(seen(signal), 9u) << "the fifth step (v = 10) needs the word at 6";
  EXPECT_EQ(out[4 * kStride], 0) << "copied before its wait";
  std::atomic_ref<uint32_t>(*wait).store(7);
  dev.synchronize(*s, kLong);
  EXPECT_EQ(*signal, 11u);
  EXPECT_EQ(*counter, 11u);
  const int slot_of_step[kSteps] = {2, 3, 0, 1, 2, 3};
  for (int k = 0; k < kSteps; ++k)
    for (int b = 0; b < kStride; ++b)
      ASSERT_EQ(out[k * kStride + b], slot_of_step[k] + 1) << "step " << k << " byte " << b;
  dev.deallocate(out);
  dev.deallocate(ring);
  dev.deallocate(words);
}

// ----------------------------------------------------------------- compute

// Cases, operands and references: support/compute_reference.h. The host
// device rounds an accumulated product once, with the sum.
using test::AddData;
using test::compareWithReference;
using test::describe;
using test::kMatmulDTypes;
using test::makeAddData;
using test::makeMatmulData;
using test::MatmulCase;
using test::matmulCases;
using test::MatmulData;
using test::ProductRounding;

// Runs a case on the host device, through its buffers and its stream.
std::vector<std::byte> runHostMatmul(HostDevice& dev, Stream& s, const MatmulData& d) {
  auto put = [&](const std::vector<std::byte>& img) {
    void* p = dev.allocate(img.size());
    if (!img.empty()) std::memcpy(p, img.data(), img.size());  // data() may be null when empty
    return p;
  };
  MatmulArgs x = d.args;
  x.a = put(d.a);
  x.b = put(d.b);
  x.out = put(d.out);
  dev.matmul(s, x);
  dev.synchronize(s, kLong);
  std::vector<std::byte> got(d.out.size());
  std::memcpy(got.data(), x.out, got.size());
  dev.deallocate(const_cast<void*>(x.a));
  dev.deallocate(const_cast<void*>(x.b));
  dev.deallocate(x.out);
  return got;
}

TEST(HostDeviceCompute, MatmulMatchesADoubleReferenceForEveryTransposeAndDtype) {
  HostDevice dev;
  auto s = dev.createStream();
  uint32_t seed = 1;
  for (DType t : kMatmulDTypes)
    for (const MatmulCase& c : matmulCases()) {
      MatmulData d = makeMatmulData(t, c, seed++);
      EXPECT_EQ(compareWithReference(d, runHostMatmul(dev, *s, d), ProductRounding::Once), "")
          << describe(t, c);
    }
}

TEST(HostDeviceCompute, MatmulOverAnEmptySumStoresZerosOrKeepsOut) {
  HostDevice dev;
  for (DType t : kMatmulDTypes)
    for (bool acc : {false, true}) {
      MatmulCase c{3, 4, 0, false, false, acc, 1};
      MatmulData d = makeMatmulData(t, c, 7);
      if (acc) storeElement(d.out.data(), t, 6, PatternElement{0, 2.5});  // out[1][1]
      std::vector<std::byte> got = runHostMatmul(dev, dev.defaultStream(), d);
      EXPECT_EQ(compareWithReference(d, got, ProductRounding::Once), "") << describe(t, c);
      EXPECT_EQ(loadAsDouble(got.data(), t, 6), acc ? 2.5 : 0.0) << describe(t, c);
    }
}

TEST(HostDeviceCompute, MatmulRunsOnTheStreamInOrder) {
  HostDevice dev;
  Stream& s = dev.defaultStream();
  auto* a = static_cast<float*>(dev.allocate(4 * sizeof(float)));
  auto* b = static_cast<float*>(dev.allocate(4 * sizeof(float)));
  auto* out = static_cast<float*>(dev.allocate(4 * sizeof(float)));
  for (int i = 0; i < 4; ++i) a[i] = b[i] = static_cast<float>(i + 1);  // [[1 2] [3 4]]
  Gate gate;
  dev.launchHostFunc(s, gate.task());
  MatmulArgs x;
  x.m = x.n = x.k = x.lda = x.ldb = x.ldo = 2;
  x.a = a, x.b = b, x.out = out;
  dev.matmul(s, x);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(out[0], 0.0f) << "the matmul ran before the work enqueued before it";
  gate.open();
  dev.synchronize(s, kLong);
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{7, 10, 15, 22}));
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(out)})
    dev.deallocate(p);
}

TEST(HostDeviceCompute, AddGivesExactlyRoundedOrWrappedSumsForEveryDtypeAlsoInPlace) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kCount = 1001;
  for (DType t : kAllDTypes) {
    AddData d = makeAddData(t, kCount, 11);
    const std::size_t bytes = d.a.size();
    void* a = dev.allocate(bytes);
    void* b = dev.allocate(bytes);
    void* out = dev.allocate(bytes);
    std::memcpy(a, d.a.data(), bytes);
    std::memcpy(b, d.b.data(), bytes);
    dev.add(*s, out, a, b, t, kCount);  // out = a + b
    dev.add(*s, a, a, b, t, kCount);    // a += b
    dev.synchronize(*s, kLong);
    EXPECT_EQ(std::memcmp(out, d.sum.data(), bytes), 0) << toString(t);
    EXPECT_EQ(std::memcmp(a, d.sum.data(), bytes), 0) << toString(t) << " in place (out == a)";
    std::memcpy(a, d.a.data(), bytes);
    dev.add(*s, b, a, b, t, kCount);  // b = a + b
    dev.synchronize(*s, kLong);
    EXPECT_EQ(std::memcmp(b, d.sum.data(), bytes), 0) << toString(t) << " in place (out == b)";
    for (void* p : {a, b, out}) dev.deallocate(p);
  }
}

TEST(HostDeviceCompute, AddOverflowsWrapAround) {
  HostDevice dev;
  auto* i32 = static_cast<int32_t*>(dev.allocate(2 * sizeof(int32_t)));
  auto* i64 = static_cast<int64_t*>(dev.allocate(2 * sizeof(int64_t)));
  auto* u8 = static_cast<uint8_t*>(dev.allocate(2));
  i32[0] = std::numeric_limits<int32_t>::max(), i32[1] = 1;
  i64[0] = std::numeric_limits<int64_t>::min(), i64[1] = -1;
  u8[0] = 250, u8[1] = 10;
  dev.add(dev.defaultStream(), i32, i32, i32 + 1, DType::Int32, 1);
  dev.add(dev.defaultStream(), i64, i64, i64 + 1, DType::Int64, 1);
  dev.add(dev.defaultStream(), u8, u8, u8 + 1, DType::UInt8, 1);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(i32[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(i64[0], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(u8[0], 4);
  for (void* p : {static_cast<void*>(i32), static_cast<void*>(i64), static_cast<void*>(u8)})
    dev.deallocate(p);
}

// ------------------------------------------------------------------ reduce

constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                                      ReduceOp::Avg};

// Element k of source j: small signed integers, so that every dtype holds
// them, their sums and their products of up to 3 sources exactly (bfloat16:
// integers up to 256), and avg's truncation toward zero of negative sums
// shows; uint8 takes any byte, so that its sums and products wrap.
int64_t reduceSourceValue(DType t, int j, std::size_t k) {
  const auto i = static_cast<std::size_t>(j);
  if (t == DType::UInt8) return static_cast<int64_t>((k * 37 + i * 101 + 90) % 256);
  return static_cast<int64_t>((k * 7 + i * 3) % 11) - 5;
}

// `n` sources of `count` elements in the device's memory.
std::vector<void*> makeReduceSources(HostDevice& dev, DType t, int n, std::size_t count) {
  std::vector<void*> srcs;
  for (int j = 0; j < n; ++j) {
    void* p = dev.allocate(count * dtypeSize(t));
    for (std::size_t k = 0; k < count; ++k) {
      const int64_t v = reduceSourceValue(t, j, k);
      storeElement(p, t, k, PatternElement{v, static_cast<double>(v)});
    }
    srcs.push_back(p);
  }
  return srcs;
}

template <class T>
T combineReference(ReduceOp op, T acc, T v) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return acc + v;
    case ReduceOp::Prod: return acc * v;
    case ReduceOp::Min: return std::min(acc, v);
    case ReduceOp::Max: return std::max(acc, v);
  }
  return acc;
}

// The result of reducing the first `n` sources, computed here element by
// element, exactly (the values are small): floating dtypes in double (a
// product with a zero keeps its sign), integers in int64 (uint8 wraps when
// stored, where wrapping at every step ends too); then avg divides as the
// dtype does: integers truncate toward zero, float16, bfloat16 and float32
// in float, float64 in double.
std::vector<std::byte> reduceReference(DType t, ReduceOp op, int n, std::size_t count) {
  std::vector<std::byte> out(count * dtypeSize(t));
  for (std::size_t k = 0; k < count; ++k) {
    int64_t acc = reduceSourceValue(t, 0, k);
    double acc_f = static_cast<double>(acc);
    for (int j = 1; j < n; ++j) {
      const int64_t v = reduceSourceValue(t, j, k);
      acc = combineReference(op, acc, v);
      acc_f = combineReference(op, acc_f, static_cast<double>(v));
    }
    PatternElement e{acc, acc_f};
    if (op == ReduceOp::Avg) {
      if (t == DType::Float64) e.f = acc_f / n;
      else if (isFloating(t)) e.f = static_cast<float>(acc_f) / static_cast<float>(n);
      else e.i = (t == DType::UInt8 ? acc & 0xff : acc) / n;
    }
    storeElement(out.data(), t, k, e);
  }
  return out;
}

// Index of the first element of `got` that differs from `want` in its
// bytes, or -1.
int64_t firstDifferentElement(const void* got, const std::vector<std::byte>& want, DType t) {
  const std::size_t size = dtypeSize(t);
  for (std::size_t k = 0; k * size < want.size(); ++k)
    if (std::memcmp(static_cast<const std::byte*>(got) + k * size, want.data() + k * size, size))
      return static_cast<int64_t>(k);
  return -1;
}

std::string describeReduce(DType t, ReduceOp op, int n) {
  return fmt::format("{} {} of {} sources", toString(t), toString(op), n);
}

TEST(HostDeviceReduce, ReduceCombinesEverySourceInOrder) {
  HostDevice dev;
  EXPECT_TRUE(dev.supports(DeviceFeature::Reduce));
  auto s = dev.createStream();
  constexpr std::size_t kCount = 10007;  // a multiple of no block size
  constexpr int kSources = 3;
  for (DType t : kAllDTypes) {
    std::vector<void*> srcs = makeReduceSources(dev, t, kSources, kCount);
    void* dst = dev.allocate(kCount * dtypeSize(t));
    for (ReduceOp op : kAllReduceOps) {
      dev.reduce(*s, dst, srcs.data(), srcs.size(), t, op, kCount);
      dev.synchronize(*s, kLong);
      const int64_t k = firstDifferentElement(dst, reduceReference(t, op, kSources, kCount), t);
      EXPECT_EQ(k, -1) << describeReduce(t, op, kSources) << ": element " << k << " is "
                       << (k >= 0 ? loadAsDouble(dst, t, k) : 0);
    }
    dev.deallocate(dst);
    for (void* p : srcs) dev.deallocate(p);
  }
}

TEST(HostDeviceReduce, ReduceWrapsIntegersAndTruncatesTheirAverageTowardZero) {
  HostDevice dev;
  Stream& s = dev.defaultStream();
  auto* u8 = static_cast<uint8_t*>(dev.allocate(4));
  auto* i32 = static_cast<int32_t*>(dev.allocate(4 * sizeof(int32_t)));
  u8[0] = 200, u8[1] = 100, u8[2] = 7;  // 307 = 51 (mod 256)
  i32[0] = -4, i32[1] = -2, i32[2] = -1;
  const std::vector<const void*> u8_srcs = {u8, u8 + 1, u8 + 2};
  const std::vector<const void*> i32_srcs = {i32, i32 + 1, i32 + 2};
  dev.reduce(s, u8 + 3, u8_srcs.data(), u8_srcs.size(), DType::UInt8, ReduceOp::Sum, 1);
  dev.reduce(s, i32 + 3, i32_srcs.data(), i32_srcs.size(), DType::Int32, ReduceOp::Avg, 1);
  dev.synchronize(s, kLong);
  EXPECT_EQ(u8[3], 51);
  EXPECT_EQ(i32[3], -2);  // -7 / 3 = -2.33
  const std::vector<const void*> pair = {u8, u8 + 1};
  dev.reduce(s, u8 + 3, pair.data(), pair.size(), DType::UInt8, ReduceOp::Prod, 1);
  dev.synchronize(s, kLong);
  EXPECT_EQ(u8[3], static_cast<uint8_t>(200 * 100));  // 32
  dev.reduce(s, u8 + 3, u8_srcs.data(), u8_srcs.size(), DType::UInt8, ReduceOp::Avg, 1);
  dev.synchronize(s, kLong);
  EXPECT_EQ(u8[3], 51 / 3);  // the wrapped sum, divided
  dev.deallocate(u8);
  dev.deallocate(i32);
}

TEST(HostDeviceReduce, ReduceIntoOneOfItsSourcesReadsBeforeWriting) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kCount = 10007;
  constexpr int kSources = 3;
  for (DType t : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      std::vector<void*> srcs = makeReduceSources(dev, t, kSources, kCount);
      dev.reduce(*s, srcs[1], srcs.data(), srcs.size(), t, op, kCount);  // into the middle one
      dev.synchronize(*s, kLong);
      const int64_t k = firstDifferentElement(srcs[1], reduceReference(t, op, kSources, kCount), t);
      EXPECT_EQ(k, -1) << describeReduce(t, op, kSources) << " into source 1: element " << k;
      for (void* p : srcs) dev.deallocate(p);
    }
  }
}

TEST(HostDeviceReduce, ReduceOfNoElementsLeavesDstUntouched) {
  HostDevice dev;
  std::vector<void*> srcs = makeReduceSources(dev, DType::Int32, 3, 4);
  auto* dst = static_cast<int32_t*>(dev.allocate(4 * sizeof(int32_t)));
  std::fill(dst, dst + 4, 77);
  for (ReduceOp op : kAllReduceOps)
    dev.reduce(dev.defaultStream(), dst, srcs.data(), srcs.size(), DType::Int32, op, 0);
  dev.synchronize(dev.defaultStream(), kLong);
  EXPECT_EQ(std::vector<int32_t>(dst, dst + 4), std::vector<int32_t>(4, 77));
  dev.deallocate(dst);
  for (void* p : srcs) dev.deallocate(p);
}

TEST(HostDeviceReduce, ReduceOfOneSourceCopiesItAndItsAverageDividesByOne) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kCount = 5003;
  for (DType t : kAllDTypes) {
    std::vector<void*> srcs = makeReduceSources(dev, t, 1, kCount);
    const std::vector<std::byte> source(static_cast<std::byte*>(srcs[0]),
                                        static_cast<std::byte*>(srcs[0]) + kCount * dtypeSize(t));
    void* dst = dev.allocate(kCount * dtypeSize(t));
    for (ReduceOp op : kAllReduceOps) {
      std::memset(dst, 0, kCount * dtypeSize(t));
      dev.reduce(*s, dst, srcs.data(), srcs.size(), t, op, kCount);
      dev.synchronize(*s, kLong);
      EXPECT_EQ(firstDifferentElement(dst, source, t), -1) << describeReduce(t, op, 1);
    }
    dev.deallocate(dst);
    dev.deallocate(srcs[0]);
  }
}

TEST(HostDeviceReduce, ReduceTakesUpToKMaxReduceSources) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kCount = 1001;
  constexpr int kSources = static_cast<int>(kMaxReduceSources);
  for (DType t : kAllDTypes) {
    std::vector<void*> srcs = makeReduceSources(dev, t, kSources, kCount);
    void* dst = dev.allocate(kCount * dtypeSize(t));
    // Not prod: 16 factors leave the exact range of the floating dtypes.
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
      dev.reduce(*s, dst, srcs.data(), srcs.size(), t, op, kCount);
      dev.synchronize(*s, kLong);
      EXPECT_EQ(firstDifferentElement(dst, reduceReference(t, op, kSources, kCount), t), -1)
          << describeReduce(t, op, kSources);
    }
    dev.deallocate(dst);
    for (void* p : srcs) dev.deallocate(p);
  }
}

TEST(HostDeviceReduce, ReduceRefusesNoSourcesTooManyOrANullBuffer) {
  HostDevice dev;
  Stream& s = dev.defaultStream();
  int32_t words[2] = {};
  const std::vector<const void*> none;
  const std::vector<const void*> too_many(kMaxReduceSources + 1, &words[0]);
  std::string msg = messageOf(
      [&] { dev.reduce(s, &words[1], none.data(), none.size(), DType::Int32, ReduceOp::Sum, 1); });
  EXPECT_NE(msg.find("host reduce of 0 sources"), std::string::npos) << msg;
  EXPECT_THROW(
      dev.reduce(s, &words[1], too_many.data(), too_many.size(), DType::Int32, ReduceOp::Sum, 1),
      InternalError);
  const std::vector<const void*> one = {&words[0]};
  const std::vector<const void*> with_null = {&words[0], nullptr};
  EXPECT_THROW(dev.reduce(s, nullptr, one.data(), one.size(), DType::Int32, ReduceOp::Sum, 1),
               InternalError);
  EXPECT_THROW(
      dev.reduce(s, &words[1], with_null.data(), with_null.size(), DType::Int32, ReduceOp::Sum, 1),
      InternalError);
  dev.synchronize(s, kLong);  // nothing was enqueued, nothing failed
}

TEST(HostDeviceReduce, ReduceRunsInStreamOrderWithItsPointerListCopiedAtTheCall) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kCount = 3000;
  std::vector<void*> srcs = makeReduceSources(dev, DType::Float32, 3, kCount);
  auto* dst = static_cast<float*>(dev.allocate(kCount * sizeof(float)));
  Gate gate;
  dev.launchHostFunc(*s, gate.task());
  {
    std::vector<const void*> list(srcs.begin(), srcs.end());
    dev.reduce(*s, dst, list.data(), list.size(), DType::Float32, ReduceOp::Sum, kCount);
    std::fill(list.begin(), list.end(), static_cast<const void*>(dst));  // then freed
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dst[0], 0.0f) << "the reduce ran before the work enqueued before it";
  gate.open();
  dev.synchronize(*s, kLong);
  EXPECT_EQ(firstDifferentElement(dst, reduceReference(DType::Float32, ReduceOp::Sum, 3, kCount),
                                  DType::Float32),
            -1);
  dev.deallocate(dst);
  for (void* p : srcs) dev.deallocate(p);
}

// Two sources in rings of 4 slots (their counters wrap or not) and one
// plain: each ring's slot is the one its counter names when the reduce
// runs, not when it was enqueued.
TEST(HostDeviceReduce, ReduceFindsRingSourcesInTheSlotTheirCountersNameWhenItRuns) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kCount = 37, kSlots = 4, kStride = 160;
  auto* ring_a = static_cast<int32_t*>(dev.allocate(kSlots * kStride));
  auto* ring_b = static_cast<int32_t*>(dev.allocate(kSlots * kStride));
  auto* plain = static_cast<int32_t*>(dev.allocate(kCount * sizeof(int32_t)));
  auto* dst = static_cast<int32_t*>(dev.allocate(kCount * sizeof(int32_t)));
  auto* counters = static_cast<uint32_t*>(dev.allocate(2 * sizeof(uint32_t)));
  auto slot = [&](int32_t* ring, std::size_t k) { return ring + k * kStride / sizeof(int32_t); };
  for (std::size_t k = 0; k < kSlots; ++k)
    for (std::size_t i = 0; i < kCount; ++i) {
      slot(ring_a, k)[i] = static_cast<int32_t>(1000 * k + i);
      slot(ring_b, k)[i] = static_cast<int32_t>(100000 * k);
    }
  for (std::size_t i = 0; i < kCount; ++i) plain[i] = 7;
  counters[0] = counters[1] = 0;
  MessageStep sync;
  sync.counters[0] = &counters[0];
  sync.numbers[0] = 2;
  sync.slotted[0] = true;
  sync.counters[2] = &counters[1];
  sync.numbers[2] = 3;
  sync.slotted[2] = true;
  sync.slots = kSlots;
  sync.stride = kStride;
  Gate gate;
  dev.launchHostFunc(*s, gate.task());
  const std::vector<const void*> srcs = {ring_a, plain, ring_b};
  dev.reduce(*s, dst, srcs.data(), srcs.size(), DType::Int32, ReduceOp::Sum, kCount, sync);
  counters[0] = 5;           // 5 + 2: slot 3
  counters[1] = 0xFFFFFFFF;  // 2^32 - 1 + 3 wraps to 2: slot 2
  gate.open();
  dev.synchronize(*s, kLong);
  for (std::size_t i = 0; i < kCount; ++i)
    ASSERT_EQ(dst[i], static_cast<int32_t>(3000 + i + 7 + 200000)) << "element " << i;
  EXPECT_EQ(counters[0], 5u) << "no advance asked for";
  for (void* p : std::initializer_list<void*>{ring_a, ring_b, plain, dst, counters})
    dev.deallocate(p);
}

// Words of a reduce with sync: a host-numbered source (7) and a counted one
// (counter 10 + 2 = 12, advancing by 3), each waited for and signaled.
struct SyncWords {
  uint32_t wait_a = 0, wait_b = 0, signal_a = 0, signal_b = 0, counter = 10, release = 0;
  MessageStep sync() {
    MessageStep y;
    y.waits[1] = &wait_a;
    y.signals[1] = &signal_a;
    y.numbers[1] = 7;
    y.counters[2] = &counter;
    y.numbers[2] = 2;
    y.advances[2] = 3;
    y.waits[2] = &wait_b;
    y.signals[2] = &signal_b;
    y.release = &release;
    return y;
  }
  static void store(uint32_t& word, uint32_t v) {
    std::atomic_ref<uint32_t>(word).store(v, std::memory_order_release);
  }
  static uint32_t load(uint32_t& word) {
    return std::atomic_ref<uint32_t>(word).load(std::memory_order_acquire);
  }
};

// The reduction reads no source before every semaphore says so, then
// signals each source's number and advances the counted one.
TEST(HostDeviceReduce, ReduceWithSyncWaitsForEverySourceThenSignalsAndAdvances) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kCount = 5;
  std::vector<void*> srcs = makeReduceSources(dev, DType::Int32, 3, kCount);
  auto* dst = static_cast<int32_t*>(dev.allocate(kCount * sizeof(int32_t)));
  auto* words = static_cast<SyncWords*>(dev.allocate(sizeof(SyncWords)));
  *words = SyncWords{};
  std::fill(dst, dst + kCount, -7);
  const MessageStep sync = words->sync();
  dev.reduce(*s, dst, srcs.data(), srcs.size(), DType::Int32, ReduceOp::Sum, kCount, sync);
  SyncWords::store(words->wait_a, 7);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dst[0], -7) << "reduced before the counted source's semaphore said 12";
  EXPECT_EQ(SyncWords::load(words->signal_a), 0u);
  SyncWords::store(words->wait_b, 11);  // not yet
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dst[0], -7) << "reduced at 11, waiting for 12";
  SyncWords::store(words->wait_b, 12);
  dev.synchronize(*s, kLong);
  EXPECT_EQ(firstDifferentElement(dst, reduceReference(DType::Int32, ReduceOp::Sum, 3, kCount),
                                  DType::Int32),
            -1);
  EXPECT_EQ(words->signal_a, 7u);
  EXPECT_EQ(words->signal_b, 12u);
  EXPECT_EQ(words->counter, 13u);
  // No elements: the waits and the signals still happen, numbered on.
  SyncWords::store(words->wait_b, 15);
  const MessageStep next = words->sync();
  dev.reduce(*s, dst, srcs.data(), srcs.size(), DType::Int32, ReduceOp::Sum, 0, next);
  dev.synchronize(*s, kLong);
  EXPECT_EQ(words->signal_b, 15u);
  EXPECT_EQ(words->counter, 16u);
  dev.deallocate(words);
  dev.deallocate(dst);
  for (void* p : srcs) dev.deallocate(p);
}

// A wait that no peer will satisfy ends at the release word (abort): the
// step goes on and signals, so the stream drains.
TEST(HostDeviceReduce, ReduceWithSyncGoesOnWhenReleased) {
  HostDevice dev;
  auto s = dev.createStream();
  std::vector<void*> srcs = makeReduceSources(dev, DType::Int32, 3, 4);
  auto* dst = static_cast<int32_t*>(dev.allocate(4 * sizeof(int32_t)));
  auto* words = static_cast<SyncWords*>(dev.allocate(sizeof(SyncWords)));
  *words = SyncWords{};
  const MessageStep sync = words->sync();
  dev.reduce(*s, dst, srcs.data(), srcs.size(), DType::Int32, ReduceOp::Sum, 4, sync);
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(SyncWords::load(words->signal_b), 0u);
  SyncWords::store(words->release, 1);
  dev.synchronize(*s, kLong);
  EXPECT_EQ(words->signal_a, 7u);
  EXPECT_EQ(words->signal_b, 12u);
  dev.deallocate(words);
  dev.deallocate(dst);
  for (void* p : srcs) dev.deallocate(p);
}

// Pushes come first and signal before the step waits for any source (a
// peer waits for them before it can answer): a counted push into a ring of
// 4 slots, after its slot's previous message was freed.
TEST(HostDeviceReduce, ReduceWithSyncPushesAndSignalsBeforeItWaits) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kCount = 6, kSlots = 4, kStride = 32;
  std::vector<void*> srcs = makeReduceSources(dev, DType::Int32, 3, kCount);
  auto* dst = static_cast<int32_t*>(dev.allocate(kCount * sizeof(int32_t)));
  auto* ring = static_cast<int32_t*>(dev.allocate(kSlots * kStride));
  auto* words = static_cast<SyncWords*>(dev.allocate(sizeof(SyncWords)));
  auto* push_words = static_cast<uint32_t*>(dev.allocate(3 * sizeof(uint32_t)));  // counter, free, done
  *words = SyncWords{};
  push_words[0] = 5;  // v = 5 + 1 = 6: slot 2, after message 6 - 4 = 2 was freed
  push_words[1] = 2;
  push_words[2] = 0;
  std::fill(ring, ring + kSlots * kStride / sizeof(int32_t), 0);
  MessageStep sync = words->sync();
  sync.slots = kSlots;
  sync.stride = kStride;
  MessageStep::Push& push = sync.pushes[0];
  sync.push_count = 1;
  push.counter = &push_words[0];
  push.number = 1;
  push.advance = 1;
  push.wait_back = kSlots;
  push.wait = &push_words[1];
  push.dst = ring;
  push.src = srcs[0];
  push.bytes = kCount * sizeof(int32_t);
  push.signal = &push_words[2];
  push.slotted = true;
  dev.reduce(*s, dst, srcs.data(), srcs.size(), DType::Int32, ReduceOp::Sum, kCount, sync);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (SyncWords::load(push_words[2]) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(SyncWords::load(push_words[2]), 6u) << "the push did not signal while the step waits";
  EXPECT_EQ(std::memcmp(ring + 2 * kStride / sizeof(int32_t), srcs[0], kCount * sizeof(int32_t)), 0)
      << "the push is not in slot 6 % 4";
  EXPECT_EQ(SyncWords::load(words->signal_a), 0u) << "signaled a source before its wait";
  SyncWords::store(words->wait_a, 7);
  SyncWords::store(words->wait_b, 12);
  dev.synchronize(*s, kLong);
  EXPECT_EQ(push_words[0], 6u) << "the push's counter advances by 1";
  EXPECT_EQ(words->signal_b, 12u);
  EXPECT_EQ(firstDifferentElement(dst, reduceReference(DType::Int32, ReduceOp::Sum, 3, kCount),
                                  DType::Int32),
            -1);
  for (void* p : std::initializer_list<void*>{words, push_words, ring, dst}) dev.deallocate(p);
  for (void* p : srcs) dev.deallocate(p);
}

// DeviceMessages::messageStep (the default's counted steps on the host device): a
// push into slot v % 4 of a ring, a pull out of another ring's slot and a
// plain copy; each numbered from its counter, waited for, signaled, and the
// counters advanced.
TEST(HostDeviceReduce, MessageStepPushesPullsAndCopiesInOrder) {
  HostDevice dev;
  auto s = dev.createStream();
  constexpr std::size_t kBytes = 16, kSlots = 4, kStride = 32;
  auto* mem = static_cast<char*>(dev.allocate(4 * kSlots * kStride));
  char* out_ring = mem;
  char* in_ring = mem + kSlots * kStride;
  char* src = mem + 2 * kSlots * kStride;
  char* dst = src + kStride;
  char* plain = dst + kStride;
  auto* w = static_cast<uint32_t*>(dev.allocate(8 * sizeof(uint32_t)));
  // push counter, push's slot freed, push signal, pull counter, pull ready, pull signal
  const uint32_t start[8] = {6, 3, 0, 1, 0, 0, 0, 0};
  std::memcpy(w, start, sizeof start);
  std::memset(mem, 0, 4 * kSlots * kStride);
  std::memset(src, 'a', kBytes);
  std::memset(in_ring + 2 * kStride, 'b', kBytes);  // the pull's slot: (1 + 1) % 4
  MessageStep m;
  m.slots = kSlots;
  m.stride = kStride;
  m.push_count = 1;
  m.pushes[0] = {.counter = &w[0], .number = 1, .advance = 1, .wait_back = kSlots, .wait = &w[1],
                 .dst = out_ring, .src = src, .bytes = kBytes, .signal = &w[2], .slotted = true};
  m.pull_count = 2;
  m.pulls[0] = {.dst = plain, .src = src, .bytes = kBytes};
  m.pulls[1] = {.counter = &w[3], .number = 1, .advance = 1, .wait = &w[4], .dst = dst,
                .src = in_ring, .bytes = kBytes, .signal = &w[5], .slotted = true};
  dev.messageStep(*s, m);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::atomic_ref<uint32_t>(w[2]).load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(std::atomic_ref<uint32_t>(w[2]).load(), 7u) << "the push waits for 7 - 4 = 3 only";
  EXPECT_EQ(std::memcmp(out_ring + 3 * kStride, src, kBytes), 0) << "the push is not in slot 7 % 4";
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(std::atomic_ref<uint32_t>(w[5]).load(), 0u) << "the pull did not wait for message 2";
  std::atomic_ref<uint32_t>(w[4]).store(2);
  dev.synchronize(*s, kLong);
  EXPECT_EQ(std::memcmp(dst, in_ring + 2 * kStride, kBytes), 0);
  EXPECT_EQ(std::memcmp(plain, src, kBytes), 0);
  EXPECT_EQ(w[0], 7u);
  EXPECT_EQ(w[3], 2u);
  EXPECT_EQ(w[5], 2u);
  dev.deallocate(w);
  dev.deallocate(mem);
}

// Direct delivery (device.h), counted parts over a ring of 2 slots: a pull
// enqueued first resets its mark and posts its number; the push then sees
// the post, writes straight into the pull's buffer and marks the message,
// and the pull skips its copy (the slot keeps its poison). The next
// message's push runs before its pull posts: it goes through its slot, and
// the pull copies it out.
TEST(HostDeviceReduce, AMessageWhosePullPostedFirstSkipsTheSlot) {
  HostDevice dev;
  auto s = dev.createStream();
  auto s2 = dev.createStream();
  constexpr std::size_t kBytes = 40, kSlots = 2, kStride = 64;
  auto* mem = static_cast<char*>(dev.allocate(kSlots * kStride + 2 * kStride));
  char* ring = mem;
  char* src = mem + kSlots * kStride;
  char* dst = src + kStride;
  std::memset(ring, 'p', kSlots * kStride);
  auto* w = static_cast<uint32_t*>(dev.allocate(8 * sizeof(uint32_t)));
  // push counter, "free" (pull -> push), "done" (push -> pull), pull counter, posted, marks[2]
  const uint32_t start[8] = {5, 5, 5, 5, 5, 0, 0, 0};
  std::memcpy(w, start, sizeof start);
  MessageStep m;
  m.slots = kSlots;
  m.stride = kStride;
  const MessageStep::Copy push{.counter = &w[0], .number = 1, .advance = 1, .wait_back = kSlots,
                               .wait = &w[1], .dst = ring, .src = src, .bytes = kBytes,
                               .signal = &w[2], .slotted = true, .direct = dst,
                               .posted = &w[4], .mark = &w[5]};
  const MessageStep::Copy pull{.counter = &w[3], .number = 1, .advance = 1, .wait = &w[2],
                               .dst = dst, .src = ring, .bytes = kBytes, .signal = &w[1],
                               .slotted = true, .posted = &w[4], .mark = &w[5]};
  auto enqueue = [&](Stream& on, const MessageStep::Copy& c, bool is_push) {
    MessageStep one = m;
    (is_push ? one.pushes[one.push_count++] : one.pulls[one.pull_count++]) = c;
    dev.messageStep(on, one);
  };
  // Message 6 (slot 0): the pull first.
  std::memset(src, 'a', kBytes);
  enqueue(*s2, pull, false);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::atomic_ref<uint32_t>(w[4]).load() != 6 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(std::atomic_ref<uint32_t>(w[4]).load(), 6u) << "the pull did not post";
  EXPECT_EQ(std::atomic_ref<uint32_t>(w[5]).load(), directMarkReset(6))
      << "the pull posts after resetting its mark";
  enqueue(*s, push, true);
  dev.synchronize(*s, kLong);
  dev.synchronize(*s2, kLong);
  EXPECT_EQ(std::memcmp(dst, src, kBytes), 0);
  EXPECT_EQ(ring[0], 'p') << "a direct message went through its slot";
  EXPECT_EQ(w[5], 6u) << "the push marks message 6 direct";
  EXPECT_EQ(w[2], 6u);
  EXPECT_EQ(w[1], 6u) << "the pull still frees the slot's number";
  // Message 7 (slot 1): the push first, into its slot.
  std::memset(src, 'b', kBytes);
  enqueue(*s, push, true);
  dev.synchronize(*s, kLong);
  EXPECT_EQ(std::memcmp(ring + kStride, src, kBytes), 0) << "message 7 is not in slot 1";
  EXPECT_EQ(dst[0], 'a') << "a push that saw no post wrote into the pull's buffer";
  enqueue(*s2, pull, false);
  dev.synchronize(*s2, kLong);
  EXPECT_EQ(std::memcmp(dst, src, kBytes), 0) << "the pull did not copy message 7 out";
  EXPECT_EQ(w[6], directMarkReset(7));
  EXPECT_EQ(w[0], 7u);
  EXPECT_EQ(w[3], 7u);
  EXPECT_EQ(w[4], 7u);
  dev.deallocate(w);
  dev.deallocate(mem);
}

// Inline parts (device.h): a push writes 8-byte lines, data word low and
// flag high (the last word zero-padded), with no separate "done"; a pull
// enqueued before it waits for every line's flag, then copies the data out
// and signals, and the counters advance.
TEST(HostDeviceReduce, MessageStepInLinesCarriesTheDataWithItsFlag) {
  HostDevice dev;
  auto s = dev.createStream();
  auto s2 = dev.createStream();
  constexpr std::size_t kBytes = 7, kSlots = 4, kStride = 64;
  ASSERT_EQ(inlineLineBytes(kBytes), 16u);
  auto* mem = static_cast<char*>(dev.allocate(kSlots * kStride + 2 * kStride));
  char* ring = mem;
  char* src = mem + kSlots * kStride;
  char* dst = src + kStride;
  std::memset(mem, 0, kSlots * kStride + 2 * kStride);
  std::memcpy(src, "abcdefg", kBytes);
  auto* w = static_cast<uint32_t*>(dev.allocate(6 * sizeof(uint32_t)));
  // push counter, push's slot freed, push signal, pull counter, pull signal
  const uint32_t start[6] = {5, 2, 0, 5, 0, 0};
  std::memcpy(w, start, sizeof start);
  MessageStep pull;
  pull.slots = kSlots;
  pull.stride = kStride;
  pull.pull_count = 1;
  pull.pulls[0] = {.counter = &w[3], .number = 1, .advance = 1, .dst = dst, .src = ring,
                   .bytes = kBytes, .signal = &w[4], .slotted = true, .inline_flags = true};
  dev.messageStep(*s2, pull);  // v = 6: slot 2, flag 6
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(std::atomic_ref<uint32_t>(w[4]).load(), 0u) << "the pull did not wait for its lines";
  MessageStep push = pull;
  push.pull_count = 0;
  push.push_count = 1;
  push.pushes[0] = {.counter = &w[0], .number = 1, .advance = 1, .wait_back = kSlots,
                    .wait = &w[1], .dst = ring, .src = src, .bytes = kBytes, .signal = &w[2],
                    .slotted = true, .inline_flags = true};
  dev.messageStep(*s, push);
  dev.synchronize(*s, kLong);
  dev.synchronize(*s2, kLong);
  uint64_t lines[2];
  std::memcpy(lines, ring + 2 * kStride, sizeof lines);
  EXPECT_EQ(lines[0], uint64_t{6} << 32 | 0x64636261u);  // "abcd", little endian
  EXPECT_EQ(lines[1], uint64_t{6} << 32 | 0x00676665u);  // "efg" and a zero byte
  EXPECT_EQ(std::memcmp(dst, src, kBytes), 0);
  EXPECT_EQ(dst[kBytes], 0) << "the pull wrote past the message";
  EXPECT_EQ(w[0], 6u);
  EXPECT_EQ(w[2], 6u) << "the push still stores its number into its signal";
  EXPECT_EQ(w[3], 6u);
  EXPECT_EQ(w[4], 6u);
  dev.deallocate(w);
  dev.deallocate(mem);
}

// Number 0 (after the wrap) is flagged 0x80000000: zeroed memory, what a
// slot holds before its first message, does not satisfy its pull; nor does
// the slot's previous message, flagged v - slots.
TEST(HostDeviceReduce, LinesOfZeroedMemoryOrOfTheSlotsLastLapAreNotAMessage) {
  EXPECT_EQ(inlineFlag(0), 0x80000000u);
  EXPECT_EQ(inlineFlag(7), 7u);
  HostDevice dev;
  auto s = dev.createStream();
  auto s2 = dev.createStream();
  constexpr std::size_t kBytes = 8;
  auto* mem = static_cast<char*>(dev.allocate(64));
  std::memset(mem, 0, 64);
  char* slot = mem;
  char* src = mem + 32;
  char* dst = mem + 48;
  std::memcpy(src, "12345678", kBytes);
  auto* sig = static_cast<uint32_t*>(dev.allocate(sizeof(uint32_t)));
  *sig = 0;
  for (uint32_t v : {0u, 9u}) {
    if (v == 9) {  // the slot holds message 1 (9 - 8 slots)
      for (int k = 0; k < 2; ++k) {
        const uint64_t stale = uint64_t{1} << 32 | 0x30303030u;
        std::memcpy(slot + 8 * k, &stale, 8);
      }
    }
    MessageStep pull;
    pull.pull_count = 1;
    pull.pulls[0] = {.number = v, .dst = dst, .src = slot, .bytes = kBytes, .signal = sig,
                     .inline_flags = true};
    std::atomic_ref<uint32_t>(*sig).store(12345);
    dev.messageStep(*s2, pull);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(std::atomic_ref<uint32_t>(*sig).load(), 12345u)
        << "message " << v << " was read out of lines that do not hold it";
    MessageStep push;
    push.push_count = 1;
    push.pushes[0] = {.number = v, .dst = slot, .src = src, .bytes = kBytes, .inline_flags = true};
    dev.messageStep(*s, push);
    dev.synchronize(*s2, kLong);
    EXPECT_EQ(*sig, v);
    EXPECT_EQ(std::memcmp(dst, src, kBytes), 0);
    std::memset(dst, 0, kBytes);
  }
  dev.deallocate(sig);
  dev.deallocate(mem);
}

// A reduction source in lines: the reduction waits for every line's flag
// (no wait word), reads the data out of them and signals; the other sources
// are read where they are.
TEST(HostDeviceReduce, ReduceReadsASourceInLinesOnceItsLinesAreFlagged) {
  HostDevice dev;
  auto s = dev.createStream();
  auto s2 = dev.createStream();
  constexpr std::size_t kCount = 5;
  std::vector<void*> srcs = makeReduceSources(dev, DType::Int32, 3, kCount);
  auto* lines = static_cast<char*>(dev.allocate(inlineLineBytes(kCount * sizeof(int32_t))));
  std::memset(lines, 0, inlineLineBytes(kCount * sizeof(int32_t)));
  auto* dst = static_cast<int32_t*>(dev.allocate(kCount * sizeof(int32_t)));
  std::fill(dst, dst + kCount, -7);
  auto* sig = static_cast<uint32_t*>(dev.allocate(sizeof(uint32_t)));
  *sig = 0;
  MessageStep sync;
  sync.numbers[1] = 9;
  sync.signals[1] = sig;
  sync.inline_flags[1] = true;
  const void* from[3] = {srcs[0], lines, srcs[2]};
  dev.reduce(*s, dst, from, 3, DType::Int32, ReduceOp::Sum, kCount, sync);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dst[0], -7) << "reduced before the source's lines were flagged";
  MessageStep push;
  push.push_count = 1;
  push.pushes[0] = {.number = 9, .dst = lines, .src = srcs[1], .bytes = kCount * sizeof(int32_t),
                    .inline_flags = true};
  dev.messageStep(*s2, push);
  dev.synchronize(*s, kLong);
  EXPECT_EQ(firstDifferentElement(dst, reduceReference(DType::Int32, ReduceOp::Sum, 3, kCount),
                                  DType::Int32),
            -1);
  EXPECT_EQ(*sig, 9u);
  for (void* p : std::initializer_list<void*>{sig, dst, lines}) dev.deallocate(p);
  for (void* p : srcs) dev.deallocate(p);
}

// ------------------------------------------------------------------ timing

TEST(HostDeviceTiming, ElapsedMsMeasuresTheWorkBetweenTwoRecords) {
  HostDevice dev;
  auto s = dev.createStream();
  auto from = dev.createTimingEvent();
  auto to = dev.createTimingEvent();
  dev.record(*from, *s);
  dev.launchHostFunc(*s, [] { std::this_thread::sleep_for(20ms); });
  dev.record(*to, *s);
  dev.synchronize(*to, kLong);
  const double ms = dev.elapsedMs(*from, *to);
  EXPECT_GE(ms, 15.0);
  EXPECT_LE(ms, 500.0);
  // The stamp is when the stream reached the record, not when it was asked.
  auto late = dev.createTimingEvent();
  Gate gate;
  dev.launchHostFunc(*s, gate.task());
  dev.record(*late, *s);
  std::this_thread::sleep_for(30ms);
  gate.open();
  dev.synchronize(*late, kLong);
  EXPECT_GE(dev.elapsedMs(*to, *late), 25.0);
  EXPECT_LE(dev.elapsedMs(*late, *to), -25.0);
}

TEST(HostDeviceTiming, TimingEventsOrderStreamsLikeOtherEvents) {
  HostDevice dev;
  auto a = dev.createStream();
  auto b = dev.createStream();
  auto e = dev.createTimingEvent();
  std::atomic<bool> first_done{false};
  std::atomic<bool> seen{false};
  dev.launchHostFunc(*a, [&] {
    std::this_thread::sleep_for(20ms);
    first_done = true;
  });
  dev.record(*e, *a);
  dev.wait(*b, *e);
  dev.launchHostFunc(*b, [&] { seen = first_done.load(); });
  dev.synchronize(*b, kLong);
  EXPECT_TRUE(seen.load());
  EXPECT_TRUE(dev.query(*e));
}

TEST(HostDeviceTiming, ElapsedMsNeedsTwoCompletedTimingEvents) {
  HostDevice dev;
  Stream& s = dev.defaultStream();
  auto timing = dev.createTimingEvent();
  auto plain = dev.createEvent();
  auto never = dev.createTimingEvent();
  dev.record(*timing, s);
  dev.record(*plain, s);
  dev.synchronize(s, kLong);
  std::string msg = messageOf([&] { dev.elapsedMs(*plain, *timing); });
  EXPECT_NE(msg.find("is not a timing event"), std::string::npos) << msg;
  EXPECT_THROW(dev.elapsedMs(*plain, *timing), InternalError);
  msg = messageOf([&] { dev.elapsedMs(*timing, *never); });
  EXPECT_NE(msg.find("was never recorded"), std::string::npos) << msg;
  Gate gate;
  dev.launchHostFunc(s, gate.task());
  auto pending = dev.createTimingEvent();
  dev.record(*pending, s);
  msg = messageOf([&] { dev.elapsedMs(*timing, *pending); });
  EXPECT_NE(msg.find("has not completed"), std::string::npos) << msg;
  gate.open();
  dev.synchronize(s, kLong);
  EXPECT_GE(dev.elapsedMs(*timing, *pending), 0.0);
}

// ------------------------------------------------------- misc, registry

TEST(HostDeviceInfo, DescribesItselfWithItsPid) {
  HostDevice dev;
  EXPECT_EQ(dev.kind(), "host");
  EXPECT_EQ(dev.describe(), "host (pid " + std::to_string(getpid()) + ")");
}

TEST(HostDeviceInfo, SupportsEveryOptionalPartButANativeStreamAndGraphs) {
  HostDevice dev;
  for (DeviceFeature f : {DeviceFeature::Ipc, DeviceFeature::StreamSemaphore,
                          DeviceFeature::Compute, DeviceFeature::Timing,
                          DeviceFeature::Reduce})
    EXPECT_TRUE(dev.supports(f)) << static_cast<int>(f);
  // ipc's protocol: its own, with counted and inline parts.
  EXPECT_EQ(dev.messages(), static_cast<DeviceMessages*>(&dev));
  std::unique_ptr<DeviceMessages> generic;
  EXPECT_EQ(&messagesOf(dev, generic), static_cast<DeviceMessages*>(&dev));
  EXPECT_EQ(generic, nullptr);
  EXPECT_TRUE(dev.supportsCounted());
  EXPECT_TRUE(dev.supportsInline());
  EXPECT_EQ(dev.nativeStream(dev.defaultStream()), nullptr);
  EXPECT_FALSE(dev.supports(DeviceFeature::Graphs));
  try {
    dev.beginCapture(dev.defaultStream());
    FAIL() << "beginCapture on the host device";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("does not support graphs"), std::string::npos)
        << e.what();
  }
}

// The smallest device: everything required, nothing optional.
class BareDevice : public Device {
 public:
  std::string_view kind() const override { return "bare"; }
  std::string describe() const override { return "bare"; }
  bool supports(DeviceFeature) const override { return false; }
  void* allocate(std::size_t) override { return nullptr; }
  void deallocate(void*) override {}
  CheckRecord* allocateCheckRecords(std::size_t) override { return nullptr; }
  void freeCheckRecords(CheckRecord*) override {}
  Stream& defaultStream() override { return stream_; }
  std::unique_ptr<Stream> createStream() override { return nullptr; }
  std::unique_ptr<Stream> wrapStream(void*) override { return nullptr; }
  std::unique_ptr<Event> createEvent() override { return nullptr; }
  void record(Event&, Stream&) override {}
  void wait(Stream&, Event&) override {}
  bool query(Event&) override { return true; }
  void synchronize(Event&, Duration) override {}
  void synchronize(Stream&, Duration) override {}
  void fill(Stream&, void*, DType, std::size_t, int64_t, int64_t) override {}
  void copy(Stream&, void*, const void*, std::size_t) override {}
  void check(Stream&, const void*, DType, std::size_t, int64_t, int64_t, Tolerance, CheckRecord*,
             int64_t) override {}
  void launchHostFunc(Stream&, std::function<void()>) override {}

 private:
  Stream stream_;
};

TEST(DeviceOptionalParts, DefaultsThrowNamingTheDevice) {
  BareDevice dev;
  std::string msg = messageOf([&] { dev.exportMemory(nullptr); });
  EXPECT_NE(msg.find("device 'bare' does not support ipc"), std::string::npos) << msg;
  EXPECT_THROW(dev.importMemory(MemoryHandle{}), BackendError);
  EXPECT_THROW(dev.closeImported(nullptr), BackendError);
  uint32_t word = 0;
  msg = messageOf([&] { dev.waitValue(dev.defaultStream(), &word, 1); });
  EXPECT_NE(msg.find("device 'bare' does not support stream semaphores"), std::string::npos)
      << msg;
  EXPECT_THROW(dev.writeValue(dev.defaultStream(), &word, 1), BackendError);
  msg = messageOf([&] { dev.matmul(dev.defaultStream(), MatmulArgs{}); });
  EXPECT_NE(msg.find("device 'bare' does not support compute (matmul called)"), std::string::npos)
      << msg;
  EXPECT_THROW(dev.add(dev.defaultStream(), &word, &word, &word, DType::Int32, 1), BackendError);
  const void* const srcs[] = {&word};
  msg = messageOf([&] {
    dev.reduce(dev.defaultStream(), &word, srcs, 1, DType::Int32, ReduceOp::Sum, 1);
  });
  EXPECT_NE(msg.find("device 'bare' does not support reduce (reduce called)"), std::string::npos)
      << msg;
  msg = messageOf([&] { dev.createTimingEvent(); });
  EXPECT_NE(msg.find("device 'bare' does not support timing"), std::string::npos) << msg;
  Event e;
  EXPECT_THROW(dev.elapsedMs(e, e), BackendError);
  EXPECT_EQ(dev.nativeStream(dev.defaultStream()), nullptr);
  // No protocol of its own: messagesOf gives the generic one, without
  // counted or inline parts.
  EXPECT_EQ(dev.messages(), nullptr);
  std::unique_ptr<DeviceMessages> generic;
  DeviceMessages& m = messagesOf(dev, generic);
  EXPECT_EQ(&m, generic.get());
  EXPECT_FALSE(m.supportsCounted());
  EXPECT_FALSE(m.supportsInline());
  EXPECT_EQ(m.inlineFlagsMax(), 0u);
  msg = messageOf([&] { m.countedStep(dev.defaultStream(), CountedStep{.counter = &word}); });
  EXPECT_NE(msg.find("device 'bare' does not support counted semaphores"), std::string::npos)
      << msg;
}

TEST(DeviceRegistry, HostIsAlwaysRegistered) {
  bool found = false;
  for (const DeviceInfo& d : registeredDevices()) found |= d.name == "host";
  EXPECT_TRUE(found);
  auto dev = createDevice("host", 3);
  EXPECT_EQ(dev->kind(), "host");
}

TEST(DeviceRegistry, AutoPicksCudaWhenAvailableElseHost) {
  std::string expected = "host";
  for (const DeviceInfo& d : registeredDevices())
  {
    std::string why;
    if (d.name == "cuda" && d.available(&why)) expected = "cuda";
  }
  EXPECT_EQ(createDevice("auto", 0)->kind(), expected);
}

TEST(DeviceRegistry, UnknownDeviceListsTheKnownOnes) {
  std::string msg = messageOf([] { createDevice("tpu", 0); });
  EXPECT_NE(msg.find("--device tpu: unknown device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"host\""), std::string::npos) << msg;
  EXPECT_THROW(createDevice("tpu", 0), UsageError);
}

TEST(DeviceRegistry, UnavailableDeviceSaysWhy) {
  static bool registered = false;  // gtest may repeat the test in one process
  if (!registered) {
    registerDevice(DeviceInfo{"test-unavailable",
                              [](std::string* why) {
                                if (why) *why = "no such hardware in tests";
                                return false;
                              },
                              [](int, const Settings&) -> std::unique_ptr<Device> {
                                return nullptr;
                              }});
    registered = true;
  }
  std::string msg = messageOf([] { createDevice("test-unavailable", 0); });
  EXPECT_EQ(msg, "--device test-unavailable: not available: no such hardware in tests");
  EXPECT_THROW(createDevice("test-unavailable", 0), UsageError);
  EXPECT_THROW(
      registerDevice(DeviceInfo{"host", [](std::string*) { return true; },
                                [](int, const Settings&) { return std::unique_ptr<Device>(); }}),
      UsageError);
}

}  // namespace
}  // namespace hir
