#!/usr/bin/env bash
# `clattn layer` end to end: a multi-head attention layer from .npy files on the device against
# `--path reference` with --compare (self-attention with a causal mask, biases and a head mask;
# cross-attention with a window; float16 storage; each attention path), and what it refuses
# (one clear line, the documented exit status, no output file). Inputs are slices of a
# `clattn check --dump` array (cli_common.sh's npy_take). Usage: cli_layer.sh PATH/TO/clattn
# [RUNNER], where RUNNER, a command prefix (scripts/oclgrind-check.sh passes oclgrind), runs one
# device call against the reference, and nothing else.
set -uo pipefail
clattn="$(realpath "$1")"
runner=(${2:-})
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

# ---- inputs: d_model 32, Hq 4, Hkv 2, D 8; X [2, 9, 32]; X_kv [2, 13, 24] (d_kv 24)
index=$("$clattn" check --list --quick | grep -m1 -F "Nq=113 Nk=203 Dqk=64" | awk '{print $1}')
"$clattn" check --quick --case "$index" --path reference --dump "$work/cases" > /dev/null
pool="$work/cases/case-$index/k.npy" # 25984 values in [-1, 1]
npy_take "$pool" "$work/x.npy" "(2, 9, 32)" 0
npy_take "$pool" "$work/xkv.npy" "(2, 13, 24)" 600
npy_take "$pool" "$work/wq.npy" "(32, 32)" 1300
npy_take "$pool" "$work/wk.npy" "(16, 32)" 2400
npy_take "$pool" "$work/wv.npy" "(16, 32)" 3000
npy_take "$pool" "$work/wo.npy" "(32, 32)" 3600
npy_take "$pool" "$work/wk24.npy" "(16, 24)" 4700
npy_take "$pool" "$work/wv24.npy" "(16, 24)" 5200
npy_take "$pool" "$work/bq.npy" "(32,)" 5700
npy_take "$pool" "$work/bv.npy" "(16,)" 5750
npy_take "$pool" "$work/bo.npy" "(32,)" 5800
npy_i4 "$work/mask.npy" "(4,)" 1 0 1 1 # kv head 0 keeps one query head, kv head 1 two
self=(layer --x "$work/x.npy" --wq "$work/wq.npy" --wk "$work/wk.npy" --wv "$work/wv.npy"
      --wo "$work/wo.npy" --heads 4 --bq "$work/bq.npy" --bv "$work/bv.npy" --bo "$work/bo.npy"
      --head-mask "$work/mask.npy" --causal)
cross=(layer --x "$work/x.npy" --x-kv "$work/xkv.npy" --wq "$work/wq.npy" --wk "$work/wk24.npy"
       --wv "$work/wv24.npy" --wo "$work/wo.npy" --heads 4 --kv-heads 2 --window=3,2)

# ---- the device against the reference
"$clattn" "${self[@]}" --out "$work/ref.npy" --path reference > /dev/null || fail "reference"
"${runner[@]}" "$clattn" "${self[@]}" --out "$work/y.npy" --compare "$work/ref.npy" > "$work/out" 2>&1 ||
  fail "self-attention on the device: $(cat "$work/out")"
grep -q "3 of 4 heads kept (attention Hq=3 Hkv=3)" "$work/out" ||
  fail "the head mask did not prune: $(cat "$work/out")"
if [ ${#runner[@]} -gt 0 ]; then # under a simulator: this one call only
  finish cli_layer
fi
for path in fused gemm; do
  "$clattn" "${self[@]}" --out "$work/y-$path.npy" --path "$path" --compare "$work/ref.npy" \
    > "$work/out" 2>&1 || fail "--path $path: $(cat "$work/out")"
done
"$clattn" "${cross[@]}" --out "$work/cross-ref.npy" --path reference > /dev/null || fail "cross reference"
"$clattn" "${cross[@]}" --out "$work/cross.npy" --compare "$work/cross-ref.npy" > "$work/out" 2>&1 ||
  fail "cross-attention: $(cat "$work/out")"
# ---- each row of the GEMM table ($CLATTN_GEMM) runs the projections, and says so
for gemm in clblast panels; do
  for which in self cross; do
    if [ "$which" = self ]; then call=("${self[@]}") ref="$work/ref.npy"; else call=("${cross[@]}") ref="$work/cross-ref.npy"; fi
    CLATTN_GEMM=$gemm "$clattn" "${call[@]}" --out "$work/y-$gemm.npy" --compare "$ref" > "$work/out" 2>&1 ||
      fail "CLATTN_GEMM=$gemm, $which: $(cat "$work/out")"
    grep -q "GEMMs $gemm (" "$work/out" || fail "CLATTN_GEMM=$gemm, $which: not named: $(cat "$work/out")"
  done
done
"$clattn" "${self[@]}" --gemm clblast --out "$work/y-option.npy" --compare "$work/ref.npy" > "$work/out" 2>&1 ||
  fail "--gemm clblast: $(cat "$work/out")"
grep -q "GEMMs clblast (" "$work/out" || fail "--gemm clblast: not named: $(cat "$work/out")"
expect 2 "--gemm: expected auto, clblast or panels" -- "$clattn" "${self[@]}" --out "$work/never.npy" --gemm sgemm
expect 2 "--gemm: expected auto, clblast or panels" -- "$clattn" "${self[@]}" --out "$work/never.npy" \
  --gemm sgemm --path reference # a usage error on every path
CLATTN_GEMM=sgemm "$clattn" "${self[@]}" --out "$work/never.npy" > "$work/out" 2>&1 &&
  fail "CLATTN_GEMM=sgemm ran"
grep -q "CLATTN_GEMM=sgemm: no such GEMM row" "$work/out" || fail "CLATTN_GEMM=sgemm: $(cat "$work/out")"
"$clattn" devices --variants | awk '$1 == "gemm" && $2 == "runs" { g = 1; next } g { print $1 }' \
  > "$work/gemms"
grep -qx clblast "$work/gemms" && grep -qx panels "$work/gemms" ||
  fail "devices --variants does not list the GEMM rows: $(cat "$work/gemms")"

# ---- bench --preset layer: the GEMM row chosen, named, and measured against the FMA peak
"$clattn" bench --preset layer --hq 4 --hkv 2 --d 8 --nq 40 --nk 24 --kept 4 --repeat 1 \
  --gemm panels --dtype bf16 --out "$work/bench" > "$work/out" 2>&1 || fail "bench layer: $(cat "$work/out")"
grep -q '"panels [^"]*bf16 B"$' "$work/bench/layer.csv" || fail "bench layer: no panels row in the CSV"
command -v python3 > /dev/null &&
python3 - "$work/bench/layer.csv" << 'PY' || fail "bench layer's CSV: $(cat "$work/bench/layer.csv")"
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
assert row["gemm"].startswith("panels") and "bf16 B" in row["gemm"], row["gemm"]
assert float(row["fma_peak_gflops"]) > 0 and float(row["gemm_percent_of_peak"]) > 0, row
assert row["nk"] == "24" and row["cross"] == "1", row
PY
expect 2 "--gemm: expected auto, clblast or panels" -- "$clattn" bench --preset layer --gemm sgemm
"$clattn" "${self[@]}" --storage f16 --out "$work/ref16.npy" --path reference > /dev/null ||
  fail "float16 reference"
"$clattn" "${self[@]}" --storage f16 --out "$work/y16.npy" --compare "$work/ref16.npy" > "$work/out" 2>&1 ||
  fail "--storage f16: $(cat "$work/out")"
head -c 128 "$work/y16.npy" | grep -q "'<f2'" || fail "--storage f16 did not write <f2"
cmp -s "$work/y.npy" "$work/cross.npy" && fail "cross-attention computed self-attention"

# ---- refusals: exit 1 (or 2 for usage), one line naming the problem, no output
out="$work/never.npy"
npy_i4 "$work/none.npy" "(4,)" 0 0 0 0
npy_i4 "$work/short-mask.npy" "(3,)" 1 1 1
expect 1 "keeps none" -- "$clattn" "${self[@]}" --out "$out" --head-mask "$work/none.npy"
expect 1 "a head mask is [4]" -- "$clattn" "${self[@]}" --out "$out" --head-mask "$work/short-mask.npy"
expect 1 "dimension 1 must be 32" -- "$clattn" "${self[@]}" --out "$out" --wq "$work/wk24.npy"
expect 1 "dimension 0 must be 32" -- "$clattn" "${self[@]}" --out "$out" --bq "$work/bv.npy"
expect 1 "give --x-kv" -- "$clattn" "${self[@]}" --out "$out" --wk "$work/wk24.npy" --wv "$work/wv24.npy"
expect 1 "not Hq*Dqk" -- "$clattn" "${self[@]}" --out "$out" --heads 3
expect 1 "expected a 3-D array" -- "$clattn" "${self[@]}" --out "$out" --x "$work/wq.npy"
expect 1 "share a type" -- "$clattn" "${cross[@]}" --out "$out" --x "$work/y16.npy"
expect 1 "no-such.npy" -- "$clattn" "${self[@]}" --out "$out" --wo "$work/no-such.npy"
expect 1 "bias shape" -- "$clattn" "${self[@]}" --out "$out" --bias "$work/bq.npy"
expect 1 "--compare" -- "$clattn" "${self[@]}" --out "$out" --compare "$work/wq.npy"
expect 2 "--heads is required" -- "$clattn" layer --x "$work/x.npy" --wq "$work/wq.npy" \
  --wk "$work/wk.npy" --wv "$work/wv.npy" --wo "$work/wo.npy" --out "$out"
expect 2 "--heads" -- "$clattn" "${self[@]}" --out "$out" --heads 0
expect 2 "same file" -- "$clattn" "${self[@]}" --out "$work/x.npy"
[ -e "$out" ] && fail "a refused run wrote its output"
"$clattn" help layer | grep -q "usage: clattn layer" || fail "help layer"

finish cli_layer
