// Check results counted per execution of a check node (runtime/diagnostics):
// wrong elements of one execution, failing executions among all, totals,
// and executions past the ones counted one by one.
#include <gtest/gtest.h>

#include <memory>

#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>

namespace hir {
namespace {

RunReport runTimes(const char* text, int runs) {
  std::unique_ptr<Bootstrap> boot = createSelfBootstrap();
  Session session(*boot, SessionOptions{"host"});
  EvaluatorOptions eo;
  eo.timeout = std::chrono::milliseconds(30000);
  Evaluator ev(session, parseProgram(text), eo);
  for (int i = 0; i < runs; ++i) ev.run();
  ev.synchronize();
  return ev.report();
}

TEST(Diagnostics, WrongElementsAreCountedPerExecution) {
  // x[1] has 2 wrong elements of 8; the check of x[j] runs 3 times a run.
  const char* text = R"({"format": "hostir/1", "name": "c", "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": [3, 8]},
      {"op": "for", "index": "j", "start": 0, "stop": 3, "body": [
        {"op": "fill", "tensor": "x[j]", "value": "j * 10", "step": 1}]},
      {"op": "fill", "tensor": "x[1][5:7]", "value": -1},
      {"op": "for", "index": "j", "start": 0, "stop": 3, "body": [
        {"op": "check", "tensor": "x[j]", "value": "j * 10", "step": 1}]}]})";
  const RunReport r = runTimes(text, 2);
  EXPECT_EQ(r.checks_run, 6u);
  EXPECT_EQ(r.checks_failed, 2u);
  EXPECT_EQ(r.wrong_elements, 4u);
  EXPECT_EQ(r.elements_checked, 6u * 8u);
  ASSERT_EQ(r.failures.size(), 1u);
  const CheckFailure& f = r.failures[0];
  EXPECT_EQ(f.context, "j=1");
  EXPECT_EQ(f.executions, 6u);
  EXPECT_EQ(f.failed_executions, 2u);
  EXPECT_EQ(f.wrong_min, 2u);
  EXPECT_EQ(f.wrong_max, 2u);
  EXPECT_EQ(f.elements_min, 8u);
  EXPECT_EQ(f.elements_max, 8u);
  EXPECT_EQ(f.mismatches, 4u);
  EXPECT_TRUE(f.exact);
  EXPECT_EQ(r.format(),
            "rank 0: check failed at /body/3/body/0 (j=1): 'x[j]' has 2 wrong elements of 8 in 2 "
            "of 6 executions (4 in all); [5] got -1 expected 15; [6] got -1 expected 16\n");
}

TEST(Diagnostics, Int64ValuesArePrintedExactly) {
  // 2^53 and 2^53 + 1 are the same double.
  const char* text = R"({"format": "hostir/1", "name": "c", "body": [
      {"op": "allocate", "name": "x", "dtype": "int64", "shape": [1]},
      {"op": "fill", "tensor": "x", "value": 9007199254740992},
      {"op": "check", "tensor": "x", "value": "9007199254740992 + 1"}]})";
  const RunReport r = runTimes(text, 1);
  ASSERT_EQ(r.failures.size(), 1u);
  ASSERT_EQ(r.failures[0].first.size(), 1u);
  EXPECT_TRUE(r.failures[0].first[0].integer);
  EXPECT_EQ(r.failures[0].first[0].got_int, int64_t{9007199254740992});
  EXPECT_EQ(r.failures[0].first[0].expected_int, int64_t{9007199254740993});
  EXPECT_NE(r.format().find("[0] got 9007199254740992 expected 9007199254740993"),
            std::string::npos)
      << r.format();
}

TEST(Diagnostics, ExecutionsPastTheCountedOnesAreCountedTogether) {
  // 1100 executions of one element each: execution 5 is wrong, and 1090
  // and 1091, past the first 1024, which share one record.
  const char* text = R"({"format": "hostir/1", "name": "c", "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": [1100, 1]},
      {"op": "fill", "tensor": "x", "value": 0, "step": 1},
      {"op": "fill", "tensor": "x[5]", "value": -1},
      {"op": "fill", "tensor": "x[1090:1092]", "value": -1},
      {"op": "for", "index": "i", "start": 0, "stop": 1100, "body": [
        {"op": "check", "tensor": "x[i]", "value": "i", "step": 0}]}]})";
  const RunReport r = runTimes(text, 1);
  ASSERT_EQ(r.failures.size(), 1u);
  const CheckFailure& f = r.failures[0];
  EXPECT_FALSE(f.exact);
  EXPECT_EQ(f.executions, 1100u);
  EXPECT_EQ(f.failed_executions, 2u);  // execution 5, and "some" past 1024
  EXPECT_EQ(f.mismatches, 3u);
  EXPECT_EQ(f.context, "i=5");
  EXPECT_NE(r.format().find("'x[i]' has 1 wrong element of 1 in at least 2 of 1100 executions "
                            "(3 in all)"),
            std::string::npos)
      << r.format();
}

}  // namespace
}  // namespace hir
