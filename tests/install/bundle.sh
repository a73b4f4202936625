#!/usr/bin/env bash
# The bundle (scripts/bundle.sh) on a machine that has only an OpenCL driver and no .icd file
# for it: unpacked into a fresh folder whose path has a space, with an empty vendors folder,
# no $LD_LIBRARY_PATH and a cold clattn kernel cache, the program must load its libraries from the
# bundle (not the build tree or /usr/lib), find PoCL through the driver search and say so,
# pass `clattn check --quick` on it and run a bench of every path (the host path uses the
# bundled OpenBLAS); with CLATTN_NO_DRIVER_SEARCH=1 it finds no device and says why in one
# line. (PoCL's own kernel cache in ~/.cache/pocl stays: it is the driver's, not the bundle's.)
# Usage: tests/install/bundle.sh dist/clattn-VERSION-linux-x86_64.tar.gz
set -uo pipefail
tarball="$(realpath "$1")"
# fail, expect STATUS TEXT -- COMMAND...
source "$(dirname "${BASH_SOURCE[0]}")/../cli/cli_common.sh"
cd "$work" || exit 1
mkdir "un packed" empty-vendors
tar -C "un packed" -xzf "$tarball" || { echo "FAIL: cannot unpack $tarball"; exit 1; }
bundle="$(echo "$work/un packed"/clattn-*)"
clattn="$bundle/bin/clattn"
unset LD_LIBRARY_PATH LD_PRELOAD OCL_ICD_FILENAMES CLATTN_NO_DRIVER_SEARCH CLATTN_DEVICE
export OCL_ICD_VENDORS="$work/empty-vendors" CLATTN_CACHE_DIR="$work/cache"

# Its own libraries, from the bundle: what ldd says, and what the loader really initialised.
# (Outputs go to files first: grep -q in a pipe may leave its writer a SIGPIPE, which pipefail
# would count as a failure.)
resolves_inside() { # resolves_inside LDD_OUTPUT LIB...: ldd lists each LIB, from the bundle
  local list="$1" lib
  shift
  for lib in "$@"; do
    grep -qF "$lib.so" "$list" || { fail "ldd does not list $lib: $(cat "$list")"; continue; }
    grep -F "$lib.so" "$list" | grep -qF "=> $bundle/" ||
      fail "$lib does not resolve inside the bundle: $(grep -F "$lib.so" "$list")"
  done
}
ldd "$clattn" > ldd.txt || fail "ldd $clattn: $(cat ldd.txt)"
resolves_inside ldd.txt libclattn libOpenCL libclblast
# OpenBLAS is not linked: bench's host baseline loads it (dlopen, through clattn's RUNPATH), and
# it finds its own libraries in the bundle.
ldd "$bundle/lib/libopenblas.so.0" > ldd-openblas.txt || fail "ldd libopenblas.so.0"
resolves_inside ldd-openblas.txt libgfortran libquadmath
LD_DEBUG=files "$clattn" --version 2> loaded.txt > /dev/null
for lib in libclattn libOpenCL libclblast; do
  grep -E "calling init: .*/$lib\.so" loaded.txt | grep -qF "$bundle/" ||
    fail "$lib was not initialised from the bundle: $(grep -E "calling init: .*/$lib\.so" loaded.txt)"
done
grep -qE 'glibc [0-9]+\.[0-9]+ or newer' "$bundle/README.txt" ||
  fail "README.txt does not state the glibc it needs"

# The driver search finds PoCL, which no .icd file registers here, and says how to register it.
"$clattn" devices > devices.txt 2> devices.err || fail "clattn devices: $(cat devices.txt devices.err)"
grep -qE '^    found by search: /.*/libpocl\.so\.2 \(PoCL\), .*echo /.*/libpocl\.so\.2 > /etc/OpenCL/vendors/pocl\.icd$' devices.txt ||
  fail "clattn devices does not list PoCL as found by search: $(cat devices.txt)"
"$clattn" check --quick --device 0 --require lanes,rowwise,split,flash,gemm > check.txt 2>&1 ||
  fail "clattn check --quick --device 0: $(tail -n 20 check.txt)"
LD_DEBUG=files "$clattn" bench --path fused,gemm,host --b 1 --hq 2 --nq 128 --d 32 --warmup 1 \
  --repeat 2 --device 0 --csv bench.csv > bench.txt 2> bench.err ||
  fail "clattn bench: $(tail -n 20 bench.txt bench.err)"
for path in fused gemm host; do
  grep -q ",$path," bench.csv || fail "the bench has no $path row: $(cat bench.csv)"
done
grep -E "calling init: .*/libopenblas\.so" bench.err | grep -qF "$bundle/" ||
  fail "the host baseline did not load the bundle's OpenBLAS: $(grep -F libopenblas bench.err)"

# The search off: nothing registered, nothing searched, one clear line.
expect 1 "driver search: off (CLATTN_NO_DRIVER_SEARCH is set)" -- \
  env CLATTN_NO_DRIVER_SEARCH=1 "$clattn" devices
expect 1 "no OpenCL device found: no OpenCL platform: install an OpenCL driver" -- \
  env CLATTN_NO_DRIVER_SEARCH=1 "$clattn" check --quick

finish "the bundle in $bundle"
