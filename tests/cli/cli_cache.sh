#!/usr/bin/env bash
# `clattn run --cache-len` (docs/semantics.md sections 5 and 6) end to end through .npy files: attention over
# a contiguous cache and over the same cache as a page pool (identical results), with rows
# appended and per-sequence query lengths, on the device against the reference; the caches
# written after the append; q8_0 refusing a block whose scale overflows; and the usage errors. Inputs come from `clattn check --dump`, the
# <i4 lengths and tables from cli_common.sh's npy_i4. Usage: cli_cache.sh PATH/TO/clattn [RUNNER]
# where RUNNER, a command prefix (scripts/oclgrind-check.sh passes oclgrind), runs the attention
# commands.
set -uo pipefail
clattn="$(realpath "$1")"
runner=(${2:-})
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

case_dir() { # DESCRIPTION: dumps the first quick check case matching it, prints its folder
  local index
  index=$("$clattn" check --list --quick | grep -m1 -F -- "$1" | awk '{print $1}')
  "$clattn" check --quick --case "$index" --path reference --dump "$work/cases" > /dev/null
  echo "$work/cases/case-$index"
}

# The cache: case B=2 Hq=2 Hkv=2 Nk=47 D=32 (K, V [2, 47, 2, 32], capacity 47), Q [2, 33, 2, 32];
# the new rows: K, V [2, 41, 2, 32] of another case.
cache=$(case_dir "B=2 Hq=2 Hkv=2 Nq=33 Nk=47 Dqk=32 Dv=32")
rows=$(case_dir "B=2 Hq=4 Hkv=2 Nq=29 Nk=41 Dqk=32 Dv=32")
npy_i4 "$work/len.npy" "(2,)" 20 42
npy_i4 "$work/new.npy" "(2,)" 3 5
npy_i4 "$work/qlen.npy" "(2,)" 1 4
common=(run --q "$cache/q.npy" --cache-len "$work/len.npy" --k-new "$rows/k.npy" --v-new "$rows/v.npy"
        --new-len "$work/new.npy" --q-len "$work/qlen.npy" --causal --window=30,-1)

# ---- contiguous: the device against the reference, and the caches after the append
"${runner[@]}" "$clattn" "${common[@]}" --k "$cache/k.npy" --v "$cache/v.npy" --out "$work/ref.npy" \
  --lse "$work/ref-lse.npy" --path reference > /dev/null || fail "reference over the cache"
for path in auto fused; do
  "${runner[@]}" "$clattn" "${common[@]}" --k "$cache/k.npy" --v "$cache/v.npy" --out "$work/o-$path.npy" \
    --path "$path" --compare "$work/ref.npy" --k-cache-out "$work/kc.npy" \
    --v-cache-out "$work/vc.npy" > "$work/out" 2>&1 || fail "--path $path: $(cat "$work/out")"
done
grep -q "split" "$work/out" || fail "the split variant did not serve the cache: $(cat "$work/out")"
[ "$(stat -c %s "$work/kc.npy")" -eq "$(stat -c %s "$cache/k.npy")" ] || fail "K cache size"
cmp -s "$work/kc.npy" "$cache/k.npy" && fail "the append changed nothing in the K cache"

# ---- V narrower than K (Dv 16, Dqk 32): V's cache is written with V's shape (it was written
# with K's, and read past the end of V)
npy_take "$cache/v.npy" "$work/v16.npy" "(2, 47, 2, 16)"
npy_take "$rows/v.npy" "$work/vn16.npy" "(2, 41, 2, 16)"
narrow=(run --q "$cache/q.npy" --k "$cache/k.npy" --v "$work/v16.npy" --cache-len "$work/len.npy"
        --k-new "$rows/k.npy" --v-new "$work/vn16.npy" --new-len "$work/new.npy" --causal)
"$clattn" "${narrow[@]}" --out "$work/n-ref.npy" --path reference > /dev/null ||
  fail "reference, Dv 16"
"${runner[@]}" "$clattn" "${narrow[@]}" --out "$work/n.npy" --compare "$work/n-ref.npy" \
  --k-cache-out "$work/kc16.npy" --v-cache-out "$work/vc16.npy" > "$work/out" 2>&1 ||
  fail "Dv 16: $(cat "$work/out")"
head -c 128 "$work/vc16.npy" | grep -q "'shape': (2, 47, 2, 16)" ||
  fail "V's cache has not V's shape: $(head -c 128 "$work/vc16.npy" | tr -cd '[:print:]')"
[ "$(stat -c %s "$work/vc16.npy")" -eq "$(stat -c %s "$work/v16.npy")" ] || fail "V cache size"
cmp -s "$work/vc16.npy" "$work/v16.npy" && fail "the append changed nothing in the V cache"

# ---- the same cache as a pool of 94 pages of one row: identical results
table=()
for ((p = 0; p < 94; p++)); do table+=("$p"); done
npy_i4 "$work/table.npy" "(2, 47)" "${table[@]}"
npy_reshape "$cache/k.npy" "$work/kpool.npy" "(94, 1, 2, 32)"
npy_reshape "$cache/v.npy" "$work/vpool.npy" "(94, 1, 2, 32)"
"${runner[@]}" "$clattn" "${common[@]}" --k "$work/kpool.npy" --v "$work/vpool.npy" --page-table "$work/table.npy" \
  --page-size 1 --out "$work/o-paged.npy" > "$work/out" 2>&1 || fail "paged: $(cat "$work/out")"
cmp -s "$work/o-paged.npy" "$work/o-auto.npy" || fail "paged and contiguous results differ"

# ---- q8_0 K/V (--kv-storage): the cache quantised, the new rows quantised on the device;
# contiguous and paged against the reference of the same quantised cache, and a plain call
"${runner[@]}" "$clattn" "${common[@]}" --k "$cache/k.npy" --v "$cache/v.npy" --kv-storage q8_0 \
  --out "$work/q8-ref.npy" --path reference > /dev/null || fail "q8_0 reference over the cache"
"${runner[@]}" "$clattn" "${common[@]}" --k "$cache/k.npy" --v "$cache/v.npy" --kv-storage q8_0 \
  --out "$work/q8.npy" --compare "$work/q8-ref.npy" > "$work/out" 2>&1 ||
  fail "q8_0 cache: $(cat "$work/out")"
"${runner[@]}" "$clattn" "${common[@]}" --k "$work/kpool.npy" --v "$work/vpool.npy" --kv-storage q8_0 \
  --page-table "$work/table.npy" --page-size 1 --out "$work/q8-paged.npy" > "$work/out" 2>&1 ||
  fail "q8_0 paged: $(cat "$work/out")"
cmp -s "$work/q8-paged.npy" "$work/q8.npy" || fail "q8_0 paged and contiguous results differ"
cmp -s "$work/q8.npy" "$work/o-auto.npy" && fail "q8_0 gave the float cache's result exactly"
plain=(run --q "$rows/q.npy" --k "$rows/k.npy" --v "$rows/v.npy" --causal --kv-storage q8_0)
"$clattn" "${plain[@]}" --out "$work/q8-plain-ref.npy" --path reference > /dev/null ||
  fail "q8_0 plain reference"
"${runner[@]}" "$clattn" "${plain[@]}" --out "$work/q8-plain.npy" --compare "$work/q8-plain-ref.npy" \
  > "$work/out" 2>&1 || fail "q8_0 plain call: $(cat "$work/out")"
grep -q "split" "$work/out" || fail "the split variant did not serve q8_0: $(cat "$work/out")"

# ---- refusals
out="$work/never.npy"
expect 2 "--k-new needs --cache-len" -- "$clattn" run --q "$cache/q.npy" --k "$cache/k.npy" \
  --v "$cache/v.npy" --out "$out" --k-new "$rows/k.npy" --v-new "$rows/v.npy"
expect 2 "go together" -- "$clattn" "${common[@]}" --k "$cache/k.npy" --v "$cache/v.npy" \
  --out "$out" --page-table "$work/table.npy"
expect 1 "expected <i4" -- "$clattn" run --q "$cache/q.npy" --k "$cache/k.npy" --v "$cache/v.npy" \
  --out "$out" --cache-len "$cache/q.npy"
npy_i4 "$work/full.npy" "(2,)" 47 47
expect 1 "sequence 0" -- "$clattn" run --q "$cache/q.npy" --k "$cache/k.npy" --v "$cache/v.npy" \
  --out "$out" --cache-len "$work/full.npy" --k-new "$rows/k.npy" --v-new "$rows/v.npy"
expect 2 "no .npy form" -- "$clattn" "${common[@]}" --k "$cache/k.npy" --v "$cache/v.npy" \
  --out "$out" --kv-storage q8_0 --k-cache-out "$work/kc2.npy" --v-cache-out "$work/vc2.npy"
expect 2 "expected one of" -- "$clattn" "${plain[@]}" --out "$out" --kv-storage q4
expect 1 "not q8_0" -- "$clattn" "${plain[@]}" --out "$out" --path gemm
# an append from row 7 that runs into the missing page of row 8 (it used to write past the pool)
npy_take "$cache/k.npy" "$work/pool.npy" "(2, 8, 1, 16)"
npy_take "$cache/q.npy" "$work/q1.npy" "(1, 1, 1, 16)"
npy_take "$rows/k.npy" "$work/kn1.npy" "(1, 2, 1, 16)"
npy_i4 "$work/len7.npy" "(1,)" 7
npy_i4 "$work/tab1.npy" "(1, 2)" 0 -1
expect 1 "row 8 has no page" -- "$clattn" run --q "$work/q1.npy" --k "$work/pool.npy" \
  --v "$work/pool.npy" --cache-len "$work/len7.npy" --page-table "$work/tab1.npy" --page-size 8 \
  --k-new "$work/kn1.npy" --v-new "$work/kn1.npy" --out "$out"
[ -e "$out" ] && fail "a refused run wrote its output"

# ---- q8_0 and a value whose block's float16 scale overflows (|x| >= 8321040; issue 29): the
# block would be NaN, so the run is refused naming it, and writes nothing
npy_set_1e7() { # FILE INDEX: the <f4 value at INDEX becomes 1e7 (0x4b189680)
  local len=$(( $(od -An -tu2 -j8 -N2 "$1") ))
  printf '\x80\x96\x18\x4b' | dd of="$1" bs=1 seek=$((10 + len + 4 * $2)) conv=notrunc status=none
}
cp "$rows/k.npy" "$work/k-huge.npy"
npy_set_1e7 "$work/k-huge.npy" $(( ((1 * 41 + 3) * 2 + 1) * 32 + 8 )) # [b=1, row 3, head 1, d 8]
expect 1 "k-huge.npy: batch 1, row 3, head 1, dims 0..31 hold |x| = 1e+07" -- \
  "$clattn" run --q "$rows/q.npy" --k "$work/k-huge.npy" --v "$rows/v.npy" --kv-storage q8_0 --out "$out"
"$clattn" run --q "$rows/q.npy" --k "$work/k-huge.npy" --v "$rows/v.npy" --out "$work/huge-f32.npy" \
  > /dev/null || fail "the same K without --kv-storage was refused"
# new rows, quantised by the cache's append: sequence 1's row 4 is appended (new_len 5) ...
cp "$rows/k.npy" "$work/kn-huge.npy"
npy_set_1e7 "$work/kn-huge.npy" $(( ((1 * 41 + 4) * 2 + 0) * 32 + 5 ))
expect 1 "sequence 1, new row 4, kv head 0: K block 0 (dims 0..31) holds |x| = 1e+07" -- \
  "$clattn" run --q "$cache/q.npy" --k "$cache/k.npy" --v "$cache/v.npy" --cache-len "$work/len.npy" \
  --k-new "$work/kn-huge.npy" --v-new "$rows/v.npy" --new-len "$work/new.npy" --kv-storage q8_0 --out "$out"
[ -e "$out" ] && fail "a refused q8_0 run wrote its output"
# ... and sequence 0's row 10 is not (new_len 3): the run goes on
cp "$rows/k.npy" "$work/kn-unused.npy"
npy_set_1e7 "$work/kn-unused.npy" $(( ((0 * 41 + 10) * 2 + 0) * 32 + 5 ))
"$clattn" run --q "$cache/q.npy" --k "$cache/k.npy" --v "$cache/v.npy" --cache-len "$work/len.npy" \
  --k-new "$work/kn-unused.npy" --v-new "$rows/v.npy" --new-len "$work/new.npy" --kv-storage q8_0 \
  --out "$work/unused.npy" > "$work/out" 2>&1 || fail "a row that is not appended was checked: $(cat "$work/out")"

finish cli_cache
