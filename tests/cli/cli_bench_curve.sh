#!/usr/bin/env bash
# `clattn bench --preset sparse`, the density curve, at a tiny length: the preset's patterns
# scaled to N (every family at several densities), each record's speed-up over full attention,
# ideal speed-up and fraction of the ideal in the CSV and JSON (empty and null without a full
# record), the summary after the table, plot.gp drawing time against density with the ideal
# line; the fixed: and strided: patterns are the library's layouts, and their bad numbers are
# refused with one line (exit 2). Usage: cli_bench_curve.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1

# bench exits 1 without gnuplot (the CSV, JSON and plot.gp are still written); say so once.
has_gnuplot=1
command -v gnuplot > /dev/null || has_gnuplot=0
[ "$has_gnuplot" -eq 1 ] || echo "cli_bench_curve: gnuplot is not installed: plot.png is not checked"
# run_bench NAME ARGS...: a bench that must succeed (but for the missing gnuplot)
run_bench() {
  local name="$1"
  shift
  "$clattn" bench "$@" > "$name.out" 2> "$name.err"
  local rc=$?
  [ "$rc" -eq 0 ] || { [ "$has_gnuplot" -eq 0 ] && grep -q "gnuplot failed or is missing" "$name.err"; } ||
    fail "bench $*: exit $rc: $(cat "$name.err")"
}

# column FILE NAME [PATTERN]: a CSV column (the row of PATTERN only), one value a line
column() {
  python3 -c 'import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    if len(sys.argv) < 4 or row["pattern"] == sys.argv[3]: print(row[sys.argv[2]])' "$@"
}

# ---- the preset at N = 256: its lengths scaled by 256/16384, every record against full
run_bench curve --preset sparse --nq 256 --hq 1 --repeat 1 --warmup 0 --out curve
head -1 curve/bench.csv | grep -q ',kernel,speedup_over_full,ideal_speedup,fraction_of_ideal$' ||
  fail "the CSV's last columns: $(head -1 curve/bench.csv)"
python3 - curve/bench.csv curve/bench.json << 'PY' || fail "the preset's CSV and JSON: $(cat curve/bench.csv)"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
records = json.load(open(sys.argv[2]))["records"]
assert len(rows) == len(records) >= 20, len(rows)
families = {}
for row, rec in zip(rows, records):
    pattern = row["pattern"]
    speedup, ideal, fraction = (float(row[k]) for k in ("speedup_over_full", "ideal_speedup", "fraction_of_ideal"))
    density = int(row["pairs"]) / (int(row["b"]) * int(row["hq"]) * int(row["nq"]) * int(row["nk"]))
    assert abs(ideal - 1 / density) <= 1e-4 + 1e-5 / density, (pattern, ideal, density)
    assert abs(fraction - speedup / ideal) <= 2e-4 + 1e-3 * fraction, (pattern, speedup, ideal, fraction)
    assert rec["pattern"] == pattern and abs(rec["fraction_of_ideal"] - fraction) <= 1e-4, (rec, row)
    full_ms, ms = float(next(r for r in rows if r["pattern"] == "full")["ms_median"]), float(row["ms_median"])
    rounding = speedup * (0.5e-4 / full_ms + 0.5e-4 / ms) + 1e-4  # the CSV's 4 decimals
    assert abs(speedup - full_ms / ms) <= rounding, (row, full_ms)
    families.setdefault(pattern.split(":")[0], set()).add(round(density, 6))
assert [r["fraction_of_ideal"] for r in rows if r["pattern"] == "full"] == ["1.0000"], rows[0]
for name in ("window", "dilated", "longformer", "bigbird", "fixed", "strided"):
    assert len(families.get(name, ())) >= 3, (name, families)  # a curve: several densities each
assert min(families["window"]) < 0.02 and min(families["dilated"]) < 0.01, families  # scaled to N
assert 0.1 < max(families["window"]) < 0.2 and max(families["strided"]) < 0.3, families
PY
grep -q "bigbird:1,3,2,3" curve/bench.csv || fail "the preset's bigbird blocks are not scaled to 1 at N=256"
grep -q "^against full attention" curve.out || fail "no summary after the table: $(cat curve.out)"
summary=$(sed -n '/^against full attention/,$p' curve.out | grep -c '^fused ')
[ "$summary" -eq "$(($(wc -l < curve/bench.csv) - 1))" ] || fail "the summary has $summary rows: $(cat curve.out)"
grep -q "^set xlabel 'density" curve/plot.gp || fail "plot.gp does not plot against density: $(cat curve/plot.gp)"
grep -q "^set logscale xy" curve/plot.gp || fail "plot.gp is not log-log"
grep -q "title 'ideal: full''s ms x density'" curve/plot.gp || fail "plot.gp has no ideal line"
grep -q "N=256, H=1, D=64, bhsd" curve/plot.gp || fail "plot.gp's title lacks N, H, D, layout"
grep -q "title 'fixed'" curve/plot.gp || fail "plot.gp has no series for the fixed family"
ideal=$(grep -o "series-[0-9]*.dat' using 1:2 with lines linecolor[^,]*ideal" curve/plot.gp | grep -o 'series-[0-9]*')
full_ms=$(column curve/bench.csv ms_median full)
[ -n "$ideal" ] && awk -v ms="$full_ms" '$1 == 1 && ($2 - ms) ^ 2 < 1e-8 { ok = 1 } END { exit !ok }' \
  "curve/$ideal.dat" || fail "the ideal line does not reach full's $full_ms ms at density 1"
[ "$has_gnuplot" -eq 0 ] || [ "$(head -c 4 curve/plot.png | tail -c 3)" = PNG ] || fail "curve/plot.png is not a PNG"

# ---- --pattern with the preset: those patterns as given, still plotted against density
run_bench given --preset sparse --nq 256 --hq 1 --repeat 1 --warmup 0 --pattern full,window:8,8 --out given
[ "$(column given/bench.csv pattern | tr '\n' ' ')" = "full window:8,8 " ] ||
  fail "--pattern did not replace the preset's patterns: $(cat given/bench.csv)"
grep -q "^set xlabel 'density" given/plot.gp || fail "--preset sparse --pattern: not against density"

# ---- no full record: the columns are empty, the JSON fields null, the other plot
run_bench nofull --nq 64 --hq 1 --d 8 --repeat 1 --pattern causal,strided:16,2 --csv nofull.csv \
  --json nofull.json --out nofull
[ "$(column nofull.csv fraction_of_ideal | tr '\n' ' ')" = "  " ] &&
  [ "$(column nofull.csv speedup_over_full | tr '\n' ' ')" = "  " ] || fail "columns filled without full: $(cat nofull.csv)"
[ "$(grep -c '"fraction_of_ideal": null' nofull.json)" -eq 2 ] || fail "JSON without full: $(cat nofull.json)"
grep -q "^set xlabel 'sequence length" nofull/plot.gp || fail "a plain sweep's plot is not against Nq"
grep -q "against full attention" nofull.out && fail "a plain sweep printed the density summary"

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
