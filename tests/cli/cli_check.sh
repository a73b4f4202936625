#!/usr/bin/env bash
# A harness that can fail: `clattn check --quick` fails on a kernel that leaves empty rows
# unwritten (O and LSE start as NaN, not zeros), `check --require` fails when a listed variant
# does not run (and "all passed" is never said while a variant was not run), and the test
# scripts' exit status is a failure whatever the number of failures.
# A variant that serves none of a sweep's cases (the tensor-core variant whose self-test fails)
# counts as not run.
# Usage: cli_check.sh PATH/TO/clattn PATH/TO/clattn-testing (the test build's copy, whose library
# has the test hooks)
set -uo pipefail
clattn="$(realpath "$1")"
testing="$(realpath "$2")"
# fail, finish
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1

# ---- the scripts' exit status: 256 failures are a failure (a status keeps 8 bits)
(for ((i = 0; i < 256; i++)); do fail "planted $i"; done; finish planted) > /dev/null
status=$?
[ "$status" -eq 1 ] || fail "finish after 256 failures exited $status, not 1"
(finish planted) > /dev/null || fail "finish without failures exited $?"
if grep -nE '^\s*exit "?\$\{?[A-Za-z_]+\}?"?\s*$' "$top"/tests/*/*.sh "$top"/scripts/*.sh; then
  fail "a script exits with a variable (above): a count wraps to 0 at 256; use finish"
fi

# ---- a planted bug: the lanes variant skips O's store for rows with no allowed key. The
# kernels come from a patched copy of cl/ ($CLATTN_KERNEL_DIR) built into a cache of its own.
if [ -f "$top/cl/lanes.cl" ]; then
  cp -r "$top/cl" planted
  sed -i 's/if (row\[g \* 16 + l\] >= 0)$/if (row[g * 16 + l] >= 0 \&\& scale[g * 16 + l] != 0.0f)/' \
    planted/lanes.cl
  if cmp -s "$top/cl/lanes.cl" planted/lanes.cl; then
    fail "the planted bug no longer applies to cl/lanes.cl's store_rows: update this test"
  else
    mkdir planted-cache
    CLATTN_KERNEL_DIR="$work/planted" CLATTN_CACHE_DIR="$work/planted-cache" \
      "$clattn" check --quick --device 0 --variant lanes > out 2> err
    status=$?
    [ "$status" -eq 1 ] ||
      fail "check --quick passed a kernel that skips empty rows (exit $status): $(tail -n 2 out)"
    grep -qE "^  O element [0-9]+: got nan, reference 0 " err ||
      fail "the planted bug's failure does not name an unwritten O: $(head -n 4 err)"
    grep -q "all passed" out && fail "check said all passed on the planted bug: $(tail -n 1 out)"
  fi
  # the mask rules, shared with the host, come from $CLATTN_KERNEL_DIR too: causality turned
  # around there fails the causal cases (the reference, on the host, keeps the real rule)
  cp -r "$top/cl" planted-rules
  sed -i 's/return !causal || j <= p;/return !causal || j >= p;/' planted-rules/mask_rules.h
  if cmp -s "$top/cl/mask_rules.h" planted-rules/mask_rules.h; then
    fail "the planted rule no longer applies to cl/mask_rules.h: update this test"
  else
    mkdir planted-rules-cache
    CLATTN_KERNEL_DIR="$work/planted-rules" CLATTN_CACHE_DIR="$work/planted-rules-cache" \
      "$clattn" check --quick --device 0 --variant lanes > out 2> err
    [ $? -eq 1 ] || fail "CLATTN_KERNEL_DIR's mask_rules.h was not read: $(tail -n 2 out)"
  fi
  # a kernel that does not build: the failure quotes the build log's first error
  cp -r "$top/cl" planted-syntax
  echo "not a declaration;" >> planted-syntax/lanes.cl
  mkdir planted-syntax-cache
  CLATTN_KERNEL_DIR="$work/planted-syntax" CLATTN_CACHE_DIR="$work/planted-syntax-cache" \
    "$clattn" check --quick --case 0 --device 0 --variant lanes --no-record > out 2> err &&
    fail "check passed a lanes.cl that does not build: $(tail -n 2 out)"
  grep -q "CLATTN_ERR_BUILD: .*; the log's first error: .*unknown type name 'not'" err ||
    fail "a failed build's case does not quote the build log: $(head -n 3 err)"
  "$clattn" check --quick --device 0 --variant lanes > out 2>&1 ||
    fail "check --quick --variant lanes fails with the kernels as they are: $(tail -n 5 out)"
else
  echo "cli_check: the source tree's cl/ is not at $top/cl: the planted bug is not checked"
fi

# ---- --require: a listed variant left out by --path fails the check
"$clattn" check --quick --case 0 --device 0 --path reference --require reference,lanes \
  > out 2> err
status=$?
[ "$status" -eq 1 ] || fail "--require lanes with --path reference exited $status, not 1"
grep -qF "clattn check: --require lanes: not run on device 0: its path, fused, is not among --path" \
  err || fail "--require lanes: no line names the variant not run: $(cat err)"
grep -q "all passed" out && fail "check said all passed with lanes required and not run"
"$clattn" check --quick --case 0 --device 0 --path reference --require reference > out 2>&1 ||
  fail "--require reference with --path reference: $(cat out)"
grep -q "^all passed" out || fail "every required variant ran, yet not all passed: $(cat out)"

# ---- a variant --variant names and --path leaves out is listed with the reason, not dropped
"$clattn" check --quick --case 0 --device 0 --path reference --variant lanes --no-record > out 2>&1 ||
  fail "--variant lanes with --path reference: $(cat out)"
grep -qE "lanes +not run: its path, fused, is not among --path" out ||
  fail "--variant lanes left out by --path is not listed: $(cat out)"
grep -q "^passed where run" out || fail "a variant left out, yet: $(tail -n 1 out)"
# a path given twice runs once; --json and --report naming one file is a usage error
"$clattn" check --quick --case 0 --device 0 --path reference,reference --no-record > out 2>&1 ||
  fail "--path reference,reference: $(cat out)"
[ "$(grep -c ' reference reference ' out)" -eq 1 ] || fail "a path given twice ran twice: $(cat out)"
"$clattn" check --quick --case 0 --path reference --json same.json --report same.json > out 2> err
status=$?
[ "$status" -eq 2 ] || fail "--json and --report on one file exited $status, not 2"
grep -q "name the same file" err || fail "--json and --report on one file: $(cat err)"
# $CLATTN_VERIFY=require-verified does not stand between check and the variants it names
CLATTN_VERIFY=require-verified "$clattn" check --quick --case 0 --device 0 --path fused \
  --variant lanes --no-record > out 2>&1 || fail "check under require-verified: $(cat out)"
grep -qE "^0 +.* fused +lanes +1 +0 " out || fail "under require-verified lanes ran nothing: $(cat out)"

# ---- a variant the device refuses (PoCL's work-groups limited below the rowwise variant's 8)
small=(env POCL_MAX_WORK_GROUP_SIZE=4)
if "${small[@]}" "$clattn" devices --variants 2> /dev/null | grep -qE '^ +rowwise +no '; then
  "${small[@]}" "$clattn" check --quick --case 0 --device 0 --variant rowwise,reference > out 2>&1 ||
    fail "a refused variant that is not required fails the check: $(cat out)"
  grep -qE "^0 +fused +rowwise +not run: work-groups of 4 work-items" out ||
    fail "the refused variant is not listed with its reason: $(cat out)"
  grep -q "^passed where run: 0 failing runs, not run: 1 (required: 0)" out ||
    fail "the summary does not say a variant was not run: $(tail -n 1 out)"
  "${small[@]}" "$clattn" check --quick --case 0 --device 0 --variant rowwise,reference \
    --require rowwise --json "$work/check.json" > out 2> err
  status=$?
  [ "$status" -eq 1 ] || fail "--require rowwise, refused by the device, exited $status, not 1"
  grep -q "^clattn check: --require rowwise: not run on device 0: work-groups of 4" err ||
    fail "--require rowwise: no line names the refusal: $(cat err)"
  grep -q "^FAILED: 0 failing runs, not run: 1 (required: 1)" out ||
    fail "--require rowwise, refused: the summary does not fail: $(tail -n 1 out)"
  grep -q '"required_not_run": 1' check.json || fail "--json lacks required_not_run: $(cat check.json)"
else
  echo "cli_check: POCL_MAX_WORK_GROUP_SIZE=4 does not make device 0 refuse the rowwise variant" \
    "(not PoCL?): the refused variant is not checked"
fi

# ---- head dims past 256: lanes, split and flash (in pieces) serve them (checked against the
# reference), rowwise does not claim them (CLATTN_ERR_UNSUPPORTED): "not served", which neither
# fails its row nor earns it a verdict, nor keeps "all passed" from being said
"$clattn" check --quick --list | grep -F "Dqk=576 Dv=512" > /dev/null ||
  fail "the quick sweep has no case of head dims 576/512: $("$clattn" check --quick --list | tail -n 3)"
wide=$("$clattn" check --list | grep -m1 -F "Dqk=576 Dv=512" | awk '{print $1}')
if [ -z "$wide" ]; then
  fail "the full sweep has no case of head dims 576/512: $("$clattn" check --list | tail -n 3)"
else
  "$clattn" check --case "$wide" --device 0 --variant lanes,split,flash,rowwise --verbose \
    --no-record --json "$work/wide.json" > out 2>&1 || fail "check --case $wide (576/512) failed: $(cat out)"
  grep -qE "^0 +.* fused +lanes +1 +0 " out || fail "lanes did not pass the 576/512 case: $(cat out)"
  grep -qE "^0 +.* fused +split +1 +0 " out || fail "split did not pass the 576/512 case: $(cat out)"
  grep -qE "^0 +.* fused +flash +1 +0 " out || fail "flash did not pass the 576/512 case: $(cat out)"
  grep -qE "^0 +.* fused +rowwise +0 +0 .* 1 not served" out ||
    fail "rowwise's row does not say the 576/512 case was not served: $(cat out)"
  grep -qE "^    not served: .*rowwise: head dims up to 256" out ||
    fail "--verbose does not say why rowwise does not serve it: $(cat out)"
  grep -q "^all passed" out || fail "a case not served kept 'all passed' from being said: $(cat out)"
  grep -q '"not_served": 1' wide.json && grep -q '"result": "not served"' wide.json ||
    fail "--json lacks the case not served: $(cat wide.json)"
fi

# ---- K and V in ggml's blocks: the quick sweep has a q4_0 case, the full one a q8_0 case too;
# split reads them (against the reference of the dequantised values), lanes does not serve them,
# and a split whose q4_0 codes are off by one step fails the case
quantised=$("$clattn" check --quick --list | grep -m1 -F "kv=q4_0" | awk '{print $1}')
[ -n "$quantised" ] || fail "the quick sweep has no q4_0 case: $("$clattn" check --quick --list | tail -n 3)"
"$clattn" check --list | grep -F "kv=q8_0" > /dev/null || fail "the full sweep has no q8_0 case"
if [ -n "$quantised" ]; then
  "$clattn" check --quick --case "$quantised" --device 0 --variant split,lanes --verbose \
    --no-record > out 2>&1 || fail "check --quick --case $quantised (q4_0) failed: $(cat out)"
  grep -qE "^0 +.* fused +split +1 +0 " out || fail "split did not pass the q4_0 case: $(cat out)"
  grep -qE "^    not served: .*lanes: .*not q4_0" out ||
    fail "--verbose does not say why lanes does not serve the q4_0 case: $(cat out)"
  if [ -f "$top/cl/common.cl" ]; then
    rm -rf planted-q4 && cp -r "$top/cl" planted-q4
    sed -i 's/ - (char16)8)/ - (char16)7)/g' planted-q4/common.cl
    if cmp -s "$top/cl/common.cl" planted-q4/common.cl; then
      fail "the planted q4_0 bug no longer applies to cl/common.cl: update this test"
    else
      mkdir -p planted-q4-cache
      CLATTN_KERNEL_DIR="$work/planted-q4" CLATTN_CACHE_DIR="$work/planted-q4-cache" \
        "$clattn" check --quick --case "$quantised" --device 0 --variant split --no-record \
        > out 2>&1 && fail "check passed a split that reads q4_0 codes one step off: $(cat out)"
      grep -qE "^0 +.* fused +split +0 +1 " out || fail "the planted q4_0 bug's row: $(cat out)"
    fi
  fi
fi

# ---- --storage: every case's Q, K and V in one storage type (the tensor-core variant's check),
# checked against the reference of the rounded values; quantised K and V stay as they are
"$clattn" check --quick --storage bf16 --list > out 2>&1 || fail "check --storage bf16 --list: $(cat out)"
grep -qE '^0 +.* bf16->f32 ' out || fail "--storage bf16 left case 0 in its own storage: $(head -n 2 out)"
grep -qE ' f32->f32 .*kv=q4_0' out || fail "--storage bf16 changed a quantised case: $(tail -n 2 out)"
"$clattn" check --quick --case 0 --storage f16 --device 0 --variant lanes --no-record > out 2>&1 ||
  fail "check --quick --case 0 --storage f16 failed: $(cat out)"
grep -qE "^0 +.* fused +lanes +1 +0 " out || fail "lanes did not pass case 0 in f16: $(cat out)"
"$clattn" check --quick --storage f64 --list > out 2> err
status=$?
[ "$status" -eq 2 ] || fail "--storage f64 exited $status, not 2"
grep -qF -- "--storage" err || fail "--storage f64: the message does not name the option: $(cat err)"
# --list runs nothing, so options of a run are refused rather than ignored; so is a time limit
# for rows that run in this process
expect 2 "--list lists the sweep and runs nothing" -- "$clattn" check --list --case 3
expect 2 "got --device" -- "$clattn" check --quick --list --device 0
expect 2 "--timeout needs rows in processes of their own" -- \
  "$clattn" check --quick --in-process --timeout 5 --no-record
"$clattn" check --list | grep -qE 'Nk=1500 .* scale=4 ' ||
  fail "the full sweep has no case of a few dominant keys on long rows"
"$clattn" check --list | grep -qE 'window=0,0 ' || fail "the full sweep has no rows of one key"

# ---- a variant that serves none of the sweep's cases ran nothing: nv_mma (emulated through the
# test hook) with its A operand's fragment rows swapped fails its one-tile self-test and refuses
# every call; the sweep says so instead of "all passed", and --require nv_mma fails. The same
# variant unplanted serves the float16 cases and earns "all passed".
if [ -f "$top/cl/nv_mma.cl" ]; then
  mkdir -p self-test-cache healthy-cache && cp -r "$top/cl" planted-mma
  sed -i 's/(g + 8 \* (r % 2)) \* 16 + 2 \* t + 8 \* (r \/ 2)/(g + 8 * (r \/ 2)) * 16 + 2 * t + 8 * (r % 2)/' \
    planted-mma/nv_mma.cl
  if cmp -s "$top/cl/nv_mma.cl" planted-mma/nv_mma.cl; then
    fail "the planted fragment-layout bug no longer applies to cl/nv_mma.cl: update this test"
  else
    mma=(env CLATTN_TEST_NV_MMA=emulate CLATTN_KERNEL_DIR="$work/planted-mma"
      CLATTN_CACHE_DIR="$work/self-test-cache" "$testing" check --quick --storage f16 --device 0
      --variant nv_mma --no-record)
    "${mma[@]}" > out 2>&1 || fail "a row that served nothing, not required, failed the check: $(cat out)"
    grep -qE "^0 +.* fused +nv_mma +0 +0 .* 40 not served" out || fail "the planted row: $(cat out)"
    grep -q "^passed where run: 0 failing runs, not run: 1 (required: 0)" out ||
      fail "a row that served none of the cases left 'all passed' standing: $(tail -n 1 out)"
    "${mma[@]}" --require nv_mma > out 2> err
    status=$?
    [ "$status" -eq 1 ] || fail "--require nv_mma, which served nothing, exited $status, not 1"
    grep -qF "clattn check: --require nv_mma: not run on device 0: served none of the sweep's 40" \
      err || fail "--require nv_mma: no line says it served none of the cases: $(cat err)"
    grep -q "^FAILED: 0 failing runs, not run: 1 (required: 1)" out ||
      fail "--require nv_mma, which served nothing: the summary does not fail: $(tail -n 1 out)"
  fi
  CLATTN_TEST_NV_MMA=emulate CLATTN_CACHE_DIR="$work/healthy-cache" "$testing" check --quick \
    --storage f16 --device 0 --variant nv_mma --require nv_mma --no-record > out 2>&1 ||
    fail "the emulated nv_mma failed the quick sweep in float16: $(cat out)"
  grep -q "^all passed" out || fail "the emulated nv_mma served cases, yet not all passed: $(cat out)"
fi

finish cli_check
