#!/usr/bin/env bash
# Verified dispatch (docs/verification.md), with real processes and a cache folder of its own:
# a deliberately wrong lanes kernel (a copy of cl/ in $CLATTN_KERNEL_DIR) fails `clattn check`,
# which records the verdict; `auto` then runs another variant and says why (clattn run's line,
# CLATTN_VERBOSE), require-verified refuses, strict mode makes the fallback an error; a lanes
# kernel that spins is recorded as timed out and auto never picks it; devices --variants shows
# the verdicts; a report merges into another store, and entries of another driver, library
# version or kernel sources are never taken.
# Usage: cli_verify.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
# fail, finish
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
quick_cases=$("$clattn" check --list --quick | grep -cE '^ *[0-9]+ ') # the quick sweep's size
cd "$work" || exit 1
unset CLATTN_VERIFY CLATTN_STRICT CLATTN_KERNEL

if [ ! -f "$top/cl/lanes.cl" ]; then
  echo "cli_verify: the source tree's cl/ is not at $top/cl: skipped"
  exit 0
fi
if ! "$clattn" devices --variants 2> /dev/null | grep -qE '^    lanes +yes +yes '; then
  echo "cli_verify: auto does not pick lanes on device 0 (not a CPU device like PoCL's): skipped"
  exit 0
fi

# ---- the wrong kernel: lanes leaves O unwritten for rows with no allowed key
cp -r "$top/cl" wrong
sed -i 's/if (row\[g \* 16 + l\] >= 0)$/if (row[g * 16 + l] >= 0 \&\& scale[g * 16 + l] != 0.0f)/' \
  wrong/lanes.cl
cmp -s "$top/cl/lanes.cl" wrong/lanes.cl && fail "the planted bug no longer applies to cl/lanes.cl"
mkdir -m 700 cache
export CLATTN_CACHE_DIR="$work/cache"
wrong=(env CLATTN_KERNEL_DIR="$work/wrong")

# check records the failure (and --no-record records nothing)
"${wrong[@]}" "$clattn" check --quick --device 0 --variant lanes --no-record > out 2>&1
[ -e cache/verdicts.json ] && fail "--no-record wrote $(cat cache/verdicts.json)"
"${wrong[@]}" "$clattn" check --quick --device 0 --variant lanes --report "$work/report.json" \
  > out 2> err
[ $? -eq 1 ] || fail "check passed the wrong kernel: $(tail -n 2 out)"
grep -q "^verdicts: 1 recorded in $work/cache/verdicts.json" out ||
  fail "check does not say it recorded the verdict: $(cat out)"
grep -qE '"variant": "lanes", "verdict": "failed", "sweep": "quick \('"$quick_cases"' cases\)", "date": "20[0-9-]+T[0-9:]+Z", "detail": "first failing: case [0-9]+ \(' \
  cache/verdicts.json || fail "the store lacks lanes' failure: $(cat cache/verdicts.json)"
cmp -s <(grep '"variant"' cache/verdicts.json) <(grep '"variant"' report.json) ||
  fail "--report differs from what was recorded: $(cat report.json)"

# the inputs of a case with empty rows (causal, Nq > Nk)
"$clattn" check --quick --list | grep "^3  .*Nq=203 Nk=1 .*causal" > /dev/null ||
  fail "case 3 of the quick sweep is no longer causal with Nq > Nk: $("$clattn" check --quick --list | sed -n 4p)"
"$clattn" check --quick --case 3 --device 0 --path reference --dump inputs --no-record > /dev/null
run=(--q inputs/case-3/q.npy --k inputs/case-3/k.npy --v inputs/case-3/v.npy --causal --device 0)

# auto passes lanes over, and says so (clattn run's line, the log)
CLATTN_VERBOSE=1 "${wrong[@]}" "$clattn" run "${run[@]}" --out o.npy > out 2> err ||
  fail "auto with lanes failed: $(cat err)"
grep -qE "^auto ran [a-z]+, not a variant it prefers: lanes: failed clattn check on 20" out ||
  fail "clattn run does not say why lanes did not run: $(cat out)"
grep -q "fused-lanes" out && fail "auto ran the failed lanes: $(cat out)"
grep -qE "^clattn: auto ran [a-z]+ \((passed|none)\), not a variant it prefers: lanes: failed" err ||
  fail "CLATTN_VERBOSE=1 does not say why lanes did not run: $(grep auto err)"
CLATTN_VERIFY=trust "${wrong[@]}" "$clattn" run "${run[@]}" --out o.npy > out 2>&1
grep -q "fused-lanes" out || fail "CLATTN_VERIFY=trust does not run lanes as before: $(cat out)"

# require-verified refuses (no fused variant is verified), saying how to verify
expect 1 "CLATTN_VERIFY=require-verified: no variant that serves this call has passed clattn check" -- \
  env CLATTN_VERIFY=require-verified "${wrong[@]}" "$clattn" run "${run[@]}" --path fused --out o.npy
grep -qF "verify with \`clattn check --quick --device 0\`" stderr ||
  fail "require-verified does not say how to verify: $(cat stderr)"
[ -e o2.npy ] && fail "a refused call wrote its output"
# strict mode makes the fallback an error naming the reason
expect 1 "strict mode (CLATTN_STRICT): auto would fall back: lanes: failed clattn check" -- \
  env CLATTN_STRICT=1 "${wrong[@]}" "$clattn" run "${run[@]}" --out o.npy

# devices --variants shows the verdict, and that auto passes lanes over
CLATTN_KERNEL_DIR="$work/wrong" "$clattn" devices --variants > out
grep -qE "^    lanes +yes +no +.*auto passes it over: failed clattn check on 20" out ||
  fail "devices --variants does not show that auto passes lanes over: $(grep -A1 ' lanes ' out)"
grep -qE "^ +verdict: failed on 20[0-9-]+T[0-9:]+Z \(quick \($quick_cases cases\)\): first failing: case" out ||
  fail "devices --variants does not show the verdict: $(grep -A1 ' lanes ' out)"
# with the real kernels (other sources) the verdict does not hold
"$clattn" devices --variants > out
grep -A1 -E '^    lanes ' out | grep -q "verdict: none" ||
  fail "a verdict on other kernel sources was taken: $(grep -A1 ' lanes ' out)"

# ---- a report merges into another machine's store; other library versions are left out
mkdir -m 700 other
sed 's/"library": "[^"]*"/"library": "0.0.1"/' report.json > old-report.json
CLATTN_CACHE_DIR="$work/other" "$clattn" devices --verdicts old-report.json > out ||
  fail "devices --verdicts: $(cat out)"
grep -q "merged 0 from old-report.json .* 1 left out" out || fail "an old library's verdict: $(cat out)"
CLATTN_CACHE_DIR="$work/other" "$clattn" devices --verdicts report.json > out ||
  fail "devices --verdicts: $(cat out)"
grep -q "merged 0 from report.json .* 1 left out" out ||
  fail "a verdict on other kernel sources (the wrong lanes) was merged: $(head -n 1 out)"
CLATTN_CACHE_DIR="$work/other" "${wrong[@]}" "$clattn" devices --verdicts report.json > out ||
  fail "devices --verdicts: $(cat out)"
grep -q "^verdicts: merged 1 from report.json into $work/other/verdicts.json; 0 left out" out ||
  fail "the report was not merged: $(head -n 1 out)"
CLATTN_CACHE_DIR="$work/other" CLATTN_KERNEL_DIR="$work/wrong" "$clattn" devices --variants |
  grep -qE "^ +verdict: failed on 20" || fail "the merged verdict is not shown"
expect 1 "--verdicts $work/absent.json" -- "$clattn" devices --verdicts "$work/absent.json"
# a file that is not a report is refused, not merged as nothing; a store that a write would
# rewrite from part of its entries is left as it is
echo "not json" > garbage.txt
expect 1 "not a verdicts report (clattn check --report): malformed, or more than 4096 entries, \
near byte 0" -- "$clattn" devices --verdicts garbage.txt
echo '{"foo": [1, 2]}' > other.json # well-formed JSON, another kind of file
expect 1 'other.json is not a verdicts report (clattn check --report): it has no "clattn_verdicts"' \
  -- "$clattn" devices --verdicts other.json
cp other/verdicts.json stored.json
sed -i '0,/"device": "[^"]*"/s//"device": {1: 2}/' other/verdicts.json
cp other/verdicts.json damaged.json
expect 1 "verdicts.json is malformed, or holds more than 4096 entries, near byte" -- \
  env CLATTN_CACHE_DIR="$work/other" "${wrong[@]:1}" "$clattn" devices --verdicts report.json
cmp -s other/verdicts.json damaged.json || fail "a malformed store was rewritten"
cp stored.json other/verdicts.json

# ---- entries for another driver, library version or kernel sources are never taken
python3 - cache/verdicts.json << 'EOF' || fail "cannot write the mismatched entries"
import json, sys
path = sys.argv[1]
store = json.load(open(path))
lanes = [e for e in store["entries"] if e["variant"] == "lanes"][0]
store["entries"] = []
for key, value in (("driver", "0.0-other"), ("library", "0.0.1"), ("sources", "0" * 16)):
    e = dict(lanes, **{key: value})
    store["entries"].append(e)
json.dump(store, open(path, "w"))
EOF
"${wrong[@]}" "$clattn" run "${run[@]}" --out o.npy > out 2>&1 || fail "run: $(cat out)"
grep -q "fused-lanes" out || fail "a verdict of another driver, library or sources was taken: $(cat out)"

# ---- first use: CLATTN_VERIFY=first-use runs clattn check on the variants auto would try,
# in a child process that records their verdicts; a later process finds them and runs none
mkdir -m 700 first
first=(env CLATTN_CACHE_DIR="$work/first" CLATTN_VERIFY=first-use CLATTN_PROGRAM="$clattn"
  CLATTN_VERBOSE=1)
"${first[@]}" "$clattn" run "${run[@]}" --out o.npy > out 2> err || fail "first use: $(cat err)"
grep -qE "^clattn: first use on .*: verifying [a-z,]*lanes[a-z,]* with $clattn check --quick" err ||
  fail "first use did not verify lanes: $(grep -i "first use" err)"
grep -qF "\"variant\": \"lanes\", \"verdict\": \"passed\", \"sweep\": \"quick ($quick_cases cases)\"" \
  first/verdicts.json ||
  fail "first use recorded no pass for lanes: $(cat first/verdicts.json)"
grep -q "fused-lanes" out || fail "after first use, auto did not run the verified lanes: $(cat out)"
"${first[@]}" "$clattn" run "${run[@]}" --out o.npy > out 2> err || fail "first use: $(cat err)"
grep -q "first use on" err && fail "a second process verified again: $(grep "first use" err)"

# ---- a lanes kernel that spins: the verdict says timed out, and auto never picks it
cp -r "$top/cl" spin
sed -i 's|attention_lanes(ATTENTION_KERNEL_ARGS PARTIALS_ARG) {|&\n    for (volatile int spin = 1; spin;) {\n    }|' spin/lanes.cl
grep -q "volatile int spin" spin/lanes.cl || fail "the spin no longer applies to cl/lanes.cl"
spin=(env CLATTN_KERNEL_DIR="$work/spin")
"${spin[@]}" "$clattn" check --quick --device 0 --variant lanes --timeout 10 > out 2> err
grep -qE '"variant": "lanes", "verdict": "timed out", .*"detail": "after 10 s in case 0 \(' \
  cache/verdicts.json || fail "the store lacks the timeout: $(cat cache/verdicts.json)"
timeout 300 "${spin[@]}" "$clattn" run "${run[@]}" --out o.npy > out 2>&1
status=$?
[ "$status" -eq 0 ] || fail "auto after a timed-out lanes exited $status: $(tail -n 3 out)"
grep -qE "^auto ran [a-z]+, not a variant it prefers: lanes: timed out clattn check on 20" out ||
  fail "clattn run does not say lanes timed out: $(cat out)"

finish cli_verify
