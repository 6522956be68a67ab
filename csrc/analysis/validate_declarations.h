// Private to analysis/: the first walk of validation (validate_declarations.cc),
// which finds where each name of a program is declared, and helpers of both walks.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/error.h>
#include <hostir/program.h>

namespace hir {

// The path of field `field` of the node at `node_path`: "/body/2/name".
std::string fieldPath(std::string_view node_path, std::string_view field);

// Where each name of the program is declared (the first declaration when a
// name is declared twice, which is itself an issue).
struct Declarations {
  struct Alloc {
    std::string path;
    DType dtype;
    std::size_t dims;
  };
  struct Comm {
    std::string path;
    std::string backend;
  };
  std::map<std::string, Alloc> allocs;
  std::vector<std::string> alloc_order;  // names in program order, for messages
  std::map<std::string, Comm> comms;
  std::map<std::string, std::string> groups;  // name -> path
  // An enum field out of range (a program made by hand): the later walks,
  // which compute with dtypes and types, must not run.
  bool bad_enum = false;
};

// Walks `body` (the program's, at /body) and returns its declarations. A name
// declared twice is an issue, added to `issues`; the first declaration counts.
Declarations collectDeclarations(const Body& body, std::vector<ValidationError::Issue>& issues);

}  // namespace hir
