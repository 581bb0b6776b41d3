#!/usr/bin/env bash
# The main job: set up, then replay the committed captures (captures/*.db) against the current code, and run
# every captured kernel, stored vs current, on the default device against the numpy reference (--exec-all); program-level
# captures get their optimizations chosen again by the current heuristic (--reoptimize).
# Extra arguments go to `replay check` (e.g. -v, --report-md FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_BROWSER=0 bash scripts/setup.sh  # the main job opens no browser (the HTML report tests do)
# the packages are in the active venv, or in .venv that setup made: use its python and its `replay`
export PATH="${VIRTUAL_ENV:-$PWD/.venv}/bin:$PATH"
# the disk caches persist between runs: tinysched's (OpenCL binaries, rendered programs, batch-compile markers) in
# ~/.cache/tinysched, PoCL's compiled kernels in ~/.cache/pocl/kcache, or both under $CI_CACHE_DIR when a CI system keeps
# that folder. A warm run compiles nothing (bench/ci_cache.py); every entry is keyed by what made it (the code's
# fingerprint, or the kernel source and the device), so entries of other code are missed, never used.
if [ -n "${CI_CACHE_DIR:-}" ]; then export TINYSCHED_CACHE="$CI_CACHE_DIR/tinysched" POCL_CACHE_DIR="$CI_CACHE_DIR/pocl"; fi
# rendered programs come from the disk cache when this very code rendered them before (the key covers the tinysched
# sources and the code as loaded: tinysched/codegen/program_cache.py); a fresh CLI process sees every patch it has
export TINYSCHED_PROGRAM_CACHE=1
exec replay check --exec-all --reoptimize "$@"
