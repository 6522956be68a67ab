#!/usr/bin/env bash
# Checks the layering of csrc/: no folder includes a folder above it.
# docs/architecture.md draws the same layers; change both together.
#
#   scripts/check-layers.sh [SOURCE_ROOT]    (default: this repository)
#
# Reads every .h, .cc and .cu file under SOURCE_ROOT/csrc and each
# `#include "..."` / `#include <...>` line in it (leading blanks and blanks
# after `#` allowed). The folder of a file or an include is its first path
# component below csrc/ (csrc/device/cuda/x.cc is in folder device).
#   - "folder/file.h" or <folder/file.h> with folder in the table: it must be
#     the file's own folder or one of the table's list for the file's folder.
#   - Any other first component (<fmt/...>, <nccl.h>, <vector>, ...) is
#     external and allowed, except in hostir/ (below).
#   - hostir/ is the public API: only <hostir/...> and standard C++ headers
#     (<name>, no slash, no dot); anything else there, quoted includes too,
#     is a violation.
#   - A PRIVATE subfolder (device/cuda/, backends/nccl/, backends/ipc/) may be included only
#     from its own top folder.
#   - "x.h" without a slash only names a file in the including file's
#     directory; "../" and "./" paths are not allowed.
#   - Files directly in csrc/ and folders missing from the table are errors.
# Does not see through #if/#ifdef or /* */ comments. Prints one line per
# violation (path:line: message) and exits 1, or prints
# `layers: N files, M includes, ok` and exits 0.
set -euo pipefail

# ---- The layers: folder of csrc/ -> what it may include (besides itself,
# ---- external and standard headers). "*" = everything. Edit here.
# runtime/ and compile/ reach devices, backends and kernels only through
# the public interfaces and registries of hostir/ (device.h, backend.h,
# kernel.h): no concrete device, backend or bootstrap.
LAYERS='
hostir:    -                  # public API: <hostir/...> and <std> only
common:    hostir
ir:        hostir, common
plan:      hostir, common, ir
analysis:  hostir, common, ir, plan
lower:     hostir, common, ir, plan
device:    hostir, common
transport: hostir, common
kernels:   hostir, common
backends:  hostir, common, device, transport
compile:   hostir, common, ir, plan, analysis, lower
runtime:   hostir, common, ir, plan, compile
testing:   hostir             # the GoogleTest harness (hostir::gtest_main)
tools:     *
'
# Subfolders private to their top folder (csrc/<top>/<name>/...).
PRIVATE='cuda nccl ipc'

root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
if [ ! -d "$root/csrc" ]; then
  echo "check-layers: no csrc/ under '$root'" >&2
  echo "usage: $0 [SOURCE_ROOT]" >&2
  exit 2
fi
csrc=$(cd "$root/csrc" && pwd)

find "$csrc" -type f | LC_ALL=C sort | awk -v csrc="$csrc" -v layers="$LAYERS" \
  -v private="$PRIVATE" '
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
function bad(msg) { print shown ":" lineno ": " msg; nbad++ }
BEGIN {
  n = split(layers, rows, "\n")
  for (i = 1; i <= n; i++) {
    row = rows[i]; sub(/#.*/, "", row)
    if (row !~ /:/) continue
    f = trim(substr(row, 1, index(row, ":") - 1))
    known[f] = 1; allowed[f, f] = 1; list = ""
    m = split(substr(row, index(row, ":") + 1), items, /[ \t,]+/)
    for (j = 1; j <= m; j++) {
      if (items[j] == "" || items[j] == "-") continue
      allowed[f, items[j]] = 1
      list = list (list == "" ? "" : ", ") items[j]
    }
    mayinclude[f] = (list == "" ? "nothing else" : list)
  }
  n = split(private, p, " ")
  for (i = 1; i <= n; i++) priv[p[i]] = 1
}
{ files[++nfiles] = $0; exists[$0] = 1 }
END {
  for (i = 1; i <= nfiles; i++) {
    path = files[i]
    if (path !~ /\.(h|cc|cu)$/) continue
    rel = substr(path, length(csrc) + 2); shown = "csrc/" rel; lineno = 1
    nchecked++
    if (rel !~ /\//) { bad("file directly in csrc/: files belong in a layer folder"); continue }
    folder = rel; sub(/\/.*/, "", folder)
    if (!(folder in known)) {
      bad("folder '\''" folder "'\'' is not in the layer table of scripts/check-layers.sh")
      continue
    }
    dir = path; sub(/\/[^\/]*$/, "", dir)
    lineno = 0
    while ((getline line < path) > 0) {
      lineno++
      if (line !~ /^[ \t]*#[ \t]*include[ \t]*[<"]/) continue
      nincludes++
      s = line; sub(/^[ \t]*#[ \t]*include[ \t]*/, "", s)
      open = substr(s, 1, 1); close_ = (open == "<") ? ">" : "\""
      s = substr(s, 2); end = index(s, close_)
      if (end == 0) { bad("cannot read include: " trim(line)); continue }
      name = substr(s, 1, end - 1); inc = open name close_
      top = name; sub(/\/.*/, "", top)
      if (folder == "hostir") {
        if (open == "<" && (top == "hostir" && name ~ /\// || name ~ /^[A-Za-z0-9_]+$/)) continue
        bad("folder '\''hostir'\'' includes " inc " but hostir may include only: <hostir/...> and standard C++ headers")
        continue
      }
      if (open == "\"" && (name ~ /^\.\.?\// || name ~ /\/\.\.?\//)) {
        bad("relative include " inc ": write \"folder/file\" from csrc/"); continue
      }
      if (name !~ /\//) {
        if (open == "\"" && !((dir "/" name) in exists))
          bad(inc " is not in this file'\''s directory: write \"folder/" name "\" from csrc/")
        continue
      }
      if (!(top in known)) continue                  # external: <fmt/...>, <nlohmann/...>
      if (!(mayinclude[folder] == "*" || (folder, top) in allowed)) {
        bad("folder '\''" folder "'\'' includes " inc " but " folder " may include only: " mayinclude[folder])
        continue
      }
      sub2 = name; sub(/^[^\/]*\//, "", sub2)
      if (sub2 ~ /\// && top != folder) {
        sub(/\/.*/, "", sub2)
        if (sub2 in priv)
          bad("folder '\''" folder "'\'' includes " inc " but " top "/" sub2 " is private to " top)
      }
    }
    close(path)
  }
  if (nbad) { printf "layers: %d files, %d includes, %d violations\n", nchecked, nincludes, nbad; exit 1 }
  printf "layers: %d files, %d includes, ok\n", nchecked, nincludes
}'
