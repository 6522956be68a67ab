#!/usr/bin/env bash
# Packs a CUDA build of this machine for a GPU machine, so that a device
# call runs at once instead of building first (about two minutes of its
# time, which sessions have little of):
#
#   bash scripts/gpu-pack.sh [--build DIR] [--nccl-tests DIR] [--out DIR]
#
# --build DIR (default build) must have been configured with CUDA (it has
# tests/hostir_gpu_tests). Its binaries are built, stripped of debug
# information and copied to --out (default build-carry, which git ignores):
# bin/ (hir and the benchmarks), tests/ (the GPU and MPI test binaries and
# the example kernels), libhostir.so.0, and lib/ with the shared libraries
# whose versions differ on the GPU machines (spdlog: 1.10 here, 1.12 there;
# fmt with it; Google Benchmark; libcudart for nccl-tests). --nccl-tests DIR adds
# all_reduce_perf, all_gather_perf and sendrecv_perf from DIR (nccl-tests
# built here with MPI=1) as nccl-tests/. MANIFEST says the commit, and the
# source and build paths compiled into the tests.
#
# On the GPU machine (the device tool's `carry` brings OUT along):
#   bash scripts/gpu-check.sh --prebuilt build-carry
# or, for a benchmark script alone:
#   . scripts/prebuilt-env.sh build-carry && bash scripts/graph-bench.sh --build build-carry
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build out=$root/build-carry nccl_tests=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=$(cd "$1" && pwd) || exit 2 ;;
    --nccl-tests) shift; nccl_tests=$1 ;;
    --out) shift; out=$1 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "gpu-pack: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
bins=(hir hir_comm_bench hir_p2p_bench hir_link_bench hir_evaluator_bench)  # into bin/
targets=("${bins[@]}" hostir_gpu_tests hostir_mpi_tests hostir_example_kernels)
[ -f "$build/CMakeCache.txt" ] || { echo "gpu-pack: $build is not a build directory" >&2; exit 2; }
cmake --build "$build" --target "${targets[@]}" || { echo "gpu-pack: the build failed" >&2; exit 1; }
[ -x "$build/tests/hostir_gpu_tests" ] ||
  { echo "gpu-pack: $build has no tests/hostir_gpu_tests: configure it with -DHIR_WITH_CUDA=ON" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/tests" "$out/lib"
for f in "${bins[@]}"; do
  strip --strip-debug -o "$out/bin/$f" "$build/bin/$f"
done
for f in hostir_gpu_tests hostir_mpi_tests libhostir_example_kernels.so; do
  strip --strip-debug -o "$out/tests/$f" "$build/tests/$f"
done
strip --strip-debug -o "$out/libhostir.so.0" "$(readlink -f "$build/libhostir.so.0")"
# The libraries whose versions differ there, as this machine resolves them
# (Google Benchmark: Debian's is libbenchmark.so.1debian).
ldd "$build/bin/hir" "$build/bin/hir_evaluator_bench" |
  awk '/libspdlog|libfmt|libbenchmark/ { print $3 }' | sort -u | while read -r lib; do
  cp -L "$lib" "$out/lib/"
done
if [ -n "$nccl_tests" ]; then
  mkdir -p "$out/nccl-tests"
  for e in all_reduce_perf all_gather_perf sendrecv_perf; do
    [ -x "$nccl_tests/$e" ] || { echo "gpu-pack: no $nccl_tests/$e" >&2; exit 2; }
    strip -o "$out/nccl-tests/$e" "$nccl_tests/$e"
  done
  ldd "$nccl_tests/all_reduce_perf" | awk '/libcudart/ { print $3 }' | while read -r lib; do
    cp -L "$lib" "$out/lib/"
  done
fi
source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
{
  echo "commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "source $source_dir"
  echo "build $build"
  echo "packed $(date '+%F %T') on $(hostname)"
} >"$out/MANIFEST"
size=$(du -sm "$out" | cut -f1)
echo "gpu-pack: $out ($size MiB; the device tool carries 64 MiB at most)"
cat "$out/MANIFEST"
[ "$size" -le 64 ] || exit 1
