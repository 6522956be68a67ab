// What every backend's post does first (post_checks.h).
#include "backends/post_checks.h"

#include "common/check.h"

namespace hir {

std::string_view postPath(std::span<const PostArgs> ops) {
  return ops.empty() || ops[0].path == nullptr ? "" : ops[0].path;
}

std::string describePost(std::span<const PostArgs> ops) {
  std::string out;
  for (const PostArgs& a : ops)
    out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", a.path, toString(a.type));
  return out;
}

void checkPostable(std::string_view backend, std::span<const PostArgs> ops, bool set_up,
                   bool aborted, int rank, std::string_view why) {
  HIR_INTERNAL_ASSERT(set_up, "{}: post at {} before setup()", backend, postPath(ops));
  HIR_CHECK_AS(BackendError, !aborted, "{}: cannot post at {} on rank {}: {}", backend,
               postPath(ops), rank, why);
}

}  // namespace hir
