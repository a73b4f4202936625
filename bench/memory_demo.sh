#!/usr/bin/env bash
# Sharded attention holds what one device cannot: with PoCL's memory limited to 1 GiB
# (POCL_MEMORY_LIMIT=1; its largest allocation is then 256 MiB), a causal call whose K and V
# take 1.17 GiB (Nk = 307200 keys, 4 kv heads of 128 dims, float32) fails on one device and runs
# on 2 MPI ranks (zigzag shards: each rank's key/value shard is two chunks of 150 MiB). Its
# output is compared with the same call on one device without the limit. Nq is 256 rows, so
# the compute stays small. Writes about 2.4 GB of inputs into DIR (default a temporary folder,
# removed at the end). Usage: bench/memory_demo.sh PATH/TO/clattn [DIR]
set -euo pipefail
clattn="$(realpath "$1")"
dir="${2:-$(mktemp -d)}"
[ -n "${2:-}" ] || trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# .npy files of seeded uniform values in [-1, 1): a block of 2^20 values written over and over
python3 - "$dir" <<'EOF'
import array, random, struct, sys
def npy(path, shape):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(map(str, shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    random.seed(len(path))
    block = array.array("f", (random.uniform(-1, 1) for _ in range(1 << 20))).tobytes()
    count = 1
    for n in shape:
        count *= n
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        while count > 0:
            f.write(block[: 4 * min(count, 1 << 20)])
            count -= 1 << 20
npy(sys.argv[1] + "/q.npy", (1, 256, 4, 128))
npy(sys.argv[1] + "/k.npy", (1, 307200, 4, 128))
npy(sys.argv[1] + "/v.npy", (1, 307200, 4, 128))
EOF
ls -l "$dir"/*.npy
call=(run --q "$dir/q.npy" --k "$dir/k.npy" --v "$dir/v.npy" --causal)

echo "== one device, unlimited: the reference output"
/usr/bin/time -f "%e s, %M KiB peak" "$clattn" "${call[@]}" --out "$dir/o_ref.npy"
echo "== one device, POCL_MEMORY_LIMIT=1 (expected to fail)"
if POCL_MEMORY_LIMIT=1 "$clattn" "${call[@]}" --out "$dir/o_one.npy"; then
  echo "one device held it: the demonstration needs larger inputs"; exit 1
fi
echo "== 2 ranks, POCL_MEMORY_LIMIT=1 each"
/usr/bin/time -f "%e s" mpirun -np 2 --oversubscribe -x POCL_MEMORY_LIMIT=1 \
  "$clattn" "${call[@]}" --out "$dir/o_two.npy" --distributed ring --compare "$dir/o_ref.npy"
