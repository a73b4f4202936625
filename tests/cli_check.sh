#!/usr/bin/env bash
# A harness that can fail: `clattn check --quick` fails on a kernel that leaves empty rows
# unwritten (O and LSE start as NaN, not zeros), and the test scripts' exit status is a
# failure whatever the number of failures.
# Usage: cli_check.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# fail, finish
source "$here/cli_common.sh"
cd "$work" || exit 1

# ---- the scripts' exit status: 256 failures are a failure (a status keeps 8 bits)
(for ((i = 0; i < 256; i++)); do fail "planted $i"; done; finish planted) > /dev/null
status=$?
[ "$status" -eq 1 ] || fail "finish after 256 failures exited $status, not 1"
(finish planted) > /dev/null || fail "finish without failures exited $?"
if grep -nE '^\s*exit "?\$\{?[A-Za-z_]+\}?"?\s*$' "$here"/*.sh "$here"/../scripts/*.sh; then
  fail "a script exits with a variable (above): a count wraps to 0 at 256; use finish"
fi

# ---- a planted bug: the cpu variant skips O's store for rows with no allowed key. The
# kernels come from a patched copy of cl/ ($CLATTN_KERNEL_DIR) built into a cache of its own.
if [ -f "$here/../cl/fused_cpu.cl" ]; then
  cp -r "$here/../cl" planted
  sed -i 's/for (int d0 = 0; d0 < P->dim_v; d0 += 16) {/for (int d0 = 0; !empty \&\& d0 < P->dim_v; d0 += 16) {/' \
    planted/fused_cpu.cl
  if cmp -s "$here/../cl/fused_cpu.cl" planted/fused_cpu.cl; then
    fail "the planted bug no longer applies to cl/fused_cpu.cl's store_rows: update this test"
  else
    mkdir planted-cache
    CLATTN_KERNEL_DIR="$work/planted" CLATTN_CACHE_DIR="$work/planted-cache" \
      "$clattn" check --quick --device 0 --variant cpu > out 2> err
    status=$?
    [ "$status" -eq 1 ] ||
      fail "check --quick passed a kernel that skips empty rows (exit $status): $(tail -n 2 out)"
    grep -qE "^  O element [0-9]+: got nan, reference 0 " err ||
      fail "the planted bug's failure does not name an unwritten O: $(head -n 4 err)"
    grep -q "all passed" out && fail "check said all passed on the planted bug: $(tail -n 1 out)"
  fi
  "$clattn" check --quick --device 0 --variant cpu > out 2>&1 ||
    fail "check --quick --variant cpu fails with the kernels as they are: $(tail -n 5 out)"
else
  echo "cli_check: the source tree's cl/ is not at $here/../cl: the planted bug is not checked"
fi

finish cli_check
