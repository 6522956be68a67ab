// A readable listing of a program, one node a line, each prefixed with its
// node path (the JSON pointer used in every error message).
#pragma once

#include <string>

#include <hostir/program.h>

namespace hir {

std::string printProgram(const Program& program);

}  // namespace hir
