#!/usr/bin/env bash
# Device call 1: nv_mma's shapes (block_m, block_n, tile_m, stages: tuning.json entries), three
# ablations of the first shape (what each part of a tile costs), ptxas's register counts, and
# issue 33's two GPU measurements (q4_0 against q8_0 decoding; head dims 576/512).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
t0=$SECONDS
mkdir -p dist/run && tar -C dist/run -xzf dist/clattn-*-linux-x86_64.tar.gz
C=$(realpath dist/run/clattn-*/bin/clattn)
mkdir -p /tmp/vendors && cp /etc/OpenCL/vendors/*.icd /tmp/vendors/ 2> /dev/null
echo /usr/lib/libnvidia-opencl.so.1 > /tmp/vendors/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vendors OPENBLAS_NUM_THREADS=1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/summary.txt" 2>&1
note() { echo "$* (at $((SECONDS - t0))s)" >> "$O/summary.txt"; }

# cache dir per shape, with its tuning.json: NAME BM BN TM STAGES
shape_dir() {
  local d=/tmp/shapes/$1; mkdir -p "$d"
  printf '{"clattn_tuning": 1, "entries": [{"device": "%s", "variant": "nv_mma", "block_m": %s, "block_n": %s, "tile_m": %s, "stages": %s}]}\n' \
    "$GPU" "$2" "$3" "$4" "$5" > "$d/tuning.json"
}
D64=(--hq 8 --nq 16384 --d 64); D128=(--hq 16 --nq 4096 --d 128)
S64="a 64 64 1 1;b 128 64 1 1;c 128 64 2 1;d 64 64 1 2;e 128 64 1 2;f 128 32 2 2;g 128 64 2 2;h 64 32 1 2"
S128="A 64 64 1 1;B 128 64 1 1;C 128 32 1 2;D 64 32 1 2;E 128 64 2 1;F 128 32 2 2"
b() { # CACHE_DIR bench-args...
  local d=$1; shift
  CLATTN_CACHE_DIR=$d "$C" bench --device gpu --variant nv_mma --dtype f16 "$@"
}
IFS=';' read -ra L64 <<< "$S64"; IFS=';' read -ra L128 <<< "$S128"
for s in "${L64[@]}" "${L128[@]}"; do shape_dir $s; done
for a in nosoftmax nostage nopv; do
  mkdir -p /tmp/abl/$a/cl /tmp/shapes/$a && cp cl/* /tmp/abl/$a/cl/
done
sed -i 's/^    softmax_step(f, st, s);$/    ;/' /tmp/abl/nosoftmax/cl/nv_mma.cl
sed -i '/^ALWAYS_INLINE void fetch_tile(/a\    return;' /tmp/abl/nostage/cl/nv_mma.cl
sed -i '/^ALWAYS_INLINE void store_tile(/a\    return;' /tmp/abl/nostage/cl/nv_mma.cl
sed -i 's/^        accumulate_pv(f, buf, st, s);$/        ;/' /tmp/abl/nopv/cl/nv_mma.cl
for a in nosoftmax nostage nopv; do cmp -s cl/nv_mma.cl /tmp/abl/$a/cl/nv_mma.cl && note "ablation $a: sed matched nothing"; done

# builds, in parallel (NVIDIA's compiler: ~10 s a program)
for s in "${L64[@]}"; do set -- $s; b /tmp/shapes/$1 "${D64[@]}" --nq 128 --repeat 1 > /tmp/shapes/$1/warm.txt 2>&1 & done
for s in "${L128[@]}"; do set -- $s; b /tmp/shapes/$1 "${D128[@]}" --nq 128 --repeat 1 > /tmp/shapes/$1/warm.txt 2>&1 & done
for a in nosoftmax nostage nopv; do
  CLATTN_KERNEL_DIR=/tmp/abl/$a/cl b /tmp/shapes/$a "${D64[@]}" --nq 128 --repeat 1 > /tmp/shapes/$a/warm.txt 2>&1 &
done
wait; note "builds done"

{
for s in "${L64[@]}"; do set -- $s; echo "== $s"; CLATTN_VERBOSE=1 b /tmp/shapes/$1 "${D64[@]}" --repeat 5 --pattern full,causal 2>&1 | grep -v '^clattn: driver search\|^clattn: cache hit\|key tiles$' ; done
for s in "${L128[@]}"; do set -- $s; echo "== $s"; CLATTN_VERBOSE=1 b /tmp/shapes/$1 "${D128[@]}" --repeat 5 --pattern full,causal 2>&1 | grep -v '^clattn: driver search\|^clattn: cache hit\|key tiles$' ; done
for a in nosoftmax nostage nopv; do echo "== ablation $a"; CLATTN_KERNEL_DIR=/tmp/abl/$a/cl b /tmp/shapes/$a "${D64[@]}" --repeat 5 --pattern full 2>&1 | grep fused; done
} > "$O/shapes.txt" 2>&1
note "shapes timed"

# registers: ptxas on each cached program (the PTX NVIDIA's OpenCL wrote)
PTXAS=$(python3 -c 'import triton, os; print(os.path.dirname(triton.__file__) + "/backends/nvidia/bin/ptxas")' 2> /dev/null)
for f in /tmp/shapes/*/*.clbin; do
  python3 - "$f" > /tmp/k.ptx << 'PY'
import struct, sys
d = open(sys.argv[1], 'rb').read()
key_len, size = struct.unpack_from('<IQ', d, 12)
sys.stdout.write(d[32 + key_len:32 + key_len + size].decode('latin-1'))
sys.stdout.write('\n# key: ' + d[32:32 + key_len].decode('latin-1').replace('\n', ' ')[-300:])
PY
  grep -q 'attention_nv_mma' /tmp/k.ptx || continue
  echo "== $f: $(tail -1 /tmp/k.ptx | grep -o 'DBLOCK_M=[0-9]* -DBLOCK_N=[0-9]* -DM_TILES=[0-9]* -DSTAGES=[0-9]* -DDQK_PAD=[0-9]*')"
  [ -x "$PTXAS" ] && "$PTXAS" -arch=sm_90 -v /tmp/k.ptx -o /dev/null 2>&1 | grep -i 'registers\|spill' | head -4
done > "$O/ptxas.txt" 2>&1
note "ptxas ($PTXAS)"

timeout -k 5 100 python3 bench/vs_torch.py --clattn "$C" --device gpu --torch-device cuda --decode \
  --nk 32768 --dtypes f16,q8_0,q4_0 --rounds 3 --min-repeat 10 --min-time 0.3 > "$O/decode.txt" 2>&1
note "decode rc=$?"
for how in "--variant flash" "--variant split" "--path gemm"; do
  echo "== $how"
  timeout -k 5 90 "$C" bench --device gpu $how --hq 16 --hkv 1 --d 576 --dv 512 --pattern causal \
    --repeat 5 --nq 256,4096 --nk 4096 2>&1 | grep -v '^device\|^path'
done > "$O/wide.txt" 2>&1
note "wide"
CLATTN_CACHE_DIR=/tmp/shapes/g timeout -k 5 100 "$C" check --quick --device gpu --variant nv_mma \
  --storage f16 --no-record > "$O/check-g.txt" 2>&1
note "check g rc=$?"
note "total"
