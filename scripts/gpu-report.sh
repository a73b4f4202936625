#!/usr/bin/env bash
# The whole GPU report in one call: on a machine with a GPU, its OpenCL driver and PyTorch with
# CUDA, run every check and measurement of clattn on the GPU, with torch on the same GPU beside
# it, and write everything into one folder:
#
#   env.txt        date, clattn's version, nvidia-smi's GPU and driver, torch's version
#   devices.txt    clattn devices (what the driver search found), then devices --variants (which
#                  variants the GPU serves, and why not)
#   check.txt      clattn check --device gpu on every variant (check.json: the rows)
#   check-16bit.txt  the quick sweep with every case in f16, then in bf16, on nv_mma (tensor
#                  cores: its sweep has few 16-bit cases of its own; "not run" off NVIDIA)
#   tune.txt       clattn tune --device gpu (flash's parameters, stored for what follows)
#   prefill-*.txt  bench/vs_torch.py: fused attention against torch's SDPA on CUDA, f32/f16/bf16
#   decode.txt     bench/vs_torch.py --decode: one token over a 32768-row KV cache
#   sparse.txt     bench/vs_torch.py --sparse --no-torch: sparse patterns and their fraction of the
#                  ideal speedup over full attention
#   wide.txt       head dims 576/512 (DeepSeek's MLA, 16:1, causal): flash (the head dim in pieces),
#                  split and the gemm path, clattn bench each
#   summary.txt    each step's exit status and seconds
#
# Each step has a time limit (a hung driver stops one step, not the report) and the report goes
# on after a failing step; the exit status is 1 if any step failed. The sizes fit in 10 minutes
# on an H100; --quick makes every step smaller (a first look, or a CPU: about 3 minutes on 2
# cores). Without torch in --python the benchmarks time clattn alone (vs_torch.py --no-torch).
#
# Usage: scripts/gpu-report.sh [--out DIR] [--clattn PATH] [--python PYTHON] [--quick]
#                              [--device SPEC] [--torch-device DEV]
#   --clattn  the clattn program (default: an unpacked bundle's, dist/clattn-*/bin/clattn, else
#             build/clattn)
#   --python  a Python with torch (default python3)
#   --out     the folder (default gpu-report-DATE); it must not exist yet or be empty
#   --device  clattn's device (default gpu); --torch-device: torch's (default cuda)
#
# On a machine with the bundle (docs/bundle.md), from this repository's checkout:
#   mkdir -p dist && tar -C dist -xzf clattn-*-linux-x86_64.tar.gz && scripts/gpu-report.sh
# When `clattn devices` lists no GPU, register its driver for the run (NVIDIA's here):
#   mkdir vendors && cp /etc/OpenCL/vendors/*.icd vendors/
#   echo /usr/lib/libnvidia-opencl.so.1 > vendors/nvidia.icd && export OCL_ICD_VENDORS=$PWD/vendors
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="gpu-report-$(date +%Y%m%d-%H%M%S)" clattn="" python=python3 quick=0
device=gpu torch_device=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --clattn) clattn="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --device) device="$2"; shift 2 ;;
    --torch-device) torch_device="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-report.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$clattn" ]; then
  for c in "$here"/dist/clattn-*/bin/clattn "$here/build/clattn"; do
    [ -x "$c" ] && { clattn="$c"; break; }
  done
fi
[ -x "$clattn" ] || { echo "gpu-report.sh: no clattn program (give --clattn PATH)" >&2; exit 2; }
clattn="$(realpath "$clattn")"
mkdir -p "$out" 2> /dev/null || { echo "gpu-report.sh: cannot create the folder $out" >&2; exit 2; }
[ -z "$(ls -A "$out")" ] || { echo "gpu-report.sh: $out is not an empty folder" >&2; exit 2; }
out="$(realpath "$out")"
export OPENBLAS_NUM_THREADS=1
failed=0 started=$SECONDS

# step NAME SECONDS COMMAND...: run COMMAND into NAME.txt under a time limit, note how it went
step() {
  local name="$1" limit="$2" t0=$SECONDS rc
  shift 2
  echo "== $name ($(date +%T), limit ${limit}s): $*"
  timeout -k 10 "$limit" "$@" > "$out/$name.txt" 2>&1
  rc=$?
  [ $rc -eq 0 ] || failed=1
  local how="ok"
  [ $rc -eq 0 ] || how="FAILED (exit $rc$([ $rc -ge 124 ] && echo ', time limit'))"
  printf '%-16s %4ds  %s\n' "$name" $((SECONDS - t0)) "$how" | tee -a "$out/summary.txt"
  tail -n 25 "$out/$name.txt"
}

torch_side=(--torch-device "$torch_device")
"$python" -c 'import torch' 2> /dev/null || torch_side=(--no-torch)
{
  date -u +"%F %T UTC"
  "$clattn" --version
  command -v nvidia-smi > /dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  [ "${torch_side[0]}" = --no-torch ] && echo "no torch in $python: clattn's side only" ||
    "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device")' 2>&1
} > "$out/env.txt"
cat "$out/env.txt"

vs_torch=("$python" "$here/bench/vs_torch.py" --clattn "$clattn" --device "$device"
          "${torch_side[@]}" --min-time 0.3)
if [ $quick -eq 1 ]; then
  check=(--quick) tune_time=20 rounds=(--rounds 2 --min-repeat 3) # a CPU's torch f16 is slow
  big=(--sizes 1024 --dims 64 --heads 8:8) wide=(--sizes 1024 --dims 128 --heads 16:16)
  decode_nk=4096 sparse_n=2048 mla=(--nq 16,64 --nk 1024)
else
  check=() tune_time=60 rounds=(--rounds 3 --min-repeat 10)
  big=(--sizes 16384 --dims 64 --heads 8:8) wide=(--sizes 4096 --dims 128 --heads 16:16)
  decode_nk=32768 sparse_n=16384 mla=(--nq 256,4096 --nk 4096)
fi

step devices 60 bash -c '"$1" devices && "$1" devices --variants' - "$clattn"
step check 300 "$clattn" check --device "$device" "${check[@]}" --no-record --json "$out/check.json"
step check-16bit 150 bash -c 'for s in f16 bf16; do "$1" check --device "$2" --quick --storage $s \
  --variant nv_mma --no-record || exit; done' - "$clattn" "$device"
step tune $((tune_time + 40)) "$clattn" tune --device "$device" --time "$tune_time"
step prefill-d64 120 "${vs_torch[@]}" "${big[@]}" "${rounds[@]}" --patterns full,causal \
  --dtypes f32,f16,bf16 --json "$out/prefill-d64.json"
step prefill-d128 90 "${vs_torch[@]}" "${wide[@]}" "${rounds[@]}" --patterns full,causal \
  --dtypes f32,f16 --json "$out/prefill-d128.json"
step decode 90 "${vs_torch[@]}" --decode --nk "$decode_nk" --dtypes f16,bf16,f32,q8_0,q4_0 \
  "${rounds[@]}" --json "$out/decode.json"
step sparse 90 "${vs_torch[@]}" --sparse --no-torch --sizes "$sparse_n" "${rounds[@]}" \
  --json "$out/sparse.json"
step wide 120 bash -c 'clattn=$1 device=$2; shift 2; for how in "--variant flash" \
  "--variant split" "--path gemm"; do "$clattn" bench --device "$device" $how --hq 16 --hkv 1 \
  --d 576 --dv 512 --pattern causal --repeat 5 "$@" || exit; done' - "$clattn" "$device" \
  "${mla[@]}"

echo "total $((SECONDS - started))s; results in $out" | tee -a "$out/summary.txt"
[ "$failed" -eq 0 ] || exit 1
