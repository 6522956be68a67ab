#!/usr/bin/env bash
# Sets up and builds hostir if needed, then runs the whole test suite (ctest).
# Extra arguments go to ctest (e.g. -R json, -L mpi).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
cd "$build"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
