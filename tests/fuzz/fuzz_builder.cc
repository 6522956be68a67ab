// libFuzzer target: programs made by the C++ builder (<hostir/builder.h>),
// as a compiler would emit them, then validate() and compile(): the input
// is a list of builder calls, one per 4 bytes (the call, then three bytes
// that pick names, dtypes, reduce ops, communication types and expressions,
// out-of-range enums and names that are not identifiers among them). A
// program the builder accepts is held to what JSON's parser refuses:
// anything but a hir::Error for a bad one is a finding (issue 40: a DType
// out of range was an internal assertion at run time).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <hostir/builder.h>

#include "compile/compile.h"
#include "fuzz_util.h"

namespace {

using namespace hir;

// Names the calls pick from: identifiers, reserved words, text that is
// not a name.
const char* const kNames[] = {"a", "b", "c", "s", "r", "g", "i", "rank", "my buf", "x\x1b[2K", ""};
const char* const kExprs[] = {"0", "1", "n", "rank", "world", "(rank + 1) % world", "i", "n / 0",
                              "world - 1", "-1"};
const char* const kRefs[] = {"a", "b", "a[0:2]", "b[1:3]", "a[i]", "c", "a[0:n]"};

template <std::size_t N>
const char* pick(const char* const (&table)[N], uint8_t byte) {
  return table[byte % N];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hir_fuzz::userErrorsAreFine([&] {
    ProgramBuilder b(size > 0 && data[0] & 1 ? "fuzz\n" : "fuzz");
    b.param("n", 4);
    b.allocate("a", DType::Float32, {Expr(8)});
    b.allocate("b", DType::Float32, {Expr(8)});
    for (std::size_t i = 1; i + 4 <= size && i < 1 + 4 * 32; i += 4) {
      const uint8_t call = data[i], x = data[i + 1], y = data[i + 2], z = data[i + 3];
      const auto dtype = static_cast<DType>(x % 9);       // 7 and 8 are out of range
      const auto reduce = static_cast<ReduceOp>(y % 7);   // 5 and 6 are out of range
      switch (call % 9) {
        case 0: b.allocate(pick(kNames, x), dtype, {Expr(std::string(pick(kExprs, y)))}); break;
        case 1: b.allreduce(pick(kNames, x), pick(kRefs, y), pick(kRefs, z), reduce); break;
        case 2: b.send(pick(kNames, x), pick(kRefs, y), Expr(std::string(pick(kExprs, z)))); break;
        case 3: b.recv(pick(kNames, x), pick(kRefs, y), Expr(std::string(pick(kExprs, z)))); break;
        case 4: b.wait(pick(kNames, x)); break;
        case 5: b.fill(pick(kRefs, x), Expr(std::string(pick(kExprs, y)))); break;
        case 6: b.addTensors(pick(kRefs, x), pick(kRefs, y), pick(kRefs, z)); break;
        case 7: b.copy(pick(kRefs, x), pick(kRefs, y)); break;
        case 8:
          b.forLoop(pick(kNames, x), 0, Expr(std::string(pick(kExprs, y))),
                    [&](BodyBuilder& l) { l.fill(pick(kRefs, z), 1); });
          break;
      }
    }
    CompileOptions options;
    options.world = 2;
    options.device = "host";
    options.max_steps_per_rank = 2000;
    compile(b.build(), options);
  });
  return 0;
}
