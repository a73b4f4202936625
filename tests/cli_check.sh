#!/usr/bin/env bash
# A harness that can fail: the test scripts' exit status is a failure whatever the number of
# failures.
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

finish cli_check
