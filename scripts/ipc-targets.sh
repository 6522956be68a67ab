#!/usr/bin/env bash
# Issue #13's targets in one run on a machine of 2 GPUs: every figure that
# the issue judges, ipc beside nccl in the same run, through the evaluator,
# then the verdict of each target and the table of every op at every size
# (scripts/ipc_targets.py). Three parts, each a script or tool of the
# project:
#   latency  ipc-latency-probe.sh: the 8 B ping-pong (one way) and the 8 B
#            allreduce through `hir run`, eager and with --graph, 1,000
#            operations per run, ipc and nccl; the allreduce again at each
#            world size of --colls-np other than 2, which judges it there
#   p2p      hir_p2p_bench --protocols auto,put: send/recv as a program
#            without "protocol" runs it (eager up to 16 MiB, put above), and
#            put, against nccl, 4 KiB - 1 GiB by 4x, streamed and (up to
#            16 MiB) ping-pong, plus the 8 B latency row; then
#            hir_link_bench 64 MiB - 1 GiB: the link's ceiling (GPU 0 to
#            GPU 1 by copy engines and kernels, pushes and pulls, no
#            protocol), which the verdicts set a bandwidth miss against
#   colls    ipc-collectives-bench.sh: allreduce, allgather, reduce_scatter,
#            broadcast and alltoall, 8 B - 1 GiB by 8x, ipc and nccl, eager
#            and (up to 32 KiB) with --graph, 20 collectives per run, medians
#            of --reps runs; at 2 ranks, and again at each world size of
#            --colls-np
# On one H100 (--mps, ipc only, --reps 2) the three took 58 s; on 4 H100s
# 531 s (session 24, before the 4-rank latency probe, with 7 runs per size);
# on 4 H200s with the probe at 5 runs, more than 575 s (latency 149 s and
# 108 s at 4 ranks, p2p 24, colls 123 and over 170 at 4 ranks), and with
# the defaults below 515 s (session 26).
#
#   bash scripts/ipc-targets.sh [--build DIR] [--reps N] [--latency-reps N]
#        [--parts "latency p2p colls"] [--colls-np "2 4"] [--mps]
#
# --build DIR: the binaries (default build-carry, scripts/gpu-pack.sh); builds
#   nothing. --reps N: repetitions of each measurement, medians (default 5;
#   3 when the collectives run at 4 ranks or more, to fit one device call).
#   --latency-reps N: the latency probe's (default 3, to fit one device
#   call: each run costs 3 - 4 s. On 4 H200s the graphed runs of 1,000
#   operations agreed within 2%; the eager ones spread 7 - 18% for ipc and
#   11 - 52% for nccl, where 3 runs make a rougher median than 5).
# --parts: which parts to run (default all three); the verdicts name what
#   was not measured. --colls-np: the world sizes of the colls part (default
#   2, and 4 on a machine of 4 GPUs or more: the issue's "4 when lent");
#   the collectives' targets are judged at each. --mps: on a machine of one
#   GPU, 2 ranks share it under MPS, ipc only: a check of the script, whose
#   figures judge nothing (no NCCL to compare with).
# Writes ${OUT:-gpu-out}/targets/: each part's own files and output (a
# world size N other than 2 under npN/), and targets.md (the verdicts and
# the tables, also printed last). Exit status:
# 0 when every part ran, 1 when one failed, 2 on bad usage.
# NCCL_NVLS_ENABLE=0 always.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-carry reps="" latency_reps=3 parts="latency p2p colls" mps=0 colls_np="" colls_np_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=${1:-} ;;
    --reps) shift; reps=${1:-} ;;
    --latency-reps) shift; latency_reps=${1:-} ;;
    --parts) shift; parts=${1:-} ;;
    --colls-np) shift; colls_np=${1:-}; colls_np_given=1 ;;
    --mps) mps=1 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "ipc-targets: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $reps in
  '') ;;
  *[!0-9]*|0) echo "ipc-targets: --reps expects a positive integer, got '$reps'" >&2; exit 2 ;;
esac
case $latency_reps in
  ''|*[!0-9]*|0) echo "ipc-targets: --latency-reps expects a positive integer, got '$latency_reps'" >&2; exit 2 ;;
esac
[ -n "$parts" ] || { echo "ipc-targets: --parts names no part (latency, p2p, colls)" >&2; exit 2; }
for p in $parts; do
  case $p in
    latency|p2p|colls) ;;
    *) echo "ipc-targets: unknown part '$p' (the parts: latency p2p colls)" >&2; exit 2 ;;
  esac
done
for n in $colls_np; do
  case $n in
    ''|*[!0-9]*|0|1) echo "ipc-targets: --colls-np expects world sizes of 2 or more, got '$n'" >&2; exit 2 ;;
  esac
done
[ "$colls_np_given" = 0 ] || [ -n "${colls_np// /}" ] || { echo "ipc-targets: --colls-np names no world size (e.g. \"2 4\")" >&2; exit 2; }
build=$(readlink -f "$build" 2>/dev/null) && [ -x "$build/bin/hir" ] ||
  { echo "ipc-targets: no build with bin/hir at '$build' (scripts/gpu-pack.sh)" >&2; exit 2; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
gpus=${gpus:-0}
if [ "$mps" = 1 ]; then
  [ "$gpus" -ge 1 ] || { echo "ipc-targets: --mps needs a GPU, found none" >&2; exit 2; }
else
  [ "$gpus" -ge 2 ] || { echo "ipc-targets: needs 2 GPUs (or --mps), found $gpus" >&2; exit 2; }
fi
if [ "$colls_np_given" = 0 ]; then
  colls_np=2
  [ "$mps" = 0 ] && [ "$gpus" -ge 4 ] && colls_np="2 4"
fi
if [ -z "$reps" ]; then
  reps=5
  for n in $colls_np; do [ "$n" -lt 4 ] || reps=3; done
fi
for n in $colls_np; do
  [ "$mps" = 1 ] || [ "$n" -le "$gpus" ] ||
    { echo "ipc-targets: --colls-np $n needs $n GPUs, found $gpus" >&2; exit 2; }
done
[ -f "$build/MANIFEST" ] && [ -f "$root/scripts/prebuilt-env.sh" ] &&
  { . "$root/scripts/prebuilt-env.sh" "$build" || exit 2; }
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=${OUT:-$root/gpu-out}/targets
mkdir -p "$out"
# A part that does not run this time must be "not measured", not judged
# from an earlier run's file.
rm -f "$out/p2p.csv" "$out/link.csv" "$out/ipc-collectives.csv" "$out/ipc-latency.txt" "$out"/np*/ipc-collectives.csv \
  "$out"/np*/ipc-latency.txt
has() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
mps_flag=()
[ "$mps" = 1 ] && mps_flag=(--mps)
status=0
part() {  # part NAME COMMAND...: runs it, its output in NAME.txt
  local name=$1 t0=$SECONDS rc
  shift
  echo "== $name: $*" >"$out/$name.txt"
  "$@" >>"$out/$name.txt" 2>&1
  rc=$?
  echo "== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/$name.txt"
  [ "$rc" = 0 ] || { status=1; tail -n 5 "$out/$name.txt"; }
}

lat_at=()  # the latency probe at world sizes other than 2, for the verdicts
if has latency; then
  OUT=$out part latency bash "$root/scripts/ipc-latency-probe.sh" --build "$build" \
    --reps "$latency_reps" --n 2 --variants default --modes "eager graph" --ops "allreduce pingpong" \
    --no-nsys "${mps_flag[@]}"
  for n in $colls_np; do
    [ "$n" = 2 ] || [ "$mps" = 1 ] && continue
    mkdir -p "$out/np$n"
    OUT=$out/np$n part "latency-np$n" bash "$root/scripts/ipc-latency-probe.sh" --build "$build" \
      --reps "$latency_reps" --n 2 --variants default --modes "eager graph" --ops allreduce --np "$n" \
      --no-nsys
    lat_at+=(--latency-at "$n=$out/np$n/ipc-latency.txt")
  done
fi
if has p2p; then
  mpi=(mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -np 2) base=()
  if [ "$mps" = 1 ]; then
    # shellcheck source=mps-env.sh
    . "$root/scripts/mps-env.sh"
    mps_start "$(mktemp -d)" || exit 1
    mpi+=(-x HIR_SHARE_GPUS -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_DEVICE_MAX_CONNECTIONS)
    base=(--base ipc)
  fi
  part p2p "${mpi[@]}" "$build/bin/hir_p2p_bench" --device cuda --min 4K --max 1G --factor 4 \
    --reps "$reps" --run-bytes 1G --pingpong-max 16M --protocols auto,put "${base[@]}" \
    --csv "$out/p2p.csv"
  # The link's ceiling (GPU 0 -> GPU 1, every way of copying, no protocol):
  # what the 256 MiB and up verdict sets a miss against. Not under MPS (one
  # GPU), nor from a build without it (an older pack).
  if [ "$mps" = 0 ] && [ -x "$build/bin/hir_link_bench" ]; then
    part link "$build/bin/hir_link_bench" --min 64M --max 1G --reps 5 --csv "$out/link.csv"
  fi
  if [ "$mps" = 1 ]; then
    mps_stop
    unset HIR_SHARE_GPUS CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_DEVICE_MAX_CONNECTIONS
  fi
fi
at_ranks=()  # the collectives of world sizes other than 2, for the verdicts
if has colls; then
  for n in $colls_np; do
    dir=$out name=colls
    if [ "$n" != 2 ]; then
      dir=$out/np$n name=colls-np$n
      mkdir -p "$dir"
      at_ranks+=(--collectives-at "$n=$dir/ipc-collectives.csv")
    fi
    OUT=$dir part "$name" bash "$root/scripts/ipc-collectives-bench.sh" --build "$build" --np "$n" \
      -b 8 -e 1G -f 8 -n "$reps" -w 2 --graph-max 32K --eager-sweep-max 0 \
      --reps-per-run 20 "${mps_flag[@]}"
  done
fi

python3 "$root/scripts/ipc_targets.py" --p2p "$out/p2p.csv" --link "$out/link.csv" \
  --collectives "$out/ipc-collectives.csv" --latency "$out/ipc-latency.txt" "${at_ranks[@]}" \
  "${lat_at[@]}" \
  --gpus "$gpus" $([ "$mps" = 1 ] && echo --shared) >"$out/targets.md" || status=1
cat "$out/targets.md"
exit $status
