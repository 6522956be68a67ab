// libFuzzer target: the whole check, as `hir check` runs it: load the JSON,
// then compile() (csrc/compile/compile.h): validation, lowering, the
// cross-rank dry run of every rank and the schedule comparison, the p2p trace.
// The device kind is "host", the backends those of the built-in catalog, and
// "kernel" nodes may name rotate_rows (tests/plugin/) or k (nothing runs, so
// no kernel needs to be registered).
// The world is the program's world_size, else its min_world_size, else 2,
// clamped to [1, 8]; each rank takes at most 20000 steps, so every input is
// bounded (a longer run is checked on a prefix, CompiledProgram::truncated).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <hostir/json.h>

#include "compile/compile.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hir;
  hir_fuzz::userErrorsAreFine([&] {
    const Program program = parseProgram(hir_fuzz::text(data, size), "<fuzz>");
    const int64_t wanted = program.world_size       ? *program.world_size
                           : program.min_world_size ? *program.min_world_size
                                                    : 2;
    CompileOptions options;
    options.world = static_cast<int>(std::clamp<int64_t>(wanted, 1, 8));
    options.device = "host";
    options.max_steps_per_rank = 20000;
    options.kernels = std::vector<std::string>{"rotate_rows", "k"};
    const CompiledProgram compiled = compile(program, options);
    if (hir_fuzz::verbose())
      std::fprintf(stderr, "compiled at world %d%s\n", options.world,
                   compiled.truncated ? " (checked a prefix)" : "");
  });
  return 0;
}
