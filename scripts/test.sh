#!/usr/bin/env bash
# The test command: set up, then
#   0. lint and type checks: `ruff check .` and `mypy` (configured in pyproject.toml), failing on any finding,
#   1. the whole suite on the NUMPY reference interpreter (the default of tests/conftest.py),
#   2. the Tensor and scheduler tests again on OpenCL (PoCL here), where an OpenCL platform exists,
#   3. the CI gate on the committed captures: replay them all, run every captured kernel old vs new on the
#      default device against the numpy reference (--exec-all), fail on any change, error or mismatch;
#   4. the rules and grouping choices the committed captures never exercise (replay coverage), printed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the packages are in the active venv, or in .venv that setup made: use its python and its `replay`
export PATH="${VIRTUAL_ENV:-$PWD/.venv}/bin:$PATH"
echo "test.sh: 0/4 lint (ruff) and types (mypy)" >&2
# both configured in pyproject.toml ([tool.ruff], [tool.mypy]), the venv's pinned versions (the dev extra); any finding
# fails the run (set -e)
"${VIRTUAL_ENV:-$PWD/.venv}/bin/ruff" check .
"${VIRTUAL_ENV:-$PWD/.venv}/bin/mypy"
echo "test.sh: 1/4 the whole suite on the NUMPY reference interpreter" >&2
python -m pytest tests -q -n 2 -p no:cacheprovider "$@"
if python -c "from tinysched.runtime.opencl import opencl_available as a; raise SystemExit(0 if a() else 1)"; then
  echo "test.sh: 2/4 the Tensor, scheduler, interpreter and exec-check tests again on OpenCL" >&2
  TINYSCHED_DEVICE=OPENCL python -m pytest tests/tinysched/test_tensor_ops.py tests/tinysched/test_autograd.py tests/tinysched/test_nn.py \
    tests/tinysched/test_optim.py tests/tinysched/test_schedule.py tests/replay/test_execcheck.py tests/tinysched/test_interpreter.py \
    tests/tinysched/test_index_range.py -q -n 2 -p no:cacheprovider
else
  echo "test.sh: 2/4 skipped: no OpenCL platform" >&2
fi
echo "test.sh: 3/4 the replay gate on the committed captures, every kernel executed (--exec-all)" >&2
REPLAY_EXEC=all bash ci/replay-gate
echo "test.sh: 4/4 rule coverage of the committed captures (the rules no capture exercises, and why)" >&2
replay coverage --uncovered-only
