#!/usr/bin/env bash
# Sets up and builds hostir if needed, then runs `hir run` with the arguments:
#   scripts/run.sh ir_examples/ring_allgather.json --np 4
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" hir
exec "${BUILD_DIR:-$root/build}/bin/hir" run "$@"
