#!/usr/bin/env bash
# Runs clattn's own kernels on oclgrind, the OpenCL device simulator, and fails if it reports
# anything (oclgrind itself exits 0 even when it finds errors, so its logs are inspected), or if
# a variant that must run there does not (`clattn check --require`):
#  1. the whole quick conformance sweep, a process for each fused variant (lanes, rowwise, split
#     and flash) and one for the gemm path, checking invalid accesses, data races and API
#     misuse, and that every result is right;
#  2. a KV cache through `clattn run --cache-len` (tests/cli/cli_cache.sh), contiguous and paged;
#  3. one multi-head attention layer through `clattn layer` (tests/cli/cli_layer.sh), with CLBlast's
#     GEMMs, a head mask and biases; and a ring of one part (`clattn run --devices 0`): the
#     zigzag chunks' shard calls of a causal window with global tokens, and the LSE-parts merge
#     (one part: oclgrind 21.10 is not safe for two threads at once, two contexts of its own
#     each; the threads test fails there too);
#  4. seven quick cases of the fused path (below: the ones whose tiles' edges differ), for each
#     fused variant, in its own process with the uninitialized-value check as well. Built with
#     -cl-opt-disable there: oclgrind 21.10's checker cannot execute the `freeze` and undef-lane
#     shuffles that LLVM's optimizer emits, and its shadow state misreports packed buffers once
#     a context has run a first call, so every case gets a fresh process;
#  5. flash's subgroup path on the same seven cases (oclgrind has no subgroups: the
#     test build's emulation, CLATTN_TEST_FLASH_SUBGROUPS=emulate, which only the test copy of
#     the program reads: BUILD/tests/clattn-testing);
#  6. split's work-item form (the CPUs'; oclgrind's device is a GPU, whose default is the
#     work-group form that the steps above run) on five quick cases: decoding, float16, a
#     layout, a bias, q4_0 K/V with a window and sinks, through a tuning.json with wg_size 1;
#  7. lanes' 48-row tiles (the built-in tiles of rows that see many keys, longer than the
#     sweep's) on four quick cases: rows past two tiles, float16 over [B, H, N, D], a window
#     with global tokens, a bias with the score modifiers and sinks, through a tuning.json.
# Usage: oclgrind-check.sh PATH/TO/clattn [PATH/TO/clattn-testing]
set -euo pipefail
clattn="$(realpath "$1")"
hooked="${2:-$(dirname "$clattn")/tests/clattn-testing}"
[ -x "$hooked" ] || { echo "oclgrind-check.sh: no test copy of the program at $hooked" >&2; exit 1; }
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
export CLATTN_CACHE_DIR=off # binaries built for another oclgrind configuration must not be reused
failed=0

report() { # LOG WHAT: prints and counts a non-empty oclgrind log
  if [ -s "$1" ]; then
    echo "oclgrind reported errors for $2:"
    head -n 40 "$1"
    failed=1
  fi
}

# Each check is one oclgrind process (or a script of them), and oclgrind simulates on one
# thread: they run one a core (scripts/parallel.sh), and their logs are read once all are done.
source "$(dirname "$0")/parallel.sh"
grind=(oclgrind --data-races --check-api)

# 1. the quick sweep, a process a row
for variant in flash rowwise split lanes; do
  in_parallel "the quick sweep, fused $variant (memory, races, API)" \
    "${grind[@]}" --log "$logs/sweep-$variant.log" "$clattn" check --quick --device 0 \
    --path fused --variant "$variant" --require "$variant" --in-process --no-record
done
in_parallel "the quick sweep, gemm path (memory, races, API)" \
  "${grind[@]}" --log "$logs/sweep-gemm.log" "$clattn" check --quick --device 0 --path gemm \
  --require gemm --in-process --no-record

# 2. and 3. the KV cache and the layer through their CLI tests, whose processes each write a
# log of their own (several would overwrite one file)
for what in cache layer; do
  printf '#!/usr/bin/env bash\nexec %s --log "%s/%s-$$.log" "$@"\n' "${grind[*]}" "$logs" "$what" \
    > "$logs/$what-runner"
  chmod +x "$logs/$what-runner"
done
in_parallel "a KV cache, contiguous and paged, with appends (memory, races, API)" \
  bash "$(dirname "$0")/../tests/cli/cli_cache.sh" "$clattn" "$logs/cache-runner"
in_parallel "a multi-head attention layer, pruned, with CLBlast projections (memory, races, API)" \
  bash "$(dirname "$0")/../tests/cli/cli_layer.sh" "$clattn" "$logs/layer-runner"

ring_case=$("$clattn" check --list | grep -m1 -F "global=" | awk '{print $1}')
line=$("$clattn" check --case "$ring_case" --path reference --dump "$logs/ring" | grep -o 'clattn run.*')
read -r -a ring_run <<< "${line#clattn }"
"$clattn" "${ring_run[@]}" > /dev/null # the reference's output, on the host
in_parallel "a ring of one part: shard calls and their merge (memory, races, API)" \
  "${grind[@]}" --log "$logs/ring.log" "$clattn" "${ring_run[@]/reference/auto}" \
  --out "$logs/ring/o.npy" --devices 0 --compare "$logs/ring/case-$ring_case/o.npy"

# 4. The uninitialized-value check simulates every instruction's shadow state: on the quick
# sweep's larger cases a process took up to 2 minutes (flash, case 2, on 11-28), and all 160 ran
# past CI's time. The cases below cover what differs at the tiles' edges: decoding (one query
# row, 7 keys), a head dim of 3 with GQA and causality, a window with global tokens, a causal
# mask with a NaN key, a bias of -FLT_MAX, the score modifiers over a full bias, and K/V in
# q4_0 blocks with a window and sinks; the whole sweep runs above without this check.
uninit_cases=(0 5 24 29 31 35 39)
for i in "${uninit_cases[@]}"; do
  for variant in lanes rowwise split flash; do
    in_parallel "case $i, $variant (+ uninitialized values)" \
      oclgrind --build-options -cl-opt-disable --data-races --uninitialized --check-api \
      --log "$logs/uninit-$i-$variant.log" "$clattn" check --quick --device 0 --path fused \
      --variant "$variant" --require "$variant" --case "$i" --in-process --no-record
  done
done

# 5. flash's subgroup path, emulated
for i in "${uninit_cases[@]}"; do
  in_parallel "case $i, flash's emulated subgroup path (memory, races, API)" \
    env CLATTN_TEST_FLASH_SUBGROUPS=emulate "${grind[@]}" --log "$logs/subgroups-$i.log" \
    "$hooked" check --quick --device 0 --variant flash --require flash --case "$i" \
    --in-process --no-record
done

# 6. split's work-item form, through a tuning.json in a fresh cache folder (no other
# configuration's binaries)
mkdir "$logs/work-items"
device=$(oclgrind "$clattn" devices |
  awk 'NR == 2 {sub(/^ *[0-9]+ +[0-9:]+ +[a-z]+ +/, ""); sub(/  +[0-9].*/, ""); print}')
echo "{\"entries\": [{\"device\": \"$device\", \"variant\": \"split\", \"wg_size\": 1}]}" \
  > "$logs/work-items/tuning.json"
for i in 0 17 25 27 39; do
  in_parallel "case $i, split's work-item form (memory, races, API)" \
    env CLATTN_CACHE_DIR="$logs/work-items" "${grind[@]}" --log "$logs/work-items-$i.log" \
    "$clattn" check --quick --device 0 --path fused --variant split --require split \
    --case "$i" --in-process --no-record
done

# 7. lanes' 48-row tiles, the same way
mkdir "$logs/tall-tiles"
echo "{\"entries\": [{\"device\": \"$device\", \"variant\": \"lanes\", \"block_m\": 48}]}" \
  > "$logs/tall-tiles/tuning.json"
for i in 2 17 24 35; do
  in_parallel "case $i, lanes in 48-row tiles (memory, races, API)" \
    env CLATTN_CACHE_DIR="$logs/tall-tiles" "${grind[@]}" --log "$logs/tall-tiles-$i.log" \
    "$clattn" check --quick --device 0 --path fused --variant lanes --require lanes \
    --case "$i" --in-process --no-record
done

parallel_done --failures || failed=1
for log in "$logs"/*.log; do report "$log" "$(basename "$log" .log)"; done
[ "$failed" -eq 0 ] && echo "oclgrind: no reports"
exit $((failed != 0))
