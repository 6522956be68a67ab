#!/usr/bin/env bash
# The host path beside raw MPI (bench/host_bench.cc): 2 ranks, allreduce at
# 8 B, 1 MiB and 16 MiB, first on a quiet machine, then with every core
# loaded by busy processes (as `ctest -j` or a build loads CI's machine).
# Prints each run's table and a summary of the ratios hir / raw.
#   scripts/host-bench.sh [--build DIR] [--reps N] [--np N] [--out DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build reps=7 np=2 out=""
while (($#)); do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "host-bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench=$build/bin/hir_host_bench
[ -x "$bench" ] || { echo "host-bench.sh: $bench not built (cmake --build $build --target hir_host_bench)" >&2; exit 2; }
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/hir-host-bench-XXXXXX")}
mkdir -p "$out"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
run_root=()
[ "$(id -u)" -ne 0 ] || run_root=(--allow-run-as-root)
run() {  # NAME
  mpirun -np "$np" --oversubscribe --bind-to none -q "${run_root[@]}" "$bench" --reps "$reps" \
    --csv "$out/$1.csv" | tee "$out/$1.txt"
}
echo "== quiet"
run quiet
echo "== loaded: $(nproc) busy processes"
pids=()
for _ in $(seq "$(nproc)"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
run loaded
kill "${pids[@]}" 2>/dev/null || true
trap - EXIT
echo "== summary (hir / raw; csv in $out)"
for f in quiet loaded; do
  awk -F, -v name=$f 'NR > 1 { printf "%-7s %10d B: raw %10.2f us, hir %10.2f us, %7.2fx\n", name, $2, $4, $5, $6 }' "$out/$f.csv"
done
