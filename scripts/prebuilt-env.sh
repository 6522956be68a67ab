# Sourced on a GPU machine: makes the binaries that scripts/gpu-pack.sh
# packed into DIR runnable here.
#
#   . scripts/prebuilt-env.sh DIR
#
# Exports LD_LIBRARY_PATH (DIR/lib, DIR: before the binaries' run path),
# and makes the build path compiled into the tests (MANIFEST's "build")
# point to DIR, and its source path to this checkout, when they do not
# exist here. Returns 1, saying why, when a path exists but is something
# else, or when a packed binary cannot find a library.
prebuilt_env() {
  local dir manifest src bld
  dir=$(readlink -f "$1") && [ -d "$dir" ] || { echo "prebuilt-env: no directory $1" >&2; return 1; }
  manifest="$dir/MANIFEST"
  [ -r "$manifest" ] || { echo "prebuilt-env: $dir has no MANIFEST (scripts/gpu-pack.sh)" >&2; return 1; }
  [ -e "$dir/libhostir.so" ] || ln -s libhostir.so.0 "$dir/libhostir.so"
  export LD_LIBRARY_PATH="$dir/lib:$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  src=$(sed -n 's/^source //p' "$manifest")
  bld=$(sed -n 's/^build //p' "$manifest")
  local here
  here=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/..")
  if [ -n "$src" ] && [ "$(readlink -f "$src")" != "$here" ]; then
    if [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$here" "$src" || return 1
    else echo "prebuilt-env: $src (the tests' source path) exists and is not this checkout" >&2; return 1; fi
  fi
  if [ -n "$bld" ] && [ "$(readlink -f "$bld")" != "$dir" ]; then
    if [ ! -e "$bld" ]; then ln -s "$dir" "$bld" || return 1
    else echo "prebuilt-env: $bld (the tests' build path) exists and is not $dir" >&2; return 1; fi
  fi
  if ldd "$dir/bin/hir" "$dir/tests/hostir_gpu_tests" | grep -q "not found"; then
    echo "prebuilt-env: a packed binary lacks a library here:" >&2
    ldd "$dir/bin/hir" "$dir/tests/hostir_gpu_tests" | grep "not found" >&2
    return 1
  fi
}
prebuilt_env "$@"
