#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, and runs each for SECONDS (default 60), starting from the seeds in
# tests/fuzz/seeds/TARGET. Targets:
#   npy       the .npy reader (hostio/npy.c)         args   the option parser (cli/args.c)
#   kv_cache  the KV cache on the device: tables, lengths, appends (new_len), reads, attention
#             over the cache (q_len, masks), checked against a model and the reference
#   masks     block layouts and the pattern generators, global tokens, windows and dilation:
#             the host's mask functions against each other, the device against the reference
#   mha       the attention layer's shapes, weights, head masks and KV cache (clattn_mha_*)
#   softmax   clattn_softmax's sizes, offsets and row strides, in place or not, and its LSE
# The library targets link a copy of libclattn built here (build-fuzz/lib) with the same
# sanitizers and libFuzzer's coverage, and run on PoCL ($POCL_DEVICES, default basic: its
# single-threaded device; only PoCL's ICD is loaded) with a kernel cache in
# build-fuzz/kernel-cache. A crash, a sanitizer report, a leak, a timeout or a failed check
# ("FUZZ FAILURE: ...") fails the run; the input is written to build-fuzz/crashes/TARGET/.
# Needs clang and libclang-rt-14-dev (scripts/setup.sh installs them).
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]      (default: every target)
#        tests/fuzz/run.sh replay TARGET FILE...      runs inputs once, printing each call
set -euo pipefail
cd "$(dirname "$0")/../.."
all=(npy args kv_cache masks mha softmax)
out=build-fuzz
flags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -D_POSIX_C_SOURCE=200809L -Iinclude -Ihostio -Icli -std=c11 -Wall
       -Wextra -Werror)
# The program's files that a target tests; the targets without any test the library, and the
# option parser needs it too (it names variants through the library).
declare -A sources=([npy]="hostio/npy.c hostio/outfile.c hostio/interrupt.c"
                     [args]="cli/args.c hostio/message.c hostio/outfile.c hostio/interrupt.c")
uses_library() { [ "$1" != npy ]; }
known() { [[ " ${all[*]} " == *" $1 "* ]] || { echo "run.sh: no target '$1' (${all[*]})" >&2; exit 2; }; }

# The library with the sanitizers and libFuzzer's coverage (no main).
build_library() {
  cmake -S . -B "$out/lib" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCLATTN_BUILD_TESTS=OFF -DCLATTN_BUILD_BENCH=OFF \
    "-DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    > "$out/lib-configure.log"
  cmake --build "$out/lib" -j "$(nproc)" --target clattn_static > "$out/lib-build.log" ||
    { tail -n 40 "$out/lib-build.log"; exit 1; }
}

build_target() {
  local program_files=(${sources[$1]:-})
  if uses_library "$1"; then
    clang "${flags[@]}" "tests/fuzz/fuzz_$1.c" "${program_files[@]}" tests/fuzz/harness.c \
      "$out/lib/libclattn.a" -lOpenCL -lclblast -lm -ldl -lpthread -o "$out/fuzz_$1"
  else
    clang "${flags[@]}" "tests/fuzz/fuzz_$1.c" "${program_files[@]}" -o "$out/fuzz_$1"
  fi
}

# The device's environment: kernels built once into a cache here (seeded from the test suite's,
# whose entries are keyed the same), and LLVM inside PoCL kept quiet under ASan (see
# scripts/test.sh's sanitizer stage; tests/fuzz/lsan.supp).
device_environment() {
  export POCL_DEVICES="${POCL_DEVICES:-basic}" CLATTN_CACHE_DIR="$PWD/$out/kernel-cache"
  if [ -z "${OCL_ICD_VENDORS:-}" ] && [ -f /etc/OpenCL/vendors/pocl.icd ]; then
    export OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd # others (rusticl) leak at exit
  fi
  mkdir -p "$CLATTN_CACHE_DIR"
  [ ! -d build/test-kernel-cache ] ||
    cp -rn build/test-kernel-cache/. "$CLATTN_CACHE_DIR"/ 2> /dev/null || true
  export ASAN_OPTIONS="use_sigaltstack=0:detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1"
  export LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp"
}

mkdir -p "$out"
if [ "${1:-}" = replay ]; then
  [ $# -ge 3 ] || { echo "usage: tests/fuzz/run.sh replay TARGET FILE..." >&2; exit 2; }
  known "$2"
  ! uses_library "$2" || build_library
  build_target "$2"
  device_environment
  FUZZ_TRACE=1 "$out/fuzz_$2" "${@:3}"
  exit
fi

seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for target in "${targets[@]}"; do known "$target"; done
for target in "${targets[@]}"; do
  if uses_library "$target"; then build_library; break; fi
done
device_environment

for target in "${targets[@]}"; do
  build_target "$target"
  corpus="$out/corpus/$target" crashes="$out/crashes/$target" log="$out/fuzz_$target.log"
  mkdir -p "$corpus" "$crashes"
  cp -n tests/fuzz/seeds/"$target"/* "$corpus"/ 2> /dev/null || true
  echo "== fuzz_$target for $seconds s (corpus $corpus, log $log)"
  status=0
  # -timeout: a kernel built cold (PoCL's LLVM under ASan, a busy machine) takes minutes.
  "$out/fuzz_$target" -max_total_time="$seconds" -timeout=300 -rss_limit_mb=4096 \
    -max_len=4096 -artifact_prefix="$crashes/" -print_final_stats=1 "$corpus" > "$log" 2>&1 ||
    status=$?
  grep -av '^clattn fuzz: ' "$log" | grep -aE '^(stat::|Done|FUZZ FAILURE|SUMMARY|==[0-9]+==ERROR)' || true
  # A report that did not stop the run (none should) fails it too.
  if [ "$status" -ne 0 ] || grep -qaE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log"; then
    grep -av '^clattn fuzz: ' "$log" | tail -n 60
    echo "fuzz_$target failed ($status); inputs in $crashes, log $log;" \
      "replay: tests/fuzz/run.sh replay $target FILE"
    exit 1
  fi
done
