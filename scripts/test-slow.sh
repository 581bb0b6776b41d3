#!/usr/bin/env bash
# The slow tests: the ones marked `slow` (pytest -m slow; pyproject.toml's addopts deselects them everywhere else):
# buffers past 2^31 elements on the numpy interpreter and on OpenCL, the full-size models against their references
# (torch, transformers, sentence-transformers), the proofs over the whole committed baseline. `.ci/run` runs them after
# the test command (scripts/test.sh); ci/github/slow.yml runs them nightly.
#
# Set up as scripts/test.sh does (no browser: no slow test opens one), then pytest with 2 workers, or 1 where less than
# 12 GiB of memory is available: a worker peaks at about 3.5 GB (a 2.7 GB int8 buffer, SmolLM2 with its reference).
# Below 4 GiB they are not run, and the script says so (exit 0; exit 2 when REQUIRE_SLOW=1, the default under CI=true:
# a CI stage that silently ran nothing would pass).
# A test whose model weights or reference package is missing skips and says why (-rs prints the reasons).
# Extra arguments go to pytest (e.g. -k smollm2, --junitxml FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_BROWSER=0 bash scripts/setup.sh
# the packages are in the active venv, or in .venv that setup made: use its python
export PATH="${VIRTUAL_ENV:-$PWD/.venv}/bin:$PATH"
avail_mib=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo 2>/dev/null || echo 0)
avail_mib=${avail_mib:-0}
if [ "$avail_mib" -lt 4096 ]; then
  echo "test-slow.sh: not run: the slow tests need about 4 GiB of free memory (a 2.7 GB buffer, a full-size model and its" \
       "reference in one process); ${avail_mib} MiB available" >&2
  if [ "${REQUIRE_SLOW:-$([ "${CI:-}" = true ] && echo 1 || echo 0)}" = 1 ]; then exit 2; fi
  exit 0
fi
workers=2
if [ "$avail_mib" -lt 12288 ]; then workers=1; fi
echo "test-slow.sh: 1/1 the slow tests (pytest -m slow) with $workers worker(s), ${avail_mib} MiB of memory available" >&2
start=$SECONDS
python -m pytest tests -m slow -q -n "$workers" -p no:cacheprovider -rs --durations=12 "$@"
echo "test-slow.sh: the slow tests passed in $((SECONDS - start)) s" >&2
