// Graph mode on the host (the parts that need no GPU): what the evaluator
// refuses at load, before any backend is set up, and how check executions
// in a captured run and its replays are counted (runtime/diagnostics).
// The capture and the replays themselves run in graph_gputest.cc.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>

#include "compile/compile.h"
#include "device/host_device.h"
#include "runtime/diagnostics.h"

namespace hir {
namespace {

const char* kFillCheck = R"({"format": "hostir/1", "name": "fc", "body": [
    {"op": "allocate", "name": "x", "dtype": "int32", "shape": [4]},
    {"op": "for", "index": "j", "start": 0, "stop": 3, "body": [
      {"op": "fill", "tensor": "x", "value": "j", "step": 1},
      {"op": "check", "tensor": "x", "value": "j", "step": 1}]}]})";

std::string loadError(EvaluatorOptions eo) {
  std::unique_ptr<Bootstrap> boot = createSelfBootstrap();
  Session session(*boot, SessionOptions{"host"});
  try {
    Evaluator ev(session, parseProgram(kFillCheck), eo);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GraphMode, OnADeviceWithoutGraphsIsRefusedAtLoad) {
  EvaluatorOptions eo;
  eo.graph = true;
  EXPECT_EQ(loadError(eo), "graph mode needs a device with graphs (cuda); device 'host' has none");
}

TEST(GraphMode, WithTracingIsRefusedAtLoad) {
  EvaluatorOptions eo;
  eo.graph = true;
  eo.trace = true;
  EXPECT_NE(loadError(eo).find("graph mode and tracing cannot be combined"), std::string::npos);
}

// Diagnostics as the evaluator drives them: run 1 eager (3 executions, one
// record each), run 2 captured (3 executions into the shared record), then
// two replays that repeat those 3, then a second capture (after a bind())
// and its replay. The kernel's writes are made by hand: the captured
// execution j=1 finds 2 wrong elements, every replay again.
TEST(GraphMode, CheckExecutionsOfTheCaptureAndItsReplaysAreCountedTogether) {
  CompileOptions co;
  co.world = 1;
  const CompiledProgram compiled = compile(parseProgram(kFillCheck), co);
  const Plan& plan = compiled.plan;
  ASSERT_EQ(plan.checks.size(), 1u);
  HostDevice dev;
  RunReport r;
  {
    Diagnostics diag(plan, dev, 0);
    int64_t scalars[64] = {};
    const int slot = plan.nodes[plan.checks[0].node].loop_slots.at(0);
    auto execute = [&](int64_t j, uint64_t wrong) {
      scalars[slot] = j;
      const int64_t exec = diag.beginCheck(0, scalars);
      CheckRecord* rec = diag.record(0);
      rec->checked += 4;
      if (wrong > 0) {
        if (rec->first_execution < 0) rec->first_execution = exec;
        rec->mismatches += wrong;
      }
      return rec;
    };
    CheckRecord* eager[3];
    for (int j = 0; j < 3; ++j) eager[j] = execute(j, 0);
    diag.setCapturing(true);
    CheckRecord* captured[3];
    for (int j = 0; j < 3; ++j) captured[j] = execute(j, j == 1 ? 2 : 0);
    diag.setCapturing(false);
    EXPECT_EQ(captured[0], captured[2]) << "captured executions share the node's record";
    EXPECT_NE(captured[0], eager[0]);
    for (int replay = 0; replay < 2; ++replay) {
      diag.replayed();
      captured[0]->checked += 12;       // the replay's three executions
      captured[0]->mismatches += 2;     // j=1 wrong again
    }
    // A bind() dropped the graph: the run is captured again (3 executions,
    // j=1 wrong), then replayed once; a replay repeats 3, not 6.
    diag.setCapturing(true);
    for (int j = 0; j < 3; ++j) execute(j, j == 1 ? 2 : 0);
    diag.setCapturing(false);
    diag.replayed();
    captured[0]->checked += 12;
    captured[0]->mismatches += 2;
    r = diag.report();
  }
  EXPECT_EQ(r.checks_run, 18u);  // 3 eager + 3 captured + 2 replays + 3 recaptured + 1 replay
  EXPECT_EQ(r.elements_checked, 72u);
  ASSERT_EQ(r.failures.size(), 1u);
  const CheckFailure& f = r.failures[0];
  EXPECT_EQ(f.executions, 18u);
  EXPECT_EQ(f.mismatches, 10u);
  EXPECT_FALSE(f.exact);
  EXPECT_TRUE(f.replayed);
  EXPECT_EQ(f.context, "j=1");  // the captured execution's loop indices
  EXPECT_NE(r.format().find("10 wrong elements in executions counted together (the captured "
                            "graph's and its replays'"),
            std::string::npos)
      << r.format();
}

}  // namespace
}  // namespace hir
