#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (the .npy reader, the option parser) with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs each for SECONDS (default 60).
# Crashes are written to build-fuzz/crashes/TARGET/ and fail the run. Not part of CI; needs
# Debian's clang and libclang-rt-14-dev (apt-get install clang libclang-rt-14-dev).
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]   (targets: npy args; default both)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(npy args)
out=build-fuzz
mkdir -p "$out"
flags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -D_POSIX_C_SOURCE=200809L -Iinclude -Icli -std=c11)
declare -A sources=([npy]="cli/npy.c cli/outfile.c" [args]="cli/args.c")
for target in "${targets[@]}"; do
  [ -n "${sources[$target]:-}" ] || { echo "run.sh: no target '$target' (npy, args)" >&2; exit 2; }
  clang "${flags[@]}" "tests/fuzz/fuzz_$target.c" ${sources[$target]} -o "$out/fuzz_$target"
  corpus="$out/corpus/$target" crashes="$out/crashes/$target"
  mkdir -p "$corpus" "$crashes"
  cp -n tests/fuzz/seeds/"$target"/* "$corpus"/ 2> /dev/null || true
  echo "== fuzz_$target for $seconds s (corpus $corpus)"
  "$out/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=4096 -artifact_prefix="$crashes/" -print_final_stats=1 "$corpus" 2>&1 |
    grep -av '^clattn fuzz: ' | tail -n 40
  status=${PIPESTATUS[0]}
  [ "$status" -eq 0 ] || { echo "fuzz_$target failed ($status); inputs in $crashes"; exit 1; }
done
