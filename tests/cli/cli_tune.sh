#!/usr/bin/env bash
# clattn tune end to end, briefly, in a scratch cache folder: it measures and writes the flash
# entry of the device and driver into tuning.json; afterwards `clattn devices` says the device
# is tuned, the variant listing takes its parameters from tuning.json, a `clattn run` builds the
# kernel with exactly the saved values, and a second tune keeps the other entries of the file;
# tune --gemm panels writes the GEMM row's entry, which the layer's GEMMs then take. An entry a
# variant refuses makes bench name it; a variant the device does not run is refused.
# Child processes build the first round of candidates ahead (--jobs), not for --gemm.
# Bad options are usage errors. Usage: cli_tune.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
no_leak_checks_for_pocl_compiles # tune builds dozens of kernels in a fresh cache folder
export CLATTN_CACHE_DIR="$work/cache"
mkdir -p "$CLATTN_CACHE_DIR"
json="$CLATTN_CACHE_DIR/tuning.json"
printf '{"entries": [{"device": "another device", "variant": "flash", "block_m": 2}]}\n' > "$json"

# ---- a brief search writes the entry
"$clattn" tune --device 0 --time 3 --n 48 --repeat 1 --jobs 2 > "$work/tune.txt" 2>&1 ||
  fail "clattn tune failed: $(cat "$work/tune.txt")"
grep -qE "^built the first round's kernels ahead in [0-9.]+ s with 2 jobs" "$work/tune.txt" ||
  fail "tune --jobs 2 did not build ahead: $(cat "$work/tune.txt")"
grep -q "before ms" "$work/tune.txt" || fail "no before/after table: $(cat "$work/tune.txt")"
grep -q "^wrote the flash entry" "$work/tune.txt" ||
  fail "no entry written: $(cat "$work/tune.txt")"
grep -q '"variant": "flash"' "$json" || fail "tuning.json has no flash entry: $(cat "$json")"
grep -q '"another device"' "$json" || fail "the other entry was dropped: $(cat "$json")"
[ -z "$(find "$CLATTN_CACHE_DIR" -name 'tuning.json.tmp*')" ] || fail "a temporary file is left"

# ---- a variant the device does not run (nv_mma: NVIDIA's tensor cores) is refused, with the
# reason, before anything is built ahead
"$clattn" tune --device 0 --variant nv_mma --time 3 --jobs 2 --dry-run > "$work/nv.txt" 2>&1
[ $? -eq 1 ] || fail "tune --variant nv_mma did not exit 1: $(cat "$work/nv.txt")"
grep -q "nv_mma does not run on" "$work/nv.txt" || fail "no reason: $(cat "$work/nv.txt")"
! grep -q "built the first round" "$work/nv.txt" || fail "built ahead anyway: $(cat "$work/nv.txt")"

# ---- the entry is used afterwards
"$clattn" devices | grep -q "tuned: flash (tuning.json" || fail "devices: $("$clattn" devices)"
"$clattn" devices --variants | grep -E "^ +flash +yes +[a-z]+ +tuning.json" > /dev/null ||
  fail "variants: $("$clattn" devices --variants)"
entry=$(grep '"variant": "flash"' "$json" | grep -v "another device")
field() { sed -E "s/.*\"$1\": ([0-9]+).*/\1/" <<< "$entry"; }
expected="flash bm$(field block_m) bn$(field block_n) tm$(field tile_m) tn$(field tile_n)"
expected+=" v$(field vector) s$(field stages)"
index=$("$clattn" check --list --quick | grep -m1 "Nk=53 Dqk=32" | awk '{print $1}')
line=$("$clattn" check --quick --case "$index" --path reference --dump "$work/cases" |
       grep -o 'clattn run.*')
line="${line#clattn }"
read -r -a run <<< "${line/--path reference/--path fused}"
CLATTN_VERBOSE=1 "$clattn" "${run[@]}" --variant flash --out "$work/o.npy" > "$work/run.txt" 2>&1 ||
  fail "run: $(cat "$work/run.txt")"
grep -qF "$expected" "$work/run.txt" ||
  fail "the run did not take '$expected': $(grep flash "$work/run.txt")"

# ---- a GEMM row: tune --gemm panels writes its entry, which the layer's GEMMs then take
"$clattn" tune --device 0 --gemm panels --time 4 --n 32 --repeat 1 > "$work/gemm.txt" 2>&1 ||
  fail "clattn tune --gemm panels failed: $(cat "$work/gemm.txt")"
grep -q "^tuning the GEMM panels" "$work/gemm.txt" && grep -q "layer d=1024" "$work/gemm.txt" ||
  fail "tune --gemm: $(cat "$work/gemm.txt")"
grep -q "^wrote the panels entry" "$work/gemm.txt" || fail "no panels entry: $(cat "$work/gemm.txt")"
grep -q "ahead" "$work/gemm.txt" && fail "tune --gemm built ahead: $(cat "$work/gemm.txt")"
grep -q '"variant": "flash"' "$json" || fail "tune --gemm dropped the flash entry: $(cat "$json")"
"$clattn" devices --variants | grep -E "^ +panels +yes +[a-z]+ +tuning.json" > /dev/null ||
  fail "variants after tune --gemm: $("$clattn" devices --variants)"
entry=$(grep '"variant": "panels"' "$json")
[ -n "$entry" ] || fail "tuning.json has no panels entry: $(cat "$json")"
expected="panels $(field tile_m)x$(field tile_n) micro-tiles, blocks $(field block_m)x$(field block_n)"
"$clattn" bench --preset layer --device 0 --hq 2 --hkv 2 --d 8 --nq 16 --kept 2 --repeat 1 \
  --gemm panels --out "$work/bench" > "$work/bench.txt" 2>&1 || fail "bench layer: $(cat "$work/bench.txt")"
grep -qF "$expected" "$work/bench.txt" ||
  fail "the layer did not take '$expected': $(cat "$work/bench.txt")"

# ---- an entry the variant refuses: bench says what the planner said (not that no call had
# succeeded yet)
device=$(sed -E 's/.*"device": "([^"]*)".*/\1/' <<< "$entry")
printf '{"entries": [{"device": "%s", "variant": "lanes", "block_n": 24}]}\n' "$device" > "$json"
expect 1 "lanes: the tuning entry (tuning.json): block_m" -- \
  "$clattn" bench --device 0 --variant lanes --hq 1 --nq 64 --repeat 1

# ---- options
expect 2 "--gemm and --variant" -- "$clattn" tune --gemm panels --variant flash
expect 2 "--gemm: expected clblast or panels" -- "$clattn" tune --gemm auto
expect 2 "--variant" -- "$clattn" tune --variant cuda
expect 2 "--time" -- "$clattn" tune --time 0
expect 2 "--jobs" -- "$clattn" tune --jobs 0
expect 2 "--repeat: at most 64" -- "$clattn" tune --repeat 65
expect 1 "no device matches" -- "$clattn" tune --device no-such-device
finish cli_tune
