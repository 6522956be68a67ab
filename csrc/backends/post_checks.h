// What every backend's post does before its own work: the place its
// messages name, what it moves in words, and the checks that the backend
// was set up and has not been aborted.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include <hostir/backend.h>

namespace hir {

// The node path a post's messages name: its first op's, or "" (an empty post
// or ops without a path).
std::string_view postPath(std::span<const PostArgs> ops);

// What a post moves, "PATH (allreduce), PATH (send)", for the messages of
// work that runs after post() returned.
std::string describePost(std::span<const PostArgs> ops);

// The opening of post() and postJoined(): InternalError unless the backend
// was set up (`set_up`: the caller's bug), then BackendError
// "BACKEND: cannot post at PATH on rank RANK: WHY" once it was aborted.
void checkPostable(std::string_view backend, std::span<const PostArgs> ops, bool set_up,
                   bool aborted, int rank, std::string_view why = "the backend was aborted");

}  // namespace hir
