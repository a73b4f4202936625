#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs a downstream program
# against it three ways: CMake's find_package with the shared and the static library, and
# pkg-config; and builds the clattn program itself from cli/ against the installed tree alone
# (it uses nothing but the public API). First, it checks that no installed file (the libraries,
# the program) names a CLATTN_TEST_ variable: the test hooks live in the test binaries only.
# Usage: downstream.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1" source="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
installed=$(find "$work/prefix" -type f \( -name 'libclattn*' -o -path '*/bin/*' \))
[ "$(wc -w <<< "$installed")" -ge 3 ] || { echo "expected libclattn.so, .a and bin/clattn: $installed"; exit 1; }
hooks=0
for file in $installed; do
  # grep reads all of its input (no -q: with pipefail, a grep that stops at the first match
  # fails the pipeline through strings' SIGPIPE, and the match went unnoticed)
  names=$({ strings -a "$file"; nm -a "$file" 2> /dev/null || true; } | grep 'CLATTN_TEST_' || true)
  if [ -n "$names" ]; then
    echo "installed $file names a test hook: $(head -n 3 <<< "$names" | tr '\n' ' ')"
    hooks=1
  fi
done
[ "$hooks" -eq 0 ] || exit 1
cmake -S "$source/tests/install/downstream" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/build" > /dev/null
export LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64:$work/prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$work/build/uses_shared"
"$work/build/uses_static"
pc_dir="$(dirname "$(find "$work/prefix" -name clattn.pc | head -n 1)")"
cc -o "$work/uses_pkgconfig" "$source/tests/install/downstream/main.c" \
   $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs clattn) -lm
"$work/uses_pkgconfig"
test -x "$work/prefix/bin/clattn" && "$work/prefix/bin/clattn" --version
# the program from its own sources against the installed header and library only
cmake -S "$source/cli" -B "$work/cli" -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/cli" > /dev/null
"$work/cli/clattn" --version
"$work/cli/clattn" check --quick --device 0 --variant cpu --require cpu > /dev/null
