#!/usr/bin/env bash
# Configures and builds clattn in ./build (or the folder given as $1), Release with debug info.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${@:2}"
cmake --build "$build" -j "$(nproc)"
