// The README's "Embedding" example, compiled and run as written: its block
// is copied between the markers below, and a test checks that the copy is
// the README's text, character for character. It runs alone (the self
// bootstrap) and as three threads of one process (the thread bootstraps).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "support/test_util.h"

// begin README "Embedding"
#include <hostir/hostir.h>

// Averages `grad` (n floats in the memory of `device`, "cuda" or "host")
// over every rank. Build the Evaluator once and run() it every step; here
// one run.
bool averageGradients(hir::Bootstrap& bootstrap, const char* device, float* grad, int64_t n,
                      void* stream) {
  hir::ProgramBuilder b("step");
  b.param("n", n).input("grad").output("grad");
  b.allocate("grad", hir::DType::Float32, {"n"});
  b.allreduce("ar", "grad", "grad", hir::ReduceOp::Avg);
  b.wait("ar");

  hir::Session session(bootstrap, hir::SessionOptions{device});
  hir::Evaluator ev(session, b.build());  // validate, check, lower, create communicators
  ev.bind("grad", grad, sizeof(float) * n);  // caller-owned memory
  ev.run(stream);     // enqueue on your cudaStream_t (nullptr: stream 0); no host sync
  ev.synchronize();   // the host waits (with the timeout) before it reads grad
  return ev.report().ok();  // the results of check nodes, after synchronize()
}
// end README "Embedding"

namespace hir {
namespace {

// The lines strictly between the line that contains `begin` and the next
// line that contains `end`.
std::string between(const std::string& text, const std::string& begin, const std::string& end) {
  const std::size_t b = text.find(begin);
  if (b == std::string::npos) return "<no '" + begin + "'>";
  const std::size_t from = text.find('\n', b) + 1;
  const std::size_t e = text.find(end, from);
  if (e == std::string::npos) return "<no '" + end + "'>";
  return text.substr(from, text.rfind('\n', e) + 1 - from);
}

TEST(ReadmeEmbedding, TheTestRunsTheReadmeBlockAsWritten) {
  const std::string readme = test::readFile(test::sourceDir() + "/README.md");
  const std::string self = test::readFile(test::sourceDir() + "/tests/tools/readme_embedding_test.cc");
  const std::string block =
      between(readme.substr(readme.find("## Embedding")), "```cpp", "```");
  EXPECT_THAT(block, ::testing::HasSubstr("averageGradients"));
  EXPECT_EQ(block, between(self, "// begin README \"Embedding\"", "// end README \"Embedding\""))
      << "README.md's Embedding block and tests/tools/readme_embedding_test.cc's copy differ";
}

TEST(ReadmeEmbedding, AveragesAloneInOneProcess) {
  std::vector<float> grad(1000);
  for (std::size_t k = 0; k < grad.size(); ++k) grad[k] = static_cast<float>(k);
  std::unique_ptr<Bootstrap> self = createSelfBootstrap();
  ASSERT_TRUE(averageGradients(*self, "host", grad.data(), 1000, nullptr));
  for (std::size_t k = 0; k < grad.size(); ++k) ASSERT_EQ(grad[k], static_cast<float>(k)) << k;
}

TEST(ReadmeEmbedding, AveragesOverThreeRanksAsThreads) {
  constexpr int kWorld = 3;
  std::vector<std::unique_ptr<Bootstrap>> world = createThreadBootstraps(kWorld);
  std::vector<std::vector<float>> grads(kWorld, std::vector<float>(1000));
  std::vector<int> ok(kWorld, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      for (std::size_t k = 0; k < 1000; ++k) grads[r][k] = static_cast<float>(r * 10 + k);
      ok[r] = averageGradients(*world[r], "host", grads[r].data(), 1000, nullptr);
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(ok[r]) << "rank " << r;
    // (0 + 10 + 20) / 3 + k, exact in float32.
    for (std::size_t k = 0; k < 1000; ++k)
      ASSERT_EQ(grads[r][k], static_cast<float>(10 + k)) << "rank " << r << ", element " << k;
  }
}

}  // namespace
}  // namespace hir
