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
# rendered programs come from the disk cache when this very code rendered them before (the key covers the tinysched
# sources and the code as loaded: tinysched/codegen/program_cache.py); a fresh CLI process sees every patch it has
export TINYSCHED_PROGRAM_CACHE=1
exec replay check --exec-all --reoptimize "$@"
