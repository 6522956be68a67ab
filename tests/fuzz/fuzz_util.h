// Shared by the libFuzzer targets of tests/fuzz/ (docs/testing.md).
//
// hostir's contract for bad input: a user error, an hir::Error subclass
// (ParseError, ValidationError, ProgramError, UsageError; <hostir/error.h>).
// Those are fine here. Anything else is a finding and aborts, so that
// libFuzzer saves the input: an InternalError (a bug in hostir by
// definition), any other exception escaping the public API, a broken
// invariant the target checks (fail()), and, by the sanitizers and libFuzzer
// themselves, crashes, undefined behaviour, leaks, timeouts and memory blow-ups.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include <hostir/error.h>

namespace hir_fuzz {

[[noreturn]] inline void fail(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "\n==hostir-fuzz== FINDING: %.*s\n%.*s\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(detail.size()), detail.data());
  std::fflush(stderr);
  std::abort();
}

inline bool verbose() {
  static const bool on = std::getenv("HIR_FUZZ_VERBOSE") != nullptr;
  return on;
}

// Runs `body`; a user error ends it quietly and returns false.
template <class F>
bool userErrorsAreFine(F&& body) {
  try {
    body();
    return true;
  } catch (const hir::Error& e) {
    // The documented answer to bad input. HIR_FUZZ_VERBOSE=1 shows it, to see
    // how far seeds get: build-fuzz/fuzz/fuzz_check tests/fuzz/corpus/programs/*
    if (verbose()) std::fprintf(stderr, "user error: %s\n", e.what());
    return false;
  } catch (const hir::InternalError& e) {
    fail("InternalError (a bug in hostir, never the input's fault)", e.what());
  } catch (const std::exception& e) {
    fail(std::string("undocumented exception ") + typeid(e).name() + " escaped", e.what());
  } catch (...) {
    fail("a non-std exception escaped", "");
  }
}

inline std::string_view text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace hir_fuzz
