#!/usr/bin/env bash
# Installs everything clattn needs from Debian's packages: the OpenCL ICD loader and headers,
# PoCL (an OpenCL device on the CPU, present on every machine), CLBlast, Criterion, clinfo,
# oclgrind, OpenBLAS (the benchmarks' host baseline, loaded at run time), gnuplot (plots),
# patchelf (scripts/bundle.sh), python3-venv (the Python package's tests build and install
# its wheel in a virtual environment), and clang with its sanitizer and libFuzzer runtimes
# (libclang-rt-14-dev): tests/fuzz/run.sh builds the fuzzers with them, and its OpenCL front end
# compiles flash's subgroup branch, which no CI device runs (tests/unit/flash_subgroups_cl.sh),
# and OpenMPI (libclattn_mpi, its tests under mpirun, clattn run --distributed), and Mesa's
# OpenCL (mesa-opencl-icd: rusticl, a second implementation with its own compiler, whose llvmpipe
# device runs on the CPU with RUSTICL_ENABLE=llvmpipe; scripts/test.sh runs the tests there).
# Run as root, or as a user who may use sudo.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  libclblast-dev libcriterion-dev oclgrind
  libopenblas0 gnuplot-nox patchelf
  python3 python3-venv
  clang libclang-rt-14-dev
  openmpi-bin libopenmpi-dev
  mesa-opencl-icd
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo > /dev/null || { echo "setup.sh: run as root (or install sudo)" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update
"${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${packages[@]}"
