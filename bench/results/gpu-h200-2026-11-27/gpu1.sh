#!/usr/bin/env bash
# Device call 1 of the thirteenth session: nv_mma on the GPU (build, self-test, check in f16 and
# bf16, speed against torch), then the quick check of the other variants.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
t0=$SECONDS
mkdir -p dist/run && tar -C dist/run -xzf dist/clattn-*-linux-x86_64.tar.gz
C=$(realpath dist/run/clattn-*/bin/clattn)
mkdir -p /tmp/vendors && cp /etc/OpenCL/vendors/*.icd /tmp/vendors/ 2> /dev/null
echo /usr/lib/libnvidia-opencl.so.1 > /tmp/vendors/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vendors
step() { # NAME LIMIT CMD...
  local n=$1 l=$2 s=$SECONDS; shift 2
  timeout -k 5 "$l" "$@" > "$O/$n.txt" 2>&1; local rc=$?
  echo "$n rc=$rc $((SECONDS - s))s (at $((SECONDS - t0))s)" | tee -a "$O/summary.txt"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/env.txt" 2>&1
step devices 40 "$C" devices --variants
step one 90 env CLATTN_VERBOSE=1 "$C" check --device gpu --variant nv_mma --storage f16 --case 34 \
  --in-process --verbose --no-record
step check-f16 170 "$C" check --device gpu --variant nv_mma --storage f16 --no-record --verbose
step check-bf16 130 "$C" check --device gpu --variant nv_mma --storage bf16 --no-record
step bench 100 "$C" bench --device gpu --variant nv_mma --dtype f16 --hq 8 --nq 16384 --d 64 \
  --pattern full,causal --repeat 5
step bench128 60 "$C" bench --device gpu --variant nv_mma --dtype f16 --hq 16 --nq 4096 --d 128 \
  --pattern full,causal --repeat 5
step torch 120 python3 bench/vs_torch.py --clattn "$C" --device gpu --torch-device cuda \
  --sizes 16384 --dims 64 --heads 8:8 --patterns full,causal --dtypes f16,bf16 --rounds 2 \
  --min-repeat 5 --min-time 0.3
step others 100 "$C" check --quick --device gpu --variant lanes,rowwise,split,flash,gemm \
  --no-record --jobs 5
echo "total $((SECONDS - t0))s" >> "$O/summary.txt"
