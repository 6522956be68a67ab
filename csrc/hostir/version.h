// The version of hostir: the project version of the build (CMake's
// PROJECT_VERSION), the same as hostirConfigVersion.cmake's and the `hir
// --version` line's.
#pragma once

namespace hir {

// "MAJOR.MINOR.PATCH" of the library that is loaded (not of the headers a
// program was compiled with).
const char* version();

}  // namespace hir
