#!/usr/bin/env bash
# Where ipc's small-message time goes on 2 GPUs, in one short run: the 8 B
# allreduce (bench/ipc/allreduce_loop.json, n=2) and the 8 B ping-pong
# (bench/graph/pingpong_ipc_loop.json) through `hir run`, eager and with
# --graph, k=1000 operations per run, under variants that change one
# thing each:
#   default                      eager protocol, one fused kernel per step
#   HIR_CUDA_KERNEL_COPY_MAX=0   no fused kernels: waits, copies and signals apart
#   HIR_IPC_EAGER_MAX=0          put and get (a round trip per message)
#   HIR_IPC_COUNTED=1            message numbers counted on the device, eagerly
# and nccl's allreduce and ping-pong in the same run as the baseline. With
# nsys on the machine, it also profiles the default allreduce with --graph
# (kernel durations and the gaps between them: nsys-kernels.txt).
#
#   bash scripts/ipc-latency-probe.sh [--build DIR] [--reps N]
#
# Needs 2 GPUs (2 ranks sharing one measure the GPU's time slices, not
# ipc). Writes ${OUT:-gpu-out}/ipc-latency.txt (the table, also printed)
# and ipc-latency.log (every command's output). NCCL_NVLS_ENABLE=0.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
build=${BUILD_DIR:-$root/build-gpu}
reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=$1 ;;
    --reps) shift; reps=$1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "ipc-latency-probe: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case $reps in
  ''|*[!0-9]*|0) echo "ipc-latency-probe: --reps expects a positive integer, got '$reps'" >&2; exit 2 ;;
esac
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hir="$build/bin/hir"
[ -x "$hir" ] || { echo "ipc-latency-probe: no $hir" >&2; exit 2; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 2 ] || { echo "ipc-latency-probe: needs 2 GPUs, found ${gpus:-0}" >&2; exit 2; }
mkdir -p "$out"
log="$out/ipc-latency.log"
: >"$log"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed 's/"backend": "ipc"/"backend": "nccl"/' "$root/bench/ipc/allreduce_loop.json" >"$tmp/ar_nccl.json"
sed 's/"backend": "ipc"/"backend": "nccl"/' "$root/bench/graph/pingpong_ipc_loop.json" >"$tmp/pp_nccl.json"
k=1000
rows=()
status=0
# measure LABEL ENV PROGRAM KPARAM PER_OP_DIVISOR
measure() {
  local label=$1 env=$2 prog=$3 kparam=$4 per=$5 mode flag times r json us
  for mode in eager graph; do
    flag=()
    [ "$mode" = graph ] && flag=(--graph)
    times=()
    for ((r = 0; r < reps; r++)); do
      json="$tmp/run.json"
      printf '\n===== %s %s %s (%s) =====\n' "$label" "${env:-default}" "$mode" "$r" >>"$log"
      # shellcheck disable=SC2086  # env is one word or none
      if env $env timeout 120 "$hir" run "$prog" --np 2 --device cuda --param n=2 \
          --param "$kparam=$k" --iters 10 --warmup 3 --no-progress "${flag[@]}" \
          --json "$json" >>"$log" 2>&1; then
        times+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seconds_per_run"]["max"])' "$json")")
      else
        status=1
      fi
    done
    [ "${#times[@]}" -gt 0 ] || { rows+=("$(printf '%-22s %-28s %-6s %10s' "$label" "${env:-default}" "$mode" failed)"); continue; }
    us=$(printf '%s\n' "${times[@]}" | python3 -c '
import statistics, sys
per = int(sys.argv[1])
print(f"{statistics.median(float(l) for l in sys.stdin if l.strip()) * 1e6 / per:.2f}")' "$per")
    rows+=("$(printf '%-22s %-28s %-6s %10s' "$label" "${env:-default}" "$mode" "$us")")
  done
}
measure "nccl allreduce 8 B" "" "$tmp/ar_nccl.json" reps "$k"
measure "nccl ping-pong 8 B" "" "$tmp/pp_nccl.json" k "$((2 * k))"
for v in "" HIR_CUDA_KERNEL_COPY_MAX=0 HIR_IPC_EAGER_MAX=0 HIR_IPC_COUNTED=1; do
  measure "ipc allreduce 8 B" "$v" "$root/bench/ipc/allreduce_loop.json" reps "$k"
  measure "ipc ping-pong 8 B" "$v" "$root/bench/graph/pingpong_ipc_loop.json" k "$((2 * k))"
done
{
  echo "# us per operation (ping-pong: one way), medians of $reps runs of $k operations; hir run, 2 ranks"
  printf '%-22s %-28s %-6s %10s\n' "what" "variant" "mode" "us"
  printf '%s\n' "${rows[@]}"
} >"$out/ipc-latency.txt"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)
if [ -n "$nsys" ]; then
  printf '\n===== nsys: ipc allreduce --graph =====\n' >>"$log"
  if timeout 180 "$nsys" profile --trace=cuda --cuda-graph-trace=node --force-overwrite true \
      -o "$tmp/ipc" "$hir" run "$root/bench/ipc/allreduce_loop.json" --np 2 --device cuda \
      --param n=2 --param reps=200 --iters 3 --warmup 2 --no-progress --graph >>"$log" 2>&1; then
    for rep in "$tmp"/ipc*.nsys-rep; do
      timeout 120 "$nsys" stats --report cuda_gpu_kern_sum,cuda_gpu_trace "$rep" 2>&1 | head -200
    done >"$out/nsys-kernels.txt"
    echo "# nsys: $out/nsys-kernels.txt" >>"$out/ipc-latency.txt"
  else
    echo "# nsys failed (see ipc-latency.log)" >>"$out/ipc-latency.txt"
  fi
else
  echo "# no nsys on this machine: no profile" >>"$out/ipc-latency.txt"
fi
cat "$out/ipc-latency.txt"
exit $status
