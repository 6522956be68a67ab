#!/usr/bin/env bash
# Draws the CSV of scripts/ipc-collectives-bench.sh (op,backend,mode, then
# hir sweep's columns) into one PNG per op under OUTDIR:
# ipc-collectives-OP.png, busbw and time against size (scripts/plot_sweep.py),
# one line per backend and mode (ipc, ipc put, nccl or mpi; eager, graph).
#
#   bash scripts/plot-ipc-collectives.sh CSV OUTDIR [NP]
#
# Exit 2 on bad usage or without matplotlib, 1 when a plot fails.
set -u -o pipefail
[ $# -ge 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
csv=$1 outdir=$2 np=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -r "$csv" ] || { echo "plot-ipc-collectives: cannot read $csv" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
header="size,count,type,redop,root,time_us,algbw_GBps,busbw_GBps,wrong"
status=0
for op in $(cut -d, -f1 "$csv" | sort -u); do
  inputs=() labels=()
  for key in $(awk -F, -v op="$op" '$1 == op { print $2 "," $3 }' "$csv" | sort -u); do
    backend=${key%,*} mode=${key#*,}
    part="$tmp/$op-$backend-$mode.csv"
    { echo "$header"; awk -F, -v op="$op" -v b="$backend" -v m="$mode" \
        'BEGIN { OFS = "," } $1 == op && $2 == b && $3 == m { print $4, $5, $6, $7, $8, $9, $10, $11, $12 }' \
        "$csv"; } >"$part"
    inputs+=("$part")
    labels+=(--label "${backend/_/ } ${mode}")
  done
  [ "${#inputs[@]}" -gt 0 ] || continue
  python3 "$root/scripts/plot_sweep.py" "${inputs[@]}" "${labels[@]}" \
      --title "$op${np:+, $np ranks}" -o "$outdir/ipc-collectives-$op.png" || status=$?
done
exit $status
