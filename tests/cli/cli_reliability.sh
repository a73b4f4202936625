#!/usr/bin/env bash
# The clattn program under conditions that once aborted, hung or clobbered (the reliability
# issue): values at the edge of their range named as such, outputs that are not regular files
# (device nodes, FIFOs), a memory limit, and no OpenCL platform loadable.
# Usage: cli_reliability.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
# fail, expect STATUS TEXT -- COMMAND...
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1

one='\x00\x00\x80\x3f'
make_npy q.npy "(1, 5, 2, 4)" "$one"
make_npy k.npy "(1, 6, 1, 4)" "$one"
make_npy v.npy "(1, 6, 1, 4)" "$one"
run=(run --q q.npy --k k.npy --v v.npy --path reference)

# ---- values at the edge of their range: named as such, a usage error (exit 2)
expect 2 "rounds to 0 in float32" -- "$clattn" "${run[@]}" --out o.npy --scale 1e-50
expect 2 "must be non-zero" -- "$clattn" "${run[@]}" --out o.npy --scale 0
expect 2 "--stride: expected an integer from 1 to" -- \
  "$clattn" pattern strided --nq 64 --nk 64 --block 8,8 --stride 9223372036854775807 --show
"$clattn" pattern sliding --nq 5 --nk 6 --block 4,4 --out layout.npy > /dev/null || fail "pattern"
for size in 3000000000,4 4,2147483648 0,2; do
  expect 2 "--block-size: expected A,B with integers from 1 to 2147483647" -- \
    "$clattn" "${run[@]}" --out o.npy --block-layout layout.npy --block-size "$size"
done
expect 2 "--block: expected A,B with integers from 1 to 2147483647" -- \
  "$clattn" pattern sliding --nq 64 --nk 64 --block 3000000000,8 --show
expect 2 "--pattern blocks:layout.npy,3000000000,4: BQ" -- \
  "$clattn" bench --pattern blocks:layout.npy,3000000000,4 --nq 8 --hq 1 --d 8
[ -e o.npy ] && fail "a refused run wrote o.npy"

# ---- outputs that are not regular files: never replaced by a regular file, never a hang
"$clattn" "${run[@]}" --out ref.npy --lse ref-lse.npy > /dev/null || fail "the reference run"
ref_bytes=$(stat -c %s ref.npy)
if mknod null c 1 3 2> /dev/null; then # a node of its own: a regression must not break /dev/null
  "$clattn" "${run[@]}" --out null --lse lse.npy > /dev/null || fail "run --out to a device"
  cmp -s lse.npy ref-lse.npy || fail "run --out null --lse lse.npy: LSE not written"
  "$clattn" pattern sliding --nq 8 --nk 8 --block 4,4 --out null > /dev/null ||
    fail "pattern --out null"
  "$clattn" check --quick --case 0 --path reference --json null > /dev/null ||
    fail "check --json null"
  [ -c null ] || fail "an output replaced the character device with a regular file"
  mknod blk b 240 0 # (a device number no driver serves: nothing is written even if opened)
  expect 1 "block device" -- "$clattn" "${run[@]}" --out blk
  [ -b blk ] || fail "run --out replaced a block device"
else
  echo "cli_reliability: mknod is not permitted here (not root): device outputs not checked"
fi
mkfifo fifo
expect 1 "FIFO that no process is reading" -- timeout 60 "$clattn" "${run[@]}" --out fifo
expect 1 "FIFO that no process is reading" -- timeout 60 \
  "$clattn" pattern sliding --nq 8 --nk 8 --block 4,4 --out fifo
# beside another output written in place: refused before that one is written (it was written)
"$clattn" "${run[@]}" --out /dev/stdout --lse fifo 2> err | cat > captured
grep -q "FIFO that no process is reading" err || fail "--lse fifo without a reader: $(cat err)"
[ -s captured ] && fail "O went to stdout although --lse's FIFO was refused"
exec 3<> fifo # a reader (and a writer: read below exactly what clattn wrote)
timeout 60 "$clattn" "${run[@]}" --out fifo > /dev/null || fail "run --out to a FIFO with a reader"
timeout 10 head -c "$ref_bytes" <&3 > from-fifo.npy
exec 3<&-
cmp -s from-fifo.npy ref.npy || fail "run --out fifo: the reader did not get O"
[ -p fifo ] || fail "an output replaced the FIFO with a regular file"
# A reader that leaves after 10 bytes of O's 256 KiB: the write fails with a message, without
# SIGPIPE (or, when the reader left before clattn opened the FIFO, it has no reader).
make_npy zero-q.npy "(1, 64, 16, 64)" zeros
make_npy zero-kv.npy "(1, 8, 16, 64)" zeros
exec 3<> fifo
head -c 10 <&3 > /dev/null &
exec 3<&-
expect 1 "--out fifo" -- timeout 60 "$clattn" run --q zero-q.npy --k zero-kv.npy --v zero-kv.npy \
  --path reference --out fifo
wait
echo old > target.npy
ln -s target.npy link.npy
"$clattn" "${run[@]}" --out link.npy > /dev/null || fail "run --out through a symbolic link"
[ -L link.npy ] && cmp -s target.npy ref.npy || fail "run --out link.npy: not written to its target"
# a link to a link to a file that does not exist yet, in another folder: the file is created
mkdir -p elsewhere
ln -s elsewhere/new.npy elsewhere-link.npy && ln -s elsewhere-link.npy dangling.npy
"$clattn" "${run[@]}" --out dangling.npy > /dev/null || fail "run --out through a dangling link"
[ -L dangling.npy ] && [ -L elsewhere-link.npy ] && cmp -s elsewhere/new.npy ref.npy ||
  fail "run --out dangling.npy: the link was replaced, or its target not created"
rm elsewhere/new.npy
expect 2 "--out and --lse name the same file" -- "$clattn" "${run[@]}" --out dangling.npy \
  --lse elsewhere/new.npy
ls ./*.tmp.* ./*.run-* 2> /dev/null && fail "temporary files were left behind"

# ---- a driver registered but not loadable: the platform query's failure, not "no driver".
# The driver search is off: it would find this machine's unregistered PoCL (cli_drivers.sh).
mkdir broken-icd
echo /nonexistent/libclattn-broken-driver.so > broken-icd/broken.icd
broken=(env OCL_ICD_VENDORS="$work/broken-icd" CLATTN_NO_DRIVER_SEARCH=1)
expect 1 "the OpenCL platform query failed: CL_PLATFORM_NOT_FOUND_KHR" -- \
  "${broken[@]}" "$clattn" devices
expect 1 "drivers are registered but none could be loaded" -- \
  "${broken[@]}" "$clattn" run --q q.npy --k k.npy --v v.npy --out o.npy

# ---- memory limits: no hang, no abort where it can be avoided, a message naming memory
limited() { # limited KB COMMAND...: the command under ulimit -v KB, killed after a minute
  local kb="$1"
  shift
  bash -c 'ulimit -v "$0" && exec timeout 120 "$@"' "$kb" "$@"
}
# (ldd's whole output first: `ldd | grep -q` under pipefail fails when grep leaves early and
# ldd gets SIGPIPE, and the sanitizer build then ran the limits it cannot run)
if grep -q libasan <<< "$(ldd "$clattn" 2> /dev/null)"; then
  echo "cli_reliability: memory limits not checked (AddressSanitizer reserves more address space)"
else
  limited 100000 "$clattn" --version > stdout 2> stderr || fail "--version under 100 MB: $?"
  grep -q "^clattn " stdout || fail "--version under 100 MB printed nothing"
  limited 100000 "$clattn" pattern sliding --nq 8 --nk 8 --block 4,4 --show > /dev/null ||
    fail "pattern under 100 MB"
  # 1 GiB of scores and CLBlast's copy of them: more than the 1.2 GB limit leaves.
  make_npy big.npy "(1, 16384, 1, 64)" zeros
  expect 1 "memory" -- limited 1200000 "$clattn" run --q big.npy --k big.npy --v big.npy \
    --path gemm --out o.npy
fi
[ -e o.npy ] && fail "a failing run wrote o.npy"

finish cli_reliability
