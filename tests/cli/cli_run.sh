#!/usr/bin/env bash
# The clattn program end to end: `run` for every mask kind on every path (inputs from
# `check --dump`, the reference's output compared with --compare; a dumped line keeps its
# row's variant), malformed inputs and bad options (one clear line, the documented exit status,
# no output file), help and version, the message when no OpenCL platform is installed, and the
# program cache found warm by a second process. Usage: cli_run.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
# fail, expect STATUS TEXT -- COMMAND...
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

# ---- every mask kind, every path, against the reference
for kind in "window=0,0" "window=9,-1" "dilation=" "global=" "layout=per-head" \
            "layout=shared" "bias=full" "bias=broadcast" "bias=padding" "bias=finite-min" "nan-key" " f16->f16" "bf16->f32" "f32->bf16" "bf16->bf16" "bhsd" "softcap=" " alibi" "alibi=per-batch" " sinks"; do
  index=$("$clattn" check --list | grep -m1 -F -- "$kind" | awk '{print $1}')
  [ -n "$index" ] || { fail "no check case with $kind"; continue; }
  line=$("$clattn" check --case "$index" --path reference --dump "$work/cases" |
         grep -o 'clattn run.*') || { fail "check --case $index --dump"; continue; }
  read -r -a run <<< "${line#clattn }"
  dir="$work/cases/case-$index"
  "$clattn" "${run[@]}" --path reference > /dev/null || fail "reference run of $kind"
  [ -s "$dir/o.npy" ] && [ -s "$dir/lse.npy" ] || fail "$kind: outputs missing"
  for path in fused gemm auto; do
    "$clattn" "${run[@]}" --path "$path" --out "$dir/o-$path.npy" --lse "$dir/lse-$path.npy" \
      --compare "$dir/o.npy" > "$work/stdout" 2>&1 ||
      fail "$kind on the $path path: $(cat "$work/stdout")"
  done
done

# ---- a dumped case's line runs the row's variant (it ran auto's choice before)
line=$("$clattn" check --quick --case 0 --variant rowwise --dump "$work/variant" |
       grep -o 'clattn run.*') || fail "check --variant rowwise --dump"
read -r -a run <<< "${line#clattn }"
"$clattn" "${run[@]}" > "$work/stdout" 2>&1 && grep -q "fused-rowwise" "$work/stdout" ||
  fail "the dumped line of a rowwise row ran: $(cat "$work/stdout")"

# ---- malformed inputs: exit 1, one line naming the file, no output written
index=$("$clattn" check --list --quick | grep -m1 "Nk=53 Dqk=32" | awk '{print $1}')
other=$("$clattn" check --list --quick | grep -m1 "Nk=53 Dqk=64" | awk '{print $1}')
"$clattn" check --quick --case "$index" --path reference --dump "$work/in" > /dev/null
"$clattn" check --quick --case "$other" --path reference --dump "$work/in" > /dev/null
in="$work/in/case-$index"
good=(run --q "$in/q.npy" --k "$in/k.npy" --v "$in/v.npy")
out="$work/never.npy"
expect 1 "no-such.npy" -- "$clattn" run --q "$work/no-such.npy" --k "$in/k.npy" --v "$in/v.npy" --out "$out"
head -c 100 "$in/q.npy" > "$work/short.npy"
expect 1 "short.npy" -- "$clattn" run --q "$work/short.npy" --k "$in/k.npy" --v "$in/v.npy" --out "$out"
printf 'not an npy file at all' > "$work/junk.npy"
f16_index=$("$clattn" check --list --quick | grep -m1 "f16->" | awk '{print $1}')
"$clattn" check --quick --case "$f16_index" --path reference --dump "$work/in" > /dev/null
cp "$work/in/case-$f16_index/v.npy" "$work/f16.npy"
expect 1 "magic" -- "$clattn" run --q "$in/q.npy" --k "$work/junk.npy" --v "$in/v.npy" --out "$out"
expect 1 "head dims differ" -- "$clattn" run --q "$in/q.npy" --k "$work/in/case-$other/k.npy" --v "$in/v.npy" --out "$out"
expect 1 "must share a dtype" -- "$clattn" run --q "$in/q.npy" --k "$in/k.npy" --v "$work/f16.npy" --out "$out"
"$clattn" pattern sliding --nq 8 --nk 8 --block 4,4 --out "$work/layout.npy" > /dev/null
expect 1 "layout shape" -- "$clattn" "${good[@]}" --out "$out" --block-layout "$work/layout.npy" --block-size 4,4
expect 1 "bias shape" -- "$clattn" "${good[@]}" --out "$out" --bias "$work/layout.npy"
expect 1 "expected a 4-D array" -- "$clattn" run --q "$work/layout.npy" --k "$in/k.npy" --v "$in/v.npy" --out "$out"
expect 1 "no-such-dir" -- "$clattn" "${good[@]}" --out "$work/no-such-dir/o.npy"
[ -e "$out" ] && fail "an output was written by a failing run"
ls "$work"/no-such-dir* > /dev/null 2>&1 && fail "a folder or temporary file was left behind"

# ---- bad options: exit 2 and a line naming the option
expect 2 "--window" -- "$clattn" "${good[@]}" --out "$out" --window=abc
expect 2 "--window" -- "$clattn" "${good[@]}" --out "$out" --window 3
expect 2 "--layout" -- "$clattn" "${good[@]}" --out "$out" --layout xyz
expect 2 "--scale" -- "$clattn" "${good[@]}" --out "$out" --scale 0
expect 2 "--dilation" -- "$clattn" "${good[@]}" --out "$out" --dilation=0
expect 2 "--bogus" -- "$clattn" "${good[@]}" --out "$out" --bogus
expect 2 "--out is required" -- "$clattn" "${good[@]}"
expect 2 "--causal takes no value" -- "$clattn" "${good[@]}" --out "$out" --causal=1
expect 2 "unknown command" -- "$clattn" frobnicate
"$clattn" "${good[@]}" --out "$work/window.npy" --window=-1,0 > /dev/null || fail "--window=-1,0"
[ -e "$out" ] && fail "an output was written by a rejected command"

# ---- storage: --storage rounds the inputs, <u2 files are bfloat16 bits (with --storage bf16)
for storage in f16 bf16; do
  "$clattn" "${good[@]}" --out "$work/ref-$storage.npy" --storage "$storage" --path reference > /dev/null ||
    fail "--storage $storage on the reference"
  "$clattn" "${good[@]}" --out "$work/o-$storage.npy" --storage "$storage" \
    --compare "$work/ref-$storage.npy" > /dev/null || fail "--storage $storage against the reference"
done
head -c 128 "$work/o-bf16.npy" | grep -q "'<u2'" || fail "--storage bf16 did not write <u2 bfloat16 bits"
head -c 128 "$work/o-f16.npy" | grep -q "'<f2'" || fail "--storage f16 did not write <f2"
"$clattn" "${good[@]}" --out "$work/o32.npy" --storage bf16 --out-dtype f32 > /dev/null &&
  head -c 128 "$work/o32.npy" | grep -q "'<f4'" || fail "--out-dtype f32 with --storage bf16"
expect 1 "with --storage bf16 only" -- "$clattn" run --q "$work/o-bf16.npy" --k "$work/o-bf16.npy" --v "$work/o-bf16.npy" --out "$out"
expect 2 "--storage" -- "$clattn" "${good[@]}" --out "$out" --storage f64

# ---- a row-wide finite bias (issue 29): the reference rounds each step of the score to float32
# as the kernels do, so every variant agrees with it. Q, K, V [1,24,2,16] uniform in [0,1) and a
# bias [24,24] zero but for its row 3; written with Python's struct (no NumPy needed).
if command -v python3 > /dev/null; then
  python3 - "$work/rowbias" <<'PY'
import os, random, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
def npy(name, shape, values):
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(map(str, shape))
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    with open(os.path.join(out, name), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode())
        f.write(struct.pack("<%df" % len(values), *values))
rng = random.Random(29)
for name in "qkv":
    npy(name + ".npy", (1, 24, 2, 16), [rng.random() for _ in range(768)])
for value in ("-1e4", "-1e5", "-3e5", "65504"):
    npy("bias%s.npy" % value, (24, 24), [float(value) if i // 24 == 3 else 0.0 for i in range(576)])
PY
  rb="$work/rowbias"
  # the variants that run on the default device (its block of the listing)
  variants=$("$clattn" devices --variants | awk '/^[0-9]/ { d = /\(default\)/ } d && /^    variant / { v = 1; next } $1 == "gemm" && $2 == "runs" { v = 0 }
             d && v && $2 == "yes" && $1 != "reference" { print $1 }')
  [ "$(wc -w <<< "$variants")" -ge 3 ] || fail "row-wide bias: too few variants run here: $variants"
  for value in -1e4 -1e5 -3e5 65504; do
    rbrun=(run --q "$rb/q.npy" --k "$rb/k.npy" --v "$rb/v.npy" --bias "$rb/bias$value.npy")
    "$clattn" "${rbrun[@]}" --path reference --out "$rb/ref$value.npy" > /dev/null ||
      fail "row-wide bias $value: the reference run failed"
    for variant in $variants; do
      "$clattn" "${rbrun[@]}" --variant "$variant" --out "$rb/o.npy" --compare "$rb/ref$value.npy" \
        > "$work/stdout" 2>&1 || fail "row-wide bias $value, variant $variant: $(cat "$work/stdout")"
    done
  done
else
  echo "cli_run: skipping the row-wide bias check: python3 (which writes its inputs) is absent"
fi

# ---- help, version, devices
"$clattn" --version | grep -q "^clattn [0-9]" || fail "--version"
"$clattn" --help | grep -q "commands:" || fail "--help"
for cmd in devices run layer check bench pattern tune cache; do
  "$clattn" help "$cmd" | grep -q "usage: clattn $cmd" || fail "help $cmd"
done
"$clattn" devices | grep -q "Portable Computing Language" || fail "devices does not list PoCL"
# no driver at all: no registered one, and the driver search (which would find PoCL) off
mkdir -p "$work/no-icds"
no_driver=(env OCL_ICD_VENDORS="$work/no-icds" CLATTN_NO_DRIVER_SEARCH=1)
expect 1 "pocl-opencl-icd" -- "${no_driver[@]}" "$clattn" devices
expect 1 "pocl-opencl-icd" -- "${no_driver[@]}" "$clattn" "${good[@]}" --out "$out"

# ---- the program cache: a second process finds it warm. PoCL keeps compiled programs in its
# own cache, where clattn stores none; with PoCL's off, clattn's holds them.
export CLATTN_CACHE_DIR="$work/pocl-keeps"
"$clattn" "${good[@]}" --out "$work/first.npy" --path fused > /dev/null 2>&1 || fail "run with PoCL's cache"
[ -z "$(ls "$CLATTN_CACHE_DIR" | grep clbin)" ] || fail "clattn kept a program that PoCL keeps: $(ls "$CLATTN_CACHE_DIR")"
export CLATTN_CACHE_DIR="$work/cache" POCL_KERNEL_CACHE=0
CLATTN_VERBOSE=1 "$clattn" "${good[@]}" --out "$work/first.npy" --path fused 2> "$work/first.log" > /dev/null
CLATTN_VERBOSE=1 "$clattn" "${good[@]}" --out "$work/second.npy" --path fused 2> "$work/second.log" > /dev/null
grep -q "built " "$work/first.log" || fail "the first process did not build: $(cat "$work/first.log")"
grep -q "cache hit" "$work/second.log" || fail "the second process missed the cache: $(cat "$work/second.log")"
grep -q "built " "$work/second.log" && fail "the second process rebuilt a program"
cmp -s "$work/first.npy" "$work/second.npy" || fail "the cached program computed something else"
unset POCL_KERNEL_CACHE

finish cli_run
