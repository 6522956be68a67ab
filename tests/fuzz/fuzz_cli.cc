// libFuzzer target: `hir`'s command line, as main() parses it (parseArgs,
// csrc/tools/cli.h): the input is the arguments after "hir", separated by
// NUL bytes (at most 64 of them). Every flag's check runs (files are only
// looked at: stat and access, never opened for writing); --help and
// --version print and return 0. Anything but a UsageError, a clean return
// or a parse that leaves an invariant broken is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tools/cli.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hir;
  std::vector<std::string> words = {"hir"};
  std::string word;
  for (char c : hir_fuzz::text(data, size)) {
    if (c != '\0') {
      word += c;
      continue;
    }
    words.push_back(word);
    word.clear();
    if (words.size() > 64) return 0;
  }
  words.push_back(word);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  hir_fuzz::userErrorsAreFine([&] {
    Args a;
    const int code = parseArgs(static_cast<int>(words.size()), argv.data(), a);
    if (code >= 0) return;  // help or version
    if (a.command.empty()) hir_fuzz::fail("parseArgs went on without a command", "");
    if (a.program.empty()) hir_fuzz::fail("parseArgs went on without a program", a.command);
    if (a.json == "-" && a.sweep.csv == "-")
      hir_fuzz::fail("--json - and --csv - both accepted", a.command);
  });
  return 0;
}
