// Static validation of a Program, before lowering. Collects every problem
// and throws one ValidationError listing them all, each with its node path.
// Checks: names defined before use (loop indices scoped to their body),
// unique allocation/communication/group names, tensors referenced only while
// allocated, the fields each communication type needs (and no others), waits
// naming a communication or group posted earlier, group bodies holding only
// communications (and for/if), expressions using only known names, teams
// free of rank and loop indices, world_size against `world`, backends of
// the catalog with the fields they take.
#pragma once

#include <string>
#include <vector>

#include <hostir/backend.h>
#include <hostir/program.h>

namespace hir {

struct ValidateOptions {
  int world = 1;
  // The backends a program may name (backendCatalog() in a run): "backend"
  // must be "auto" or one of them, and take the fields given.
  std::vector<BackendCaps> backends;
  // The kernels a "kernel" node may name (kernelNames() in a run).
  std::vector<std::string> kernels;
};

void validate(const Program& program, const ValidateOptions& options);

}  // namespace hir
