#!/usr/bin/env bash
# Where ipc's small-message time goes on 2 GPUs (or --np), in one short run: the 8 B
# allreduce (bench/ipc/allreduce_loop.json, n=2), the allgather of as many
# elements per rank (bench/ipc/allgather_loop.json) and the 8 B ping-pong
# (bench/graph/pingpong_ipc_loop.json) through `hir run`, eager and with
# --graph, k=1000 operations per run, under variants that change one
# thing each:
#   default                      eager protocol, one fused kernel per step
#   HIR_CUDA_KERNEL_COPY_MAX=0   no fused kernels: waits, copies and signals apart
#   HIR_IPC_EAGER_MAX=0          put and get (a round trip per message)
#   HIR_IPC_COUNTED=1            message numbers counted on the device, eagerly
#   HIR_IPC_INLINE_MAX=0         eager messages not in lines (a fence and a "done" flag)
# and nccl's allreduce, allgather and ping-pong in the same run as the
# baseline (not under --mps), and with --graph nccl's allreduce on NCCL's
# symmetric kernels (--symmetric-memory on: variant "symmetric"). With
# nsys on the machine, it also profiles the default allreduce and allgather
# with --graph (nsys-kernels.txt: per rank, the median kernel time and the
# median gap from one kernel's end to the next one's start); --no-nsys
# leaves the profile out. --stamps: the kernel stamps (HIR_CUDA_STAMPS,
# scripts/kernel_stamps.py) of one run of the default ipc allreduce and
# allgather in each mode, at --np ranks: per rank, the median time of each
# phase of the small kernels (the wait for the kernel before, the pushes,
# the waits, the signals, the handoff to the next), no profiler needed.
#
#   bash scripts/ipc-latency-probe.sh [--build DIR] [--reps N] [--n "2 1024"] [--mps]
#       [--variants "default HIR_IPC_INLINE_MAX=0 ..."] [--modes "eager graph"]
#       [--ops "allreduce allgather pingpong"] [--np N] [--no-nsys] [--stamps]
#
# --n: the float32 elements per rank of each measurement (default 2: 8 B).
# --variants: which of the variants above to run (default: all); a variant
#   may set several variables, joined by commas (A=1,B=2).
# --modes: eager, graph or both (the default).
# --ops: which operations to measure (default: all three).
# --np N: the ranks of the allreduce and the allgather (default 2; N GPUs,
#   not with --mps); the ping-pong is always 2 ranks.
# Needs --np GPUs (2), or --mps: 2 ranks share GPU 0 under an MPS daemon that the
# script starts and stops (scripts/mps-env.sh), ipc only (NCCL refuses a
# shared GPU). Without MPS, ranks
# sharing a GPU measure its time slices, not ipc. Writes
# ${OUT:-gpu-out}/ipc-latency.txt (the table, also printed) and
# ipc-latency.log (every command's output). NCCL_NVLS_ENABLE=0.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
build=${BUILD_DIR:-$root/build-gpu}
reps=3 sizes=2 mps=0 modes="eager graph" ops="allreduce allgather pingpong" profile=1 np=2
stamps=0
variants="default HIR_IPC_INLINE_MAX=0 HIR_CUDA_KERNEL_COPY_MAX=0 HIR_IPC_EAGER_MAX=0 HIR_IPC_COUNTED=1"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=$1 ;;
    --reps) shift; reps=$1 ;;
    --n) shift; sizes=$1 ;;
    --mps) mps=1 ;;
    --variants) shift; variants=$1 ;;
    --modes) shift; modes=$1 ;;
    --ops) shift; ops=$1 ;;
    --no-nsys) profile=0 ;;
    --stamps) stamps=1 ;;
    --np) shift; np=${1:-} ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "ipc-latency-probe: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case $reps in
  ''|*[!0-9]*|0) echo "ipc-latency-probe: --reps expects a positive integer, got '$reps'" >&2; exit 2 ;;
esac
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $np in
  ''|*[!0-9]*|0|1) echo "ipc-latency-probe: --np expects a number of ranks of 2 or more, got '$np'" >&2; exit 2 ;;
esac
hir="$build/bin/hir"
[ -x "$hir" ] || { echo "ipc-latency-probe: no $hir" >&2; exit 2; }
for n in $sizes; do
  case $n in
    ''|*[!0-9]*|0) echo "ipc-latency-probe: --n expects positive integers, got '$n'" >&2; exit 2 ;;
  esac
done
for v in $variants; do
  [ "$v" = default ] && continue
  for a in ${v//,/ }; do
    case $a in
      [A-Z_]*=*) ;;
      *) echo "ipc-latency-probe: --variants takes 'default' or NAME=VALUE[,NAME=VALUE], got '$v'" >&2; exit 2 ;;
    esac
  done
done
for m in $modes; do
  case $m in
    eager|graph) ;;
    *) echo "ipc-latency-probe: --modes takes eager and graph, got '$m'" >&2; exit 2 ;;
  esac
done
for o in $ops; do
  case $o in
    allreduce|allgather|pingpong) ;;
    *) echo "ipc-latency-probe: --ops takes allreduce, allgather and pingpong, got '$o'" >&2; exit 2 ;;
  esac
done
has() { case " $ops " in *" $1 "*) return 0 ;; esac; return 1; }
has_mode() { case " $modes " in *" $1 "*) return 0 ;; esac; return 1; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$mps" = 1 ]; then
  [ "${gpus:-0}" -ge 1 ] || { echo "ipc-latency-probe: --mps needs a GPU, found none" >&2; exit 2; }
  [ "$np" = 2 ] || { echo "ipc-latency-probe: --mps runs 2 ranks, not --np $np" >&2; exit 2; }
else
  [ "${gpus:-0}" -ge "$np" ] ||
    { echo "ipc-latency-probe: needs $np GPUs (or --mps), found ${gpus:-0}" >&2; exit 2; }
fi
mkdir -p "$out"
log="$out/ipc-latency.log"
: >"$log"
tmp=$(mktemp -d)
if [ "$mps" = 1 ]; then
  # shellcheck source=mps-env.sh
  . "$root/scripts/mps-env.sh"
  mps_start "$tmp" || exit 3
else
  trap 'rm -rf "$tmp"' EXIT
fi
sed 's/"backend": "ipc"/"backend": "nccl"/' "$root/bench/ipc/allreduce_loop.json" >"$tmp/ar_nccl.json"
sed 's/"backend": "ipc"/"backend": "nccl"/' "$root/bench/ipc/allgather_loop.json" >"$tmp/ag_nccl.json"
sed 's/"backend": "ipc"/"backend": "nccl"/' "$root/bench/graph/pingpong_ipc_loop.json" >"$tmp/pp_nccl.json"
k=1000
rows=()
status=0
# run_hir PROGRAM RANKS N KPARAM ITERS WARMUP [FLAG...]: one `hir run` of
# PROGRAM on the cuda device, n=N and KPARAM=$k, its output into the log.
# The caller's environment (a variant's, the stamps') goes with it.
run_hir() {
  local prog=$1 ranks=$2 n=$3 kparam=$4 iters=$5 warmup=$6
  shift 6
  timeout 120 "$hir" run "$prog" --np "$ranks" --device cuda --param "n=$n" \
    --param "$kparam=$k" --iters "$iters" --warmup "$warmup" --no-progress "$@" >>"$log" 2>&1
}
# measure LABEL ENV PROGRAM KPARAM PER_OP_DIVISOR N RANKS [NAME MODES FLAG...]: NAME
# (default: ENV, or "default") names the variant's row, MODES (default
# --modes) its modes, and the FLAGs go to hir run.
measure() {
  local label=$1 env=$2 prog=$3 kparam=$4 per=$5 n=$6 ranks=$7 mode flag times r json us
  local name=${8:-${env:-default}} its_modes=${9:-$modes}
  local extra=("${@:10}")
  for mode in $its_modes; do
    flag=("${extra[@]}")
    [ "$mode" = graph ] && flag+=(--graph)
    times=()
    for ((r = 0; r < reps; r++)); do
      json="$tmp/run.json"
      printf '\n===== %s %s %s (%s) =====\n' "$label" "$name" "$mode" "$r" >>"$log"
      # shellcheck disable=SC2086  # env: none, or NAME=VALUE words (commas made spaces)
      if ([ -z "$env" ] || export ${env//,/ }
          run_hir "$prog" "$ranks" "$n" "$kparam" 10 3 "${flag[@]}" --json "$json"); then
        times+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seconds_per_run"]["max"])' "$json")")
      else
        status=1
      fi
    done
    [ "${#times[@]}" -gt 0 ] || { rows+=("$(printf '%-22s %-28s %-6s %10s' "$label" "$name" "$mode" failed)"); continue; }
    us=$(printf '%s\n' "${times[@]}" | python3 -c '
import statistics, sys
per = int(sys.argv[1])
print(f"{statistics.median(float(l) for l in sys.stdin if l.strip()) * 1e6 / per:.2f}")' "$per")
    rows+=("$(printf '%-22s %-28s %-6s %10s' "$label" "$name" "$mode" "$us")")
  done
}
for n in $sizes; do
  b="$((4 * n)) B"
  if [ "$mps" = 0 ]; then
    has allreduce && measure "nccl allreduce $b" "" "$tmp/ar_nccl.json" reps "$k" "$n" "$np"
    # NCCL's symmetric kernels (window-registered buffers, --symmetric-memory
    # on), which graphs only: #13's 3.45 us is theirs on 2 H200s.
    has allreduce && has_mode graph && measure "nccl allreduce $b" "" "$tmp/ar_nccl.json" reps \
      "$k" "$n" "$np" symmetric graph --symmetric-memory on
    has allgather && measure "nccl allgather $b/rank" "" "$tmp/ag_nccl.json" reps "$k" "$n" "$np"
    has pingpong && measure "nccl ping-pong $b" "" "$tmp/pp_nccl.json" k "$((2 * k))" "$n" 2
  fi
  for v in $variants; do
    [ "$v" = default ] && v=
    has allreduce && measure "ipc allreduce $b" "$v" "$root/bench/ipc/allreduce_loop.json" reps "$k" "$n" "$np"
    has allgather && measure "ipc allgather $b/rank" "$v" "$root/bench/ipc/allgather_loop.json" reps "$k" "$n" "$np"
    has pingpong && measure "ipc ping-pong $b" "$v" "$root/bench/graph/pingpong_ipc_loop.json" k "$((2 * k))" "$n" 2
  done
done
{
  echo "# us per operation (ping-pong: one way), medians of $reps runs of $k operations; hir run, $np ranks (ping-pong 2)$([ "$mps" = 1 ] && echo ' sharing GPU 0 under MPS')"
  printf '%-22s %-28s %-6s %10s\n' "what" "variant" "mode" "us"
  printf '%s\n' "${rows[@]}"
} >"$out/ipc-latency.txt"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)
[ "$profile" = 1 ] || nsys=""
n1=${sizes%% *}
if [ -n "$nsys" ]; then
  : >"$out/nsys-kernels.txt"
  for op in allreduce allgather; do
    has "$op" || continue
    printf '\n===== nsys: ipc %s n=%s --graph =====\n' "$op" "$n1" >>"$log"
    rm -f "$tmp"/prof*.nsys-rep "$tmp"/prof*.sqlite
    if timeout 180 "$nsys" profile --trace=cuda --cuda-graph-trace=node --force-overwrite true \
        -o "$tmp/prof" "$hir" run "$root/bench/ipc/${op}_loop.json" --np "$np" --device cuda \
        --param "n=$n1" --param reps=200 --iters 3 --warmup 2 --no-progress --graph >>"$log" 2>&1; then
      for rep in "$tmp"/prof*.nsys-rep; do
        printf '# %s n=%s: %s\n' "$op" "$n1" "$(basename "$rep")"
        timeout 120 "$nsys" stats --report cuda_gpu_trace --format csv --output - "$rep" 2>>"$log" |
          python3 "$root/scripts/kernel_gaps.py"
      done >>"$out/nsys-kernels.txt"
    else
      echo "# nsys failed for $op (see ipc-latency.log)" >>"$out/nsys-kernels.txt"
    fi
  done
  echo "# nsys: $out/nsys-kernels.txt" >>"$out/ipc-latency.txt"
  cat "$out/nsys-kernels.txt" >>"$out/ipc-latency.txt"
elif [ "$profile" = 1 ]; then
  echo "# no nsys on this machine: no profile" >>"$out/ipc-latency.txt"
fi
if [ "$stamps" = 1 ]; then
  mkdir -p "$out/stamps"
  rm -f "$out"/stamps/*.csv
  {
    echo "# kernel stamps (HIR_CUDA_STAMPS), ipc default, n=$n1, $np ranks, $k operations a run:"
    echo "# median ns of each phase (scripts/kernel_stamps.py), per rank"
  } >>"$out/ipc-latency.txt"
  for op in allreduce allgather; do
    has "$op" || continue
    for mode in $modes; do
      flag=()
      [ "$mode" = graph ] && flag=(--graph)
      printf '\n===== stamps: ipc %s n=%s %s =====\n' "$op" "$n1" "$mode" >>"$log"
      if (export HIR_CUDA_STAMPS="$out/stamps/$op-$mode"
          run_hir "$root/bench/ipc/${op}_loop.json" "$np" "$n1" reps 5 2 "${flag[@]}"); then
        echo "# $op $mode" >>"$out/ipc-latency.txt"
        python3 "$root/scripts/kernel_stamps.py" "$out/stamps/$op-$mode".gpu*.csv \
          >>"$out/ipc-latency.txt" 2>&1 || status=1
      else
        echo "# stamps failed for $op $mode (see ipc-latency.log)" >>"$out/ipc-latency.txt"
        status=1
      fi
    done
  done
fi
cat "$out/ipc-latency.txt"
exit $status
