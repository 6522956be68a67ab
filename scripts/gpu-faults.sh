#!/usr/bin/env bash
# Bounded ending under faults: runs `hir run --np 2 --timeout T` on the fault
# programs of tests/tools/data/faults/ and checks that every job ends with a
# non-zero exit code within T + 5 s, and that the timeout report names what
# each rank waited for (pending communications, flight recorder). The time
# of a job counts from its launch, less the launch itself: the time of
# ir_examples/allreduce.json, which completes at once, measured first.
#
#   bash scripts/gpu-faults.sh [BUILD_DIR] [--device cuda|host] [--timeout S]
#                              [--out DIR] [--np N] [--cases A,B,..]
#                              [--baseline PROG]
#
# BUILD_DIR defaults to build/ (it needs bin/hir). --device cuda (the
# default) needs 2 GPUs; --device host runs anywhere (CI, no GPU), with the
# mpi backend where the programs say "auto". Results go to --out, else $OUT,
# else gpu-out/: faults.txt (the table, also printed) and faults-<case>.log
# (each job's output). Exit status: 0 when every case passed. --cases runs
# only the cases named; --baseline times another correct program than
# ir_examples/allreduce.json for the launch (one without nccl when the ranks
# share a GPU: HIR_SHARE_GPUS=1 with the ipc cases on a machine of 1 GPU).
#
# The cases:
#   wait_cycle          every rank host-waits on a recv before posting its send (auto: nccl /
#                       mpi; --no-schedule-check, whose deadlock rule would refuse it)
#   wait_cycle_ipc      the same through ipc (semaphore waits)
#   skipped_collective  rank 1 leaves a loop of allreduces one short (--no-schedule-check)
#   skipped_collective_ipc  the same through ipc's allreduce (its reduction waits on a semaphore)
#   ipc_silent_peer     an ipc recv whose sender never sends (--no-schedule-check)
#   late_loop           a long loop of small allreduces queued behind a stuck recv
#   killed_rank         rank 1 is killed (kill -9) while both wait in allreduces; the
#                       time is counted from the kill
#
# NVLink multicast is never used: NCCL_NVLS_ENABLE=0 is exported.
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=""
device=cuda
timeout_s=10
np=2
cases=""
baseline=$root/ir_examples/allreduce.json
out=${OUT:-$root/gpu-out}
while [ $# -gt 0 ]; do
  case "$1" in
    --device) shift; device=${1:-cuda} ;;
    --timeout) shift; timeout_s=${1:-10} ;;
    --out) shift; out=${1:-$out} ;;
    --np) shift; np=${1:-2} ;;
    --cases) shift; cases=${1:-} ;;
    --baseline) shift; baseline=${1:-$baseline} ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    -*) echo "gpu-faults: unknown option $1" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
build=${build:-$root/build}
hir="$build/bin/hir"
data="$root/tests/tools/data/faults"
if [ ! -x "$hir" ]; then
  echo "gpu-faults: $hir not found (build first, or pass the build directory)" >&2
  exit 2
fi
case "$timeout_s" in
  ''|*[!0-9]*) echo "gpu-faults: --timeout takes whole seconds, got '$timeout_s'" >&2; exit 2 ;;
esac

export NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$out"
table="$out/faults.txt"
failed=0
rows=()

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
within() { awk -v t="$1" -v b="$2" 'BEGIN { exit !(t <= b) }'; }

# The pid of rank R of the job whose ranks run PROGRAM (the ranks' command
# lines name it without --np; mpirun sets OMPI_COMM_WORLD_RANK).
rank_pid() {
  local program=$1 rank=$2 pid
  for pid in $(pgrep -f -- "$program"); do
    grep -qa -- '--np' "/proc/$pid/cmdline" 2>/dev/null && continue
    grep -qa 'mpirun\|prterun' "/proc/$pid/cmdline" 2>/dev/null && continue
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# run_case NAME PROGRAM [HIR FLAGS...]: one job, timed; a report is expected.
# For killed_rank, rank 1 is killed once the ranks run, and the time counts
# from the kill.
run_case() {
  local name=$1 program="$data/$2"
  shift 2
  if [ -n "$cases" ]; then
    case ",$cases," in *",$name,"*) ;; *) return 0 ;; esac
  fi
  local log="$out/faults-$name.log" rc t0 t1 secs note="" report=no pid=""
  : >"$log"
  t0=$(now)
  timeout $((timeout_s * 3 + 120)) "$hir" run "$program" --np "$np" --device "$device" \
    --timeout "$timeout_s" "$@" >>"$log" 2>&1 &
  local job=$!
  if [ "$name" = killed_rank ]; then
    for _ in $(seq 1 200); do  # the ranks start (20 s at most)
      pid=$(rank_pid "$program" 1) && break
      sleep 0.1
    done
    sleep 1
    if [ -n "$pid" ]; then
      kill -9 "$pid" 2>/dev/null
      t0=$(now)
      note="killed rank 1 (pid $pid)"
    else
      note="rank 1 not found: not killed"
    fi
  fi
  wait "$job"
  rc=$?
  t1=$(now)
  secs=$(elapsed "$t0" "$t1")
  grep -q "flight recorder" "$log" && report=yes
  local ok=1
  [ "$rc" = 0 ] && ok=0
  [ "$rc" = 124 ] && { ok=0; note="${note:+$note; }hung: ended by timeout(1)"; }
  within "$(elapsed "$launch" "$secs")" "$bound" || within "$secs" "$bound" || ok=0
  if [ "$name" != killed_rank ] && [ "$report" = no ]; then ok=0; note="${note:+$note; }no report"; fi
  [ "$name" = killed_rank ] && [ -z "$pid" ] && ok=0
  local net
  net=$(elapsed "$launch" "$secs")
  [ "$name" = killed_rank ] && net=$secs  # counted from the kill
  local verdict=PASS
  [ "$ok" = 1 ] || { verdict=FAIL; failed=1; }
  rows+=("$(printf '%-20s %-6s %5s %8s %8s %6s  %s' "$name" "$verdict" "$rc" "$secs" "$net" \
    "$report" "$note")")
  echo "$(printf '%-20s %s: exit %s after %s s, %s s after the launch (bound %s s)%s' "$name" \
    "$verdict" "$rc" "$secs" "$net" "$bound" "${note:+; $note}")"
}

bound=$((timeout_s + 5))
t0=$(now)
"$hir" run "$baseline" --np "$np" --device "$device" >"$out/faults-launch.log" 2>&1
launch_rc=$?
launch=$(elapsed "$t0" "$(now)")
{
  echo "gpu-faults on $(hostname) at $(date '+%F %T'): --device $device --np $np --timeout $timeout_s"
  echo "(bound: exit non-zero within timeout + 5 = $bound s after the launch, which took $launch s"
  echo " for $(basename "$baseline"), exit $launch_rc)"
  [ "$device" = cuda ] && { nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"; }
} | tee "$table"
if [ "$launch_rc" != 0 ]; then
  echo "gpu-faults: the launch of a correct program failed (see $out/faults-launch.log)" | tee -a "$table"
  exit 1
fi

run_case wait_cycle wait_cycle.json --no-schedule-check
run_case wait_cycle_ipc wait_cycle_ipc.json --no-schedule-check
run_case skipped_collective skipped_collective.json --no-schedule-check
run_case skipped_collective_ipc skipped_collective_ipc.json --no-schedule-check
run_case ipc_silent_peer ipc_silent_peer.json --no-schedule-check
run_case late_loop late_loop.json --no-schedule-check
run_case killed_rank killed_rank.json

{
  echo
  printf '%-20s %-6s %5s %8s %8s %6s  %s\n' "case" "result" "exit" "seconds" "-launch" "report" "note"
  for r in "${rows[@]}"; do echo "$r"; done
  echo
  if [ "$failed" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
  echo "logs: $out/faults-*.log"
} | tee -a "$table"
exit "$failed"
