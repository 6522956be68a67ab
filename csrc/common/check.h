// The macros that raise hostir's errors (hostir/error.h), one per kind of
// fault, so that a message's exit code says whose fault it is:
//   HIR_CHECK            the user's program or input is wrong   ProgramError (2)
//   HIR_CHECK_AS(T, ...) the same with another Error subclass: UsageError (2),
//                        RuntimeError, BackendError, TimeoutError (3)
//   HIR_RUNTIME_CHECK    a valid run failed (environment, peer)  RuntimeError (3)
//   HIR_INTERNAL_ASSERT  a bug in hostir                         InternalError (4)
// Private: public headers never need fmt.
#pragma once

#include <fmt/format.h>

#include <hostir/error.h>

// User error: the program or the input is wrong. Throws hir::ProgramError.
#define HIR_CHECK(cond, ...)                                          \
  do {                                                                \
    if (!(cond)) throw ::hir::ProgramError(fmt::format(__VA_ARGS__)); \
  } while (0)

// Same, with an explicit hir::Error subclass taking one string.
#define HIR_CHECK_AS(ErrorType, cond, ...)                    \
  do {                                                        \
    if (!(cond)) throw ErrorType(fmt::format(__VA_ARGS__));   \
  } while (0)

// A valid program's run failed for a reason outside it. Throws
// hir::RuntimeError (exit 3).
#define HIR_RUNTIME_CHECK(cond, ...) HIR_CHECK_AS(::hir::RuntimeError, cond, __VA_ARGS__)

// Internal invariant: a failure is a bug in hostir.
#define HIR_INTERNAL_ASSERT(cond, ...)                                          \
  do {                                                                          \
    if (!(cond))                                                                \
      throw ::hir::InternalError(fmt::format("internal error at {}:{}: {} ({})", \
                                             __FILE__, __LINE__,                \
                                             fmt::format(__VA_ARGS__), #cond)); \
  } while (0)
