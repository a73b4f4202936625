#!/usr/bin/env bash
# Device call 2: nv_mma with its fragment loops unrolled (no spills), PTX conversions, ex2.approx.
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
  echo "$n rc=$rc $((SECONDS - s))s (at $((SECONDS - t0))s)" >> "$O/summary.txt"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/env.txt" 2>&1
b() { "$C" bench --device gpu --repeat 5 "$@"; }
step bench 120 env CLATTN_VERBOSE=1 bash -c "$(declare -f b); C=$C
  b --variant nv_mma --dtype f16 --hq 8 --nq 16384 --d 64 --pattern full,causal
  b --variant nv_mma --dtype bf16 --hq 8 --nq 16384 --d 64 --pattern full
  b --variant nv_mma --dtype f16 --hq 16 --nq 4096 --d 128 --pattern full,causal"
tar czf "$O/clbin.tgz" -C "${HOME:-/root}/.cache/clattn" . 2> /dev/null
step check-f16 150 "$C" check --device gpu --variant nv_mma --storage f16 --no-record
step check-bf16 120 "$C" check --device gpu --variant nv_mma --storage bf16 --no-record
step torch 150 python3 bench/vs_torch.py --clattn "$C" --device gpu --torch-device cuda \
  --sizes 16384 --dims 64 --heads 8:8 --patterns full,causal --dtypes f16,bf16 --rounds 2 \
  --min-repeat 5 --min-time 0.3

echo "total $((SECONDS - t0))s" >> "$O/summary.txt"
