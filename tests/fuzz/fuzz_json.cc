// libFuzzer target: the JSON program loader, hir::parseProgram (hostir/json.h).
// Properties beyond "no crash, only user errors":
// - whatever loads saves, and the saved text loads to an equal Program
//   (hostir/json.h: "Writing then reading gives an equal Program"), and
//   saving that again gives the same text;
// - the printer lists whatever loads.
#include <cstddef>
#include <cstdint>
#include <string>

#include <hostir/json.h>
#include <hostir/printer.h>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hir;
  const std::string_view input = hir_fuzz::text(data, size);
  Program program;
  if (!hir_fuzz::userErrorsAreFine([&] { program = parseProgram(input, "<fuzz>"); })) return 0;

  std::string saved;
  // A program read from JSON holds only valid UTF-8, so saving must succeed.
  try {
    saved = saveProgram(program);
  } catch (const std::exception& e) {
    hir_fuzz::fail("a loaded program cannot be saved", e.what());
  }
  Program again;
  try {
    again = parseProgram(saved, "<saved>");
  } catch (const std::exception& e) {
    hir_fuzz::fail("the saved text of a loaded program does not load",
                   std::string(e.what()) + "\nsaved:\n" + saved);
  }
  if (!(again == program))
    hir_fuzz::fail("load(save(p)) != p", "saved:\n" + saved);
  if (saveProgram(again) != saved)
    hir_fuzz::fail("save(load(save(p))) != save(p)", "saved:\n" + saved);

  hir_fuzz::userErrorsAreFine([&] { (void)printProgram(program); });
  hir_fuzz::userErrorsAreFine([&] { (void)saveProgram(program, -1); });
  return 0;
}
