// The library used wrongly (issue 40, item 4): what a kernel throws, however
// odd, is a RuntimeError naming it; an Evaluator outlives its Session; a
// timeout must be positive; one buffer is bound to one allocation; an
// Evaluator is entered by one thread at a time. Each is an error with a
// message, never a crash or a race. One process (createSelfBootstrap).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/error.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/kernel.h>
#include <hostir/session.h>

namespace hir {
namespace {

using ::testing::HasSubstr;

EvaluatorOptions shortTimeout() {
  EvaluatorOptions o;
  o.timeout = std::chrono::seconds(30);
  return o;
}

// One kernel node on a float32 buffer of 16, then a check of 2s after a fill.
Program kernelProgram(const std::string& kernel) {
  return parseProgram(R"({"format": "hostir/1", "name": "k", "body": [
      {"op": "allocate", "name": "a", "dtype": "float32", "shape": [16]},
      {"op": "fill", "tensor": "a", "value": 2},
      {"op": "kernel", "name": ")" + kernel + R"(", "writes": ["a"]},
      {"op": "check", "tensor": "a", "value": 2}]})");
}

void registerOnce(const char* name, KernelFn fn) {
  if (!findKernel(name)) registerKernel({name, {"host"}, std::move(fn)});
}

// The message of the RuntimeError that one run of `kernel` throws.
std::string runtimeErrorOf(const std::string& kernel) {
  Session session(createSelfBootstrap(), SessionOptions{"host"});
  Evaluator ev(session, kernelProgram(kernel), shortTimeout());
  try {
    ev.run();
    ev.synchronize();
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "";
}

TEST(Misuse, WhateverAKernelThrowsIsARuntimeErrorNamingItsNodeAndKernel) {
  registerOnce("misuse_throws_int", [](const KernelLaunch&) { throw 42; });
  registerOnce("misuse_throws_std",
               [](const KernelLaunch&) { throw std::runtime_error("disk full"); });
  EXPECT_THAT(runtimeErrorOf("misuse_throws_int"),
              HasSubstr("kernel 'misuse_throws_int' failed: it threw something that is not a "
                        "std::exception"));
  EXPECT_THAT(runtimeErrorOf("misuse_throws_int"), HasSubstr("/body/2"));
  EXPECT_THAT(runtimeErrorOf("misuse_throws_std"),
              HasSubstr("kernel 'misuse_throws_std' failed: disk full"));
}

TEST(Misuse, AnEvaluatorKeepsWorkingAfterItsSessionIsDestroyed) {
  registerOnce("misuse_noop", [](const KernelLaunch&) {});
  auto session = std::make_unique<Session>(createSelfBootstrap(), SessionOptions{"host"});
  Evaluator ev(*session, kernelProgram("misuse_noop"), shortTimeout());
  ev.run();
  session.reset();  // the device and the bootstrap stay with the evaluator
  ev.run();
  ev.synchronize();
  const RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 2u);
}

TEST(Misuse, ATimeoutOfZeroOrBelowIsAUsageError) {
  registerOnce("misuse_noop", [](const KernelLaunch&) {});
  Session session(createSelfBootstrap(), SessionOptions{"host"});
  for (const auto ms : {std::chrono::milliseconds(0), std::chrono::milliseconds(-5)}) {
    EvaluatorOptions o;
    o.timeout = ms;
    try {
      Evaluator ev(session, kernelProgram("misuse_noop"), o);
      ADD_FAILURE() << "a timeout of " << ms.count() << " ms was accepted";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("EvaluatorOptions::timeout must be positive"));
      EXPECT_THAT(e.what(), HasSubstr("got " + std::to_string(ms.count()) + " ms"));
    }
  }
}

TEST(Misuse, OneBufferBoundToTwoAllocationsIsRefused) {
  const Program p = parseProgram(R"({"format": "hostir/1", "name": "b",
      "inputs": ["in"], "outputs": ["out"], "body": [
      {"op": "allocate", "name": "in", "dtype": "int32", "shape": [64]},
      {"op": "allocate", "name": "out", "dtype": "int32", "shape": [64]},
      {"op": "copy", "src": "in", "dst": "out"}]})");
  Session session(createSelfBootstrap(), SessionOptions{"host"});
  Evaluator ev(session, p, shortTimeout());
  std::vector<int32_t> mem(128), other(64);
  ev.bind("in", mem.data(), 64 * sizeof(int32_t));
  try {
    ev.bind("out", mem.data() + 32, 64 * sizeof(int32_t));  // overlaps in's second half
    ADD_FAILURE() << "overlapping buffers were bound to two allocations";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bind('out'): its buffer (256 bytes at"));
    EXPECT_THAT(e.what(), HasSubstr("overlaps the one bound to 'in'"));
  }
  // Adjacent buffers, and binding an allocation again, are fine.
  ev.bind("out", mem.data() + 64, 64 * sizeof(int32_t));
  ev.bind("in", other.data(), 64 * sizeof(int32_t));
  for (int k = 0; k < 64; ++k) other[k] = k * 3;
  ev.run();
  ev.synchronize();
  for (int k = 0; k < 64; ++k) ASSERT_EQ(mem[64 + k], k * 3) << k;
}

TEST(Misuse, ASecondThreadInsideAnEvaluatorIsAUsageError) {
  static std::atomic<bool> inside{false}, release{false};
  registerOnce("misuse_hold", [](const KernelLaunch&) {
    inside = true;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!release && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  Session session(createSelfBootstrap(), SessionOptions{"host"});
  Evaluator ev(session, kernelProgram("misuse_hold"), shortTimeout());
  std::thread first([&] { ev.run(); });
  while (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (const char* call : {"run", "synchronize", "bind"}) {
    try {
      if (call == std::string("run")) ev.run();
      if (call == std::string("synchronize")) ev.synchronize();
      if (call == std::string("bind")) ev.bind("a", nullptr, 0);
      ADD_FAILURE() << call << "() entered an Evaluator that another thread is inside";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("Evaluator::") + call +
                                      "() while another thread is inside"));
    }
  }
  release = true;
  first.join();
  ev.synchronize();
  EXPECT_TRUE(ev.report().ok()) << ev.report().format();
}

}  // namespace
}  // namespace hir
