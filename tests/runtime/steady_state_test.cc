// The interpreter's steady state allocates nothing: a run of a program whose
// nodes enqueue no device work (control flow, streams, cached allocations,
// a share with nothing to exchange, a registered kernel that enqueues
// nothing) makes no heap allocation once the first runs have sized
// everything. (Nodes that enqueue work pay the device's enqueue: on the host
// device a task closure per call, which is the documented exception.)
//
// Counted by replacing the global operator new of this test binary; the
// count is taken only on the thread that sets kCounting, so other threads
// (the host device's workers) do not disturb it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <string>

#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/kernel.h>
#include <hostir/session.h>

namespace {
thread_local bool counting = false;
thread_local long allocations = 0;
}  // namespace

void* operator new(std::size_t n) {
  if (counting) ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (counting) ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace hir {
namespace {

// Heap allocations per run in the steady state (the mean of 10 runs), with
// `k` loop iterations.
double allocationsPerRun(int k) {
  static bool registered = false;
  if (!registered) {
    registerKernel({"steady_noop", {"host"}, [](const KernelLaunch&) {}});
    registered = true;
  }
  const std::string text = R"({"format": "hostir/1", "name": "steady", "params": {"n": 64, "k": )" +
                           std::to_string(k) + R"(},
    "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
      {"op": "for", "index": "i", "stop": "k", "body": [
        {"op": "allocate", "name": "t", "dtype": "int32", "shape": ["n", 2]},
        {"op": "kernel", "name": "steady_noop", "reads": ["x[i % n:i % n + 1]"],
         "writes": ["t[i % n]"], "args": {"i": "i"}},
        {"op": "share_mem_handles", "communications": []},
        {"op": "deallocate", "name": "t"},
        {"op": "if", "cond": "i % 3 == 0", "then": [{"op": "set_stream", "stream": 1}],
         "else": [{"op": "set_stream", "stream": 0}]},
        {"op": "set_stream", "stream": 0}]}]})";
  std::unique_ptr<Bootstrap> boot = createSelfBootstrap();
  Session session(*boot, SessionOptions{"host"});
  Evaluator ev(session, parseProgram(text));
  for (int run = 0; run < 3; ++run) ev.run();  // sizes every buffer
  ev.synchronize();
  allocations = 0;
  counting = true;
  for (int run = 0; run < 10; ++run) ev.run();
  counting = false;
  ev.synchronize();
  return static_cast<double>(allocations) / 10;
}

// A run's own work (recording its start, joining its streams at the end)
// enqueues device work, which allocates on the host device (a task closure,
// now and then a block of the task queue); what must not grow with the
// nodes executed is the rest: 100 and 1000 iterations of 8 nodes (7200
// nodes more) allocate alike, to within 10 allocations per run. One
// allocation per node would add 7200; the slack is for the task queue's
// blocks, whose number depends on how far the stream workers lag behind
// (under ThreadSanitizer, 1.1 more per run was seen).
TEST(SteadyState, NodesThatEnqueueNothingAllocateNothing) {
  const double few = allocationsPerRun(100), many = allocationsPerRun(1000);
  EXPECT_LE(many - few, 10.0) << "heap allocations per run: " << few << " at 100 iterations, "
                             << many << " at 1000";
  EXPECT_LT(many, 20.0);
  // The counter counts: an allocation on this thread is seen.
  allocations = 0;
  counting = true;
  void* probe = ::operator new(16);
  counting = false;
  ::operator delete(probe);
  EXPECT_EQ(allocations, 1);
}

}  // namespace
}  // namespace hir
