#!/usr/bin/env bash
# `clattn bench`'s fixed: and strided: patterns: the library's layouts (clattn_pattern_layout,
# as `clattn pattern` writes them), and their bad numbers refused with one line (exit 2).
# Usage: cli_bench_curve.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1

# run_bench NAME ARGS...: a bench that must succeed
run_bench() {
  local name="$1"
  shift
  "$clattn" bench "$@" > "$name.out" 2> "$name.err" || fail "bench $*: exit $?: $(cat "$name.err")"
}

# column FILE NAME [PATTERN]: a CSV column (the row of PATTERN only), one value a line
column() {
  python3 -c 'import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    if len(sys.argv) < 4 or row["pattern"] == sys.argv[3]: print(row[sys.argv[2]])' "$@"
}

# ---- fixed: and strided: are clattn_pattern_layout's layouts (pairs = allowed blocks x 16 x 16)
run_bench layouts --nq 64 --hq 2 --d 8 --repeat 1 --pattern fixed:16,2,1,strided:16,3 --csv layouts.csv
for kind in "fixed:16,2,1 fixed --stride 2 --summary 1" "strided:16,3 strided --stride 3"; do
  read -r pattern args <<< "$kind"
  blocks=$("$clattn" pattern $args --nq 64 --nk 64 --block 16,16 --show | grep -o '#' | wc -l)
  pairs=$(column layouts.csv pairs "$pattern")
  [ "$pairs" = $((blocks * 16 * 16 * 2)) ] || fail "$pattern: $pairs pairs, the layout has $blocks blocks"
done

# ---- bad fixed and strided numbers: one line naming the pattern, exit 2
for pattern in fixed:0,4,1 fixed:16,0,1 fixed:16,4,0 fixed:16,-4,1 strided:0,4 strided:16,0; do
  expect 2 "--pattern $pattern" -- "$clattn" bench --pattern "$pattern" --nq 8 --hq 1 --d 8
done
expect 2 "--pattern fixed:16,4,5: SUMMARY: must be at most the STRIDE (4)" -- \
  "$clattn" bench --pattern fixed:16,4,5 --nq 8 --hq 1 --d 8
expect 2 "--pattern fixed:16,1152921504606846977,1: STRIDE" -- \
  "$clattn" bench --pattern fixed:16,1152921504606846977,1 --nq 8 --hq 1 --d 8 # over 2^60
for pattern in fixed:16,4 strided:16 strided:16,4,1 fixed; do
  expect 2 "expected a list of" -- "$clattn" bench --pattern "$pattern" --nq 8 --hq 1 --d 8
done

finish cli_bench_curve
