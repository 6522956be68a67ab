#!/usr/bin/env bash
# Overlap of communication and compute (issue: compute in the program): runs
# each pipelined program of bench/overlap/ through `hir run` on the GPUs in
# four modes of the same program (the `mode` param), side by side in one run:
#   0 pipelined   each chunk's matmul on stream 1 overlaps the next chunk's communication
#   1 sequential  the same nodes, all on stream 0: communication, then compute
#   2 compute     the matmuls alone (communication nodes skipped)
#   3 comm        the communications alone (matmuls skipped)
# bfloat16, k = n = 8192, m (rows of the full, gathered activation) from
# 8192 to 32768. Prints a table last and writes ${OUT:-overlap-out}/overlap.csv.
#
#   bash scripts/overlap-bench.sh [--build DIR] [--np N] [--sizes "8192 16384"] [--reps R]
#                                 [--device cuda|host] [--kn K] [--chunks C] [--programs "a b"]
#
# --chunks C: chunks of the programs that have a `chunks` param (the first
# chunk's communication, or the last's, cannot overlap compute: with C
# chunks at most (C - 1) / C of it is hidden). --programs: names of
# bench/overlap/*.json to run (default all).
#
# hidden = 1 - (pipelined - compute) / comm: the share of the communication
# time the pipeline hides (target >= 0.8). TFLOP/s = 2 m k n / time per rank
# (each rank computes the whole m x n output; in matmul + reduce_scatter
# over k / np of the inner dimension, so 2 m (k / np) n).
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
np=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 2)
sizes="8192 16384 32768"
reps=2
device=cuda
k=8192
chunks=""
programs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) shift; build=$1 ;;
    --np) shift; np=$1 ;;
    --sizes) shift; sizes=$1 ;;
    --reps) shift; reps=$1 ;;
    --device) shift; device=$1 ;;
    --kn) shift; k=$1 ;;
    --chunks) shift; chunks=$1 ;;
    --programs) shift; programs=$1 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "overlap-bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT:-$root/overlap-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hir=$build/bin/hir
[ -x "$hir" ] || { echo "overlap-bench: $hir not built" >&2; exit 2; }
log=$out/overlap.log
csv=$out/overlap.csv
echo "program,m,k,n,np,mode,rep,ms" >"$csv"
echo "# chunks=${chunks:-default} NCCL_MAX_NCHANNELS=${NCCL_MAX_NCHANNELS:-unset}" >"$out/overlap.txt"
: >"$log"
n=$k
# ms per run of one mode, or "nan".
measure() {  # program m mode
  local text ms extra=()
  if [ -n "$chunks" ] && grep -q '"chunks"' "$1"; then extra=(--param chunks="$chunks"); fi
  text=$(timeout 300 "$hir" run "$1" --np "$np" --device "$device" --warmup 3 --iters 10 \
         --param m="$2" --param k=$k --param n=$n --param mode="$3" "${extra[@]}" 2>&1)
  printf '== %s m=%s mode=%s\n%s\n' "$1" "$2" "$3" "$text" >>"$log"
  ms=$(printf '%s\n' "$text" | sed -n 's/.* \([0-9.]*\) \(ns\|us\|ms\|s\) per run.*/\1 \2/p' | tail -1 | awk '{ f["ns"] = 1e-6; f["us"] = 1e-3; f["ms"] = 1; f["s"] = 1e3; if (NF == 2) printf "%.6g", $1 * f[$2] }')
  echo "${ms:-nan}"
}
for prog in "$root"/bench/overlap/*.json; do
  name=$(basename "$prog" .json)
  if [ -n "$programs" ] && [[ " $programs " != *" $name "* ]]; then continue; fi
  for m in $sizes; do
    for rep in $(seq 1 "$reps"); do
      for mode in 0 1 2 3; do
        echo "$name,$m,$k,$n,$np,$mode,$rep,$(measure "$prog" "$m" "$mode")" >>"$csv"
      done
    done
  done
done
# The table: medians over reps (with 2 reps, their mean).
{
printf "%-32s %6s %10s %10s %10s %10s %8s %9s %9s\n" program m "pipe ms" "seq ms" compute comm hidden TFLOP/s matmulTF
awk -F, -v k=$k -v n=$n -v np=$np 'NR > 1 && !/^#/ {
    key = $1 "," $2; v[key, $6] = v[key, $6] " " $8; keys[key] = 1 }
  function med(s,   a, c, i, j, t) {
    c = split(s, a, " ");
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2 }
  END {
    for (key in keys) {
      split(key, p, ","); pipe = med(v[key, 0]); seq = med(v[key, 1]); cmp = med(v[key, 2]); com = med(v[key, 3])
      hidden = com > 0 ? 1 - (pipe - cmp) / com : 0
      fl = 2 * p[2] * k * n / (p[1] ~ /reduce_scatter/ ? np : 1)
      printf "%-32s %6d %10.3f %10.3f %10.3f %10.3f %8.2f %9.0f %9.0f\n", p[1], p[2], pipe, seq, cmp, com, hidden, fl / (pipe * 1e9), fl / (cmp * 1e9)
    }
  }' "$csv" | sort -k1,1 -k2,2n
} | tee -a "$out/overlap.txt"
