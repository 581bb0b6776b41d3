#!/usr/bin/env bash
# The test command: set up, then
#   1. the whole suite on the NUMPY reference interpreter (the default of tests/conftest.py),
#   2. the Tensor and scheduler tests again on OpenCL (PoCL here), where an OpenCL platform exists,
#   3. the CI gate on the committed captures: replay them all, run every captured kernel old vs new on the
#      default device against the numpy reference (--exec-all), fail on any change, error or mismatch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m pytest tests -q -n 2 -p no:cacheprovider "$@"
if python3 -c "from tinysched.runtime.opencl import opencl_available as a; raise SystemExit(0 if a() else 1)"; then
  TINYSCHED_DEVICE=OPENCL python3 -m pytest tests/test_tensor_ops.py tests/test_autograd.py tests/test_nn.py tests/test_optim.py \
    tests/test_schedule.py tests/test_execcheck.py -q -n 2 -p no:cacheprovider
fi
REPLAY_EXEC=all bash ci/replay-gate
