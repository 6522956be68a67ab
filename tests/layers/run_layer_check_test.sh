#!/usr/bin/env bash
# Self-test of scripts/check-layers.sh: builds small fake csrc/ trees in a
# temporary directory and checks the exit status and the exact message for
# a clean tree and for each kind of violation.
#
#   tests/layers/run_layer_check_test.sh [path/to/check-layers.sh]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
check=${1:-$here/../../scripts/check-layers.sh}
[ -f "$check" ] || { echo "FAIL: no script at $check" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# put FILE LINE...: writes a file below the current tree, one line per argument.
put() { mkdir -p "$(dirname "$tree/$1")"; local f=$1; shift; printf '%s\n' "$@" >"$tree/$f"; }

# A clean tree: every allowed kind of include, odd spacing included.
clean_tree() {
  tree=$tmp/$1; mkdir -p "$tree"
  put csrc/hostir/a.h '#pragma once' '#include <hostir/b.h>' '#include <cstdint>' '#include <vector>'
  put csrc/hostir/b.h '#pragma once' '#include <string>'
  put csrc/common/error.h '#pragma once' '#include <hostir/a.h>' '#include <fmt/format.h>'
  put csrc/ir/x.h '#pragma once' '#include "common/error.h"'
  put csrc/ir/x.cc '#include "ir/x.h"' '  #  include "x.h"' '#include<nlohmann/json.hpp>' \
    '// #include "runtime/evaluator.h"'
  put csrc/device/device.h '#pragma once' '#include "common/error.h"' '#include <chrono>'
  put csrc/device/cuda/cuda_impl.h '#pragma once' '#include "device/device.h"' \
    '#include <cuda_runtime_api.h>  // comment'
  put csrc/device/cuda/k.cu '#include "device/cuda/cuda_impl.h"' '#include <cuda_fp16.h>'
  put csrc/device/device.cc '#include "device/cuda/cuda_impl.h"'
  put csrc/backends/nccl/n.cc '#include "device/device.h"' '#include "backends/nccl/n.h"' \
    '#include <nccl.h>' '#include <mpi.h>'
  put csrc/backends/nccl/n.h '#pragma once'
  put csrc/backends/backend.h '#pragma once' '#include "device/device.h"'
  put csrc/runtime/evaluator.h '#pragma once' '#include "compile/c.h"' '#include "plan/p.h"' \
    '#include <hostir/a.h>'
  put csrc/compile/c.h '#pragma once' '#include "analysis/v.h"'
  put csrc/plan/p.h '#pragma once' '#include "ir/x.h"'
  put csrc/tools/hir.cc '#include "runtime/evaluator.h"' '#include "analysis/v.h"' '#include <hostir/a.h>' \
    '#include "backends/backend.h"' '#include "device/device.h"'
  put csrc/analysis/v.h '#pragma once' '#include "plan/p.h"'
  put csrc/README.md 'not a source file: #include "runtime/evaluator.h"'
}

# expect NAME STATUS [LINE]: runs the check on tree NAME; the status must be
# STATUS and, for 1, LINE must be the one and only violation printed.
expect() {
  local name=$1 want=$2 line=${3:-} out rc=0
  out=$("$check" "$tmp/$name" 2>&1) || rc=$?
  local problem=""
  if [ "$rc" != "$want" ]; then
    problem="exit status $rc, expected $want"
  elif [ "$want" = 0 ] && ! printf '%s\n' "$out" | grep -Eqx 'layers: [0-9]+ files, [0-9]+ includes, ok'; then
    problem="expected one line 'layers: N files, M includes, ok'"
  elif [ "$want" = 1 ] && [ "$(printf '%s\n' "$out" | grep -c '^csrc/')" != 1 ]; then
    problem="expected exactly one violation"
  elif [ "$want" = 1 ] && ! printf '%s\n' "$out" | grep -Fqx -- "$line"; then
    problem="missing line: $line"
  fi
  if [ -n "$problem" ]; then
    echo "FAIL [$name]: $problem; output was:"; printf '%s\n' "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok   [$name] $(printf '%s\n' "$out" | head -n 1)"
  fi
}

clean_tree a_clean
expect a_clean 0
[ "$("$check" "$tmp/a_clean" | wc -l)" = 1 ] || { echo "FAIL [a_clean]: more than one line"; failures=$((failures + 1)); }

clean_tree b_ir_includes_runtime
echo '#include "runtime/evaluator.h"' >>"$tree/csrc/ir/x.cc"      # line 5
expect b_ir_includes_runtime 1 \
  "csrc/ir/x.cc:5: folder 'ir' includes \"runtime/evaluator.h\" but ir may include only: hostir, common"

clean_tree c_hostir_includes_fmt
echo '#include <fmt/format.h>' >>"$tree/csrc/hostir/a.h"           # line 5
expect c_hostir_includes_fmt 1 \
  "csrc/hostir/a.h:5: folder 'hostir' includes <fmt/format.h> but hostir may include only: <hostir/...> and standard C++ headers"

clean_tree d_nccl_includes_device_cuda
echo '#include "device/cuda/cuda_impl.h"' >>"$tree/csrc/backends/nccl/n.cc"   # line 5
expect d_nccl_includes_device_cuda 1 \
  "csrc/backends/nccl/n.cc:5: folder 'backends' includes \"device/cuda/cuda_impl.h\" but device/cuda is private to device"

# A few more: odd spacing in a .cu file, a private include in hostir, a
# bare "x.h" that is not next to the file, a file directly in csrc/.
clean_tree e_spacing_cu
echo '   #   include   "runtime/evaluator.h"' >>"$tree/csrc/device/cuda/k.cu"  # line 3
expect e_spacing_cu 1 \
  "csrc/device/cuda/k.cu:3: folder 'device' includes \"runtime/evaluator.h\" but device may include only: hostir, common"

clean_tree f_hostir_private
echo '#include "common/error.h"' >>"$tree/csrc/hostir/b.h"          # line 3
expect f_hostir_private 1 \
  "csrc/hostir/b.h:3: folder 'hostir' includes \"common/error.h\" but hostir may include only: <hostir/...> and standard C++ headers"

clean_tree g_bare_not_here
echo '#include "evaluator.h"' >>"$tree/csrc/ir/x.cc"                # line 5
expect g_bare_not_here 1 \
  "csrc/ir/x.cc:5: \"evaluator.h\" is not in this file's directory: write \"folder/evaluator.h\" from csrc/"

clean_tree h_top_level
put csrc/hostir.h '#pragma once'
expect h_top_level 1 "csrc/hostir.h:1: file directly in csrc/: files belong in a layer folder"

# runtime/ and compile/ see devices and backends only through hostir/: a
# concrete backend, a device or a bootstrap is a violation there.
clean_tree i_runtime_includes_backend
echo '#include "backends/backend.h"' >>"$tree/csrc/runtime/evaluator.h"   # line 5
expect i_runtime_includes_backend 1 \
  "csrc/runtime/evaluator.h:5: folder 'runtime' includes \"backends/backend.h\" but runtime may include only: hostir, common, ir, plan, compile"

clean_tree j_runtime_includes_device
put csrc/runtime/evaluator.cc '#include "runtime/evaluator.h"' '#include "device/device.h"'
expect j_runtime_includes_device 1 \
  "csrc/runtime/evaluator.cc:2: folder 'runtime' includes \"device/device.h\" but runtime may include only: hostir, common, ir, plan, compile"

clean_tree k_compile_includes_backend
echo '#include "backends/nccl/n.h"' >>"$tree/csrc/compile/c.h"          # line 3
expect k_compile_includes_backend 1 \
  "csrc/compile/c.h:3: folder 'compile' includes \"backends/nccl/n.h\" but compile may include only: hostir, common, ir, plan, analysis, lower"

if [ "$failures" != 0 ]; then
  echo "layers.selftest: $failures case(s) FAILED" >&2
  exit 1
fi
echo "layers.selftest: all cases passed"
