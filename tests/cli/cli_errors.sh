#!/usr/bin/env bash
# How the clattn program fails, each check a regression test of a fixed defect: an option never
# swallows the next option or takes an empty value; outputs that collide with each other or
# with an input are refused; a failing run writes nothing (all outputs or none, --compare read
# first); --compare and --compare-lse name shapes and report on stderr; check --dump failures
# and --quick replay hints; the reference path names zero sizes; bench refuses what run and
# pattern refuse and checks its folder first; device specs with colons. Usage: cli_errors.sh
# PATH/TO/clattn PATH/TO/clattn-testing (the test build's copy of the program, whose library has
# the test hooks: a build made to fail)
set -uo pipefail
clattn="$(realpath "$1")" clattn_hooked="$(realpath "$2")"
# fail, expect STATUS TEXT -- COMMAND...
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1

one='\x00\x00\x80\x3f' zero='\x00\x00\x00\x00'

# Q [B=1, Nq=5, Hq=2, D=4], K and V [1, Nk=6, Hkv=1, 4]; V all ones, so O is all ones.
make_npy q.npy "(1, 5, 2, 4)" "$one"
make_npy k.npy "(1, 6, 1, 4)" "$one"
make_npy v.npy "(1, 6, 1, 4)" "$one"
make_npy zeros.npy "(1, 5, 2, 4)" "$zero"      # O's shape, other values
make_npy transposed.npy "(1, 2, 5, 4)" "$one"  # O's element count, not its shape
run=(run --q q.npy --k k.npy --v v.npy --path reference)
"$clattn" "${run[@]}" --out ref.npy > /dev/null || fail "the reference run of the inputs"

# ---- 1, 14: a value is never the next option, and never empty
expect 2 "option --lse needs a value" -- "$clattn" "${run[@]}" --out o.npy --lse --causal
[ -e --causal ] && fail "--lse --causal wrote a file named --causal"
expect 2 "option --window needs a value" -- "$clattn" "${run[@]}" --window --out o.npy
expect 2 "option --out needs a value" -- "$clattn" "${run[@]}" --out=
expect 2 "option --out needs a value" -- "$clattn" "${run[@]}" --out ""
expect 2 "option --device needs a value" -- "$clattn" "${run[@]}" --out o.npy --device=
[ -e o.npy ] && fail "a rejected command wrote o.npy"

# ---- 2: outputs collide neither with each other nor with an input
expect 2 "--out and --lse" -- "$clattn" "${run[@]}" --out same.npy --lse same.npy
expect 2 "--out and --lse" -- "$clattn" "${run[@]}" --out ./same.npy --lse same.npy
[ -e same.npy ] && fail "--out X --lse X wrote X"
expect 2 "--out and --q" -- "$clattn" "${run[@]}" --out ./q.npy
expect 2 "--lse and --compare" -- "$clattn" "${run[@]}" --out o.npy --lse ref.npy --compare ref.npy
cmp -s q.npy <(make_npy /dev/stdout "(1, 5, 2, 4)" "$one") || fail "Q was overwritten"

# ---- 3: a failing run writes nothing and leaves existing files as they were
echo old > o.npy
expect 1 "/nonexistent/l.npy" -- "$clattn" "${run[@]}" --out o.npy --lse /nonexistent/l.npy
mkdir folder
expect 1 "folder" -- "$clattn" "${run[@]}" --out o.npy --lse folder
expect 1 "nonexist.npy" -- "$clattn" "${run[@]}" --out o.npy --compare nonexist.npy
printf 'not an npy file' > junk.npy
expect 1 "junk.npy" -- "$clattn" "${run[@]}" --out o.npy --compare junk.npy
cmp -s o.npy <(echo old) || fail "a failing run replaced o.npy"
ls ./*.run-* ./*.tmp.* 2> /dev/null && fail "temporary files were left behind"

# ---- 4, 5: --compare checks the shape, and a mismatch is one line on stderr (O still written)
expect 1 "[1, 2, 5, 4] differs from O's [1, 5, 2, 4]" -- \
  "$clattn" "${run[@]}" --out o.npy --compare transposed.npy
cmp -s o.npy <(echo old) || fail "a run with a misshapen --compare replaced o.npy"
expect 1 "outside the tolerance" -- "$clattn" "${run[@]}" --out o.npy --compare zeros.npy
grep -q "outside" stdout && fail "--compare reported its mismatch on stdout"
cmp -s o.npy ref.npy || fail "O was not written when --compare found values outside the tolerance"
"$clattn" "${run[@]}" --out o2.npy --compare ref.npy > stdout 2> stderr || fail "--compare ref.npy"
grep -q "within the tolerance" stdout || fail "--compare: no line on stdout when it passes"

# ---- --compare-lse: LSE [B,Hq,Nq] against a saved one, |lse - ref| <= 1e-4*max(1,|ref|), -inf
# exactly; read first like --compare; --compare with --lse alone says LSE was not compared
"$clattn" "${run[@]}" --out ref.npy --lse ref-lse.npy > /dev/null || fail "the reference's LSE"
make_npy lse-zeros.npy "(1, 2, 5)" "$zero"
make_npy lse-empty.npy "(1, 2, 5)" '\x00\x00\x80\xff' # -inf: rows with no key
"$clattn" run --q q.npy --k k.npy --v v.npy --out o3.npy --lse l3.npy --compare ref.npy \
  --compare-lse ref-lse.npy > stdout 2> stderr || fail "--compare-lse ref-lse.npy: $(cat stderr)"
grep -q "^compare LSE with ref-lse.npy: all 10 values within the tolerance" stdout ||
  fail "--compare-lse: no line on stdout when it passes: $(cat stdout)"
for bad in lse-zeros lse-empty; do
  rm -f o3.npy l3.npy
  expect 1 "--compare-lse $bad.npy: 10 of 10 values outside the tolerance" -- \
    "$clattn" "${run[@]}" --out o3.npy --lse l3.npy --compare-lse "$bad.npy"
  cmp -s l3.npy ref-lse.npy || fail "--compare-lse $bad.npy: LSE not written"
done
grep -q "LSE element 0: got 3.79" stderr || fail "--compare-lse: the first mismatch: $(cat stderr)"
echo old > o3.npy
expect 1 "--compare-lse ref.npy: shape [1, 5, 2, 4] differs from LSE's [1, 2, 5]" -- \
  "$clattn" "${run[@]}" --out o3.npy --compare-lse ref.npy
cmp -s o3.npy <(echo old) || fail "a run with a misshapen --compare-lse replaced o3.npy"
expect 2 "--lse and --compare-lse" -- \
  "$clattn" "${run[@]}" --out o3.npy --lse ref-lse.npy --compare-lse ref-lse.npy
"$clattn" "${run[@]}" --out o3.npy --lse l3.npy --compare ref.npy > stdout 2>&1 ||
  fail "--compare with --lse: $(cat stdout)"
grep -q "^LSE not compared: --compare checks O; --compare-lse REF.npy checks LSE" stdout ||
  fail "--compare with --lse did not say that LSE was not compared: $(cat stdout)"

# ---- 8: the reference path names zero sizes as the device paths do
make_npy q0.npy "(1, 5, 0, 4)" "$zero"
make_npy k0.npy "(1, 6, 0, 4)" "$zero"
make_npy b0.npy "(0, 5, 2, 4)" "$zero"
for path in reference fused; do
  expect 1 "every size must be >= 1 (B=1 Hq=0" -- \
    "$clattn" run --q q0.npy --k k.npy --v v.npy --out z.npy --path "$path"
done
expect 1 "every size must be >= 1 (B=1 Hq=0" -- \
  "$clattn" run --q q0.npy --k k.npy --v v.npy --out z.npy --alibi # (it said nothing)
expect 1 "--kv-storage q8_0: head dims must be multiples of 32 (Dqk=4 Dv=4)" -- \
  "$clattn" run --q q.npy --k k.npy --v v.npy --out z.npy --kv-storage q8_0
make_npy slopes.npy "(2, 2)" "$one"
expect 1 "--alibi-slopes slopes.npy: expected <f4 [2] ([Hq]) or [1, 2] ([B, Hq]), got <f4 [2, 2]" \
  -- "$clattn" run --q q.npy --k k.npy --v v.npy --out z.npy --alibi-slopes slopes.npy
expect 1 "Hkv=0" -- "$clattn" run --q q.npy --k k0.npy --v k0.npy --out z.npy --path reference
make_npy k1.npy "(0, 6, 1, 4)" "$zero"
expect 1 "every size must be >= 1 (B=0 Hq=2" -- \
  "$clattn" run --q b0.npy --k k1.npy --v k1.npy --out z.npy --path reference
[ -e z.npy ] && fail "a run with a zero size wrote its output"

# ---- 6: check --dump that cannot write fails
expect 1 "/nonexistent/d" -- "$clattn" check --quick --case 0 --path reference --dump /nonexistent/d
expect 1 "not a folder" -- "$clattn" check --quick --case 0 --path reference --dump junk.npy

# ---- 7: a failing case of the quick sweep is replayed with --quick, under its own number
CLATTN_CACHE_DIR=off CLATTN_TEST_FAIL_BUILD=lanes.cl \
  "$clattn_hooked" check --quick --path fused --variant lanes > stdout 2> stderr
hint=$(grep -m1 "replay with:" stderr)
case=$(grep -m1 "^FAIL case" stderr)
[[ "$hint" == *"clattn check --quick --case"* ]] || fail "the replay hint lacks --quick: $hint"
CLATTN_CACHE_DIR=off CLATTN_TEST_FAIL_BUILD=lanes.cl \
  "$clattn_hooked" check --quick --storage f16 --case 0 --path fused --variant lanes > stdout 2> stderr
hint=$(grep -m1 "replay with:" stderr)
[[ "$hint" == *"clattn check --quick --storage f16 --case 0"* ]] || fail "the replay hint lacks --storage: $hint"
index=$(sed -n 's/^FAIL case \([0-9]*\).*/\1/p' <<< "$case")
listed=$("$clattn" check --quick --list | awk -v n="$index" '$1 == n { $1 = ""; print substr($0, 2) }')
[ -n "$index" ] && [[ "$case" == *": $listed" ]] || fail "quick case $index is not '$case': '$listed'"

# ---- 9, 10, 11: bench refuses early what it cannot do
if "$clattn" bench --path host --nq 8 --hq 1 --d 8 --repeat 1 > /dev/null 2>&1; then
  expect 2 "float32 only" -- "$clattn" bench --dtype f16 --path host --nq 8 --hq 1 --d 8
  "$clattn" bench --dtype f16 --path host,fused --nq 8 --hq 1 --d 8 --repeat 1 > stdout 2> stderr ||
    fail "bench --dtype f16 --path host,fused: $(cat stderr)"
  grep -q "skipping --path host" stderr || fail "bench --dtype f16 skipped host in silence"
fi
expect 2 "--layout: expected one of bshd|bhsd" -- "$clattn" bench --layout bsdh
expect 1 "/nonexistent/q" -- "$clattn" bench --preset quick --out /nonexistent/q
[ -s stdout ] && fail "bench --out /nonexistent/q ran the sweep first"
expect 1 "not a folder" -- "$clattn" bench --preset quick --out junk.npy
expect 1 "--csv /nonexistent/b.csv" -- "$clattn" bench --preset quick --csv /nonexistent/b.csv
[ -s stdout ] && fail "bench --csv /nonexistent/b.csv ran the sweep first"
expect 1 "--json $work: is a folder" -- "$clattn" bench --preset quick --json "$work"
# a folder whose name leaves no room for its files' names (which once came out cut short)
long="$work/$(printf 'a%.0s' {1..200})/$(printf 'b%.0s' {1..200})/$(printf 'c%.0s' {1..200})"
long="$long/$(printf 'd%.0s' {1..200})/$(printf 'e%.0s' {1..200})"
mkdir -p "$long"
expect 1 "at most 960 leave room" -- "$clattn" bench --preset quick --out "$long"
[ -s stdout ] && fail "bench --out with a long name ran the sweep first"
# an input under that long name: the message keeps the problem after the path (it was cut off)
head -c 140 q.npy > "$long/short.npy" # the header and 3 of 40 values
expect 1 "short.npy: data holds" -- "$clattn" run --q "$long/short.npy" --k k.npy --v v.npy \
  --out z.npy
# the decode preset writes --csv and --json beside its folder's files
"$clattn" bench --preset decode --dtype f32 --nk 64 --hq 2 --hkv 2 --d 16 --steps 2 --repeat 1 \
  --warmup 0 --out dout --csv mine.csv --json mine.json > stdout 2> stderr ||
  fail "decode: $(cat stderr)"
for file in dout/decode.csv dout/decode.json mine.csv mine.json; do
  [ -s "$file" ] || fail "bench --preset decode --out dout --csv --json did not write $file"
done
cmp -s mine.csv dout/decode.csv || fail "--csv differs from the folder's decode.csv"
expect 1 "--json /nonexistent/c.json" -- "$clattn" check --quick --json /nonexistent/c.json
[ -s stdout ] && fail "check --json /nonexistent/c.json ran the sweep first"
for pattern in window:-2,0 window:-5,-5 dilated:4,4,0 dilated:4,4,-1 bigbird:16,3,1,1,-1 \
               longformer:-1,2 bigbird:0,3,1,1 bigbird:16,4,1,1 blocks:ref.npy,0,4; do
  expect 2 "--pattern $pattern" -- "$clattn" bench --pattern "$pattern" --nq 8 --hq 1 --d 8
done

# outputs that would overwrite each other or an input, heads that do not divide, options a mode
# does not read, and sweeps past what a run holds are refused before anything is measured
small=(bench --nq 8 --hq 1 --d 8 --repeat 1)
expect 2 "--csv and --json name the same file 'x.csv'" -- "$clattn" "${small[@]}" --csv x.csv \
  --json x.csv
expect 2 "--json and the folder of --out name the same file" -- "$clattn" "${small[@]}" \
  --out sameout --json sameout/bench.csv
expect 2 "would overwrite the layout of --pattern blocks:ref.npy" -- "$clattn" "${small[@]}" \
  --pattern blocks:ref.npy,4,4 --csv ref.npy
expect 2 "--hq 2 and --hkv 3" -- "$clattn" "${small[@]}" --hq 2 --hkv 2,3 --csv heads.csv
expect 2 "--variant does not apply to --preset decode" -- "$clattn" bench --preset decode \
  --variant flash
expect 2 "--hq: --preset decode takes one value" -- "$clattn" bench --preset decode --hq 8,16
expect 2 "--steps does not apply to this sweep" -- "$clattn" "${small[@]}" --steps 3
expect 2 "--repeat: expected an integer from 1 to 256" -- "$clattn" "${small[@]}" --repeat 1000
expect 2 "--nq: a list of at most 16 values" -- "$clattn" bench --nq "$(seq -s, 17)"
many=$(seq -s, 1 16)
patterns="full,causal$(for w in $(seq 46); do printf ',window:%d,%d' "$w" "$w"; done)"
expect 2 "the sweep has 4608 measurements" -- "$clattn" bench --nq "$many" --b 1,2,3 \
  --pattern "$patterns" --path fused,reference
ls x.csv heads.csv sameout/bench.csv ref.npy.tmp.* 2> /dev/null && fail "a refused bench wrote a file"
# a path named twice is measured once
"$clattn" "${small[@]}" --path fused,fused,reference --csv twice.csv > /dev/null 2>&1 ||
  fail "bench --path fused,fused,reference failed"
[ "$(grep -c ',fused,' twice.csv)" -eq 1 ] || fail "bench measured a path named twice twice: $(cat twice.csv)"
# --jobs beyond the children an interrupt stops
expect 2 "--jobs: expected an integer from 1 to 16" -- "$clattn" tune --jobs 17
expect 2 "--jobs: expected an integer from 1 to 16" -- "$clattn" cache warm --jobs 99
expect 2 "--max-mb: expected a size >= 0 and below 1e+12 MiB, got '1e12'" -- \
  "$clattn" cache trim --max-mb 1e12

# ---- bench --out: its files are written together, plot.png drawn by gnuplot from the same
# data first; without gnuplot the rest is written, plot.png stays as it was, and the exit is 1
bench=(bench --nq 16,32 --hq 1 --d 8 --repeat 1 --path fused --out plots)
if command -v gnuplot > /dev/null; then
  "$clattn" "${bench[@]}" > stdout 2> stderr || fail "bench --out plots: $(cat stderr)"
  for file in bench.csv bench.json plot.gp series-0.dat plot.png; do
    [ -s "plots/$file" ] || fail "bench --out plots did not write $file"
  done
  [ "$(head -c 4 plots/plot.png | tail -c 3)" = PNG ] || fail "plots/plot.png is not a PNG"
  grep -q "plot 'plots/series-0.dat' using 1:2" plots/plot.gp ||
    fail "plot.gp does not read series-0.dat: $(cat plots/plot.gp)"
  echo old > plots/plot.png && echo old > plots/bench.csv
  expect 1 "gnuplot failed or is missing" -- env PATH=/nonexistent "$clattn" "${bench[@]}"
  cmp -s plots/plot.png <(echo old) || fail "plot.png was replaced although gnuplot is missing"
  cmp -s plots/bench.csv <(echo old) && fail "bench.csv was not written when gnuplot is missing"
  ls plots/*.tmp.* 2> /dev/null && fail "bench left temporaries"
  # a gnuplot that fails after writing part of its picture: that part is removed too
  mkdir fakegp
  cat > fakegp/gnuplot << 'SH'
#!/bin/sh
out=$(sed -n "s/^set output '\(.*\)'$/\1/p")
echo partial > "$out"
exit 1
SH
  chmod +x fakegp/gnuplot
  expect 1 "gnuplot failed or is missing" -- env PATH="$work/fakegp:$PATH" "$clattn" "${bench[@]}"
  cmp -s plots/plot.png <(echo old) || fail "a failing gnuplot replaced plot.png"
  ls plots/*.tmp.* 2> /dev/null && fail "bench left a failing gnuplot's temporary"
  # a folder whose name holds a quote: gnuplot's strings escape it
  "$clattn" bench --nq 16 --hq 1 --d 8 --repeat 1 --out "it's" > stdout 2> stderr ||
    fail "bench --out \"it's\": $(cat stderr)"
  [ "$(head -c 4 "it's/plot.png" | tail -c 3)" = PNG ] || fail "bench --out \"it's\" drew no plot"
else
  echo "cli_errors: gnuplot is not installed: bench --out's plot is not checked"
fi

# ---- 12, 13: a spec with a colon that is not P:D is a name, and names no device here (exit 1)
for spec in "gfx90a:sramecc+:xnack-" "0:" ":0" "a:b"; do
  expect 1 "no device matches '$spec'" -- "$clattn" run --q q.npy --k k.npy --v v.npy \
    --out d.npy --device "$spec"
done
"$clattn" run --q q.npy --k k.npy --v v.npy --out d.npy --device 0:0 > /dev/null || fail "--device 0:0"

finish cli_errors
