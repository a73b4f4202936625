#!/usr/bin/env bash
# Device call 3: nv_mma with 16-byte K/V loads and the next tile prefetched into registers.
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
  timeout -k 5 "$l" "$@" >> "$O/$n.txt" 2>&1; local rc=$?
  echo "$n rc=$rc $((SECONDS - s))s (at $((SECONDS - t0))s)" >> "$O/summary.txt"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/summary.txt" 2>&1
b() { "$C" bench --device gpu --repeat 5 --variant nv_mma "$@" | grep -v '^device\|^path'; }
bench_all() {
  b --dtype f16 --hq 8 --nq 16384 --d 64 --pattern full,causal
  CLATTN_KERNEL_DIR=$PWD/dist/knp b --dtype f16 --hq 8 --nq 16384 --d 64 --pattern full
  b --dtype f16 --hq 16 --nq 4096 --d 128 --pattern full,causal
}
step bench 100 env CLATTN_VERBOSE=1 bash -c "$(declare -f b bench_all); C=$C; bench_all"
step check 130 "$C" check --device gpu --variant nv_mma --storage f16 --no-record
step check 60 "$C" check --quick --device gpu --variant nv_mma --storage bf16 --no-record
step torch 120 python3 bench/vs_torch.py --clattn "$C" --device gpu --torch-device cuda \
  --sizes 16384 --dims 64 --heads 8:8 --patterns full,causal --dtypes f16,bf16 --rounds 2 \
  --min-repeat 5 --min-time 0.3
step torch 60 python3 bench/vs_torch.py --clattn "$C" --device gpu --torch-device cuda \
  --sizes 4096 --dims 128 --heads 16:16 --patterns full,causal --dtypes f16 --rounds 2 \
  --min-repeat 5 --min-time 0.3
echo "total $((SECONDS - t0))s" >> "$O/summary.txt"
