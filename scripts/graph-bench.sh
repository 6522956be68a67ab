#!/usr/bin/env bash
# Small operations with and without CUDA graphs, side by side in one run on a
# GPU machine (issue: CUDA graphs), at 1, 2 and all GPUs:
#   raw NCCL (hir_comm_bench's raw loop, 100 ops), eager, captured in a
#   graph, and captured with its buffers in NCCL symmetric windows
#   (nccl-tests -G and -R 2 -G);
#   hir's nccl backend (the same loop of posts), the same three ways;
#   hir run (the whole evaluator, a loop of 100 ops per run,
#   bench/graph/*.json), eager, --graph --symmetric-memory off, and --graph
#   --symmetric-memory on; the median of --reps runs of `hir run`, each the
#   slowest rank's mean over 20 timed runs.
# Sizes: allreduce 8 B, allgather 256 B in all, send/recv 8 B (hir run:
# a ping-pong, one way; comm_bench: a ring exchange, as nccl-tests).
# Then ipc's ping-pong through hir run, protocols eager and put, each eager
# and --graph, at 2 ranks (on a machine of 1 GPU, both ranks on it under
# an MPS daemon, HIR_SHARE_GPUS=1; left out where MPS is missing).
#
#   bash scripts/graph-bench.sh [--build DIR] [--reps N] [--np N] [--k N]
#                               [--nccl-tests DIR]
#
# --np N: only that world size (default: 1, 2 and all GPUs).
# --k N: operations per `hir run` run (default 100); each run also fills
#   its input once and checks its output once, which --k amortizes.
# --nccl-tests DIR: also run nccl-tests' all_reduce_perf, all_gather_perf
#   and sendrecv_perf from DIR (built with MPI=1) at the same sizes, one
#   process per GPU, eager, -G 10 and -R 2 -G 10 (20 warm-up and 200 timed
#   iterations, out-of-place time): the "nccl-tests" columns.
#
# Needs a build with CUDA (scripts/gpu-check.sh makes build-gpu). Writes two
# files under ${OUT:-gpu-out} (the device tool brings back few): graph-bench.log
# (every command's output, then the CSV of every figure) and graph-bench.txt
# (the table, also printed last). NCCL_NVLS_ENABLE=0 always.
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
build=${BUILD_DIR:-$root/build-gpu}
reps=5 only_np="" k=100 nccl_tests=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=$1 ;;
    --reps) shift; reps=$1 ;;
    --np) shift; only_np=$1 ;;
    --k) shift; k=$1 ;;
    --nccl-tests) shift; nccl_tests=$1 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "graph-bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
export NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
log="$out/graph-bench.log"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
csv="$tmp/graph-bench.csv"
: >"$log"
echo "np,what,op,bytes,mode,us_per_op,capture_ms" >"$csv"
hir="$build/bin/hir"
bench="$build/bin/hir_comm_bench"
for b in "$hir" "$bench"; do
  [ -x "$b" ] || { echo "graph-bench: $b is not built (run scripts/gpu-check.sh first)" >&2; exit 1; }
done

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
sizes=()
for n in 1 2 "${gpus:-0}"; do
  if [ "$n" -lt 1 ] || [ "$n" -gt "${gpus:-0}" ]; then continue; fi
  case " ${sizes[*]:-} " in *" $n "*) ;; *) sizes+=("$n") ;; esac
done
[ "${#sizes[@]}" -gt 0 ] || { echo "graph-bench: no GPU" >&2; exit 1; }
for v in "--reps $reps" "--k $k"; do
  case ${v#* } in
    ''|*[!0-9]*|0) echo "graph-bench: ${v% *} expects a positive integer, got '${v#* }'" >&2; exit 2 ;;
  esac
done
if [ -n "$only_np" ]; then
  [ "$only_np" -ge 1 ] && [ "$only_np" -le "${gpus:-0}" ] ||
    { echo "graph-bench: --np $only_np, but this machine has ${gpus:-0} GPU(s)" >&2; exit 2; }
  sizes=("$only_np")
fi
mpirun_cmd=(mpirun --allow-run-as-root -x NCCL_NVLS_ENABLE --bind-to none)
status=0

for n in "${sizes[@]}"; do
  # Raw NCCL and the backend's posts: eager, in a graph, and in a graph with
  # the buffers in NCCL symmetric windows (nccl-tests -R 2 -G).
  for variant in "0 0 eager" "1 0 graph" "1 1 graph+sym"; do
    read -r g sym mode <<<"$variant"
    part="$tmp/comm-$mode-np$n.csv"
    printf '\n===== hir_comm_bench np=%s --graph %s --symmetric %s =====\n' "$n" "$g" "$sym" >>"$log"
    if timeout 600 "${mpirun_cmd[@]}" -np "$n" "$bench" --ops allreduce,allgather,sendrecv \
        --min 8 --max 8K --factor 32 --iters 100 --reps "$reps" --api-costs 0 --graph "$g" \
        --symmetric "$sym" --csv "$part" >>"$log" 2>&1; then
      python3 - "$part" "$n" "$mode" >>"$csv" <<'PY'
import csv, sys
path, n, mode = sys.argv[1], sys.argv[2], sys.argv[3]
for r in csv.DictReader(open(path)):
    if (r["op"], r["bytes"]) in {("allreduce", "8"), ("allgather", "256"), ("sendrecv", "8")}:
        print(f"{n},raw nccl,{r['op']},{r['bytes']},{mode},{float(r['raw_us']):.3f},")
        print(f"{n},hir backend,{r['op']},{r['bytes']},{mode},{float(r['hir_us']):.3f},")
PY
    else
      echo "graph-bench: hir_comm_bench np=$n $mode failed (see graph-bench.log)" >&2
      status=1
    fi
  done
  # nccl-tests, when given: the same sizes, eager, -G 10 and -R 2 -G 10.
  if [ -n "$nccl_tests" ]; then
    for t in "all_reduce_perf allreduce 8" "all_gather_perf allgather 256" "sendrecv_perf sendrecv 8"; do
      read -r exe op nbytes <<<"$t"
      [ "$op" = sendrecv ] && [ "$n" -lt 2 ] && continue
      for variant in "eager" "graph -G 10" "graph+sym -R 2 -G 10"; do
        read -r mode flags <<<"$variant"
        printf '\n===== nccl-tests %s np=%s %s =====\n' "$exe" "$n" "$mode" >>"$log"
        # shellcheck disable=SC2086  # flags are words
        if piece=$(timeout 120 "${mpirun_cmd[@]}" -np "$n" "$nccl_tests/$exe" -b "$nbytes" \
            -e "$nbytes" -g 1 -w 20 -n 200 -c 0 $flags 2>&1); then
          printf '%s\n' "$piece" >>"$log"
          # The out-of-place time (us) of the row of that size.
          us=$(awk -v b="$nbytes" '$1 == b && NF >= 8 { print $6; exit }' <<<"$piece")
          [ -n "$us" ] && echo "$n,nccl-tests,$op,$nbytes,$mode,$us," >>"$csv"
        else
          printf '%s\n' "$piece" >>"$log"
          echo "graph-bench: nccl-tests $exe np=$n $mode failed (see graph-bench.log)" >&2
          status=1
        fi
      done
    done
  fi
  # The evaluator: hir run, eager and --graph.
  for prog in allreduce allgather pingpong; do
    file="$root/bench/graph/${prog}_loop.json"
    case $prog in
      allreduce) params=(--param n=2); op=allreduce; bytes=8; per=$k ;;
      allgather) params=(--param "n=$((64 / n))"); op=allgather; bytes=256; per=$k ;;
      pingpong) params=(--param n=2); op=sendrecv; bytes=8; per=$((2 * k)) ;;  # one way
    esac
    if [ "$prog" = pingpong ] && [ "$n" -lt 2 ]; then continue; fi
    if [ "$prog" = allgather ] && [ $((64 % n)) != 0 ]; then continue; fi
    for mode in eager graph graph+sym; do
      case $mode in
        eager) flag=(--symmetric-memory off) ;;
        graph) flag=(--graph --symmetric-memory off) ;;
        graph+sym) flag=(--graph --symmetric-memory on) ;;
      esac
      times=()
      for ((r = 0; r < reps; r++)); do
        json="$tmp/hir-run.json"
        printf '\n===== hir run %s np=%s %s (%s) =====\n' "$prog" "$n" "$mode" "$r" >>"$log"
        if timeout 300 "$hir" run "$file" --np "$n" --device cuda "${params[@]}" --param "k=$k" \
            --iters 20 --warmup 3 --no-progress "${flag[@]}" --json "$json" >>"$log" 2>&1; then
          times+=("$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); g=d.get("graph") or {}; print(d["seconds_per_run"]["max"], g.get("capture_seconds", 0))' "$json")")
        else
          echo "graph-bench: hir run $prog np=$n $mode failed (see graph-bench.log)" >&2
          status=1
        fi
      done
      [ "${#times[@]}" -gt 0 ] || continue
      printf '%s\n' "${times[@]}" | python3 -c '
import statistics, sys
n, op, nbytes, mode, per = sys.argv[1:6]
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
us = statistics.median(r[0] for r in rows) * 1e6 / int(per)
cap = statistics.median(r[1] for r in rows) * 1e3
print(f"{n},hir run,{op},{nbytes},{mode},{us:.3f},{cap:.3f}" if mode != "eager" else f"{n},hir run,{op},{nbytes},{mode},{us:.3f},")
' "$n" "$op" "$bytes" "$mode" "$per" >>"$csv"
    done
  done
done

# ipc's ping-pong through hir run, eager and --graph (its message numbers
# counted on the device), at 2 ranks: on 2 GPUs, or on a machine of one GPU
# with both ranks sharing it (HIR_SHARE_GPUS=1: copies within one GPU,
# which says nothing of NVLink, only of the protocol's own cost).
# Both protocols of an 8-byte message: eager (what auto picks at that size)
# and put (the program with "protocol": "put" on every message).
# Sharing one GPU, the ranks run under an MPS daemon (scripts/mps-env.sh):
# without one they take turns in time slices of milliseconds, which is all
# the ping-pong would then measure (4.5 s per run of k = 1000 on an H100),
# so without MPS the part is left out.
ipc_np=2 shared="" ipc_protos="eager put"
if [ "${gpus:-0}" -lt 2 ]; then
  shared=" (2 ranks sharing 1 GPU)"
  # shellcheck source=mps-env.sh
  . "$root/scripts/mps-env.sh"
  if ! mps_start "$tmp"; then
    echo "graph-bench: no MPS daemon on this machine of one GPU: ipc's ping-pong left out" >&2
    ipc_protos=""
  fi
fi
sed 's/"backend": "ipc"/"backend": "ipc", "protocol": "put"/' \
  "$root/bench/graph/pingpong_ipc_loop.json" >"$tmp/pingpong_ipc_put.json"
for proto in $ipc_protos; do
  prog="$root/bench/graph/pingpong_ipc_loop.json"
  [ "$proto" = put ] && prog="$tmp/pingpong_ipc_put.json"
  for mode in eager graph; do
    flag=()
    [ "$mode" = graph ] && flag=(--graph)
    times=()
    for ((r = 0; r < reps; r++)); do
      json="$tmp/hir-run.json"
      printf '\n===== hir run pingpong_ipc %s np=%s %s%s (%s) =====\n' "$proto" "$ipc_np" "$mode" "$shared" "$r" >>"$log"
      if timeout 300 "$hir" run "$prog" --np "$ipc_np" \
          --device cuda --param n=2 --param "k=$k" --iters 20 --warmup 3 --no-progress \
          "${flag[@]}" --json "$json" >>"$log" 2>&1; then
        times+=("$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["seconds_per_run"]["max"])' "$json")")
      else
        echo "graph-bench: hir run pingpong_ipc $proto $mode failed (see graph-bench.log)" >&2
        status=1
      fi
    done
    [ "${#times[@]}" -gt 0 ] || continue
    printf '%s\n' "${times[@]}" | python3 -c '
import statistics, sys
mode, proto, shared = sys.argv[1], sys.argv[2], sys.argv[3]
us = statistics.median(float(l) for l in sys.stdin if l.strip()) * 1e6 / (2 * int(sys.argv[4]))
print(f"2,hir run ipc {proto}{shared},sendrecv,8,{mode},{us:.3f},")
' "$mode" "$proto" "${shared:+ shared}" "$k" >>"$csv"
  done
done
if [ -n "$shared" ] && [ -n "$ipc_protos" ]; then mps_stop; fi
unset HIR_SHARE_GPUS

# The table: one row per (np, op), us per operation.
python3 - "$csv" >"$out/graph-bench.txt" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
key = lambda r: (int(r["np"]), r["op"])
short = {"hir run": "hir run", "hir backend": "backend", "raw nccl": "raw", "nccl-tests": "n-tests"}
cols = [(w, m) for w in ("hir run", "hir backend", "raw nccl", "nccl-tests")
        for m in ("eager", "graph", "graph+sym")]
print("# us per operation (medians); sendrecv: hir run = ping-pong one way, the others a ring exchange")
print(f"{'np':>3} {'op':<10} {'bytes':>6} " + " ".join(f"{short[w]+' '+m:>17}" for w, m in cols) +
      f" {'capture ms':>10} {'best graph/base':>15}")
print("# best graph/base: hir run's best graph time over nccl-tests' best graph time (raw nccl's without --nccl-tests)")
for k in sorted({key(r) for r in rows}):
    sel = [r for r in rows if key(r) == k]
    val = {(r["what"], r["mode"]): float(r["us_per_op"]) for r in sel}
    cap = next((r["capture_ms"] for r in sel if r["capture_ms"]), "")
    b = sel[0]["bytes"]
    cells = " ".join(f"{val[c]:>17.2f}" if c in val else f"{'-':>17}" for c in cols)
    best = lambda w: min((val[(w, m)] for m in ("graph", "graph+sym") if (w, m) in val),
                         default=None)
    base = best("nccl-tests") or best("raw nccl")
    ratio = best("hir run") / base if best("hir run") and base else None
    print(f"{k[0]:>3} {k[1]:<10} {b:>6} {cells} {cap:>10} {ratio if ratio is None else round(ratio, 3)!s:>15}")
PY
# ipc's rows apart: hir run's ping-pong, one way.
python3 - "$csv" >>"$out/graph-bench.txt" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["what"].startswith("hir run ipc")]
if rows:
    print("# ipc ping-pong through hir run, us one way (medians)")
    for r in rows:
        print(f"{r['np']:>3} {r['what']:<30} {r['bytes']:>6} B {r['mode']:<6} {float(r['us_per_op']):>8.2f}")
PY
{ printf '\n===== every figure (CSV) =====\n'; cat "$csv"; } >>"$log"
cat "$out/graph-bench.txt"
exit $status
