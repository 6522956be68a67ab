#!/usr/bin/env bash
# ipc's collectives against NCCL's, side by side in one run, through the
# evaluator: `hir sweep` of each program of bench/ipc/ (a loop of one
# collective) on backend ipc and on backend nccl, every size from -b to -e,
# eager and (up to --graph-max) with --graph; one table of times, bus
# bandwidths and ratios (ipc / nccl time; ipc / nccl busbw) at the end.
# ipc runs twice up to --eager-sweep-max: as it is (auto: chunks up to
# HIR_IPC_EAGER_MAX go eager) and with eager off (HIR_IPC_EAGER_MAX=0:
# put and get), the "ipc put" column, which is what chooses the limit.
# --eager-max SIZE runs ipc a third time, every size, with
# HIR_IPC_EAGER_MAX=SIZE (chunks up to SIZE eager): the "ipc eager" column,
# which says what raising the limit would gain (swept up to --np x SIZE:
# above, no chunk is that small). --reps-per-run N sets the programs'
# "reps" (default 20), the collectives of one run: a run's fill and check
# weigh less in each collective's time with more.
#
#   bash scripts/ipc-collectives-bench.sh [--build DIR] [--np N] [-b SIZE] [-e SIZE]
#        [-f N] [-n N] [-w N] [--graph-max SIZE] [--eager-sweep-max SIZE]
#        [--eager-max SIZE] [--reps-per-run N] [--ops a,b,...] [--device host] [--mps]
#        [--plots]
#
# Defaults: build-gpu, as many ranks as GPUs (at least 2), 8 B to 1 GiB by
# 4x, 20 timed and 5 warm-up runs per size, graphs and ipc put up to 64 KiB
# (--eager-sweep-max 0: no ipc put sweep; --graph-max 0: no graphs). On a
# machine of one GPU it runs 2 ranks sharing it (HIR_SHARE_GPUS=1), ipc only
# (NCCL refuses a shared GPU): a smoke test of the script, whose times say
# nothing about two GPUs; --mps runs them under an MPS daemon
# (scripts/mps-env.sh), so that they share the SMs instead of taking turns
# in time slices, and the times compare ipc's protocols. Writes ${OUT:-ipc-bench-out}/ipc-collectives.txt
# (the table) and ipc-collectives.csv (every row of every sweep); needs
# NCCL_NVLS_ENABLE=0 (exported here). --device host (a check of the script
# itself, on a machine without GPUs) compares with mpi instead, eager only.
# --plots: also ipc-collectives-OP.png per op (scripts/plot_sweep.py, needs
# matplotlib): busbw and time against size, one line per backend and mode.
set -uo pipefail
cd "$(dirname "$0")/.."

build=build-gpu np="" b=8 e=1G f=4 n=20 w=5 graph_max=64K eager_sweep_max=64K device=cuda
ops=allreduce,allgather,reduce_scatter,broadcast,alltoall plots=0 eager_max="" mps=0 reps=
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=$1 ;;
    --np) shift; np=$1 ;;
    -b) shift; b=$1 ;;
    -e) shift; e=$1 ;;
    -f) shift; f=$1 ;;
    -n) shift; n=$1 ;;
    -w) shift; w=$1 ;;
    --graph-max) shift; graph_max=$1 ;;
    --eager-sweep-max) shift; eager_sweep_max=$1 ;;
    --eager-max) shift; eager_max=$1 ;;
    --mps) mps=1 ;;
    --reps-per-run) shift; reps=$1 ;;
    --ops) shift; ops=$1 ;;
    --device) shift; device=$1 ;;
    --plots) plots=1 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "ipc-collectives-bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
export NCCL_NVLS_ENABLE=0
out=${OUT:-ipc-bench-out}
mkdir -p "$out"
hir="$build/bin/hir"
[ -x "$hir" ] || { echo "ipc-collectives-bench: no $hir (build with CUDA first)" >&2; exit 2; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ -n "$np" ] || np=$(( gpus >= 2 ? gpus : 2 ))
baseline=nccl modes="eager graph"
[ "$device" = host ] && baseline=mpi modes=eager
backends="ipc ipc_put $baseline"
[ "$eager_sweep_max" = 0 ] && backends="ipc $baseline"
if [ "$device" = cuda ] && [ "$gpus" -lt "$np" ]; then
  export HIR_SHARE_GPUS=1
  backends="ipc ipc_put"
  [ "$eager_sweep_max" = 0 ] && backends=ipc
  echo "ipc-collectives-bench: $gpus GPU(s) for $np ranks: ranks share GPUs, ipc only" >&2
fi
# The smaller of two sizes such as 64K and 1G (hir sweep's suffixes), and a
# size in bytes (what the HIR_IPC_* variables take).
sizes() {
  python3 -c '
import sys
def b(v):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(v[:-1]) * m[v[-1]] if v[-1] in m else int(v)
print(min(sys.argv[2:], key=b) if sys.argv[1] == "min" else b(sys.argv[2]))' "$@"
}
smaller() { sizes min "$1" "$2"; }
if [ -n "$eager_max" ]; then
  eager_max=$(sizes bytes "$eager_max") ||
    { echo "ipc-collectives-bench: --eager-max takes a size such as 4M" >&2; exit 2; }
  backends="$backends ipc_eager"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$mps" = 1 ]; then
  [ "$device" = cuda ] && [ "$gpus" -ge 1 ] ||
    { echo "ipc-collectives-bench: --mps needs a GPU" >&2; exit 2; }
  # shellcheck source=mps-env.sh
  . scripts/mps-env.sh
  mps_start "$tmp" || exit 2
  # More than 2 clients need fewer connections each (mps-env.sh).
  [ "$np" -gt 2 ] && export CUDA_DEVICE_MAX_CONNECTIONS=8
fi
csv="$out/ipc-collectives.csv"
: >"$csv"
status=0

# sweep OP BACKEND MODE(eager|graph) MAXSIZE
# (BACKEND ipc_put: ipc with eager off; ipc_eager: HIR_IPC_EAGER_MAX=--eager-max)
sweep() {
  local op=$1 backend=$2 mode=$3 max=$4 prog="$tmp/${1}_$2.json" rows="$tmp/$1_$2_$3.csv"
  local env=()
  [ "$backend" = ipc_put ] && env=(HIR_IPC_EAGER_MAX=0)
  [ "$backend" = ipc_eager ] && env=(HIR_IPC_EAGER_MAX="$eager_max")
  sed "s/\"backend\": \"ipc\"/\"backend\": \"${backend%_*}\"/" "bench/ipc/${op}_loop.json" >"$prog"
  local extra=()
  [ "$mode" = graph ] && extra=(--graph)
  [ -n "$reps" ] && extra+=(--param "reps=$reps")
  if ! env "${env[@]}" "$hir" sweep "$prog" --param-size n -b "$b" -e "$max" -f "$f" -n "$n" -w "$w" \
      --np "$np" --device "$device" --no-progress --csv "$rows" "${extra[@]}" \
      >"$tmp/$1_$2_$3.log" 2>&1; then
    echo "ipc-collectives-bench: $op on $backend ($mode) failed:" >&2
    tail -5 "$tmp/$1_$2_$3.log" >&2
    status=1
    return
  fi
  # op,backend,mode,<the sweep's columns>
  tail -n +2 "$rows" | sed "s/^/$op,$backend,$mode,/" >>"$csv"
}


IFS=, read -r -a op_list <<<"$ops"
for op in "${op_list[@]}"; do
  for backend in $backends; do
    for mode in $modes; do
      max=$e
      [ "$mode" = graph ] && max=$graph_max
      [ "$backend" = ipc_put ] && max=$(smaller "$max" "$eager_sweep_max")
      [ "$backend" = ipc_eager ] && max=$(smaller "$max" "$((eager_max * np))")
      [ "$(sizes bytes "$max")" -ge "$(sizes bytes "$b")" ] || continue  # none in range
      sweep "$op" "$backend" "$mode" "$max"
    done
  done
done

python3 - "$csv" "$np" "$gpus" "$baseline" "$eager_max" >"$out/ipc-collectives.txt" <<'PY'
import csv, sys
path, np, gpus, base, eager_max = sys.argv[1:6]
rows = {}
for r in csv.reader(open(path)):
    op, backend, mode, size, count, dtype, redop, root, t, algbw, busbw, wrong = r[:12]
    rows[(op, mode, int(size), backend)] = (float(t), float(busbw), int(wrong))
print(f"# ipc collectives against {base} through hir sweep: {np} ranks, {gpus} GPU(s)")
print("# time: us per collective (mean over ranks); ratio < 1: ipc faster; busbw GB/s")
print()
print("# ipc: as it runs (chunks up to HIR_IPC_EAGER_MAX eager); ipc put: eager off"
      + (f"; ipc eager: HIR_IPC_EAGER_MAX={eager_max}" if eager_max else ""))
print()
ex, exl = (" ipc eager us |", " ---: |") if eager_max else ("", "")
print(f"| op | mode | size (B) | {base} us | ipc us | ipc put us |{ex} ipc/{base} time | {base} busbw "
      "| ipc busbw | #wrong |")
print(f"| --- | --- | ---: | ---: | ---: | ---: |{exl} ---: | ---: | ---: | ---: |")
keys = sorted({k[:3] for k in rows})
for op, mode, size in keys:
    n = rows.get((op, mode, size, base))
    i = rows.get((op, mode, size, "ipc"))
    p = rows.get((op, mode, size, "ipc_put"))
    g = rows.get((op, mode, size, "ipc_eager"))
    fmt = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
    ratio = fmt(i[0] / n[0], 3) if n and i and n[0] > 0 else "-"
    wrong = sum(r[2] for r in (n, i, p, g) if r)
    eg = f" {fmt(g and g[0])} |" if eager_max else ""
    print(f"| {op} | {mode} | {size} | {fmt(n and n[0])} | {fmt(i and i[0])} | "
          f"{fmt(p and p[0])} |{eg} {ratio} | {fmt(n and n[1])} | {fmt(i and i[1])} | {wrong} |")
PY
cat "$out/ipc-collectives.txt"
[ "$plots" = 1 ] && { bash scripts/plot-ipc-collectives.sh "$csv" "$out" "$np" || status=1; }
exit $status
