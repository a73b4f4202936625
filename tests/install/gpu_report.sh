#!/usr/bin/env bash
# scripts/gpu-report.sh as a GPU machine runs it, here on PoCL: the bundle unpacked, the quick
# report on device 0 with torch on the CPU. Every step passes and writes what it says (the
# check's rows, the tuner's entry, each benchmark's records, with torch's times when PYTHON has
# torch and none when it has not); a report into a folder that holds files is refused; a device
# that does not exist fails every step that needs it, and the report still goes to the end and
# exits 1. An empty ICD vendors folder (PoCL comes from the driver search) and a kernel cache of
# its own (a copy of the build's, when given), so that the tuner's entry stays here.
# Usage: tests/install/gpu_report.sh TARBALL PYTHON [KERNEL_CACHE]
set -uo pipefail
tarball="$(realpath "$1")" python="$2" cache="${3:-}"
source "$(dirname "${BASH_SOURCE[0]}")/../cli/cli_common.sh"
report="$top/scripts/gpu-report.sh"
tar -C "$work" -xzf "$tarball" || { echo "FAIL: cannot unpack $tarball"; exit 1; }
clattn="$(echo "$work"/clattn-*/bin/clattn)"
mkdir "$work/cache" "$work/empty-vendors"
[ -n "$cache" ] && [ -d "$cache" ] && cp -r "$cache/." "$work/cache/"
# PoCL from the driver search, as the GPU machine's driver (device 0 is PoCL's whatever else the
# system registers)
unset OCL_ICD_FILENAMES CLATTN_NO_DRIVER_SEARCH CLATTN_DEVICE
export CLATTN_CACHE_DIR="$work/cache" OCL_ICD_VENDORS="$work/empty-vendors"
no_leak_checks_for_pocl_compiles

"$report" --quick --device 0 --torch-device cpu --clattn "$clattn" --python "$python" \
  --out "$work/report" > "$work/log" 2>&1 || fail "the report failed: $(tail -n 40 "$work/log")"
steps="devices check check-16bit tune prefill-d64 prefill-d128 decode sparse wide"
for step in $steps; do
  grep -qE "^$step +[0-9]+s  ok$" "$work/report/summary.txt" ||
    fail "step $step is not ok: $(cat "$work/report/summary.txt")"
  [ -s "$work/report/$step.txt" ] || fail "no $step.txt"
done
grep -qF '"device": "' "$CLATTN_CACHE_DIR/tuning.json" || fail "tune wrote no tuning.json entry"
[ "$(grep -cE "^0 +.* fused +nv_mma +not run: tensor cores through NVIDIA's OpenCL only" \
  "$work/report/check-16bit.txt")" -eq 2 ] ||
  fail "check-16bit.txt does not say twice why PoCL does not run nv_mma: $(cat "$work/report/check-16bit.txt")"
has_torch=0
"$python" -c 'import torch' 2> /dev/null && has_torch=1
# each benchmark's records: its shapes, clattn's kernel and times, torch's where it has them
"$python" - "$work/report" "$has_torch" > "$work/records" 2>&1 << 'EOF' ||
import json, sys
folder, has_torch = sys.argv[1], sys.argv[2] == "1"
counts = {"prefill-d64": 6, "prefill-d128": 4, "decode": 5, "sparse": 5}
for name, count in counts.items():
    results = json.load(open(f"{folder}/{name}.json"))["results"]
    assert len(results) == count, f"{name}: {len(results)} records, expected {count}"
    for r in results:
        assert r["clattn_ms_median"] > 0, f"{name}: {r}"
        torch_timed = r["torch_ms_median"] is not None
        expected = has_torch and name != "sparse" and r.get("dtype") not in ("q8_0", "q4_0")
        assert torch_timed == expected, f"{name}: torch time {r['torch_ms_median']}: {r}"
    if name == "sparse":
        window = next(r for r in results if r["pattern"].startswith("window"))
        assert 0 < window["clattn_fraction_of_ideal"] <= 1.5, window
check = json.load(open(f"{folder}/check.json"))
rows = check["results"]
assert len(rows) >= 5 and check["failures"] == 0, rows
assert all(row["passed"] > 0 and row["failed"] == 0 for row in rows), rows
EOF
  fail "the report's records: $(cat "$work/records")"
# head dims 576/512: a row of each of flash (in pieces), split and the gemm path at both lengths
for how in "fused +flash" "fused +split" "gemm +"; do
  [ "$(grep -cE "^$how.* 576 +512 +causal" "$work/report/wide.txt")" -eq 2 ] ||
    fail "wide.txt has no two rows of $how: $(cat "$work/report/wide.txt")"
done

# a folder that holds files is not written into
expect 2 "is not an empty folder" -- "$report" --device 0 --clattn "$clattn" --out "$work/report"
# no such device: the steps fail, the report goes to the end and says so
"$report" --quick --device 99 --clattn "$clattn" --python "$python" --out "$work/none" \
  > "$work/log" 2>&1
status=$?
[ $status -eq 1 ] || fail "a report on no device exited $status, expected 1"
grep -q "^wide .*FAILED (exit 1)$" "$work/none/summary.txt" ||
  fail "the last step did not run and fail: $(cat "$work/none/summary.txt")"
grep -q "no device matches '99'" "$work/none/check.txt" ||
  fail "check.txt does not say why: $(cat "$work/none/check.txt")"
finish gpu_report
