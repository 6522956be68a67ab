#!/usr/bin/env bash
# ipc's collectives against NCCL's, side by side in one run, through the
# evaluator: `hir sweep` of each program of bench/ipc/ (a loop of one
# collective) on backend ipc and on backend nccl, every size from -b to -e,
# eager and (up to --graph-max) with --graph; one table of times, bus
# bandwidths and ratios (ipc / nccl time; ipc / nccl busbw) at the end.
#
#   bash scripts/ipc-collectives-bench.sh [--build DIR] [--np N] [-b SIZE] [-e SIZE]
#        [-f N] [-n N] [-w N] [--graph-max SIZE] [--ops a,b,...] [--device host]
#
# Defaults: build-gpu, as many ranks as GPUs (at least 2), 8 B to 1 GiB by
# 4x, 20 timed and 5 warm-up runs per size, graphs up to 64 KiB. On a
# machine of one GPU it runs 2 ranks sharing it (HIR_SHARE_GPUS=1), ipc only
# (NCCL refuses a shared GPU): a smoke test of the script, whose times say
# nothing about two GPUs. Writes ${OUT:-ipc-bench-out}/ipc-collectives.txt
# (the table) and ipc-collectives.csv (every row of every sweep); needs
# NCCL_NVLS_ENABLE=0 (exported here). --device host (a check of the script
# itself, on a machine without GPUs) compares with mpi instead, eager only.
set -uo pipefail
cd "$(dirname "$0")/.."

build=build-gpu np="" b=8 e=1G f=4 n=20 w=5 graph_max=64K device=cuda
ops=allreduce,allgather,reduce_scatter,broadcast,alltoall
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
    --ops) shift; ops=$1 ;;
    --device) shift; device=$1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
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
backends="ipc $baseline"
if [ "$device" = cuda ] && [ "$gpus" -lt "$np" ]; then
  export HIR_SHARE_GPUS=1
  backends=ipc
  echo "ipc-collectives-bench: $gpus GPU(s) for $np ranks: ranks share GPUs, ipc only" >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
csv="$out/ipc-collectives.csv"
: >"$csv"
status=0

# sweep OP BACKEND MODE(eager|graph) MAXSIZE
sweep() {
  local op=$1 backend=$2 mode=$3 max=$4 prog="$tmp/${1}_$2.json" rows="$tmp/$1_$2_$3.csv"
  sed "s/\"backend\": \"ipc\"/\"backend\": \"$backend\"/" "bench/ipc/${op}_loop.json" >"$prog"
  local extra=()
  [ "$mode" = graph ] && extra=(--graph)
  if ! "$hir" sweep "$prog" --param-size n -b "$b" -e "$max" -f "$f" -n "$n" -w "$w" \
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
      sweep "$op" "$backend" "$mode" "$([ "$mode" = graph ] && echo "$graph_max" || echo "$e")"
    done
  done
done

python3 - "$csv" "$np" "$gpus" "$baseline" >"$out/ipc-collectives.txt" <<'PY'
import csv, sys
path, np, gpus, base = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = {}
for r in csv.reader(open(path)):
    op, backend, mode, size, count, dtype, redop, root, t, algbw, busbw, wrong = r[:12]
    rows[(op, mode, int(size), backend)] = (float(t), float(busbw), int(wrong))
print(f"# ipc collectives against {base} through hir sweep: {np} ranks, {gpus} GPU(s)")
print("# time: us per collective (mean over ranks); ratio < 1: ipc faster; busbw GB/s")
print()
print(f"| op | mode | size (B) | {base} us | ipc us | ipc/{base} time | {base} busbw | ipc busbw "
      "| #wrong |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
keys = sorted({k[:3] for k in rows})
for op, mode, size in keys:
    n = rows.get((op, mode, size, base))
    i = rows.get((op, mode, size, "ipc"))
    fmt = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
    ratio = fmt(i[0] / n[0], 3) if n and i and n[0] > 0 else "-"
    wrong = (n[2] if n else 0) + (i[2] if i else 0)
    print(f"| {op} | {mode} | {size} | {fmt(n and n[0])} | {fmt(i and i[0])} | {ratio} | "
          f"{fmt(n and n[1])} | {fmt(i and i[1])} | {wrong} |")
PY
cat "$out/ipc-collectives.txt"
exit $status
