// Node-local field rules of validation (analysis/validate.cc): which fields
// a communication's type needs and which it takes none of.
#pragma once

#include <string>
#include <vector>

#include <hostir/error.h>
#include <hostir/program.h>

namespace hir {

// Adds an issue at `path` (or the field's pointer) for each field that
// `c`'s type needs and lacks, or takes and must not have.
void checkCommFields(const Communication& c, const std::string& path,
                     std::vector<ValidationError::Issue>& issues);

}  // namespace hir
