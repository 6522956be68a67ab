// The CUDA device on real GPUs, one GPU per rank (the local rank), under
// mpirun at 1, 2 or 4 ranks: fill/check/copy over every dtype against the
// host implementation of the pattern (common/elements.h), check's mismatch
// report, events and streams, timeouts, host functions, matmul and add
// against double references, reduce against the host device's, timing
// events, IPC and stream semaphores between two ranks. Every test skips when there is no usable GPU
// or too few of them; the skip decision is collective, so that no rank
// waits in a collective that another rank skipped.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/elements.h"
#include "common/check.h"
#include "device/cuda_interop.h"
#include "device/cuda/test_kernels.h"
#include "device/messages.h"
#include <hostir/device.h>
#include "support/compute_reference.h"
#include "support/gpu_test.h"

namespace hir {
namespace {

using ::testing::HasSubstr;
using test::makeCudaDevice;
using test::testTimeout;
using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ------------------------------------------------------------- GPU gating

// Ranks 0 and 1 share a node (IPC works within a node only). Collective.
bool firstTwoRanksShareANode() {
  const std::vector<std::string>& nodes = test::world().nodes();
  return nodes.size() >= 2 && nodes[0] == nodes[1];
}

// ------------------------------------------------------------- helpers

// The message protocol of `d` (messages.h): the host and cuda devices run
// their own.
DeviceMessages& msg(Device& d) {
  DeviceMessages* m = d.messages();
  HIR_INTERNAL_ASSERT(m != nullptr, "device {} has no message protocol of its own", d.describe());
  return *m;
}

// The cuda device made while each environment variable of `env` has its
// value (the device reads its variables once, when it is made).
std::unique_ptr<Device> makeCudaDeviceWithEnv(
    std::initializer_list<std::pair<const char*, const char*>> env) {
  for (const auto& [name, value] : env) ::setenv(name, value, 1);
  auto unset = [&] {
    for (const auto& [name, value] : env) ::unsetenv(name);
  };
  std::unique_ptr<Device> device;
  try {
    device = makeCudaDevice();
  } catch (...) {
    unset();
    throw;
  }
  unset();
  return device;
}

std::unique_ptr<Device> makeCudaDeviceWithEnv(const char* name, const char* value) {
  return makeCudaDeviceWithEnv({{name, value}});
}

// HIR_CUDA_KERNEL_COPY_MAX = `copy_max` ("" is the default, "0" the copy
// engine always).
std::unique_ptr<Device> makeCudaDeviceWithCopyMax(const char* copy_max) {
  return makeCudaDeviceWithEnv("HIR_CUDA_KERNEL_COPY_MAX", copy_max);
}

// Runs `check(device)` on a cuda device made in each way it may run
// waitValue and writeValue (HIR_CUDA_SEMAPHORES): the semaphore tests hold
// for both. Skips the test where stream memory operations are missing.
template <class Check>
void inEachSemaphoreMode(Check&& check) {
  for (const char* mode : {"memop", "kernel"}) {
    SCOPED_TRACE(fmt::format("HIR_CUDA_SEMAPHORES={}", mode));
    std::unique_ptr<Device> device = makeCudaDeviceWithEnv("HIR_CUDA_SEMAPHORES", mode);
    if (!device->supports(DeviceFeature::StreamSemaphore))
      GTEST_SKIP() << "stream memory operations are not available";
    check(*device);
  }
}

// Device memory that frees itself.
class Buffer {
 public:
  Buffer(Device& d, std::size_t bytes) : device_(d), bytes_(bytes), p_(d.allocate(bytes)) {}
  ~Buffer() { device_.deallocate(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return p_; }
  std::size_t bytes() const { return bytes_; }

 private:
  Device& device_;
  std::size_t bytes_;
  void* p_;
};

// Check records that free themselves.
class Records {
 public:
  Records(Device& d, std::size_t n) : device_(d), p_(d.allocateCheckRecords(n)) {}
  ~Records() { device_.freeCheckRecords(p_); }
  Records(const Records&) = delete;
  Records& operator=(const Records&) = delete;
  CheckRecord& operator[](std::size_t i) const { return p_[i]; }
  CheckRecord* get(std::size_t i = 0) const { return p_ + i; }

 private:
  Device& device_;
  CheckRecord* p_;
};

std::vector<std::byte> readBack(const void* p, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  cudaError_t err = cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess)
    throw BackendError(
        fmt::format("test readBack: cudaMemcpy failed: {}", cudaGetErrorString(err)));
  return out;
}

// cudaMemcpy from pageable memory may return before the data reached the
// device, and the devices' streams do not wait for the legacy default
// stream: the upload is complete only after a device synchronization.
void upload(void* dst, const void* src, std::size_t bytes) {
  cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess)
    throw BackendError(fmt::format("test upload: cudaMemcpy failed: {}", cudaGetErrorString(err)));
}

std::vector<std::byte> hostPattern(DType t, std::size_t count, int64_t value, int64_t step) {
  std::vector<std::byte> out(count * dtypeSize(t));
  fillPattern(out.data(), t, count, value, step);
  return out;
}

// Index of the first differing element, or -1.
int64_t firstDifference(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                        DType t) {
  const std::size_t el = dtypeSize(t);
  for (std::size_t k = 0; k * el < a.size(); ++k)
    if (std::memcmp(a.data() + k * el, b.data() + k * el, el) != 0) return static_cast<int64_t>(k);
  return -1;
}

struct PatternCase {
  int64_t value;
  int64_t step;
  std::size_t count;
};

// Patterns that exercise rounding (16-bit floats past their exact range,
// infinities), integer wrap-around (uint8, int32) and multi-block grids.
const PatternCase kPatternCases[] = {
    {0, 1, 1},
    {-1000, 7, 100003},
    {5, -3, 4097},
    {2147483600, 3, 1000},          // int32 wrap-around
    {int64_t{1} << 40, 12345, 777},  // beyond float32/bf16 precision
    {70000, 1, 10},                  // half infinity
    {12, 0, 300000},                 // constant, many blocks
};

// ------------------------------------------------------- fill, check, copy

TEST(CudaDevice, FillMatchesTheHostPatternForEveryDtype) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  Stream& s = device->defaultStream();
  for (const auto& [t, name] : kDTypeNames) {
    for (const PatternCase& c : kPatternCases) {
      Buffer buf(*device, c.count * dtypeSize(t));
      device->fill(s, buf.data(), t, c.count, c.value, c.step);
      device->synchronize(s, testTimeout());
      std::vector<std::byte> got = readBack(buf.data(), buf.bytes());
      std::vector<std::byte> want = hostPattern(t, c.count, c.value, c.step);
      int64_t k = firstDifference(got, want, t);
      EXPECT_EQ(k, -1) << name << " value " << c.value << " step " << c.step << ": element " << k
                       << " is " << (k >= 0 ? loadAsDouble(got.data(), t, k) : 0) << ", host has "
                       << (k >= 0 ? loadAsDouble(want.data(), t, k) : 0);
    }
  }
}

TEST(CudaDevice, CheckAcceptsFilledDataForEveryDtype) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  Stream& s = device->defaultStream();
  const std::size_t n_cases = std::size(kPatternCases);
  for (const auto& [t, name] : kDTypeNames) {
    Records records(*device, n_cases);
    for (std::size_t i = 0; i < n_cases; ++i) {
      const PatternCase& c = kPatternCases[i];
      Buffer buf(*device, c.count * dtypeSize(t));
      device->fill(s, buf.data(), t, c.count, c.value, c.step);
      device->check(s, buf.data(), t, c.count, c.value, c.step, 0.0, records.get(i), 1);
      device->synchronize(s, testTimeout());
    }
    for (std::size_t i = 0; i < n_cases; ++i) {
      EXPECT_EQ(records[i].mismatches, 0u) << name << " case " << i;
      EXPECT_EQ(records[i].checked, kPatternCases[i].count) << name << " case " << i;
      EXPECT_EQ(records[i].first_execution, -1) << name << " case " << i;
      EXPECT_EQ(records[i].reported, 0) << name << " case " << i;
    }
  }
}

TEST(CudaDevice, CheckReportsMismatchesWithIndexGotAndExpected) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  Stream& s = device->defaultStream();
  constexpr std::size_t kCount = 200;  // 5 + 3k stays distinct from 5 + 2k in every dtype
  for (const auto& [t, name] : kDTypeNames) {
    Buffer buf(*device, kCount * dtypeSize(t));
    Records rec(*device, 1);
    device->fill(s, buf.data(), t, kCount, 5, 2);
    device->check(s, buf.data(), t, kCount, 5, 3, 0.0, rec.get(), 7);  // wrong step
    device->synchronize(s, testTimeout());
    const CheckRecord& r = rec[0];
    EXPECT_EQ(r.mismatches, kCount - 1) << name;  // element 0 matches
    EXPECT_EQ(r.checked, kCount) << name;
    EXPECT_EQ(r.first_execution, 7) << name;
    ASSERT_EQ(r.reported, CheckRecord::kMaxReported) << name;
    std::vector<int64_t> seen;
    for (int j = 0; j < r.reported; ++j) {
      const int64_t k = r.index[j];
      ASSERT_GE(k, 1) << name;
      ASSERT_LT(k, static_cast<int64_t>(kCount)) << name;
      const PatternElement got = patternElement(t, 5, 2, k);
      const PatternElement want = patternElement(t, 5, 3, k);
      EXPECT_EQ(r.integer, isFloating(t) ? 0 : 1) << name;
      if (isFloating(t)) {
        EXPECT_EQ(r.got[j].f, got.f) << name << " element " << k;
        EXPECT_EQ(r.expected[j].f, want.f) << name << " element " << k;
      } else {
        EXPECT_EQ(r.got[j].i, got.i) << name << " element " << k;
        EXPECT_EQ(r.expected[j].i, want.i) << name << " element " << k;
      }
      seen.push_back(k);
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end())
        << name << ": an element was reported twice";

    // A second failing execution adds to the counts but keeps the report of
    // the first one.
    // (1000000: no element of the fill rounds or wraps to it in any dtype.)
    device->check(s, buf.data(), t, kCount, 1000000, 0, 0.0, rec.get(), 8);
    device->synchronize(s, testTimeout());
    EXPECT_EQ(r.mismatches, 2 * kCount - 1) << name;
    EXPECT_EQ(r.checked, 2 * kCount) << name;
    EXPECT_EQ(r.first_execution, 7) << name;
    EXPECT_EQ(r.reported, CheckRecord::kMaxReported) << name;
  }
}

TEST(CudaDevice, CheckHonoursTheTolerance) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  Stream& s = device->defaultStream();
  constexpr std::size_t kCount = 1000;
  for (DType t : {DType::Float32, DType::Int32, DType::BFloat16}) {
    Buffer buf(*device, kCount * dtypeSize(t));
    Records rec(*device, 3);
    device->fill(s, buf.data(), t, kCount, 10, 0);
    device->check(s, buf.data(), t, kCount, 11, 0, 1.0, rec.get(0), 1);  // within 1
    device->check(s, buf.data(), t, kCount, 11, 0, 0.5, rec.get(1), 1);  // not within 0.5
    device->check(s, buf.data(), t, kCount, 11, 0, 0.0, rec.get(2), 1);  // exact
    device->synchronize(s, testTimeout());
    EXPECT_EQ(rec[0].mismatches, 0u) << toString(t);
    EXPECT_EQ(rec[1].mismatches, kCount) << toString(t);
    EXPECT_EQ(rec[2].mismatches, kCount) << toString(t);
  }
}

TEST(CudaDevice, CheckReportsInt64ValuesBeyondTwoToThe53Exactly) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  constexpr int64_t kBig = (int64_t{1} << 53) + 1;
  const int64_t stored = kBig - 1;
  Buffer buf(*device, sizeof(int64_t));
  upload(buf.data(), &stored, sizeof(int64_t));
  Records rec(*device, 1);
  device->check(device->defaultStream(), buf.data(), DType::Int64, 1, kBig, 0, 0, rec.get(), 0);
  device->synchronize(device->defaultStream(), testTimeout());
  ASSERT_EQ(rec[0].reported, 1);
  EXPECT_EQ(rec[0].integer, 1);
  EXPECT_EQ(rec[0].got[0].i, stored);
  EXPECT_EQ(rec[0].expected[0].i, kBig);
}

TEST(CudaDevice, CheckNeverAcceptsNaN) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  constexpr std::size_t kCount = 64;
  Buffer buf(*device, kCount * sizeof(float));
  std::vector<float> nans(kCount, std::nanf(""));
  upload(buf.data(), nans.data(), kCount * sizeof(float));
  Records rec(*device, 1);
  device->check(device->defaultStream(), buf.data(), DType::Float32, kCount, 0, 0, 1e30,
                rec.get(), 3);
  device->synchronize(device->defaultStream(), testTimeout());
  EXPECT_EQ(rec[0].mismatches, kCount);
  EXPECT_TRUE(std::isnan(rec[0].got[0].f));
}

// A buffer of more elements than the grid has threads (each thread checks
// several): `checked` is added once for the whole check and the mismatches
// once per block that found some, so both must still come out exact, for
// mismatches in a few blocks, in every block, and in none.
TEST(CudaDevice, CheckCountsEveryElementAndMismatchOfABufferLargerThanItsGrid) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  Stream& s = device->defaultStream();
  constexpr std::size_t kCount = (std::size_t{5} << 20) + 3;
  constexpr std::size_t kTail = 1001;  // the last elements hold another value
  Buffer buf(*device, kCount * sizeof(int32_t));
  auto* p = static_cast<int32_t*>(buf.data());
  device->fill(s, p, DType::Int32, kCount - kTail, 5, 0);
  device->fill(s, p + (kCount - kTail), DType::Int32, kTail, 6, 0);
  Records rec(*device, 3);
  device->check(s, p, DType::Int32, kCount, 5, 0, 0.0, rec.get(0), 1);  // the tail is wrong
  device->check(s, p, DType::Int32, kCount, 7, 0, 0.0, rec.get(1), 1);  // all of it
  device->check(s, p, DType::Int32, kCount - kTail, 5, 0, 0.0, rec.get(2), 1);  // none
  device->check(s, p, DType::Int32, kCount - kTail, 5, 0, 0.0, rec.get(2), 2);  // twice
  device->synchronize(s, testTimeout());
  EXPECT_EQ(rec[0].mismatches, kTail);
  EXPECT_EQ(rec[0].checked, kCount);
  ASSERT_EQ(rec[0].reported, CheckRecord::kMaxReported);
  for (int j = 0; j < rec[0].reported; ++j) {
    EXPECT_GE(rec[0].index[j], static_cast<int64_t>(kCount - kTail));
    EXPECT_EQ(rec[0].got[j].i, 6);
  }
  EXPECT_EQ(rec[1].mismatches, kCount);
  EXPECT_EQ(rec[1].checked, kCount);
  EXPECT_EQ(rec[2].mismatches, 0u);
  EXPECT_EQ(rec[2].checked, 2 * (kCount - kTail));
  EXPECT_EQ(rec[2].first_execution, -1);
}

TEST(CudaDevice, CopyMovesTheBytes) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  Stream& s = device->defaultStream();
  constexpr std::size_t kCount = 123457;
  Buffer a(*device, kCount * 8), b(*device, kCount * 8);
  device->fill(s, a.data(), DType::Int64, kCount, -5, 11);
  device->fill(s, b.data(), DType::Int64, kCount, 0, 0);
  device->copy(s, b.data(), a.data(), kCount * 8);
  device->copy(s, b.data(), a.data(), 0);  // nothing
  device->synchronize(s, testTimeout());
  EXPECT_EQ(firstDifference(readBack(b.data(), b.bytes()),
                            hostPattern(DType::Int64, kCount, -5, 11), DType::Int64),
            -1);
}

// ------------------------------------------------------------ memory

TEST(CudaDevice, ZeroByteAllocationsAreDistinctAndMemoryStartsZeroed) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  void* a = device->allocate(0);
  void* b = device->allocate(0);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  device->deallocate(a);
  device->deallocate(b);
  Buffer big(*device, 3 << 20);
  std::vector<std::byte> bytes = readBack(big.data(), big.bytes());
  EXPECT_TRUE(
      std::all_of(bytes.begin(), bytes.end(), [](std::byte x) { return x == std::byte{0}; }));
}

TEST(CudaDevice, CheckRecordsStartCleared) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  Records rec(*device, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(rec[i].mismatches, 0u);
    EXPECT_EQ(rec[i].checked, 0u);
    EXPECT_EQ(rec[i].first_execution, -1);
    EXPECT_EQ(rec[i].reported, 0);
  }
}

TEST(CudaDevice, DescribeNamesTheGpu) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  EXPECT_EQ(device->kind(), "cuda");
  EXPECT_THAT(device->describe(), ::testing::StartsWith("cuda:"));
  EXPECT_TRUE(device->supports(DeviceFeature::Ipc));
}

// ------------------------------------------------------ streams and events

TEST(CudaDevice, WaitOrdersWorkAcrossStreams) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto a = device->createStream();
  auto b = device->createStream();
  constexpr std::size_t kCount = 1 << 20;
  Buffer x(*device, kCount * 4), y(*device, kCount * 4);
  auto e = device->createEvent();
  // x gets its data only after 150 ms on stream a; stream b copies it after
  // waiting for the event: without the wait it would copy zeros.
  cuda::testSpin(*a, 150);
  device->fill(*a, x.data(), DType::Int32, kCount, 3, 1);
  device->record(*e, *a);
  EXPECT_FALSE(device->query(*e));
  device->wait(*b, *e);
  device->copy(*b, y.data(), x.data(), kCount * 4);
  device->synchronize(*b, testTimeout());
  EXPECT_TRUE(device->query(*e));
  EXPECT_EQ(firstDifference(readBack(y.data(), y.bytes()), hostPattern(DType::Int32, kCount, 3, 1),
                            DType::Int32),
            -1);
}

TEST(CudaDevice, AnEventNeverRecordedIsComplete) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto e = device->createEvent();
  EXPECT_TRUE(device->query(*e));
  device->synchronize(*e, std::chrono::milliseconds(10));
}

TEST(CudaDevice, SynchronizeTimesOutWhileWorkRuns) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  auto e = device->createEvent();
  cuda::testSpin(*s, 600);
  device->record(*e, *s);
  auto t0 = Clock::now();
  EXPECT_THROW(device->synchronize(*s, std::chrono::milliseconds(30)), TimeoutError);
  EXPECT_THROW(device->synchronize(*e, std::chrono::milliseconds(30)), TimeoutError);
  EXPECT_LT(msSince(t0), 400.0) << "the timeouts took far longer than asked";
  EXPECT_FALSE(device->query(*e));
  device->synchronize(*s, testTimeout());
  EXPECT_TRUE(device->query(*e));
  EXPECT_GE(msSince(t0), 500.0) << "the spin kernel did not spin";
}

TEST(CudaDevice, WrapStreamAdoptsACallerStream) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto wrapped_default = device->wrapStream(nullptr);
  EXPECT_EQ(cuda::nativeStream(*wrapped_default, "test"),
            cuda::nativeStream(device->defaultStream(), "test"));
  cudaStream_t mine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), cudaSuccess);
  {
    auto wrapped = device->wrapStream(mine);
    EXPECT_EQ(cuda::nativeStream(*wrapped, "test"), mine);
    Buffer buf(*device, 1024 * 4);
    device->fill(*wrapped, buf.data(), DType::Float32, 1024, 1, 1);
    device->synchronize(*wrapped, testTimeout());
    EXPECT_EQ(firstDifference(readBack(buf.data(), buf.bytes()),
                              hostPattern(DType::Float32, 1024, 1, 1), DType::Float32),
              -1);
  }
  // The wrapper did not own the stream: it is still usable.
  EXPECT_EQ(cudaStreamQuery(mine), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(mine), cudaSuccess);
}

TEST(CudaDevice, HostFunctionsRunInStreamOrder) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  std::atomic<int> step{0};
  std::atomic<int> seen_by_second{-1};
  cuda::testSpin(*s, 100);
  device->launchHostFunc(*s, [&] { step = 1; });
  device->launchHostFunc(*s, [&] { seen_by_second = step.load(); });
  EXPECT_EQ(step.load(), 0) << "the host function ran before the work enqueued before it";
  device->synchronize(*s, testTimeout());
  EXPECT_EQ(step.load(), 1);
  EXPECT_EQ(seen_by_second.load(), 1);
}

TEST(CudaDevice, AThrowingHostFunctionIsAStickyError) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();  // its own device: the error stays with it
  Stream& s = device->defaultStream();
  device->launchHostFunc(s, [] { throw std::runtime_error("host task exploded"); });
  try {
    device->synchronize(s, testTimeout());
    FAIL() << "synchronize did not report the host function's failure";
  } catch (const BackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("host task exploded"));
  }
  auto e = device->createEvent();
  EXPECT_THROW(device->query(*e), BackendError);
}

// ------------------------------------------------------- compute, timing

// Cases, operands and references: support/compute_reference.h. The cuda
// device may round an accumulated product to the dtype before adding out.
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

// Runs a case on the cuda device, on stream `s`, and reads out back.
std::vector<std::byte> runCudaMatmul(Device& device, Stream& s, const MatmulData& d) {
  Buffer a(device, d.a.size()), b(device, d.b.size()), out(device, d.out.size());
  upload(a.data(), d.a.data(), d.a.size());
  upload(b.data(), d.b.data(), d.b.size());
  upload(out.data(), d.out.data(), d.out.size());
  MatmulArgs x = d.args;
  x.a = a.data(), x.b = b.data(), x.out = out.data();
  device.matmul(s, x);
  device.synchronize(s, testTimeout());
  return readBack(out.data(), out.bytes());
}

TEST(CudaDevice, SupportsComputeAndTimingAndHandsOutItsNativeStream) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  EXPECT_TRUE(device->supports(DeviceFeature::Compute));
  EXPECT_TRUE(device->supports(DeviceFeature::Timing));
  auto s = device->createStream();
  const uint64_t work = cuda::cudaStream(*s, "test").work();
  EXPECT_EQ(device->nativeStream(*s), static_cast<void*>(cuda::nativeStream(*s, "test")));
  // The caller enqueues on it behind the device's back: that counts as work.
  EXPECT_GT(cuda::cudaStream(*s, "test").work(), work);
}

TEST(CudaDevice, MatmulMatchesADoubleReferenceForEveryTransposeAndDtype) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  uint32_t seed = 1;
  for (DType t : kMatmulDTypes)
    for (const MatmulCase& c : matmulCases()) {
      MatmulData d = makeMatmulData(t, c, seed++);
      EXPECT_EQ(compareWithReference(d, runCudaMatmul(*device, *s, d),
                                     ProductRounding::MayRoundProductFirst),
                "")
          << describe(t, c);
    }
}

TEST(CudaDevice, Bfloat16MatmulOf512CubedMatchesADoubleReference) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  for (bool acc : {false, true}) {
    MatmulCase c{512, 512, 512, false, true, acc, 0};
    MatmulData d = makeMatmulData(DType::BFloat16, c, 512);
    EXPECT_EQ(compareWithReference(d, runCudaMatmul(*device, device->defaultStream(), d),
                                   ProductRounding::MayRoundProductFirst),
              "")
        << describe(DType::BFloat16, c);
  }
}

TEST(CudaDevice, MatmulOverAnEmptySumStoresZerosOrKeepsOut) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  for (DType t : kMatmulDTypes)
    for (bool acc : {false, true}) {
      MatmulCase c{3, 4, 0, false, false, acc, 1};
      MatmulData d = makeMatmulData(t, c, 7);
      if (acc) storeElement(d.out.data(), t, 6, PatternElement{0, 2.5});  // out[1][1]
      std::vector<std::byte> got = runCudaMatmul(*device, device->defaultStream(), d);
      EXPECT_EQ(compareWithReference(d, got, ProductRounding::MayRoundProductFirst), "")
          << describe(t, c);
      EXPECT_EQ(loadAsDouble(got.data(), t, 6), acc ? 2.5 : 0.0) << describe(t, c);
    }
}

// The inputs are written on stream a after a 150 ms spin; stream b waits for
// them and multiplies. Had cuBLAS run on another stream than b, it would
// have read zeros.
TEST(CudaDevice, MatmulAndAddRunOnTheStreamTheyAreGiven) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto a_stream = device->createStream();
  auto b_stream = device->createStream();
  constexpr int64_t kN = 64;
  const std::size_t bytes = kN * kN * sizeof(float);
  Buffer a(*device, bytes), b(*device, bytes), out(*device, bytes), sum(*device, bytes);
  auto ready = device->createEvent();
  cuda::testSpin(*a_stream, 150);
  device->fill(*a_stream, a.data(), DType::Float32, kN * kN, 1, 0);  // all ones
  device->fill(*a_stream, b.data(), DType::Float32, kN * kN, 2, 0);  // all twos
  device->record(*ready, *a_stream);
  device->wait(*b_stream, *ready);
  MatmulArgs x;
  x.m = x.n = x.k = x.lda = x.ldb = x.ldo = kN;
  x.a = a.data(), x.b = b.data(), x.out = out.data();
  device->matmul(*b_stream, x);
  device->add(*b_stream, sum.data(), out.data(), a.data(), DType::Float32, kN * kN);
  device->synchronize(*b_stream, testTimeout());
  EXPECT_EQ(firstDifference(readBack(out.data(), bytes),
                            hostPattern(DType::Float32, kN * kN, 2 * kN, 0), DType::Float32),
            -1);
  EXPECT_EQ(firstDifference(readBack(sum.data(), bytes),
                            hostPattern(DType::Float32, kN * kN, 2 * kN + 1, 0), DType::Float32),
            -1);
}

TEST(CudaDevice, AddGivesExactlyRoundedOrWrappedSumsForEveryDtypeAlsoInPlace) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  constexpr std::size_t kCount = 300001;  // several blocks per thread
  for (const auto& [t, name] : kDTypeNames) {
    AddData d = makeAddData(t, kCount, 11);
    const std::size_t bytes = d.a.size();
    Buffer a(*device, bytes), b(*device, bytes), out(*device, bytes);
    upload(a.data(), d.a.data(), bytes);
    upload(b.data(), d.b.data(), bytes);
    device->add(*s, out.data(), a.data(), b.data(), t, kCount);  // out = a + b
    device->add(*s, a.data(), a.data(), b.data(), t, kCount);    // a += b
    device->synchronize(*s, testTimeout());
    int64_t k = firstDifference(readBack(out.data(), bytes), d.sum, t);
    EXPECT_EQ(k, -1) << name << ": element " << k;
    EXPECT_EQ(firstDifference(readBack(a.data(), bytes), d.sum, t), -1) << name << " (out == a)";
    upload(a.data(), d.a.data(), bytes);
    device->add(*s, b.data(), a.data(), b.data(), t, kCount);  // b = a + b
    device->synchronize(*s, testTimeout());
    EXPECT_EQ(firstDifference(readBack(b.data(), bytes), d.sum, t), -1) << name << " (out == b)";
  }
}

// ------------------------------------- random fill, unary, checkAgainst
//
// The reference is the host device running the same call on host buffers;
// outputs are poisoned first (with other bytes on either side, so that an
// element neither wrote still differs) and compared byte for byte.

// The cuda device under test and the host device of the reference.
struct BothDevices {
  std::unique_ptr<Device> cuda = makeCudaDevice();
  std::unique_ptr<Device> host = createDevice("host", 0);
  std::unique_ptr<Stream> stream = cuda->createStream();

  void syncCuda() { cuda->synchronize(*stream, testTimeout()); }
  void syncHost() { host->synchronize(host->defaultStream(), testTimeout()); }
};

constexpr std::byte kCudaPoison{0xa5};
constexpr std::byte kHostPoison{0x5a};

void poisonCuda(const Buffer& b) {
  const std::vector<std::byte> poison(b.bytes(), kCudaPoison);
  upload(b.data(), poison.data(), poison.size());
}

// A host device buffer's bytes (its work synchronized).
std::vector<std::byte> hostBytes(const Buffer& b) {
  const auto* p = static_cast<const std::byte*>(b.data());
  return {p, p + b.bytes()};
}

// Element k of an image as its bits, for messages (NaN payloads show).
uint64_t elementBits(const std::vector<std::byte>& image, DType t, std::size_t k) {
  uint64_t bits = 0;
  std::memcpy(&bits, image.data() + k * dtypeSize(t), dtypeSize(t));
  return bits;
}

std::string describeElement(const std::vector<std::byte>& image, DType t, std::size_t k) {
  return fmt::format("{} ({:#x})", loadAsDouble(image.data(), t, k), elementBits(image, t, k));
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// Floating inputs every unary test feeds in: signed zeros, halves (ties),
// subnormals of each dtype, the edges of the integer dtypes' and the half
// types' ranges, beyond float's, infinities and NaN.
const double kSpecialReals[] = {
    0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.1, 1.0 / 3, 1e-8, 6e-8, 1e-40, -1e-40, 1e-310,
    127.5, 128.0, 255.0, 255.5, 256.0, 300.7, -1.0, -128.5, -129.0, -300.2, 65504.0, 65519.0,
    65520.0, 1e5, -1e5, 3.4e38, 3.5e38, -1e39, 2147483647.0, 2147483647.5, 2147483648.0,
    -2147483648.0, -2147483649.0, 9007199254740994.0, 9223372036854775807.0,
    -9223372036854775808.0, 1e19, -1e19, 1e300, -1e300, kInf, -kInf,
    std::numeric_limits<double>::quiet_NaN()};

// Integer inputs: the edges of each integer dtype and of the floating
// dtypes' exact integers.
const int64_t kSpecialIntegers[] = {0, 1, -1, 127, 128, 255, 256, -128, -129, 65504, 65505,
                                    (int64_t{1} << 24) + 1, INT32_MAX, INT32_MIN,
                                    int64_t{INT32_MAX} + 1, (int64_t{1} << 53) + 1, INT64_MAX,
                                    INT64_MIN, -(int64_t{1} << 40) - 3, 1234567890123456789};

// Two NaNs with payloads, as raw bits of a floating dtype: a signaling one
// and a negative quiet one.
void storeNaNs(std::vector<std::byte>& image, DType t, std::size_t k) {
  auto put = [&](std::size_t i, auto bits) {
    std::memcpy(image.data() + i * sizeof(bits), &bits, sizeof(bits));
  };
  switch (t) {
    case DType::Float32: put(k, uint32_t{0x7fa00001}), put(k + 1, uint32_t{0xffc12345}); return;
    case DType::Float64:
      put(k, uint64_t{0x7ff4000000000001}), put(k + 1, uint64_t{0xfff80000000abcde});
      return;
    case DType::Float16: put(k, uint16_t{0x7d01}), put(k + 1, uint16_t{0xfe55}); return;
    case DType::BFloat16: put(k, uint16_t{0x7f81}), put(k + 1, uint16_t{0xffc1}); return;
    default: return;
  }
}

// `count` elements of dtype t: the special values above (NaNs with payloads
// too, for floating dtypes), then random values (common/random.h) cycling
// over a wide range, one of a few hundred and one around zero.
std::vector<std::byte> unaryInput(DType t, std::size_t count, uint64_t seed) {
  std::vector<std::byte> image(count * dtypeSize(t));
  std::size_t k = 0;
  if (isFloating(t)) {
    for (double v : kSpecialReals) storeElement(image.data(), t, k++, PatternElement{0, v});
    storeNaNs(image, t, k);
    k += 2;
  } else {
    for (int64_t v : kSpecialIntegers) storeElement(image.data(), t, k++, PatternElement{v, 0});
  }
  const RandomPattern ranges[] = {
      isFloating(t) ? RandomPattern{seed, -3e5, 3e5} : RandomPattern{seed, -1e12, 1e12},
      RandomPattern{seed + 1, -300, 300}, RandomPattern{seed + 2, -8, 8}};
  for (; k < count; ++k)
    storeElement(image.data(), t, k, randomElement(t, ranges[k % 3], k));
  return image;
}

// Runs `args` over `input` (args.count elements of args.in_type) on both
// devices and returns {the cuda device's output, the host device's}. In
// place: the cuda device writes over its copy of the input (the host device
// still writes a buffer of its own).
std::pair<std::vector<std::byte>, std::vector<std::byte>> unaryOnBoth(
    BothDevices& d, UnaryArgs args, const std::vector<std::byte>& input, bool in_place = false) {
  const std::size_t out_bytes = args.count * dtypeSize(args.out_type);
  Buffer cuda_in(*d.cuda, input.size()), cuda_out(*d.cuda, out_bytes);
  upload(cuda_in.data(), input.data(), input.size());
  poisonCuda(cuda_out);
  args.in = cuda_in.data();
  args.out = in_place ? cuda_in.data() : cuda_out.data();
  d.cuda->unary(*d.stream, args);
  d.syncCuda();
  std::vector<std::byte> got = readBack(args.out, out_bytes);

  Buffer host_in(*d.host, input.size()), host_out(*d.host, out_bytes);
  std::memcpy(host_in.data(), input.data(), input.size());
  std::memset(host_out.data(), static_cast<int>(kHostPoison), out_bytes);
  args.in = host_in.data();
  args.out = host_out.data();
  d.host->unary(d.host->defaultStream(), args);
  d.syncHost();
  return {std::move(got), hostBytes(host_out)};
}

const char* unaryName(UnaryOp op) {
  switch (op) {
    case UnaryOp::Cast: return "cast";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::Silu: return "silu";
    case UnaryOp::Scale: return "scale";
  }
  return "?";
}

// Expects the two outputs of unaryOnBoth() to be equal byte for byte.
void expectSameBits(const std::vector<std::byte>& input, const UnaryArgs& args,
                    const std::pair<std::vector<std::byte>, std::vector<std::byte>>& outputs,
                    const std::string& what) {
  const auto& [got, want] = outputs;
  const int64_t k = firstDifference(got, want, args.out_type);
  if (k < 0) return;
  const auto i = static_cast<std::size_t>(k);
  ADD_FAILURE() << what << ": " << unaryName(args.op) << " " << toString(args.in_type) << " to "
                << toString(args.out_type) << ", element " << k << " of "
                << describeElement(input, args.in_type, i) << " is "
                << describeElement(got, args.out_type, i) << ", host has "
                << describeElement(want, args.out_type, i);
}

TEST(CudaDeviceMath, ARandomFillMatchesTheHostBitForBitForEveryDtype) {
  HIR_REQUIRE_GPUS(1);
  BothDevices d;
  // Floating: rounding to each dtype, a negative low, overflow of float16
  // (beyond 65504) and float32's top range. Integer: wrap-around of the
  // narrow dtypes, spans above 2^32 and up to 2^63.
  const std::vector<RandomPattern> kReal = {
      {0, 0.0, 1.0}, {0, -1000.0, 1000.0}, {0, -1e-3, 5e-4}, {0, 1e30, 3e38}, {0, -7e4, 7e4}};
  const std::vector<RandomPattern> kInteger = {{0, 0.0, 256.0},
                                               {0, -100.0, 100.0},
                                               {0, -3e9, 3e9},
                                               {0, 0.0, 0x1.0p40},
                                               {0, -0x1.0p62, 0x1.0p62}};
  for (const auto& [t, name] : kDTypeNames) {
    for (RandomPattern p : isFloating(t) ? kReal : kInteger) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeefcafef00d}}) {
        p.seed = seed;
        for (std::size_t count : {std::size_t{1}, std::size_t{1000}, (std::size_t{1} << 20) + 3}) {
          if (count > 1000 && seed != 1) continue;  // the large count once per range
          const std::size_t bytes = count * dtypeSize(t);
          Buffer cuda_out(*d.cuda, bytes), host_out(*d.host, bytes);
          poisonCuda(cuda_out);
          std::memset(host_out.data(), static_cast<int>(kHostPoison), bytes);
          d.cuda->fillRandom(*d.stream, cuda_out.data(), t, count, p);
          d.host->fillRandom(d.host->defaultStream(), host_out.data(), t, count, p);
          d.syncCuda();
          d.syncHost();
          const std::vector<std::byte> got = readBack(cuda_out.data(), bytes);
          const std::vector<std::byte> want = hostBytes(host_out);
          const int64_t k = firstDifference(got, want, t);
          EXPECT_EQ(k, -1) << name << " seed " << p.seed << " in [" << p.low << ", " << p.high
                           << "), " << count << " elements: element " << k << " is "
                           << (k >= 0 ? describeElement(got, t, k) : "") << ", host has "
                           << (k >= 0 ? describeElement(want, t, k) : "");
        }
      }
    }
  }
}

TEST(CudaDeviceMath, ARandomFillOfNoElementsWritesNothing) {
  HIR_REQUIRE_GPUS(1);
  BothDevices d;
  Buffer out(*d.cuda, 64);
  poisonCuda(out);
  d.cuda->fillRandom(*d.stream, out.data(), DType::Float32, 0, RandomPattern{7, 0.0, 1.0});
  UnaryArgs x{.op = UnaryOp::Cast, .in = out.data(), .out = out.data(), .count = 0};
  d.cuda->unary(*d.stream, x);
  d.syncCuda();
  EXPECT_EQ(readBack(out.data(), 64), std::vector<std::byte>(64, kCudaPoison));
}

TEST(CudaDeviceMath, EveryCastMatchesTheHostBitForBit) {
  HIR_REQUIRE_GPUS(1);
  BothDevices d;
  constexpr std::size_t kCount = 4099;
  for (const auto& [in, in_name] : kDTypeNames) {
    const std::vector<std::byte> input = unaryInput(in, kCount, 5);
    for (const auto& [out, out_name] : kDTypeNames) {
      const UnaryArgs x{.op = UnaryOp::Cast, .in_type = in, .out_type = out, .count = kCount};
      expectSameBits(input, x, unaryOnBoth(d, x, input), "out of place");
    }
  }
}

// Gelu and silu: the GPU's tanhf and expf (tanh and exp) may differ from the
// host's by a few units in the last place, which 1 + tanh(...) of a negative
// x scales up by |x| (cancellation); a half type's rounding may then go to
// the neighbouring value, one unit in its last place away.
bool activationClose(DType t, double x, double got, double want) {
  if (std::isnan(got) && std::isnan(want)) return true;
  if (got == want) return true;
  if (std::isinf(got) || std::isinf(want)) return false;
  const double scale = std::max(1.0, std::fabs(x));
  if (t == DType::Float64)
    return std::fabs(got - want) <= 1e-14 * std::fabs(want) + 1e-15 * scale;
  double bound = 1e-6 * std::fabs(want) + 4 * 0x1.0p-24 * scale;
  if (t == DType::Float16)
    bound += want == 0 ? 0x1.0p-24 : std::max(0x1.0p-24, std::ldexp(1.0, std::ilogb(want) - 10));
  if (t == DType::BFloat16)
    bound += want == 0 ? 0x1.0p-133 : std::ldexp(1.0, std::ilogb(want) - 7);
  return std::fabs(got - want) <= bound;
}

TEST(CudaDeviceMath, ActivationsMatchTheHostWithinAFewUlps) {
  HIR_REQUIRE_GPUS(1);
  BothDevices d;
  constexpr std::size_t kCount = 30011;
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    const std::vector<std::byte> input = unaryInput(t, kCount, 9);
    for (UnaryOp op : {UnaryOp::Relu, UnaryOp::Gelu, UnaryOp::Silu}) {
      const UnaryArgs x{.op = op, .in_type = t, .out_type = t, .count = kCount};
      const auto outputs = unaryOnBoth(d, x, input);
      if (op == UnaryOp::Relu) {  // a comparison only: exact
        expectSameBits(input, x, outputs, "relu");
        continue;
      }
      const auto& [got, want] = outputs;
      int failures = 0;
      for (std::size_t k = 0; k < kCount && failures < 5; ++k) {
        const double xk = loadAsDouble(input.data(), t, k);
        if (activationClose(t, xk, loadAsDouble(got.data(), t, k),
                            loadAsDouble(want.data(), t, k)))
          continue;
        ++failures;
        ADD_FAILURE() << unaryName(op) << " " << toString(t) << " of element " << k << ", "
                      << describeElement(input, t, k) << ", is " << describeElement(got, t, k)
                      << ", host has " << describeElement(want, t, k);
      }
    }
  }
}

TEST(CudaDeviceMath, ScaleMatchesTheHostBitForBit) {
  HIR_REQUIRE_GPUS(1);
  BothDevices d;
  constexpr std::size_t kCount = 4099;
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    const std::vector<std::byte> input = unaryInput(t, kCount, 13);
    // 0.1: inexact, rounded twice for the narrow dtypes; 1e30 and 1e300
    // overflow, 1e-30 underflows; 0 makes NaN of the infinities.
    for (double factor : {1.0, -3.0, 0.1, 1e30, 1e-30, 1e300, 0.0, -0.0}) {
      const UnaryArgs x{
          .op = UnaryOp::Scale, .in_type = t, .out_type = t, .count = kCount, .factor = factor};
      expectSameBits(input, x, unaryOnBoth(d, x, input), fmt::format("factor {}", factor));
    }
  }
}

TEST(CudaDeviceMath, InPlaceUnaryReadsEachElementBeforeWritingIt) {
  HIR_REQUIRE_GPUS(1);
  BothDevices d;
  constexpr std::size_t kCount = (std::size_t{1} << 20) + 3;  // several elements per thread
  struct Case {
    UnaryOp op;
    DType in, out;
  };
  const Case kCases[] = {{UnaryOp::Cast, DType::Float32, DType::Int32},
                         {UnaryOp::Cast, DType::Int32, DType::Float32},
                         {UnaryOp::Cast, DType::Float16, DType::BFloat16},
                         {UnaryOp::Cast, DType::BFloat16, DType::Float16},
                         {UnaryOp::Cast, DType::Float64, DType::Int64},
                         {UnaryOp::Cast, DType::Int64, DType::Float64},
                         {UnaryOp::Cast, DType::UInt8, DType::UInt8},
                         {UnaryOp::Relu, DType::Float32, DType::Float32},
                         {UnaryOp::Relu, DType::Float16, DType::Float16},
                         {UnaryOp::Scale, DType::Float64, DType::Float64},
                         {UnaryOp::Scale, DType::BFloat16, DType::BFloat16}};
  for (const Case& c : kCases) {
    const std::vector<std::byte> input = unaryInput(c.in, kCount, 17);
    const UnaryArgs x{.op = c.op, .in_type = c.in, .out_type = c.out, .count = kCount,
                      .factor = -0.75};
    expectSameBits(input, x, unaryOnBoth(d, x, input, /*in_place=*/true), "in place");
  }
  // Dtypes of two sizes cannot be converted in place by parallel threads.
  Buffer buf(*d.cuda, 64);
  const UnaryArgs widening{.op = UnaryOp::Cast, .in = buf.data(), .in_type = DType::Float32,
                           .out = buf.data(), .out_type = DType::Float64, .count = 8};
  EXPECT_THROW(d.cuda->unary(*d.stream, widening), InternalError);
}

// Runs checkAgainst of `got` (dtype t) against `expected` (dtype et) on both
// devices into fresh records, with execution 3, then again with execution 4
// into the same records.
std::pair<CheckRecord, CheckRecord> checkAgainstOnBoth(BothDevices& d,
                                                       const std::vector<std::byte>& got, DType t,
                                                       const std::vector<std::byte>& expected,
                                                       DType et, std::size_t count,
                                                       Tolerance tolerance) {
  Buffer cuda_got(*d.cuda, got.size()), cuda_expected(*d.cuda, expected.size());
  upload(cuda_got.data(), got.data(), got.size());
  upload(cuda_expected.data(), expected.data(), expected.size());
  Records cuda_rec(*d.cuda, 1);
  for (int64_t execution : {3, 4})
    d.cuda->checkAgainst(*d.stream, cuda_got.data(), t, cuda_expected.data(), et, count,
                         tolerance, cuda_rec.get(), execution);
  d.syncCuda();

  Buffer host_got(*d.host, got.size()), host_expected(*d.host, expected.size());
  std::memcpy(host_got.data(), got.data(), got.size());
  std::memcpy(host_expected.data(), expected.data(), expected.size());
  Records host_rec(*d.host, 1);
  for (int64_t execution : {3, 4})
    d.host->checkAgainst(d.host->defaultStream(), host_got.data(), t, host_expected.data(), et,
                         count, tolerance, host_rec.get(), execution);
  d.syncHost();
  return {cuda_rec[0], host_rec[0]};
}

// The cuda device's record against the host device's: the same counts and
// flags; the reports may name other mismatches (any kMaxReported of the
// first failing execution), so each is checked to be one, with the values
// as the host reads them.
void expectRecordLikeTheHost(const CheckRecord& r, const CheckRecord& want,
                             const std::vector<std::byte>& got, DType t,
                             const std::vector<std::byte>& expected, DType et,
                             Tolerance tolerance, const std::string& what) {
  EXPECT_EQ(r.checked, want.checked) << what;
  EXPECT_EQ(r.mismatches, want.mismatches) << what;
  EXPECT_EQ(r.first_execution, want.first_execution) << what;
  EXPECT_EQ(r.reported, want.reported) << what;
  if (want.reported > 0) {
    EXPECT_EQ(r.integer, want.integer) << what;
  }
  const bool integer = !isFloating(t) && !isFloating(et);
  std::vector<int64_t> seen;
  for (int j = 0; j < std::min(r.reported, CheckRecord::kMaxReported); ++j) {
    const int64_t k = r.index[j];
    ASSERT_GE(k, 0) << what;
    ASSERT_LT(static_cast<std::size_t>(k) * dtypeSize(t), got.size()) << what;
    seen.push_back(k);
    const auto i = static_cast<std::size_t>(k);
    if (integer) {
      const int64_t g = loadAsInt(got.data(), t, i), e = loadAsInt(expected.data(), et, i);
      EXPECT_FALSE(closeEnough(g, e, tolerance)) << what << ": element " << k << " matches";
      EXPECT_EQ(r.got[j].i, g) << what << ": element " << k;
      EXPECT_EQ(r.expected[j].i, e) << what << ": element " << k;
    } else {
      const double g = loadAsDouble(got.data(), t, i), e = loadAsDouble(expected.data(), et, i);
      EXPECT_FALSE(closeEnough(g, e, tolerance)) << what << ": element " << k << " matches";
      EXPECT_EQ(std::bit_cast<uint64_t>(r.got[j].f), std::bit_cast<uint64_t>(g))
          << what << ": element " << k;
      EXPECT_EQ(std::bit_cast<uint64_t>(r.expected[j].f), std::bit_cast<uint64_t>(e))
          << what << ": element " << k;
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end())
      << what << ": an element was reported twice";
}

TEST(CudaDeviceMath, CheckAgainstATensorCountsAndReportsLikeTheHost) {
  HIR_REQUIRE_GPUS(1);
  BothDevices d;
  constexpr std::size_t kCount = 5003;
  // Both tensors from one random pattern, so that they differ by their
  // dtypes' rounding (and integer wrap-around); then every 101st element of
  // `got` is off by 1 or 3 and, for a floating `got`, every 499th is NaN.
  const RandomPattern pattern{21, -200.0, 200.0};
  auto image = [&](DType t) {
    std::vector<std::byte> out(kCount * dtypeSize(t));
    for (std::size_t k = 0; k < kCount; ++k)
      storeElement(out.data(), t, k, randomElement(t, pattern, k));
    return out;
  };
  const Tolerance kTolerances[] = {0.0, 0.5, Tolerance(0.0, 1e-2), Tolerance(1.0, 1e-3),
                                   Tolerance(0.0, 0.3)};
  for (const auto& [t, t_name] : kDTypeNames) {
    std::vector<std::byte> got = image(t);
    for (std::size_t k = 0; k < kCount; k += 101) {
      const double off = k % 2 ? 1.0 : 3.0;
      if (isFloating(t))
        storeElement(got.data(), t, k,
                     roundedElement(t, loadAsDouble(got.data(), t, k) + off));
      else
        storeElement(got.data(), t, k,
                     PatternElement{loadAsInt(got.data(), t, k) + static_cast<int64_t>(off), 0});
    }
    if (isFloating(t))
      for (std::size_t k = 7; k < kCount; k += 499)
        storeElement(got.data(), t, k, PatternElement{0, std::nan("")});
    for (const auto& [et, et_name] : kDTypeNames) {
      const std::vector<std::byte> expected = image(et);
      for (const Tolerance& tol : kTolerances) {
        const std::string what = fmt::format("{} against {}, atol {} rtol {}", t_name, et_name,
                                             tol.atol, tol.rtol);
        const auto [r, want] = checkAgainstOnBoth(d, got, t, expected, et, kCount, tol);
        expectRecordLikeTheHost(r, want, got, t, expected, et, tol, what);
      }
    }
  }
  // A tensor equal to itself: nothing reported, every element counted.
  const std::vector<std::byte> same = image(DType::Float32);
  const auto [r, want] =
      checkAgainstOnBoth(d, same, DType::Float32, same, DType::Float32, kCount, 0.0);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(r.checked, 2 * kCount);
  EXPECT_EQ(r.first_execution, -1);
  EXPECT_EQ(want.checked, 2 * kCount);
}

TEST(CudaDeviceMath, ACheckWithRtolAcceptsRelativeErrors) {
  HIR_REQUIRE_GPUS(1);
  BothDevices d;
  Stream& s = *d.stream;
  constexpr std::size_t kCount = 1000;
  // got = 1000 (k + 1) against expected = 1001 (k + 1): off by 1/1001 of
  // the expected value, and by k + 1 in absolute terms.
  for (DType t : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    Buffer got(*d.cuda, kCount * dtypeSize(t)), expected(*d.cuda, kCount * dtypeSize(t));
    d.cuda->fill(s, got.data(), t, kCount, 1000, 1000);
    d.cuda->fill(s, expected.data(), t, kCount, 1001, 1001);
    // rtol 1e-3 alone, atol 500 and rtol 5e-4 together (each alone is too
    // little), atol 1000 alone.
    const Tolerance kAccepting[] = {Tolerance(0.0, 1e-3), Tolerance(500.0, 5e-4),
                                    Tolerance(1000.0, 0.0)};
    const Tolerance kRefusing[] = {0.0, Tolerance(0.0, 9e-4), Tolerance(0.5, 4e-4),
                                   Tolerance(999.0, 0.0), Tolerance(500.0, 0.0)};
    const std::size_t n = std::size(kAccepting) + std::size(kRefusing);
    Records pattern_rec(*d.cuda, n), tensor_rec(*d.cuda, n);
    std::size_t i = 0;
    for (const Tolerance& tol : kAccepting) {
      d.cuda->check(s, got.data(), t, kCount, 1001, 1001, tol, pattern_rec.get(i), 1);
      d.cuda->checkAgainst(s, got.data(), t, expected.data(), t, kCount, tol,
                           tensor_rec.get(i), 1);
      ++i;
    }
    for (const Tolerance& tol : kRefusing) {
      d.cuda->check(s, got.data(), t, kCount, 1001, 1001, tol, pattern_rec.get(i), 1);
      d.cuda->checkAgainst(s, got.data(), t, expected.data(), t, kCount, tol,
                           tensor_rec.get(i), 1);
      ++i;
    }
    d.syncCuda();
    for (std::size_t j = 0; j < std::size(kAccepting); ++j) {
      EXPECT_EQ(pattern_rec[j].mismatches, 0u) << toString(t) << " tolerance " << j;
      EXPECT_EQ(tensor_rec[j].mismatches, 0u) << toString(t) << " tolerance " << j;
      EXPECT_EQ(pattern_rec[j].checked, kCount) << toString(t) << " tolerance " << j;
      EXPECT_EQ(tensor_rec[j].checked, kCount) << toString(t) << " tolerance " << j;
    }
    // atol 999 accepts all but the last element, 500 the first 500.
    const uint64_t kRefused[] = {kCount, kCount, kCount, 1, kCount - 500};
    for (std::size_t j = 0; j < std::size(kRefusing); ++j) {
      const std::size_t r = std::size(kAccepting) + j;
      EXPECT_EQ(pattern_rec[r].mismatches, kRefused[j]) << toString(t) << " refusing " << j;
      EXPECT_EQ(tensor_rec[r].mismatches, kRefused[j]) << toString(t) << " refusing " << j;
    }
  }
}

// ------------------------------------------------------------------ reduce

constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                                      ReduceOp::Avg};

using Images = std::vector<std::vector<std::byte>>;

// `n` sources of random values (makeAddData's: floating ones in [-1000,
// 1000], rounded, so that sums and averages round at every step and
// float16 products overflow to infinity; integers random bits, so that sums
// and products wrap).
Images reduceSources(DType t, int n, std::size_t count, uint32_t seed) {
  Images out;
  for (int j = 0; j < n; ++j)
    out.push_back(makeAddData(t, count, seed + static_cast<uint32_t>(j)).a);
  return out;
}

// The reference: the host device's reduce of the same sources.
std::vector<std::byte> hostDeviceReduce(const Images& srcs, DType t, ReduceOp op,
                                        std::size_t count) {
  std::unique_ptr<Device> host = createDevice("host", 0);
  const std::size_t bytes = count * dtypeSize(t);
  std::vector<void*> buffers;
  for (const auto& image : srcs) {
    buffers.push_back(host->allocate(bytes));
    std::memcpy(buffers.back(), image.data(), bytes);
  }
  void* dst = host->allocate(bytes);
  host->reduce(host->defaultStream(), dst, buffers.data(), buffers.size(), t, op, count);
  host->synchronize(host->defaultStream(), testTimeout());
  std::vector<std::byte> out(static_cast<std::byte*>(dst), static_cast<std::byte*>(dst) + bytes);
  host->deallocate(dst);
  for (void* p : buffers) host->deallocate(p);
  return out;
}

// Where the cuda device's reduce reads and writes: each source (and dst)
// `offset` elements into its own buffer, or dst the middle source.
struct ReducePlacement {
  std::size_t src_offset = 0;
  std::size_t dst_offset = 0;
  bool into_middle_source = false;
};

std::vector<std::byte> cudaDeviceReduce(Device& device, Stream& s, const Images& srcs, DType t,
                                        ReduceOp op, std::size_t count, ReducePlacement at = {}) {
  const std::size_t size = dtypeSize(t);
  const std::size_t bytes = count * size;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<const void*> pointers;
  for (const auto& image : srcs) {
    buffers.push_back(std::make_unique<Buffer>(device, bytes + at.src_offset * size));
    auto* p = static_cast<std::byte*>(buffers.back()->data()) + at.src_offset * size;
    upload(p, image.data(), bytes);
    pointers.push_back(p);
  }
  Buffer dst_buffer(device, bytes + at.dst_offset * size);
  void* dst = static_cast<std::byte*>(dst_buffer.data()) + at.dst_offset * size;
  if (at.into_middle_source) dst = const_cast<void*>(pointers[pointers.size() / 2]);
  device.reduce(s, dst, pointers.data(), pointers.size(), t, op, count);
  device.synchronize(s, testTimeout());
  return readBack(dst, bytes);
}

std::string describeReduce(DType t, ReduceOp op, std::size_t n, std::size_t count) {
  return fmt::format("{} {} of {} sources, {} elements", toString(t), toString(op), n, count);
}

// For every dtype and op: the cuda device's reduce of `n` sources of
// `count` elements placed as `at` says, against the host device's, bit for
// bit.
void expectReduceMatchesTheHostDevice(int n, std::size_t count, ReducePlacement at = {}) {
  auto device = makeCudaDevice();
  auto s = device->createStream();
  for (const auto& [t, name] : kDTypeNames) {
    const Images srcs = reduceSources(t, n, count, 21);
    for (ReduceOp op : kAllReduceOps) {
      const std::vector<std::byte> got = cudaDeviceReduce(*device, *s, srcs, t, op, count, at);
      const std::vector<std::byte> want = hostDeviceReduce(srcs, t, op, count);
      const int64_t k = firstDifference(got, want, t);
      EXPECT_EQ(k, -1) << describeReduce(t, op, srcs.size(), count) << " (offsets "
                       << at.src_offset << "/" << at.dst_offset
                       << (at.into_middle_source ? ", into the middle source" : "")
                       << "): element " << k << " is "
                       << (k >= 0 ? loadAsDouble(got.data(), t, k) : 0) << ", host has "
                       << (k >= 0 ? loadAsDouble(want.data(), t, k) : 0);
    }
  }
}

TEST(CudaDevice, ReduceMatchesTheHostDeviceBitForBitForEveryDtypeAndOp) {
  HIR_REQUIRE_GPUS(1);
  EXPECT_TRUE(makeCudaDevice()->supports(DeviceFeature::Reduce));
  expectReduceMatchesTheHostDevice(3, 10007);  // 16-byte vectors and a tail
}

TEST(CudaDevice, ReduceOfManyElementsMatchesTheHostDevice) {
  HIR_REQUIRE_GPUS(1);
  expectReduceMatchesTheHostDevice(3, std::size_t{3} << 20);  // many vectors per thread
}

TEST(CudaDevice, ReduceOfMisalignedBuffersMatchesTheHostDevice) {
  HIR_REQUIRE_GPUS(1);
  // One element off 16-byte alignment: every buffer, the sources only, dst only.
  expectReduceMatchesTheHostDevice(3, 10007, {1, 1, false});
  expectReduceMatchesTheHostDevice(3, 10007, {1, 0, false});
  expectReduceMatchesTheHostDevice(3, 4099, {0, 1, false});
}

TEST(CudaDevice, ReduceIntoOneOfItsSourcesReadsBeforeWriting) {
  HIR_REQUIRE_GPUS(1);
  expectReduceMatchesTheHostDevice(3, 10007, {0, 0, true});
  expectReduceMatchesTheHostDevice(3, 10007, {1, 0, true});
}

TEST(CudaDevice, ReduceOfOneSourceOrOfKMaxReduceSourcesMatchesTheHostDevice) {
  HIR_REQUIRE_GPUS(1);
  expectReduceMatchesTheHostDevice(1, 4099);
  expectReduceMatchesTheHostDevice(static_cast<int>(kMaxReduceSources), 4099);
  // One source: a copy, whatever the op (avg divides by 1).
  auto device = makeCudaDevice();
  auto s = device->createStream();
  for (const auto& [t, name] : kDTypeNames) {
    const Images srcs = reduceSources(t, 1, 1000, 5);
    for (ReduceOp op : kAllReduceOps)
      EXPECT_EQ(firstDifference(cudaDeviceReduce(*device, *s, srcs, t, op, 1000), srcs[0], t), -1)
          << describeReduce(t, op, 1, 1000);
  }
}

TEST(CudaDevice, ReduceOfNoElementsLeavesDstUntouched) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  Buffer a(*device, 64), b(*device, 64), dst(*device, 64);
  const std::vector<std::byte> ones(64, std::byte{1});
  upload(dst.data(), ones.data(), 64);
  const std::vector<const void*> srcs = {a.data(), b.data()};
  for (ReduceOp op : kAllReduceOps)
    device->reduce(*s, dst.data(), srcs.data(), srcs.size(), DType::Int32, op, 0);
  device->synchronize(*s, testTimeout());
  EXPECT_EQ(readBack(dst.data(), 64), ones);
}

// The sources' pointers go into the graph with the kernel: a replay reads
// the sources' current data through them after the list is gone.
TEST(CudaDevice, ReduceIsCapturedInAGraphWithItsSourceList) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  constexpr DType kType = DType::BFloat16;
  constexpr std::size_t kCount = 10007;
  const std::size_t bytes = kCount * dtypeSize(kType);
  Buffer a(*device, bytes), b(*device, bytes), c(*device, bytes), dst(*device, bytes);
  device->beginCapture(*s);
  {
    std::vector<const void*> list = {a.data(), b.data(), c.data()};
    device->reduce(*s, dst.data(), list.data(), list.size(), kType, ReduceOp::Sum, kCount);
    std::fill(list.begin(), list.end(), nullptr);
  }
  std::unique_ptr<Graph> graph = device->endCapture(*s);
  for (uint32_t seed : {1u, 2u}) {
    const Images srcs = reduceSources(kType, 3, kCount, seed);
    upload(a.data(), srcs[0].data(), bytes);
    upload(b.data(), srcs[1].data(), bytes);
    upload(c.data(), srcs[2].data(), bytes);
    device->launchGraph(*graph, *s);
    device->synchronize(*s, testTimeout());
    EXPECT_EQ(firstDifference(readBack(dst.data(), bytes),
                              hostDeviceReduce(srcs, kType, ReduceOp::Sum, kCount), kType),
              -1)
        << "replay with seed " << seed;
  }
}

// Captured into a graph: a source in a ring of 4 slots is read from the
// slot its counter names at each replay (the counter set between replays,
// across its wrap), beside a plain source.
TEST(CudaDevice, ReduceFindsRingSourcesInTheSlotTheirCountersNameAtEachReplay) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  constexpr std::size_t kCount = 37, kSlots = 4, kStride = 160;
  Buffer ring_buf(*device, kSlots * kStride), plain(*device, kCount * sizeof(int32_t)),
      dst(*device, kCount * sizeof(int32_t)), counter(*device, sizeof(uint32_t));
  std::vector<int32_t> ring_image(kSlots * kStride / sizeof(int32_t));
  for (std::size_t k = 0; k < kSlots; ++k)
    for (std::size_t i = 0; i < kCount; ++i)
      ring_image[k * kStride / sizeof(int32_t) + i] = static_cast<int32_t>(1000 * k + i);
  upload(ring_buf.data(), ring_image.data(), kSlots * kStride);
  const std::vector<int32_t> sevens(kCount, 7);
  upload(plain.data(), sevens.data(), kCount * sizeof(int32_t));
  MessageStep sync;
  sync.counters[1] = static_cast<uint32_t*>(counter.data());
  sync.numbers[1] = 3;
  sync.slotted[1] = true;
  sync.slots = kSlots;
  sync.stride = kStride;
  device->beginCapture(*s);
  const std::vector<const void*> srcs = {plain.data(), ring_buf.data()};
  msg(*device).reduce(*s, dst.data(), srcs.data(), srcs.size(), DType::Int32,
                      ReduceOp::Sum, kCount, sync);
  std::unique_ptr<Graph> graph = device->endCapture(*s);
  for (const uint32_t c : {0u, 2u, 0xFFFFFFFEu}) {  // slots 3, 1, then (2^32 + 1) % 4 = 1
    upload(counter.data(), &c, sizeof c);
    device->launchGraph(*graph, *s);
    device->synchronize(*s, testTimeout());
    const std::size_t k = (c + 3u) % kSlots;
    const std::vector<std::byte> got = readBack(dst.data(), kCount * sizeof(int32_t));
    for (std::size_t i = 0; i < kCount; ++i) {
      int32_t v = 0;
      std::memcpy(&v, got.data() + i * sizeof v, sizeof v);
      ASSERT_EQ(v, static_cast<int32_t>(7 + 1000 * k + i)) << "counter " << c << ", element " << i;
    }
  }
}

// A reduce with waits and signals captured into a graph, of few elements
// (one fused kernel), of a grid copy's size (one grid kernel, its arrivals
// word set aside for the graph), of many (a wait kernel, the grid's
// reduction, a signal kernel) and of none: at each replay it waits for
// both semaphores (set before the replay: a host-numbered source, 7, and a
// counted one, counter + 2), signals each number and advances the counter
// by 3.
TEST(CudaDevice, ReduceWithSyncWaitsSignalsAndAdvancesAtEachReplay) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  for (const std::size_t count :
       {std::size_t{5}, std::size_t{1} << 16, std::size_t{1} << 20, std::size_t{0}}) {
    const std::size_t bytes = std::max<std::size_t>(count, 1) * sizeof(int32_t);
    Buffer a(*device, bytes), b(*device, bytes), c(*device, bytes), dst(*device, bytes);
    Buffer words(*device, 8 * sizeof(uint32_t));  // wait a, wait b, signal a, signal b, counter
    auto* w = static_cast<uint32_t*>(words.data());
    const std::vector<int32_t> ones(bytes / sizeof(int32_t), 1), poison(bytes / sizeof(int32_t), -7);
    for (Buffer* x : {&a, &b, &c}) upload(x->data(), ones.data(), bytes);
    const uint32_t start[8] = {7, 12, 0, 0, 10, 0, 0, 0};
    upload(w, start, sizeof start);
    MessageStep sync;
    sync.waits[1] = w + 0;
    sync.signals[1] = w + 2;
    sync.numbers[1] = 7;
    sync.counters[2] = w + 4;
    sync.numbers[2] = 2;
    sync.advances[2] = 3;
    sync.waits[2] = w + 1;
    sync.signals[2] = w + 3;
    sync.release = w + 5;
    device->beginCapture(*s);
    const std::vector<const void*> srcs = {a.data(), b.data(), c.data()};
    msg(*device).reduce(*s, dst.data(), srcs.data(), srcs.size(), DType::Int32,
                        ReduceOp::Sum, count, sync);
    std::unique_ptr<Graph> graph = device->endCapture(*s);
    for (uint32_t replay = 0; replay < 2; ++replay) {
      const uint32_t v = 12 + 3 * replay;  // the counted source's number at this replay
      upload(w + 1, &v, sizeof v);
      upload(dst.data(), poison.data(), bytes);
      device->launchGraph(*graph, *s);
      device->synchronize(*s, testTimeout());
      const std::vector<std::byte> got = readBack(w, 8 * sizeof(uint32_t));
      uint32_t seen[8];
      std::memcpy(seen, got.data(), sizeof seen);
      EXPECT_EQ(seen[2], 7u) << count << " elements, replay " << replay;
      EXPECT_EQ(seen[3], v) << count << " elements, replay " << replay;
      EXPECT_EQ(seen[4], v + 1) << count << " elements, replay " << replay;  // v - 2 + 3
      const std::vector<std::byte> out = readBack(dst.data(), bytes);
      int32_t first = 0, last = 0;
      std::memcpy(&first, out.data(), sizeof first);
      std::memcpy(&last, out.data() + bytes - sizeof last, sizeof last);
      EXPECT_EQ(first, count > 0 ? 3 : -7) << count << " elements, replay " << replay;
      EXPECT_EQ(last, count > 0 ? 3 : -7) << count << " elements, replay " << replay;
    }
  }
}

// A reduce with waits and signals of more elements than one block takes
// and at most a grid copy's (HIR_CUDA_GRID_COPY_MAX): one grid kernel whose
// every block waits. Launched before its semaphores are set, it must leave
// the output and the signals alone for as long as they are not (100 ms);
// once they are, every element is the sum and each source is signaled,
// the counted one advanced; a second launch right after (the arrivals word
// back at 0) does it again. The same with HIR_CUDA_GRID_COPY_MAX=0 (a wait
// kernel, the grid's reduction, a signal kernel). 65537 elements: a tail
// past the vectors; 2^18: the largest of the grid (1 MiB).
TEST(CudaDevice, AMidSizeReduceWithSyncWaitsBeforeReadingAndSignalsAfter) {
  HIR_REQUIRE_GPUS(1);
  for (const char* grid_max : {"", "0"}) {
    std::unique_ptr<Device> device = makeCudaDeviceWithEnv("HIR_CUDA_GRID_COPY_MAX", grid_max);
    auto s = device->createStream();
    for (const std::size_t count : {std::size_t{65537}, std::size_t{1} << 18}) {
      SCOPED_TRACE(fmt::format("HIR_CUDA_GRID_COPY_MAX='{}', {} elements", grid_max, count));
      const std::size_t bytes = count * sizeof(int32_t);
      Buffer a(*device, bytes), b(*device, bytes), c(*device, bytes), dst(*device, bytes);
      Buffer words(*device, 8 * sizeof(uint32_t));  // waits 0-1, signals 2-3, counter 4, release 5
      auto* w = static_cast<uint32_t*>(words.data());
      device->fill(*s, a.data(), DType::Int32, count, 1, 0);
      device->fill(*s, b.data(), DType::Int32, count, 10, 1);
      device->fill(*s, c.data(), DType::Int32, count, 100, 0);
      device->fill(*s, dst.data(), DType::Int32, count, -7, 0);
      device->synchronize(*s, testTimeout());
      const uint32_t start[8] = {4, 0, 0, 0, 10, 0, 0, 0};
      upload(w, start, sizeof start);
      struct Unblock {  // a failed check must not leave the kernel waiting
        uint32_t* release;
        ~Unblock() {
          const uint32_t one = 1;
          (void)cudaMemcpy(release, &one, sizeof one, cudaMemcpyHostToDevice);
          (void)cudaDeviceSynchronize();
        }
      } unblock{w + 5};
      MessageStep sync;
      sync.waits[1] = w + 0;  // host-numbered: 5, then 6
      sync.signals[1] = w + 2;
      sync.numbers[1] = 5;
      sync.counters[2] = w + 4;  // counted: 10 + 2, then 13 + 2
      sync.numbers[2] = 2;
      sync.advances[2] = 3;
      sync.waits[2] = w + 1;
      sync.signals[2] = w + 3;
      sync.release = w + 5;
      const std::vector<const void*> srcs = {a.data(), b.data(), c.data()};
      msg(*device).reduce(*s, dst.data(), srcs.data(), srcs.size(), DType::Int32,
                          ReduceOp::Sum, count, sync);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto word = [&](int k) {
        uint32_t v = 0;
        std::memcpy(&v, readBack(w + k, sizeof v).data(), sizeof v);
        return v;
      };
      auto element = [&](std::size_t i) {
        int32_t v = 0;
        std::memcpy(&v, readBack(static_cast<int32_t*>(dst.data()) + i, sizeof v).data(), sizeof v);
        return v;
      };
      ASSERT_EQ(element(0), -7) << "the reduction ran before its sources were ready";
      ASSERT_EQ(element(count - 1), -7);
      ASSERT_EQ(word(2), 0u) << "a source was signaled before it was read";
      ASSERT_EQ(word(3), 0u);
      const uint32_t ready[2] = {5, 12};
      ASSERT_EQ(cudaMemcpy(w, ready, sizeof ready, cudaMemcpyHostToDevice), cudaSuccess);
      device->synchronize(*s, testTimeout());
      // The next launch: its semaphores already set, its number one on.
      sync.numbers[1] = 6;
      const uint32_t next[2] = {6, 15};
      std::vector<int32_t> first(count);
      std::memcpy(first.data(), readBack(dst.data(), bytes).data(), bytes);
      EXPECT_EQ(word(2), 5u);
      EXPECT_EQ(word(3), 12u);
      EXPECT_EQ(word(4), 13u);  // 12 - 2 + 3
      ASSERT_EQ(cudaMemcpy(w, next, sizeof next, cudaMemcpyHostToDevice), cudaSuccess);
      device->fill(*s, dst.data(), DType::Int32, count, -7, 0);
      msg(*device).reduce(*s, dst.data(), srcs.data(), srcs.size(), DType::Int32,
                          ReduceOp::Sum, count, sync);
      device->synchronize(*s, testTimeout());
      std::vector<int32_t> second(count);
      std::memcpy(second.data(), readBack(dst.data(), bytes).data(), bytes);
      for (std::size_t i = 0; i < count; ++i) {
        const auto want = static_cast<int32_t>(111 + i);
        ASSERT_EQ(first[i], want) << "first launch, element " << i;
        ASSERT_EQ(second[i], want) << "second launch, element " << i;
      }
      EXPECT_EQ(word(2), 6u);
      EXPECT_EQ(word(3), 15u);
      EXPECT_EQ(word(4), 16u);
      EXPECT_EQ(word(5), 0u) << "nothing released the waits";
    }
  }
}

// A reduce with a push captured into a graph, replayed three times: the
// push copies its source into the slot of its number (counter + 1, over a
// ring of 4), signals that number and advances its counter; the source
// counted beside it is waited for (set before each replay), reduced from
// its own slot and freed. The fused kernel (few elements) and the split one
// (HIR_CUDA_KERNEL_COPY_MAX=0) alike.
TEST(CudaDevice, ReduceWithAPushCopiesIntoItsSlotAndSignalsAtEachReplay) {
  HIR_REQUIRE_GPUS(1);
  for (const char* fuse : {"65536", "0"}) {
    auto device = makeCudaDeviceWithCopyMax(fuse);
    auto s = device->createStream();
    constexpr std::size_t kCount = 8, kSlots = 4, kStride = 64;
    Buffer own(*device, kCount * sizeof(int32_t)), out_ring(*device, kSlots * kStride),
        in_ring(*device, kSlots * kStride), dst(*device, kCount * sizeof(int32_t)),
        words(*device, 8 * sizeof(uint32_t));  // push counter, free, done; src counter, ready, freed
    auto* w = static_cast<uint32_t*>(words.data());
    const uint32_t start[8] = {0, 100, 0, 0, 0, 0, 0, 0};
    upload(w, start, sizeof start);
    std::vector<int32_t> mine(kCount), theirs(kSlots * kStride / sizeof(int32_t));
    for (std::size_t i = 0; i < kCount; ++i) mine[i] = static_cast<int32_t>(i);
    for (std::size_t k = 0; k < kSlots; ++k)
      for (std::size_t i = 0; i < kCount; ++i)
        theirs[k * kStride / sizeof(int32_t) + i] = static_cast<int32_t>(1000 * k);
    upload(own.data(), mine.data(), kCount * sizeof(int32_t));
    upload(in_ring.data(), theirs.data(), kSlots * kStride);
    MessageStep sync;
    sync.slots = kSlots;
    sync.stride = kStride;
    sync.push_count = 1;
    MessageStep::Push& p = sync.pushes[0];
    p.counter = w;
    p.number = 1;
    p.advance = 1;
    p.wait_back = kSlots;
    p.wait = w + 1;
    p.dst = out_ring.data();
    p.src = own.data();
    p.bytes = kCount * sizeof(int32_t);
    p.signal = w + 2;
    p.slotted = true;
    sync.counters[1] = w + 3;
    sync.numbers[1] = 1;
    sync.advances[1] = 1;
    sync.waits[1] = w + 4;
    sync.signals[1] = w + 5;
    sync.slotted[1] = true;
    device->beginCapture(*s);
    const std::vector<const void*> srcs = {own.data(), in_ring.data()};
    msg(*device).reduce(*s, dst.data(), srcs.data(), srcs.size(), DType::Int32,
                        ReduceOp::Sum, kCount, sync);
    std::unique_ptr<Graph> graph = device->endCapture(*s);
    for (uint32_t replay = 0; replay < 3; ++replay) {
      const uint32_t v = replay + 1;
      upload(w + 4, &v, sizeof v);  // the peer's message v is in its slot
      device->launchGraph(*graph, *s);
      device->synchronize(*s, testTimeout());
      uint32_t seen[8];
      const std::vector<std::byte> got = readBack(w, sizeof seen);
      std::memcpy(seen, got.data(), sizeof seen);
      EXPECT_EQ(seen[0], v) << "fuse max " << fuse << ", replay " << replay;
      EXPECT_EQ(seen[2], v) << "fuse max " << fuse << ", replay " << replay;
      EXPECT_EQ(seen[3], v) << "fuse max " << fuse << ", replay " << replay;
      EXPECT_EQ(seen[5], v) << "fuse max " << fuse << ", replay " << replay;
      const std::vector<std::byte> slot = readBack(
          static_cast<char*>(out_ring.data()) + (v % kSlots) * kStride, kCount * sizeof(int32_t));
      EXPECT_EQ(std::memcmp(slot.data(), mine.data(), slot.size()), 0)
          << "fuse max " << fuse << ": the push is not in slot " << v % kSlots;
      const std::vector<std::byte> out = readBack(dst.data(), kCount * sizeof(int32_t));
      int32_t last = 0;
      std::memcpy(&last, out.data() + (kCount - 1) * sizeof last, sizeof last);
      EXPECT_EQ(last, static_cast<int32_t>(kCount - 1 + 1000 * (v % kSlots)))
          << "fuse max " << fuse << ", replay " << replay;
    }
  }
}

// DeviceMessages::messageStep captured into a graph, as one kernel (small parts)
// and as counted steps (HIR_CUDA_KERNEL_COPY_MAX=0), replayed three times:
// two pushes of one lane (one counter, one signal word) into the slots of
// their numbers, a plain copy, and a pull out of the slot of its number
// (its message's semaphore set before each replay); the lane's signal ends
// at its last number and every counter advances.
TEST(CudaDevice, MessageStepPushesPullsAndCopiesAtEachReplay) {
  HIR_REQUIRE_GPUS(1);
  for (const char* fuse : {"65536", "0"}) {
    auto device = makeCudaDeviceWithCopyMax(fuse);
    auto s = device->createStream();
    constexpr std::size_t kBytes = 48, kSlots = 4, kStride = 64;
    Buffer out_ring(*device, kSlots * kStride), in_ring(*device, kSlots * kStride),
        src(*device, kBytes), dst(*device, kBytes), plain(*device, kBytes),
        words(*device, 8 * sizeof(uint32_t));
    auto* w = static_cast<uint32_t*>(words.data());
    const uint32_t start[8] = {0, 100, 0, 0, 0, 0, 0, 0};
    upload(w, start, sizeof start);
    std::vector<unsigned char> mine(kBytes, 'a'), theirs(kSlots * kStride);
    for (std::size_t k = 0; k < kSlots; ++k)
      std::fill_n(theirs.begin() + static_cast<std::ptrdiff_t>(k * kStride), kBytes,
                  static_cast<unsigned char>('0' + k));
    upload(src.data(), mine.data(), kBytes);
    upload(in_ring.data(), theirs.data(), theirs.size());
    MessageStep m;
    m.slots = kSlots;
    m.stride = kStride;
    m.push_count = 2;
    m.pushes[0] = {.counter = w, .number = 1, .advance = 0, .wait_back = kSlots, .wait = w + 1,
                   .dst = out_ring.data(), .src = src.data(), .bytes = kBytes, .signal = w + 2,
                   .slotted = true};
    m.pushes[1] = m.pushes[0];
    m.pushes[1].number = 2;
    m.pushes[1].advance = 2;
    m.pull_count = 2;
    m.pulls[0] = {.dst = plain.data(), .src = src.data(), .bytes = kBytes};
    m.pulls[1] = {.counter = w + 3, .number = 1, .advance = 1, .wait = w + 4, .dst = dst.data(),
                  .src = in_ring.data(), .bytes = kBytes, .signal = w + 5, .slotted = true};
    device->beginCapture(*s);
    msg(*device).messageStep(*s, m);
    std::unique_ptr<Graph> graph = device->endCapture(*s);
    for (uint32_t replay = 0; replay < 3; ++replay) {
      const uint32_t v = replay + 1;
      upload(w + 4, &v, sizeof v);
      device->launchGraph(*graph, *s);
      device->synchronize(*s, testTimeout());
      uint32_t seen[8];
      const std::vector<std::byte> got = readBack(w, sizeof seen);
      std::memcpy(seen, got.data(), sizeof seen);
      EXPECT_EQ(seen[0], 2 * v) << "fuse max " << fuse << ", replay " << replay;
      EXPECT_EQ(seen[2], 2 * v) << "fuse max " << fuse << ", replay " << replay;
      EXPECT_EQ(seen[3], v) << "fuse max " << fuse << ", replay " << replay;
      EXPECT_EQ(seen[5], v) << "fuse max " << fuse << ", replay " << replay;
      for (const uint32_t e : {2 * v - 1, 2 * v}) {
        const std::vector<std::byte> pushed = readBack(
            static_cast<char*>(out_ring.data()) + (e % kSlots) * kStride, kBytes);
        EXPECT_EQ(std::memcmp(pushed.data(), mine.data(), kBytes), 0)
            << "fuse max " << fuse << ": push " << e << " is not in slot " << e % kSlots;
      }
      const std::vector<std::byte> pulled = readBack(dst.data(), kBytes);
      EXPECT_EQ(static_cast<char>(pulled[0]), static_cast<char>('0' + v % kSlots))
          << "fuse max " << fuse << ", replay " << replay;
      const std::vector<std::byte> copied = readBack(plain.data(), kBytes);
      EXPECT_EQ(std::memcmp(copied.data(), mine.data(), kBytes), 0) << "fuse max " << fuse;
    }
  }
}

// HIR_CUDA_STAMPS: each one-block message kernel leaves one record, its
// eight stamps in order, written at the device's teardown to the prefix's
// file of this GPU and process; a device made without it writes none.
TEST(CudaDevice, KernelStampsRecordEachOneBlockKernelAtTeardown) {
  HIR_REQUIRE_GPUS(1);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("hir-stamps-" + std::to_string(::getpid()) + "-" +
                        std::to_string(test::world().rank()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  constexpr int kSteps = 5;
  for (const bool on : {true, false}) {
    auto device = on ? makeCudaDeviceWithEnv("HIR_CUDA_STAMPS", (dir / "st").c_str())
                     : makeCudaDevice();
    auto s = device->createStream();
    Buffer src(*device, 64), a(*device, 64), b(*device, 64);
    MessageStep m;  // a push and a pull, no waits: one block
    m.push_count = 1;
    m.pushes[0] = {.dst = a.data(), .src = src.data(), .bytes = 64};
    m.pull_count = 1;
    m.pulls[0] = {.dst = b.data(), .src = src.data(), .bytes = 64};
    for (int k = 0; k < kSteps; ++k) msg(*device).messageStep(*s, m);
    device->synchronize(*s, testTimeout());
  }  // the device's teardown writes the file
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << "one file for the device made with HIR_CUDA_STAMPS";
  const std::string name = files[0].filename().string();
  EXPECT_THAT(name, ::testing::StartsWith("st.gpu"));
  EXPECT_THAT(name, ::testing::EndsWith("." + std::to_string(::getpid()) + ".csv"));
  std::ifstream in(files[0]);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line,
            "kind,sm,entry_ns,followed_ns,numbered_ns,slotted_ns,copied_ns,pushed_ns,waited_ns,"
            "end_ns");
  int rows = 0;
  unsigned long long last_entry = 0;
  while (std::getline(in, line)) {
    unsigned kind = 0, sm = 0;
    unsigned long long t[8] = {};
    ASSERT_EQ(std::sscanf(line.c_str(), "%u,%u,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu", &kind,
                          &sm, &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7]),
              10)
        << line;
    EXPECT_EQ(kind, 1u) << "a message step: " << line;
    EXPECT_GT(t[0], 0u) << line;
    for (int i = 1; i < 8; ++i) EXPECT_LE(t[i - 1], t[i]) << "stamp " << i << ": " << line;
    EXPECT_GE(t[0], last_entry) << "kernels of one stream in order: " << line;
    last_entry = t[0];
    ++rows;
  }
  EXPECT_EQ(rows, kSteps);
  fs::remove_all(dir);
}

// A step of any number of parts, up to kMaxReduceSources: a message step
// of `parts` pushes and as many pulls (one kernel), and a reduction of
// `parts` sources that waits for each and signals each (one block, a grid,
// and the three kernels above a grid), must move every part to its place,
// leave the places of the parts it does not have alone, and signal every
// part with its number, eagerly.
TEST(CudaDevice, AStepMovesAndSignalsEveryPartWhateverTheirNumber) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  constexpr std::size_t kMax = kMaxReduceSources, kBytes = 48;
  for (const std::size_t parts : {std::size_t{1}, std::size_t{2}, std::size_t{4},
                                  std::size_t{5}, kMax}) {
    // Words: [0, kMax) pushes' waits, [kMax, 2 kMax) their signals, then
    // the pulls' waits and signals.
    Buffer words(*device, 4 * kMax * sizeof(uint32_t)), src(*device, 2 * kMax * kBytes),
        dst(*device, 2 * kMax * kBytes);
    auto* w = static_cast<uint32_t*>(words.data());
    std::vector<uint32_t> start(4 * kMax, 0);
    for (std::size_t k = 0; k < kMax; ++k) start[k] = start[2 * kMax + k] = 100 + k;
    upload(w, start.data(), start.size() * sizeof(uint32_t));
    std::vector<unsigned char> bytes(2 * kMax * kBytes), poison(2 * kMax * kBytes, 0xEE);
    for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<unsigned char>(k * 7);
    upload(src.data(), bytes.data(), bytes.size());
    upload(dst.data(), poison.data(), poison.size());
    MessageStep m;
    m.push_count = m.pull_count = parts;
    for (std::size_t k = 0; k < parts; ++k) {
      auto part = [&](std::size_t at, std::size_t word) {
        return MessageStep::Copy{.number = static_cast<uint32_t>(100 + k), .wait = w + word + k,
                                 .dst = static_cast<char*>(dst.data()) + at * kBytes,
                                 .src = static_cast<const char*>(src.data()) + at * kBytes,
                                 .bytes = kBytes, .signal = w + word + kMax + k};
      };
      m.pushes[k] = part(k, 0);
      m.pulls[k] = part(kMax + k, 2 * kMax);
    }
    msg(*device).messageStep(*s, m);
    device->synchronize(*s, testTimeout());
    const std::vector<std::byte> moved = readBack(dst.data(), 2 * kMax * kBytes);
    const std::vector<std::byte> signals = readBack(w, 4 * kMax * sizeof(uint32_t));
    for (std::size_t k = 0; k < kMax; ++k) {
      for (const std::size_t at : {k, kMax + k}) {
        const unsigned char* want = k < parts ? bytes.data() + at * kBytes : poison.data();
        EXPECT_EQ(std::memcmp(moved.data() + at * kBytes, want, kBytes), 0)
            << parts << " parts: " << (at < kMax ? "push " : "pull ") << k
            << (k < parts ? " did not move its bytes" : " is not a part, yet its place changed");
      }
      for (const std::size_t word : {kMax + k, 3 * kMax + k}) {
        uint32_t seen = 0;
        std::memcpy(&seen, signals.data() + word * sizeof(uint32_t), sizeof seen);
        EXPECT_EQ(seen, k < parts ? 100 + k : 0u)
            << parts << " parts: the signal of " << (word < 2 * kMax ? "push " : "pull ") << k;
      }
    }

    for (const std::size_t count :
         {std::size_t{5}, std::size_t{1} << 16, std::size_t{1} << 20}) {
      const std::size_t size = count * sizeof(int32_t);
      std::vector<std::unique_ptr<Buffer>> sources;
      std::vector<const void*> srcs;
      for (std::size_t j = 0; j < parts; ++j) {
        sources.push_back(std::make_unique<Buffer>(*device, size));
        const std::vector<int32_t> values(count, static_cast<int32_t>(j + 1));
        upload(sources.back()->data(), values.data(), size);
        srcs.push_back(sources.back()->data());
      }
      Buffer out(*device, size);
      const std::vector<int32_t> bad(count, -7);
      upload(out.data(), bad.data(), size);
      upload(w + kMax, start.data() + kMax, kMax * sizeof(uint32_t));  // signals back to 0
      MessageStep sync;
      for (std::size_t j = 0; j < parts; ++j) {
        sync.numbers[j] = static_cast<uint32_t>(100 + j);
        sync.waits[j] = w + j;
        sync.signals[j] = w + kMax + j;
      }
      msg(*device).reduce(*s, out.data(), srcs.data(), parts, DType::Int32, ReduceOp::Sum, count,
                          sync);
      device->synchronize(*s, testTimeout());
      const std::vector<std::byte> got = readBack(out.data(), size);
      const auto sum = static_cast<int32_t>(parts * (parts + 1) / 2);
      for (const std::size_t k : {std::size_t{0}, count / 2, count - 1}) {
        int32_t e = 0;
        std::memcpy(&e, got.data() + k * sizeof e, sizeof e);
        EXPECT_EQ(e, sum) << parts << " sources of " << count << " elements: element " << k;
      }
      const std::vector<std::byte> after = readBack(w + kMax, kMax * sizeof(uint32_t));
      for (std::size_t j = 0; j < kMax; ++j) {
        uint32_t seen = 0;
        std::memcpy(&seen, after.data() + j * sizeof seen, sizeof seen);
        EXPECT_EQ(seen, j < parts ? 100 + j : 0u)
            << parts << " sources of " << count << " elements: the signal of source " << j;
      }
    }
  }
}

// Direct delivery (device.h), counted parts over a ring of 2 slots, as
// HostDeviceReduce.AMessageWhosePullPostedFirstSkipsTheSlot: a pull running
// first posts, its push writes straight into its buffer and marks the
// message, the slot keeps its poison; a push before its pull posts goes
// through its slot. That is the one-block kernel's (4,000 bytes). Larger
// parts (300,000 bytes: a grid kernel) and parts without kernel copies
// (HIR_CUDA_KERNEL_COPY_MAX=0, HIR_CUDA_GRID_COPY_MAX=0: counted steps on
// the copy engine) ignore direct delivery: no post, every message through
// its slot.
TEST(CudaDevice, AMessageWhosePullPostedFirstSkipsTheSlot) {
  HIR_REQUIRE_GPUS(1);
  struct Case {
    const char* kernel_max;
    const char* grid_max;
    std::size_t bytes;
    bool direct;
  };
  for (const Case& k : {Case{"65536", "1048576", 4000, true},
                        Case{"65536", "1048576", 300000, false}, Case{"0", "0", 4000, false}}) {
    SCOPED_TRACE(fmt::format("{} bytes, kernel copies up to {}, grids up to {}", k.bytes,
                             k.kernel_max, k.grid_max));
    auto device = makeCudaDeviceWithEnv(
        {{"HIR_CUDA_KERNEL_COPY_MAX", k.kernel_max}, {"HIR_CUDA_GRID_COPY_MAX", k.grid_max}});
    auto s = device->createStream();
    auto s2 = device->createStream();
    constexpr std::size_t kSlots = 2;
    const std::size_t bytes = k.bytes, stride = (bytes + 4095) / 4096 * 4096;
    Buffer ring(*device, kSlots * stride), src(*device, bytes), dst(*device, bytes),
        words(*device, 8 * sizeof(uint32_t));
    auto* w = static_cast<uint32_t*>(words.data());
    // push counter, "free" (pull -> push), "done" (push -> pull), pull counter, posted, marks[2]
    const uint32_t start[8] = {5, 5, 5, 5, 5, 0, 0, 0};
    upload(w, start, sizeof start);
    const std::vector<unsigned char> poison(kSlots * stride, 'p'), a(bytes, 'a'), b(bytes, 'b');
    upload(ring.data(), poison.data(), poison.size());
    MessageStep m;
    m.slots = kSlots;
    m.stride = stride;
    const MessageStep::Copy push{.counter = w, .number = 1, .advance = 1, .wait_back = kSlots,
                                 .wait = w + 1, .dst = ring.data(), .src = src.data(),
                                 .bytes = bytes, .signal = w + 2, .slotted = true,
                                 .direct = dst.data(), .posted = w + 4, .mark = w + 5};
    const MessageStep::Copy pull{.counter = w + 3, .number = 1, .advance = 1, .wait = w + 2,
                                 .dst = dst.data(), .src = ring.data(), .bytes = bytes,
                                 .signal = w + 1, .slotted = true, .posted = w + 4,
                                 .mark = w + 5};
    auto enqueue = [&](Stream& on, const MessageStep::Copy& c, bool is_push) {
      MessageStep one = m;
      (is_push ? one.pushes[one.push_count++] : one.pulls[one.pull_count++]) = c;
      msg(*device).messageStep(on, one);
    };
    auto word = [&](int i) {
      uint32_t v = 0;
      std::memcpy(&v, readBack(w + i, sizeof v).data(), sizeof v);
      return v;
    };
    auto slotByte = [&](std::size_t slot) {
      return static_cast<char>(readBack(static_cast<char*>(ring.data()) + slot * stride, 1)[0]);
    };
    // Message 6 (slot 0): the pull first.
    upload(src.data(), a.data(), bytes);
    enqueue(*s2, pull, false);
    // A pull that posts does so when its kernel starts; one that does not
    // gets 50 ms to show that it does not.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    if (k.direct)
      while (word(4) != 6 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(word(4), k.direct ? 6u : 5u) << "the pull's post";
    enqueue(*s, push, true);
    device->synchronize(*s, testTimeout());
    device->synchronize(*s2, testTimeout());
    EXPECT_EQ(readBack(dst.data(), bytes), readBack(src.data(), bytes));
    EXPECT_EQ(slotByte(0), k.direct ? 'p' : 'a') << "where message 6 went";
    if (k.direct) EXPECT_EQ(word(5), 6u) << "the push marks message 6 direct";
    // Message 7 (slot 1): the push first, into its slot.
    upload(src.data(), b.data(), bytes);
    enqueue(*s, push, true);
    device->synchronize(*s, testTimeout());
    EXPECT_EQ(slotByte(1), 'b') << "message 7 is not in slot 1";
    EXPECT_EQ(static_cast<char>(readBack(dst.data(), 1)[0]), 'a')
        << "a push that saw no post wrote into the pull's buffer";
    enqueue(*s2, pull, false);
    device->synchronize(*s2, testTimeout());
    EXPECT_EQ(readBack(dst.data(), bytes), readBack(src.data(), bytes))
        << "the pull did not copy message 7 out";
    EXPECT_EQ(word(0), 7u);
    EXPECT_EQ(word(1), 7u);
    EXPECT_EQ(word(3), 7u);
    if (k.direct) EXPECT_EQ(word(6), directMarkReset(7));
  }
}

// Parts in lines (device.h's inline flags), captured and replayed: a
// counted push of an odd size into a ring writes the lines the host device
// writes, a counted pull out of it gets the bytes back, at each replay; the
// device offers lines up to its fused copies' size.
TEST(CudaDevice, PartsInLinesAreTheHostDevicesLinesAtEachReplay) {
  HIR_REQUIRE_GPUS(1);
  EXPECT_EQ(msg(*makeCudaDeviceWithCopyMax("0")).inlineFlagsMax(), 0u);
  auto device = makeCudaDeviceWithCopyMax("65536");
  ASSERT_TRUE(msg(*device).supportsInline());
  EXPECT_EQ(msg(*device).inlineFlagsMax(), 65536u);
  auto s = device->createStream();
  constexpr std::size_t kBytes = 4099, kSlots = 4, kStride = 2 * 4100;
  Buffer ring(*device, kSlots * kStride), src(*device, kBytes), dst(*device, kBytes),
      words(*device, 4 * sizeof(uint32_t));
  auto* w = static_cast<uint32_t*>(words.data());
  const uint32_t start[4] = {0, 0, 0, 0};  // push counter, push's slot freed, pull counter, signal
  upload(w, start, sizeof start);
  std::vector<unsigned char> bytes(kBytes);
  for (std::size_t k = 0; k < kBytes; ++k) bytes[k] = static_cast<unsigned char>(k * 7 + 3);
  upload(src.data(), bytes.data(), kBytes);
  MessageStep push;
  push.slots = kSlots;
  push.stride = kStride;
  push.push_count = 1;
  push.pushes[0] = {.counter = w, .number = 1, .advance = 1, .wait_back = kSlots, .wait = w + 1,
                    .dst = ring.data(), .src = src.data(), .bytes = kBytes, .slotted = true,
                    .inline_flags = true};
  MessageStep pull = push;
  pull.push_count = 0;
  pull.pull_count = 1;
  pull.pulls[0] = {.counter = w + 2, .number = 1, .advance = 1, .dst = dst.data(),
                   .src = ring.data(), .bytes = kBytes, .signal = w + 3, .slotted = true,
                   .inline_flags = true};
  device->beginCapture(*s);
  msg(*device).messageStep(*s, push);
  msg(*device).messageStep(*s, pull);
  std::unique_ptr<Graph> graph = device->endCapture(*s);
  std::unique_ptr<Device> host = createDevice("host", 0);
  const std::size_t lines = inlineLineBytes(kBytes);
  std::vector<char> want(lines);
  for (uint32_t v = 1; v <= 3; ++v) {
    upload(dst.data(), std::vector<char>(kBytes, 0).data(), kBytes);
    device->launchGraph(*graph, *s);
    device->synchronize(*s, testTimeout());
    const std::vector<std::byte> got = readBack(dst.data(), kBytes);
    EXPECT_EQ(std::memcmp(got.data(), bytes.data(), kBytes), 0) << "replay " << v;
    MessageStep hosted;
    hosted.push_count = 1;
    hosted.pushes[0] = {.number = v, .dst = want.data(), .src = bytes.data(), .bytes = kBytes,
                        .inline_flags = true};
    msg(*host).messageStep(host->defaultStream(), hosted);
    host->synchronize(host->defaultStream(), testTimeout());
    const std::vector<std::byte> in_ring =
        readBack(static_cast<char*>(ring.data()) + (v % kSlots) * kStride, lines);
    EXPECT_EQ(std::memcmp(in_ring.data(), want.data(), lines), 0)
        << "replay " << v << ": the lines differ from the host device's";
    uint32_t seen[4];
    std::memcpy(seen, readBack(w, sizeof seen).data(), sizeof seen);
    EXPECT_EQ(seen[0], v);
    EXPECT_EQ(seen[2], v);
    EXPECT_EQ(seen[3], v);
  }
}

// Several parts in lines in one step, of 1 to 1100 bytes (fewer words in
// all than the block's threads, and more), pushes and pulls: each part's
// lines are the host device's and each arrives whole, at each replay.
// Pushes of at most 128 bytes each, of distinct lanes, go each in a warp of
// its own (HIR_CUDA_PUSHES_AT_ONCE, on by default); a larger one sends the
// step's pushes through the block's loop. Both, against the host device.
TEST(CudaDevice, StepsOfSeveralPartsInLinesMoveEachPartAtEachReplay) {
  HIR_REQUIRE_GPUS(1);
  std::unique_ptr<Device> host = createDevice("host", 0);
  constexpr std::size_t kSlots = 2;
  for (const char* at_once : {"1", "0"}) {
    auto device = makeCudaDeviceWithEnv({{"HIR_CUDA_PUSHES_AT_ONCE", at_once}});
    auto s = device->createStream();
    for (const std::vector<std::size_t>& sizes :
         {std::vector<std::size_t>{1, 6, 128, 40, 8, 3, 64, 100, 17, 128},
          std::vector<std::size_t>{1, 6, 128, 130, 40, 8}, std::vector<std::size_t>{8, 1100, 3}}) {
      const std::size_t parts = sizes.size();
      const std::size_t stride = inlineLineBytes(*std::max_element(sizes.begin(), sizes.end()));
      Buffer words(*device, 4 * parts * sizeof(uint32_t));
      auto* w = static_cast<uint32_t*>(words.data());
      upload(w, std::vector<uint32_t>(4 * parts, 0).data(), 4 * parts * sizeof(uint32_t));
      std::vector<std::unique_ptr<Buffer>> srcs, rings, dsts;
      std::vector<std::vector<unsigned char>> data;
      MessageStep push, pull;
      push.slots = pull.slots = kSlots;
      push.stride = pull.stride = stride;
      push.push_count = pull.pull_count = parts;
      for (std::size_t k = 0; k < parts; ++k) {
        srcs.push_back(std::make_unique<Buffer>(*device, sizes[k]));
        rings.push_back(std::make_unique<Buffer>(*device, kSlots * stride));
        dsts.push_back(std::make_unique<Buffer>(*device, sizes[k]));
        std::vector<unsigned char> d(sizes[k]);
        for (std::size_t b = 0; b < sizes[k]; ++b)
          d[b] = static_cast<unsigned char>(b * 13 + k + 1);
        upload(srcs[k]->data(), d.data(), d.size());
        data.push_back(std::move(d));
        // Words: push k's counter and signal, pull k's counter and signal.
        push.pushes[k] = {.counter = w + 4 * k, .number = 1, .advance = 1, .dst = rings[k]->data(),
                          .src = srcs[k]->data(), .bytes = sizes[k], .signal = w + 4 * k + 1,
                          .slotted = true, .inline_flags = true};
        pull.pulls[k] = {.counter = w + 4 * k + 2, .number = 1, .advance = 1,
                         .dst = dsts[k]->data(), .src = rings[k]->data(), .bytes = sizes[k],
                         .signal = w + 4 * k + 3, .slotted = true, .inline_flags = true};
      }
      device->beginCapture(*s);
      msg(*device).messageStep(*s, push);
      msg(*device).messageStep(*s, pull);
      std::unique_ptr<Graph> graph = device->endCapture(*s);
      for (uint32_t v = 1; v <= 3; ++v) {
        for (std::size_t k = 0; k < parts; ++k)
          upload(dsts[k]->data(), std::vector<char>(sizes[k], 0).data(), sizes[k]);
        device->launchGraph(*graph, *s);
        device->synchronize(*s, testTimeout());
        std::vector<uint32_t> seen(4 * parts);
        std::memcpy(seen.data(), readBack(w, seen.size() * sizeof(uint32_t)).data(),
                    seen.size() * sizeof(uint32_t));
        for (std::size_t k = 0; k < parts; ++k) {
          const std::string where = "part " + std::to_string(k) + " of " +
                                    std::to_string(sizes[k]) + " bytes (of " +
                                    std::to_string(parts) + "), replay " + std::to_string(v);
          const std::vector<std::byte> got = readBack(dsts[k]->data(), sizes[k]);
          EXPECT_EQ(std::memcmp(got.data(), data[k].data(), sizes[k]), 0) << where;
          std::vector<char> want(inlineLineBytes(sizes[k]));
          MessageStep hosted;
          hosted.push_count = 1;
          hosted.pushes[0] = {.number = v, .dst = want.data(), .src = data[k].data(),
                              .bytes = sizes[k], .inline_flags = true};
          msg(*host).messageStep(host->defaultStream(), hosted);
          host->synchronize(host->defaultStream(), testTimeout());
          const std::vector<std::byte> lines = readBack(
              static_cast<char*>(rings[k]->data()) + (v % kSlots) * stride, want.size());
          EXPECT_EQ(std::memcmp(lines.data(), want.data(), want.size()), 0)
              << where << ": the lines differ from the host device's";
          for (int word = 0; word < 4; ++word)
            EXPECT_EQ(seen[4 * k + static_cast<std::size_t>(word)], v)
                << where << ", word " << word << ", HIR_CUDA_PUSHES_AT_ONCE=" << at_once;
        }
      }
    }
  }
}

// Two pushes in lines of one lane (one counter, one signal, numbers 1 and
// 2, the second advancing): the signal ends at the later number at every
// replay, with the pushes at once on or off (they are not taken at once).
TEST(CudaDevice, PushesOfOneLaneInLinesSignalTheLaterNumber) {
  HIR_REQUIRE_GPUS(1);
  std::unique_ptr<Device> host = createDevice("host", 0);
  constexpr std::size_t kSlots = 4, kBytes = 8;
  const std::size_t stride = inlineLineBytes(kBytes);
  for (const char* at_once : {"1", "0"}) {
    auto device = makeCudaDeviceWithEnv({{"HIR_CUDA_PUSHES_AT_ONCE", at_once}});
    auto s = device->createStream();
    Buffer words(*device, 2 * sizeof(uint32_t));  // the counter, the signal
    auto* w = static_cast<uint32_t*>(words.data());
    upload(w, std::vector<uint32_t>(2, 0).data(), 2 * sizeof(uint32_t));
    Buffer ring(*device, kSlots * stride), src0(*device, kBytes), src1(*device, kBytes);
    const std::vector<unsigned char> d0{1, 2, 3, 4, 5, 6, 7, 8}, d1{9, 8, 7, 6, 5, 4, 3, 2};
    upload(src0.data(), d0.data(), kBytes);
    upload(src1.data(), d1.data(), kBytes);
    MessageStep push;
    push.slots = kSlots;
    push.stride = stride;
    push.push_count = 2;
    push.pushes[0] = {.counter = w, .number = 1, .advance = 0, .dst = ring.data(),
                      .src = src0.data(), .bytes = kBytes, .signal = w + 1, .slotted = true,
                      .inline_flags = true};
    push.pushes[1] = {.counter = w, .number = 2, .advance = 2, .dst = ring.data(),
                      .src = src1.data(), .bytes = kBytes, .signal = w + 1, .slotted = true,
                      .inline_flags = true};
    device->beginCapture(*s);
    msg(*device).messageStep(*s, push);
    std::unique_ptr<Graph> graph = device->endCapture(*s);
    for (uint32_t r = 1; r <= 4; ++r) {
      device->launchGraph(*graph, *s);
      device->synchronize(*s, testTimeout());
      std::vector<uint32_t> seen(2);
      std::memcpy(seen.data(), readBack(w, 2 * sizeof(uint32_t)).data(), 2 * sizeof(uint32_t));
      const std::string where =
          "replay " + std::to_string(r) + ", HIR_CUDA_PUSHES_AT_ONCE=" + at_once;
      EXPECT_EQ(seen[0], 2 * r) << where << ": the counter";
      EXPECT_EQ(seen[1], 2 * r) << where << ": the signal";
      for (uint32_t k = 0; k < 2; ++k) {
        const uint32_t v = 2 * (r - 1) + 1 + k;
        std::vector<char> want(stride);
        MessageStep hosted;
        hosted.push_count = 1;
        hosted.pushes[0] = {.number = v, .dst = want.data(), .src = (k == 0 ? d0 : d1).data(),
                            .bytes = kBytes, .inline_flags = true};
        msg(*host).messageStep(host->defaultStream(), hosted);
        host->synchronize(host->defaultStream(), testTimeout());
        const std::vector<std::byte> lines =
            readBack(static_cast<char*>(ring.data()) + (v % kSlots) * stride, stride);
        EXPECT_EQ(std::memcmp(lines.data(), want.data(), stride), 0)
            << where << ", push " << k << ": the lines differ from the host device's";
      }
    }
  }
}

// A reduction of 4 sources, the last 3 in lines, pushed by another stream
// after the reduction was enqueued (last source first): for every dtype and
// op, what the host device gives for the same sources. With
// HIR_CUDA_SPREAD_SOURCES on (the default) and off; the counts put the
// units of every source (4 bytes, or an element of 8) at, just past and
// far past one thread per source and unit (256 threads: 64 units a
// source), where the spread path gives way to the batched one.
TEST(CudaDevice, ReduceOfSourcesInLinesMatchesTheHostDevice) {
  HIR_REQUIRE_GPUS(1);
  constexpr int kSources = 4;
  uint32_t v = 0;
  for (const char* spread : {"1", "0"}) {
    auto device = makeCudaDeviceWithEnv(
        {{"HIR_CUDA_KERNEL_COPY_MAX", "65536"}, {"HIR_CUDA_SPREAD_SOURCES", spread}});
    auto s = device->createStream();
    auto s2 = device->createStream();
    for (const auto& [t, name] : kDTypeNames) {
      const std::size_t per_unit = dtypeSize(t) < 4 ? 4 / dtypeSize(t) : 1;
      for (std::size_t count : {std::size_t{3}, 64 * per_unit, 64 * per_unit + 1,
                                std::size_t{5001}}) {
        const std::string what = fmt::format("HIR_CUDA_SPREAD_SOURCES={}, ", spread);
        const std::size_t bytes = count * dtypeSize(t);
        const Images images = reduceSources(t, kSources, count, 33);
        std::vector<std::unique_ptr<Buffer>> buffers, lines;
        for (const auto& image : images) {
          buffers.push_back(std::make_unique<Buffer>(*device, bytes));
          upload(buffers.back()->data(), image.data(), bytes);
          lines.push_back(std::make_unique<Buffer>(*device, inlineLineBytes(bytes)));
        }
        Buffer out(*device, bytes), signals(*device, kSources * sizeof(uint32_t));
        auto* signal = static_cast<uint32_t*>(signals.data());
        for (ReduceOp op : kAllReduceOps) {
          ++v;
          MessageStep sync, push;
          const void* from[kSources] = {buffers[0]->data()};
          for (int j = 1; j < kSources; ++j) {
            sync.numbers[j] = v;
            sync.signals[j] = signal + j;
            sync.inline_flags[j] = true;
            from[j] = lines[j]->data();
            push.pushes[kSources - 1 - j] = {.number = v, .dst = lines[j]->data(),
                                             .src = buffers[j]->data(), .bytes = bytes,
                                             .inline_flags = true};
          }
          push.push_count = kSources - 1;
          msg(*device).reduce(*s, out.data(), from, kSources, t, op, count, sync);
          msg(*device).messageStep(*s2, push);
          device->synchronize(*s, testTimeout());
          const std::vector<std::byte> got = readBack(out.data(), bytes);
          const std::vector<std::byte> want = hostDeviceReduce(images, t, op, count);
          const int64_t k = firstDifference(got, want, t);
          EXPECT_EQ(k, -1) << what << describeReduce(t, op, kSources, count) << ": element "
                           << k;
          std::vector<uint32_t> seen(kSources);
          std::memcpy(seen.data(), readBack(signal, kSources * sizeof(uint32_t)).data(),
                      kSources * sizeof(uint32_t));
          for (int j = 1; j < kSources; ++j)
            EXPECT_EQ(seen[j], v) << what << describeReduce(t, op, kSources, count)
                                  << ", source " << j;
        }
        device->synchronize(*s2, testTimeout());
      }
    }
  }
}

TEST(CudaDevice, TimingEventsMeasureTheWorkBetweenThemAndOrderStreams) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto a = device->createStream();
  auto b = device->createStream();
  auto from = device->createTimingEvent();
  auto to = device->createTimingEvent();
  device->record(*from, *a);
  cuda::testSpin(*a, 50);
  device->record(*to, *a);
  // Timing events are events: another stream can wait for one.
  std::atomic<bool> after_spin{false};
  device->wait(*b, *to);
  device->launchHostFunc(*b, [&] { after_spin = true; });
  device->synchronize(*b, testTimeout());
  EXPECT_TRUE(after_spin.load());
  EXPECT_TRUE(device->query(*to));
  const double ms = device->elapsedMs(*from, *to);
  EXPECT_GE(ms, 45.0);
  EXPECT_LE(ms, 500.0);
}

TEST(CudaDevice, ElapsedMsOfAnEventStillPendingIsAnInternalError) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  auto s = device->createStream();
  auto from = device->createTimingEvent();
  auto to = device->createTimingEvent();
  device->record(*from, *s);
  cuda::testSpin(*s, 300);
  device->record(*to, *s);
  EXPECT_THROW(device->elapsedMs(*from, *to), InternalError);
  device->synchronize(*s, testTimeout());
  EXPECT_GE(device->elapsedMs(*from, *to), 250.0);
}

// ------------------------------------------------------ stream semaphores

// Makes sure a stream that waits on `flag` is released at scope exit even
// when the test fails half-way (a stream blocked forever would hang the
// device's teardown).
class SemaphoreRelease {
 public:
  SemaphoreRelease(Device& d, uint32_t* flag) : device_(d), flag_(flag) {}
  ~SemaphoreRelease() {
    try {
      auto s = device_.createStream();
      device_.writeValue(*s, flag_, 0x7fffffffu);
      device_.synchronize(*s, std::chrono::seconds(10));
    } catch (...) {
    }
  }

 private:
  Device& device_;
  uint32_t* flag_;
};


namespace {

// WaitValueHoldsAStreamUntilAnotherStreamWrites on `d`.
void waitValueHoldsAStreamUntilAnotherStreamWrites(Device& d) {
  Buffer flag_mem(d, 4);
  auto* flag = static_cast<uint32_t*>(flag_mem.data());
  constexpr std::size_t kCount = 4096;
  Buffer out(d, kCount * 4);
  auto waiter = d.createStream();
  auto writer = d.createStream();
  auto done = d.createEvent();
  SemaphoreRelease release(d, flag);

  d.waitValue(*waiter, flag, 1);
  d.fill(*waiter, out.data(), DType::Int32, kCount, 9, 2);
  d.record(*done, *waiter);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(d.query(*done)) << "the wait did not hold the stream";

  d.writeValue(*writer, flag, 1);
  d.synchronize(*done, testTimeout());
  EXPECT_EQ(firstDifference(readBack(out.data(), out.bytes()),
                            hostPattern(DType::Int32, kCount, 9, 2), DType::Int32),
            -1);

  // Greater-or-equal: a later sequence number satisfies an earlier wait.
  d.writeValue(*writer, flag, 5);
  d.synchronize(*writer, testTimeout());
  d.waitValue(*waiter, flag, 3);
  d.record(*done, *waiter);
  d.synchronize(*done, std::chrono::seconds(5));
}

}  // namespace

// For kernel and memop semaphores alike (HIR_CUDA_SEMAPHORES).
TEST(CudaDevice, WaitValueHoldsAStreamUntilAnotherStreamWrites) {
  HIR_REQUIRE_GPUS(1);
  inEachSemaphoreMode(waitValueHoldsAStreamUntilAnotherStreamWrites);
}

namespace {

// SignaledCopyWaitsForTheFlagAndSignalsAfterTheCopy on `d`: no copy (a wait
// and a signal alone), a small copy (one kernel, at the limit of the kernel
// path too), mid-size ones (one grid kernel, by 16-byte vectors and by
// bytes, up to the limit of that path) and a large one (the copy engine
// path).
void signaledCopyWaitsForTheFlagAndSignalsAfterTheCopy(Device& d) {
  const std::size_t sizes[] = {0, 100, 64 << 10, (64 << 10) + 16, (1 << 20) + 3, 4 << 20,
                               (4 << 20) + 16};
  Records records(d, std::size(sizes));
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    const std::size_t bytes = sizes[i];
    SCOPED_TRACE(fmt::format("{} bytes", bytes));
    const std::size_t room = std::max<std::size_t>(bytes, 16);
    Buffer flags(d, 8), src(d, room), dst(d, room);
    auto* wait_flag = static_cast<uint32_t*>(flags.data());
    uint32_t* signal = wait_flag + 1;
    auto copier = d.createStream(), writer = d.createStream(), reader = d.createStream();
    auto copied = d.createEvent(), read = d.createEvent();
    d.fill(*copier, src.data(), DType::UInt8, bytes, 7, 1);
    d.fill(*copier, dst.data(), DType::UInt8, bytes, 0, 0);
    d.fill(*copier, flags.data(), DType::Int32, 2, 0, 0);
    d.synchronize(*copier, testTimeout());
    SemaphoreRelease release(d, wait_flag);

    msg(d).signaledCopy(*copier, dst.data(), src.data(), bytes, wait_flag, 1, signal, 3);
    d.record(*copied, *copier);
    d.waitValue(*reader, signal, 3);
    d.check(*reader, dst.data(), DType::UInt8, bytes, 7, 1, 0, records.get(i), 0);
    d.record(*read, *reader);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(d.query(*copied)) << "the copy did not wait for the flag";
    EXPECT_FALSE(d.query(*read)) << "the signal came before the flag";

    d.writeValue(*writer, wait_flag, 1);
    d.synchronize(*read, testTimeout());
    EXPECT_EQ(records[i].mismatches, 0u);
    EXPECT_EQ(records[i].checked, bytes);
  }
}

}  // namespace

// signaledCopy holds the copy until the flag is written, and a stream that
// waits for its signal sees the whole copy; for kernel and memop semaphores
// alike (HIR_CUDA_SEMAPHORES).
TEST(CudaDevice, SignaledCopyWaitsForTheFlagAndSignalsAfterTheCopy) {
  HIR_REQUIRE_GPUS(1);
  inEachSemaphoreMode(signaledCopyWaitsForTheFlagAndSignalsAfterTheCopy);
}

// Grid signaled copies (above HIR_CUDA_KERNEL_COPY_MAX, up to
// HIR_CUDA_GRID_COPY_MAX) count their blocks in one word per stream, which
// each copy leaves at 0 for the next: five in a row on each of two streams
// at once, each waiting for its own number, all land, and each stream's
// signal ends at the last number. A word left unreset would hold the next
// copy's signal back (the synchronize below would time out).
// (HIR_CUDA_GRID_COPY_WAIT: the wait a stream wait, or in each block.)
void gridSignaledCopiesInARowOnTwoStreamsEachSignalInTurn(Device& d) {
  constexpr std::size_t kBytes = (1 << 20) + 48;  // more blocks' worth than a grid has
  constexpr int kCopies = 5, kStreams = 2;
  Buffer flags(d, 16);
  auto* wait_flag = static_cast<uint32_t*>(flags.data());
  uint32_t* signals = wait_flag + 1;  // one per stream
  std::vector<std::unique_ptr<Buffer>> src, dst;
  Records records(d, kCopies * kStreams);
  auto setup = d.createStream();
  for (int i = 0; i < kCopies * kStreams; ++i) {
    src.push_back(std::make_unique<Buffer>(d, kBytes));
    dst.push_back(std::make_unique<Buffer>(d, kBytes));
    d.fill(*setup, src.back()->data(), DType::UInt8, kBytes, 3 + i, 1);
    d.fill(*setup, dst.back()->data(), DType::UInt8, kBytes, 0, 0);
  }
  d.fill(*setup, flags.data(), DType::Int32, 4, 0, 0);
  d.synchronize(*setup, testTimeout());
  SemaphoreRelease release(d, wait_flag);
  std::vector<std::unique_ptr<Stream>> copiers;
  auto copied = d.createEvent();
  for (int k = 0; k < kStreams; ++k) {
    copiers.push_back(d.createStream());
    for (int c = 0; c < kCopies; ++c) {
      const int i = k * kCopies + c;
      msg(d).signaledCopy(*copiers[k], dst[i]->data(), src[i]->data(), kBytes, wait_flag,
                     static_cast<uint32_t>(c + 1), signals + k, static_cast<uint32_t>(c + 1));
    }
  }
  d.record(*copied, *copiers[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(d.query(*copied)) << "the copies did not wait for the flag";
  auto writer = d.createStream(), reader = d.createStream();
  for (int c = 1; c <= kCopies; ++c) d.writeValue(*writer, wait_flag, static_cast<uint32_t>(c));
  for (int k = 0; k < kStreams; ++k) {
    d.waitValue(*reader, signals + k, kCopies);
    for (int c = 0; c < kCopies; ++c) {
      const int i = k * kCopies + c;
      d.check(*reader, dst[i]->data(), DType::UInt8, kBytes, 3 + i, 1, 0, records.get(i), 0);
    }
  }
  d.synchronize(*reader, testTimeout());
  const std::vector<std::byte> words = readBack(signals, kStreams * sizeof(uint32_t));
  for (int k = 0; k < kStreams; ++k) {
    uint32_t got = 0;
    std::memcpy(&got, words.data() + k * sizeof(uint32_t), sizeof(got));
    EXPECT_EQ(got, static_cast<uint32_t>(kCopies)) << "stream " << k;
  }
  for (int i = 0; i < kCopies * kStreams; ++i) {
    EXPECT_EQ(records[i].mismatches, 0u) << "copy " << i;
    EXPECT_EQ(records[i].checked, kBytes) << "copy " << i;
  }
}

TEST(CudaDevice, GridSignaledCopiesInARowOnTwoStreamsEachSignalInTurn) {
  HIR_REQUIRE_GPUS(1);
  for (const char* wait : {"stream", "kernel"}) {
    SCOPED_TRACE(fmt::format("HIR_CUDA_GRID_COPY_WAIT={}", wait));
    std::unique_ptr<Device> d = makeCudaDeviceWithEnv("HIR_CUDA_GRID_COPY_WAIT", wait);
    if (!d->supports(DeviceFeature::StreamSemaphore))
      GTEST_SKIP() << "stream memory operations are not available";
    gridSignaledCopiesInARowOnTwoStreamsEachSignalInTurn(*d);
  }
}

// A message step of pushes only, more than HIR_CUDA_KERNEL_COPY_MAX in
// all (ipc's puts of one collective, each to its own peer): by default
// one grid (launchGridMessageStep) when each is at most 1 MiB, part after
// part on copy engines when one is larger, and the latter at every size
// with HIR_CUDA_GRID_COPY_MAX=0. Every way:
// each push waits for its own word (released here last push first, from
// another stream), moves its bytes (16-byte multiples, and a part that is
// not), stores its number, the lane's signal ends at its last number and
// the counter two parts share ends past both; the step does not complete
// while a push still waits.
TEST(CudaDevice, PushesAboveOneKernelMoveOnceEachHasItsSlotAndSignalInOrder) {
  HIR_REQUIRE_GPUS(1);
  constexpr int kParts = 3;
  constexpr std::size_t kKiB = 1024;
  const std::size_t shapes[2][kParts] = {{200 * kKiB, 64 * kKiB, 1024 * kKiB},
                                         {2048 * kKiB, 2048 * kKiB, 3072 * kKiB}};
  for (const char* grid_max : {"", "0"}) {
    SCOPED_TRACE(fmt::format("HIR_CUDA_GRID_COPY_MAX='{}'", grid_max));
    std::unique_ptr<Device> d = makeCudaDeviceWithEnv("HIR_CUDA_GRID_COPY_MAX", grid_max);
    if (!d->supports(DeviceFeature::StreamSemaphore))
      GTEST_SKIP() << "stream memory operations are not available";
    for (const auto& shape : shapes) {
      for (const std::size_t odd : {std::size_t{0}, std::size_t{5}}) {
        SCOPED_TRACE(fmt::format("{} KiB, {} bytes past a 16-byte multiple", shape[0] / kKiB, odd));
        const std::size_t sizes[kParts] = {shape[0], shape[1] + odd, shape[2]};
        std::size_t total = 0;
        for (std::size_t b : sizes) total += b;
        // Words: 3 waits, 2 signals (parts 0 and 1 share a lane's), 2 counters.
        Buffer words(*d, 8 * sizeof(uint32_t)), src(*d, total), dst(*d, total);
        auto* w = static_cast<uint32_t*>(words.data());
        uint32_t *signal = w + 3, *counter = w + 5;
        const std::vector<uint32_t> start = {0, 0, 0, 0, 0, 40, 70, 0};
        upload(w, start.data(), start.size() * sizeof(uint32_t));
        std::vector<unsigned char> bytes(total), poison(total, 0xEE);
        for (std::size_t k = 0; k < total; ++k) bytes[k] = static_cast<unsigned char>(k * 13 + 1);
        upload(src.data(), bytes.data(), total);
        upload(dst.data(), poison.data(), total);
        MessageStep m;
        m.push_count = kParts;
        std::size_t at = 0;
        // Part k: number counter + offset; parts 0 and 1 on counter 0 (1 and
        // 2, the second advancing it by 2), part 2 on counter 1 (number 71).
        const uint32_t offsets[kParts] = {1, 2, 1}, advances[kParts] = {0, 2, 1};
        const uint32_t numbers[kParts] = {41, 42, 71};
        for (int k = 0; k < kParts; ++k) {
          m.pushes[k] = MessageStep::Copy{.counter = counter + (k < 2 ? 0 : 1),
                                          .number = offsets[k],
                                          .advance = advances[k],
                                          .wait_back = 3,
                                          .wait = w + k,
                                          .dst = static_cast<char*>(dst.data()) + at,
                                          .src = static_cast<const char*>(src.data()) + at,
                                          .bytes = sizes[k],
                                          .signal = signal + (k < 2 ? 0 : 1)};
          at += sizes[k];
        }
        auto s = d->createStream(), releaser = d->createStream();
        auto done = d->createEvent();
        SemaphoreRelease guard0(*d, w), guard1(*d, w + 1), guard2(*d, w + 2);
        msg(*d).messageStep(*s, m);
        d->record(*done, *s);
        for (int k = kParts - 1; k >= 0; --k) {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          EXPECT_FALSE(d->query(*done)) << "done before push " << k << " had its slot";
          d->writeValue(*releaser, w + k, numbers[k] - 3);  // v - wait_back
          d->synchronize(*releaser, testTimeout());
        }
        d->synchronize(*s, testTimeout());
        const std::vector<std::byte> moved = readBack(dst.data(), total);
        EXPECT_EQ(std::memcmp(moved.data(), bytes.data(), total), 0) << "a push moved wrong bytes";
        std::vector<uint32_t> after(8);
        std::memcpy(after.data(), readBack(w, 8 * sizeof(uint32_t)).data(), 8 * sizeof(uint32_t));
        EXPECT_EQ(after[3], 42u) << "the lane's signal must end at its last number";
        EXPECT_EQ(after[4], 71u);
        EXPECT_EQ(after[5], 42u) << "parts 0 and 1 advance their counter past both";
        EXPECT_EQ(after[6], 71u);
      }
    }
  }
}

// HIR_CUDA_KERNEL_COPY_MAX and HIR_CUDA_GRID_COPY_MAX are numbers of bytes,
// HIR_CUDA_GRID_COPY_BLOCKS one of 2 to 256 and HIR_CUDA_GRID_COPY_WAIT
// stream or kernel; anything else is a usage error that names the variable
// and the value.
TEST(CudaDevice, ABadCopySettingIsAUsageErrorNamingIt) {
  HIR_REQUIRE_GPUS(1);
  const std::pair<const char*, const char*> bad[] = {
      {"HIR_CUDA_KERNEL_COPY_MAX", "64K"},  {"HIR_CUDA_KERNEL_COPY_MAX", "-1"},
      {"HIR_CUDA_GRID_COPY_MAX", "4M"},     {"HIR_CUDA_GRID_COPY_MAX", "-1"},
      {"HIR_CUDA_GRID_COPY_BLOCKS", "1"},   {"HIR_CUDA_GRID_COPY_BLOCKS", "257"},
      {"HIR_CUDA_GRID_COPY_WAIT", "memop"}, {"HIR_CUDA_GRID_COPY_WAIT", "Kernel"},
      {"HIR_CUDA_PULL_FENCE", "yes"}};
  for (const auto& [name, value] : bad) {
    try {
      makeCudaDeviceWithEnv(name, value);
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr(name));
      EXPECT_THAT(e.what(), testing::HasSubstr(value));
    }
  }
}

// One-block kernels are launched as programmatic dependents (HIR_CUDA_PDL,
// on by default): one may be made resident while the kernel before it on
// its stream runs, and must still wait for that kernel before it touches
// memory. Behind a 150 ms one-block spin, a fused signaled copy (one block,
// no flag to wait for) must neither copy nor signal for as long as the spin
// runs; without the wait in followPrevious() it would signal at once.
TEST(CudaDevice, AOneBlockKernelWaitsForTheKernelBeforeItOnItsStream) {
  HIR_REQUIRE_GPUS(1);
  auto device = makeCudaDevice();
  if (!device->supports(DeviceFeature::StreamSemaphore))
    GTEST_SKIP() << "stream memory operations are not available";
  constexpr std::size_t kBytes = 100;
  Records records(*device, 1);
  Buffer flags(*device, 8), src(*device, kBytes), dst(*device, kBytes);
  auto* ready = static_cast<uint32_t*>(flags.data());
  uint32_t* signal = ready + 1;
  auto s = device->createStream(), reader = device->createStream();
  auto copied = device->createEvent(), read = device->createEvent();
  device->fill(*s, ready, DType::Int32, 1, 1, 0);  // the copy's own wait is satisfied
  device->fill(*s, signal, DType::Int32, 1, 0, 0);
  device->fill(*s, src.data(), DType::UInt8, kBytes, 11, 3);
  device->fill(*s, dst.data(), DType::UInt8, kBytes, 0, 0);
  device->synchronize(*s, testTimeout());
  SemaphoreRelease release(*device, signal);

  const auto t0 = Clock::now();
  cuda::testSpin(*s, 150);
  msg(*device).signaledCopy(*s, dst.data(), src.data(), kBytes, ready, 1, signal, 3);
  device->record(*copied, *s);
  device->waitValue(*reader, signal, 3);
  device->check(*reader, dst.data(), DType::UInt8, kBytes, 11, 3, 0, records.get(0), 0);
  device->record(*read, *reader);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(device->query(*read)) << "the copy signalled while the kernel before it ran";
  EXPECT_FALSE(device->query(*copied));
  device->synchronize(*read, testTimeout());
  EXPECT_GE(msSince(t0), 140.0) << "the signal came before the spin ended";
  EXPECT_EQ(records[0].mismatches, 0u);
  EXPECT_EQ(records[0].checked, kBytes);
}

// HIR_CUDA_PDL takes 1 (the default) or 0; any other value stops the
// device's creation with a usage error (exit 2 from hir) that names the
// variable, the value and what it takes.
TEST(CudaDevice, AnHirCudaPdlOtherThanZeroOrOneIsAUsageError) {
  HIR_REQUIRE_GPUS(1);
  ::setenv("HIR_CUDA_PDL", "yes", 1);
  std::string message;
  try {
    makeCudaDevice();
  } catch (const UsageError& e) {
    message = e.what();
  }
  ::unsetenv("HIR_CUDA_PDL");
  EXPECT_THAT(message, HasSubstr("HIR_CUDA_PDL must be 0 or 1"));
  EXPECT_THAT(message, HasSubstr("got 'yes'"));
}

// HIR_CUDA_SEMAPHORES takes memop (the default) or kernel; anything else
// stops the device's creation with a usage error naming both.
TEST(CudaDevice, AnHirCudaSemaphoresOtherThanKernelOrMemopIsAUsageError) {
  HIR_REQUIRE_GPUS(1);
  std::string message;
  try {
    makeCudaDeviceWithEnv("HIR_CUDA_SEMAPHORES", "spin");
  } catch (const UsageError& e) {
    message = e.what();
  }
  EXPECT_THAT(message, HasSubstr("HIR_CUDA_SEMAPHORES is 'spin'; expected memop"));
  EXPECT_THAT(message, HasSubstr("or kernel"));
}

// Counted steps over a ring of slots (ipc's eager messages), in the kernel:
// the step of number v copies slot v % slots, after its word reached
// v - wait_back, and signals v; the same contract as the host device's
// (HostDeviceSemaphores.CountedStepsWithSlots...).
void countedStepsWithSlots(Device& dev) {
  Device* device = &dev;
  constexpr std::size_t kSlots = 4, kStride = 48, kSteps = 6;
  Buffer words(*device, 4 * sizeof(uint32_t)), ring(*device, kSlots * kStride),
      out(*device, kSteps * kStride);
  auto* w = static_cast<uint32_t*>(words.data());
  uint32_t *counter = w, *wait = w + 1, *signal = w + 2, *release = w + 3;
  auto s = device->createStream(), writer = device->createStream();
  device->fill(*s, counter, DType::Int32, 1, 5, 0);  // v = 6 .. 11: slots 2, 3, 0, 1, 2, 3
  device->fill(*s, wait, DType::Int32, 1, 5, 0);     // v - 4 <= 5 for four steps only
  device->fill(*s, signal, DType::Int32, 2, 0, 0);
  for (std::size_t j = 0; j < kSlots; ++j)
    device->fill(*s, static_cast<char*>(ring.data()) + j * kStride, DType::UInt8, kStride,
                 static_cast<int64_t>(j + 1), 0);
  device->fill(*s, out.data(), DType::UInt8, kSteps * kStride, 0, 0);
  device->synchronize(*s, testTimeout());
  SemaphoreRelease unstick(*device, release);
  for (std::size_t k = 0; k < kSteps; ++k)
    msg(*device).countedStep(*s, CountedStep{.counter = counter,
                                             .offset = 1,
                                             .advance = 1,
                                             .wait_addr = wait,
                                             .release = release,
                                             .dst = static_cast<char*>(out.data()) + k * kStride,
                                             .src = ring.data(),
                                             .bytes = kStride,
                                             .signal_addr = signal,
                                             .wait_back = 4,
                                             .slots = kSlots,
                                             .src_stride = kStride});
  auto done = device->createEvent();
  device->record(*done, *s);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(device->query(*done)) << "the fifth step (v = 10) needs the word at 6";
  device->writeValue(*writer, wait, 7);
  device->synchronize(*done, testTimeout());
  const std::size_t slot_of_step[kSteps] = {2, 3, 0, 1, 2, 3};
  Records records(*device, kSteps + 1);
  for (std::size_t k = 0; k < kSteps; ++k)
    device->check(*s, static_cast<char*>(out.data()) + k * kStride, DType::UInt8, kStride,
                  static_cast<int64_t>(slot_of_step[k] + 1), 0, 0, records.get(k), 0);
  device->check(*s, counter, DType::Int32, 1, 11, 0, 0, records.get(kSteps), 0);
  device->check(*s, signal, DType::Int32, 1, 11, 0, 0, records.get(kSteps), 1);
  device->synchronize(*s, testTimeout());
  for (std::size_t k = 0; k <= kSteps; ++k) EXPECT_EQ(records[k].mismatches, 0u) << "record " << k;
}

// Every path: one kernel of one block per step; with
// HIR_CUDA_KERNEL_COPY_MAX=0, one grid kernel per step (its blocks each
// wait, its last block advances and signals); with HIR_CUDA_GRID_COPY_MAX=0
// too, a wait kernel, a grid-wide slot copy and a signal kernel.
TEST(CudaDevice, CountedStepsWithSlotsCopySlotVModSlotsAfterWaitingForVMinusBack) {
  HIR_REQUIRE_GPUS(1);
  for (const char* grid_max : {"", "0"}) {
    for (const char* copy_max : {"", "0"}) {
      if (*grid_max != '\0' && *copy_max == '\0') continue;  // the one-block path again
      SCOPED_TRACE(fmt::format("HIR_CUDA_KERNEL_COPY_MAX='{}' HIR_CUDA_GRID_COPY_MAX='{}'",
                               copy_max, grid_max));
      std::unique_ptr<Device> device = makeCudaDeviceWithEnv(
          {{"HIR_CUDA_KERNEL_COPY_MAX", copy_max}, {"HIR_CUDA_GRID_COPY_MAX", grid_max}});
      if (!msg(*device).supportsCounted())
        GTEST_SKIP() << "counted semaphores are not available";
      countedStepsWithSlots(*device);
    }
  }
}

// ------------------------------------------------------- two ranks: IPC

MemoryHandle broadcastHandle(const MemoryHandle& h, int root) {
  Bootstrap& w = test::world();
  uint64_t size = h.bytes.size();
  w.broadcast(&size, sizeof(size), root);
  MemoryHandle out;
  out.bytes = h.bytes;
  out.bytes.resize(size);
  w.broadcast(out.bytes.data(), size, root);
  return out;
}

TEST(CudaDevice, IpcMemoryIsReadableAndWritableFromAnotherRank) {
  HIR_REQUIRE_GPUS(2);
  if (!firstTwoRanksShareANode()) GTEST_SKIP() << "ranks 0 and 1 are on different nodes";
  auto device = makeCudaDevice();
  Bootstrap& w = test::world();
  const int rank = w.rank();
  constexpr std::size_t kCount = (1 << 20) + 3;  // not a multiple of any page
  Stream& s = device->defaultStream();

  std::unique_ptr<Buffer> exported;
  MemoryHandle handle;
  if (rank == 0) {
    exported = std::make_unique<Buffer>(*device, kCount * 4);
    device->fill(s, exported->data(), DType::Int32, kCount, 42, 3);
    device->synchronize(s, testTimeout());
    handle = device->exportMemory(exported->data());
    EXPECT_THROW(device->exportMemory(static_cast<char*>(exported->data()) + 256), InternalError);
  }
  handle = broadcastHandle(handle, 0);
  ASSERT_FALSE(handle.bytes.empty());

  if (rank == 1) {
    void* peer = device->importMemory(handle);
    ASSERT_NE(peer, nullptr);
    Buffer local(*device, kCount * 4);
    device->copy(s, local.data(), peer, kCount * 4);  // read the peer
    Records rec(*device, 1);
    device->check(s, local.data(), DType::Int32, kCount, 42, 3, 0, rec.get(), 1);
    device->fill(s, peer, DType::Int32, kCount, -7, 5);  // then write it
    device->synchronize(s, testTimeout());
    EXPECT_EQ(rec[0].mismatches, 0u);
    EXPECT_EQ(rec[0].checked, kCount);
    device->closeImported(peer);
  }
  w.barrier();  // rank 1 wrote and closed
  if (rank == 0) {
    EXPECT_EQ(firstDifference(readBack(exported->data(), exported->bytes()),
                              hostPattern(DType::Int32, kCount, -7, 5), DType::Int32),
              -1)
        << "rank 1's writes through the IPC mapping are missing";
  }
  w.barrier();
}

namespace {

// StreamSemaphoresSignalAcrossRanks on `d`.
void streamSemaphoresSignalAcrossRanks(Device& d) {
  Bootstrap& w = test::world();
  const int rank = w.rank();
  constexpr std::size_t kCount = 1024;

  std::unique_ptr<Buffer> flag_mem, out;
  std::unique_ptr<SemaphoreRelease> release;
  std::unique_ptr<Event> done = d.createEvent();
  auto stream = d.createStream();
  MemoryHandle handle;
  if (rank == 1) {
    flag_mem = std::make_unique<Buffer>(d, 4);
    out = std::make_unique<Buffer>(d, kCount * 4);
    auto* flag = static_cast<uint32_t*>(flag_mem->data());
    release = std::make_unique<SemaphoreRelease>(d, flag);
    handle = d.exportMemory(flag_mem->data());
    d.waitValue(*stream, flag, 2);
    d.fill(*stream, out->data(), DType::Int32, kCount, 100, 1);
    d.record(*done, *stream);
  }
  handle = broadcastHandle(handle, 1);
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(d.query(*done)) << "rank 1's stream ran before rank 0 signalled";
  }
  w.barrier();
  if (rank == 0) {
    auto* peer_flag = static_cast<uint32_t*>(d.importMemory(handle));
    d.writeValue(*stream, peer_flag, 1);  // not enough yet
    d.writeValue(*stream, peer_flag, 2);
    d.synchronize(*stream, testTimeout());
    d.closeImported(peer_flag);
  }
  if (rank == 1) {
    auto t0 = Clock::now();
    d.synchronize(*done, testTimeout());
    EXPECT_LT(msSince(t0), 10000.0);
    EXPECT_EQ(firstDifference(readBack(out->data(), out->bytes()),
                              hostPattern(DType::Int32, kCount, 100, 1), DType::Int32),
              -1);
  }
  w.barrier();
}

}  // namespace

// Rank 1 exports a flag; rank 0 imports it and writes a value into it; rank
// 1's stream waits on that value. For kernel and memop semaphores alike
// (HIR_CUDA_SEMAPHORES).
TEST(CudaDevice, StreamSemaphoresSignalAcrossRanks) {
  HIR_REQUIRE_GPUS(2);
  if (!firstTwoRanksShareANode()) GTEST_SKIP() << "ranks 0 and 1 are on different nodes";
  // The skip is collective: every rank has the same driver.
  inEachSemaphoreMode(streamSemaphoresSignalAcrossRanks);
}

}  // namespace
}  // namespace hir
