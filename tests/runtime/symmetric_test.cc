// Symmetric memory (EvaluatorOptions::symmetric_memory), on the host device
// with a backend of the test's that has symmetric memory: which allocations
// are placed in the backend's memory at load (shapes of params and world
// only, no input or output, used by that backend's collectives alone), in
// plan order with their teams, and that the runs then use that memory. The
// nccl backend's windows run in the GPU tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <hostir/backend.h>
#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>

namespace hir {
namespace {

// An allreduce at world 1 (a copy) whose memory for placed allocations is
// its own; it records what it was asked and what it posted.
class SymmetricCopyBackend : public Backend {
 public:
  struct Calls {
    std::vector<std::size_t> bytes;
    std::vector<std::vector<int>> teams;
    std::vector<void*> given;
    std::vector<const void*> inputs;
    std::vector<void*> outputs;
  };
  static Calls& calls() {
    static Calls c;
    return c;
  }
  ~SymmetricCopyBackend() override {
    for (void* p : mine_) device_->deallocate(p);
  }
  std::string_view name() const override { return "symmetric-copy"; }
  void setup(const BackendContext& ctx) override { device_ = ctx.device; }
  void post(std::span<const PostArgs> ops, Stream& current, Event& done) override {
    for (const PostArgs& a : ops) {
      device_->copy(current, a.output, a.input, a.count * dtypeSize(a.dtype));
      calls().inputs.push_back(a.input);
      calls().outputs.push_back(a.output);
    }
    device_->record(done, current);
  }
  void* allocateSymmetric(std::size_t bytes, std::span<const int> teams) override {
    void* p = device_->allocate(bytes);
    mine_.push_back(p);
    calls().bytes.push_back(bytes);
    calls().teams.emplace_back(teams.begin(), teams.end());
    calls().given.push_back(p);
    return p;
  }

 private:
  std::vector<void*> mine_;
};

void registerOnce() {
  static bool registered = false;
  if (registered) return;
  BackendCaps caps;
  caps.name = "symmetric-copy";
  caps.devices = {"host"};
  caps.types = {CommType::Allreduce};
  caps.dtypes = {DType::Float32};
  caps.reduce_ops = {ReduceOp::Sum};
  caps.symmetric_memory = true;
  registerBackend({caps, [] { return std::make_unique<SymmetricCopyBackend>(); }});
  registered = true;
}

// a, b: placed (params only; the allreduce's input and output). c: its
// shape reads the rank. d: its shape reads a loop index. e: an input of
// the program. f: used by no collective.
const char* kProgram = R"({"format": "hostir/1", "name": "sym", "params": {"n": 16},
  "inputs": ["e"],
  "body": [
    {"op": "allocate", "name": "a", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "b", "dtype": "float32", "shape": ["2 * n"]},
    {"op": "allocate", "name": "c", "dtype": "float32", "shape": ["n + rank"]},
    {"op": "allocate", "name": "e", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "f", "dtype": "float32", "shape": ["n"]},
    {"op": "fill", "tensor": "a", "value": 3, "step": 2},
    {"op": "fill", "tensor": "b", "value": -1},
    {"op": "communication", "name": "ar", "type": "allreduce", "input": "a", "output": "b[0:n]",
     "reduce": "sum", "backend": "symmetric-copy"},
    {"op": "wait", "communication": "ar"},
    {"op": "check", "tensor": "b[0:n]", "value": 3, "step": 2},
    {"op": "communication", "name": "ar2", "type": "allreduce", "input": "c[0:n]",
     "output": "e", "reduce": "sum", "backend": "symmetric-copy"},
    {"op": "wait", "communication": "ar2"},
    {"op": "for", "index": "i", "stop": 2, "body": [
      {"op": "allocate", "name": "d", "dtype": "float32", "shape": ["n + i"]},
      {"op": "fill", "tensor": "d", "value": "i"},
      {"op": "communication", "name": "ar3", "type": "allreduce", "input": "d", "output": "d",
       "reduce": "sum", "backend": "symmetric-copy"},
      {"op": "wait", "communication": "ar3"},
      {"op": "check", "tensor": "d", "value": "i"},
      {"op": "deallocate", "name": "d"}]}]})";

std::vector<std::string> placedWith(EvaluatorOptions::Symmetric mode, RunReport* report = nullptr) {
  registerOnce();
  std::unique_ptr<Bootstrap> boot = createSelfBootstrap();
  Session session(*boot, SessionOptions{"host"});
  EvaluatorOptions eo;
  eo.timeout = std::chrono::milliseconds(30000);
  eo.symmetric_memory = mode;
  Evaluator ev(session, parseProgram(kProgram), eo);
  ev.run();
  ev.run();
  ev.synchronize();
  if (report) *report = ev.report();
  return ev.symmetricAllocations();
}

TEST(SymmetricMemory, AllocationsEveryRankMakesAlikeAndOnlyItsCollectivesUseArePlaced) {
  SymmetricCopyBackend::calls() = {};
  RunReport r;
  const std::vector<std::string> placed = placedWith(EvaluatorOptions::Symmetric::On, &r);
  EXPECT_EQ(placed, (std::vector<std::string>{"a", "b"}));
  const SymmetricCopyBackend::Calls& calls = SymmetricCopyBackend::calls();
  ASSERT_EQ(calls.bytes.size(), 2u);
  EXPECT_EQ(calls.bytes[0], 16u * 4u);
  EXPECT_EQ(calls.bytes[1], 32u * 4u);
  EXPECT_EQ(calls.teams[0], std::vector<int>{0});
  // The runs use the backend's memory: 'ar' read a and wrote b in it.
  ASSERT_FALSE(calls.inputs.empty());
  EXPECT_EQ(calls.inputs[0], calls.given[0]);
  EXPECT_EQ(calls.outputs[0], calls.given[1]);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 2u * 3u);
}

TEST(SymmetricMemory, AutoPlacesOnlyInGraphModeAndOffNever) {
  SymmetricCopyBackend::calls() = {};
  EXPECT_TRUE(placedWith(EvaluatorOptions::Symmetric::Auto).empty());  // no graph here
  EXPECT_TRUE(placedWith(EvaluatorOptions::Symmetric::Off).empty());
  EXPECT_TRUE(SymmetricCopyBackend::calls().bytes.empty());
}

}  // namespace
}  // namespace hir
