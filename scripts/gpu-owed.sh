#!/usr/bin/env bash
# What a machine of 2 GPUs owes the open issues (#12 graphs, #13 ipc, #14
# item 8), step by step within a time budget, so that one device call (600 s
# at most) does as much as fits and the next call goes on where it stopped.
# Runs the binaries that scripts/gpu-pack.sh --nccl-tests DIR packed (the
# device tool's `carry`); builds nothing.
#
#   bash scripts/gpu-owed.sh [--build DIR] [--budget S] [--steps "check graph ..."]
#        [--probe-variants "default NAME=VALUE ..."]
#
# The steps, in this order (--steps picks some; the estimate is what the
# budget counts; each runs under `timeout` of the budget left):
#   targets   ipc-targets.sh: every figure #13 judges, ipc beside nccl, and
#             the verdict of each target, with the table of every op at
#             every size: #13's "one script in one run"; on 4 GPUs or
#             more, the collectives and the 8 B allreduce's latency again
#             at 4 ranks (300 s; 4 GPUs: 560, about 520 s on 4 H200s:
#             give it --budget 590 and no other step)
#   oneshot   ipc-collectives-bench.sh, allreduce 256 KiB - 256 MiB: a pair's
#             one-shot up to 16 MiB (the default) against two-shot above
#             256 KiB (HIR_IPC_ONE_SHOT_MAX=262144, the earlier default),
#             eager and with --graph up to 4 MiB, nccl beside each   (150 s)
#   bcast     ipc-collectives-bench.sh at every GPU (3 or more), broadcast
#             256 KiB - 1 GiB: scatter-allgather from 4 MiB (the default)
#             against it at every size (HIR_IPC_BROADCAST_SPLIT_MIN=0) and
#             the root's copies at every size (=1 TiB, the earlier
#             algorithm), nccl beside each; skipped below 3 GPUs    (200 s)
#   mid       hir_p2p_bench 16 KiB - 256 MiB with ping-pong rows up to
#             16 MiB, by default (sends eager up to 16 MiB) and with
#             HIR_IPC_EAGER_SEND_MAX=0 (put above 16 KiB): #13's mid sizes,
#             streamed and one at a time                              (300 s)
#   direct    ipc-ab.sh: eager messages written straight into a receive
#             buffer posted first, against HIR_IPC_DIRECT=0 (through the
#             slot), and grid pulls without fences against
#             HIR_CUDA_PULL_FENCE=1, 16 KiB - 1 MiB streamed and
#             ping-pong, and hir run's 16 KiB - 1 MiB ping-pong, 2 rounds
#                                                                     (200 s)
#   sem       ipc-ab.sh: memop against kernel semaphores           (200 s)
#   grid      mid-size copies by one grid kernel (the default up to 1 MiB)
#             against the copy engine (HIR_CUDA_GRID_COPY_MAX=0) and
#             32-block grids up to 4 MiB: ipc-ab.sh 64 KiB - 16 MiB with
#             ping-pong rows, and allgather, broadcast and alltoall
#             64 KiB - 4 MiB, 200 per run, each way                   (250 s)
#   faults    gpu-faults.sh --timeout 10: #14 item 8                  (100 s)
#   soak      gpu-soak.sh --iters 100000 --runs 8: #14 item 8 (one run of
#             100,000 iterations takes 6 s on 2 H200s, mostly start-up: too
#             short to tell a leak from the warm-up)                   (100 s)
#   graph     graph-bench.sh --np 2 --k 1000 --nccl-tests: #12's table (150 s)
#   tests     gpu-check.sh --prebuilt --no-examples --no-bench: the GPU
#             tests and the cuda half of the MPI suite at 1, 2 and all GPUs,
#             the check of the code a targets run measured           (150 s)
#   kernels   the tests of the device's kernels and of what runs on them:
#             hostir_gpu_tests' CudaDevice.* on one GPU, and the MPI suite's
#             ipc and compute tests on the cuda device at 2 ranks and at
#             every GPU; a quicker "tests" for a change to the kernels
#             (70 s on 4 H200s)                                      (120 s)
#   check     gpu-check.sh --prebuilt: GPU tests at 1 and 2 ranks, examples,
#             hir_p2p_bench (1 KiB - 1 GiB, and put above 16 KiB) and
#             hir_comm_bench (the examples take 4 min)                (330 s)
#   colls     ipc-collectives-bench.sh: allreduce, allgather and
#             reduce_scatter, 8 B - 1 GiB by 8x, 50 collectives per run,
#             and ipc with chunks up to 4 MiB eager (--eager-max 4M): #13's
#             table                                                   (300 s)
#   colls2    the same for broadcast and alltoall                     (200 s)
#   probe     ipc-latency-probe.sh, 8 B and 8 KiB, --graph: lines and PDL
#             over NVLink (default, HIR_IPC_INLINE_MAX=0 and 4096,
#             HIR_CUDA_PDL=0)                                          (120 s)
#   probe-mid the same at 16 - 64 KiB: one block's batches, and 64 KiB slots
#             (HIR_IPC_EAGER_MAX=65536)                               (100 s)
#   mid-np    ipc-collectives-bench.sh at every GPU (3 or more), the ops
#             that put (allreduce, allgather, alltoall, broadcast), 1 MiB
#             - 1 GiB by 4x, eager, nccl beside each: a member's puts as
#             one step (the default: one grid up to 1 MiB each, a copy
#             engine per peer above) against a step each
#             (HIR_IPC_PUSH_STEPS=0)                                  (200 s)
#   probe-np  ipc-latency-probe.sh --stamps, the 8 B allreduce and
#             allgather at every GPU (3 or more; eager and --graph) and at 2
#             (--graph), nccl beside them (with its symmetric kernels), and
#             the kernel stamps of each (HIR_CUDA_STAMPS: the median time of
#             each phase of ipc's kernels, per rank); --probe-variants
#             "default NAME=VALUE ..." runs ipc under each (an A/B of a
#             kernel switch, the stamps of the default)               (150 s)
#
# --budget S (default 560): a step starts only if its estimate fits in what
# is left of S since this script started; the others are listed as left for
# the next call, with the --steps to give it.
# Writes two files under ${OUT:-gpu-out} (the device tool brings back few):
# owed.tar.gz (every step's own files, under owed/STEP/) and owed.txt (each
# step's result and the end of its output, also printed last).
# NCCL_NVLS_ENABLE=0 always.
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
build=$root/build-carry budget=560 probe_variants=default
all="targets tests kernels oneshot bcast mid-np probe-np mid direct sem grid faults soak graph check colls colls2 probe probe-mid"
steps=$all
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=${1:-} ;;
    --budget) shift; budget=${1:-} ;;
    --steps) shift; steps=${1:-} ;;
    --probe-variants) shift; probe_variants=${1:-default} ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "gpu-owed: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case $budget in
  ''|*[!0-9]*|0) echo "gpu-owed: --budget expects a positive number of seconds, got '$budget'" >&2; exit 2 ;;
esac
for s in $steps; do
  case " $all " in *" $s "*) ;; *)
    echo "gpu-owed: unknown step '$s' (the steps: $all)" >&2; exit 2 ;;
  esac
done
[ -n "$steps" ] || { echo "gpu-owed: --steps names no step (the steps: $all)" >&2; exit 2; }
build=$(readlink -f "$build" 2>/dev/null) && [ -x "$build/bin/hir" ] ||
  { echo "gpu-owed: no packed build at '$build' (scripts/gpu-pack.sh --nccl-tests DIR)" >&2; exit 2; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 2 ] || { echo "gpu-owed: needs 2 GPUs, found ${gpus:-0}" >&2; exit 2; }

# shellcheck source=prebuilt-env.sh
. "$root/scripts/prebuilt-env.sh" "$build" || exit 2
export NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nccl_tests=()
[ -x "$build/nccl-tests/all_reduce_perf" ] && nccl_tests=(--nccl-tests "$build/nccl-tests")

estimate() {
  case $1 in
    targets) if [ "$gpus" -ge 4 ]; then echo 560; else echo 300; fi ;;
    oneshot) echo 150 ;; bcast) echo 200 ;;
    tests) echo 150 ;; kernels) echo 120 ;; check) echo 330 ;; colls|mid) echo 300 ;; grid) echo 250 ;; sem|colls2|direct) echo 200 ;;
    graph) echo 150 ;;
    probe) echo 120 ;; probe-np) echo 150 ;; mid-np) echo 200 ;; *) echo 100 ;;
  esac
}
# by_variant NAME "VARIANTS" LINES ARGS...: ipc-collectives-bench.sh ARGS
# once per variant ("default", or NAME=VALUE set for that run), each
# writing under $OUT/NAME-VARIANT, the last LINES lines of its table shown.
by_variant() {
  local name=$1 variants=$2 lines=$3 v
  shift 3
  for v in $variants; do
    echo "== $name, $v"
    mkdir -p "$OUT/$name-$v"
    env $([ "$v" = default ] || echo "$v") OUT="$OUT/$name-$v" \
      bash "$root/scripts/ipc-collectives-bench.sh" --build "$build" "$@" | tail -n "$lines"
  done
}
run_step() {
  case $1 in
    targets) OUT=$OUT bash "$root/scripts/ipc-targets.sh" --build "$build" ;;
    oneshot) by_variant oneshot "default HIR_IPC_ONE_SHOT_MAX=262144" 12 --np 2 \
               --ops allreduce -b 256K -e 256M -f 4 -n 5 -w 2 --graph-max 4M \
               --eager-sweep-max 0 --reps-per-run 100 ;;
    tests) bash "$root/scripts/gpu-check.sh" --prebuilt "$build" --no-examples --no-bench ;;
    kernels) local n rc=0 mpirun=(mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE)
      echo "== hostir_gpu_tests CudaDevice.*, 1 rank"
      timeout 300 "${mpirun[@]}" -np 1 "$build/tests/hostir_gpu_tests" --gtest_color=no \
        '--gtest_filter=CudaDevice.*' >"$OUT/kernels-gpu.log" 2>&1 || rc=1
      grep -E '^\[  (PASSED|FAILED)|tests? ran' "$OUT/kernels-gpu.log" | head -n 12
      for n in 2 $([ "$gpus" -gt 2 ] && echo "$gpus"); do
        echo "== hostir_mpi_tests Ipc* Compute* on the cuda device, $n ranks"
        HIR_TEST_DEVICE=cuda timeout 300 "${mpirun[@]}" -x HIR_TEST_DEVICE -np "$n" \
          "$build/tests/hostir_mpi_tests" --gtest_color=no \
          '--gtest_filter=Ipc*:Compute*:-IpcFakeNodes*' >"$OUT/kernels-mpi-np$n.log" 2>&1 || rc=1
        grep -E '^\[  (PASSED|FAILED)|tests? ran' "$OUT/kernels-mpi-np$n.log" | head -n 12
      done
      return $rc ;;
    bcast) [ "$gpus" -ge 3 ] || { echo "bcast: needs 3 GPUs, found $gpus: skipped"; return 0; }
           by_variant bcast \
             "default HIR_IPC_BROADCAST_SPLIT_MIN=0 HIR_IPC_BROADCAST_SPLIT_MIN=1099511627776" 12 \
             --np "$gpus" --ops broadcast -b 256K -e 1G -f 4 -n 5 -w 2 --graph-max 4M \
             --eager-sweep-max 0 --reps-per-run 20 ;;
    check) bash "$root/scripts/gpu-check.sh" --prebuilt "$build" ;;
    mid) for v in default put16K; do
           echo "== hir_p2p_bench, $v"
           set -- mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -np 2
           [ "$v" = put16K ] && set -- env HIR_IPC_EAGER_SEND_MAX=0 "$@" -x HIR_IPC_EAGER_SEND_MAX
           timeout 150 "$@" "$build/bin/hir_p2p_bench" --device cuda --min 16K --max 256M \
             --factor 4 --reps 3 --run-bytes 2G --pingpong-max 16M --csv "$OUT/p2p-$v.csv" ||
             return 1
         done ;;
    direct) bash "$root/scripts/ipc-ab.sh" --build "$build" --rounds 2 --min 16K --max 1M \
              --pingpong-max 1M --variants "default HIR_IPC_DIRECT=0 HIR_CUDA_PULL_FENCE=1" \
              --probe-ops pingpong --n "4096 16384 65536 262144" ;;
    sem) bash "$root/scripts/ipc-ab.sh" --build "$build" --rounds 1 --max 64M \
           --variants "HIR_CUDA_SEMAPHORES=memop HIR_CUDA_SEMAPHORES=kernel" \
           --probe-with HIR_IPC_EAGER_MAX=0 ;;
    grid) bash "$root/scripts/ipc-ab.sh" --build "$build" --rounds 1 --min 64K --max 16M \
            --pingpong-max 16M --probe-ops none --variants \
            "default HIR_CUDA_GRID_COPY_MAX=0 HIR_CUDA_GRID_COPY_MAX=4194304,HIR_CUDA_GRID_COPY_BLOCKS=32"
          by_variant colls "default HIR_CUDA_GRID_COPY_MAX=0" 14 --np 2 \
            --ops allgather,broadcast,alltoall -b 64K -e 4M -f 4 -n 10 -w 3 --graph-max 0 \
            --eager-sweep-max 0 --reps-per-run 200 ;;
    graph) bash "$root/scripts/graph-bench.sh" --build "$build" --np 2 --k 1000 --reps 3 \
             "${nccl_tests[@]}" ;;
    probe) bash "$root/scripts/ipc-latency-probe.sh" --build "$build" --n "2 2048" --modes graph \
             --reps 2 --variants "default HIR_IPC_INLINE_MAX=0 HIR_IPC_INLINE_MAX=4096 HIR_CUDA_PDL=0" ;;
    mid-np) [ "$gpus" -ge 3 ] || { echo "mid-np: needs 3 GPUs, found $gpus: skipped"; return 0; }
            by_variant mid-np "default HIR_IPC_PUSH_STEPS=0" 30 --np "$gpus" \
              --ops allgather,alltoall,broadcast,allreduce -b 1M -e 1G -f 4 \
              -n 5 -w 2 --graph-max 0 --eager-sweep-max 0 --reps-per-run 20 ;;
    probe-np) local n
      for n in 2 $([ "$gpus" -ge 3 ] && echo "$gpus"); do
        echo "== $n ranks"
        mkdir -p "$OUT/np$n"
        OUT="$OUT/np$n" bash "$root/scripts/ipc-latency-probe.sh" --build "$build" --np "$n" \
          --n 2 --ops "allreduce allgather" --reps 3 --variants "$probe_variants" --no-nsys --stamps \
          $([ "$n" = 2 ] && echo --modes graph) | tail -n 40 || return 1
      done ;;
    probe-mid) bash "$root/scripts/ipc-latency-probe.sh" --build "$build" \
                 --n "4096 8192 16384" --modes graph --reps 2 \
                 --variants "default HIR_IPC_EAGER_MAX=65536" ;;
    colls|colls2)
      local ops=allreduce,allgather,reduce_scatter
      [ "$1" = colls2 ] && ops=broadcast,alltoall
      bash "$root/scripts/ipc-collectives-bench.sh" --build "$build" --np 2 --ops "$ops" \
        -b 8 -e 1G -f 8 -n 10 -w 3 --graph-max 32K --eager-sweep-max 32K --eager-max 4M \
        --reps-per-run 50 ;;
    faults) bash "$root/scripts/gpu-faults.sh" "$build" --timeout 10 ;;
    soak) bash "$root/scripts/gpu-soak.sh" "$build" --iters 100000 --runs 8 ;;
  esac
}

start=$(date +%s)
mkdir -p "$out/owed"
summary="$out/owed.txt"
: >"$summary"
echo "gpu-owed at $(date '+%F %T'), $(sed -n 's/^commit //p' "$build/MANIFEST"), ${gpus} GPUs, budget ${budget} s" >>"$summary"
left=() failed=0
for s in $steps; do
  elapsed=$(($(date +%s) - start))
  room=$((budget - elapsed))
  if [ "$(estimate "$s")" -gt "$room" ]; then left+=("$s"); continue; fi
  dir="$out/owed/$s"
  mkdir -p "$dir"
  t0=$(date +%s)
  OUT=$dir timeout "$room" bash -c "$(declare -f run_step by_variant); $(declare -p root build nccl_tests gpus probe_variants); run_step $s" \
    >"$dir/output.txt" 2>&1
  rc=$?
  [ "$rc" = 0 ] || failed=1
  note=""
  [ "$rc" = 124 ] && note=" (stopped by the budget)"
  { printf '\n== %s: exit %s in %s s%s\n' "$s" "$rc" "$(($(date +%s) - t0))" "$note"
    tail -n 25 "$dir/output.txt"; } >>"$summary"
done
if [ "${#left[@]}" -gt 0 ]; then
  printf '\nleft for the next call: bash scripts/gpu-owed.sh --steps "%s"\n' "${left[*]}" >>"$summary"
fi
tar czf "$out/owed.tar.gz" -C "$out" owed && rm -rf "$out/owed"
cat "$summary"
exit $failed
