#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (clang, -fsanitize=fuzzer,
# address,undefined) in their own build directory and runs each for a bounded
# time, or replays the seed corpus once (docs/testing.md, "Fuzzing and
# sanitizers").
#
#   scripts/fuzz.sh [options] [target...]
#     targets: fuzz_json fuzz_expr fuzz_check fuzz_builder fuzz_cli (default: all)
#     --time S       seconds of fuzzing per target (default 60)
#     --replay       run every seed of the target once and stop: a
#                    regression check of seconds
#     --build DIR    build directory (default build-fuzz)
#     -- ARGS        more libFuzzer flags, e.g. -- -jobs=2 -workers=2
# Environment: CC, CXX (default clang-14, clang++-14), JOBS (build jobs, nproc).
#
# Seeds: tests/fuzz/corpus/programs/ (fuzz_json, fuzz_check),
# tests/fuzz/corpus/expr/ (fuzz_expr), tests/fuzz/corpus/builder/ (builder
# calls, 4 bytes each) and tests/fuzz/corpus/cli/ (arguments separated by
# NUL bytes). Fuzzing keeps what it learns in
# DIR/corpus/<target>/ (the repository's seeds are read, never written) and
# writes a crashing, leaking or hanging input to DIR/artifacts/<target>/. Once
# the bug is fixed, copy the input into the target's seed folder as
# crash_<what> so that --replay guards it.
# Exit status: 0 when every target ran clean, 1 on a finding, 2 on a setup error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
seconds=60
replay=0
targets=()
extra=()
while (($#)); do
  case $1 in
    --time) seconds=$2; shift 2 ;;
    --time=*) seconds=${1#*=}; shift ;;
    --replay) replay=1; shift ;;
    --build) build=$2; shift 2 ;;
    --build=*) build=${1#*=}; shift ;;
    --) shift; extra=("$@"); break ;;
    fuzz_json|fuzz_expr|fuzz_check|fuzz_builder|fuzz_cli) targets+=("$1"); shift ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=(fuzz_json fuzz_expr fuzz_check fuzz_builder fuzz_cli)
case $build in /*) ;; *) build=$root/$build ;; esac

# ------------------------------------------------------------------ build
cc=${CC:-clang-14}
cxx=${CXX:-clang++-14}
if [ -z "${CXX:-}" ] && ! command -v clang++-14 >/dev/null && ! command -v clang++ >/dev/null &&
   command -v apt-get >/dev/null; then
  # As scripts/setup.sh does for the build's packages: clang and its
  # runtime libraries (libFuzzer, the sanitizers).
  echo "fuzz.sh: installing clang libclang-rt-dev" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    clang libclang-rt-dev >/dev/null
fi
if ! command -v "$cxx" >/dev/null; then
  if [ -z "${CXX:-}" ] && command -v clang++ >/dev/null; then
    cc=clang cxx=clang++
  else
    echo "fuzz.sh: $cxx not found: libFuzzer needs clang (apt-get install clang-14)" >&2
    exit 2
  fi
fi
if [ ! -f "$build/build.ninja" ]; then
  # -O1 with line tables only, as libFuzzer's documentation builds: a third
  # of the compile time of -O2 -g, and reports still name file and line.
  # A unity build (HIR_UNITY_BUILD=OFF: each file on its own).
  CC=$cc CXX=$cxx cmake -S "$root" -B "$build" -G Ninja -DHIR_FUZZ=ON -DHIR_WITH_CUDA=OFF \
    -DCMAKE_UNITY_BUILD="${HIR_UNITY_BUILD:-ON}" \
    -DHIR_BUILD_TESTS=OFF -DHIR_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >&2
fi
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" >&2

# -------------------------------------------------------------------- run
# UBSan stops at the first report, so that libFuzzer sees a crash and keeps
# the input; ASan's leak check stays on (libFuzzer reports a leak per input).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_stack_use_after_return=1}
# The targets run no MPI, but the library links it: keep Open MPI quiet.
export OMPI_MCA_btl=self OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

seeds_of() {
  case $1 in
    fuzz_expr) echo "$root/tests/fuzz/corpus/expr" ;;
    fuzz_builder) echo "$root/tests/fuzz/corpus/builder" ;;
    fuzz_cli) echo "$root/tests/fuzz/corpus/cli" ;;
    *) echo "$root/tests/fuzz/corpus/programs" ;;
  esac
}
dict_of() {
  case $1 in
    fuzz_expr) echo "$root/tests/fuzz/expr.dict" ;;
    fuzz_cli) echo "$root/tests/fuzz/cli.dict" ;;
    fuzz_builder) ;;  # its bytes pick from tables: no words to learn
    *) echo "$root/tests/fuzz/json.dict" ;;
  esac
}
max_len_of() { case $1 in fuzz_expr) echo 8192 ;; fuzz_builder|fuzz_cli) echo 1024 ;; *) echo 16384 ;; esac; }

mkdir -p "$build/logs"
summary=()
status=0
for t in "${targets[@]}"; do
  bin=$build/fuzz/$t
  seeds=$(seeds_of "$t")
  log=$build/logs/$t.log
  mkdir -p "$build/artifacts/$t" "$build/corpus/$t"
  common=(-timeout=10 -rss_limit_mb=2048 -max_len="$(max_len_of "$t")"
          -artifact_prefix="$build/artifacts/$t/" -print_final_stats=1)
  start=$(date +%s.%N)
  rc=0
  if ((replay)); then
    mapfile -t files < <(find "$seeds" -type f | sort)
    echo "fuzz.sh: $t: replaying ${#files[@]} inputs of ${seeds#"$root"/}" >&2
    "$bin" "${common[@]}" "${extra[@]}" "${files[@]}" >"$log" 2>&1 || rc=$?
    execs=$(grep -c '^Executed ' "$log" || true)
    new=0
  else
    echo "fuzz.sh: $t: fuzzing for ${seconds}s (log: ${log#"$root"/})" >&2
    dict=$(dict_of "$t")
    "$bin" "${common[@]}" -max_total_time="$seconds" ${dict:+-dict="$dict"} \
      "${extra[@]}" "$build/corpus/$t" "$seeds" >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    new=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
  fi
  elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  rate=$(awk -v n="${execs:-0}" -v s="$elapsed" 'BEGIN { printf "%d", (s > 0 ? n / s : 0) }')
  corpus=$(find "$build/corpus/$t" -type f | wc -l)
  if ((rc == 0)); then
    result=ok
  else
    status=1
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    result="FINDING (exit $rc)${artifact:+: $artifact}"
    {
      echo "----- $t: finding; the report (from $log):"
      grep -n -m1 -A40 -E '^==[0-9]+==ERROR|runtime error:|==hostir-fuzz== FINDING|ERROR: libFuzzer' "$log" || tail -40 "$log"
      [ -n "$artifact" ] && echo "reproduce: $bin $artifact" &&
        echo "once fixed: cp $artifact $seeds/crash_<what>"
      echo "-----"
    } >&2
  fi
  summary+=("$(printf '%-11s %-7s %7.1fs %10s execs %7s/s %5s new %6s in corpus  %s' \
    "$t" "$( ((replay)) && echo replay || echo fuzz)" "$elapsed" "${execs:-?}" "$rate" \
    "${new:-?}" "$corpus" "$result")")
done

echo "fuzz.sh summary (${build#"$root"/}):"
printf '  %s\n' "${summary[@]}"
exit $status
