// The host device's bounds: each stream's run-ahead window (the host blocks,
// never forever), teardown after a failure or cancel(), and allocations the
// machine cannot hold, refused with the numbers (device/host_device.h,
// device/host_memory.h).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/gate.h"
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/check.h"
#include "device/host_device.h"
#include "device/host_memory.h"

namespace hir {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Duration kLong = std::chrono::seconds(20);

using test::Gate;
using test::messageOf;

// ------------------------------------------------------------ run-ahead

TEST(HostDeviceRunAhead, TheDefaultWindowIsAThousandTwentyFourTasks) {
  HostDevice dev;
  EXPECT_EQ(dev.runAheadWindow(), 1024u);
  dev.setRunAheadWindow(0);
  EXPECT_EQ(dev.runAheadWindow(), 1u);  // at least one
}

TEST(HostDeviceRunAhead, TheHostBlocksWhileTheQueueIsFullAndGoesOnWhenItDrains) {
  HostDevice dev;
  dev.setRunAheadWindow(4);
  Stream& s = dev.defaultStream();
  Gate gate;
  std::atomic<int> ran{0};
  dev.launchHostFunc(s, gate.task());
  std::this_thread::sleep_for(20ms);  // the worker took the gate: the queue is empty
  for (int i = 0; i < 4; ++i) dev.launchHostFunc(s, [&] { ++ran; });
  auto fifth = std::async(std::launch::async, [&] { dev.launchHostFunc(s, [&] { ++ran; }); });
  EXPECT_EQ(fifth.wait_for(100ms), std::future_status::timeout)
      << "an enqueue onto a full queue returned";
  gate.open();
  EXPECT_EQ(fifth.wait_for(5s), std::future_status::ready);
  fifth.get();
  dev.synchronize(s, kLong);
  EXPECT_EQ(ran.load(), 5);
}

// A long loop of small tasks never has more than the window queued.
TEST(HostDeviceRunAhead, AHundredThousandTasksStayWithinTheWindow) {
  HostDevice dev;
  dev.setRunAheadWindow(64);
  Stream& s = dev.defaultStream();
  std::atomic<uint64_t> ran{0};
  uint64_t most_ahead = 0;
  for (uint64_t i = 1; i <= 100000; ++i) {
    dev.launchHostFunc(s, [&] { ran.fetch_add(1, std::memory_order_relaxed); });
    most_ahead = std::max(most_ahead, i - ran.load(std::memory_order_relaxed));
  }
  dev.synchronize(s, kLong);
  EXPECT_EQ(ran.load(), 100000u);
  // Queued plus the one running (taken off the queue, not yet counted).
  EXPECT_LE(most_ahead, 64u + 1u);
}

TEST(HostDeviceRunAhead, AFullWindowThatDoesNotDrainTimesOutNamingTheStream) {
  HostDevice dev(Duration(200));
  dev.setRunAheadWindow(2);
  auto s = dev.createStream();
  Gate gate;
  dev.launchHostFunc(*s, gate.task());
  std::this_thread::sleep_for(20ms);
  dev.launchHostFunc(*s, [] {});
  dev.launchHostFunc(*s, [] {});
  const auto t0 = Clock::now();
  try {
    dev.launchHostFunc(*s, [] {});
    FAIL() << "an enqueue onto a stuck full queue returned";
  } catch (const TimeoutError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("host stream 1 took no task in 200 ms while 2 were queued on it (its "
                       "run-ahead window is full)"),
              std::string::npos)
        << msg;
  }
  EXPECT_GE(Clock::now() - t0, 190ms);
  EXPECT_LT(Clock::now() - t0, 5s);
  // The device failed: the rest is skipped, and synchronize says why.
  std::string msg = messageOf([&] { dev.synchronize(*s, kLong); });
  EXPECT_NE(msg.find("run-ahead window is full"), std::string::npos) << msg;
  gate.open();
}

// A task that enqueues work itself never waits for room: it might wait for
// a stream that waits for it.
TEST(HostDeviceRunAhead, EnqueuesFromAStreamTaskNeverBlock) {
  HostDevice dev;
  dev.setRunAheadWindow(1);
  auto a = dev.createStream();
  auto b = dev.createStream();
  Gate gate;
  dev.launchHostFunc(*b, gate.task());
  std::this_thread::sleep_for(20ms);
  std::atomic<int> ran{0};
  dev.launchHostFunc(*a, [&] {
    for (int i = 0; i < 10; ++i) dev.launchHostFunc(*b, [&] { ++ran; });
  });
  dev.synchronize(*a, Duration(5000));  // would time out had the task blocked on b
  gate.open();
  dev.synchronize(*b, kLong);
  EXPECT_EQ(ran.load(), 10);
}

// The host blocks on a full stream whose head waits for an event of another
// stream: the event's record was enqueued before the wait, so it runs
// without the host and the window drains.
TEST(HostDeviceRunAhead, AFullWindowBehindAnEventWaitDrainsWithoutTheHost) {
  HostDevice dev(Duration(10000));
  dev.setRunAheadWindow(2);
  auto a = dev.createStream();
  auto b = dev.createStream();
  auto e = dev.createEvent();
  Gate gate;
  dev.launchHostFunc(*b, gate.task());
  dev.record(*e, *b);
  dev.wait(*a, *e);
  std::atomic<int> ran{0};
  std::thread opener([&] {
    std::this_thread::sleep_for(100ms);
    gate.open();
  });
  for (int i = 0; i < 20; ++i) dev.launchHostFunc(*a, [&] { ++ran; });  // blocks until then
  dev.synchronize(*a, kLong);
  opener.join();
  EXPECT_EQ(ran.load(), 20);
}

// ---------------------------------------------- teardown after a failure

TEST(HostDeviceTeardown, AfterAFailureQueuedWorkIsSkippedAndDestructionIsFast) {
  HostDevice dev;
  std::atomic<int> ran{0};
  const auto t0 = Clock::now();
  {
    auto s = dev.createStream();
    dev.launchHostFunc(*s, [] { throw std::runtime_error("boom"); });
    for (int i = 0; i < 500; ++i)
      dev.launchHostFunc(*s, [&] {
        ++ran;
        std::this_thread::sleep_for(10ms);  // 5 s, were it run
      });
  }
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_EQ(ran.load(), 0);
}

TEST(HostDeviceTeardown, CancelReleasesBlockedWaitsAndSkipsQueuedWork) {
  HostDevice dev;  // a 10-minute stream-wait timeout
  std::atomic<int> ran{0};
  auto* flag = static_cast<uint32_t*>(dev.allocate(sizeof(uint32_t)));
  const auto t0 = Clock::now();
  {
    auto s = dev.createStream();
    dev.waitValue(*s, flag, 1);  // nobody writes it
    for (int i = 0; i < 100; ++i) dev.launchHostFunc(*s, [&] { ++ran; });
    std::this_thread::sleep_for(20ms);
    dev.cancel("the run timed out");
    std::string msg = messageOf([&] { dev.synchronize(*s, kLong); });
    EXPECT_NE(msg.find("cancelled: the run timed out"), std::string::npos) << msg;
  }
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_EQ(ran.load(), 0);
  dev.deallocate(flag);
}

TEST(DeviceCancel, IsANoOpByDefault) {
  struct Minimal : HostDevice {
    void cancel(std::string_view why) override { Device::cancel(why); }
  } dev;
  dev.cancel("nothing happens");
  auto e = dev.createEvent();
  EXPECT_TRUE(dev.query(*e));
}

// ------------------------------------------------------------ allocation

TEST(HostDeviceAllocation, MoreThanTheMachineHasIsRefusedWithTheNumbers) {
  HostDevice dev;
  const std::size_t petabyte = std::size_t{1} << 50;
  try {
    dev.allocate(petabyte);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const BackendError& e) {
    FAIL() << "an allocation beyond memory is a RuntimeError of its own: " << e.what();
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exitCode(), kExitRuntimeFailure);
    EXPECT_NE(msg.find("host allocate of 1125899906842624 bytes (1 PiB): more than this "
                       "process can be given now, at most "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("MemAvailable + SwapFree in /proc/meminfo"), std::string::npos) << msg;
  }
  // The device is still usable.
  void* p = dev.allocate(std::size_t{4} << 20);
  dev.fill(dev.defaultStream(), p, DType::UInt8, std::size_t{4} << 20, 1, 0);
  dev.synchronize(dev.defaultStream(), kLong);
  dev.deallocate(p);
}

// In a child whose address-space limit (ulimit -v) leaves 256 MiB above
// what it has mapped already (a test process maps several hundred MiB on a
// machine with many cores: thread stacks, malloc arenas), an allocation of
// the whole limit is refused naming that limit.
TEST(HostDeviceAllocation, TheAddressSpaceLimitIsABound) {
  const std::size_t mapped = mappedBytes();
  ASSERT_GT(mapped, 0u) << "no VmSize in /proc/self/status";
  const std::size_t mib = std::size_t{1} << 20;
  const std::size_t limit = (mapped + mib - 1) / mib * mib + (std::size_t{256} << 20);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    rlimit rl{limit, limit};
    std::string msg = "setrlimit failed";
    try {
      if (setrlimit(RLIMIT_AS, &rl) == 0) {
        std::vector<MemoryBound> bounds = hostMemoryBounds();
        msg = hostAllocationProblem(limit, bounds);
      }
    } catch (const std::exception& e) {
      msg = std::string("the child threw: ") + e.what();
    }
    (void)!write(pipefd[1], msg.data(), msg.size());
    _exit(0);
  }
  close(pipefd[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<std::size_t>(n));
  close(pipefd[0]);
  waitpid(pid, nullptr, 0);
  EXPECT_NE(msg.find(fmt::format("host allocate of {}: more than this process can be given now",
                                 describeBytes(limit))),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(fmt::format("RLIMIT_AS (ulimit -v: {})", describeBytes(limit))),
            std::string::npos)
      << msg;
}

TEST(HostMemoryBounds, TheTightestBoundDecidesAndUnwrittenMemoryCountsOnlyForPages) {
  std::vector<MemoryBound> bounds = {
      {std::size_t{8} << 30, "MemAvailable + SwapFree in /proc/meminfo", true},
      {std::size_t{6} << 30, "the cgroup limit", true},
      {std::size_t{100} << 30, "RLIMIT_AS", false}};
  EXPECT_EQ(hostAllocationProblem(std::size_t{5} << 30, bounds), "");
  EXPECT_EQ(hostAllocationProblem(std::size_t{7} << 30, bounds),
            "host allocate of 7516192768 bytes (7 GiB): more than this process can be given "
            "now, at most 6442450944 bytes (6 GiB) (the cgroup limit)");
  reserveUntouched(bounds, std::size_t{2} << 30);
  EXPECT_EQ(bounds[0].bytes, std::size_t{6} << 30);
  EXPECT_EQ(bounds[1].bytes, std::size_t{4} << 30);
  EXPECT_EQ(bounds[2].bytes, std::size_t{100} << 30);
  EXPECT_NE(hostAllocationProblem(std::size_t{5} << 30, bounds)
                .find("(the cgroup limit, less 2147483648 bytes (2 GiB) that earlier "
                      "allocations of this device have not written yet)"),
            std::string::npos);
  EXPECT_EQ(hostAllocationProblem(1, {}), "");  // no bound known: the kernel decides
}

TEST(HostMemoryBounds, ThisMachineHasAtLeastMemInfo) {
  std::vector<MemoryBound> bounds = hostMemoryBounds();
  ASSERT_FALSE(bounds.empty());
  EXPECT_EQ(bounds[0].source, "MemAvailable + SwapFree in /proc/meminfo");
  EXPECT_GT(bounds[0].bytes, 0u);
}

TEST(DescribeBytes, IsExactThenReadable) {
  EXPECT_EQ(describeBytes(0), "0 bytes");
  EXPECT_EQ(describeBytes(1023), "1023 bytes");
  EXPECT_EQ(describeBytes(1536), "1536 bytes (1.5 KiB)");
  EXPECT_EQ(describeBytes(std::size_t{1} << 50), "1125899906842624 bytes (1 PiB)");
}

}  // namespace
}  // namespace hir
