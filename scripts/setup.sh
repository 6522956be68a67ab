#!/usr/bin/env bash
# Installs what hostir needs to build and test on Debian or Ubuntu (only the
# missing packages), then configures and builds it. Idempotent: a second run
# installs nothing and rebuilds only what changed.
#   scripts/setup.sh [target...]     (default: everything)
# Environment: BUILD_DIR (default build), HIR_WITH_CUDA (AUTO), JOBS,
# HIR_UNITY_BUILD (ON; read at the first configure only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}

packages=(build-essential cmake ninja-build pkg-config libfmt-dev nlohmann-json3-dev
          libopenmpi-dev openmpi-bin libgtest-dev libgmock-dev libbenchmark-dev ccache
          libopenblas-dev libcli11-dev libspdlog-dev python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! command -v apt-get >/dev/null; then
    echo "setup: apt-get not found; install these packages by hand: ${missing[*]}" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A first configure makes a unity build (files compiled in batches: a
# fresh machine builds in a third of the time); HIR_UNITY_BUILD=OFF compiles
# each file on its own, which rebuilds less after an edit.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DHIR_WITH_CUDA="${HIR_WITH_CUDA:-AUTO}" \
    -DCMAKE_UNITY_BUILD="${HIR_UNITY_BUILD:-ON}" >&2
fi
jobs=${JOBS:-$(nproc)}
if (($#)); then
  cmake --build "$build" -j "$jobs" --target "$@" >&2
else
  cmake --build "$build" -j "$jobs" >&2
fi
