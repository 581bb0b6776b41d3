#!/usr/bin/env bash
# Installs what the project needs on a bare machine: PoCL (OpenCL on the CPU) and the Python package.
# Idempotent: quick when everything is already there. Set SETUP_REFERENCE=0 to skip torch (reference tests then skip).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import pyopencl as cl; assert cl.get_platforms()" >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    if ! dpkg -s pocl-opencl-icd >/dev/null 2>&1; then
      apt-get update -qq && apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1 >/dev/null
    fi
  else
    echo "setup: no OpenCL platform and cannot apt-get install pocl-opencl-icd: tinysched will use the NUMPY interpreter" >&2
  fi
fi
extras="dev"
if [ "${SETUP_REFERENCE:-1}" = 1 ]; then extras="dev,reference"; fi
python3 -m pip install -q --disable-pip-version-check -e ".[$extras]" 2>&1 | grep -v -E "^WARNING: (Location|Running pip)" || true
python3 -c "import tinysched, replay" || { echo "setup: the package did not install" >&2; exit 2; }
