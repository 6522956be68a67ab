#!/usr/bin/env bash
# Soak: tests/tools/data/soak/soak_mixed.json (nccl allreduce, ipc send/recv,
# matmul, allocate/copy/deallocate, checks every 1,000 iterations), or the
# program given by --program (soak_ipc_compute.json: the same without the
# allreduce, for 2 ranks sharing one GPU, HIR_SHARE_GPUS=1), for ITERS
# iterations on 2 ranks, sampling every second the ranks' resident memory
# (ps), their GPU memory (nvidia-smi) and open file handles (/proc/PID/fd).
# Memory and handles must stay flat: the last sample may exceed the first
# taken after warm-up by at most 5% (plus 16 MiB of noise).
#
#   bash scripts/gpu-soak.sh [BUILD_DIR] [--device cuda|host] [--iters N] [--out DIR]
#                            [--program FILE] [--mps] [--runs R]
#
# --runs R: `hir run --iters R`, R runs of ITERS iterations each (default
# 1). A program's ipc messages are traced at load up to 4,000,000 plan
# steps per rank, which bounds ITERS (soak_ipc_compute.json: about
# 285,000); runs go beyond it.
#
# --mps: the 2 ranks share GPU 0 under an MPS daemon (scripts/mps-env.sh),
# for a program without nccl on a machine of one GPU.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
device=cuda
iters=100000
out=${OUT:-$root/gpu-out}
prog=$root/tests/tools/data/soak/soak_mixed.json
mps=0 runs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --mps) mps=1 ;;
    --runs) runs=$2; shift ;;
    --device) device=$2; shift ;;
    --iters) iters=$2; shift ;;
    --out) out=$2; shift ;;
    --program) prog=$2; shift ;;
    -*) echo "gpu-soak: unknown option $1" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
if [ "$mps" = 1 ]; then
  # shellcheck source=mps-env.sh
  . "$root/scripts/mps-env.sh"
  mps_dir=$(mktemp -d)
  mps_start "$mps_dir" || exit 3
fi
name=$(basename "$prog" .json)
csv=$out/soak.csv
echo "t_s,rss_kib,gpu_mib,fds,procs" >"$csv"
start=$(date +%s.%N)
"$build/bin/hir" run "$prog" --np 2 --device "$device" --param iters="$iters" --iters "$runs" --warmup 0 --timeout 600 \
  >"$out/soak.log" 2>&1 &
launcher=$!
sleep 1
while kill -0 "$launcher" 2>/dev/null; do
  pids=$(pgrep -f "hir.*$name" | grep -v "^$launcher\$" | tr '\n' ' ')
  rss=0 fds=0 procs=0
  for p in $pids; do
    procs=$((procs + 1))
    r=$(ps -o rss= -p "$p" 2>/dev/null | tr -d ' ')
    rss=$((rss + ${r:-0}))
    f=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
    fds=$((fds + f))
  done
  gpu=0
  if [ "$device" = cuda ] && command -v nvidia-smi >/dev/null; then
    gpu=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null |
          awk '{s += $1} END {print s + 0}')
  fi
  t=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
  echo "$t,$rss,$gpu,$fds,$procs" >>"$csv"
  sleep 1
done
wait "$launcher"
rc=$?
elapsed=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
# The first sample after the warm-up (NCCL and CUDA contexts, the first
# allocations: 3 s, or a quarter of the job when longer; under MPS 100,000
# iterations take 4 s, the first 3 of them setting up) against the last
# taken while as many processes ran (not one of the job's exit), at least
# 10 s apart: one run of 100,000 iterations of soak_mixed.json on 2 H200s
# took 6 s of a 10 s job, and its samples from 3.2 s still saw the start
# (resident memory 0.88 -> 1.63 GB).
warm=$(awk -v e="$elapsed" 'BEGIN { w = e / 4; printf "%.1f", (w > 3 ? w : 3) }')
verdict=$(awk -F, -v warm="$warm" 'NR > 1 && $1 + 0 >= warm + 0 && !first { first = $0; procs = $5 }
  first && $5 == procs { last = $0 }
  END {
    if (!first) { print "too short to judge"; exit }
    split(first, a, ","); split(last, b, ",");
    if (a[1] == b[1]) { print "too short to judge (one sample after the warm-up)"; exit }
    if (b[1] - a[1] < 10) {
      printf "too short to judge (%.1f s of samples after the warm-up, 10 needed: more --runs)\n",
        b[1] - a[1]; exit
    }
    ok = 1
    if (b[2] > a[2] * 1.05 + 16384) ok = 0
    if (b[3] > a[3] * 1.05 + 16) ok = 0
    if (b[4] > a[4] + 4) ok = 0
    printf "%s: rss %d -> %d KiB, gpu %d -> %d MiB, fds %d -> %d (%s to %s s)\n",
      ok ? "flat" : "GROWING", a[2], b[2], a[3], b[3], a[4], b[4], a[1], b[1]
  }' "$csv")
echo "soak: $runs x $iters iterations on $device, exit $rc in ${elapsed%.*} s; $verdict" | tee "$out/soak.txt"
tail -2 "$out/soak.log"
[ "$rc" = 0 ] && [[ "$verdict" == flat* ]]
