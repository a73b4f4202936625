#!/usr/bin/env bash
# flash's real-subgroup branch (SUBGROUPS=1: cl_khr_subgroups, OpenCL C 3.0 subgroups, or Intel's
# subgroups with a required size) compiled with clang's OpenCL front end, since neither PoCL nor
# rusticl offers subgroups and CI otherwise compiles only the emulated branch. The source is the
# one the runtime builds: the files runtime/kernels/flash.c concatenates, in its order, with the
# generated parameter block, and the -D options it passes. Each configuration is checked with
# -fsyntax-only, and its preprocessed text must hold the subgroup reduction itself (so the branch
# was the one compiled). Exits 77 (skipped) without clang.
# Usage: flash_subgroups_cl.sh CLANG SOURCE_DIR ATTN_PARAMS_CL
set -uo pipefail
clang="$1" source="$2" params="$3"
if [ -z "$clang" ] || ! command -v "$clang" > /dev/null; then
  echo "SKIP: no clang to compile OpenCL C with (apt-get install clang)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# the files of flash.c's get_kernel, in order: the prelude (ATTN_PRELUDE, plan/params.h), then
# its own ("attn_params.cl" is generated in the build)
prelude=$(grep -m1 '#define ATTN_PRELUDE' "$source/runtime/plan/params.h" | grep -o '"[^"]*"' | tr -d '"')
own=$(awk '/files\[\] = \{/,/\};/' "$source/runtime/kernels/flash.c" | grep -o '"[^"]*"' | tr -d '"')
grep -A2 'files\[\] = {' "$source/runtime/kernels/flash.c" | grep -q ATTN_PRELUDE ||
  { echo "flash.c's file list no longer starts with ATTN_PRELUDE"; exit 1; }
files="$prelude $own"
[ "$(wc -w <<< "$files")" -ge 4 ] || { echo "cannot read the file list of flash.c: $files"; exit 1; }
: > "$work/flash_all.cl"
for f in $files; do
  case "$f" in
    attn_params.cl) path="$params" ;;
    *) path="$source/cl/$f" ;;
  esac
  [ -f "$path" ] || { echo "no $path"; exit 1; }
  cat "$path" >> "$work/flash_all.cl"
  echo >> "$work/flash_all.cl"
done

compile() { # WHAT OPTIONS...: syntax-checks the subgroup branch, then checks it was the one
  local what="$1"
  shift
  local cl=("$clang" -x cl -Xclang -finclude-default-header "$@" -DSUBGROUPS=1 -DCOUNT_TILES=0)
  "${cl[@]}" -fsyntax-only "$work/flash_all.cl" > "$work/log" 2>&1 ||
    fail "$what: $(grep -m 5 'error' "$work/log")"
  "${cl[@]}" -E "$work/flash_all.cl" > "$work/preprocessed.cl" 2> /dev/null
  grep -q 'x\[r\] = sub_group_reduce_max(x\[r\])' "$work/preprocessed.cl" ||
    fail "$what: the real subgroup reduction is not in the compiled text"
}

shape=(-DBLOCK_M=32 -DBLOCK_N=32 -DTILE_M=4 -DTILE_N=4 -DDQK_PAD=64 -DDV_PAD=64 -DOUT_DTYPE=0)
for dtype in 0 1 2; do # float32, float16, bfloat16 K/V (IN_DTYPE)
  for vec_stages in "-DVEC=4 -DSTAGES=2" "-DVEC=1 -DSTAGES=1"; do
    compile "OpenCL C 2.0, cl_khr_subgroups, IN_DTYPE=$dtype $vec_stages" -cl-std=CL2.0 \
      "${shape[@]}" -DIN_DTYPE=$dtype $vec_stages
  done
done
compile "OpenCL C 3.0 with __opencl_c_subgroups" -cl-std=CL3.0 -Xclang -cl-ext=+__opencl_c_subgroups \
  "${shape[@]}" -DIN_DTYPE=0 -DVEC=4 -DSTAGES=2
# Intel: subgroups of a team's size asked for (flash.c adds REQD_SUBGROUP_SIZE there)
compile "Intel's required subgroup size" -cl-std=CL2.0 -Dcl_intel_required_subgroup_size=1 \
  -DREQD_SUBGROUP_SIZE=8 "${shape[@]}" -DIN_DTYPE=0 -DVEC=4 -DSTAGES=2
grep -q 'intel_reqd_sub_group_size(8)' "$work/preprocessed.cl" ||
  fail "the required subgroup size is not in the compiled text"
# a broken subgroup branch must fail this check (the check itself can fail)
sed 's/sub_group_reduce_max(x\[r\])/sub_group_reduce_maxx(x[r])/' "$work/flash_all.cl" > "$work/broken.cl"
"$clang" -x cl -Xclang -finclude-default-header -cl-std=CL2.0 "${shape[@]}" -DIN_DTYPE=0 -DSUBGROUPS=1 \
  -fsyntax-only "$work/broken.cl" > /dev/null 2>&1 && fail "a misspelt subgroup built-in compiled"

[ "$failures" -eq 0 ] && echo "flash's subgroup branch compiles with $("$clang" --version | head -n 1)"
exit $((failures > 0))
