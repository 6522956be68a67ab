#include "common/check.h"
#include "common/text.h"

namespace hir {

namespace {

// One line per issue, "PATH: message", so each line names its place.
std::string joinIssues(const std::vector<ValidationError::Issue>& issues) {
  std::string out;
  for (const auto& issue : issues) {
    if (!out.empty()) out += '\n';
    out += fmt::format("{}: {}", issue.path.empty() ? "/" : issue.path, issue.message);
  }
  return out;
}

}  // namespace

std::string detail::printableMessage(const std::string& what) { return printable(what, true); }

ParseError::ParseError(std::string pointer, const std::string& message)
    : Error(fmt::format("{}: {}", pointer.empty() ? "/" : pointer, message)),
      pointer_(std::move(pointer)) {}

ValidationError::ValidationError(std::vector<Issue> issues)
    : Error(joinIssues(issues)), issues_(std::move(issues)) {}

}  // namespace hir
