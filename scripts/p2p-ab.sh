#!/usr/bin/env bash
# Two packed builds of hostir side by side (scripts/gpu-pack.sh): the same
# hir_p2p_bench command from each, in turns, --rounds times (every other
# round in the reverse order, so that a drift of the machine falls on both
# alike), then the median of each row per build and the ratio B / A of
# their times. For a change that must not cost speed (a restructuring):
# build A is the commit before it, B the commit after.
#
#   bash scripts/p2p-ab.sh --a DIR --b DIR [--np N] [--mps] [--rounds N] -- P2P_ARGS...
#
# --np: ranks (default 2). --mps: the ranks share GPU 0 under an MPS daemon
# (scripts/mps-env.sh; then pass --base ipc among P2P_ARGS, since NCCL
# refuses a shared GPU). Writes ${OUT:-gpu-out}/ab-builds.txt (the table,
# also printed) and ab-builds.log (every run's output). NCCL_NVLS_ENABLE=0.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
a="" b="" np=2 mps=0 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --a) shift; a=$(readlink -f "$1") ;;
    --b) shift; b=$(readlink -f "$1") ;;
    --np) shift; np=$1 ;;
    --mps) mps=1 ;;
    --rounds) shift; rounds=$1 ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "p2p-ab: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
for d in "$a" "$b"; do
  [ -n "$d" ] && [ -x "$d/bin/hir_p2p_bench" ] ||
    { echo "p2p-ab: --a and --b must each be a packed build with bin/hir_p2p_bench" >&2; exit 2; }
done
case "$rounds" in ''|*[!0-9]*|0) echo "p2p-ab: --rounds must be a positive integer" >&2; exit 2 ;; esac
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_cmd=(mpirun -x NCCL_NVLS_ENABLE --bind-to none)
if [ "$mps" = 1 ]; then
  # shellcheck source=mps-env.sh
  . "$root/scripts/mps-env.sh"
  mps_start "$(mktemp -d)" || exit 1
  mpirun_cmd+=(-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_DEVICE_MAX_CONNECTIONS -x HIR_SHARE_GPUS)
fi
log="$out/ab-builds.log"
: >"$log"
tmp=$(mktemp -d)
for ((r = 1; r <= rounds; r++)); do
  order="a b"
  [ $((r % 2)) = 0 ] && order="b a"
  for side in $order; do
    dir=$a
    [ "$side" = b ] && dir=$b
    echo "=== round $r, build $side ($dir)" >>"$log"
    LD_LIBRARY_PATH="$dir/lib:$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      timeout 600 "${mpirun_cmd[@]}" -x LD_LIBRARY_PATH -np "$np" "$dir/bin/hir_p2p_bench" \
      --csv "$tmp/$side.$r.csv" "$@" >>"$log" 2>&1 ||
      echo "p2p-ab: round $r of build $side failed (see $log)" >&2
  done
done
# Rows: world,test,bytes,variant,us,gbps,ratio; the median us per (test,
# bytes, variant) and build.
python3 - "$tmp" "$rounds" <<'EOF' | tee "$out/ab-builds.txt"
import csv, statistics, sys, os
tmp, rounds = sys.argv[1], int(sys.argv[2])
times = {}
for side in "ab":
    for r in range(1, rounds + 1):
        path = os.path.join(tmp, f"{side}.{r}.csv")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for row in csv.DictReader(f):
                key = (row["test"], int(row["bytes"]), row["variant"])
                times.setdefault(key, {"a": [], "b": []})[side].append(float(row["us"]))
print(f"{'test':<10} {'bytes':>11} {'variant':<8} {'A us':>10} {'B us':>10} {'B/A':>7}  runs")
ratios = []
for key in sorted(times):
    t = times[key]
    if not t["a"] or not t["b"]:
        continue
    ma, mb = statistics.median(t["a"]), statistics.median(t["b"])
    ratios.append(mb / ma)
    print(f"{key[0]:<10} {key[1]:>11} {key[2]:<8} {ma:>10.2f} {mb:>10.2f} {mb / ma:>7.3f}  "
          f"{len(t['a'])}+{len(t['b'])}")
if ratios:
    print(f"B/A over {len(ratios)} rows: median {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.3f} - {max(ratios):.3f}")
else:
    print("p2p-ab: no row was measured by both builds")
EOF
rm -rf "$tmp"
