#include <hostir/version.h>

// The top-level CMakeLists.txt defines it on this file alone.
#ifndef HIR_VERSION
#error "HIR_VERSION must be defined (the project version), as CMakeLists.txt does"
#endif

namespace hir {

const char* version() { return HIR_VERSION; }

}  // namespace hir
