#!/usr/bin/env bash
# The one command for a GPU machine: configure and build with CUDA, run the GPU
# tests under mpirun at 1, 2 and all GPUs, optionally the host test suite, the
# examples on the cuda device at the same world sizes, and the communication
# benchmark; keep full logs under ${OUT:-gpu-out}/ and print a summary last.
# On a machine of one GPU, the ipc tests and examples also run on 2 ranks
# sharing it (HIR_SHARE_GPUS=1; NCCL refuses that, ipc does not).
#
#   bash scripts/gpu-check.sh [--host-tests] [--no-tests] [--no-examples]
#                             [--no-bench] [--bench-args "ARGS"] [--jobs N]
#                             [--prebuilt DIR] [--mps] [--shared-np "2 4"]
#
# --mps: on a machine of one GPU, the 2 ranks that share it run under an
# MPS daemon (scripts/mps-env.sh) instead of in time slices: the shared
# ipc tests then take seconds, not minutes.
# --shared-np "N ...": the world sizes of those shared runs (default 2);
# "2 4" also runs the ipc tests and examples at 4 ranks, which is how a
# machine of one GPU runs ipc's 4-rank paths (rings of 3 peers, two-shot
# chunks of 4) on the cuda device.
#
# --prebuilt DIR: no configure and build; run the binaries that
# scripts/gpu-pack.sh packed into DIR on the development machine (the
# device tool's `carry`), which saves the build's minutes of device time.
# --host-tests needs a build here (ctest), so it is skipped then.
#
# Every step runs even when an earlier one failed (except what needs a
# build that failed); the exit status is non-zero if anything failed.
# Files written (at most 8, what the device tool brings back): build.log
# tests.log host-tests.log examples.log bench.log (both benchmarks) bench.csv
# p2p.csv summary.txt.
#
# NVLink multicast is never used: NCCL_NVLS_ENABLE=0 is exported (it can put
# a shared host's GPUs out of service).
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
build=${BUILD_DIR:-$root/build-gpu}
jobs=$(nproc 2>/dev/null || echo 8)
host_tests=0 run_tests=1 run_examples=1 run_bench=1
bench_args="" prebuilt="" mps=0 shared_np=2
while [ $# -gt 0 ]; do
  case "$1" in
    --host-tests) host_tests=1 ;;
    --no-tests) run_tests=0 ;;
    --no-examples) run_examples=0 ;;
    --no-bench) run_bench=0 ;;
    --bench-args) shift; bench_args=${1:-} ;;
    --jobs) shift; jobs=${1:-$jobs} ;;
    --prebuilt) shift; prebuilt=${1:-} ;;
    --mps) mps=1 ;;
    --shared-np) shift; shared_np=${1:-} ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

for sn in $shared_np; do
  case $sn in
    ''|*[!0-9]*|0|1) echo "gpu-check: --shared-np expects world sizes of 2 or more, got '$sn'" >&2; exit 2 ;;
  esac
done
export NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export HIR_TEST_TIMEOUT_S=${HIR_TEST_TIMEOUT_S:-120}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0

# ------------------------------------------------------------ bookkeeping
rows=()
# record STEP PASS FAIL SKIP NOTE
record() {
  rows+=("$(printf '%-26s %6s %6s %6s  %s' "$1" "$2" "$3" "$4" "${5:-}")")
  if [ "$3" != "0" ] && [ "$3" != "-" ]; then failed=1; fi
}
log_header() { printf '\n===== %s (%s) =====\n' "$2" "$(date '+%F %T')" >>"$1"; }
# graph_status EXAMPLE N: the exit status `hir run EXAMPLE --np N --graph`
# should end with: 0 where `hir check` says the capture is possible, 2 (the
# refusal) where it is not.
graph_status() {
  local said
  said=$("$hir" check "$1" --world "$2" --device cuda 2>&1)
  if grep -q 'graph capture (--graph): possible' <<<"$said"; then echo 0; else echo 2; fi
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
gpus=${gpus:-0}
sizes=()
for n in 1 2 "$gpus"; do
  if [ "$n" -lt 1 ] || [ "$n" -gt "$gpus" ]; then continue; fi
  case " ${sizes[*]:-} " in *" $n "*) ;; *) sizes+=("$n") ;; esac
done
mpirun_cmd=(mpirun --allow-run-as-root -x NCCL_NVLS_ENABLE -x HIR_TEST_TIMEOUT_S --bind-to none)
{
  echo "gpu-check on $(hostname) at $(date '+%F %T')"
  echo "GPUs: $gpus; world sizes: ${sizes[*]:-none}"
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"
} | tee -a "$summary"

# ------------------------------------------------------------------ build
# When the full build fails, the targets this script runs are built one by
# one, so that a broken unrelated target does not hide the GPU results.
log="$out/build.log"
: >"$log"
log_header "$log" "configure"
built=0
if [ -n "$prebuilt" ]; then
  # shellcheck source=scripts/prebuilt-env.sh
  if . "$root/scripts/prebuilt-env.sh" "$prebuilt" >>"$log" 2>&1; then
    build=$(readlink -f "$prebuilt")
    built=1
    record "prebuilt" 1 0 0 "$(head -n1 "$build/MANIFEST")"
  else
    record "prebuilt" 0 1 0 "$(tail -n1 "$log")"
  fi
  cat "$build/MANIFEST" >>"$log" 2>/dev/null
elif cmake -S "$root" -B "$build" -G Ninja -DHIR_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
      >>"$log" 2>&1; then
  log_header "$log" "build"
  if cmake --build "$build" -j "$jobs" >>"$log" 2>&1; then
    built=1
    record "build" 1 0 0 "$build"
  else
    bad_targets=""
    for target in tests/hostir_gpu_tests bin/hir bin/hir_p2p_bench bin/hir_comm_bench; do
      log_header "$log" "build ${target#*/} alone"
      if ! cmake --build "$build" -j "$jobs" --target "${target#*/}" >>"$log" 2>&1; then
        bad_targets+=" ${target#*/}"
        rm -f "${build:?}/$target"  # never run a stale binary of an earlier build
      fi
    done
    record "build" 0 1 0 "full build failed (see build.log); alone failed:${bad_targets:- none}"
  fi
else
  record "configure" 0 1 0 "see build.log"
fi
grep -aE "error:|FAILED:" "$log" | head -n 10 || true

# ------------------------------------------------------- gtest summaries
# Counts from rank 0's GoogleTest summary in a log piece: "P F S".
gtest_counts() {
  local text=$1 p f s
  p=$(grep -aoE '\[  PASSED  \] [0-9]+' <<<"$text" | tail -n1 | grep -oE '[0-9]+$' || true)
  f=$(grep -aoE '\[  FAILED  \] [0-9]+ test' <<<"$text" | tail -n1 | grep -oE '[0-9]+' || true)
  s=$(grep -aoE '\[  SKIPPED \] [0-9]+' <<<"$text" | tail -n1 | grep -oE '[0-9]+$' || true)
  echo "${p:-0} ${f:-0} ${s:-0}"
}

# -------------------------------------------------------------- GPU tests
log="$out/tests.log"
: >"$log"
gpu_tests="$build/tests/hostir_gpu_tests"
if [ "$run_tests" = 1 ]; then
  if [ ! -x "$gpu_tests" ]; then
    record "gpu tests" - 1 - "not built"
  elif [ "${#sizes[@]}" -eq 0 ]; then
    record "gpu tests" - - - "no GPU: skipped"
  else
    for n in "${sizes[@]}"; do
      log_header "$log" "hostir_gpu_tests on $n rank(s)"
      piece=$(timeout 1800 "${mpirun_cmd[@]}" -np "$n" "$gpu_tests" --gtest_color=no 2>&1)
      rc=$?
      printf '%s\n' "$piece" >>"$log"
      read -r p f s <<<"$(gtest_counts "$piece")"
      if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi  # crash, hang or another rank failed
      note="exit $rc"
      [ "$rc" = 124 ] && note="timed out"
      record "gpu tests np=$n" "$p" "$f" "$s" "$note"
    done
    # The tests of the MPI suite that run on either device (ipc, compute,
    # kernels), on the cuda device (HIR_TEST_DEVICE).
    mpi_tests="$build/tests/hostir_mpi_tests"
    for n in "${sizes[@]}"; do
      [ -x "$mpi_tests" ] || { record "ipc+compute tests (cuda)" - 1 - "not built"; break; }
      log_header "$log" "hostir_mpi_tests Ipc* Compute* on the cuda device, $n rank(s)"
      piece=$(HIR_TEST_DEVICE=cuda timeout 900 "${mpirun_cmd[@]}" -x HIR_TEST_DEVICE -np "$n" \
        "$mpi_tests" --gtest_color=no '--gtest_filter=Ipc*:Compute*:-IpcFakeNodes*' 2>&1)
      rc=$?
      printf '%s\n' "$piece" >>"$log"
      read -r p f s <<<"$(gtest_counts "$piece")"
      if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
      record "ipc+compute (cuda) np=$n" "$p" "$f" "$s" "exit $rc"
    done
  fi
fi

# ------------------------------------------------------------- host tests
if [ "$host_tests" = 1 ]; then
  log="$out/host-tests.log"
  : >"$log"
  if [ -n "$prebuilt" ]; then
    record "host ctest" - - - "--prebuilt: no ctest here, skipped"
  elif [ "$built" != 1 ]; then
    record "host ctest" - 1 - "not built"
  else
    log_header "$log" "ctest (all but the gpu label)"
    (cd "$build" && timeout 3600 ctest -LE gpu -j "$jobs" --output-on-failure) >>"$log" 2>&1
    rc=$?
    line=$(grep -aE 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -n1)
    total=$(grep -oE 'out of [0-9]+' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    bad=$(grep -oE '[0-9]+ tests failed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    [ "$rc" != 0 ] && [ "${bad:-0}" = 0 ] && bad=1
    record "host ctest" "$(( ${total:-0} - ${bad:-0} ))" "${bad:-0}" 0 "exit $rc"
  fi
fi

# --------------------------------------------------------------- examples
# An example's "world_size" or "min_world_size" ($2), if any.
world_size_of() {
  grep -oE "\"$2\"[[:space:]]*:[[:space:]]*[0-9]+" "$1" | grep -oE '[0-9]+$' | head -n1
}

if [ "$run_examples" = 1 ]; then
  log="$out/examples.log"
  : >"$log"
  hir="$build/bin/hir"
  if [ ! -x "$hir" ]; then
    record "examples" - 1 - "not built"
  elif [ "${#sizes[@]}" -eq 0 ]; then
    record "examples" - - - "no GPU: skipped"
  else
    # Every example at every world size, as is; then with --graph, where an
    # example the check calls capturable must pass with its runs replayed
    # from a graph and any other must be refused at load (exit 2) with the
    # node that stops the capture.
    for mode in eager graph; do
      for n in "${sizes[@]}"; do
        p=0 f=0 s=0 failures=""
        for ex in "$root"/ir_examples/*.json; do
          [ -e "$ex" ] || continue
          name=$(basename "$ex" .json)
          ws=$(world_size_of "$ex" world_size)
          mws=$(world_size_of "$ex" min_world_size)
          if { [ -n "$ws" ] && [ "$ws" != "$n" ]; } || { [ -n "$mws" ] && [ "$mws" -gt "$n" ]; }; then
            s=$((s + 1))
            continue
          fi
          want=0 flags=()
          if [ "$mode" = graph ]; then
            flags=(--graph --iters 5)
            want=$(graph_status "$ex" "$n")
          fi
          log_header "$log" "$name on $n rank(s)${flags:+, ${flags[*]}}"
          timeout 600 "$hir" run "$ex" --np "$n" --device cuda "${flags[@]}" >>"$log" 2>&1
          rc=$?
          echo "exit status: $rc (expected $want)" >>"$log"
          if [ "$rc" = "$want" ]; then p=$((p + 1)); else f=$((f + 1)); failures+=" $name"; fi
        done
        label="examples np=$n"
        [ "$mode" = graph ] && label="graph examples np=$n"
        record "$label" "$p" "$f" "$s" "${failures:+failed:$failures}"
      done
    done
  fi
fi

# --------------------------- ranks sharing the one GPU (--shared-np)
# On a machine of one GPU, the 2-rank paths that do not need NCCL (which
# refuses two ranks on one GPU) still run: the ipc tests and the ipc
# examples, with HIR_SHARE_GPUS=1, both ranks on GPU 0. Correctness only:
# copies within one GPU say nothing of NVLink's speed.
if [ "$gpus" = 1 ]; then
  log="$out/tests.log"
  mpi_tests="$build/tests/hostir_mpi_tests"
  if [ "$mps" = 1 ]; then
    # shellcheck source=mps-env.sh
    . "$root/scripts/mps-env.sh"
    mps_dir=$(mktemp -d)
    if mps_start "$mps_dir"; then
      mpirun_cmd+=(-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_DEVICE_MAX_CONNECTIONS)
    else
      record "MPS daemon" 0 1 0 "did not start: the shared runs go in time slices"
    fi
  fi
  for sn in $shared_np; do
    log="$out/tests.log"
    # Under MPS, 4 clients of 32 connections each failed to start on an H100
    # ("out of memory" at the first launch); 8 each ran the ipc suites.
    if [ "$mps" = 1 ]; then
      export CUDA_DEVICE_MAX_CONNECTIONS=32
      [ "$sn" -gt 2 ] && export CUDA_DEVICE_MAX_CONNECTIONS=8
    fi
    if [ "$run_tests" = 1 ] && [ -x "$mpi_tests" ]; then
      log_header "$log" "hostir_mpi_tests Ipc* on the cuda device, $sn ranks sharing GPU 0"
      piece=$(HIR_SHARE_GPUS=1 HIR_TEST_DEVICE=cuda timeout 900 "${mpirun_cmd[@]}" \
        -x HIR_TEST_DEVICE -x HIR_SHARE_GPUS -np "$sn" "$mpi_tests" --gtest_color=no \
        '--gtest_filter=Ipc*:-IpcFakeNodes*' 2>&1)
      rc=$?
      printf '%s\n' "$piece" >>"$log"
      read -r p f s <<<"$(gtest_counts "$piece")"
      if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
      record "ipc (cuda) np=$sn shared" "$p" "$f" "$s" "exit $rc"
    fi
    if [ "$run_tests" = 1 ] && [ -x "$gpu_tests" ]; then
      log_header "$log" "hostir_gpu_tests *Ipc* on $sn ranks sharing GPU 0"
      piece=$(HIR_SHARE_GPUS=1 timeout 900 "${mpirun_cmd[@]}" -x HIR_SHARE_GPUS -np "$sn" \
        "$gpu_tests" --gtest_color=no '--gtest_filter=*Ipc*' 2>&1)
      rc=$?
      printf '%s\n' "$piece" >>"$log"
      read -r p f s <<<"$(gtest_counts "$piece")"
      if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
      record "gpu tests *Ipc* np=$sn shared" "$p" "$f" "$s" "exit $rc"
    fi
    hir="$build/bin/hir"
    if [ "$run_examples" = 1 ] && [ -x "$hir" ]; then
      log="$out/examples.log"
      for mode in eager graph; do
        p=0 f=0 s=0 failures="" skipped=""
        for ex in "$root"/ir_examples/*_ipc.json; do
          [ -e "$ex" ] || continue
          name=$(basename "$ex" .json)
          want=0 flags=()
          if [ "$mode" = graph ]; then
            flags=(--graph --iters 5)
            want=$(graph_status "$ex" "$sn")
          fi
          log_header "$log" "$name on $sn ranks sharing GPU 0${flags:+, ${flags[*]}}"
          piece=$(HIR_SHARE_GPUS=1 timeout 600 "$hir" run "$ex" --np "$sn" --device cuda \
            "${flags[@]}" 2>&1)
          rc=$?
          printf '%s\n' "$piece" >>"$log"
          echo "exit status: $rc (expected $want)" >>"$log"
          if grep -q "both run on the GPU at PCI" <<<"$piece"; then
            s=$((s + 1)) skipped+=" $name"  # it has nccl communications too
          elif [ "$rc" = "$want" ]; then p=$((p + 1)); else f=$((f + 1)); failures+=" $name"; fi
        done
        label="ipc examples np=$sn shared"
        [ "$mode" = graph ] && label="ipc graph examples np=$sn sh"
        record "$label" "$p" "$f" "$s" \
          "${failures:+failed:$failures; }${skipped:+with nccl, skipped:$skipped}"
      done
      # An nccl program on ranks sharing the GPU: refused at load on every
      # rank (exit 3), naming the two ranks and the GPU, before NCCL's own
      # "Duplicate GPU detected", which names neither.
      log_header "$log" "allreduce.json (nccl) on $sn ranks sharing GPU 0: refused"
      piece=$(HIR_SHARE_GPUS=1 timeout 300 "$hir" run "$root/ir_examples/allreduce.json" \
        --np "$sn" --device cuda 2>&1)
      rc=$?
      printf '%s\n' "$piece" >>"$log"
      if [ "$rc" = 3 ] && grep -q "nccl: ranks 0 and 1 both run on the GPU at PCI" <<<"$piece"
      then record "nccl refuses np=$sn shared" 1 0 0
      else record "nccl refuses np=$sn shared" 0 1 0 "exit $rc, see examples.log"; fi
    fi
  done
fi

# ------------------------------------------- point-to-point: ipc vs nccl
# Variants nccl, ipc-put, ipc-get and raw (plain copies into the peer's
# IPC-mapped buffer: the hardware's speed); "x nccl" = nccl time / its time.
# Then the latency again with HIR_CUDA_KERNEL_COPY_MAX=0 (small copies by the
# copy engine instead of a kernel), for that run only.
bench_lines=()
p2p="$build/bin/hir_p2p_bench"
# p2p_lines CSV LABEL TESTS: summary lines (every variant) for the rows of CSV
# whose "test:bytes" is one of the space-separated TESTS.
p2p_lines() {
  local csv=$1 label=$2 tests=$3 base world test bytes variant us gbps ratio
  [ -s "$csv" ] || return 0
  base=$(head -n1 "$csv" | sed -n 's/.*ratio_to_//p')
  while IFS=, read -r world test bytes variant us gbps ratio; do
    case " $tests " in
      *" $test:$bytes "*)
        bench_lines+=("$(printf 'np=%-2s p2p %-9s %11s B  %-8s %9.2f us %7.1f GB/s  x %s %.3f%s' \
          "$world" "$test" "$bytes" "$variant" "$us" "$gbps" "${base:-base}" "$ratio" "$label")") ;;
    esac
  done < <(tail -n +2 "$csv")
}
[ "$run_bench" = 1 ] && : >"$out/bench.log"
if [ "$run_bench" = 1 ] && [ "$gpus" -ge 2 ]; then
  log="$out/bench.log"
  rm -f "$out/p2p.csv"
  if [ ! -x "$p2p" ]; then
    record "p2p bench" - 1 - "not built"
  else
    log_header "$log" "hir_p2p_bench on 2 ranks"
    timeout 900 "${mpirun_cmd[@]}" -np 2 "$p2p" --device cuda --min 1K --max 1G --factor 4 \
      --csv "$out/p2p.csv" >>"$log" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then record "p2p bench np=2" 1 0 0 ""; else
      record "p2p bench np=2" 0 1 0 "exit $rc"; fi
    log_header "$log" "hir_p2p_bench on 2 ranks, HIR_CUDA_KERNEL_COPY_MAX=0 (copy engine only)"
    ce_csv=$(mktemp)
    HIR_CUDA_KERNEL_COPY_MAX=0 timeout 300 "${mpirun_cmd[@]}" -x HIR_CUDA_KERNEL_COPY_MAX -np 2 \
      "$p2p" --device cuda --min 1K --max 1K --factor 4 --csv "$ce_csv" >>"$log" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then record "p2p bench np=2 copy-engine" 1 0 0 ""; else
      record "p2p bench np=2 copy-engine" 0 1 0 "exit $rc"; fi
    # Sends and recvs eager only up to 16 KiB, put above (the default until
    # session 17: HIR_IPC_EAGER_SEND_MAX=0), beside the default run's eager up
    # to 16 MiB: what chooses HIR_IPC_EAGER_SEND_MAX (docs/ipc.md, "Mid sizes").
    log_header "$log" "hir_p2p_bench on 2 ranks, HIR_IPC_EAGER_SEND_MAX=0 (put above 16 KiB)"
    put_csv=$(mktemp)
    HIR_IPC_EAGER_SEND_MAX=0 timeout 600 "${mpirun_cmd[@]}" -x HIR_IPC_EAGER_SEND_MAX -np 2 \
      "$p2p" --device cuda --min 4K --max 16M --factor 4 --csv "$put_csv" >>"$log" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then record "p2p bench np=2 put>16K" 1 0 0 ""; else
      record "p2p bench np=2 put>16K" 0 1 0 "exit $rc"; fi
    p2p_lines "$out/p2p.csv" "" \
      'latency:8 bandwidth:16384 bandwidth:1048576 bandwidth:16777216 bandwidth:268435456 bandwidth:1073741824'
    p2p_lines "$ce_csv" "  (copy engine only)" 'latency:8'
    p2p_lines "$put_csv" "  (HIR_IPC_EAGER_SEND_MAX=0)" \
      'bandwidth:65536 bandwidth:1048576 bandwidth:16777216'
    # Kept in p2p.csv as tests "bandwidth_put16K" and "latency_put16K" (its
    # own 8 B latency run: NCCL's varies by 30% from run to run).
    if [ -s "$put_csv" ] && [ -s "$out/p2p.csv" ]; then
      tail -n +2 "$put_csv" |
        sed 's/^\([0-9]*\),\(bandwidth\|latency\),/\1,\2_put16K,/' >>"$out/p2p.csv"
    fi
    rm -f "$put_csv"
    # Kept in p2p.csv as test "latency_ce".
    if [ -s "$ce_csv" ] && [ -s "$out/p2p.csv" ]; then
      tail -n +2 "$ce_csv" | sed 's/^\([0-9]*\),latency,/\1,latency_ce,/' >>"$out/p2p.csv"
    fi
    rm -f "$ce_csv"
  fi
fi

# -------------------------------------------------------------- benchmark
if [ "$run_bench" = 1 ]; then
  log="$out/bench.log"  # emptied before the p2p bench, which writes first
  csv="$out/bench.csv"
  rm -f "$csv"
  bench="$build/bin/hir_comm_bench"
  if [ ! -x "$bench" ]; then
    record "comm bench" - 1 - "not built (bench/ needs Google Benchmark)"
  elif [ "$gpus" -lt 2 ]; then
    record "comm bench" - - - "needs 2 GPUs: skipped"
  else
    for n in "${sizes[@]}"; do
      [ "$n" -ge 2 ] || continue
      log_header "$log" "hir_comm_bench on $n ranks"
      part="$out/.bench-$n.csv"
      # shellcheck disable=SC2086
      timeout 1800 "${mpirun_cmd[@]}" -np "$n" "$bench" --csv "$part" $bench_args >>"$log" 2>&1
      rc=$?
      if [ -s "$part" ]; then
        if [ -s "$csv" ]; then tail -n +2 "$part" >>"$csv"; else cat "$part" >"$csv"; fi
      fi
      rm -f "$part"
      if [ "$rc" = 0 ]; then record "comm bench np=$n" 1 0 0 ""; else
        record "comm bench np=$n" 0 1 0 "exit $rc"; fi
    done
    # ipc's collectives against NCCL's, through the evaluator; the table
    # goes into bench.log (the device tool brings back 8 files at most).
    log_header "$log" "scripts/ipc-collectives-bench.sh on $gpus ranks"
    ipc_out=$(mktemp -d)
    OUT="$ipc_out" timeout 1800 bash scripts/ipc-collectives-bench.sh --build "$build" \
      >>"$log" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then record "ipc collectives bench np=$gpus" 1 0 0 ""; else
      record "ipc collectives bench np=$gpus" 0 1 0 "exit $rc"; fi
    if [ -s "$ipc_out/ipc-collectives.txt" ]; then
      while IFS='|' read -r _ op mode size nccl_us ipc_us ratio nccl_bus ipc_bus _; do
        case "$(echo "$op:$mode:$size" | tr -d ' ')" in
          allreduce:eager:8|allreduce:graph:8|allreduce:eager:1073741824|\
          allgather:eager:1073741824|alltoall:eager:1073741824|reduce_scatter:eager:1073741824)
            bench_lines+=("ipc $(echo "$op $mode $size B: nccl $nccl_us us, ipc $ipc_us us, ipc/nccl $ratio; busbw $nccl_bus / $ipc_bus GB/s" | tr -s ' ')") ;;
        esac
      done <"$ipc_out/ipc-collectives.txt"
    fi
    rm -rf "$ipc_out"
    # Key ratios: hir time / raw NCCL time, and busbw, at a few sizes.
    if [ -s "$csv" ]; then
      # shellcheck disable=SC2034  # every CSV column is named, a few are used
      while IFS=, read -r world op dtype bytes count raw_us hir_us raw_alg raw_bus hir_alg \
          hir_bus ratio raw_enq hir_enq post _graph _symmetric; do
        case "$op:$bytes" in
          allreduce:8|allreduce:16777216|allreduce:1073741824|allgather:1073741824|\
          reduce_scatter:1073741824|sendrecv:8|sendrecv:1073741824|alltoall:1073741824)
            bench_lines+=("$(printf 'np=%-2s %-15s %11s B  raw %9.2f us %7.1f GB/s | hir %9.2f us %7.1f GB/s | hir/raw %.3f | post %.2f us' \
              "$world" "$op" "$bytes" "$raw_us" "$raw_bus" "$hir_us" "$hir_bus" "$ratio" "$post")")
            ;;
        esac
      done < <(tail -n +2 "$csv")
    fi
  fi
fi

# ---------------------------------------------------------------- summary
{
  echo
  echo "================================ summary ================================"
  printf '%-26s %6s %6s %6s  %s\n' "step" "pass" "fail" "skip" "note"
  for r in "${rows[@]}"; do echo "$r"; done
  if [ "${#bench_lines[@]}" -gt 0 ]; then
    echo
    echo "benchmark (median; busbw in GB/s; full tables in bench.log, bench.csv, p2p.csv):"
    for b in "${bench_lines[@]}"; do echo "  $b"; done
  fi
  echo
  if [ "$failed" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
  echo "logs: $out"
} | tee -a "$summary"
exit "$failed"
