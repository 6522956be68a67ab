#!/usr/bin/env bash
# ipc under several settings side by side: each measurement runs once per
# variant (a set of environment variables), in turns, --rounds times (every
# other round in the reverse order, so that a drift of the machine falls on
# every variant alike: on one GPU the raw copy's column moved by up to
# 1.5 us from round to round):
#   - hir_p2p_bench (put, get, eager against the base: NCCL on 2 GPUs; on
#     one GPU, ipc's auto protocol, since NCCL refuses a shared GPU), with
#     ping-pong rows up to --pingpong-max;
#   - the allreduce, allgather and ping-pong loops of ipc-latency-probe.sh,
#     eagerly, under each variant, and under each variant plus --probe-with
#     (e.g. HIR_IPC_EAGER_MAX=0: put and get, whose every message waits and
#     signals).
#
#   bash scripts/ipc-ab.sh --variants "V ..." [--build DIR] [--mps] [--rounds N]
#        [--min SIZE] [--max SIZE] [--pingpong-max SIZE] [--n "2 262144"]
#        [--probe-ops "allreduce allgather pingpong"] [--probe-with "NAME=VALUE,..."]
#
# A variant is "default" (nothing set) or NAME=VALUE[,NAME=VALUE...], e.g.
#   --variants "HIR_CUDA_SEMAPHORES=memop HIR_CUDA_SEMAPHORES=kernel"
#   --variants "default HIR_CUDA_GRID_COPY_MAX=0 HIR_CUDA_GRID_COPY_WAIT=stream"
# --n: the probe's float32 elements per rank (default 8 B and 1 MiB);
# --probe-ops: its operations (default all three; "none" skips the probe).
# Needs 2 GPUs, or --mps: 2 ranks share GPU 0 under an MPS daemon
# (scripts/mps-env.sh); one GPU measures the protocol's steps, not NVLink.
# Writes ${OUT:-gpu-out}/ab.txt (every table, also printed) and ab.log
# (every command's output). NCCL_NVLS_ENABLE=0.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
build=${BUILD_DIR:-$root/build-gpu}
mps=0 rounds=2 min=4K max=64M pingpong_max=0 sizes="2 262144" variants="" probe_with=""
probe_ops="allreduce allgather pingpong"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=$1 ;;
    --mps) mps=1 ;;
    --rounds) shift; rounds=$1 ;;
    --min) shift; min=$1 ;;
    --max) shift; max=$1 ;;
    --pingpong-max) shift; pingpong_max=$1 ;;
    --n) shift; sizes=$1 ;;
    --variants) shift; variants=$1 ;;
    --probe-ops) shift; probe_ops=$1 ;;
    --probe-with) shift; probe_with=$1 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "ipc-ab: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case $rounds in
  ''|*[!0-9]*|0) echo "ipc-ab: --rounds expects a positive integer, got '$rounds'" >&2; exit 2 ;;
esac
[ -n "$variants" ] || { echo "ipc-ab: --variants names no variant (e.g. \"default HIR_CUDA_GRID_COPY_MAX=0\")" >&2; exit 2; }
for v in $variants ${probe_with:+$probe_with}; do
  [ "$v" = default ] && continue
  IFS=, read -r -a kv <<<"$v"
  for a in "${kv[@]}"; do
    [[ "$a" =~ ^[A-Z_][A-Z0-9_]*=[^=]*$ ]] ||
      { echo "ipc-ab: variant '$v': '$a' is not NAME=VALUE" >&2; exit 2; }
  done
done
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
p2p="$build/bin/hir_p2p_bench"
[ -x "$p2p" ] || { echo "ipc-ab: no $p2p" >&2; exit 2; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
base=nccl
if [ "$mps" = 1 ]; then
  [ "${gpus:-0}" -ge 1 ] || { echo "ipc-ab: --mps needs a GPU, found none" >&2; exit 2; }
  base=ipc
else
  [ "${gpus:-0}" -ge 2 ] || { echo "ipc-ab: needs 2 GPUs (or --mps), found ${gpus:-0}" >&2; exit 2; }
fi
mkdir -p "$out"
log="$out/ab.log" txt="$out/ab.txt"
: >"$log"
: >"$txt"
tmp=$(mktemp -d)
if [ "$mps" = 1 ]; then
  # shellcheck source=mps-env.sh
  . "$root/scripts/mps-env.sh"
  mps_start "$tmp" || exit 3
else
  trap 'rm -rf "$tmp"' EXIT
fi
mpirun_cmd=(mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE)
[ "$mps" = 1 ] && mpirun_cmd+=(-x HIR_SHARE_GPUS -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_DEVICE_MAX_CONNECTIONS)
pingpong=()
[ "$pingpong_max" != 0 ] && pingpong=(--pingpong-max "$pingpong_max")
status=0
say() { printf '%s\n' "$*" | tee -a "$txt"; }
say "# ipc-ab: $( [ "$mps" = 1 ] && echo "2 ranks sharing one GPU under MPS" || echo "2 GPUs" ), $rounds rounds, base $base"
read -r -a order <<<"$variants"
for ((r = 1; r <= rounds; r++)); do
  round=("${order[@]}")
  if ((r % 2 == 0)); then
    round=()
    for ((i = ${#order[@]} - 1; i >= 0; i--)); do round+=("${order[i]}"); done
  fi
  for v in "${round[@]}"; do
    env_args=() x_args=()
    if [ "$v" != default ]; then
      IFS=, read -r -a env_args <<<"$v"
      for a in "${env_args[@]}"; do x_args+=(-x "${a%%=*}"); done
    fi
    say ""
    say "## hir_p2p_bench, $v, round $r"
    printf '\n===== p2p %s round %s =====\n' "$v" "$r" >>"$log"
    if ! env "${env_args[@]}" timeout 300 "${mpirun_cmd[@]}" "${x_args[@]}" -np 2 "$p2p" \
        --device cuda --base "$base" --min "$min" --max "$max" --factor 4 --reps 3 \
        --run-bytes 1G "${pingpong[@]}" >"$tmp/p2p.txt" 2>>"$log"; then
      status=1
    fi
    cat "$tmp/p2p.txt" >>"$log"
    # The times and GB/s of each variant: the table's first 12 columns.
    awk '/^(test|latency|bandwidth|pingpong)/ {line = ""; for (i = 1; i <= 12 && i <= NF; ++i) line = line sprintf("%11s", $i); print line}' \
      "$tmp/p2p.txt" | tee -a "$txt"
  done
done
# The latency probe's loops, every variant, and every variant with
# --probe-with. With --mps the probe starts a daemon of its own.
[ "$mps" = 1 ] && mps_stop
probe_out="$tmp/probe"
mkdir -p "$probe_out"
probe_variants=$variants
if [ -n "$probe_with" ]; then
  for v in $variants; do
    if [ "$v" = default ]; then probe_variants+=" $probe_with"; else probe_variants+=" $v,$probe_with"; fi
  done
fi
probe_args=(--build "$build" --reps "$rounds" --n "$sizes" --modes eager --variants "$probe_variants"
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
say "ipc-ab: $( [ "$status" = 0 ] && echo "every run completed" || echo "a run FAILED (see ab.log)" )"
exit "$status"
