#!/usr/bin/env bash
# The cuda device's two kinds of semaphores side by side, for ipc: each
# measurement runs once with HIR_CUDA_SEMAPHORES=memop (the driver's stream
# memory operations, cuStreamWaitValue32 / cuStreamWriteValue32) and once
# with =kernel (one-block kernels that poll and release the word), in turns,
# --rounds times:
#   - hir_p2p_bench (put, get, eager against the base: NCCL on 2 GPUs; on
#     one GPU, ipc's auto protocol, since NCCL refuses a shared GPU);
#   - the allreduce, allgather and ping-pong loops of ipc-latency-probe.sh,
#     eagerly, with eager messages off (HIR_IPC_EAGER_MAX=0: put and get,
#     whose every message waits and signals) and on.
#
#   bash scripts/ipc-semaphores-ab.sh [--build DIR] [--mps] [--rounds N]
#        [--min SIZE] [--max SIZE] [--n "2 262144"] [--probe-ops "allreduce allgather pingpong"]
#
# --n: the probe's float32 elements per rank (default 8 B and 1 MiB);
# --probe-ops: its operations (default all three; "none" skips the probe).
# Needs 2 GPUs, or --mps: 2 ranks share GPU 0 under an MPS daemon
# (scripts/mps-env.sh); one GPU measures the protocol's steps, not NVLink.
# Writes ${OUT:-gpu-out}/sem-ab.txt (every table, also printed) and
# sem-ab.log (every command's output). NCCL_NVLS_ENABLE=0.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
build=${BUILD_DIR:-$root/build-gpu}
mps=0 rounds=2 min=4K max=64M sizes="2 262144" probe_ops="allreduce allgather pingpong"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=$1 ;;
    --mps) mps=1 ;;
    --rounds) shift; rounds=$1 ;;
    --min) shift; min=$1 ;;
    --max) shift; max=$1 ;;
    --n) shift; sizes=$1 ;;
    --probe-ops) shift; probe_ops=$1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "ipc-semaphores-ab: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case $rounds in
  ''|*[!0-9]*|0) echo "ipc-semaphores-ab: --rounds expects a positive integer, got '$rounds'" >&2; exit 2 ;;
esac
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
p2p="$build/bin/hir_p2p_bench"
[ -x "$p2p" ] || { echo "ipc-semaphores-ab: no $p2p" >&2; exit 2; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
base=nccl
if [ "$mps" = 1 ]; then
  [ "${gpus:-0}" -ge 1 ] || { echo "ipc-semaphores-ab: --mps needs a GPU, found none" >&2; exit 2; }
  base=ipc
else
  [ "${gpus:-0}" -ge 2 ] || { echo "ipc-semaphores-ab: needs 2 GPUs (or --mps), found ${gpus:-0}" >&2; exit 2; }
fi
mkdir -p "$out"
log="$out/sem-ab.log" txt="$out/sem-ab.txt"
: >"$log"
: >"$txt"
tmp=$(mktemp -d)
if [ "$mps" = 1 ]; then
  # shellcheck source=mps-env.sh
  . "$root/scripts/mps-env.sh"
  mps_start "$tmp" || exit 3
  trap 'mps_stop; rm -rf "$tmp"' EXIT
else
  trap 'rm -rf "$tmp"' EXIT
fi
mpirun_cmd=(mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x HIR_CUDA_SEMAPHORES)
[ "$mps" = 1 ] && mpirun_cmd+=(-x HIR_SHARE_GPUS -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_DEVICE_MAX_CONNECTIONS)
status=0
say() { printf '%s\n' "$*" | tee -a "$txt"; }
say "# ipc-semaphores-ab: $( [ "$mps" = 1 ] && echo "2 ranks sharing one GPU under MPS" || echo "2 GPUs" ), $rounds rounds, base $base"
for ((r = 1; r <= rounds; r++)); do
  for mode in memop kernel; do
    say ""
    say "## hir_p2p_bench, HIR_CUDA_SEMAPHORES=$mode, round $r"
    printf '\n===== p2p %s round %s =====\n' "$mode" "$r" >>"$log"
    if ! HIR_CUDA_SEMAPHORES=$mode timeout 300 "${mpirun_cmd[@]}" -np 2 "$p2p" --device cuda \
        --base "$base" --min "$min" --max "$max" --factor 4 --reps 3 --run-bytes 1G \
        >"$tmp/p2p.txt" 2>>"$log"; then
      status=1
    fi
    cat "$tmp/p2p.txt" >>"$log"
    # The times and GB/s of each variant: the table's first 12 columns.
    awk '/^(test|latency|bandwidth)/ {line = ""; for (i = 1; i <= 12 && i <= NF; ++i) line = line sprintf("%11s", $i); print line}' \
      "$tmp/p2p.txt" | tee -a "$txt"
  done
done
# The latency probe's loops, both modes as variants of it, eager messages
# off and on. With --mps the probe starts a daemon of its own.
if [ "$mps" = 1 ]; then
  mps_stop
  trap 'rm -rf "$tmp"' EXIT
fi
probe_out="$tmp/probe"
mkdir -p "$probe_out"
variants="HIR_CUDA_SEMAPHORES=memop HIR_CUDA_SEMAPHORES=kernel"
variants+=" HIR_CUDA_SEMAPHORES=memop,HIR_IPC_EAGER_MAX=0 HIR_CUDA_SEMAPHORES=kernel,HIR_IPC_EAGER_MAX=0"
probe_args=(--build "$build" --reps "$rounds" --n "$sizes" --modes eager --variants "$variants"
            --ops "$probe_ops")
[ "$mps" = 1 ] && probe_args+=(--mps)
if [ "$probe_ops" != none ]; then
  say ""
  say "## ipc-latency-probe.sh ${probe_args[*]}"
  if ! OUT=$probe_out bash "$root/scripts/ipc-latency-probe.sh" "${probe_args[@]}" >>"$log" 2>&1; then
    status=1
  fi
  cat "$probe_out/ipc-latency.txt" 2>/dev/null | tee -a "$txt"
  cat "$probe_out/ipc-latency.log" >>"$log" 2>/dev/null
fi
say ""
say "ipc-semaphores-ab: $( [ "$status" = 0 ] && echo "every run completed" || echo "a run FAILED (see sem-ab.log)" )"
exit "$status"
