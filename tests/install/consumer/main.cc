// Builds a program in code, runs it on the host device in one process, and
// verifies both its checks and a caller-owned output buffer.
#include <hostir/backend.h>
#include <hostir/device.h>
#include <hostir/hostir.h>

#include "ir/nodes.h"  // the consumer's own

#include <cstdio>
#include <vector>

int main() {
  if (consumer::Node{}.id != 42) return 1;
  hir::ProgramBuilder b("consumer");
  b.param("n", 64).output("out");
  b.allocate("tmp", hir::DType::Int32, {"n"});
  b.allocate("out", hir::DType::Int32, {"n"});
  b.fill("tmp", "n * 10", 3);
  b.copy("tmp", "out");
  b.check("out", "n * 10", 3);
  hir::Program program = b.build();
  if (hir::parseProgram(hir::saveProgram(program)) != program) {
    std::puts("consumer: JSON round trip differs");
    return 1;
  }
  hir::Session session(hir::createSelfBootstrap(), hir::SessionOptions{"host"});
  std::vector<int32_t> out(64, -1);
  hir::Evaluator ev(session, program);
  ev.bind("out", out.data(), out.size() * sizeof(int32_t));
  ev.run();
  ev.synchronize();
  hir::RunReport report = ev.report();
  if (!report.ok() || report.checks_run != 1) {
    std::printf("consumer: checks failed: %s\n", report.format().c_str());
    return 1;
  }
  for (int k = 0; k < 64; ++k)
    if (out[k] != 640 + 3 * k) {
      std::printf("consumer: out[%d] = %d\n", k, out[k]);
      return 1;
    }
  std::puts("consumer: ok");
  return 0;
}
