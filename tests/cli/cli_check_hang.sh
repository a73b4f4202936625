#!/usr/bin/env bash
# `clattn check` survives a row that hangs or crashes: a copy of cl/ ($CLATTN_KERNEL_DIR) whose
# rowwise kernel spins for ever makes that row time out (named with its case) while the other
# rows run to the end (two at once with --jobs 2), the exit status fails, --json records every
# case; a check killed outright takes its rows with it; a kernel that crashes its process is
# reported with the signal; a terminal shows the running case; and no "no variant N" line comes
# out of the walk over the variant table.
# Usage: cli_check_hang.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
# fail, finish
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1

if [ ! -f "$top/cl/rowwise.cl" ]; then
  echo "cli_check_hang: the source tree's cl/ is not at $top/cl: skipped"
  exit 0
fi

# ---- the spinning kernel: rowwise never returns from its first launch
cp -r "$top/cl" spin
sed -i 's|^attention_rowwise(ATTENTION_KERNEL_ARGS) {|&\n    for (volatile int spin = 1; spin;) {\n    }|' \
  spin/rowwise.cl
grep -q "volatile int spin" spin/rowwise.cl ||
  fail "the spin no longer applies to cl/rowwise.cl's kernel: update this test"
mkdir spin-cache
spin_env=(env CLATTN_KERNEL_DIR="$work/spin" CLATTN_CACHE_DIR="$work/spin-cache")

# ---- a check killed outright (SIGKILL: no handler runs) takes its hung row with it: the row's
# process asked the kernel for SIGKILL when its parent dies (Linux)
"${spin_env[@]}" "$clattn" check --quick --device 0 --variant rowwise --timeout 60 --no-record \
  > killed.out 2>&1 &
check_pid=$!
row=""
for _ in $(seq 100); do
  row=$(pgrep -P "$check_pid" -f -- "--child-fd" | head -n 1)
  [ -n "$row" ] && break
  sleep 0.2
done
[ -n "$row" ] || fail "no row process started under the check"
sleep 1
kill -KILL "$check_pid"
wait "$check_pid" 2> /dev/null
for _ in $(seq 50); do
  state=$(ps -o stat= -p "$row" 2> /dev/null)
  [ -z "$state" ] || [[ "$state" == Z* ]] && break
  sleep 0.1
done
[ -z "$state" ] || [[ "$state" == Z* ]] || fail "the hung row $row outlived its killed check ($state)"

# ---- a hang: the row times out in case 0, the reference row still runs (beside it: --jobs 2
# starts both rows' processes at once), the check fails
start=$(date +%s)
"${spin_env[@]}" "$clattn" check --quick --device 0 --variant rowwise,reference --timeout 45 \
  --jobs 2 --json "$work/hang.json" > out 2> err &
check_pid=$!
most=0
while kill -0 "$check_pid" 2> /dev/null; do
  rows=$(pgrep -P "$check_pid" -f -- "--child-fd" | wc -l)
  [ "$rows" -gt "$most" ] && most=$rows
  sleep 0.2
done
wait "$check_pid"
status=$?
took=$(($(date +%s) - start))
[ "$most" -eq 2 ] || fail "--jobs 2 ran at most $most rows at once"
[ "$status" -eq 1 ] || fail "a hanging row: check exited $status, not 1: $(cat err)"
grep -qE "^clattn check: device 0, path fused, variant rowwise: timed out after 45 s in case 0 \(B=1 " \
  err || fail "the hang is not reported with its case: $(cat err)"
grep -qE "^0 +[^ ]+ .* +fused +rowwise +0 +0 .* timed out$" out ||
  fail "the table does not show the row timed out: $(cat out)"
grep -qE "^0 +.* +reference +reference +[0-9]+ +0 " out ||
  fail "the row after the hang did not run: $(cat out)"
grep -q "^FAILED: " out || fail "the summary does not fail: $(tail -n 1 out)"
[ "$took" -lt 150 ] || fail "the check took $took s with a 45 s limit a row"
python3 - "$work/hang.json" << 'EOF' || fail "--json does not record the timed-out case"
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["variant"]: r for r in d["results"]}
hung, ref = rows["rowwise"], rows["reference"]
assert hung["outcome"] == "timed out" and hung["timeout_seconds"] == 45.0, hung
assert hung["stopped_in_case"] == 0 and hung["stopped_in"].startswith("case 0 (B=1"), hung
assert hung["cases"][0] == {"case": 0, "result": "timed out"}, hung["cases"][0]
assert all(c["result"] == "not reached" for c in hung["cases"][1:]), hung["cases"]
assert ref["outcome"] == "completed" and len(ref["cases"]) == len(hung["cases"]), ref
assert all(c["result"] == "passed" for c in ref["cases"]), ref["cases"]
assert d["failures"] >= 1
EOF

# ---- a crash: the rowwise kernel stores to an address that is no buffer's (SIGSEGV)
cp -r "$top/cl" crash
sed -i 's|^attention_rowwise(ATTENTION_KERNEL_ARGS) {|&\n    *(__global volatile int *)(P_window->q_offset + 16) = 1;|' \
  crash/rowwise.cl
grep -q "volatile int \*)(P_window->q_offset + 16)" crash/rowwise.cl ||
  fail "the wild store no longer applies to cl/rowwise.cl's kernel: update this test"
# (under AddressSanitizer the signal is left to the process, not reported as ASan's SEGV)
CLATTN_KERNEL_DIR="$work/crash" CLATTN_CACHE_DIR="$work/spin-cache" \
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0:handle_sigbus=0:handle_sigill=0" \
  "$clattn" check --quick --device 0 --variant rowwise,reference --timeout 120 > out 2> err
status=$?
[ "$status" -eq 1 ] || fail "a crashed row: check exited $status, not 1: $(cat err)"
grep -qE "^clattn check: device 0, path fused, variant rowwise: crashed \(signal (11|7|4)\) in case 0 " \
  err || fail "the crash is not reported with its signal and case: $(cat err)"
grep -qE "^0 +.* +reference +reference +[0-9]+ +0 " out ||
  fail "the row after the crash did not run: $(cat out)"

# ---- progress on a terminal: the running case of the row, with its number
if command -v script > /dev/null; then
  CLATTN_KERNEL_DIR="$work/spin" CLATTN_CACHE_DIR="$work/spin-cache" \
    script -qec "'$clattn' check --quick --device 0 --variant rowwise --timeout 3" /dev/null \
    > tty 2>&1
  grep -qE "device 0 fused rowwise: case 0 \(1 of [0-9]+ run\)" tty ||
    fail "no progress line on a terminal: $(tr '\r' '\n' < tty | head -n 5)"
else
  echo "cli_check_hang: no script(1): the progress on a terminal is not checked"
fi

# ---- the walk over the variant table says nothing about a variant past its end
CLATTN_VERBOSE=1 "$clattn" check --quick --case 0 --device 0 --variant reference > out 2> err ||
  fail "check --variant reference: $(cat out err)"
grep -q "no variant" err && fail "check printed: $(grep "no variant" err)"
CLATTN_VERBOSE=1 "$clattn" devices --variants > out 2> err || fail "devices --variants: $(cat err)"
grep -q "no variant" err && fail "devices --variants printed: $(grep "no variant" err)"

finish cli_check_hang
