#!/usr/bin/env bash
# The driver search through the clattn program: with the ICD loader's registry it adds nothing
# (no device twice); with an empty vendors folder it finds PoCL in the dynamic linker's paths
# and says where it came from and how to register it; CLATTN_NO_DRIVER_SEARCH=1 gives no device
# and says so in one line; in a GPU machine's layout (test builds move the folders under
# $CLATTN_TEST_DRIVER_ROOT, read by the test build's copy of the program) it finds PoCL in /usr/lib, reports a driver that gives no platform,
# and skips broken libraries (garbage, no ICD entry point, an unresolved symbol) without
# crashing; a platform that loads but offers no device is named with its likely cause.
# Usage: cli_drivers.sh PATH/TO/clattn C_COMPILER PATH/TO/clattn-testing
set -uo pipefail
clattn="$(realpath "$1")" cc="$2" clattn_hooked="$(realpath "$3")"
# fail, expect STATUS TEXT -- COMMAND...
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1
unset OCL_ICD_FILENAMES CLATTN_NO_DRIVER_SEARCH
mkdir empty-vendors
device_lines() { grep -cE '^[0-9]+ ' "$1"; }
found_lines() { grep -c '^    found by search: ' "$1"; }

# 1. As registered: the search adds only the devices it says it found.
"$clattn" devices > registered.txt || fail "clattn devices with the registered drivers"
CLATTN_NO_DRIVER_SEARCH=1 "$clattn" devices > unsearched.txt
[ "$(device_lines registered.txt)" -eq $(($(device_lines unsearched.txt) + $(found_lines registered.txt))) ] ||
  fail "the search listed a registered device twice: $(cat registered.txt)"
grep -q 'Portable Computing Language' registered.txt ||
  { echo "SKIP: no PoCL registered here, the rest needs it"; exit 0; }

# 2. An empty vendors folder: PoCL comes from the search, once, with its line.
OCL_ICD_VENDORS="$work/empty-vendors" "$clattn" devices > searched.txt ||
  fail "clattn devices with an empty vendors folder: $(cat searched.txt)"
[ "$(device_lines searched.txt)" -ge 1 ] || fail "the search found no device"
[ "$(found_lines searched.txt)" -eq "$(device_lines searched.txt)" ] ||
  fail "a device of an empty vendors folder lacks its 'found by search' line: $(cat searched.txt)"
grep -qE '^    found by search: /.*/libpocl\.so\.2 \(PoCL\), .*register it with: echo /.*/libpocl\.so\.2 > /etc/OpenCL/vendors/pocl\.icd$' searched.txt ||
  fail "the 'found by search' line does not say where PoCL is and how to register it: $(cat searched.txt)"
[ "$(grep -c 'platform Portable Computing Language' searched.txt)" -eq \
  "$(grep -c 'platform Portable Computing Language' unsearched.txt)" ] ||
  fail "PoCL's devices differ between the registry and the search"

# 3. The search off: no device, one line that says why.
export OCL_ICD_VENDORS="$work/empty-vendors"
expect 1 "driver search: off (CLATTN_NO_DRIVER_SEARCH is set)" -- \
  env CLATTN_NO_DRIVER_SEARCH=1 "$clattn" devices
expect 1 "no OpenCL device found" -- env CLATTN_NO_DRIVER_SEARCH=1 "$clattn" check --quick
expect 1 "driver search: looked for NVIDIA, AMD, Intel and PoCL drivers" -- \
  env CLATTN_TEST_DRIVER_ROOT="$work/nothing" "$clattn_hooked" devices

# 4. A GPU machine's layout: PoCL in /usr/lib (as NVIDIA's library is on some), NVIDIA's name
# on a stub that exports the ICD entry point but gives no platform, and broken libraries.
root="$work/root"
mkdir -p "$root/usr/lib" "$root/share" "$root/usr/local/nvidia/lib64" "$root/opt/rocm/lib" \
  "$root/usr/lib64/intel-opencl"
pocl="$(realpath "$(grep -o '/[^ ]*/libpocl\.so\.2' searched.txt | head -n 1)")"
# Debian's PoCL is relocatable: it finds its device modules (pocl/) beside itself and its
# data in ../../share/pocl.
ln -s "$pocl" "$root/usr/lib/libpocl.so.2"
ln -s "$(dirname "$pocl")/pocl" "$root/usr/lib/pocl"
ln -s "$(realpath -m "$(dirname "$pocl")/../../share/pocl")" "$root/share/pocl"
echo "not a library" > "$root/usr/local/nvidia/lib64/libnvidia-opencl.so.1"
echo 'void *clGetExtensionFunctionAddress(const char *n) { (void)n; return 0; }' |
  "$cc" -shared -fPIC -x c - -o "$root/usr/lib/libnvidia-opencl.so.1"
echo 'int not_a_driver;' | "$cc" -shared -fPIC -x c - -o "$root/opt/rocm/lib/libamdocl64.so"
printf '%s\n' 'void *clattn_missing(const char *);' \
  'void *clGetExtensionFunctionAddress(const char *n) { return clattn_missing(n); }' |
  "$cc" -shared -fPIC -x c - -o "$root/usr/lib64/intel-opencl/libigdrcl.so"
CLATTN_TEST_DRIVER_ROOT="$root" CLATTN_VERBOSE=1 "$clattn_hooked" devices > layout.txt 2> layout.err ||
  fail "clattn devices in the GPU machine's layout: $(cat layout.txt layout.err)"
grep -qF "    found by search: $root/usr/lib/libpocl.so.2 (PoCL)" layout.txt ||
  fail "PoCL in /usr/lib was not found: $(cat layout.txt)"
grep -qF "found by search: $root/usr/lib/libnvidia-opencl.so.1 (NVIDIA), but the ICD loader got no platform from it" layout.txt ||
  fail "the stub that gives no platform is not reported: $(cat layout.txt)"
grep -qE 'amdocl|igdrcl|nvidia/lib64' layout.txt && fail "a broken library was offered: $(cat layout.txt)"
grep -qF "skipping $root/usr/local/nvidia/lib64/libnvidia-opencl.so.1" layout.err ||
  fail "the garbage file is not skipped: $(cat layout.err)"
grep -qF "skipping $root/opt/rocm/lib/libamdocl64.so: exports no clGetExtensionFunctionAddress" layout.err ||
  fail "the library without the ICD entry point is not skipped: $(cat layout.err)"
grep -qE "skipping $root/usr/lib64/intel-opencl/libigdrcl.so: .*undefined symbol: clattn_missing" layout.err ||
  fail "the library with an unresolved symbol is not skipped: $(cat layout.err)"

# 5. A platform that loads but offers no device: PoCL, registered alone, refusing its devices
# (POCL_DEVICES naming none it has; HOME or XDG_CACHE_HOME where it cannot make its kernel
# cache). One line names the platform and the likely cause, and does not advise installing it.
mkdir pocl-only
echo "$pocl" > pocl-only/pocl.icd
pocl_only=(env -u POCL_DEVICES -u POCL_CACHE_DIR -u XDG_CACHE_HOME OCL_ICD_VENDORS="$work/pocl-only"
           CLATTN_NO_DRIVER_SEARCH=1)
refused="platform 'Portable Computing Language' loaded but offered no device"
no_install_advice() {
  grep -qE 'pocl-opencl-icd|driver search' "$work/stderr" &&
    fail "$1: PoCL loaded, yet the message advises installing it: $(cat "$work/stderr")"
}
expect 1 "$refused: POCL_DEVICES=bogus" -- "${pocl_only[@]}" POCL_DEVICES=bogus "$clattn" devices
no_install_advice "POCL_DEVICES=bogus"
expect 1 "$refused: PoCL refuses its devices when it cannot create its kernel cache folder, /dev/null/.cache/pocl/kcache" -- \
  "${pocl_only[@]}" HOME=/dev/null "$clattn" devices
no_install_advice "HOME=/dev/null"
expect 1 "/proc/self/pocl/kcache" -- "${pocl_only[@]}" XDG_CACHE_HOME=/proc/self "$clattn" check --quick
no_install_advice "XDG_CACHE_HOME=/proc/self"
# with devices, the listing ends with the platforms that offered none (here rusticl, Clover)
"$clattn" devices > listing.txt || fail "clattn devices"
if grep -q "^without a device: " listing.txt; then
  grep "^without a device: " listing.txt | grep -q "Portable Computing Language" &&
    fail "PoCL offers devices, yet it is listed without one: $(cat listing.txt)"
fi

finish cli_drivers
