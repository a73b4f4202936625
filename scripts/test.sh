#!/usr/bin/env bash
# Builds clattn and runs the whole test suite, the way CI does:
#  1. the CTest suite (Criterion tests, CLI tests, the install test) on PoCL's pthread device;
#  2. the kernels' tests again on PoCL's single-threaded "basic" device;
#  2b. Mesa's rusticl (its llvmpipe device, a second OpenCL implementation with its own
#     compiler), alone on the ICD loader's list: `clattn check --quick` over every variant
#     (lanes and flash are refused there, with the reasons; --require names the others;
#     split, whose kernels compile slowly there, on five cases, two at a time), a fresh user's
#     first call, and the softmax tests, sharing the build's kernel cache and a Mesa shader
#     cache in the build tree;
#  3. the Python package (scripts/test-python.sh): its wheel built and repaired by auditwheel
#     into a manylinux wheel that carries CLBlast and the ICD loader, installed into two fresh
#     virtual environments (NumPy alone, and with torch) for the pytest suite, and into a bare
#     one where the system's CLBlast and ICD loader are hidden;
#  4. a build with -fsanitize=address,undefined and the suite again; any sanitizer report
#     fails the run (Criterion does not fail a test whose worker only reports a leak at exit,
#     so the log is searched). This stage, the fuzzers' and ThreadSanitizer's see PoCL alone
#     (pocl_only below): Mesa's OpenCL library leaks what it allocates when the ICD loader
#     enumerates platforms, some of it from a module without a name, which no LeakSanitizer
#     suppression can match; rusticl has its own stage (2b);
#  5. the libFuzzer targets of tests/fuzz (the .npy reader, the option parser, the KV cache, the
#     masks, the attention layer, the softmax) under ASan and UBSan, 40 s each from the seeds in
#     tests/fuzz/seeds (tests/fuzz/run.sh); a crash, a report or a failed check fails the run;
#  6. the threads test built with -fsanitize=thread, as a plain program (Criterion's runner does
#     not start under ThreadSanitizer), on both PoCL devices; any report fails the run;
#  7. clattn's kernels under oclgrind (scripts/oclgrind-check.sh);
#  8. the bundle (scripts/bundle.sh), unpacked and run with an empty ICD vendors folder, so that
#     PoCL comes from the driver search (tests/install/bundle.sh); then the GPU report
#     (scripts/gpu-report.sh --quick) from it on PoCL, with the Python stage's torch on the CPU
#     (tests/install/gpu_report.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
section() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }

# in_parallel and parallel_done: commands one a core (scripts/parallel.sh)
source scripts/parallel.sh

section "build"
./scripts/build.sh build

section "tests on PoCL's pthread device"
ctest --test-dir build -j "$jobs" --output-on-failure

section "tests on PoCL's basic device"
# The kernels' tests again on a single-threaded device of one compute unit, which plans and
# runs work-groups differently. Left to the pthread stage: what does not depend on the device
# and here only builds kernels again for minutes (the program cache, the command line's
# tests, tuning, the head dims past 256, nv_mma's emulation, the gemm path and its GEMM table,
# the layer, whose attention and GEMMs those tests cover; on 11-28 these took 1,100 s of this
# stage's 1,860 s), cli_ring (it names its own devices) and the MPI programs (they run on the
# pthread stage).
POCL_DEVICES=basic ctest --test-dir build -j "$jobs" --output-on-failure \
  -E '^(downstream|device_two_pocl|ring_two_pocl|cli_.*|cache|wide|nv_mma|gemm|gemm_rows|mha|reliability_memory_limit|tuning|mpi_np[0-9]+)$'

# A folder of ICD files that lists one implementation only (for OCL_ICD_VENDORS). clattn's
# driver search knows PoCL, not rusticl: with rusticl alone it is turned off, or it would add
# PoCL back.
icd_folder() {
  local folder="$1" icd="/etc/OpenCL/vendors/$2"
  mkdir -p "$folder"
  rm -f "$folder"/*.icd
  [ -f "$icd" ] && cp "$icd" "$folder/"
  echo "$PWD/$folder"
}
pocl_only=(env OCL_ICD_VENDORS="$(icd_folder build/icd-pocl pocl.icd)")

if [ -f /etc/OpenCL/vendors/rusticl.icd ]; then
  section "Mesa rusticl's llvmpipe device: check --quick and the conformance tests"
  # Mesa builds a kernel at clCreateKernel, slowly for some (docs/devices.md): its shader
  # cache in the build tree keeps them across the stage's processes and across runs.
  rusticl=(env OCL_ICD_VENDORS="$(icd_folder build/icd-rusticl rusticl.icd)"
    CLATTN_NO_DRIVER_SEARCH=1 RUSTICL_ENABLE=llvmpipe
    MESA_SHADER_CACHE_DIR="$PWD/build/mesa-shader-cache" MESA_SHADER_CACHE_MAX_SIZE=4G)
  rusticl+=(CLATTN_CACHE_DIR="$PWD/build/test-kernel-cache")
  "${rusticl[@]}" build/clattn devices --variants
  "${rusticl[@]}" build/clattn check --quick --device 0 --no-record \
    --variant lanes,rowwise,flash,gemm,reference --require rowwise,gemm,reference
  # split on cases of the quick sweep: decoding (Nq=1), float16 storage, a per-head block
  # layout with causality, a full bias, K and V in q4_0 blocks with a window and sinks (each
  # new head dim or dtype costs a minute or more of Mesa's compiler, so GQA is left to the
  # other implementations)
  # (two at a time: Mesa's compiler builds a program on one thread)
  for case in 0 17 25 27 39; do
    in_parallel "split, case $case" "${rusticl[@]}" build/clattn check --quick --device 0 \
      --no-record --variant split --require split --case "$case" --timeout 900
  done
  # rows longer than llvmpipe's loop budget lets rowwise walk (the full sweep's case 3, 1023
  # keys): rowwise declines them, split cuts them into chunks that fit, the gemm path's GEMM
  # shrinks its blocks to fit (docs/devices.md); before, all three came out wrong there
  in_parallel "rowwise, gemm and split on long rows" "${rusticl[@]}" build/clattn check --case 3 \
    --device 0 --no-record --variant rowwise,gemm,split --require split,gemm --timeout 900
  parallel_done || exit 1
  # a fresh user's first call (empty caches, the default policy) builds no refused variant
  fresh="$(mktemp -d)"
  "${rusticl[@]}" build/clattn check --quick --case 3 --device 0 --path reference --no-record \
    --dump "$fresh/in" > /dev/null
  "${rusticl[@]}" CLATTN_CACHE_DIR="$fresh/cache" MESA_SHADER_CACHE_DIR="$fresh/mesa" \
    CLATTN_VERBOSE=1 timeout 900 build/clattn run --q "$fresh/in/case-3/q.npy" \
    --k "$fresh/in/case-3/k.npy" --v "$fresh/in/case-3/v.npy" --causal --out "$fresh/o.npy" \
    2> "$fresh/log"
  if grep -E "built .*(lanes|flash)\.cl" "$fresh/log"; then
    echo "auto built a variant rusticl refuses (above)"
    exit 1
  fi
  rm -rf "$fresh"
  "${rusticl[@]}" ctest --test-dir build -j "$jobs" --output-on-failure \
    -R '^softmax$'
else
  echo "no /etc/OpenCL/vendors/rusticl.icd (mesa-opencl-icd): the rusticl stage is skipped"
fi

section "the Python package (wheel, fresh virtual environment, pytest)"
./scripts/test-python.sh build-python

section "tests under AddressSanitizer and UndefinedBehaviorSanitizer"
./scripts/build.sh build-sanitize -DCLATTN_SANITIZE=ON
log=build-sanitize/sanitizers.log
# use_sigaltstack=0: LLVM (inside PoCL) gives a thread that builds a kernel an alternate signal
# stack from malloc, which ASan then fails to unmap as its own when the thread ends.
# ASAN_OPTIONS is the fuzzers' (below): the tests set their own, with slow unwinding and
# PoCL's leak suppressions (tests/CMakeLists.txt).
export ASAN_OPTIONS=detect_leaks=1:use_sigaltstack=0 UBSAN_OPTIONS=print_stacktrace=1
if ! "${pocl_only[@]}" ctest --test-dir build-sanitize -j "$jobs" -V -E '^downstream$' > "$log" 2>&1; then
  grep -E '(Passed|Failed|\*\*\*)' "$log" | tail -n 30
  echo "the sanitizer build's tests failed (full log: $log)"
  exit 1
fi
if grep -nE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log"; then
  echo "sanitizer reports above (full log: $log)"
  exit 1
fi
echo "no sanitizer reports"

section "fuzzers under AddressSanitizer and UndefinedBehaviorSanitizer"
"${pocl_only[@]}" tests/fuzz/run.sh 40

section "the threads test under ThreadSanitizer"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLATTN_TSAN=ON > /dev/null
cmake --build build-tsan -j "$jobs" --target threads_tsan
log=build-tsan/tsan.log
for device in pthread basic; do
  if ! "${pocl_only[@]}" POCL_DEVICES=$device CLATTN_CACHE_DIR="$PWD/build-tsan/test-kernel-cache" \
    build-tsan/tests/threads_tsan > "$log" 2>&1 || grep -q "ThreadSanitizer" "$log"; then
    tail -n 60 "$log"
    echo "the threads test failed under ThreadSanitizer on PoCL's $device device (log: $log)"
    exit 1
  fi
  cat "$log"
done

section "kernels under oclgrind"
./scripts/oclgrind-check.sh build/clattn

section "the bundle, as a machine with an unregistered driver runs it"
./scripts/bundle.sh build-bundle
version="$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' build-bundle/CMakeCache.txt)"
bash tests/install/bundle.sh "dist/clattn-$version-linux-$(uname -m).tar.gz"
bash tests/install/gpu_report.sh "dist/clattn-$version-linux-$(uname -m).tar.gz" \
  build-python/venv-torch/bin/python build/test-kernel-cache

section "all tests passed"
